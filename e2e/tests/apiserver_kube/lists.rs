//! Lists and watches: selectors, pagination, resumed and expired watches, the watcher's
//! recovery, bookmarks and streaming lists, node-scoped watches.

use super::*;

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
    // Ended by the 1 s timeout, not by the test's own deadline.
    assert!(started.elapsed() < Duration::from_secs(30));
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
