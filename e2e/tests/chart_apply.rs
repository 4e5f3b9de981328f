//! The rendered chart and every example, applied to the test control plane (the in-process API
//! server double) with kube-rs, as `helm install` and `kubectl apply --server-side` would: the
//! CRDs from the chart's `crds/` first, then every rendered object, then the examples in a
//! user namespace. Each object must be accepted and read back with nothing dropped (a field
//! the API server prunes is a field the user thinks is set but is not).

mod chart_common;

use std::path::Path;

use chart_common::*;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};
use muster_e2e::apiserver::{ApiServer, ApiServerOptions};
use serde_json::{Value, json};

const MANAGER: &str = "muster-chart-test";

/// A control plane with the chart's CRDs installed the way Helm installs `crds/`.
async fn control_plane() -> (ApiServer, Client) {
    let server = ApiServer::start(ApiServerOptions::default())
        .await
        .expect("the API server double starts");
    let client = server.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut files: Vec<_> = std::fs::read_dir(chart_dir().join("crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 3);
    for f in files {
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        crds.create(&PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
    (server, client)
}

async fn namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Server-side applies `obj` (in `default_ns` when namespaced and it names none) and returns
/// what the server stored.
async fn apply(
    client: &Client,
    discovery: &Discovery,
    obj: &Value,
    default_ns: &str,
) -> Result<Value, String> {
    let (group, version) = match obj["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            obj["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let kind = obj["kind"].as_str().unwrap();
    let gvk = GroupVersionKind::gvk(&group, &version, kind);
    let (ar, caps) = discovery
        .resolve_gvk(&gvk)
        .ok_or_else(|| format!("the API server does not serve {gvk:?}"))?;
    let name = obj["metadata"]["name"].as_str().unwrap();
    let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or(default_ns);
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    let stored = api
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await
        .map_err(|e| format!("{kind} {name}: {e}"))?;
    let stored = serde_json::to_value(&stored).unwrap();
    let mut dropped = Vec::new();
    unknown_fields(obj, &stored, "", &mut dropped);
    if !dropped.is_empty() {
        return Err(format!("{kind} {name}: the API server dropped {dropped:?}"));
    }
    Ok(stored)
}

#[tokio::test]
async fn the_rendered_chart_applies_to_the_control_plane() {
    let scenarios = [
        ("default", json!({})),
        (
            "kind without GPUs",
            serde_yaml::from_str::<Value>(
                &std::fs::read_to_string(chart_dir().join("ci/kind-values.yaml")).unwrap(),
            )
            .unwrap(),
        ),
        (
            "SuperPOD partitions, policy kill, dashboard",
            json!({
                "nodeAgent": {"policy": "kill"},
                "dashboards": {"enabled": true},
                "partitions": {"gpu": null, "batch": {
                    "default": true, "preemptMode": "None", "priorityTier": 10,
                    "topology": ["muster.dev/spine", "muster.dev/leaf", "kubernetes.io/hostname"]}}
            }),
        ),
    ];
    for (what, values) in scenarios {
        let Some(r) = render(values) else { return };
        let (server, client) = control_plane().await;
        namespace(&client, NAMESPACE).await;
        let discovery = Discovery::new(client.clone()).run().await.unwrap();
        let mut applied = 0;
        for o in &r.objects {
            apply(&client, &discovery, &o.value, NAMESPACE)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            applied += 1;
        }
        assert_eq!(applied, r.objects.len());
        // What users then see: the default partition and the policies exist.
        let parts = Api::<DynamicObject>::all_with(
            client.clone(),
            &discovery
                .resolve_gvk(&GroupVersionKind::gvk(
                    "muster.dev",
                    "v1alpha1",
                    "Partition",
                ))
                .unwrap()
                .0,
        )
        .list(&Default::default())
        .await
        .unwrap();
        assert_eq!(parts.items.len(), r.all("Partition").len(), "{what}");
        server.shutdown().await;
    }
}

fn example_objects() -> Vec<(String, Value)> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            if p.is_dir() && name != "clusters" && name != "traces" {
                walk(&p, out);
            } else if name.ends_with(".yaml") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("examples"), &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        for doc in serde_yaml::Deserializer::from_str(&std::fs::read_to_string(&f).unwrap()) {
            let v = <Value as serde::Deserialize>::deserialize(doc).unwrap();
            if !v.is_null() {
                out.push((f.strip_prefix(root()).unwrap().display().to_string(), v));
            }
        }
    }
    out
}

#[tokio::test]
async fn every_example_applies_to_the_control_plane() {
    let (server, client) = control_plane().await;
    namespace(&client, "ml").await;
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let objects = example_objects();
    assert!(objects.len() >= 13);
    for (file, obj) in &objects {
        let stored = apply(&client, &discovery, obj, "ml")
            .await
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        if obj["kind"] == "BatchJob" {
            assert_eq!(stored["metadata"]["namespace"], "ml", "{file}");
            assert_eq!(
                stored["spec"], obj["spec"],
                "{file}: the stored spec differs"
            );
        }
    }
    // A job that breaks a CEL rule is refused the same way (the double runs the CRDs' CEL).
    let bad = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
        "metadata": {"name": "bad"}, "spec": {"time": "1h", "script": "#!/bin/bash\n"}});
    let err = apply(&client, &discovery, &bad, "ml").await.unwrap_err();
    assert!(err.contains("time must be MINUTES"), "{err}");
    server.shutdown().await;
}
