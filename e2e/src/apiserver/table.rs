//! `meta.k8s.io/v1` Table responses (what `kubectl get` asks for): CRD printer columns
//! evaluated with the JSONPath subset CRDs use, and the usual columns of built-in kinds.

use serde_json::{Value, json};

use super::resources::{Builtin, ResourceType};

/// Kubernetes' `duration.HumanDuration`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn age(ts: &Value) -> Value {
    let Some(t) = ts.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()) else {
        return json!("<unknown>");
    };
    let secs = (jiff::Timestamp::now() - t).get_seconds();
    json!(human_duration(secs))
}

enum Step {
    Field(String),
    Index(usize),
    All,
    Filter(Vec<String>, String),
}

fn parse_path(p: &str) -> Option<Vec<Step>> {
    let p = p.trim().trim_start_matches('{').trim_end_matches('}');
    let p = p.strip_prefix('$').unwrap_or(p);
    let mut steps = Vec::new();
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'.' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'.' && b[j] != b'[' {
                    j += 1;
                }
                if j > start {
                    steps.push(Step::Field(p[start..j].to_string()));
                }
                i = j;
            }
            b'[' => {
                let end = p[i..].find(']').map(|e| i + e)?;
                let inner = p[i + 1..end].trim();
                if inner == "*" {
                    steps.push(Step::All);
                } else if let Ok(n) = inner.parse::<usize>() {
                    steps.push(Step::Index(n));
                } else if let Some(f) = inner.strip_prefix("?(@.") {
                    // [?(@.a.b=="v")]
                    let f = f.strip_suffix(')')?;
                    let (lhs, rhs) = f.split_once("==")?;
                    let rhs = rhs.trim().trim_matches(|c| c == '"' || c == '\'');
                    steps.push(Step::Filter(
                        lhs.trim().split('.').map(str::to_string).collect(),
                        rhs.to_string(),
                    ));
                } else {
                    steps.push(Step::Field(
                        inner.trim_matches(|c| c == '\'' || c == '"').to_string(),
                    ));
                }
                i = end + 1;
            }
            _ => {
                let start = i;
                let mut j = i;
                while j < b.len() && b[j] != b'.' && b[j] != b'[' {
                    j += 1;
                }
                steps.push(Step::Field(p[start..j].to_string()));
                i = j;
            }
        }
    }
    Some(steps)
}

/// Evaluate a simple JSONPath (`.status.x`, `.a[0].b`, `.a[*].b`, `.a[?(@.type=="Ready")].status`).
pub fn jsonpath<'a>(v: &'a Value, path: &str) -> Vec<&'a Value> {
    let Some(steps) = parse_path(path) else {
        return Vec::new();
    };
    let mut cur = vec![v];
    for s in &steps {
        let mut next = Vec::new();
        for c in cur {
            match s {
                Step::Field(f) => {
                    if let Some(x) = c.get(f) {
                        next.push(x);
                    }
                }
                Step::Index(n) => {
                    if let Some(x) = c.get(*n) {
                        next.push(x);
                    }
                }
                Step::All => {
                    if let Some(a) = c.as_array() {
                        next.extend(a.iter());
                    }
                }
                Step::Filter(lhs, rhs) => {
                    if let Some(a) = c.as_array() {
                        for it in a {
                            let mut x = it;
                            let mut ok = true;
                            for f in lhs {
                                match x.get(f) {
                                    Some(y) => x = y,
                                    None => {
                                        ok = false;
                                        break;
                                    }
                                }
                            }
                            let matches = ok
                                && match x {
                                    Value::String(s) => s == rhs,
                                    other => {
                                        *other
                                            == serde_json::from_str::<Value>(rhs)
                                                .unwrap_or(Value::Null)
                                    }
                                };
                            if matches {
                                next.push(it);
                            }
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur.into_iter().filter(|x| !x.is_null()).collect()
}

fn col(name: &str, typ: &str, format: &str, priority: i64, desc: &str) -> Value {
    json!({"name": name, "type": typ, "format": format, "description": desc, "priority": priority})
}

fn name_col() -> Value {
    col(
        "Name",
        "string",
        "name",
        0,
        "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    )
}

fn age_col() -> Value {
    col(
        "Age",
        "string",
        "",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.",
    )
}

/// Column definitions of a kind.
pub fn columns(rt: &ResourceType) -> Vec<Value> {
    if let Some(crd) = &rt.crd {
        let mut cols = vec![name_col()];
        if crd.columns.is_empty() {
            cols.push(age_col());
        }
        for c in &crd.columns {
            let typ = if c.typ == "date" {
                "date"
            } else {
                c.typ.as_str()
            };
            cols.push(col(&c.name, typ, &c.format, c.priority, &c.description));
        }
        return cols;
    }
    let s = |n: &str, p: i64| col(n, "string", "", p, "");
    match (rt.builtin, rt.group.as_str(), rt.kind.as_str()) {
        (Builtin::Pod, ..) => vec![
            name_col(),
            s("Ready", 0),
            s("Status", 0),
            s("Restarts", 0),
            age_col(),
            s("IP", 1),
            s("Node", 1),
            s("Nominated Node", 1),
            s("Readiness Gates", 1),
        ],
        (Builtin::Node, ..) => vec![
            name_col(),
            s("Status", 0),
            s("Roles", 0),
            age_col(),
            s("Version", 0),
            s("Internal-IP", 1),
            s("External-IP", 1),
            s("OS-Image", 1),
            s("Kernel-Version", 1),
            s("Container-Runtime", 1),
        ],
        (Builtin::Namespace, ..) => vec![name_col(), s("Status", 0), age_col()],
        (Builtin::Service, ..) => vec![
            name_col(),
            s("Type", 0),
            s("Cluster-IP", 0),
            s("External-IP", 0),
            s("Port(s)", 0),
            age_col(),
            s("Selector", 1),
        ],
        (Builtin::Secret, ..) => vec![
            name_col(),
            s("Type", 0),
            col("Data", "integer", "", 0, ""),
            age_col(),
        ],
        (Builtin::Event | Builtin::EventV1, ..) => vec![
            s("Last Seen", 0),
            s("Type", 0),
            s("Reason", 0),
            s("Object", 0),
            s("Message", 0),
            col("Name", "string", "name", 1, ""),
        ],
        (Builtin::Crd, ..) => vec![name_col(), col("Created At", "date", "", 0, "")],
        (_, "", "ConfigMap") => vec![name_col(), col("Data", "integer", "", 0, ""), age_col()],
        (_, "coordination.k8s.io", "Lease") => vec![name_col(), s("Holder", 0), age_col()],
        (_, "apps", "Deployment") => vec![
            name_col(),
            s("Ready", 0),
            col("Up-to-date", "integer", "", 0, ""),
            col("Available", "integer", "", 0, ""),
            age_col(),
        ],
        (_, "apps", "DaemonSet") => vec![
            name_col(),
            col("Desired", "integer", "", 0, ""),
            col("Current", "integer", "", 0, ""),
            col("Ready", "integer", "", 0, ""),
            col("Up-to-date", "integer", "", 0, ""),
            col("Available", "integer", "", 0, ""),
            s("Node Selector", 0),
            age_col(),
        ],
        (_, "scheduling.k8s.io", "PriorityClass") => vec![
            name_col(),
            col("Value", "integer", "", 0, ""),
            s("Global-Default", 0),
            age_col(),
        ],
        _ => vec![name_col(), age_col()],
    }
}

fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn or_none(s: String) -> Value {
    if s.is_empty() {
        json!("<none>")
    } else {
        json!(s)
    }
}

fn cell_for(typ: &str, v: &Value) -> Value {
    match typ {
        "date" => age(v),
        "integer" => v
            .as_i64()
            .map(Value::from)
            .unwrap_or_else(|| json!(str_of(v))),
        "number" => v
            .as_f64()
            .map(Value::from)
            .unwrap_or_else(|| json!(str_of(v))),
        "boolean" => v
            .as_bool()
            .map(Value::from)
            .unwrap_or_else(|| json!(str_of(v))),
        _ => match v {
            Value::String(_) | Value::Number(_) | Value::Bool(_) => json!(str_of(v)),
            other => json!(other.to_string()),
        },
    }
}

fn pod_status(pod: &Value) -> (String, String, i64) {
    let st = &pod["status"];
    let total = pod["spec"]["containers"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    let mut reason = st["reason"]
        .as_str()
        .or(st["phase"].as_str())
        .unwrap_or("")
        .to_string();
    let mut ready = 0;
    let mut restarts = 0;
    if let Some(cs) = st["containerStatuses"].as_array() {
        for c in cs.iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            if let Some(r) = c["state"]["waiting"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                reason = r.to_string();
            } else if let Some(r) = c["state"]["terminated"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                reason = r.to_string();
            } else if c["state"]["terminated"].is_object() {
                let code = c["state"]["terminated"]["exitCode"].as_i64().unwrap_or(0);
                reason = format!("ExitCode:{code}");
            } else if c["ready"] == true && c["state"]["running"].is_object() {
                ready += 1;
            }
        }
    }
    if pod["metadata"]["deletionTimestamp"].is_string() {
        reason = if st["reason"] == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    (format!("{ready}/{total}"), reason, restarts)
}

fn node_status(node: &Value) -> String {
    let conds = node["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = conds.iter().find(|c| c["type"] == "Ready");
    let mut s = match ready.map(|c| c["status"].as_str().unwrap_or("")) {
        Some("True") => "Ready".to_string(),
        Some("False") => "NotReady".to_string(),
        _ => "Unknown".to_string(),
    };
    if node["spec"]["unschedulable"] == true {
        s.push_str(",SchedulingDisabled");
    }
    s
}

fn node_roles(node: &Value) -> String {
    let mut roles: Vec<String> = node["metadata"]["labels"]
        .as_object()
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| {
                    k.strip_prefix("node-role.kubernetes.io/")
                        .map(str::to_string)
                        .or_else(|| (k == "kubernetes.io/role").then(|| str_of(v)))
                })
                .filter(|r| !r.is_empty())
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    roles.join(",")
}

fn address(node: &Value, typ: &str) -> String {
    node["status"]["addresses"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["type"] == typ))
        .map(|x| str_of(&x["address"]))
        .unwrap_or_default()
}

/// The cells of one object.
pub fn cells(rt: &ResourceType, obj: &Value) -> Vec<Value> {
    let name = json!(str_of(&obj["metadata"]["name"]));
    let created = &obj["metadata"]["creationTimestamp"];
    if let Some(crd) = &rt.crd {
        let mut out = vec![name];
        if crd.columns.is_empty() {
            out.push(age(created));
        }
        for c in &crd.columns {
            let vals = jsonpath(obj, &c.json_path);
            out.push(match vals.as_slice() {
                [] => Value::Null,
                [one] => cell_for(&c.typ, one),
                many => json!(many.iter().map(|v| str_of(v)).collect::<Vec<_>>().join(",")),
            });
        }
        return out;
    }
    match (rt.builtin, rt.group.as_str(), rt.kind.as_str()) {
        (Builtin::Pod, ..) => {
            let (ready, status, restarts) = pod_status(obj);
            let gates = obj["spec"]["readinessGates"]
                .as_array()
                .map(Vec::len)
                .unwrap_or(0);
            vec![
                name,
                json!(ready),
                json!(status),
                json!(restarts.to_string()),
                age(created),
                or_none(str_of(&obj["status"]["podIP"])),
                or_none(str_of(&obj["spec"]["nodeName"])),
                or_none(str_of(&obj["status"]["nominatedNodeName"])),
                json!(if gates == 0 {
                    "<none>".to_string()
                } else {
                    format!("0/{gates}")
                }),
            ]
        }
        (Builtin::Node, ..) => {
            let info = &obj["status"]["nodeInfo"];
            vec![
                name,
                json!(node_status(obj)),
                or_none(node_roles(obj)),
                age(created),
                json!(str_of(&info["kubeletVersion"])),
                or_none(address(obj, "InternalIP")),
                or_none(address(obj, "ExternalIP")),
                or_none(str_of(&info["osImage"])),
                or_none(str_of(&info["kernelVersion"])),
                or_none(str_of(&info["containerRuntimeVersion"])),
            ]
        }
        (Builtin::Namespace, ..) => {
            vec![name, json!(str_of(&obj["status"]["phase"])), age(created)]
        }
        (Builtin::Service, ..) => {
            let spec = &obj["spec"];
            let ports: Vec<String> = spec["ports"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            format!(
                                "{}/{}",
                                str_of(&p["port"]),
                                p["protocol"].as_str().unwrap_or("TCP")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let sel: Vec<String> = spec["selector"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", str_of(v)))
                        .collect()
                })
                .unwrap_or_default();
            vec![
                name,
                json!(str_of(&spec["type"])),
                or_none(str_of(&spec["clusterIP"])),
                json!("<none>"),
                or_none(ports.join(",")),
                age(created),
                or_none(sel.join(",")),
            ]
        }
        (Builtin::Secret, ..) => {
            let n = obj["data"].as_object().map(|m| m.len()).unwrap_or(0);
            vec![name, json!(str_of(&obj["type"])), json!(n), age(created)]
        }
        (Builtin::Event | Builtin::EventV1, ..) => {
            let io = if obj["involvedObject"].is_object() {
                &obj["involvedObject"]
            } else {
                &obj["regarding"]
            };
            let last = [
                &obj["lastTimestamp"],
                &obj["deprecatedLastTimestamp"],
                &obj["eventTime"],
                created,
            ]
            .into_iter()
            .find(|t| t.is_string())
            .unwrap_or(&Value::Null);
            let msg = if obj["message"].is_string() {
                &obj["message"]
            } else {
                &obj["note"]
            };
            vec![
                age(last),
                json!(str_of(&obj["type"])),
                json!(str_of(&obj["reason"])),
                json!(format!(
                    "{}/{}",
                    str_of(&io["kind"]).to_lowercase(),
                    str_of(&io["name"])
                )),
                json!(str_of(msg)),
                name,
            ]
        }
        (Builtin::Crd, ..) => vec![name, json!(str_of(created))],
        (_, "", "ConfigMap") => {
            let n = obj["data"].as_object().map(|m| m.len()).unwrap_or(0)
                + obj["binaryData"].as_object().map(|m| m.len()).unwrap_or(0);
            vec![name, json!(n), age(created)]
        }
        (_, "coordination.k8s.io", "Lease") => vec![
            name,
            or_none(str_of(&obj["spec"]["holderIdentity"])),
            age(created),
        ],
        (_, "apps", "Deployment") => {
            let st = &obj["status"];
            let i = |v: &Value| v.as_i64().unwrap_or(0);
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    i(&st["readyReplicas"]),
                    obj["spec"]["replicas"].as_i64().unwrap_or(1)
                )),
                json!(i(&st["updatedReplicas"])),
                json!(i(&st["availableReplicas"])),
                age(created),
            ]
        }
        (_, "apps", "DaemonSet") => {
            let st = &obj["status"];
            let i = |v: &Value| v.as_i64().unwrap_or(0);
            let sel: Vec<String> = obj["spec"]["template"]["spec"]["nodeSelector"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", str_of(v)))
                        .collect()
                })
                .unwrap_or_default();
            vec![
                name,
                json!(i(&st["desiredNumberScheduled"])),
                json!(i(&st["currentNumberScheduled"])),
                json!(i(&st["numberReady"])),
                json!(i(&st["updatedNumberScheduled"])),
                json!(i(&st["numberAvailable"])),
                or_none(sel.join(",")),
                age(created),
            ]
        }
        (_, "scheduling.k8s.io", "PriorityClass") => vec![
            name,
            json!(obj["value"].as_i64().unwrap_or(0)),
            json!(obj["globalDefault"].as_bool().unwrap_or(false).to_string()),
            age(created),
        ],
        _ => vec![name, age(created)],
    }
}

/// `PartialObjectMetadata` of an object.
pub fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

/// What a Table row carries as `object` (the `includeObject` parameter): the object's
/// metadata (the default), the whole object (kubectl asks for it to `--sort-by` a field), or
/// nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    /// No `object`.
    None,
    /// `PartialObjectMetadata`.
    Metadata,
    /// The object itself.
    Object,
}

/// A Table of objects.
pub fn table(
    rt: &ResourceType,
    objs: &[Value],
    list_meta: Value,
    with_columns: bool,
    api_version: &str,
    include: Include,
) -> Value {
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| match include {
            Include::None => json!({"cells": cells(rt, o)}),
            Include::Metadata => json!({"cells": cells(rt, o), "object": partial(o)}),
            Include::Object => json!({"cells": cells(rt, o), "object": o}),
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": list_meta,
        "columnDefinitions": if with_columns { Value::Array(columns(rt)) } else { json!([]) },
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(3600 * 5 + 60 * 3), "5h3m");
        assert_eq!(human_duration(86400 * 3), "3d");
    }

    #[test]
    fn jsonpath_subset() {
        let v = json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}], "n": 3}});
        assert_eq!(jsonpath(&v, ".status.n"), vec![&json!(3)]);
        assert_eq!(
            jsonpath(&v, ".status.conditions[1].type"),
            vec![&json!("Ready")]
        );
        assert_eq!(
            jsonpath(&v, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![&json!("True")]
        );
        assert_eq!(jsonpath(&v, ".status.conditions[*].type").len(), 2);
        assert!(jsonpath(&v, ".status.missing").is_empty());
    }
}
