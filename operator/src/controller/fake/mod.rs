//! An in-memory cluster for the controller's unit tests: implements [`ClusterApi`] with the
//! semantics the operator relies on (resourceVersion preconditions, finalizers, owner
//! garbage collection, graceful pod deletion), plus a kubelet stand-in that runs pods by
//! annotation, and invariant checks (no GPU held twice, no partial gang).
//!
//! Template annotations drive the kubelet: `sim/runtime` (seconds a task runs, default 60),
//! `sim/exit` (exit code of the node pod in `sim/fail-rank`, a node index, default node 0: the
//! batch script).
//!
//! With [`Harness::dra`] the cluster serves ResourceClaims as Kubernetes does for Muster's
//! claims: a pod with a claim starts only once the claim exists and can be allocated (the
//! devices its selectors pin, none allocated to another claim: kube-scheduler's check); the
//! allocation is released when the pod ends, and a deleted claim lingers until its pod is
//! gone (the delete-protection finalizer).
//!
//! [`ClusterApi`]: super::exec::ClusterApi

mod api;
mod checks;
mod claims;
mod harness;
mod kubelet;

pub use claims::FakeClaim;
pub use harness::Harness;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, GpuNode, JobState, Partition};

use super::plan::JobEvent;
use super::translate::{self, time};

/// The cluster's objects.
#[derive(Default)]
pub struct State {
    pub rv: u64,
    pub uid: u64,
    pub jobs: BTreeMap<(String, String), BatchJob>,
    pub pods: BTreeMap<(String, String), Pod>,
    pub services: BTreeSet<(String, String)>,
    /// How many Service creations to refuse next, as an API server answering 500 would.
    pub refuse_services: u32,
    /// Step credential Secrets: (namespace, name) → key.
    pub secrets: BTreeMap<(String, String), String>,
    pub partitions: BTreeMap<String, Partition>,
    pub nodes: BTreeMap<String, Node>,
    pub gpunodes: BTreeMap<String, GpuNode>,
    pub events: Vec<(String, JobEvent)>,
    /// Nodes whose pods never start (image pull stuck, scheduler refuses).
    pub stuck: BTreeSet<String>,
    /// Pods started (name → start time).
    pub started: HashMap<(String, String), i64>,
    pub now: i64,
    /// ResourceClaims.
    pub claims: BTreeMap<(String, String), FakeClaim>,
    /// Gang groups created: (namespace, name).
    pub groups: BTreeSet<(String, String)>,
    /// Pods refused for want of their claim (name → why), as kube-scheduler would report.
    pub unschedulable: BTreeMap<(String, String), String>,
}

/// The fake API.
#[derive(Clone, Default)]
pub struct FakeCluster {
    pub s: Arc<Mutex<State>>,
}

pub(super) fn ts(secs: i64) -> Time {
    time(secs)
}

impl State {
    pub(super) fn bump(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }
    pub(super) fn new_uid(&mut self) -> String {
        self.uid += 1;
        format!("uid-{}", self.uid)
    }
}

impl FakeCluster {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.s.lock().unwrap()
    }

    /// Submits a BatchJob (as `kubectl apply` would).
    pub fn submit(&self, mut job: BatchJob) {
        let mut s = self.lock();
        if job.metadata.namespace.is_none() {
            job.metadata.namespace = Some("default".into());
        }
        job.metadata.uid = Some(s.new_uid());
        job.metadata.resource_version = Some(s.bump());
        job.metadata.generation = Some(1);
        job.metadata.creation_timestamp = Some(ts(s.now));
        let key = (job.namespace().unwrap(), job.name_any());
        s.jobs.insert(key, job);
    }

    pub fn job(&self, name: &str) -> BatchJob {
        self.lock()
            .jobs
            .get(&("default".to_string(), name.to_string()))
            .cloned()
            .unwrap_or_else(|| panic!("no job {name}"))
    }

    pub fn has_job(&self, name: &str) -> bool {
        self.lock()
            .jobs
            .contains_key(&("default".to_string(), name.to_string()))
    }

    pub fn state(&self, name: &str) -> JobState {
        self.job(name).state()
    }

    /// Edits a job's spec (generation bumps).
    pub fn edit(&self, name: &str, f: impl FnOnce(&mut BatchJob)) {
        let mut s = self.lock();
        let rv = s.bump();
        let j = s
            .jobs
            .get_mut(&("default".to_string(), name.to_string()))
            .unwrap();
        f(j);
        j.metadata.resource_version = Some(rv);
        j.metadata.generation = Some(j.metadata.generation.unwrap_or(1) + 1);
    }

    /// `kubectl delete batchjob`.
    pub fn delete_job(&self, name: &str) {
        let mut s = self.lock();
        let now = s.now;
        let key = ("default".to_string(), name.to_string());
        if let Some(j) = s.jobs.get_mut(&key) {
            if j.finalizers().is_empty() {
                s.jobs.remove(&key);
            } else {
                j.metadata.deletion_timestamp = Some(ts(now));
            }
        }
    }

    pub fn pods_of(&self, job: &str) -> Vec<Pod> {
        self.lock()
            .pods
            .values()
            .filter(|p| p.labels().get(labels::BATCHJOB).map(String::as_str) == Some(job))
            .cloned()
            .collect()
    }

    pub fn set_node_ready(&self, node: &str, ready: bool) {
        let mut s = self.lock();
        let n = s.nodes.get_mut(node).unwrap();
        for c in n
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .iter_mut()
        {
            if c.type_ == "Ready" {
                c.status = if ready { "True" } else { "False" }.into();
            }
        }
    }

    pub fn set_gpu_health(&self, node: &str, gpu: u32, healthy: bool) {
        let mut s = self.lock();
        let g = s.gpunodes.get_mut(node).unwrap();
        for x in &mut g.status.as_mut().unwrap().gpus {
            if x.index == gpu {
                x.health.state = if healthy {
                    muster_crds::v1alpha1::GpuHealthState::Healthy
                } else {
                    muster_crds::v1alpha1::GpuHealthState::Unhealthy
                };
            }
        }
    }

    /// Adds nodes `node1..=n` with `gpus` GPUs each, under `leaves` leaf switches.
    pub fn add_nodes(&self, n: usize, gpus: u32, leaves: usize) {
        let mut s = self.lock();
        for i in 1..=n {
            let name = format!("node{i}");
            let mut node = translate::tests_support::kube_node(&name, true);
            node.metadata.labels = Some(
                [(
                    "muster.dev/leaf".to_string(),
                    format!("leaf{}", (i - 1) * leaves / n + 1),
                )]
                .into(),
            );
            node.spec = None;
            s.nodes.insert(name.clone(), node);
            s.gpunodes.insert(
                name.clone(),
                translate::tests_support::gpu_node(&name, gpus, &[]),
            );
        }
    }

    pub fn add_partition(&self, p: Partition) {
        self.lock().partitions.insert(p.name_any(), p);
    }
}
