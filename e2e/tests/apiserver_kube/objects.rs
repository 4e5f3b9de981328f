//! Object lifecycle: create/update conflicts and errors, generation and the status
//! subresource, finalizers, owner references, pod binding and graceful deletion, namespace
//! deletion.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_conflicts_and_errors() {
    let (_s, c) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let created = cms
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    assert!(!created.uid().unwrap().is_empty());
    assert!(created.creation_timestamp().is_some());
    let rv1: u64 = created.resource_version().unwrap().parse().unwrap();

    let err = api_error(
        cms.create(&PostParams::default(), &cm("a", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(err.message, "configmaps \"a\" already exists");

    let mut fresh = created.clone();
    fresh.data = Some(BTreeMap::from([("k".into(), "v2".into())]));
    let updated = cms
        .replace("a", &PostParams::default(), &fresh)
        .await
        .unwrap();
    let rv2: u64 = updated.resource_version().unwrap().parse().unwrap();
    assert!(rv2 > rv1, "resourceVersion increases");

    // `fresh` still carries the old resourceVersion.
    let err = api_error(
        cms.replace("a", &PostParams::default(), &fresh)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        err.message,
        "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again"
    );

    let err = api_error(cms.get("missing").await.unwrap_err());
    assert_eq!(
        (err.code, err.message.as_str()),
        (404, "configmaps \"missing\" not found")
    );

    let other: Api<ConfigMap> = Api::namespaced(c.clone(), "nope");
    let err = api_error(
        other
            .create(&PostParams::default(), &cm("x", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.message.as_str()),
        (404, "namespaces \"nope\" not found")
    );

    // An update that changes nothing keeps the resourceVersion.
    let same = cms
        .replace("a", &PostParams::default(), &updated)
        .await
        .unwrap();
    assert_eq!(same.resource_version(), updated.resource_version());

    // Custom resources refuse updates without a resourceVersion.
    let bjs = bj_api(&c);
    bjs.create(&PostParams::default(), &bj("j", json!({"time": 30})))
        .await
        .unwrap();
    let err = api_error(
        bjs.replace("j", &PostParams::default(), &bj("j", json!({"time": 40})))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains(
            "metadata.resourceVersion: Invalid value: \"0x0\": must be specified for an update"
        ),
        "{}",
        err.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generation_and_status_subresource() {
    let (_s, c) = start().await;
    let bjs = bj_api(&c);
    let j = bjs
        .create(&PostParams::default(), &bj("g", json!({"time": 30})))
        .await
        .unwrap();
    assert_eq!(j.metadata.generation, Some(1));

    // Status through the status subresource: no generation bump, spec untouched.
    let st = bjs
        .patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"state": "PENDING", "jobId": 7}, "spec": {"time": 99}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(st.metadata.generation, Some(1));
    assert_eq!(st.data["status"]["jobId"], 7);
    assert_eq!(st.data["spec"]["time"], 30, "status writes ignore spec");

    // Main resource: status changes ignored, label changes don't bump generation.
    let m = bjs
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}, "status": {"jobId": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(m.metadata.generation, Some(1));
    assert_eq!(
        m.data["status"]["jobId"], 7,
        "main-resource writes ignore status"
    );

    let m = bjs
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"time": 60}})),
        )
        .await
        .unwrap();
    assert_eq!(m.metadata.generation, Some(2));
    assert_eq!(m.data["status"]["jobId"], 7);

    // Create drops the status of kinds with a status subresource.
    let created = bjs
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
            "metadata": {"name": "g2"}, "spec": {"time": 5, "script": "hostname"}, "status": {"jobId": 3}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert!(created.data.get("status").is_none());

    // Pods: status has its own subresource; a pod starts Pending.
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let p = pods
        .create(&PostParams::default(), &pod("p", None))
        .await
        .unwrap();
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(
        p.spec.as_ref().unwrap().restart_policy.as_deref(),
        Some("Always")
    );
    let p = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
    // Pod spec is immutable apart from images and a few fields.
    let err = api_error(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"restartPolicy": "Never"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains("pod updates may not change fields"),
        "{}",
        err.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_and_deletion_timestamp() {
    let (_s, c) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let mut x = cm("f", &[]);
    x.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &x).await.unwrap();
    let res = cms.delete("f", &DeleteParams::default()).await.unwrap();
    let pending = res.left().expect("a finalizer keeps the object");
    assert!(pending.metadata.deletion_timestamp.is_some());
    let got = cms.get("f").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());

    let err = api_error(
        cms.patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "new"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(
        err.message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        err.message
    );

    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}]))
                .unwrap(),
        ),
    )
    .await
    .unwrap();
    let err = api_error(cms.get("f").await.unwrap_err());
    assert_eq!(
        err.code, 404,
        "removing the last finalizer deletes the object"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_references_cascade() {
    let (_s, c) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let mk_owned = |name: &str, owner: &ConfigMap| {
        let mut d = cm(name, &[]);
        d.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: owner.name_any(),
                uid: owner.uid().unwrap(),
                block_owner_deletion: Some(true),
                ..Default::default()
            },
        ]);
        d
    };
    // Background: dependents go after the owner.
    let owner = cms
        .create(&PostParams::default(), &cm("owner", &[]))
        .await
        .unwrap();
    for i in 0..3 {
        cms.create(
            &PostParams::default(),
            &mk_owned(&format!("dep{i}"), &owner),
        )
        .await
        .unwrap();
    }
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("background cascade", || async {
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|c| !c.name_any().starts_with("dep"))
    })
    .await;

    // Orphan: dependents stay, without the reference.
    let owner = cms
        .create(&PostParams::default(), &cm("owner2", &[]))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &mk_owned("kept", &owner))
        .await
        .unwrap();
    cms.delete("owner2", &DeleteParams::orphan()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let kept = cms.get("kept").await.unwrap();
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );

    // Foreground: the owner waits, marked, until its dependents are gone.
    let owner = cms
        .create(&PostParams::default(), &cm("owner3", &[]))
        .await
        .unwrap();
    let mut held = mk_owned("held", &owner);
    held.metadata.finalizers = Some(vec!["example.com/slow".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    cms.delete("owner3", &DeleteParams::foreground())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let o = cms.get("owner3").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert!(o.finalizers().contains(&"foregroundDeletion".to_string()));
    assert!(
        cms.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("foreground owner deleted", || async {
        cms.get_opt("owner3").await.unwrap().is_none()
    })
    .await;

    // A dependent created with an owner that does not exist is collected.
    let mut ghost = cm("ghost-owned", &[]);
    ghost.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "ghost".into(),
            uid: "00000000-0000-0000-0000-000000000000".into(),
            ..Default::default()
        },
    ]);
    cms.create(&PostParams::default(), &ghost).await.unwrap();
    eventually("dangling dependent collected", || async {
        cms.get_opt("ghost-owned").await.unwrap().is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_bind_and_delete_gracefully() {
    let (s, c) = start().await;
    let nodes: Api<Node> = Api::all(c.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    pods.create(&PostParams::default(), &pod("b", None))
        .await
        .unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "b"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}});
    let req = axum::http::Request::post("/api/v1/namespaces/default/pods/b/binding")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    let _: Value = c.request(req).await.unwrap();
    let p = pods.get("b").await.unwrap();
    assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    let again = axum::http::Request::post("/api/v1/namespaces/default/pods/b/binding")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    let err = api_error(c.request::<Value>(again).await.unwrap_err());
    assert_eq!(err.code, 409);

    // Logs come from what a (simulated) kubelet recorded.
    s.set_pod_log("default", "b", "main", "epoch 1\nepoch 2\nepoch 3\n");
    let logs = pods
        .logs(
            "b",
            &kube::api::LogParams {
                tail_lines: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(logs, "epoch 2\nepoch 3\n");

    // A bound pod is deleted gracefully: it stays, terminating, until deleted with grace 0.
    pods.delete("b", &DeleteParams::default()).await.unwrap();
    let p = pods.get("b").await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete(
        "b",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(pods.get_opt("b").await.unwrap().is_none());

    // Unbound pods go at once; so does everything when graceful deletion is off.
    pods.create(&PostParams::default(), &pod("u", None))
        .await
        .unwrap();
    pods.delete("u", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("u").await.unwrap().is_none());
    s.set_graceful_pod_deletion(false);
    pods.create(&PostParams::default(), &pod("n", Some("n1")))
        .await
        .unwrap();
    pods.delete("n", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("n").await.unwrap().is_none());

    // deletecollection with a selector.
    for i in 0..3 {
        let mut p = pod(&format!("dc{i}"), None);
        p.metadata.labels = Some(BTreeMap::from([("batch".to_string(), "x".to_string())]));
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    pods.create(&PostParams::default(), &pod("other", None))
        .await
        .unwrap();
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("batch=x"),
    )
    .await
    .unwrap();
    assert_eq!(
        names_p(pods.list(&ListParams::default()).await.unwrap().items),
        ["other"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_delete_their_content() {
    let (_s, c) = start().await;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(c.clone(), "team");
    eventually("default service account", || async {
        sas.get_opt("default").await.unwrap().is_some()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "team");
    cms.create(&PostParams::default(), &cm("data", &[]))
        .await
        .unwrap();
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    let err = api_error(
        cms.create(&PostParams::default(), &cm("late", &[]))
            .await
            .unwrap_err(),
    );
    assert!(err.code == 403 || err.code == 404, "{err:?}");
    eventually("namespace gone", || async {
        nss.get_opt("team").await.unwrap().is_none()
    })
    .await;
    assert!(
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
