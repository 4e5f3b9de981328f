//! Shared pieces of the operator's end-to-end suites: the API server double with nodes,
//! GpuNodes and partitions, the operator started in-process, and a minimal kubelet stand-in
//! (binds and runs task pods by annotation) until the simulated nodes land.
//!
//! Task pods are driven by their template annotations: `sim/runtime` (seconds, default 5),
//! `sim/exit` and `sim/fail-rank` (a node pod, by node index, that exits with that code).
//!
//! GPU binding mode: with `MUSTER_E2E_BINDING=dra` the double serves `resource.k8s.io/v1`,
//! every node publishes the NVIDIA DRA driver's ResourceSlice (and the DeviceClass exists), so
//! partitions (`gpuBinding: auto`) bind by ResourceClaims; the kube-scheduler stand-in then
//! runs too (it allocates the claims, honouring their selectors, and binds the pods) and the
//! kubelet stand-in runs a pod only once it is bound. `MUSTER_E2E_GANG=v1alpha1|v1alpha2`
//! also serves Kubernetes' gang API. Unset (or `env`): no DRA, no scheduler stand-in.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, GpuNode, JobState, Partition};
use muster_e2e::apiserver::{ApiServer, ApiServerOptions};
use muster_e2e::cluster::{dra_from_env, gang_from_env};
use muster_e2e::scheduler::{Scheduler, SchedulerOptions};
use muster_operator::controller::dra::{DeviceClass, ResourceClaim, ResourceSlice};
use muster_operator::controller::metrics::Metrics;
use muster_operator::controller::{self, Clock, Handle, Settings};
use serde_json::json;

/// The operator's namespace in the tests.
pub const NS: &str = "muster-system";

pub struct Env {
    pub server: ApiServer,
    pub client: Client,
    pub offset: Arc<AtomicI64>,
    /// The cluster serves DRA (`MUSTER_E2E_BINDING=dra`).
    pub dra: bool,
    /// The kube-scheduler stand-in (DRA or gang mode).
    pub scheduler: Option<Scheduler>,
}

/// One node: name, GPUs, leaf; GPU model and extra labels optional.
#[derive(Clone, Default)]
pub struct NodeDef<'a> {
    pub name: &'a str,
    pub gpus: u32,
    pub leaf: &'a str,
    pub model: Option<&'a str>,
    pub labels: &'a [(&'a str, &'a str)],
}

impl<'a> NodeDef<'a> {
    pub fn new(name: &'a str, gpus: u32, leaf: &'a str) -> Self {
        NodeDef {
            name,
            gpus,
            leaf,
            ..Default::default()
        }
    }
}

/// `count` node names `gpu001…`, `per_leaf` to a leaf (`leaf1…`), with their leaf.
pub fn cluster(count: usize, per_leaf: usize) -> Vec<(String, String)> {
    (1..=count)
        .map(|i| {
            (
                format!("gpu{i:03}"),
                format!("leaf{}", (i - 1) / per_leaf + 1),
            )
        })
        .collect()
}

impl Env {
    pub async fn start() -> Env {
        Env::start_with(dra_from_env()).await
    }

    /// [`Env::start`] with DRA served and the NVIDIA driver installed (`dra`), or not,
    /// whatever `MUSTER_E2E_BINDING` says.
    pub async fn start_with(dra: bool) -> Env {
        Env::start_opts(dra, gang_from_env()).await
    }

    /// [`Env::start`] with DRA on or off and the given gang API, whatever the environment
    /// says.
    pub async fn start_opts(dra: bool, gang: Option<muster_e2e::apiserver::WorkloadApi>) -> Env {
        if let Ok(f) = std::env::var("MUSTER_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(f))
                .with_writer(std::io::stderr)
                .try_init();
        }
        let mut opts = ApiServerOptions::default().with_muster_crds();
        opts.features.dra = dra;
        opts.features.workload = gang;
        let gang = gang.is_some();
        let server = ApiServer::start(opts)
            .await
            .expect("API server double starts");
        let client = server.client();
        let ns: Namespace = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        )
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        if dra {
            Api::<DeviceClass>::all(client.clone())
                .create(&PostParams::default(), &muster_e2e::dra::device_class())
                .await
                .unwrap();
        }
        let scheduler = (dra || gang).then(|| {
            Scheduler::start(
                client.clone(),
                muster_e2e::clock::SimClock::real(),
                SchedulerOptions {
                    scheduled_events: false,
                    initial_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_millis(500),
                    ..SchedulerOptions::default()
                },
            )
        });
        Env {
            server,
            client,
            offset: Arc::new(AtomicI64::new(0)),
            dra,
            scheduler,
        }
    }

    /// Settings for fast tests: short cycles, no leader election, the shifted clock.
    pub fn settings(&self) -> Settings {
        let mut s = Settings {
            namespace: NS.into(),
            leader_election: false,
            identity: "test-operator".into(),
            cycle_interval: Duration::from_millis(300),
            debounce: Duration::from_millis(5),
            clock: Clock::shifted(self.offset.clone()),
            ..Settings::default()
        };
        s.plan.status_refresh_secs = 1;
        s
    }

    pub fn start_operator(&self, settings: Settings) -> Handle {
        controller::start(self.client.clone(), settings, Metrics::new())
    }

    pub async fn add_nodes(&self, nodes: &[NodeDef<'_>]) {
        let napi: Api<Node> = Api::all(self.client.clone());
        let gapi: Api<GpuNode> = Api::all(self.client.clone());
        for n in nodes {
            let mut labels = serde_json::Map::new();
            labels.insert("kubernetes.io/hostname".into(), json!(n.name));
            labels.insert("muster.dev/leaf".into(), json!(n.leaf));
            for (k, v) in n.labels {
                labels.insert(k.to_string(), json!(v));
            }
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": n.name, "labels": labels},
            }))
            .unwrap();
            napi.create(&PostParams::default(), &node).await.unwrap();
            napi.patch_status(
                n.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "allocatable": {"cpu": "224", "memory": "2Ti", "pods": "110"},
                    "capacity": {"cpu": "224", "memory": "2Ti", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]}})),
            )
            .await
            .unwrap();
            let g: GpuNode = serde_json::from_value(json!({
                "apiVersion": "muster.dev/v1alpha1", "kind": "GpuNode",
                "metadata": {"name": n.name}, "spec": {"nodeName": n.name}}))
            .unwrap();
            gapi.create(&PostParams::default(), &g).await.unwrap();
            let gpus: Vec<_> = (0..n.gpus)
                .map(|i| json!({"index": i, "uuid": format!("GPU-{}-{i}", n.name),
                    "model": n.model.unwrap_or("NVIDIA H100 80GB HBM3"), "memoryMib": 81559, "numaNode": i / 4,
                    "health": {"state": "Healthy"}}))
                .collect();
            gapi.patch_status(
                n.name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"gpuCount": n.gpus, "healthyGpus": n.gpus, "gpus": gpus}}),
                ),
            )
            .await
            .unwrap();
            if self.dra
                && let Some(slice) = muster_e2e::dra::resource_slice(
                    &node_info(n),
                    muster_e2e::dra::DriverVersion::default(),
                )
            {
                Api::<ResourceSlice>::all(self.client.clone())
                    .create(&PostParams::default(), &slice)
                    .await
                    .unwrap();
            }
        }
    }

    pub async fn set_node_ready(&self, name: &str, ready: bool) {
        Api::<Node>::all(self.client.clone())
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [
                    {"type": "Ready", "status": if ready { "True" } else { "False" }}]}})),
            )
            .await
            .unwrap();
    }

    pub async fn add_partition(&self, p: serde_json::Value) {
        let p: Partition = serde_json::from_value(p).unwrap();
        Api::<Partition>::all(self.client.clone())
            .create(&PostParams::default(), &p)
            .await
            .unwrap();
    }

    /// A default partition `gpu` over every node.
    pub async fn default_partition(&self) {
        self.add_partition(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
            "metadata": {"name": "gpu"},
            "spec": {"default": true, "defaultImage": "busybox:1.36",
                     "topology": ["muster.dev/leaf", "kubernetes.io/hostname"]}}))
            .await;
    }

    pub fn jobs(&self) -> Api<BatchJob> {
        Api::namespaced(self.client.clone(), "default")
    }

    pub async fn submit(&self, job: serde_json::Value) {
        let j: BatchJob = serde_json::from_value(job).unwrap();
        self.jobs()
            .create(&PostParams::default(), &j)
            .await
            .unwrap();
    }

    pub async fn job(&self, name: &str) -> BatchJob {
        self.jobs().get(name).await.unwrap()
    }

    pub async fn state(&self, name: &str) -> Option<JobState> {
        self.jobs()
            .get_opt(name)
            .await
            .unwrap()
            .and_then(|j| j.status.and_then(|s| s.state))
    }

    /// Adds nodes from [`cluster`].
    pub async fn add_cluster(&self, nodes: &[(String, String)], gpus: u32) {
        let defs: Vec<NodeDef<'_>> = nodes
            .iter()
            .map(|(n, l)| NodeDef::new(n, gpus, l))
            .collect();
        self.add_nodes(&defs).await;
    }

    /// The env of a pod's first container.
    pub fn env(p: &Pod) -> BTreeMap<String, String> {
        p.spec.as_ref().unwrap().containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    }

    /// The GPUs (UUIDs) a pod's containers are given, as the user would find them: in `env`
    /// mode its `NVIDIA_VISIBLE_DEVICES`; in `dra` mode the devices allocated to the claim
    /// it references (waiting, up to 20 s, for kube-scheduler to allocate it), looked up in
    /// the driver's ResourceSlices. A pod without GPUs has none.
    pub async fn visible_gpus(&self, pod: &Pod) -> Vec<String> {
        use muster_operator::controller::dra;
        if !self.dra {
            let v = Env::env(pod)
                .get("NVIDIA_VISIBLE_DEVICES")
                .cloned()
                .unwrap_or_default();
            return if v.is_empty() || v == "void" {
                Vec::new()
            } else {
                v.split(',').map(str::to_string).collect()
            };
        }
        assert!(
            !Env::env(pod).contains_key("NVIDIA_VISIBLE_DEVICES")
                || Env::env(pod)["NVIDIA_VISIBLE_DEVICES"] == "void",
            "dra mode sets no GPU variable by hand: {}",
            pod.name_any()
        );
        let Some(claim) = dra::pod_claim(pod).map(str::to_string) else {
            return Vec::new();
        };
        let ns = pod.namespace().unwrap_or_default();
        let claims: Api<ResourceClaim> = Api::namespaced(self.client.clone(), &ns);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let devices = loop {
            let c = claims.get(&claim).await.unwrap();
            let d: Vec<(String, String)> = c
                .status
                .iter()
                .flat_map(|s| &s.allocation)
                .flat_map(|a| &a.devices)
                .flat_map(|d| &d.results)
                .map(|r| (r.pool.clone(), r.device.clone()))
                .collect();
            if !d.is_empty() {
                break d;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "claim {claim} of pod {} was never allocated",
                pod.name_any()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let slices = Api::<ResourceSlice>::all(self.client.clone())
            .list(&Default::default())
            .await
            .unwrap();
        devices
            .iter()
            .map(|(pool, dev)| {
                slices
                    .items
                    .iter()
                    .filter(|s| &s.spec.pool.name == pool)
                    .flat_map(|s| &s.spec.devices)
                    .find(|d| &d.name == dev)
                    .and_then(|d| d.attributes.get("uuid"))
                    .and_then(|a| a.string.clone())
                    .unwrap_or_default()
            })
            .collect()
    }

    /// The node a pod is pinned to (its required affinity).
    pub fn node_of(p: &Pod) -> String {
        p.spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .and_then(|r| r.node_selector_terms.first())
            .and_then(|t| t.match_expressions.as_ref())
            .and_then(|m| m.iter().find(|m| m.key == "kubernetes.io/hostname"))
            .and_then(|m| m.values.as_ref())
            .and_then(|v| v.first().cloned())
            .unwrap_or_default()
    }

    pub async fn pods_of(&self, job: &str) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), "default")
            .list(&ListParams::default().labels(&format!("{}={job}", labels::BATCHJOB)))
            .await
            .unwrap()
            .items
    }

    /// The job's pods once there are `n` (the operator records an allocation in the job's
    /// status before it creates the pods, so RUNNING alone does not mean they exist yet).
    pub async fn until_pods(&self, job: &str, n: usize, secs: u64) -> Vec<Pod> {
        self.until(secs, &format!("{n} pod(s) of {job}"), || async {
            self.pods_of(job).await.len() >= n
        })
        .await;
        self.pods_of(job).await
    }

    /// Waits (polling, up to `secs` seconds, and at least a minute: CI's 2-core machine runs
    /// two tests at a time) until `f` holds, running the kubelet stand-in.
    pub async fn until<F, Fut>(&self, secs: u64, what: &str, mut f: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let secs = secs.max(60);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        while tokio::time::Instant::now() < deadline {
            self.kubelet().await;
            if f().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("timed out after {secs}s waiting for {what}");
    }

    pub async fn until_state(&self, name: &str, state: JobState, secs: u64) {
        self.until(secs, &format!("{name} {state}"), || async {
            self.state(name).await == Some(state)
        })
        .await;
    }

    /// One pass of the kubelet stand-in: pending task pods on a ready node run; running ones
    /// finish after `sim/runtime`; deleted ones terminate.
    pub async fn kubelet(&self) {
        let api: Api<Pod> = Api::all(self.client.clone());
        let Ok(pods) = api
            .list(&ListParams::default().labels(labels::BATCHJOB))
            .await
        else {
            return;
        };
        let ready: BTreeMap<String, bool> = Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .map(|n| {
                        let r = n
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            });
                        (n.name_any(), r)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let now = jiff::Timestamp::now().as_second();
        for p in pods.items {
            let ns = p.namespace().unwrap_or_default();
            let name = p.name_any();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            if p.metadata.deletion_timestamp.is_some() {
                let _ = api
                    .delete(&name, &DeleteParams::default().grace_period(0))
                    .await;
                continue;
            }
            let node = Env::node_of(&p);
            if !ready.get(&node).copied().unwrap_or(false) {
                continue;
            }
            // With the scheduler stand-in (DRA), a pod runs once it is bound: its claims are
            // then allocated and reserved for it.
            if self.scheduler.is_some()
                && p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_none_or(str::is_empty)
            {
                continue;
            }
            let phase = p.status.as_ref().and_then(|s| s.phase.clone());
            let ann = p.annotations();
            match phase.as_deref() {
                None | Some("Pending") => {
                    let _ = api
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"status": {"phase": "Running",
                                "startTime": jiff::Timestamp::now().to_string()}})),
                        )
                        .await;
                }
                Some("Running") => {
                    let runtime: i64 = ann
                        .get("sim/runtime")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(5);
                    let started = p
                        .status
                        .as_ref()
                        .and_then(|s| s.start_time.as_ref())
                        .map(|t| t.0.as_second())
                        .unwrap_or(now);
                    if now - started < runtime {
                        continue;
                    }
                    let rank = p
                        .labels()
                        .get(labels::NODE_RANK)
                        .cloned()
                        .unwrap_or_default();
                    let code: i32 =
                        if ann.get("sim/fail-rank").map(String::as_str).unwrap_or("0") == rank {
                            ann.get("sim/exit")
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(0)
                        } else {
                            0
                        };
                    let cname = p.spec.as_ref().unwrap().containers[0].name.clone();
                    let _ = api
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"status": {
                                "phase": if code == 0 { "Succeeded" } else { "Failed" },
                                "containerStatuses": [{"name": cname, "image": "", "imageID": "",
                                    "ready": false, "restartCount": 0,
                                    "state": {"terminated": {"exitCode": code}}}]}})),
                        )
                        .await;
                }
                _ => {}
            }
        }
    }
}

/// The GPUs of a [`NodeDef`] as the simulated NVIDIA DRA driver publishes them (the UUIDs,
/// model and NUMA nodes of its GpuNode).
pub fn node_info(n: &NodeDef<'_>) -> muster_operator::core::cluster_spec::NodeInfo {
    use muster_operator::core::cluster_spec::{GpuInfo, NodeInfo};
    NodeInfo {
        name: n.name.to_string(),
        labels: Default::default(),
        cpu_millis: 224_000,
        memory_mib: 2 << 20,
        taints: vec![],
        gpus: (0..n.gpus)
            .map(|i| GpuInfo {
                index: i,
                uuid: format!("GPU-{}-{i}", n.name),
                model: n.model.unwrap_or("NVIDIA H100 80GB HBM3").to_string(),
                memory_mib: 81559,
                numa_node: Some((i / 4) as i32),
                nvlink_peers: vec![],
                pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i * 0x20),
            })
            .collect(),
        topology: vec![],
        extended_resources: Default::default(),
    }
}

/// A BatchJob manifest running `runtime` seconds.
pub fn batchjob(name: &str, spec: serde_json::Value, runtime: u32) -> serde_json::Value {
    let mut spec = spec;
    if spec.get("script").is_none() {
        spec["script"] = json!("echo hello");
    }
    spec["template"] = json!({"metadata": {"annotations": {"sim/runtime": runtime.to_string()}}});
    json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
           "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

impl Env {
    /// Every BatchJob and task pod, as of one instant.
    pub async fn consistent_view(
        &self,
    ) -> Result<
        (
            kube::core::ObjectList<BatchJob>,
            kube::core::ObjectList<Pod>,
        ),
        String,
    > {
        for _ in 0..100 {
            let before = self.server.resource_version();
            let jobs = self
                .jobs()
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let pods = Api::<Pod>::all(self.client.clone())
                .list(&ListParams::default().labels(labels::BATCHJOB))
                .await
                .map_err(|e| e.to_string())?;
            if self.server.resource_version() == before {
                return Ok((jobs, pods));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Err("the cluster never held still for a consistent read".into())
    }

    /// No GPU is held by two (job, attempt) pairs: RUNNING allocations and live task pods
    /// (through the allocation each pod records).
    ///
    /// Jobs and pods are read at one resourceVersion of the server (retried until no write
    /// happened between the two lists), so the check sees one instant of the cluster.
    pub async fn check_no_double_gpu(&self) -> Result<(), String> {
        use muster_operator::controller::holders::gpu_holders;
        if self.dra {
            self.check_claims().await?;
        }
        let (jobs, pods) = self.consistent_view().await?;
        let holders = gpu_holders(&jobs.items, &pods.items);
        for (k, h) in holders {
            if h.len() > 1 {
                let who: Vec<String> = jobs
                    .items
                    .iter()
                    .filter(|j| h.iter().any(|(u, _)| j.uid().as_deref() == Some(u)))
                    .map(|j| {
                        let st = j.status.clone().unwrap_or_default();
                        format!(
                            "{} id={:?} {:?} attempt={:?} start={:?} tasks={:?}",
                            j.name_any(),
                            st.job_id,
                            st.state,
                            st.attempt,
                            st.start_time,
                            st.tasks
                                .iter()
                                .map(|t| (&t.node, &t.gpus))
                                .collect::<Vec<_>>()
                        )
                    })
                    .collect();
                let pods_on: Vec<String> = pods
                    .items
                    .iter()
                    .filter(|p| {
                        h.iter()
                            .any(|(u, _)| p.owner_references().iter().any(|o| &o.uid == u))
                    })
                    .map(|p| {
                        format!(
                            "{} {:?} del={}",
                            p.name_any(),
                            p.status.as_ref().and_then(|s| s.phase.clone()),
                            p.metadata.deletion_timestamp.is_some()
                        )
                    })
                    .collect();
                return Err(format!(
                    "GPU {k:?} held by {h:?}: {who:#?} pods {pods_on:#?}"
                ));
            }
        }
        Ok(())
    }

    /// In DRA mode: no device is allocated to two claims; every claim of Muster's belongs to
    /// an allocation its job has recorded (never a later attempt than the job's status
    /// says), and one of the current attempt pins exactly the GPUs recorded for its pod; and
    /// every bound, running pod that references a claim has exactly the GPUs (by UUID) its
    /// allocation records.
    pub async fn check_claims(&self) -> Result<(), String> {
        use muster_operator::controller::dra;
        let claims = Api::<ResourceClaim>::all(self.client.clone())
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        // Read after the claims: a job's status is written before its claims, so every claim
        // seen above has its allocation recorded in what is read here.
        let jobs = Api::<BatchJob>::all(self.client.clone())
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        for c in &claims.items {
            let obs = dra::ClaimObs::from_claim(c);
            let (Some(job), Some(attempt)) = (obs.job(), obs.attempt) else {
                continue;
            };
            let Some(j) = jobs.items.iter().find(|j| {
                j.namespace() == c.namespace()
                    && j.name_any() == job
                    && j.uid().as_deref() == obs.owner_uid()
            }) else {
                continue; // its job is gone: garbage collection's part
            };
            let st = j.status.clone().unwrap_or_default();
            let recorded = st.attempt.unwrap_or(0);
            if attempt > recorded {
                return Err(format!(
                    "claim {} of attempt {attempt} exists, job {job} records attempt {recorded}",
                    obs.name()
                ));
            }
            if attempt < recorded || obs.deleting {
                continue; // an ended attempt's, on its way out
            }
            // A node pod's claim pins the GPUs of every task of the job on its node.
            let node = st.tasks.iter().find(|t| {
                let pod = t.pod.clone().unwrap_or_else(|| {
                    muster_operator::controller::pods::pod_name(job, attempt, t.node_rank)
                });
                dra::claim_name(&pod) == obs.name()
            });
            let task = node.and_then(|t| {
                muster_operator::controller::pods::node_share(&st.tasks, t.node_rank)
            });
            let Some(task) = task else {
                return Err(format!(
                    "claim {} of attempt {attempt}: no pod of job {job}'s recorded allocation ({:?}) uses it",
                    obs.name(),
                    st.state
                ));
            };
            if dra::pinned_uuids(c) != task.gpu_uuids {
                return Err(format!(
                    "claim {} pins {:?}, node {} of job {job} is recorded with {:?}",
                    obs.name(),
                    dra::pinned_uuids(c),
                    task.node_rank,
                    task.gpu_uuids
                ));
            }
        }
        let slices = Api::<ResourceSlice>::all(self.client.clone())
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let mut uuid_of: BTreeMap<(String, String), String> = BTreeMap::new();
        for s in &slices.items {
            for d in &s.spec.devices {
                if let Some(u) = d.attributes.get("uuid").and_then(|a| a.string.clone()) {
                    uuid_of.insert((s.spec.pool.name.clone(), d.name.clone()), u);
                }
            }
        }
        let mut owner: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut got: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for c in &claims.items {
            let key = (c.namespace().unwrap_or_default(), c.name_any());
            for r in c
                .status
                .iter()
                .flat_map(|s| &s.allocation)
                .flat_map(|a| &a.devices)
                .flat_map(|d| &d.results)
            {
                let dev = (r.pool.clone(), r.device.clone());
                if let Some(o) = owner.insert(dev.clone(), key.1.clone()) {
                    return Err(format!(
                        "device {dev:?} allocated to claims {o} and {}",
                        key.1
                    ));
                }
                got.entry(key.clone())
                    .or_default()
                    .push(uuid_of.get(&dev).cloned().unwrap_or_default());
            }
        }
        let pods = Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default().labels(labels::BATCHJOB))
            .await
            .map_err(|e| e.to_string())?;
        for p in &pods.items {
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let (Some(c), true) = (dra::pod_claim(p), running) else {
                continue;
            };
            let a = muster_operator::controller::pods::pod_allocation(p).unwrap_or_default();
            let mut want = a.gpu_uuids.clone();
            want.sort();
            let mut have = got
                .get(&(p.namespace().unwrap_or_default(), c.to_string()))
                .cloned()
                .unwrap_or_default();
            have.sort();
            if want != have {
                return Err(format!(
                    "running pod {} has GPUs {have:?} through claim {c}, its allocation says {want:?}",
                    p.name_any()
                ));
            }
        }
        Ok(())
    }

    /// Muster's ResourceClaims not being deleted, by name (none where DRA is not served).
    pub async fn live_claims(&self) -> Vec<String> {
        if !self.dra {
            return Vec::new();
        }
        Api::<ResourceClaim>::all(self.client.clone())
            .list(&ListParams::default().labels(labels::BATCHJOB))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .map(|c| c.name_any())
            .collect()
    }

    /// Every RUNNING job's live pods of its attempt cover every node, and no live pod
    /// belongs to an attempt its job does not record.
    pub async fn check_settled_gangs(&self) -> Result<(), String> {
        use muster_operator::controller::plan::PodObs;
        let (jobs, pods) = self.consistent_view().await?;
        let pods: Vec<PodObs> = pods
            .items
            .iter()
            .filter_map(PodObs::from_pod)
            .filter(|p| p.live() && !p.deleting)
            .collect();
        for j in &jobs.items {
            let Some(st) = &j.status else { continue };
            let mine: Vec<&PodObs> = pods
                .iter()
                .filter(|p| p.owner_uid() == j.uid().as_deref())
                .collect();
            for p in &mine {
                if Some(p.attempt.unwrap_or(0)) != st.attempt || st.state != Some(JobState::Running)
                {
                    return Err(format!(
                        "{}: live pod {} of attempt {:?}, job {:?} attempt {:?}",
                        j.name_any(),
                        p.name(),
                        p.attempt,
                        st.state,
                        st.attempt
                    ));
                }
            }
            let nodes = muster_operator::controller::pods::node_ranks(&st.tasks).len();
            if st.state == Some(JobState::Running) && !mine.is_empty() && mine.len() != nodes {
                return Err(format!("{}: {} of {nodes} pods", j.name_any(), mine.len(),));
            }
        }
        Ok(())
    }
}
