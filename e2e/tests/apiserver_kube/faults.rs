//! Fault injection: rules that make the API server fail chosen requests.

use super::*;

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

    // Dropped watches end the stream (long before the watch's own 290 s timeout).
    let mut w = cms
        .watch(&WatchParams::default().timeout(290), "0")
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
        tokio::time::timeout(Duration::from_secs(60), w.try_next())
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
        .watch(&WatchParams::default().timeout(290), &latest)
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
        tokio::time::timeout(Duration::from_secs(60), w.try_next())
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
