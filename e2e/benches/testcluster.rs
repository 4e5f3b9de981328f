//! Throughput of the simulated cluster's scheduler and kubelet: pods created, bound and (with
//! the kubelet) run to Succeeded per second, for batches of 1,000 pods on the 128-node
//! superpod spec. The figure criterion prints as `thrpt` is pods/s.
//!
//! `cargo bench -p muster-e2e --bench testcluster`

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use muster_e2e::kubelet::KubeletOptions;
use muster_e2e::scheduler::SchedulerOptions;
use muster_e2e::{TestCluster, TestClusterOptions};
use muster_operator::core::cluster_spec::ClusterSpec;
use serde_json::json;

const PODS: usize = 1000;

fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("bench-{i}"), "annotations": {"sim.muster.dev/run-seconds": "0"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    }))
    .unwrap()
}

/// Create `PODS` pods (64 creates in flight) and wait until `done()` reaches `PODS`.
async fn round(c: &TestCluster, done: impl Fn(&TestCluster) -> u64) -> Duration {
    let pods: Api<Pod> = Api::namespaced(c.client(), "default");
    let t0 = Instant::now();
    futures::stream::iter(0..PODS)
        .map(|i| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &pod(i)).await.unwrap() }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    while done(c) < PODS as u64 {
        assert!(t0.elapsed() < Duration::from_secs(120), "stuck at {}", done(c));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    t0.elapsed()
}

fn opts(kubelet: bool) -> TestClusterOptions {
    let mut o = TestClusterOptions::new(ClusterSpec::superpod());
    o.scheduler = Some(SchedulerOptions {
        scheduled_events: false,
        ..SchedulerOptions::default()
    });
    o.kubelet = kubelet.then(|| KubeletOptions {
        heartbeat: None,
        ..KubeletOptions::default()
    });
    o
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("testcluster");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(PODS as u64));
    g.bench_function("bind_1000_pods", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let c = TestCluster::simulated(opts(false)).await.unwrap();
                    total += round(&c, |c| {
                        c.scheduler_stats().unwrap().bound.load(Ordering::Relaxed)
                    })
                    .await;
                    c.shutdown().await;
                }
                total
            })
        })
    });
    g.bench_function("bind_and_run_1000_pods", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let c = TestCluster::simulated(opts(true)).await.unwrap();
                    total += round(&c, |c| {
                        c.kubelet_stats().unwrap().finished.load(Ordering::Relaxed)
                    })
                    .await;
                    c.shutdown().await;
                }
                total
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
