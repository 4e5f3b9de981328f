//! Patches: JSON merge patch (RFC 7386) and JSON patch (RFC 6902) through the `json-patch`
//! crate, and strategic merge patch for built-in kinds, hand-written because no Rust crate
//! implements it.
//!
//! Strategic merge patch follows `k8s.io/apimachinery/pkg/util/strategicpatch` for the list
//! merge keys that matter (see [`builtin_list_strategy`]): containers, init/ephemeral
//! containers, volumes, volumeMounts, volumeDevices, env, container ports, service ports,
//! imagePullSecrets, hostAliases, conditions, node addresses, podIPs/hostIPs, resourceClaims,
//! schedulingGates, topologySpreadConstraints, ServiceAccount secrets, and
//! `metadata.finalizers` (merged as a set) / `metadata.ownerReferences` (by uid). Every other
//! list is replaced. Directives: `$patch: replace|delete|merge` on maps and list items,
//! `$retainKeys`, `$deleteFromPrimitiveList/<field>`, `$setElementOrder/<field>`; `null`
//! deletes a key.

use serde_json::{Map, Value};

/// How a list merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListStrategy {
    /// The patch's list replaces the original.
    Replace,
    /// Objects merged by this key.
    MergeKey(&'static str),
    /// Scalars merged as a set.
    MergePrimitive,
}

/// The strategic-merge strategy of the list at `path` (field names from the object root, list
/// indices left out) in an object of `kind`.
pub fn builtin_list_strategy(kind: &str, path: &[String]) -> ListStrategy {
    use ListStrategy::*;
    let last = path.last().map(String::as_str).unwrap_or("");
    let parent = if path.len() >= 2 {
        path[path.len() - 2].as_str()
    } else {
        ""
    };
    let in_container = matches!(
        parent,
        "containers" | "initContainers" | "ephemeralContainers"
    );
    match last {
        "finalizers" if parent == "metadata" => MergePrimitive,
        "ownerReferences" if parent == "metadata" => MergeKey("uid"),
        "containers" | "initContainers" | "ephemeralContainers" => MergeKey("name"),
        "volumes" if parent == "spec" => MergeKey("name"),
        "volumeMounts" => MergeKey("mountPath"),
        "volumeDevices" => MergeKey("devicePath"),
        "env" if in_container => MergeKey("name"),
        "ports" if in_container => MergeKey("containerPort"),
        "ports" if kind == "Service" && path.len() == 2 => MergeKey("port"),
        "imagePullSecrets" => MergeKey("name"),
        "hostAliases" => MergeKey("ip"),
        "conditions" => MergeKey("type"),
        "addresses" if kind == "Node" => MergeKey("type"),
        "podIPs" | "hostIPs" => MergeKey("ip"),
        "resourceClaims" | "schedulingGates" if parent == "spec" => MergeKey("name"),
        "topologySpreadConstraints" => MergeKey("topologyKey"),
        "secrets" if kind == "ServiceAccount" => MergeKey("name"),
        _ => Replace,
    }
}

/// Apply a JSON merge patch.
pub fn merge_patch(doc: &mut Value, patch: &Value) {
    json_patch::merge(doc, patch);
}

/// Apply a JSON patch.
pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let p: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| format!("invalid JSON patch: {e}"))?;
    json_patch::patch(doc, &p).map_err(|e| e.to_string())
}

/// Apply a strategic merge patch to an object of `kind`.
pub fn strategic_merge_patch(doc: &mut Value, patch: &Value, kind: &str) -> Result<(), String> {
    let Value::Object(p) = patch else {
        return Err("strategic merge patch must be a JSON object".into());
    };
    if !doc.is_object() {
        *doc = Value::Object(Map::new());
    }
    let mut path = Vec::new();
    merge_map(doc.as_object_mut().expect("object"), p, &mut path, kind)
}

fn is_directive(k: &str) -> bool {
    k.starts_with('$')
}

/// Remove directives from a value being inserted whole.
fn strip(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !is_directive(k))
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|i| {
                    !matches!(
                        i.get("$patch").and_then(Value::as_str),
                        Some("delete" | "replace")
                    )
                })
                .map(strip)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn merge_map(
    orig: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    path: &mut Vec<String>,
    kind: &str,
) -> Result<(), String> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            if let Value::Object(m) = strip(&Value::Object(patch.clone())) {
                *orig = m;
            }
            return Ok(());
        }
        Some("delete") => {
            orig.clear();
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(format!("unknown patch type: {other}")),
    }
    if let Some(keys) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        orig.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/")
            && let (Some(Value::Array(list)), Some(del)) = (orig.get_mut(field), v.as_array())
        {
            list.retain(|x| !del.contains(x));
        }
    }
    for (k, pv) in patch {
        if is_directive(k) {
            continue;
        }
        path.push(k.clone());
        if pv.is_null() || pv.get("$patch").and_then(Value::as_str) == Some("delete") {
            orig.remove(k);
        } else {
            match orig.get_mut(k) {
                Some(Value::Object(om)) if pv.is_object() => {
                    merge_map(om, pv.as_object().expect("object"), path, kind)?;
                }
                Some(Value::Array(oa)) if pv.is_array() => {
                    merge_list(oa, pv.as_array().expect("array"), path, kind)?;
                }
                _ => {
                    orig.insert(k.clone(), strip(pv));
                }
            }
        }
        path.pop();
    }
    // `$setElementOrder/<field>`: order the merged list as the patch author saw it.
    for (k, order) in patch {
        let Some(field) = k.strip_prefix("$setElementOrder/") else {
            continue;
        };
        let Some(order) = order.as_array() else {
            continue;
        };
        path.push(field.to_string());
        let strategy = builtin_list_strategy(kind, path);
        path.pop();
        if let Some(Value::Array(list)) = orig.get_mut(field) {
            let pos = |item: &Value| -> usize {
                order
                    .iter()
                    .position(|o| match strategy {
                        ListStrategy::MergeKey(key) => {
                            o.get(key).is_some() && o.get(key) == item.get(key)
                        }
                        _ => o == item,
                    })
                    .unwrap_or(usize::MAX)
            };
            list.sort_by_key(pos);
        }
    }
    Ok(())
}

fn merge_list(
    orig: &mut Vec<Value>,
    patch: &[Value],
    path: &mut Vec<String>,
    kind: &str,
) -> Result<(), String> {
    let replace = patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    match builtin_list_strategy(kind, path) {
        _ if replace => {
            *orig = patch
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .map(strip)
                .collect();
        }
        ListStrategy::Replace => {
            *orig = patch.iter().map(strip).collect();
        }
        ListStrategy::MergePrimitive => {
            for v in patch {
                if !orig.contains(v) {
                    orig.push(v.clone());
                }
            }
        }
        ListStrategy::MergeKey(key) => {
            for item in patch {
                let Some(pm) = item.as_object() else {
                    return Err(format!(
                        "unable to merge list {}: items must be objects with merge key {key}",
                        path.join(".")
                    ));
                };
                let Some(kv) = pm.get(key) else {
                    return Err(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    ));
                };
                let found = orig.iter().position(|o| o.get(key) == Some(kv));
                if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                    if let Some(i) = found {
                        orig.remove(i);
                    }
                    continue;
                }
                match found {
                    Some(i) => {
                        if let Value::Object(om) = &mut orig[i] {
                            merge_map(om, pm, path, kind)?;
                        }
                    }
                    None => orig.push(strip(item)),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_of_containers_and_env() {
        let mut pod = json!({"metadata": {"finalizers": ["a"]}, "spec": {"containers": [
            {"name": "a", "image": "x:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "b", "image": "y:1"}]}});
        let patch = json!({"metadata": {"finalizers": ["b"]}, "spec": {"containers": [
            {"name": "a", "image": "x:2", "env": [{"name": "B", "value": "2"}]},
            {"name": "b", "$patch": "delete"},
            {"name": "c", "image": "z:1"}]}});
        strategic_merge_patch(&mut pod, &patch, "Pod").unwrap();
        assert_eq!(pod["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(
            pod["spec"]["containers"],
            json!([
                {"name": "a", "image": "x:2", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                {"name": "c", "image": "z:1"}
            ])
        );
    }

    #[test]
    fn strategic_merge_directives() {
        let mut obj = json!({"spec": {"tolerations": [{"key": "a"}], "nodeSelector": {"x": "1", "y": "2"},
            "containers": [{"name": "a", "args": ["1", "2"]}, {"name": "b"}]}, "status": {"conditions": [
            {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}});
        let patch = json!({"spec": {"tolerations": [{"key": "b"}], "nodeSelector": {"$patch": "replace", "z": "3"},
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
            "containers": [{"name": "a", "$deleteFromPrimitiveList/args": ["1"]}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        strategic_merge_patch(&mut obj, &patch, "Pod").unwrap();
        assert_eq!(obj["spec"]["tolerations"], json!([{"key": "b"}]));
        assert_eq!(obj["spec"]["nodeSelector"], json!({"z": "3"}));
        assert_eq!(
            obj["spec"]["containers"],
            json!([{"name": "b"}, {"name": "a", "args": ["2"]}])
        );
        assert_eq!(
            obj["status"]["conditions"][0],
            json!({"type": "Ready", "status": "True"})
        );
        assert_eq!(obj["status"]["conditions"][1]["type"], "PodScheduled");
    }
}
