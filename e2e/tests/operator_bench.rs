//! The operator's benchmark on the test control plane. It prints figures; it asserts nothing
//! about time (targets are judged from the printout, not by a timed test). Run it with
//!
//! ```sh
//! cargo test --release -p muster-e2e --test operator_bench -- --ignored --nocapture
//! ```
//!
//! which first builds `muster-operator` in release (`cargo build`, a no-op when it is fresh,
//! so the figures are never those of a stale binary) unless `$MUSTER_OPERATOR_BIN` names one.
//!
//! The operator runs as its own process (`target/release/muster-operator`, or
//! `$MUSTER_OPERATOR_BIN`) against the API server double, so its resident memory is its own.
//! On 4,096 nodes x 8 GPUs (128 leaves of 32) it measures:
//! 1. 1,000 queued single-GPU jobs: jobs started per second (status RUNNING written and the
//!    pod created);
//! 2. 100 gangs of 32 pods (4 nodes x 8 tasks x 1 GPU): gangs and pods started per second;
//! 3. 1,432 more 32-pod CPU-only gangs, to 50,024 task pods: operator RSS;
//!
//! It also reports API writes per job by kind (from the operator's own `muster_api_writes_total`).
//!
//! Each figure is measured twice, on two fresh control planes: GPU binding by
//! `NVIDIA_VISIBLE_DEVICES` (`env`: the server does not serve `resource.k8s.io`) and by
//! ResourceClaims (`dra`: the server serves `resource.k8s.io/v1`, every node publishes the
//! NVIDIA DRA driver's ResourceSlice, a claim per GPU pod). `MUSTER_E2E_BINDING=env|dra` runs
//! one of them only.

mod operator_support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, GpuNode, JobState, Partition};
use muster_e2e::apiserver::{ApiServer, ApiServerOptions};
use serde_json::json;

fn operator_bin() -> PathBuf {
    if let Ok(p) = std::env::var("MUSTER_OPERATOR_BIN") {
        return p.into();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    // `cargo test` sets CARGO to the cargo running it; the build shares its target dir.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "muster-operator",
            "--bin",
            "muster-operator",
        ])
        .current_dir(&root)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building muster-operator failed");
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    target.join("release").join("muster-operator")
}

fn rss_kib(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

async fn scrape(port: u16) -> String {
    let mut s = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(s) => s,
        Err(_) => return String::new(),
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = s
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out
}

fn writes(metrics: &str) -> BTreeMap<String, f64> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("muster_api_writes_total{kind=\""))
        .filter_map(|l| {
            let (k, rest) = l.split_once('"')?;
            let v: f64 = rest.trim_start_matches('}').trim().parse().ok()?;
            Some((k.to_string(), v))
        })
        .collect()
}

/// Scrapes until the operator's write counters show at least `pods` pod creations and `jobs`
/// status writes (they are recorded when a cycle's writes are done, which can be after the
/// watches have shown the pods), then returns them.
async fn settled_writes(port: u16, pods: f64, jobs: f64) -> BTreeMap<String, f64> {
    let t = Instant::now();
    loop {
        let w = writes(&scrape(port).await);
        let got = |k: &str| w.get(k).copied().unwrap_or(0.0);
        if (got("pod_create") >= pods && got("status") >= jobs)
            || t.elapsed() > Duration::from_secs(120)
        {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Operator(Child);
impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Counts BatchJobs in RUNNING (or later) and task pods, through watches.
struct Progress {
    started: tokio::sync::watch::Receiver<(usize, usize)>,
}

fn progress(client: kube::Client) -> Progress {
    let (tx, rx) = tokio::sync::watch::channel((0usize, 0usize));
    let jobs = watcher(
        Api::<BatchJob>::all(client.clone()),
        watcher::Config::default(),
    );
    let pods = watcher(
        Api::<Pod>::all(client),
        watcher::Config::default().labels(labels::BATCHJOB),
    );
    let (jr, jw) = kube::runtime::reflector::store::<BatchJob>();
    let (pr, pw) = kube::runtime::reflector::store::<Pod>();
    let jobs = jobs
        .modify(|j: &mut BatchJob| {
            j.metadata.managed_fields = None;
            j.spec.template = None;
        })
        .reflect(jw)
        .boxed();
    let pods = pods
        .modify(|p: &mut Pod| {
            p.spec = None;
            p.metadata.managed_fields = None;
            p.metadata.annotations = None;
        })
        .reflect(pw)
        .boxed();
    tokio::spawn(async move {
        let mut both = futures::stream::select(jobs.map(|_| ()), pods.map(|_| ()));
        while both.next().await.is_some() {
            let n = jr
                .state()
                .iter()
                .filter(|j| {
                    j.status
                        .as_ref()
                        .and_then(|s| s.state)
                        .is_some_and(|s| s != JobState::Pending)
                })
                .count();
            let _ = tx.send((n, pr.len()));
        }
    });
    Progress { started: rx }
}

impl Progress {
    async fn until(&mut self, jobs: usize, pods: usize, limit: Duration) -> Duration {
        let t = Instant::now();
        while t.elapsed() < limit {
            let (j, p) = *self.started.borrow();
            if j >= jobs && p >= pods {
                return t.elapsed();
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), self.started.changed()).await;
        }
        let (j, p) = *self.started.borrow();
        panic!("timed out: {j}/{jobs} jobs, {p}/{pods} pods after {limit:?}");
    }
}

async fn create_many<T>(api: &Api<T>, objs: Vec<T>, concurrency: usize)
where
    T: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    futures::stream::iter(objs)
        .for_each_concurrent(concurrency, |o| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &o).await.unwrap();
            }
        })
        .await;
}

fn job(name: &str, spec: serde_json::Value) -> BatchJob {
    let mut spec = spec;
    spec["script"] = json!("python train.py --epochs 10");
    serde_json::from_value(
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
async fn operator_benchmark() {
    let bin = operator_bin();
    assert!(
        bin.exists(),
        "{} not found (set MUSTER_OPERATOR_BIN to the operator binary)",
        bin.display()
    );
    let modes: Vec<bool> = match std::env::var(muster_e2e::cluster::BINDING_ENV) {
        Ok(_) => vec![muster_e2e::cluster::dra_from_env()],
        Err(_) => vec![false, true],
    };
    for dra in modes {
        println!(
            "=== GPU binding: {} ===",
            if dra {
                "dra (ResourceClaims)"
            } else {
                "env (NVIDIA_VISIBLE_DEVICES)"
            }
        );
        bench(&bin, dra).await;
    }
}

async fn bench(bin: &std::path::Path, dra: bool) {
    let mut opts = ApiServerOptions::default().with_muster_crds();
    opts.features.dra = dra;
    let server = ApiServer::start(opts).await.unwrap();
    server.set_watch_window(200_000);
    let client = server.client();
    let ns: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "muster-system"}}),
    )
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();

    // 4,096 nodes x 8 GPUs: 128 leaves of 32 nodes under 4 spines.
    let t = Instant::now();
    let nodes = 4096usize;
    let napi: Api<Node> = Api::all(client.clone());
    let gapi: Api<GpuNode> = Api::all(client.clone());
    let names: Vec<String> = (1..=nodes).map(|i| format!("gpu{i:04}")).collect();
    let node_objs: Vec<Node> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n,
                    "muster.dev/leaf": format!("leaf{}", i / 32 + 1),
                    "muster.dev/spine": format!("spine{}", i / 1024 + 1)}}}))
            .unwrap()
        })
        .collect();
    create_many(&napi, node_objs, 64).await;
    let gpu_objs: Vec<GpuNode> = names
        .iter()
        .map(|n| {
            serde_json::from_value(
                json!({"apiVersion": "muster.dev/v1alpha1", "kind": "GpuNode",
                "metadata": {"name": n}, "spec": {"nodeName": n}}),
            )
            .unwrap()
        })
        .collect();
    create_many(&gapi, gpu_objs, 64).await;
    futures::stream::iter(names.clone())
        .for_each_concurrent(64, |n| {
            let (napi, gapi) = (napi.clone(), gapi.clone());
            async move {
                napi.patch_status(
                    &n,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                    "allocatable": {"cpu": "224", "memory": "2Ti", "pods": "1000"},
                    "conditions": [{"type": "Ready", "status": "True"}]}})),
                )
                .await
                .unwrap();
                let gpus: Vec<_> = (0..8)
                    .map(|i| {
                        json!({"index": i, "uuid": format!("GPU-{n}-{i}"),
                        "model": "NVIDIA H100 80GB HBM3", "memoryMib": 81559, "numaNode": i / 4,
                        "nvlinkPeers": (0..8).filter(|j| *j != i).collect::<Vec<_>>(),
                        "health": {"state": "Healthy"}})
                    })
                    .collect();
                gapi.patch_status(
                    &n,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                    "gpuCount": 8, "healthyGpus": 8, "gpus": gpus}})),
                )
                .await
                .unwrap();
            }
        })
        .await;
    if dra {
        // The NVIDIA DRA driver: its DeviceClass and each node's slice (the GpuNodes' UUIDs).
        use muster_operator::core::cluster_spec::{GpuInfo, NodeInfo};
        let infos: Vec<NodeInfo> = names
            .iter()
            .map(|n| NodeInfo {
                name: n.clone(),
                labels: Default::default(),
                cpu_millis: 224_000,
                memory_mib: 2 << 20,
                taints: vec![],
                gpus: (0..8)
                    .map(|i| GpuInfo {
                        index: i,
                        uuid: format!("GPU-{n}-{i}"),
                        model: "NVIDIA H100 80GB HBM3".into(),
                        memory_mib: 81559,
                        numa_node: Some((i / 4) as i32),
                        nvlink_peers: vec![],
                        pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i * 0x10),
                    })
                    .collect(),
                topology: vec![],
            })
            .collect();
        muster_e2e::dra::publish(&client, &infos, Default::default(), 64)
            .await
            .unwrap();
    }
    let p: Partition = serde_json::from_value(json!({"apiVersion": "muster.dev/v1alpha1",
        "kind": "Partition", "metadata": {"name": "gpu"},
        "spec": {"default": true, "defaultImage": "nvcr.io/nvidia/pytorch:24.01-py3",
                 "topology": ["muster.dev/spine", "muster.dev/leaf", "kubernetes.io/hostname"]}}))
    .unwrap();
    Api::<Partition>::all(client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
    println!(
        "cluster: {nodes} nodes x 8 GPUs created in {:.1?}",
        t.elapsed()
    );

    let jobs: Api<BatchJob> = Api::namespaced(client.clone(), "default");
    let mut prog = progress(client.clone());

    // 1. 1,000 queued single-GPU jobs.
    let singles: Vec<BatchJob> = (0..1000)
        .map(|i| {
            job(
                &format!("single-{i}"),
                json!({"gpus": 1, "time": "1:00:00"}),
            )
        })
        .collect();
    create_many(&jobs, singles, 64).await;
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    server.write_kubeconfig(kubeconfig.path()).unwrap();
    let port = 18000 + (std::process::id() % 1000) as u16 * 2 + u16::from(dra);
    let t_start = Instant::now();
    let child = Command::new(bin)
        .args([
            "--namespace",
            "muster-system",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--gang-start-timeout",
            "1h",
            "--identity",
            "bench",
        ])
        .env("KUBECONFIG", kubeconfig.path())
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let op = Operator(child);
    let pid = op.0.id();
    // Time to the first start (operator start, cache sync, first cycle), then the rate.
    let first = prog.until(1, 1, Duration::from_secs(120)).await;
    let rest = prog.until(1000, 1000, Duration::from_secs(300)).await;
    let all = first + rest;
    println!(
        "1,000 single-GPU jobs: all started {:.2?} after the operator process started \
         (first start after {:.2?}); {:.0} jobs/s overall, {:.0} jobs/s after the first",
        all,
        first,
        1000.0 / all.as_secs_f64(),
        999.0 / rest.as_secs_f64().max(1e-9)
    );
    let w1 = settled_writes(port, 1000.0, 1000.0).await;
    let (rss, _) = rss_kib(pid);
    println!("  operator RSS {:.0} MiB", rss as f64 / 1024.0);
    let total1: f64 = w1
        .iter()
        .filter(|(k, _)| {
            *k != "event" && *k != "partition_status" && *k != "lease" && *k != "configmap"
        })
        .map(|(_, v)| v)
        .sum();
    println!(
        "  writes per job (excluding events): {:.2} (pods + {:.2}); by kind: {w1:?}",
        total1 / 1000.0,
        total1 / 1000.0 - 1.0
    );
    if dra {
        let claims = Api::<muster_operator::controller::dra::ResourceClaim>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        println!("  ResourceClaims in the API: {claims}");
    }

    // 2. 100 gangs of 32 pods.
    let gangs: Vec<BatchJob> = (0..100)
        .map(|i| {
            job(
                &format!("gang-{i}"),
                json!({"nodes": 4, "ntasksPerNode": 8, "gpusPerTask": 1, "time": "1:00:00"}),
            )
        })
        .collect();
    let t = Instant::now();
    create_many(&jobs, gangs, 64).await;
    let submitted = t.elapsed();
    let dt = prog
        .until(1100, 1000 + 3200, Duration::from_secs(300))
        .await
        + submitted;
    println!(
        "100 gangs of 32 pods: started in {:.2?} from first submission: {:.0} gangs/s, {:.0} pods/s",
        dt,
        100.0 / dt.as_secs_f64(),
        3200.0 / dt.as_secs_f64()
    );
    let w2 = settled_writes(port, 1000.0 + 3200.0, 1100.0).await;
    let (rss, _) = rss_kib(pid);
    println!("  operator RSS {:.0} MiB", rss as f64 / 1024.0);
    let delta: BTreeMap<String, f64> = w2
        .iter()
        .map(|(k, v)| (k.clone(), v - w1.get(k).copied().unwrap_or(0.0)))
        .collect();
    let total2: f64 = delta
        .iter()
        .filter(|(k, _)| {
            *k != "event" && *k != "partition_status" && *k != "lease" && *k != "configmap"
        })
        .map(|(_, v)| v)
        .sum();
    println!(
        "  writes per gang (excluding events): {:.2} (pods + {:.2}); by kind: {delta:?}",
        total2 / 100.0,
        total2 / 100.0 - 32.0
    );

    // 3. To 50,000 pods: CPU-only gangs of 32.
    let more: Vec<BatchJob> = (0..1432)
        .map(|i| {
            job(
                &format!("cpu-{i}"),
                json!({"nodes": 4, "ntasksPerNode": 8, "cpusPerTask": 1, "mem": "8G", "time": "1:00:00"}),
            )
        })
        .collect();
    let t = Instant::now();
    create_many(&jobs, more, 64).await;
    let dt = prog.until(2532, 50_024, Duration::from_secs(900)).await;
    println!(
        "1,432 CPU gangs of 32 (45,824 pods) started in {:.2?} ({:.0} pods/s)",
        t.elapsed(),
        45_824.0 / dt.as_secs_f64().max(1e-9)
    );
    settled_writes(port, 50_024.0, 2532.0).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (rss, hwm) = rss_kib(pid);
    println!(
        "operator memory at {nodes} nodes / 50,024 pods / 2,532 jobs: RSS {:.0} MiB (peak {:.0} MiB)",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    let m = scrape(port).await;
    let cycles: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("muster_scheduling_cycle_duration_seconds_"))
        .filter(|l| l.contains("_sum") || l.contains("_count"))
        .collect();
    println!("  cycle durations: {cycles:?}");
    println!("  total operator wall time {:.1?}", t_start.elapsed());
    let pods_in_api = Api::<Pod>::all(client.clone())
        .list_metadata(&ListParams::default().labels(labels::BATCHJOB))
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);
    println!("  task pods in the API: {pods_in_api}");
    drop(op);
}
