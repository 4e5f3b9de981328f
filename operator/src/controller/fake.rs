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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, FutureExt};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Node, Pod, PodStatus, Secret,
    Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, GpuNode, JobState, Partition, PartitionStatus};

use super::dra::{self, ClaimObs, DraSupport, ResourceClaim};
use super::exec::{self, ApiError, ClusterApi, ExecReport, Faults, NoFaults};
use super::gang::{GangApi, GangRef};
use super::jobobs::JobObs;
use super::plan::{self, Inputs, JobEvent, PlanMemory, PlanSettings, PodObs, StatusWrite};
use super::translate::{self, NodeTable, time};

/// A ResourceClaim in the fake cluster.
#[derive(Clone, Debug)]
pub struct FakeClaim {
    pub claim: ResourceClaim,
    /// Allocated devices: (node, NVML index).
    pub allocated: Vec<(String, u32)>,
    /// The pod it is reserved for.
    pub reserved_for: Option<(String, String)>,
    /// Deletion requested (kept while its pod lives).
    pub deleting: bool,
}

impl FakeClaim {
    fn obs(&self) -> ClaimObs {
        let o = ClaimObs::from_claim(&self.claim);
        let names: Vec<(&str, String)> = self
            .allocated
            .iter()
            .map(|(n, g)| (n.as_str(), format!("gpu-{g}")))
            .collect();
        ClaimObs::new(
            o.namespace(),
            o.name(),
            o.job(),
            o.owner_uid(),
            o.attempt,
            self.deleting,
            names
                .iter()
                .map(|(n, d)| (dra::NVIDIA_DRIVER, *n, d.as_str())),
        )
    }
}

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

impl State {
    /// The (node, index) of the GPU with `uuid`.
    fn gpu_by_uuid(&self, uuid: &str) -> Option<(String, u32)> {
        self.gpunodes.iter().find_map(|(n, g)| {
            g.status
                .as_ref()?
                .gpus
                .iter()
                .find(|x| x.uuid == uuid)
                .map(|x| (n.clone(), x.index))
        })
    }

    /// kube-scheduler's DRA check for pod `key`: its claim exists, is not being deleted, and
    /// every device its selectors pin is free (or already its own); then it is allocated and
    /// reserved for the pod. `Ok(())` also for a pod without a claim.
    fn allocate_for(&mut self, key: &(String, String)) -> Result<(), String> {
        let Some(claim) = self
            .pods
            .get(key)
            .and_then(|p| dra::pod_claim(p).map(str::to_string))
        else {
            return Ok(());
        };
        let ck = (key.0.clone(), claim.clone());
        let Some(c) = self.claims.get(&ck) else {
            return Err(format!(
                "resourceclaim.resource.k8s.io \"{claim}\" not found"
            ));
        };
        if c.deleting {
            return Err(format!("resourceclaim \"{claim}\" is being deleted"));
        }
        if !c.allocated.is_empty() {
            self.claims.get_mut(&ck).unwrap().reserved_for = Some(key.clone());
            return Ok(());
        }
        let mut want = Vec::new();
        for uuid in dra::pinned_uuids(&c.claim) {
            let dev = self
                .gpu_by_uuid(&uuid)
                .ok_or_else(|| "cannot allocate all claims".to_string())?;
            want.push(dev);
        }
        let taken = self
            .claims
            .values()
            .any(|o| o.allocated.iter().any(|d| want.contains(d)));
        if taken {
            return Err("cannot allocate all claims".into());
        }
        let c = self.claims.get_mut(&ck).unwrap();
        c.allocated = want;
        c.reserved_for = Some(key.clone());
        Ok(())
    }

    /// The resourceclaim controller: a claim whose pod is gone or done is released, and
    /// removed if deleted.
    fn release_claims(&mut self) {
        let keys: Vec<(String, String)> = self.claims.keys().cloned().collect();
        for k in keys {
            let c = &self.claims[&k];
            let live = c.reserved_for.as_ref().is_some_and(|pk| {
                self.pods.get(pk).is_some_and(|p| {
                    !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded") | Some("Failed")
                    )
                })
            });
            if live {
                continue;
            }
            if c.deleting {
                self.claims.remove(&k);
            } else if c.reserved_for.is_some() {
                let c = self.claims.get_mut(&k).unwrap();
                c.reserved_for = None;
                c.allocated.clear();
            }
        }
    }
}

/// The fake API.
#[derive(Clone, Default)]
pub struct FakeCluster {
    pub s: Arc<Mutex<State>>,
}

fn ts(secs: i64) -> Time {
    time(secs)
}

impl State {
    fn bump(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }
    fn new_uid(&mut self) -> String {
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

    /// The kubelet and the garbage collector, at time `now`.
    pub fn tick(&self, now: i64) {
        let mut s = self.lock();
        s.now = now;
        // GC: jobs being deleted without finalizers go; their pods and elements follow.
        let gone: Vec<(String, String)> = s
            .jobs
            .iter()
            .filter(|(_, j)| j.metadata.deletion_timestamp.is_some() && j.finalizers().is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            s.jobs.remove(&k);
        }
        let uids: BTreeSet<String> = s.jobs.values().filter_map(|j| j.uid()).collect();
        let orphans: Vec<(String, String)> = s
            .jobs
            .iter()
            .filter(|(_, j)| {
                j.metadata.deletion_timestamp.is_none()
                    && j.owner_references().iter().any(|o| !uids.contains(&o.uid))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in orphans {
            let j = s.jobs.get_mut(&k).unwrap();
            if j.finalizers().is_empty() {
                s.jobs.remove(&k);
            } else {
                j.metadata.deletion_timestamp = Some(ts(now));
            }
        }
        let uids: BTreeSet<String> = s.jobs.values().filter_map(|j| j.uid()).collect();
        let ready: BTreeSet<String> = s
            .nodes
            .iter()
            .filter(|(_, n)| translate::node(n, None).ready)
            .map(|(k, _)| k.clone())
            .collect();
        let keys: Vec<(String, String)> = s.pods.keys().cloned().collect();
        for k in keys {
            let p = s.pods.get(&k).unwrap().clone();
            let owner_gone = p.owner_references().iter().any(|o| !uids.contains(&o.uid));
            let node = super::pods::pod_allocation(&p)
                .map(|a| a.node)
                .unwrap_or_default();
            if owner_gone && p.metadata.deletion_timestamp.is_none() {
                // Background GC deletes the pod (gracefully).
                s.pods.get_mut(&k).unwrap().metadata.deletion_timestamp = Some(ts(now));
                continue;
            }
            if let Some(d) = &p.metadata.deletion_timestamp {
                // Gone after its grace period (at once when its node is down: force-deleted).
                let grace = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30);
                if now >= d.0.as_second() + grace || !ready.contains(&node) {
                    s.pods.remove(&k);
                }
                continue;
            }
            let phase = p.status.as_ref().and_then(|st| st.phase.clone());
            match phase.as_deref() {
                None | Some("Pending") if ready.contains(&node) && !s.stuck.contains(&node) => {
                    if let Err(why) = s.allocate_for(&k) {
                        s.unschedulable.insert(k.clone(), why);
                        continue;
                    }
                    s.unschedulable.remove(&k);
                    s.started.insert(k.clone(), now);
                    let p = s.pods.get_mut(&k).unwrap();
                    p.status = Some(PodStatus {
                        phase: Some("Running".into()),
                        ..Default::default()
                    });
                }
                Some("Running") => {
                    let ann = p.annotations();
                    let runtime: i64 = ann
                        .get("sim/runtime")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(60);
                    let started = s.started.get(&k).copied().unwrap_or(now);
                    if now - started >= runtime && ready.contains(&node) {
                        let rank = p
                            .labels()
                            .get(labels::NODE_RANK)
                            .cloned()
                            .unwrap_or_default();
                        let fail_rank = ann.get("sim/fail-rank").cloned().unwrap_or("0".into());
                        let code: i32 = if rank == fail_rank {
                            ann.get("sim/exit")
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(0)
                        } else {
                            0
                        };
                        let cname = p.spec.as_ref().unwrap().containers[0].name.clone();
                        let p = s.pods.get_mut(&k).unwrap();
                        p.status = Some(PodStatus {
                            phase: Some(if code == 0 { "Succeeded" } else { "Failed" }.into()),
                            container_statuses: Some(vec![ContainerStatus {
                                name: cname,
                                state: Some(ContainerState {
                                    terminated: Some(ContainerStateTerminated {
                                        exit_code: code,
                                        ..Default::default()
                                    }),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }]),
                            ..Default::default()
                        });
                    }
                }
                _ => {}
            }
        }
        // Claims: owner GC, then the resourceclaim controller.
        let gone: Vec<(String, String)> = s
            .claims
            .iter()
            .filter(|(_, c)| {
                c.claim
                    .owner_references()
                    .iter()
                    .any(|o| !uids.contains(&o.uid))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            s.claims.get_mut(&k).unwrap().deleting = true;
        }
        s.release_claims();
    }

    /// Every running pod with a claim has exactly the GPUs its allocation records, and no
    /// device is allocated to two claims.
    pub fn check_claims(&self) -> Result<(), String> {
        let s = self.lock();
        let mut owner: BTreeMap<(String, u32), String> = BTreeMap::new();
        for ((_, name), c) in &s.claims {
            for d in &c.allocated {
                if let Some(o) = owner.insert(d.clone(), name.clone()) {
                    return Err(format!("device {d:?} allocated to {o} and {name}"));
                }
            }
        }
        for (k, p) in &s.pods {
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let Some(cn) = dra::pod_claim(p) else {
                continue;
            };
            if !running {
                continue;
            }
            let a = super::pods::pod_allocation(p).unwrap();
            let want: BTreeSet<(String, u32)> =
                a.gpus.iter().map(|g| (a.node.clone(), *g)).collect();
            let c = s
                .claims
                .get(&(k.0.clone(), cn.to_string()))
                .ok_or_else(|| format!("running pod {} without its claim {cn}", k.1))?;
            let got: BTreeSet<(String, u32)> = c.allocated.iter().cloned().collect();
            if got != want {
                return Err(format!("pod {} has {got:?}, allocation {want:?}", k.1));
            }
        }
        Ok(())
    }

    /// Every GPU is held by at most one (job, attempt): RUNNING allocations and live pods.
    pub fn check_no_double_gpu(&self) -> Result<(), String> {
        let s = self.lock();
        let holders = super::holders::gpu_holders(s.jobs.values(), s.pods.values());
        for (k, h) in holders {
            if h.len() > 1 {
                return Err(format!("GPU {k:?} held by {h:?}"));
            }
        }
        Ok(())
    }

    /// No job has live pods of its current attempt unless it is RUNNING with every node's
    /// pod present; no pod exists for an attempt the job does not record.
    pub fn check_gangs(&self) -> Result<(), String> {
        let s = self.lock();
        for j in s.jobs.values() {
            let Some(st) = &j.status else { continue };
            let a = st.attempt.unwrap_or(0);
            let mine: Vec<PodObs> = s
                .pods
                .values()
                .filter_map(PodObs::from_pod)
                .filter(|p| p.owner_uid() == j.uid().as_deref() && p.attempt == Some(a) && p.live())
                .collect();
            if st.state == Some(JobState::Running) && !mine.is_empty() {
                let nodes: BTreeSet<u32> = mine.iter().filter_map(|p| p.node).collect();
                let want = crate::controller::pods::node_ranks(&st.tasks).len();
                if nodes.len() != want {
                    return Err(format!(
                        "{}: RUNNING with {} of {want} pods",
                        j.name_any(),
                        nodes.len(),
                    ));
                }
            }
        }
        Ok(())
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

fn done<'a, T: Send + 'a>(v: T) -> BoxFuture<'a, T> {
    futures::future::ready(v).boxed()
}

impl ClusterApi for FakeCluster {
    fn add_finalizer<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        resource_version: Option<&'a str>,
        _existing: &'a [String],
    ) -> BoxFuture<'a, Result<BatchJob, ApiError>> {
        let mut s = self.lock();
        let rv = s.bump();
        let r = match s.jobs.get_mut(&(ns.to_string(), name.to_string())) {
            None => Err(ApiError::NotFound(name.into())),
            Some(j)
                if resource_version.is_some()
                    && j.resource_version().as_deref() != resource_version =>
            {
                Err(ApiError::Conflict(name.into()))
            }
            Some(j) => {
                let f = j.metadata.finalizers.get_or_insert_with(Vec::new);
                if !f.iter().any(|x| x == labels::FINALIZER) {
                    f.push(labels::FINALIZER.into());
                }
                j.metadata.resource_version = Some(rv);
                Ok(j.clone())
            }
        };
        done(r)
    }

    fn remove_finalizer<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        _existing: &'a [String],
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let rv = s.bump();
        let key = (ns.to_string(), name.to_string());
        let r = match s.jobs.get_mut(&key) {
            None => Ok(()),
            Some(j) => {
                if let Some(f) = j.metadata.finalizers.as_mut() {
                    f.retain(|x| x != labels::FINALIZER);
                }
                j.metadata.resource_version = Some(rv);
                if j.metadata.deletion_timestamp.is_some() && j.finalizers().is_empty() {
                    s.jobs.remove(&key);
                }
                Ok(())
            }
        };
        done(r)
    }

    fn apply_status<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        w: &'a StatusWrite,
    ) -> BoxFuture<'a, Result<BatchJob, ApiError>> {
        let mut s = self.lock();
        let rv = s.bump();
        let r = match s.jobs.get_mut(&(ns.to_string(), name.to_string())) {
            None => Err(ApiError::NotFound(name.into())),
            Some(j)
                if w.resource_version.is_some() && j.resource_version() != w.resource_version =>
            {
                Err(ApiError::Conflict(name.into()))
            }
            Some(j) => {
                j.status = Some(w.status.clone());
                j.metadata.resource_version = Some(rv);
                Ok(j.clone())
            }
        };
        done(r)
    }

    fn create_pod<'a>(
        &'a self,
        pod: &'a Pod,
        _gang: Option<&'a GangRef>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let key = (pod.namespace().unwrap(), pod.name_any());
        if let Some(c) = dra::pod_claim(pod)
            && !s.claims.contains_key(&(key.0.clone(), c.to_string()))
        {
            // The contract the planner keeps: never a pod before its claim.
            panic!("pod {} created before its claim {c}", key.1);
        }
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            if let Some(sec) = v.secret.as_ref().and_then(|x| x.secret_name.clone())
                && !s.secrets.contains_key(&(key.0.clone(), sec.clone()))
            {
                // The contract the planner keeps: never a pod before its credential.
                panic!("pod {} created before its Secret {sec}", key.1);
            }
        }
        if !s.pods.contains_key(&key) {
            let mut p = pod.clone();
            p.metadata.uid = Some(s.new_uid());
            p.metadata.resource_version = Some(s.bump());
            s.pods.insert(key, p);
        }
        done(Ok(()))
    }

    fn delete_pod<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let now = s.now;
        let key = (ns.to_string(), name.to_string());
        if let Some(p) = s.pods.get_mut(&key) {
            let phase = p.status.as_ref().and_then(|x| x.phase.clone());
            if matches!(
                phase.as_deref(),
                None | Some("Pending") | Some("Succeeded") | Some("Failed")
            ) {
                s.pods.remove(&key);
            } else {
                p.metadata.deletion_timestamp = Some(ts(now));
            }
        }
        done(Ok(()))
    }

    fn create_claim<'a>(&'a self, claim: &'a ResourceClaim) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let key = (claim.namespace().unwrap(), claim.name_any());
        s.claims.entry(key).or_insert_with(|| FakeClaim {
            claim: claim.clone(),
            allocated: Vec::new(),
            reserved_for: None,
            deleting: false,
        });
        done(Ok(()))
    }

    fn delete_claim<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        if let Some(c) = s.claims.get_mut(&(ns.to_string(), name.to_string())) {
            c.deleting = true;
        }
        s.release_claims();
        done(Ok(()))
    }

    fn create_group<'a>(
        &'a self,
        _api: GangApi,
        group: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let m = &group["metadata"];
        self.lock().groups.insert((
            m["namespace"].as_str().unwrap_or_default().to_string(),
            m["name"].as_str().unwrap_or_default().to_string(),
        ));
        done(Ok(()))
    }

    fn delete_group<'a>(
        &'a self,
        ns: &'a str,
        _api: GangApi,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        self.lock()
            .groups
            .remove(&(ns.to_string(), name.to_string()));
        done(Ok(()))
    }

    fn create_secret<'a>(&'a self, secret: &'a Secret) -> BoxFuture<'a, Result<(), ApiError>> {
        let key = secret
            .string_data
            .as_ref()
            .and_then(|d| d.get(muster_crds::step::SECRET_KEY))
            .cloned()
            .unwrap_or_default();
        assert_eq!(key.len(), 64, "a step key is 32 random bytes in hex");
        // An existing Secret keeps its key (the job's pods may already hold it).
        self.lock()
            .secrets
            .entry((secret.namespace().unwrap(), secret.name_any()))
            .or_insert(key);
        done(Ok(()))
    }

    fn create_service<'a>(&'a self, svc: &'a Service) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        if s.refuse_services > 0 {
            s.refuse_services -= 1;
            return done(Err(ApiError::Status {
                code: 500,
                message: "etcdserver: request timed out".into(),
            }));
        }
        s.services
            .insert((svc.namespace().unwrap(), svc.name_any()));
        done(Ok(()))
    }

    fn create_batchjob<'a>(&'a self, job: &'a BatchJob) -> BoxFuture<'a, Result<(), ApiError>> {
        let key = (job.namespace().unwrap(), job.name_any());
        if !self.lock().jobs.contains_key(&key) {
            self.submit(job.clone());
        }
        done(Ok(()))
    }

    fn patch_batchjob<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        patch: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let rv = s.bump();
        if let Some(j) = s.jobs.get_mut(&(ns.to_string(), name.to_string())) {
            let spec = &patch["spec"];
            if let Some(c) = spec.get("cancel").and_then(|v| v.as_bool()) {
                j.spec.cancel = Some(c);
            }
            if let Some(h) = spec.get("hold").and_then(|v| v.as_bool()) {
                j.spec.hold = Some(h);
            }
            j.metadata.resource_version = Some(rv);
            j.metadata.generation = Some(j.metadata.generation.unwrap_or(1) + 1);
        }
        done(Ok(()))
    }

    fn apply_partition_status<'a>(
        &'a self,
        name: &'a str,
        status: &'a PartitionStatus,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        if let Some(p) = s.partitions.get_mut(name) {
            p.status = Some(status.clone());
        }
        done(Ok(()))
    }

    fn publish_event<'a>(
        &'a self,
        _ns: &'a str,
        name: &'a str,
        _uid: &'a str,
        ev: &'a JobEvent,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        self.lock().events.push((name.to_string(), ev.clone()));
        done(Ok(()))
    }
}

/// The operator's loop over the fake cluster: plan, then execute.
pub struct Harness {
    pub cluster: FakeCluster,
    pub mem: PlanMemory,
    pub cfg: PlanSettings,
    pub next_id: u64,
    pub now: i64,
    pub usage: BTreeMap<String, f64>,
    pub writes: BTreeMap<exec::WriteKind, u64>,
    /// Jobs written concurrently.
    pub concurrency: usize,
    /// The cluster serves DRA with the NVIDIA DeviceClass (`gpuBinding: auto` is `dra`).
    pub dra: bool,
    /// The gang API the cluster serves.
    pub gang: Option<GangApi>,
    /// The last cycle's node table, handed out again while the nodes are the same (as the
    /// runner's node cache does), so the planner keeps its trees between cycles here too.
    table: Option<Arc<NodeTable>>,
}

impl Harness {
    pub fn new() -> Self {
        Harness {
            cluster: FakeCluster::default(),
            mem: PlanMemory::default(),
            cfg: PlanSettings::default(),
            next_id: 1,
            now: 1_000_000,
            usage: BTreeMap::new(),
            writes: BTreeMap::new(),
            concurrency: 8,
            dra: false,
            gang: None,
            table: None,
        }
    }

    /// One operator cycle with the given faults.
    pub fn cycle_with(&mut self, faults: &dyn Faults) -> ExecReport {
        let (partitions, nodes, jobs, pods, claims) = {
            let s = self.cluster.lock();
            let parts: Vec<Arc<Partition>> = s.partitions.values().cloned().map(Arc::new).collect();
            let mut devices = HashMap::new();
            if self.dra {
                for (n, g) in &s.gpunodes {
                    let names = g
                        .status
                        .iter()
                        .flat_map(|st| &st.gpus)
                        .map(|x| (n.clone(), format!("gpu-{}", x.index)))
                        .collect();
                    devices.insert(n.clone(), names);
                }
            }
            let nodes = NodeTable::new(
                s.nodes
                    .values()
                    .map(|n| translate::node(n, s.gpunodes.get(&n.name_any())))
                    .collect(),
            )
            .with_devices(devices);
            let nodes = match self.table.take() {
                Some(t) if t.nodes == nodes.nodes && t.same_devices(&nodes) => t,
                _ => Arc::new(nodes),
            };
            self.table = Some(nodes.clone());
            let claims: Vec<Arc<ClaimObs>> = s.claims.values().map(|c| Arc::new(c.obs())).collect();
            let jobs: Vec<Arc<JobObs>> = s
                .jobs
                .values()
                .cloned()
                .map(|j| Arc::new(JobObs::new(j)))
                .collect();
            let pods: Vec<Arc<PodObs>> = s
                .pods
                .values()
                .filter_map(PodObs::from_pod)
                .map(Arc::new)
                .collect();
            (parts, nodes, jobs, pods, claims)
        };
        let support = DraSupport {
            served: self.dra,
            classes: if self.dra {
                [dra::DEFAULT_DEVICE_CLASS.to_string()].into()
            } else {
                Default::default()
            },
        };
        let inp = Inputs {
            now: self.now,
            partitions: &partitions,
            nodes: &nodes,
            jobs: &jobs,
            pods: &pods,
            expected_jobs: &Default::default(),
            usage: &self.usage,
            claims: &claims,
            dra: &support,
            gang: self.gang,
        };
        // New jobs' finalizers first (the operator writes them while it plans, from the same
        // snapshot).
        let early_jobs = super::early::select(&jobs);
        let early =
            futures::executor::block_on(exec::add_finalizers(early_jobs, &self.cluster, faults, 8));
        let mut next = self.next_id;
        let p = plan::plan(&inp, &self.cfg, &mut self.mem, &mut || {
            let id = next;
            next += 1;
            Some(id)
        });
        // Ids handed out are gone even if their write fails (as with the ConfigMap counter).
        self.next_id = next;
        let report = futures::executor::block_on(super::early::execute_after(
            p,
            early,
            jobs,
            &self.cluster,
            faults,
            8,
            &Default::default(),
        ));
        for w in &report.written {
            self.mem.wrote_status(&w.job.uid(), self.now);
        }
        for n in &report.partitions_written {
            self.mem.wrote_partition(n, self.now);
        }
        for (k, v) in &report.writes {
            *self.writes.entry(*k).or_default() += v;
        }
        let (n, _) = futures::executor::block_on(exec::publish_events(
            &self.cluster,
            report.events.clone(),
            8,
        ));
        *self.writes.entry(exec::WriteKind::Event).or_default() += n;
        report
    }

    pub fn cycle(&mut self) -> ExecReport {
        self.cycle_with(&NoFaults)
    }

    /// Advances time, runs the kubelet, then a cycle; checks the invariants.
    pub fn step(&mut self, secs: i64) -> ExecReport {
        self.now += secs;
        self.cluster.tick(self.now);
        let r = self.cycle();
        self.cluster.check_no_double_gpu().unwrap();
        self.cluster.check_claims().unwrap();
        r
    }
}
