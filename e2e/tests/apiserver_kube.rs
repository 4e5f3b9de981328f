//! Conformance of the API server double through kube-rs: what controllers rely on.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use muster_e2e::apiserver::{ApiServer, ApiServerOptions, FaultRule, Verbs};
use serde_json::{Value, json};

async fn start() -> (ApiServer, Client) {
    let s = ApiServer::start(ApiServerOptions::default().with_muster_crds())
        .await
        .expect("server starts");
    let c = s.client();
    (s, c)
}

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
        "data": {"k": "v"}
    }))
    .unwrap()
}

fn pod(name: &str, node: Option<&str>) -> Pod {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    serde_json::from_value(p).unwrap()
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(r) => *r,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn bj_api(c: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("muster.dev", "v1alpha1", "BatchJob"));
    Api::namespaced_with(c.clone(), "default", &ar)
}

fn partition_api(c: &Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "muster.dev",
        "v1alpha1",
        "Partition",
    ));
    Api::all_with(c.clone(), &ar)
}

/// A BatchJob named `name` with `spec` (and a script, which the CRD requires, unless given).
fn bj(name: &str, mut spec: Value) -> DynamicObject {
    if spec.get("script").is_none() && spec.get("template").is_none() {
        spec["script"] = json!("hostname");
    }
    serde_json::from_value(json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob", "metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

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
async fn label_and_field_selectors() {
    let (_s, c) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    for (n, l) in [
        ("a", [("app", "web"), ("tier", "front")]),
        ("b", [("app", "db"), ("tier", "back")]),
        ("c", [("app", "web"), ("tier", "back")]),
    ] {
        cms.create(&PostParams::default(), &cm(n, &l))
            .await
            .unwrap();
    }
    cms.create(&PostParams::default(), &cm("d", &[]))
        .await
        .unwrap();
    let names = |l: Vec<ConfigMap>| l.into_iter().map(|c| c.name_any()).collect::<Vec<_>>();
    let q = |sel: &'static str| {
        let cms = cms.clone();
        async move {
            names(
                cms.list(&ListParams::default().labels(sel))
                    .await
                    .unwrap()
                    .items,
            )
        }
    };
    assert_eq!(q("app=web").await, ["a", "c"]);
    assert_eq!(q("app==web,tier!=front").await, ["c"]);
    assert_eq!(q("app in (db,web),tier notin (front)").await, ["b", "c"]);
    assert_eq!(q("app").await, ["a", "b", "c"]);
    assert_eq!(q("!app").await, ["d"]);
    let by_name = names(
        cms.list(&ListParams::default().fields("metadata.name=b"))
            .await
            .unwrap()
            .items,
    );
    assert_eq!(by_name, ["b"]);

    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    pods.create(&PostParams::default(), &pod("on-n1", Some("n1")))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("unbound", None))
        .await
        .unwrap();
    let all: Api<Pod> = Api::all(c.clone());
    let on = names_p(
        all.list(&ListParams::default().fields("spec.nodeName=n1"))
            .await
            .unwrap()
            .items,
    );
    assert_eq!(on, ["on-n1"]);
    let pending = names_p(
        all.list(&ListParams::default().fields("spec.nodeName=,status.phase=Pending"))
            .await
            .unwrap()
            .items,
    );
    assert_eq!(pending, ["unbound"]);
    let err = api_error(
        all.list(&ListParams::default().fields("spec.bogus=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.message.as_str()),
        (400, "field label not supported: spec.bogus")
    );
}

fn names_p(l: Vec<Pod>) -> Vec<String> {
    l.into_iter().map(|c| c.name_any()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pagination() {
    let (_s, c) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    for i in 0..25 {
        cms.create(&PostParams::default(), &cm(&format!("cm{i:02}"), &[]))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(10);
    let mut pages = 0;
    loop {
        let page = cms.list(&lp).await.unwrap();
        pages += 1;
        if pages == 1 {
            assert_eq!(page.metadata.remaining_item_count, Some(15));
        }
        seen.extend(page.items.into_iter().map(|c| c.name_any()));
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => lp = lp.continue_token(&t),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..25).map(|i| format!("cm{i:02}")).collect();
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_and_expires() {
    let (s, c) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let first = cms
        .create(&PostParams::default(), &cm("w1", &[]))
        .await
        .unwrap();
    let rv = first.resource_version().unwrap();
    cms.create(&PostParams::default(), &cm("w2", &[]))
        .await
        .unwrap();
    cms.delete("w1", &DeleteParams::default()).await.unwrap();

    // Resuming from w1's version replays exactly what followed.
    let mut stream = cms
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    let mut got = Vec::new();
    while got.len() < 2 {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(o) => got.push(format!("ADDED {}", o.name_any())),
            WatchEvent::Deleted(o) => got.push(format!("DELETED {}", o.name_any())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, ["ADDED w2", "DELETED w1"]);

    // After a compaction the old version is gone: 410 as an ERROR event.
    s.compact();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }

    // timeoutSeconds ends the stream.
    let latest = cms
        .create(&PostParams::default(), &cm("w3", &[]))
        .await
        .unwrap()
        .resource_version()
        .unwrap();
    let started = std::time::Instant::now();
    let mut stream = cms
        .watch(&WatchParams::default().timeout(1), &latest)
        .await
        .unwrap()
        .boxed();
    assert!(stream.try_next().await.unwrap().is_none());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_recovers_from_gone_and_dropped_streams() {
    let (s, c) = start().await;
    s.set_watch_window(4);
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    cms.create(&PostParams::default(), &cm("before", &[]))
        .await
        .unwrap();
    let (reader, writer) = kube::runtime::reflector::store();
    let stream = kube::runtime::reflector(writer, watcher(cms.clone(), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        let mut s = stream.boxed();
        while s.next().await.is_some() {}
    });
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 1);

    // Drop every watch and compact: the watcher's resume version is gone, it relists.
    s.faults().drop_watches();
    for i in 0..10 {
        cms.create(&PostParams::default(), &cm(&format!("during{i}"), &[]))
            .await
            .unwrap();
    }
    s.compact();
    s.faults().drop_watches();
    cms.create(&PostParams::default(), &cm("after", &[]))
        .await
        .unwrap();
    eventually("reflector catches up", || async {
        reader.state().len() == 12
    })
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_and_streaming_lists() {
    let s = ApiServer::start(ApiServerOptions {
        bookmark_interval: Duration::from_millis(200),
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let x = cms
        .create(&PostParams::default(), &cm("b", &[]))
        .await
        .unwrap();
    let mut stream = cms
        .watch(
            &WatchParams::default().timeout(5),
            &x.resource_version().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => {
            assert!(
                b.metadata.resource_version.parse::<u64>().unwrap()
                    >= x.resource_version().unwrap().parse().unwrap()
            );
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }

    // Streaming list (sendInitialEvents): every object, then the initial-events-end bookmark.
    for i in 0..3 {
        cms.create(&PostParams::default(), &cm(&format!("s{i}"), &[]))
            .await
            .unwrap();
    }
    let mut w = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut init = Vec::new();
    loop {
        match w.try_next().await.unwrap().unwrap() {
            watcher::Event::Init => {}
            watcher::Event::InitApply(o) => init.push(o.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    init.sort();
    assert_eq!(init, ["b", "s0", "s1", "s2"]);
    cms.create(&PostParams::default(), &cm("live", &[]))
        .await
        .unwrap();
    match w.try_next().await.unwrap().unwrap() {
        watcher::Event::Apply(o) => assert_eq!(o.name_any(), "live"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_selectors_follow_objects_in_and_out() {
    let (_s, c) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let x = cms
        .create(&PostParams::default(), &cm("sel", &[("app", "a")]))
        .await
        .unwrap();
    let mut stream = cms
        .watch(
            &WatchParams::default().labels("app=a").timeout(5),
            &x.resource_version().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    cms.patch(
        "sel",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "b"}}})),
    )
    .await
    .unwrap();
    cms.patch(
        "sel",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "a"}}})),
    )
    .await
    .unwrap();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => assert_eq!(o.labels()["app"], "a", "the last matching state"),
        other => panic!("expected DELETED, got {other:?}"),
    }
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(o) => assert_eq!(o.labels()["app"], "a"),
        other => panic!("expected ADDED, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_watches_see_only_their_pods() {
    let (s, c) = start().await;
    s.set_graceful_pod_deletion(false);
    let all: Api<Pod> = Api::all(c.clone());
    let pods: Api<Pod> = Api::default_namespaced(c.clone());
    let mut n1 = all
        .watch(
            &WatchParams::default()
                .fields("spec.nodeName=n1")
                .timeout(10),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    pods.create(&PostParams::default(), &pod("elsewhere", Some("n2")))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("unbound", None))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("here", Some("n1")))
        .await
        .unwrap();
    // Binding moves a pod onto the node: the node's watch sees it arrive.
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "unbound"}, "target": {"kind": "Node", "name": "n1"}});
    let req = axum::http::Request::post("/api/v1/namespaces/default/pods/unbound/binding")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    let _: Value = c.request(req).await.unwrap();
    pods.delete("elsewhere", &DeleteParams::default())
        .await
        .unwrap();
    pods.delete("here", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match stream_next(&mut n1).await {
            WatchEvent::Added(p) => seen.push(format!("ADDED {}", p.name_any())),
            WatchEvent::Deleted(p) => seen.push(format!("DELETED {}", p.name_any())),
            WatchEvent::Modified(p) => seen.push(format!("MODIFIED {}", p.name_any())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["ADDED here", "ADDED unbound", "DELETED here"]);
}

async fn stream_next<S>(s: &mut S) -> WatchEvent<Pod>
where
    S: futures::Stream<Item = Result<WatchEvent<Pod>, kube::Error>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .expect("an event in time")
        .unwrap()
        .expect("stream open")
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_schema_and_cel_validation() {
    let (_s, c) = start().await;
    let bjs = bj_api(&c);
    let err = api_error(
        bjs.create(&PostParams::default(), &bj("bad", json!({"time": "1h"})))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "BatchJob.muster.dev \"bad\" is invalid: spec.time: Invalid value: \"1h\": time must be MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED (e.g. 30, \"4:00:00\" or \"2-00:00:00\")"
    );

    // Schema errors and rules on the whole spec, all reported.
    let err = api_error(
        bjs.create(
            &PostParams::default(),
            &bj(
                "bad2",
                json!({"cpusPerTask": 0, "mem": "1G", "memPerCpu": "2G"}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert!(err.message.contains("spec.cpusPerTask: Invalid value: 0: spec.cpusPerTask in body should be greater than or equal to 1"), "{}", err.message);
    assert!(
        err.message.contains("mutually exclusive"),
        "{}",
        err.message
    );

    // Unknown fields are pruned (with a warning); Strict refuses them.
    let ok = bjs
        .create(
            &PostParams::default(),
            &bj("ok", json!({"time": 30, "bogus": 1})),
        )
        .await
        .unwrap();
    assert!(ok.data["spec"].get("bogus").is_none());
    let strict = axum::http::Request::post(
        "/apis/muster.dev/v1alpha1/namespaces/default/batchjobs?fieldValidation=Strict",
    )
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&bj("ok2", json!({"time": 30, "bogus": 1}))).unwrap())
    .unwrap();
    let err = api_error(c.request::<Value>(strict).await.unwrap_err());
    assert_eq!(err.code, 400);
    assert!(
        err.message.contains("unknown field \"spec.bogus\""),
        "{}",
        err.message
    );

    // Updates are validated too, and so are status writes.
    let err = api_error(
        bjs.patch(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"time": "soon"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    let err = api_error(
        bjs.patch_status(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"numNodes": "many"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(err.message.contains("status.numNodes"), "{}", err.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_are_served_when_created_and_cleaned_up_when_deleted() {
    let s = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let c = s.client();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(c.clone());
    let crd = muster_crds::crds()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some("batchjobs.muster.dev"))
        .unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    let conds = created.status.unwrap().conditions.unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    let disc = kube::Discovery::new(c.clone()).run().await.unwrap();
    assert!(disc.groups().any(|g| g.name() == "muster.dev"));

    let bjs = bj_api(&c);
    bjs.create(&PostParams::default(), &bj("x", json!({"time": 30})))
        .await
        .unwrap();
    crds.delete("batchjobs.muster.dev", &DeleteParams::default())
        .await
        .unwrap();
    eventually("CRD and its objects gone", || async {
        crds.get_opt("batchjobs.muster.dev")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    let err = api_error(bjs.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(err.code, 404);

    // A CRD with a rule that does not compile is refused.
    let mut bad = serde_json::to_value(&crd).unwrap();
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        json!([{"rule": "self.(("}]);
    let bad: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition = serde_json::from_value(bad).unwrap();
    let err = api_error(crds.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(err.code, 422);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_recorded_through_events_k8s_io_show_as_core_events() {
    let (_s, c) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    let x = cms
        .create(&PostParams::default(), &cm("ev", &[]))
        .await
        .unwrap();
    let recorder = kube::runtime::events::Recorder::new(c.clone(), "muster-test".into());
    recorder
        .publish(
            &kube::runtime::events::Event {
                type_: kube::runtime::events::EventType::Normal,
                reason: "Tested".into(),
                note: Some("hello".into()),
                action: "Test".into(),
                secondary: None,
            },
            &x.object_ref(&()),
        )
        .await
        .unwrap();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(c.clone());
    let l = events
        .list(&ListParams::default().fields("involvedObject.name=ev,involvedObject.kind=ConfigMap"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1);
    assert_eq!(l.items[0].message.as_deref(), Some("hello"));
    assert_eq!(l.items[0].reason.as_deref(), Some("Tested"));
}

/// As kube-apiserver: an events.k8s.io/v1 Event may not carry the deprecated core/v1 fields
/// (so its core view has no `lastTimestamp`), while a core/v1 Event may carry both
/// `eventTime` and `lastTimestamp`, and then names its reporting controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_k8s_io_refuses_deprecated_fields_and_core_events_carry_both() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event as V1Event;
    let (_s, c) = start().await;
    let v1: Api<V1Event> = Api::default_namespaced(c.clone());
    let mut ev: V1Event = serde_json::from_value(json!({
        "metadata": {"name": "e1"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "type": "Normal", "reason": "Tested", "action": "Test",
        "reportingController": "t", "reportingInstance": "t",
        "regarding": {"kind": "ConfigMap", "name": "x", "namespace": "default"},
        "deprecatedLastTimestamp": "2026-01-01T00:00:00Z"}))
    .unwrap();
    let err = v1.create(&PostParams::default(), &ev).await.unwrap_err();
    assert!(err.to_string().contains("deprecatedLastTimestamp"), "{err}");
    ev.deprecated_last_timestamp = None;
    v1.create(&PostParams::default(), &ev).await.unwrap();
    let core: Api<CoreEvent> = Api::default_namespaced(c.clone());
    assert_eq!(core.get("e1").await.unwrap().last_timestamp, None);

    let mut ce: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "e2"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "lastTimestamp": "2026-01-01T00:00:00Z", "firstTimestamp": "2026-01-01T00:00:00Z",
        "count": 1, "type": "Normal", "reason": "Tested", "message": "m",
        "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": "default"}}))
    .unwrap();
    let err = core.create(&PostParams::default(), &ce).await.unwrap_err();
    assert!(err.to_string().contains("reportingComponent"), "{err}");
    ce.reporting_component = Some("t".into());
    ce.reporting_instance = Some("t".into());
    ce.action = Some("Test".into());
    core.create(&PostParams::default(), &ce).await.unwrap();
    let back = core.get("e2").await.unwrap();
    assert!(back.last_timestamp.is_some() && back.event_time.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_and_metadata_for_kubectl_and_metadata_watchers() {
    let (_s, c) = start().await;
    let bjs = bj_api(&c);
    bjs.create(&PostParams::default(), &bj("t", json!({"time": 30})))
        .await
        .unwrap();
    bjs.patch_status(
        "t",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"jobId": 42, "state": "RUNNING"}})),
    )
    .await
    .unwrap();
    let req = axum::http::Request::get("/apis/muster.dev/v1alpha1/namespaces/default/batchjobs")
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let t: Value = c.request(req).await.unwrap();
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(&cols[..4], ["Name", "JobID", "Partition", "State"]);
    assert_eq!(t["rows"][0]["cells"][0], "t");
    assert_eq!(t["rows"][0]["cells"][1], 42);
    assert_eq!(t["rows"][0]["cells"][3], "RUNNING");
    let meta = bjs.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(meta.items[0].metadata.name.as_deref(), Some("t"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_injection() {
    let s = ApiServer::start(ApiServerOptions {
        seed: 7,
        ..Default::default()
    })
    .await
    .unwrap();
    // Without kube-rs' own retries of 429/503/504, to see every injected answer.
    let mut cfg = s.config();
    cfg.default_retry = false;
    let c = Client::try_from(cfg).unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(c.clone());
    s.faults().error_rate(503, 0.5, Verbs::Writes);
    let mut failures = 0;
    for i in 0..40 {
        match cms
            .create(&PostParams::default(), &cm(&format!("f{i}"), &[]))
            .await
        {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(api_error(e).code, 503);
                failures += 1;
            }
        }
    }
    assert!(
        (8..=32).contains(&failures),
        "about half the writes fail: {failures}"
    );
    cms.list(&ListParams::default())
        .await
        .expect("reads are not affected");
    s.faults().clear();
    s.faults().add(
        FaultRule::new(429, 1.0)
            .verbs(Verbs::Only(vec!["get".into()]))
            .resource("configmaps"),
    );
    assert_eq!(api_error(cms.get("f0").await.unwrap_err()).code, 429);
    s.faults().clear();

    // Latency.
    s.faults().latency(Duration::from_millis(150));
    let t = std::time::Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    assert!(t.elapsed() >= Duration::from_millis(150));
    s.faults().clear();

    // A paused server holds requests until resumed.
    s.faults().pause();
    let cms2 = cms.clone();
    let pending = tokio::spawn(async move {
        cms2.list(&ListParams::default())
            .await
            .map(|l| l.items.len())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pending.is_finished());
    s.faults().resume();
    assert!(pending.await.unwrap().is_ok());

    // Dropped watches end the stream.
    let mut w = cms
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();
    // Drain the initial ADDED events.
    let n = cms.list(&ListParams::default()).await.unwrap().items.len();
    for _ in 0..n {
        w.try_next().await.unwrap().unwrap();
    }
    s.faults().drop_watches();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), w.try_next())
            .await
            .unwrap()
            .unwrap()
            .is_none()
    );

    // A drop rate of 1 ends each stream after its first event.
    s.faults().watch_drop_rate(1.0);
    let latest = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut w = cms
        .watch(&WatchParams::default().timeout(30), &latest)
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm("drop1", &[]))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("drop2", &[]))
        .await
        .unwrap();
    assert!(matches!(
        w.try_next().await.unwrap(),
        Some(WatchEvent::Added(_))
    ));
    assert!(
        tokio::time::timeout(Duration::from_secs(5), w.try_next())
            .await
            .unwrap()
            .unwrap()
            .is_none()
    );
    s.faults().clear();

    // Same seed, same failures.
    let pattern = |seed| {
        let s = &s;
        let cms = cms.clone();
        async move {
            s.faults().clear();
            s.faults().reseed(seed);
            s.faults().error_rate(500, 0.3, Verbs::All);
            let mut out = Vec::new();
            for _ in 0..20 {
                out.push(cms.get_opt("f0").await.is_err());
            }
            out
        }
    };
    assert_eq!(pattern(11).await, pattern(11).await);
}
