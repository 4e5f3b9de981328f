//! Write paths: every patch type, server-side apply, dry runs.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_patch_type() {
    let (_s, c) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let mut p = pod("pp", None);
    p.spec
        .as_mut()
        .unwrap()
        .containers
        .push(serde_json::from_value(json!({"name": "side", "image": "sidecar:1"})).unwrap());
    pods.create(&PostParams::default(), &p).await.unwrap();

    // Strategic merge: containers merge by name.
    let out = pods
        .patch(
            "pp",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "side", "image": "sidecar:2"}]}}),
            ),
        )
        .await
        .unwrap();
    let cs = out.spec.unwrap().containers;
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[1].image.as_deref(), Some("sidecar:2"));
    assert_eq!(cs[0].image.as_deref(), Some("busybox:1.36"));

    // Merge patch replaces lists; JSON patch edits in place.
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    cms.create(&PostParams::default(), &cm("m", &[]))
        .await
        .unwrap();
    let out = cms
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": null, "n": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        out.data.unwrap(),
        BTreeMap::from([("n".to_string(), "1".to_string())])
    );
    let jp: json_patch::Patch = serde_json::from_value(json!([{"op": "add", "path": "/data/j", "value": "2"}, {"op": "test", "path": "/data/n", "value": "1"}])).unwrap();
    let out = cms
        .patch("m", &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .unwrap();
    assert_eq!(out.data.unwrap()["j"], "2");
    let bad: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/n", "value": "9"}])).unwrap();
    let err = api_error(
        cms.patch("m", &PatchParams::default(), &Patch::Json::<()>(bad))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);

    // Strategic merge patch is refused for custom resources, as by kube-apiserver.
    let bjs = bj_api(&c);
    bjs.create(&PostParams::default(), &bj("s", json!({"time": 30})))
        .await
        .unwrap();
    let err = api_error(
        bjs.patch(
            "s",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"time": 1}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 415);

    // Patching something that doesn't exist is a 404.
    let err = api_error(
        cms.patch("none", &PatchParams::default(), &Patch::Merge(json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply() {
    let (_s, c) = start().await;
    let parts = partition_api(&c);
    let p1: DynamicObject = serde_json::from_value(json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "gpu", "labels": {"a": "1", "b": "2"}}, "spec": {"maxNodes": 8, "allowedNamespaces": ["x"]}}))
    .unwrap();
    // Apply creates.
    let out = parts
        .patch("gpu", &PatchParams::apply("alice"), &Patch::Apply(&p1))
        .await
        .unwrap();
    assert_eq!(out.data["spec"]["maxNodes"], 8);
    assert_eq!(
        out.metadata.managed_fields.as_ref().unwrap()[0]
            .manager
            .as_deref(),
        Some("alice")
    );
    // A second manager adds to the set list and a label; alice's fields stay.
    let p2: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "gpu", "labels": {"c": "3"}}, "spec": {"allowedNamespaces": ["y"]}}),
    )
    .unwrap();
    let out = parts
        .patch("gpu", &PatchParams::apply("bob"), &Patch::Apply(&p2))
        .await
        .unwrap();
    assert_eq!(out.data["spec"]["allowedNamespaces"], json!(["x", "y"]));
    assert_eq!(out.labels().len(), 3);
    // Alice drops label b: it is removed; bob's label stays.
    let p3: DynamicObject = serde_json::from_value(json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "gpu", "labels": {"a": "1"}}, "spec": {"maxNodes": 8, "allowedNamespaces": ["x"]}}))
    .unwrap();
    let out = parts
        .patch("gpu", &PatchParams::apply("alice"), &Patch::Apply(&p3))
        .await
        .unwrap();
    assert_eq!(out.labels().keys().collect::<Vec<_>>(), ["a", "c"]);
    // Bob setting alice's field conflicts unless forced.
    let p4: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "gpu"}, "spec": {"maxNodes": 4, "allowedNamespaces": ["y"]}}),
    )
    .unwrap();
    let err = api_error(
        parts
            .patch("gpu", &PatchParams::apply("bob"), &Patch::Apply(&p4))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message.contains("conflict with \"alice\""),
        "{}",
        err.message
    );
    let out = parts
        .patch(
            "gpu",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(&p4),
        )
        .await
        .unwrap();
    assert_eq!(out.data["spec"]["maxNodes"], 4);

    let gen_before = out.metadata.generation;
    // Status conditions are a list-map keyed by type: two controllers each own their condition.
    let cond = |t: &str| json!({"type": t, "status": "True", "reason": "R", "message": "m", "lastTransitionTime": "2025-01-01T00:00:00Z"});
    for (mgr, t) in [("ctl-a", "Ready"), ("ctl-b", "Healthy")] {
        let st: DynamicObject = serde_json::from_value(
            json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
            "metadata": {"name": "gpu"}, "status": {"conditions": [cond(t)]}}),
        )
        .unwrap();
        parts
            .patch_status("gpu", &PatchParams::apply(mgr).force(), &Patch::Apply(&st))
            .await
            .unwrap();
    }
    let got = parts.get("gpu").await.unwrap();
    assert_eq!(
        got.metadata.generation, gen_before,
        "status applies don't bump generation"
    );
    let types: Vec<&str> = got.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Ready", "Healthy"]);

    // Apply without a field manager is refused.
    let err = api_error(
        parts
            .patch("gpu", &PatchParams::default(), &Patch::Apply(&p4))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_persists_nothing() {
    let (s, c) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let before = s.resource_version();
    let out = cms
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("dry", &[]),
        )
        .await
        .unwrap();
    assert_eq!(out.name_any(), "dry");
    assert!(cms.get_opt("dry").await.unwrap().is_none());
    cms.create(&PostParams::default(), &cm("real", &[]))
        .await
        .unwrap();
    let out = cms
        .patch(
            "real",
            &PatchParams {
                dry_run: true,
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"k": "changed"}})),
        )
        .await
        .unwrap();
    assert_eq!(out.data.unwrap()["k"], "changed");
    assert_eq!(cms.get("real").await.unwrap().data.unwrap()["k"], "v");
    cms.delete(
        "real",
        &DeleteParams {
            dry_run: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(cms.get_opt("real").await.unwrap().is_some());
    // Dry-run validation still refuses bad objects.
    let err = api_error(
        bj_api(&c)
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &bj("b", json!({"time": "1h"})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert_eq!(
        s.resource_version(),
        before + 1,
        "only the real create took a resourceVersion"
    );
}
