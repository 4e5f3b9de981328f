//! Throughput of the simulated cluster's scheduler and kubelet: pods created, bound and (with
//! the kubelet) run to Succeeded per second, for batches of 1,000 pods on the 128-node
//! superpod spec. The figure criterion prints as `thrpt` is pods/s.
//!
//! After criterion's figures it prints, for 1,000 and 10,000 pods, the wall-clock rate and the
//! CPU time the whole process (API server double, scheduler, kubelet and the client creating
//! the pods) spent per pod — the figure that does not depend on what else the machine runs.
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

/// CPU time (user + system) of this process, from `/proc/self/stat` (USER_HZ is 100 on Linux).
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

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
    round_of(c, PODS, done).await
}

async fn round_of(c: &TestCluster, n: usize, done: impl Fn(&TestCluster) -> u64) -> Duration {
    let pods: Api<Pod> = Api::namespaced(c.client(), "default");
    let t0 = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &pod(i)).await.unwrap() }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    while done(c) < n as u64 {
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "stuck at {}",
            done(c)
        );
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

/// Wall-clock rate and CPU per pod for `n` pods bound and run.
fn figures(n: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = TestCluster::simulated(opts(true)).await.unwrap();
        let cpu0 = cpu_time();
        let wall = round_of(&c, n, |c| {
            c.kubelet_stats().unwrap().finished.load(Ordering::Relaxed)
        })
        .await;
        let cpu = cpu_time().zip(cpu0).map(|(b, a)| b.saturating_sub(a));
        println!(
            "{n} pods created, bound and run to Succeeded on 128 nodes: {:.2} s, {:.0} pods/s; CPU {} ({} per pod)",
            wall.as_secs_f64(),
            n as f64 / wall.as_secs_f64(),
            cpu.map_or("n/a".into(), |c| format!("{:.2} s", c.as_secs_f64())),
            cpu.map_or("n/a".into(), |c| format!("{:.2} ms", c.as_secs_f64() * 1000.0 / n as f64)),
        );
        c.shutdown().await;
    });
}

fn printed(_: &mut Criterion) {
    figures(1_000);
    figures(10_000);
}

criterion_group!(benches, bench, printed);
criterion_main!(benches);
