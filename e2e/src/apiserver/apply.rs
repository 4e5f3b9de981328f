//! Server-side apply, simplified (hand-written: `structured-merge-diff` has no Rust port).
//!
//! What is implemented:
//! - The applied configuration is merged into the live object: maps recursively; lists by
//!   their type — list-maps (`x-kubernetes-list-type: map` with its keys for custom
//!   resources; the strategic-merge keys of [`super::patch::builtin_list_strategy`] for
//!   built-ins) merge item by item, sets (`x-kubernetes-list-type: set`,
//!   `metadata.finalizers`) are unioned, every other list is atomic (replaced).
//! - Each `Apply` manager's field set is recorded in `metadata.managedFields` (`FieldsV1`
//!   format: `f:`, `k:`, `v:` and `.`). Fields a manager applied before and omits now are
//!   removed from the object unless another `Apply` manager also owns them.
//! - Conflicts: applying a different value to a field another `Apply` manager owns fails
//!   with 409 Conflict unless `force=true`, which transfers ownership.
//!
//! What is simplified: writes other than apply (create, update, patch) record no ownership, so
//! they never cause conflicts and never keep a field alive; `managedFields` entries of
//! `Update` operations are not produced.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::patch::{ListStrategy, builtin_list_strategy};
use super::schema::{ListType, Schema};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum El {
    /// `f:name`.
    Field(String),
    /// `k:{"name":"a"}` (the JSON of the key fields).
    Key(String),
    /// `v:"x"` (a set member's JSON).
    Val(String),
    /// `.`: the list item itself.
    Dot,
}

type Path = Vec<El>;

/// What list and map types look like in one kind.
#[derive(Clone, Copy)]
pub struct Semantics<'a> {
    /// Kind (for the built-in merge-key table).
    pub kind: &'a str,
    /// Structural schema (custom resources).
    pub schema: Option<&'a Schema>,
}

#[derive(Clone, Copy)]
struct Cursor<'a> {
    sem: Semantics<'a>,
    node: Option<&'a Schema>,
}

impl<'a> Cursor<'a> {
    fn root(sem: Semantics<'a>) -> Self {
        Self {
            sem,
            node: sem.schema,
        }
    }
    fn child(self, k: &str) -> Self {
        Self {
            sem: self.sem,
            node: self.node.and_then(|n| n.child(k)),
        }
    }
    fn item(self) -> Self {
        Self {
            sem: self.sem,
            node: self.node.and_then(|n| n.item()),
        }
    }
    fn list_type(&self, names: &[String]) -> ListType {
        let meta = names.first().map(String::as_str) == Some("metadata");
        if self.sem.schema.is_some() && !meta {
            return self.node.map(|n| n.list_type.clone()).unwrap_or_default();
        }
        match builtin_list_strategy(self.sem.kind, names) {
            ListStrategy::MergeKey(k) => ListType::Map(vec![k.to_string()]),
            ListStrategy::MergePrimitive => ListType::Set,
            ListStrategy::Replace => ListType::Atomic,
        }
    }
    fn atomic_map(&self) -> bool {
        self.node.is_some_and(|n| n.atomic_map)
    }
}

fn key_json(item: &Value, keys: &[String]) -> String {
    let m: Map<String, Value> = keys
        .iter()
        .filter_map(|k| item.get(k).map(|v| (k.clone(), v.clone())))
        .collect();
    Value::Object(m).to_string()
}

fn collect(
    v: &Value,
    cur: Cursor,
    names: &mut Vec<String>,
    path: &mut Path,
    out: &mut BTreeSet<Path>,
) {
    match v {
        Value::Object(m) if !cur.atomic_map() && !m.is_empty() => {
            for (k, cv) in m {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind") {
                    continue;
                }
                if names.len() == 1
                    && names[0] == "metadata"
                    && !matches!(
                        k.as_str(),
                        "labels" | "annotations" | "finalizers" | "ownerReferences"
                    )
                {
                    continue;
                }
                names.push(k.clone());
                path.push(El::Field(k.clone()));
                collect(cv, cur.child(k), names, path, out);
                path.pop();
                names.pop();
            }
        }
        Value::Array(items) => match cur.list_type(names) {
            ListType::Map(keys) => {
                for it in items {
                    path.push(El::Key(key_json(it, &keys)));
                    path.push(El::Dot);
                    out.insert(path.clone());
                    path.pop();
                    collect(it, cur.item(), names, path, out);
                    path.pop();
                }
            }
            ListType::Set => {
                for it in items {
                    path.push(El::Val(it.to_string()));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListType::Atomic => {
                out.insert(path.clone());
            }
        },
        _ => {
            if !path.is_empty() {
                out.insert(path.clone());
            }
        }
    }
}

fn field_set(cfg: &Value, sem: Semantics) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    collect(
        cfg,
        Cursor::root(sem),
        &mut Vec::new(),
        &mut Vec::new(),
        &mut out,
    );
    out
}

fn el_str(e: &El) -> String {
    match e {
        El::Field(f) => format!("f:{f}"),
        El::Key(k) => format!("k:{k}"),
        El::Val(v) => format!("v:{v}"),
        El::Dot => ".".to_string(),
    }
}

/// Render a field set in `FieldsV1` form.
fn to_fields_v1(set: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for p in set {
        let mut node = &mut root;
        for e in p {
            node = node
                .entry(el_str(e))
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("object");
        }
    }
    Value::Object(root)
}

fn from_fields_v1(v: &Value) -> BTreeSet<Path> {
    fn walk(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
        let Some(m) = v.as_object() else { return };
        if m.is_empty() {
            if !path.is_empty() {
                out.insert(path.clone());
            }
            return;
        }
        for (k, child) in m {
            let e = if k == "." {
                El::Dot
            } else if let Some(f) = k.strip_prefix("f:") {
                El::Field(f.to_string())
            } else if let Some(x) = k.strip_prefix("k:") {
                El::Key(x.to_string())
            } else if let Some(x) = k.strip_prefix("v:") {
                El::Val(x.to_string())
            } else {
                continue;
            };
            path.push(e);
            walk(child, path, out);
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// The fields of a list-map key (`k:{"name":"a"}`), parsed once per lookup rather than per
/// item compared.
fn parse_key(key: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(key) {
        Ok(Value::Object(k)) => Some(k),
        _ => None,
    }
}

fn matches_key(item: &Value, key: &Option<Map<String, Value>>) -> bool {
    key.as_ref()
        .is_some_and(|k| k.iter().all(|(f, v)| item.get(f) == Some(v)))
}

/// Whether a live list item has the key of a configured one (`key_json(cfg, keys)`, compared
/// without building it).
fn same_item(live: &Value, cfg: &Value, keys: &[String]) -> bool {
    keys.iter()
        .all(|k| cfg.get(k).is_none_or(|v| live.get(k) == Some(v)))
}

fn get_path<'a>(v: &'a Value, path: &[El]) -> Option<&'a Value> {
    let mut cur = v;
    for e in path {
        cur = match e {
            El::Field(f) => cur.get(f)?,
            El::Key(k) => {
                let k = parse_key(k);
                cur.as_array()?.iter().find(|i| matches_key(i, &k))?
            }
            El::Val(x) => {
                let x: Value = serde_json::from_str(x).ok()?;
                cur.as_array()?.iter().find(|i| **i == x)?
            }
            El::Dot => cur,
        };
    }
    Some(cur)
}

fn remove_path(v: &mut Value, path: &[El]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let (last, parent) = if *last == El::Dot {
        match parent.split_last() {
            Some((k, p)) => (k, p),
            None => return,
        }
    } else {
        (last, parent)
    };
    let mut cur = v;
    for e in parent {
        let next = match e {
            El::Field(f) => cur.get_mut(f),
            El::Key(k) => cur.as_array_mut().and_then(|a| {
                let k = parse_key(k);
                a.iter_mut().find(|i| matches_key(i, &k))
            }),
            El::Val(_) | El::Dot => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match last {
        El::Field(f) => {
            if let Some(m) = cur.as_object_mut() {
                m.remove(f);
            }
        }
        El::Key(k) => {
            if let Some(a) = cur.as_array_mut() {
                let k = parse_key(k);
                a.retain(|i| !matches_key(i, &k));
            }
        }
        El::Val(x) => {
            if let (Some(a), Ok(x)) = (cur.as_array_mut(), serde_json::from_str::<Value>(x)) {
                a.retain(|i| *i != x);
            }
        }
        El::Dot => {}
    }
}

fn merge(live: &mut Value, cfg: &Value, cur: Cursor, names: &mut Vec<String>) {
    match (live, cfg) {
        (Value::Object(lm), Value::Object(cm)) if !cur.atomic_map() => {
            for (k, cv) in cm {
                if cv.is_null() {
                    lm.remove(k);
                    continue;
                }
                names.push(k.clone());
                match lm.get_mut(k) {
                    Some(lv) => merge(lv, cv, cur.child(k), names),
                    None => {
                        lm.insert(k.clone(), cv.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(la), Value::Array(ca)) => match cur.list_type(names) {
            ListType::Map(keys) => {
                for ci in ca {
                    match la.iter_mut().find(|li| same_item(li, ci, &keys)) {
                        Some(li) => merge(li, ci, cur.item(), names),
                        None => la.push(ci.clone()),
                    }
                }
            }
            ListType::Set => {
                for ci in ca {
                    if !la.contains(ci) {
                        la.push(ci.clone());
                    }
                }
            }
            ListType::Atomic => *la = ca.clone(),
        },
        (live, cfg) => *live = cfg.clone(),
    }
}

fn path_str(p: &[El]) -> String {
    let mut s = String::new();
    for e in p {
        match e {
            El::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            El::Key(k) => s.push_str(&format!(
                "[{}]",
                k.trim_start_matches('{')
                    .trim_end_matches('}')
                    .replace(':', "=")
            )),
            El::Val(v) => s.push_str(&format!("[{v}]")),
            El::Dot => {}
        }
    }
    s
}

/// A refused apply: the fields other managers own, as `(manager, path)`.
#[derive(Debug)]
pub struct Conflicts(pub Vec<(String, String)>);

impl Conflicts {
    /// The message kube-apiserver gives.
    pub fn message(&self, api_version: &str) -> String {
        let n = self.0.len();
        if n == 1 {
            let (m, p) = &self.0[0];
            format!("Apply failed with 1 conflict: conflict with \"{m}\" using {api_version}: {p}")
        } else {
            let list: Vec<String> = self
                .0
                .iter()
                .map(|(m, p)| format!("conflict with \"{m}\" using {api_version}: {p}"))
                .collect();
            format!("Apply failed with {n} conflicts: {}", list.join("\n"))
        }
    }
}

/// One server-side apply request.
pub struct Apply<'a> {
    /// `fieldManager`.
    pub manager: &'a str,
    /// `force`.
    pub force: bool,
    /// `status` when applying to the status subresource.
    pub subresource: Option<&'a str>,
    /// apiVersion recorded in managedFields.
    pub api_version: &'a str,
    /// Timestamp recorded in managedFields.
    pub now: &'a str,
    /// List semantics of the kind.
    pub sem: Semantics<'a>,
}

fn is_mine(e: &Value, a: &Apply) -> bool {
    e["manager"] == a.manager
        && e["operation"] == "Apply"
        && e.get("subresource").and_then(Value::as_str) == a.subresource
}

impl Apply<'_> {
    /// Apply `cfg` to `live` (absent: create). Returns the new object, with managedFields.
    pub fn run(&self, live: Option<&Value>, cfg: &Value) -> Result<Value, Conflicts> {
        let new_set = field_set(cfg, self.sem);
        let mut managed: Vec<Value> = live
            .and_then(|l| l["metadata"]["managedFields"].as_array().cloned())
            .unwrap_or_default();
        let mut obj = match live {
            Some(l) => l.clone(),
            None => {
                let mut o = cfg.clone();
                if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("managedFields");
                }
                let entry = self.entry(&new_set);
                o["metadata"]["managedFields"] = json!([entry]);
                return Ok(o);
            }
        };
        let old_set = managed
            .iter()
            .find(|e| is_mine(e, self))
            .map(|e| from_fields_v1(&e["fieldsV1"]))
            .unwrap_or_default();
        // Conflicts with other appliers that own a field we set to a different value.
        let mut conflicts = Vec::new();
        let mut others: Vec<(usize, BTreeSet<Path>)> = managed
            .iter()
            .enumerate()
            .filter(|(_, e)| e["operation"] == "Apply" && !is_mine(e, self))
            .map(|(i, e)| (i, from_fields_v1(&e["fieldsV1"])))
            .collect();
        // (No other applier: nothing to conflict with, no path to look up.)
        let contested = if others.is_empty() {
            None
        } else {
            Some(&new_set)
        };
        for p in contested.into_iter().flatten() {
            if p.last() == Some(&El::Dot) {
                continue;
            }
            let live_v = get_path(&obj, p);
            let want = get_path(cfg, p);
            if live_v.is_none() || live_v == want {
                continue;
            }
            for (i, set) in others.iter_mut() {
                if set.contains(p) {
                    if self.force {
                        set.remove(p);
                    } else {
                        let m = managed[*i]["manager"].as_str().unwrap_or("").to_string();
                        conflicts.push((m, path_str(p)));
                    }
                }
            }
        }
        if !conflicts.is_empty() {
            return Err(Conflicts(conflicts));
        }
        if self.force {
            for (i, set) in &others {
                managed[*i]["fieldsV1"] = to_fields_v1(set);
            }
        }
        let mut cfg_body = cfg.clone();
        if let Some(m) = cfg_body.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
            m.remove("resourceVersion");
        }
        merge(&mut obj, &cfg_body, Cursor::root(self.sem), &mut Vec::new());
        // Fields this manager stopped applying and nobody else applies are removed.
        let owned_by_others = |p: &Path| {
            others
                .iter()
                .any(|(_, s)| s.iter().any(|q| q.starts_with(p)))
        };
        for p in old_set.difference(&new_set) {
            if !owned_by_others(p) {
                let is_item = p.last() == Some(&El::Dot);
                let parent_removed = p.iter().enumerate().any(|(i, e)| {
                    matches!(e, El::Key(_)) && {
                        let mut item = p[..=i].to_vec();
                        item.push(El::Dot);
                        &item != p && old_set.contains(&item) && !new_set.contains(&item)
                    }
                });
                if is_item {
                    let item = &p[..p.len() - 1];
                    if !others
                        .iter()
                        .any(|(_, s)| s.iter().any(|q| q.starts_with(item)))
                    {
                        remove_path(&mut obj, p);
                    }
                } else if !parent_removed {
                    remove_path(&mut obj, p);
                }
            }
        }
        // Record this manager's new field set (an unchanged one keeps its entry).
        match managed.iter().position(|e| is_mine(e, self)) {
            Some(_) if old_set == new_set => {}
            Some(i) => managed[i] = self.entry(&new_set),
            None => managed.push(self.entry(&new_set)),
        }
        managed.retain(|e| {
            e["operation"] != "Apply"
                || e["fieldsV1"].as_object().is_some_and(|m| !m.is_empty())
                || is_mine(e, self)
        });
        obj["metadata"]["managedFields"] = Value::Array(managed);
        Ok(obj)
    }

    fn entry(&self, set: &BTreeSet<Path>) -> Value {
        let mut e = json!({
            "manager": self.manager,
            "operation": "Apply",
            "apiVersion": self.api_version,
            "time": self.now,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(set),
        });
        if let Some(s) = self.subresource {
            e["subresource"] = json!(s);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(
        manager: &str,
        force: bool,
        live: Option<&Value>,
        cfg: &Value,
    ) -> Result<Value, Conflicts> {
        Apply {
            manager,
            force,
            subresource: None,
            api_version: "v1",
            now: "2024-01-01T00:00:00Z",
            sem: Semantics {
                kind: "Pod",
                schema: None,
            },
        }
        .run(live, cfg)
    }

    #[test]
    fn apply_creates_merges_and_removes_dropped_fields() {
        let cfg1 = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}},
            "spec": {"containers": [{"name": "c", "image": "x:1"}]}});
        let live = apply("m1", false, None, &cfg1).unwrap();
        let mf = &live["metadata"]["managedFields"][0]["fieldsV1"];
        assert!(mf["f:metadata"]["f:labels"]["f:a"].is_object());
        assert!(mf["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]["."].is_object());
        // Another manager adds a container and a label.
        let cfg2 = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"c": "3"}},
            "spec": {"containers": [{"name": "d", "image": "y:1"}]}});
        let live = apply("m2", false, Some(&live), &cfg2).unwrap();
        assert_eq!(live["spec"]["containers"].as_array().unwrap().len(), 2);
        // m1 drops label b: it goes; m2's label and container stay.
        let cfg3 = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c", "image": "x:2"}]}});
        let live = apply("m1", false, Some(&live), &cfg3).unwrap();
        assert_eq!(live["metadata"]["labels"], json!({"a": "1", "c": "3"}));
        assert_eq!(live["spec"]["containers"][0]["image"], "x:2");
        assert_eq!(live["spec"]["containers"][1]["name"], "d");
        // m2 setting m1's image conflicts, unless forced.
        let cfg4 = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x:9"}]}});
        let err = apply("m2", false, Some(&live), &cfg4).unwrap_err();
        assert_eq!(
            err.message("v1"),
            "Apply failed with 1 conflict: conflict with \"m1\" using v1: .spec.containers[\"name\"=\"c\"].image"
        );
        let live = apply("m2", true, Some(&live), &cfg4).unwrap();
        assert_eq!(live["spec"]["containers"][0]["image"], "x:9");
        // m2 no longer applies container d: it is removed.
        assert!(
            live["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["name"] != "d")
        );
    }
}
