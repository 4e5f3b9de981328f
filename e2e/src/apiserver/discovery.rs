//! Discovery documents: `/version`, legacy discovery (`/api`, `/apis`, group and resource
//! lists) and aggregated discovery (`apidiscovery.k8s.io/v2` and `v2beta1`, which kubectl 1.32
//! asks for first).

use serde_json::{Value, json};

use super::resources::{Catalog, ResourceType};

/// The `version.Info` the double reports.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0-muster.1",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `/api`.
pub fn api_versions(server_addr: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_addr}]
    })
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`.
pub fn api_groups(cat: &Catalog) -> Value {
    let groups: Vec<Value> = cat
        .groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_doc(&g, &vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`.
pub fn api_group(cat: &Catalog, group: &str) -> Option<Value> {
    cat.groups()
        .into_iter()
        .find(|(g, _)| g == group)
        .map(|(g, vs)| {
            let mut d = group_doc(&g, &vs);
            d["kind"] = json!("APIGroup");
            d["apiVersion"] = json!("v1");
            d
        })
}

fn subresources(t: &ResourceType) -> Vec<(String, String, String, String, Vec<&'static str>)> {
    // (name, group, version, kind, verbs)
    let mut out = Vec::new();
    if t.status {
        out.push((
            "status".into(),
            t.group.clone(),
            t.version.clone(),
            t.kind.clone(),
            vec!["get", "patch", "update"],
        ));
    }
    for s in t.extra_subresources {
        match *s {
            "binding" => out.push((
                "binding".into(),
                String::new(),
                "v1".into(),
                "Binding".into(),
                vec!["create"],
            )),
            "eviction" => out.push((
                "eviction".into(),
                "policy".into(),
                "v1".into(),
                "Eviction".into(),
                vec!["create"],
            )),
            "log" => out.push((
                "log".into(),
                String::new(),
                "v1".into(),
                "Pod".into(),
                vec!["get"],
            )),
            _ => {}
        }
    }
    out
}

/// `/api/v1`, `/apis/{group}/{version}`.
pub fn resource_list(cat: &Catalog, group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for t in cat.in_group_version(group, version) {
        resources.push(json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": t.verbs(),
            "shortNames": t.short_names,
            "categories": t.categories,
        }));
        for (name, g, v, k, verbs) in subresources(t) {
            let mut r = json!({
                "name": format!("{}/{name}", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": k,
                "verbs": verbs,
            });
            if g != t.group || v != t.version {
                r["group"] = json!(g);
                r["version"] = json!(v);
            }
            resources.push(r);
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// Aggregated discovery of the core group (`/api`) or of all other groups (`/apis`).
pub fn aggregated(cat: &Catalog, core: bool, api_version: &str) -> Value {
    let mut items = Vec::new();
    for (group, versions) in cat.groups() {
        if group.is_empty() != core {
            continue;
        }
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| {
                let resources: Vec<Value> = cat
                    .in_group_version(&group, v)
                    .map(|t| {
                        let subs: Vec<Value> = subresources(t)
                            .into_iter()
                            .map(|(name, g, ver, k, verbs)| {
                                json!({
                                    "subresource": name,
                                    "responseKind": {"group": g, "version": ver, "kind": k},
                                    "verbs": verbs,
                                })
                            })
                            .collect();
                        let mut r = json!({
                            "resource": t.plural,
                            "responseKind": {"group": t.group, "version": t.version, "kind": t.kind},
                            "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
                            "singularResource": t.singular,
                            "verbs": t.verbs(),
                        });
                        if !t.short_names.is_empty() {
                            r["shortNames"] = json!(t.short_names);
                        }
                        if !t.categories.is_empty() {
                            r["categories"] = json!(t.categories);
                        }
                        if !subs.is_empty() {
                            r["subresources"] = json!(subs);
                        }
                        r
                    })
                    .collect();
                json!({"version": v, "resources": resources, "freshness": "Current"})
            })
            .collect();
        items.push(json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": vs}));
    }
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items})
}
