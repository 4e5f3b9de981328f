//! Shared pieces of the operator's end-to-end suites: the API server double with nodes,
//! GpuNodes and partitions, the operator started in-process, and a minimal kubelet stand-in
//! (binds and runs task pods by annotation) until the simulated nodes land.
//!
//! Task pods are driven by their template annotations: `sim/runtime` (seconds, default 5),
//! `sim/exit` and `sim/fail-rank` (a rank that exits with that code).

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
use muster_operator::controller::metrics::Metrics;
use muster_operator::controller::{self, Clock, Handle, Settings};
use serde_json::json;

/// The operator's namespace in the tests.
pub const NS: &str = "muster-system";

pub struct Env {
    pub server: ApiServer,
    pub client: Client,
    pub offset: Arc<AtomicI64>,
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
        if let Ok(f) = std::env::var("MUSTER_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(f))
                .with_writer(std::io::stderr)
                .try_init();
        }
        let server = ApiServer::start(ApiServerOptions::default().with_muster_crds())
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
        Env {
            server,
            client,
            offset: Arc::new(AtomicI64::new(0)),
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

    /// Waits (polling, up to `secs` seconds) until `f` holds, running the kubelet stand-in.
    pub async fn until<F, Fut>(&self, secs: u64, what: &str, mut f: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
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
                    let rank = p.labels().get(labels::RANK).cloned().unwrap_or_default();
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
        use muster_operator::controller::plan::PodObs;
        let (jobs, pods) = self.consistent_view().await?;
        let mut holders: BTreeMap<(String, u32), std::collections::BTreeSet<(String, u32)>> =
            BTreeMap::new();
        for j in &jobs.items {
            let Some(st) = &j.status else { continue };
            if st.state != Some(JobState::Running) {
                continue;
            }
            for t in &st.tasks {
                for g in &t.gpus {
                    holders
                        .entry((t.node.clone(), *g))
                        .or_default()
                        .insert((j.uid().unwrap_or_default(), st.attempt.unwrap_or(0)));
                }
            }
        }
        for p in &pods.items {
            let Some(o) = PodObs::from_pod(p) else {
                continue;
            };
            if !o.live() {
                continue;
            }
            if let Some(a) = &o.alloc {
                for g in &a.gpus {
                    holders.entry((a.node.clone(), *g)).or_default().insert((
                        o.owner_uid.clone().unwrap_or_default(),
                        o.attempt.unwrap_or(0),
                    ));
                }
            }
        }
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

    /// Every RUNNING job's live pods of its attempt cover every rank, and no live pod
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
            let mine: Vec<&PodObs> = pods.iter().filter(|p| p.owner_uid == j.uid()).collect();
            for p in &mine {
                if Some(p.attempt.unwrap_or(0)) != st.attempt || st.state != Some(JobState::Running)
                {
                    return Err(format!(
                        "{}: live pod {} of attempt {:?}, job {:?} attempt {:?}",
                        j.name_any(),
                        p.name,
                        p.attempt,
                        st.state,
                        st.attempt
                    ));
                }
            }
            if st.state == Some(JobState::Running)
                && !mine.is_empty()
                && mine.len() != st.tasks.len()
            {
                return Err(format!(
                    "{}: {} of {} pods",
                    j.name_any(),
                    mine.len(),
                    st.tasks.len()
                ));
            }
        }
        Ok(())
    }
}
