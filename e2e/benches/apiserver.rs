//! Figures for the API server double: sustained writes through kube-rs, fan-out to 1,000
//! concurrent watches, and the memory 100,000 pods take. Run with
//! `cargo bench -p muster-e2e --bench apiserver` (add `-- --quick` for a smaller run). The
//! clients run in the same process and share its cores with the server, so the figures are a
//! lower bound for the server alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use muster_e2e::apiserver::{ApiServer, ApiServerOptions};
use serde_json::json;

/// mimalloc for the test control plane in this benchmark's process: the API server double,
/// the scheduler stand-in and the kubelet decode, copy and drop JSON values per request, and
/// glibc's malloc spent ~15% of their CPU on it. (Set per binary: the `muster` CLI links the
/// same library with its own counting allocator.)
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|kb| kb.parse::<u64>().ok())
            })
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("job-{}-task-{}", i / 8, i % 8), "namespace": "default",
            "labels": {"muster.dev/job": format!("job-{}", i / 8), "muster.dev/rank": (i % 8).to_string()},
            "annotations": {"muster.dev/placement": "rack-1/switch-3"}},
        "spec": {
            "schedulerName": "default-scheduler",
            "nodeSelector": {"muster.dev/partition": "a100"},
            "containers": [{"name": "task", "image": "pytorch/pytorch:2.4.0",
                "command": ["/bin/bash", "-c", "torchrun train.py"],
                "env": [{"name": "RANK", "value": (i % 8).to_string()}, {"name": "WORLD_SIZE", "value": "8"},
                        {"name": "MASTER_ADDR", "value": format!("job-{}-task-0", i / 8)}],
                "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}}}]
        }
    }))
    .expect("valid pod")
}

async fn sustained_writes(s: &ApiServer, total: usize, concurrency: usize) {
    let client = s.client();
    let done = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < total {
                let cm: ConfigMap =
                    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("w{i}")}, "data": {"k": "v"}}))
                    .unwrap();
                cms.create(&PostParams::default(), &cm)
                    .await
                    .expect("create");
                done.fetch_add(1, Ordering::Relaxed);
                i += concurrency;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let creates = total as f64 / t.elapsed().as_secs_f64();

    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while i < total {
                cms.patch(
                    &format!("w{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"k": "v2"}})),
                )
                .await
                .expect("patch");
                i += concurrency;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let patches = total as f64 / t.elapsed().as_secs_f64();
    println!(
        "writes via kube-rs, {concurrency} concurrent clients: {creates:.0} creates/s, {patches:.0} merge patches/s ({total} each)"
    );
}

/// 1,000 per-node pod watches (`spec.nodeName=node-i`, as kubelets keep) while pods are
/// created on those nodes: every watch must get exactly its own pods.
async fn node_watches(s: &ApiServer, nodes: usize, pods_total: usize) {
    let client = s.client();
    let rv = s.resource_version().to_string();
    let ready = Arc::new(tokio::sync::Barrier::new(nodes + 1));
    let per_node = pods_total / nodes;
    let mut handles = Vec::new();
    for n in 0..nodes {
        let client = client.clone();
        let ready = ready.clone();
        let rv = rv.clone();
        handles.push(tokio::spawn(async move {
            let req = axum::http::Request::get(format!(
                "/api/v1/pods?watch=true&resourceVersion={rv}&timeoutSeconds=290&fieldSelector=spec.nodeName%3Dnode-{n}"
            ))
            .body(Vec::new())
            .unwrap();
            let resp = client.send(req.map(kube::client::Body::from)).await.expect("watch starts");
            ready.wait().await;
            let mut body = resp.into_body();
            let mut seen = 0usize;
            while seen < per_node {
                match tokio::time::timeout(Duration::from_secs(60), body.frame()).await {
                    Ok(Some(Ok(f))) => {
                        if let Some(d) = f.data_ref() {
                            seen += d.iter().filter(|b| **b == b'\n').count();
                        }
                    }
                    _ => break,
                }
            }
            seen
        }));
    }
    ready.wait().await;
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..pods_total)
            .map(|i| {
                let mut p = serde_json::to_value(pod(1_000_000 + i)).unwrap();
                p["spec"]["nodeName"] = json!(format!("node-{}", i % nodes));
                serde_json::to_vec(&p).unwrap()
            })
            .collect(),
    );
    let t = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let client = client.clone();
        let next = next.clone();
        let bodies = bodies.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= bodies.len() {
                    break;
                }
                let req = axum::http::Request::post("/api/v1/namespaces/default/pods")
                    .header("content-type", "application/json")
                    .body(bodies[i].clone())
                    .unwrap();
                client.request_text(req).await.expect("create pod");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let writes = t.elapsed();
    let mut complete = 0;
    for h in handles {
        if h.await.unwrap() == per_node {
            complete += 1;
        }
    }
    println!(
        "{nodes} per-node pod watches: {pods_total} pods created through raw HTTP (JSON bodies, responses not decoded) at {:.0} pods/s; {complete}/{nodes} watches got exactly their {per_node} pods after {:.2}s",
        pods_total as f64 / writes.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
}

async fn watch_fanout(s: &ApiServer, watchers: usize, writes: usize) {
    let client = s.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-public");
    let start_rv = s.resource_version().to_string();
    let received = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    let ready = Arc::new(tokio::sync::Barrier::new(watchers + 1));
    for _ in 0..watchers {
        let client = client.clone();
        let received = received.clone();
        let rv = start_rv.clone();
        let ready = ready.clone();
        handles.push(tokio::spawn(async move {
            // A raw watch stream: count events without decoding them, so the figure is the
            // server's fan-out rather than 1,000 JSON decoders sharing two cores.
            let req = axum::http::Request::get(format!(
                "/api/v1/namespaces/kube-public/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=300"
            ))
            .body(Vec::new())
            .unwrap();
            let resp = client.send(req.map(kube::client::Body::from)).await.expect("watch starts");
            ready.wait().await;
            let mut body = resp.into_body();
            let mut seen = 0usize;
            while seen < writes {
                match body.frame().await {
                    Some(Ok(f)) => {
                        if let Some(d) = f.data_ref() {
                            let n = d.iter().filter(|b| **b == b'\n').count();
                            seen += n;
                            received.fetch_add(n as u64, Ordering::Relaxed);
                        }
                    }
                    _ => break,
                }
            }
            seen
        }));
    }
    ready.wait().await;
    let t = Instant::now();
    let writers = 16;
    let mut ws = Vec::new();
    for w in 0..writers {
        let cms = cms.clone();
        ws.push(tokio::spawn(async move {
            let mut i = w;
            while i < writes {
                let cm: ConfigMap =
                    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("fan{i}")}, "data": {"payload": "x".repeat(512)}}))
                    .unwrap();
                cms.create(&PostParams::default(), &cm)
                    .await
                    .expect("create");
                i += writers;
            }
        }));
    }
    for w in ws {
        w.await.unwrap();
    }
    let write_time = t.elapsed();
    let mut complete = 0;
    for h in handles {
        if h.await.unwrap() >= writes {
            complete += 1;
        }
    }
    let total = t.elapsed();
    let delivered = received.load(Ordering::Relaxed);
    println!(
        "{watchers} concurrent watches x {writes} writes (16 writers): {complete}/{watchers} watches got every event; {delivered} events delivered in {:.2}s ({:.0} events/s; the writes took {:.2}s, {:.0} writes/s)",
        total.as_secs_f64(),
        delivered as f64 / total.as_secs_f64(),
        write_time.as_secs_f64(),
        writes as f64 / write_time.as_secs_f64()
    );

    // The same through kube-rs watchers (decoding every event), on 100 of them.
    let n = watchers.min(100);
    let rv = s.resource_version().to_string();
    let mut handles = Vec::new();
    for _ in 0..n {
        let cms = cms.clone();
        let rv = rv.clone();
        handles.push(tokio::spawn(async move {
            let mut st = cms
                .watch(&kube::api::WatchParams::default().timeout(290), &rv)
                .await
                .unwrap()
                .boxed();
            let mut seen = 0;
            while seen < 200 {
                match st.next().await {
                    Some(Ok(kube::api::WatchEvent::Added(_))) => seen += 1,
                    Some(Ok(_)) => {}
                    _ => break,
                }
            }
            seen
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    for i in 0..200 {
        let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("kr{i}")}, "data": {"payload": "x".repeat(512)}}))
        .unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let mut ok = 0;
    for h in handles {
        if h.await.unwrap() == 200 {
            ok += 1;
        }
    }
    println!(
        "{n} kube-rs watches x 200 writes: {ok}/{n} complete in {:.2}s ({:.0} decoded events/s)",
        t.elapsed().as_secs_f64(),
        (n * 200) as f64 / t.elapsed().as_secs_f64()
    );
}

async fn memory(s: &ApiServer, pods: usize, concurrency: usize) {
    let client = s.client();
    let before = rss_bytes();
    let t = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = client.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= pods {
                    break;
                }
                let req = axum::http::Request::post("/api/v1/namespaces/default/pods")
                    .header("content-type", "application/json")
                    .body(serde_json::to_vec(&pod(i)).unwrap())
                    .unwrap();
                client.request_text(req).await.expect("create pod");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let took = t.elapsed();
    let after = rss_bytes();
    let per = (after.saturating_sub(before)) as f64 / pods as f64;
    println!(
        "{pods} pods created through raw HTTP in {:.1}s ({:.0} pods/s); RSS {:.0} MiB -> {:.0} MiB ({:.0} MiB for the pods, {per:.0} bytes/pod)",
        took.as_secs_f64(),
        pods as f64 / took.as_secs_f64(),
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        (after.saturating_sub(before)) as f64 / 1048576.0
    );
    let api: Api<Pod> = Api::default_namespaced(client.clone());
    let t = Instant::now();
    let lp = kube::api::ListParams::default().labels("muster.dev/job=job-77");
    let l = api.list(&lp).await.unwrap();
    println!(
        "label-selected list over {pods} pods: {} items in {:.1} ms",
        l.items.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let req = axum::http::Request::get("/api/v1/namespaces/default/pods")
        .body(Vec::new())
        .unwrap();
    let body = client.request_text(req).await.unwrap();
    println!(
        "full list of {pods} pods ({:.0} MiB of JSON, not decoded): {:.2}s",
        body.len() as f64 / 1048576.0,
        t.elapsed().as_secs_f64()
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let s = ApiServer::start(ApiServerOptions::default().with_muster_crds())
            .await
            .expect("server");
        let base = rss_bytes();
        println!(
            "API server double on {} (RSS at start {:.0} MiB)",
            s.url(),
            base as f64 / 1048576.0
        );
        sustained_writes(&s, if quick { 5_000 } else { 30_000 }, 64).await;
        node_watches(&s, 1000, if quick { 5_000 } else { 20_000 }).await;
        watch_fanout(&s, 1000, if quick { 100 } else { 500 }).await;
        s.shutdown().await;
        let s = ApiServer::start(ApiServerOptions::default())
            .await
            .expect("server");
        memory(&s, if quick { 10_000 } else { 100_000 }, 64).await;
        s.shutdown().await;
    });
}
