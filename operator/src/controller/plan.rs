//! One scheduling cycle as a pure function: the objects the reflectors hold in, the API writes
//! to make out ([`plan`]). No client calls, no clock: the caller passes `now` and carries the
//! writes out in the order each [`JobPlan`] gives (see [`super::exec`]).
//!
//! Per job the pipeline is dereference (its pods, partition, parent) → validate (spec parsed,
//! pods buildable) → build (desired status, pods) → the scheduler's decisions merged in; the
//! runner then applies (finalizer, status first, then pods, then deletions).
//!
//! # What holds resources
//! The snapshot handed to the core counts as taken:
//! - every RUNNING job's `status.tasks`, whether or not its pods exist (an admission recorded
//!   before the operator died still holds its GPUs);
//! - every *live* task pod (not Succeeded/Failed) that is not part of such an allocation — a
//!   pod of an older attempt, of a job that ended or was deleted — through the allocation it
//!   records in its `muster.dev/task` annotation, until it is gone.
//!
//! So a GPU is never given twice, even while pods of a stopped job terminate.
//!
//! # Per job (by `status.state`)
//! - no job id: gets the next id, its submit time (creation time), partition and time limit,
//!   and goes on as PENDING; the first status write carries all of it (and the allocation,
//!   when the job starts in the cycle that first sees it).
//! - PENDING: `spec.cancel` → CANCELLED. A spec that does not parse or cannot make pods →
//!   reason `InvalidSpec` (the message names the field). A backoff (`eligibleTime` in the
//!   future) or an unmet dependency keeps it out of the queue (`Dependency`,
//!   `DependencyNeverSatisfied`). Otherwise it is queued; the core's reason, estimated start
//!   and eligibility are written back.
//! - RUNNING: every task Succeeded → COMPLETED; cancel → CANCELLED; a node not ready or gone,
//!   or a GPU unhealthy → NODE_FAIL, requeued unless `requeue: false`; a task Failed → FAILED
//!   with its exit code (a pod failed with no container exit, e.g. evicted or lost with its
//!   node, counts as NODE_FAIL); past the time limit → TIMEOUT; pods missing within the gang
//!   start timeout → created; past it with pods missing or not running → requeued with reason
//!   `JobLaunchFailure` and an exponential backoff.
//! - ended: remaining live pods are deleted (graceful: the pod's grace period is the
//!   partition's `graceTimeSeconds`).
//! - being deleted: its live pods are deleted; the finalizer is removed once none is live.
//!
//! Array jobs are in [`plan`]'s array section: the parent creates one child BatchJob per index.

use std::collections::BTreeMap;

/// The cycle's maps and sets hash names and uids of every job and pod, every cycle: with
/// foldhash rather than std's SipHash (HashDoS resistance buys nothing here: the keys come
/// from objects the API server already admitted, and the seed is still random per map).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::{
    ArrayTaskSummary, BatchJob, BatchJobStatus, GpuBinding, JobState, Partition, PartitionState,
    PartitionStatus, TaskAllocation,
};

use crate::core::{
    self, ArrayTask, Decisions, JobId, PartitionId, RunningJob, Snapshot, TaskAlloc,
};

use super::cluster_cache::ClusterCache;
use super::compact::Packed;
use super::dra::{self, ClaimObs, DraSupport, ResourceClaim};
use super::gang::{self, GangApi, GangRef};
use super::jobobs::{JobObs, TaskRecords};
use super::pods::{self, JobContext, StepSettings};
use super::status::{
    self, DEPENDENCY, DEPENDENCY_NEVER, HELD, INVALID_SPEC, LAUNCH_FAILURE, PARTITION_CONFIG, Why,
};
use super::taskpod::{TaskContainerStatus, TaskPod};
use super::translate::{
    self, FieldError, NodeTable, ParsedJob, PartitionTable, format_limit, secs, time,
};
use crate::core::deps::{self, Asker, DepIndex, DepJob, DepState};
use crate::core::priority::UsageSpan;

/// A pod's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not yet running (unscheduled, pulling images, …).
    Pending,
    /// Running.
    Running,
    /// Every container exited 0.
    Succeeded,
    /// A container failed, or the pod was failed by the node.
    Failed,
    /// The kubelet stopped reporting.
    Unknown,
}

/// How a failed task ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// The container's exit code.
    pub code: i32,
    /// The signal that killed it, if any (the runtime's, or `code - 128`).
    pub signal: Option<i32>,
}

/// What the planner needs of one task pod. Cached for every pod of every job (25,000 at
/// 16,384 nodes), so its strings are kept in one allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct PodObs {
    /// Namespace, name, job, controller owner's UID (empty when absent, see `has_owner`),
    /// failure (see `has_failure`).
    strs: Packed<5>,
    has_owner: bool,
    has_failure: bool,
    /// Admission attempt (label `muster.dev/attempt`).
    pub attempt: Option<u32>,
    /// The node's index in the job (label `muster.dev/node-rank`; node 0 runs the batch
    /// script).
    pub node: Option<u32>,
    /// Phase.
    pub phase: Phase,
    /// Deletion requested.
    pub deleting: bool,
    /// For a failed pod whose task container exited: how.
    pub exit: Option<Exit>,
    /// Failed before its task container started: an init container (the step binary's
    /// install) failed. The failure says which and how.
    pub init_failed: bool,
    /// The allocation the pod records (annotation `muster.dev/task`), the part read.
    pub alloc: Option<PodAlloc>,
}

/// What the planner reads of the allocation a pod records: where its resources are held. The
/// annotation also names each GPU's UUID and the ranks; left out of the cache, as 8 UUIDs are
/// most of a cached pod (25,000 node pods: ~15 MiB).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodAlloc {
    /// The Node.
    pub node: Box<str>,
    /// GPU indices on the node.
    #[serde(default)]
    pub gpus: Box<[u32]>,
    /// CPUs (millicores).
    #[serde(default)]
    pub cpu_millis: u64,
    /// Memory (MiB).
    #[serde(default)]
    pub memory_mib: u64,
}

impl PodObs {
    /// Reads a pod (labels, annotations, owner, the first container's name and the status
    /// are what is used).
    pub fn from_pod(p: &Pod) -> Option<PodObs> {
        PodObs::from_task_pod(&TaskPod::from_pod(p))
    }

    /// Reads a [`TaskPod`] (what the pod watch decodes; the pod store keeps the result).
    pub fn from_task_pod(p: &TaskPod) -> Option<PodObs> {
        let job = p.labels().get(labels::BATCHJOB)?.as_str();
        let num = |k: &str| p.labels().get(k).and_then(|v| v.parse::<u32>().ok());
        let st = p.status.as_ref();
        let phase = match st.and_then(|s| s.phase.as_deref()) {
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            Some("Unknown") => Phase::Unknown,
            _ => Phase::Pending,
        };
        let main = p
            .spec
            .as_ref()
            .and_then(|s| s.containers.as_deref())
            .and_then(|c| c.first())
            .map(|c| c.name.as_str());
        let statuses = st
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or(&[]);
        let term = |c: &TaskContainerStatus| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.as_ref()))
                .cloned()
        };
        let exit = if phase == Phase::Failed {
            let chosen = statuses
                .iter()
                .find(|c| Some(c.name.as_str()) == main && term(c).is_some())
                .or_else(|| {
                    statuses
                        .iter()
                        .find(|c| term(c).is_some_and(|t| t.exit_code != 0))
                })
                .and_then(term);
            chosen.map(|t| Exit {
                code: t.exit_code,
                signal: t.signal.or_else(|| {
                    (t.exit_code > 128 && t.exit_code <= 128 + 64).then(|| t.exit_code - 128)
                }),
            })
        } else {
            None
        };
        // An init container that failed (the pod never reached its task container): how.
        let init_failure = (phase == Phase::Failed && exit.is_none())
            .then(|| {
                st.and_then(|s| s.init_container_statuses.as_deref())
                    .unwrap_or(&[])
                    .iter()
                    .find_map(|c| {
                        term(c)
                            .filter(|t| t.exit_code != 0)
                            .map(|t| (c.name.clone(), t))
                    })
            })
            .flatten();
        let failure = (phase == Phase::Failed).then(|| {
            if let Some((name, t)) = &init_failure {
                let how = [t.reason.as_deref(), t.message.as_deref()]
                    .into_iter()
                    .flatten()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(": ");
                let mut m = format!("init container {name} exited with code {}", t.exit_code);
                if !how.is_empty() {
                    m.push_str(&format!(" ({how})"));
                }
                return m;
            }
            let r = st.and_then(|s| s.reason.clone()).unwrap_or_default();
            let m = st.and_then(|s| s.message.clone()).unwrap_or_default();
            match (r.is_empty(), m.is_empty()) {
                (true, true) => "pod failed".to_string(),
                (false, true) => r,
                (true, false) => m,
                (false, false) => format!("{r}: {m}"),
            }
        });
        let owner = p
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.as_str());
        Some(PodObs {
            attempt: num(labels::ATTEMPT),
            node: num(labels::NODE_RANK),
            phase,
            deleting: p.metadata.deletion_timestamp.is_some(),
            exit,
            init_failed: init_failure.is_some(),
            alloc: p
                .annotations()
                .get(pods::TASK_ANNOTATION)
                .and_then(|a| serde_json::from_str(a).ok()),
            ..PodObs::new(
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default(),
                job,
                owner,
                failure.as_deref(),
            )
        })
    }

    /// A Pending pod of `job` with these names and nothing else known.
    pub fn new(
        namespace: &str,
        name: &str,
        job: &str,
        owner_uid: Option<&str>,
        failure: Option<&str>,
    ) -> PodObs {
        PodObs {
            strs: Packed::new([
                namespace,
                name,
                job,
                owner_uid.unwrap_or_default(),
                failure.unwrap_or_default(),
            ]),
            has_owner: owner_uid.is_some(),
            has_failure: failure.is_some(),
            attempt: None,
            node: None,
            phase: Phase::Pending,
            deleting: false,
            exit: None,
            init_failed: false,
            alloc: None,
        }
    }

    /// Namespace.
    pub fn namespace(&self) -> &str {
        self.strs.get(0)
    }

    /// Pod name.
    pub fn name(&self) -> &str {
        self.strs.get(1)
    }

    /// Its BatchJob's name (label `muster.dev/batchjob`).
    pub fn job(&self) -> &str {
        self.strs.get(2)
    }

    /// UID of its controller owner.
    pub fn owner_uid(&self) -> Option<&str> {
        self.has_owner.then(|| self.strs.get(3))
    }

    /// For a failed pod: the pod's reason and message.
    pub fn failure(&self) -> Option<&str> {
        self.has_failure.then(|| self.strs.get(4))
    }

    /// Still holds its node's resources (not Succeeded or Failed).
    pub fn live(&self) -> bool {
        !matches!(self.phase, Phase::Succeeded | Phase::Failed)
    }
}

/// Knobs of the planner.
#[derive(Clone, Debug)]
pub struct PlanSettings {
    /// Seconds a gang's pods get to be all Running after admission.
    pub gang_start_timeout_secs: i64,
    /// Least seconds between two status writes of a job that change only informational fields
    /// (message, estimated start, array summary counts).
    pub status_refresh_secs: i64,
    /// An estimated start that moved less than this is not rewritten.
    pub estimate_tolerance_secs: i64,
    /// Most array elements created per array and cycle.
    pub max_children_per_cycle: usize,
    /// The scheduler's configuration.
    pub scheduler: core::Config,
    /// The step image and cluster domain of node pods.
    pub step: StepSettings,
}

impl Default for PlanSettings {
    fn default() -> Self {
        PlanSettings {
            gang_start_timeout_secs: 300,
            status_refresh_secs: 15,
            estimate_tolerance_secs: 60,
            max_children_per_cycle: 256,
            scheduler: core::Config::default(),
            step: StepSettings::default(),
        }
    }
}

/// A spec parsed once per generation.
type Parsed = Arc<Result<ParsedJob, Vec<FieldError>>>;

/// Live pods grouped by (namespace, job, owner uid, attempt).
type PodGroups<'a> = BTreeMap<(String, String, Option<String>, Option<u32>), Vec<&'a PodObs>>;

/// What the planner remembers between cycles. Not authoritative: losing it (a restart, a new
/// leader) costs at most a few extra writes.
#[derive(Debug, Default)]
pub struct PlanMemory {
    /// Last status write per BatchJob uid.
    last_status_write: HashMap<String, i64>,
    /// Last status write per Partition name.
    last_partition_write: HashMap<String, i64>,
    /// Parsed specs by uid, with the generation they were parsed at.
    parsed: HashMap<String, (Option<i64>, Parsed)>,
    /// The snapshot's nodes and the core's trees, kept while the node table and the
    /// partitions stay the same.
    cluster: Option<ClusterCache>,
    /// How many times `cluster` was built.
    cluster_builds: u64,
}

impl PlanMemory {
    /// Records a successful status write.
    pub fn wrote_status(&mut self, uid: &str, now: i64) {
        self.last_status_write.insert(uid.to_string(), now);
    }

    /// Records a successful partition status write.
    pub fn wrote_partition(&mut self, name: &str, now: i64) {
        self.last_partition_write.insert(name.to_string(), now);
    }

    fn parse(&mut self, job: &BatchJob) -> Parsed {
        let uid = job.uid().unwrap_or_default();
        let generation = job.metadata.generation;
        if let Some((g, p)) = self.parsed.get(&uid)
            && *g == generation
        {
            return p.clone();
        }
        let p = Arc::new(translate::job_request(&job.spec));
        self.parsed.insert(uid, (generation, p.clone()));
        p
    }

    /// How many cycles built the cluster's trees (the others reused them).
    pub fn cluster_builds(&self) -> u64 {
        self.cluster_builds
    }

    fn retain(&mut self, live: &HashSet<String>) {
        self.parsed.retain(|k, _| live.contains(k));
        self.last_status_write.retain(|k, _| live.contains(k));
    }
}

/// Everything one cycle reads.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// Now, seconds since the epoch.
    pub now: i64,
    /// Every Partition.
    pub partitions: &'a [Arc<Partition>],
    /// Every Node with its GpuNode, translated. A new table means the nodes changed: the
    /// planner keeps the core's trees for as long as it gets the same one (see
    /// `ClusterCache`).
    pub nodes: &'a Arc<NodeTable>,
    /// Every BatchJob, as cached.
    pub jobs: &'a [Arc<JobObs>],
    /// Every task pod.
    pub pods: &'a [Arc<PodObs>],
    /// BatchJobs this operator created that the watch has not delivered yet (namespace,
    /// name): array elements counted as existing so they are not created twice.
    pub expected_jobs: &'a std::collections::HashSet<(String, String)>,
    /// Decayed GPU-seconds per namespace (fair share).
    pub usage: &'a BTreeMap<String, f64>,
    /// Every ResourceClaim in the cluster (none where `resource.k8s.io/v1` is not served):
    /// Muster's, to delete those of ended attempts, and everyone's, whose allocated GPUs are
    /// taken.
    pub claims: &'a [Arc<ClaimObs>],
    /// What the cluster offers for DRA binding (for `gpuBinding: auto`).
    pub dra: &'a DraSupport,
    /// Kubernetes' gang API, where served: each admission's pods then form a group.
    pub gang: Option<GangApi>,
}

/// A metric to record once the job's status write succeeded.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// The job entered this state.
    Transition(JobState),
    /// The job started this long after it was submitted.
    TimeToStart {
        /// Partition.
        partition: String,
        /// Seconds.
        secs: f64,
    },
    /// The job was preempted.
    Preempted {
        /// Its partition.
        partition: String,
    },
}

/// A Kubernetes Event about the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    /// Warning (else Normal).
    pub warning: bool,
    /// Short CamelCase reason (`Started`, `Failed`, `GangStartTimeout`, …).
    pub reason: String,
    /// What happened.
    pub note: String,
}

/// The status to write, with the resourceVersion it was computed from (a precondition: the
/// write fails with a conflict if the object changed meanwhile).
#[derive(Clone, Debug, PartialEq)]
pub struct StatusWrite {
    /// The whole status.
    pub status: BatchJobStatus,
    /// The resourceVersion it was computed from.
    pub resource_version: Option<String>,
}

/// A planned [`StatusWrite`], its task records compact until it is written: a cycle that
/// admits thousands of gangs holds every admitted job's status until its turn to be written.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedStatus {
    /// The status without its task records.
    status: BatchJobStatus,
    /// Its task records.
    tasks: Arc<TaskRecords>,
    /// The resourceVersion it was computed from.
    pub resource_version: Option<String>,
}

#[cfg(test)]
impl PlannedStatus {
    /// An empty status computed from `resource_version`.
    pub(crate) fn empty(resource_version: &str) -> Self {
        PlannedStatus {
            status: BatchJobStatus::default(),
            tasks: Arc::default(),
            resource_version: Some(resource_version.into()),
        }
    }
}

impl PlannedStatus {
    /// The write, the whole status, with the precondition `resource_version`.
    pub fn to_write(&self, resource_version: Option<String>) -> StatusWrite {
        let mut status = self.status.clone();
        status.tasks = self.tasks.to_vec();
        StatusWrite {
            status,
            resource_version,
        }
    }

    /// The state written.
    pub fn state(&self) -> Option<JobState> {
        self.status.state
    }
}

/// The writes for one BatchJob, carried out in this order: finalizer, status, Service, the
/// gang group, claims, pod creations, pod deletions, claim and group deletions, children,
/// child patches, finalizer removal, events. When the finalizer or status write fails the
/// rest is skipped (claims and pods are only created for a recorded allocation, and only
/// deleted once the reason is recorded); a pod is created only once every claim of the
/// admission exists; the next cycle plans again.
#[derive(Clone, Debug, Default)]
pub struct JobPlan {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Add the allocation finalizer first.
    pub add_finalizer: bool,
    /// The status to write.
    pub status: Option<PlannedStatus>,
    /// The job's step credential Secret to create (without its key: the writer adds it;
    /// one that exists is kept), before any pod. (Boxed, as `service`: most plans have
    /// none, and every job has a plan slot in the cycle.)
    pub secret: Option<Box<Secret>>,
    /// The headless Service to create.
    pub service: Option<Box<Service>>,
    /// Kubernetes' gang object (Workload or PodGroup) of this admission, created before its
    /// pods (where the API is served).
    pub group: Option<serde_json::Value>,
    /// Pods to create, and their ResourceClaims in `dra` mode (built as they are written).
    pub create: PodsToCreate,
    /// Pods to delete (names; each with its own grace period).
    pub delete: Vec<String>,
    /// Muster's ResourceClaims to delete (names): those of other attempts, and the current
    /// attempt's once the job stops holding its allocation.
    pub delete_claims: Vec<String>,
    /// Gang objects of an ended attempt to delete: (kind, name).
    pub delete_groups: Vec<(GangApi, String)>,
    /// Array elements to create.
    pub children: Vec<BatchJob>,
    /// Merge patches to array elements' specs (`cancel`, `hold`).
    pub child_patches: Vec<(String, serde_json::Value)>,
    /// Remove the finalizer (after everything else).
    pub remove_finalizer: bool,
    /// Events to publish.
    pub events: Vec<JobEvent>,
    /// Metrics to record when the status write succeeds.
    pub effects: Vec<Effect>,
}

/// Node pods to create, built only when they are written: a cycle that admits 1,400 gangs
/// would otherwise hold thousands of complete pod objects (each with its environment) until
/// its last write; built one job at a time, at most the writer's concurrency exist at once.
#[derive(Clone, Debug, Default)]
pub struct PodsToCreate {
    src: Option<Arc<PodSource>>,
    nodes: Vec<u32>,
    /// Nodes whose pod needs a claim created first (`dra` mode, the node holds GPUs).
    claim_nodes: Vec<u32>,
}

/// What a job's pods are built from (an owned [`JobContext`]). A cycle that admits thousands
/// of gangs holds every admitted job's source until its writes: the job, its partition and
/// the node table are shared with the cycle's inputs, the task records compact, and what is
/// derived from them (the records, their layout, the nodes' GPU topologies) computed when the
/// first pod is built (and dropped with the plan once written).
#[derive(Debug)]
struct PodSource {
    job: Arc<JobObs>,
    job_id: u64,
    attempt: u32,
    tasks: Arc<TaskRecords>,
    partition: Option<Arc<Partition>>,
    partition_name: String,
    array: Option<(u64, u32)>,
    gpus_per_node: Option<String>,
    gpus_per_task: Option<String>,
    gpu_binding: GpuBinding,
    device_class: String,
    gang: Option<GangRef>,
    step: StepSettings,
    table: Arc<NodeTable>,
    limit_end: Option<i64>,
    built: std::sync::OnceLock<Derived>,
}

/// What the pods of a [`PodSource`] are built from, derived once.
#[derive(Debug)]
struct Derived {
    tasks: Vec<TaskAllocation>,
    layout: pods::JobLayout,
    node_gpus: Vec<String>,
}

impl PodSource {
    fn derived(&self) -> &Derived {
        self.built.get_or_init(|| {
            let tasks = self.tasks.to_vec();
            let layout = pods::JobLayout::new(self.job.job(), self.attempt, &tasks);
            let node_gpus = node_gpus(&layout, &self.table);
            Derived {
                tasks,
                layout,
                node_gpus,
            }
        })
    }

    fn layout(&self) -> &pods::JobLayout {
        &self.derived().layout
    }
}

/// Each node's GPUs with their topology (`MUSTER_NODE_GPUS`), by node index (empty for a node
/// without GPUs).
fn node_gpus(layout: &pods::JobLayout, table: &NodeTable) -> Vec<String> {
    let mut node_gpus = Vec::new();
    for share in layout.shares() {
        let n = share.node_rank;
        if node_gpus.len() < n as usize {
            node_gpus.resize(n as usize, String::new());
        }
        node_gpus.push(if share.gpus.is_empty() {
            String::new()
        } else {
            pods::node_gpus_json(share, table.get(&share.node))
        });
    }
    node_gpus
}

/// What [`PodsToCreate::new`] keeps of the cycle (shared, not copied).
struct Shared {
    job: Arc<JobObs>,
    tasks: Arc<TaskRecords>,
    partition: Option<Arc<Partition>>,
    table: Arc<NodeTable>,
}

impl PodsToCreate {
    /// The pods of `nodes` (node indices; with their claims in `dra` mode, and `gang` naming
    /// their group), checked to be buildable: every node allocated, every claim buildable
    /// (GPUs with UUIDs), and the first pod built (everything else that can fail is the same
    /// for every node). `table` gives `MUSTER_NODE_GPUS` the GPUs' topology.
    /// `ctx` is the job's context (its tasks those of `shared.tasks`).
    fn new(
        ctx: &JobContext<'_>,
        shared: Shared,
        nodes: Vec<u32>,
        device_class: &str,
        gang: Option<GangRef>,
    ) -> Result<PodsToCreate, pods::BuildError> {
        let mut claim_nodes = Vec::new();
        let layout = pods::JobLayout::new(ctx.job, ctx.attempt, ctx.tasks);
        let node_gpus = node_gpus(&layout, &shared.table);
        for n in &nodes {
            let t = layout.share(*n).ok_or(pods::BuildError::NoSuchNode(*n))?;
            if ctx.gpu_binding == GpuBinding::Dra && !t.gpus.is_empty() {
                if t.gpu_uuids.len() != t.gpus.len() || t.gpu_uuids.iter().any(|u| u.is_empty()) {
                    let i = (0..t.gpus.len())
                        .find(|&i| t.gpu_uuids.get(i).is_none_or(|u| u.is_empty()))
                        .unwrap_or(0);
                    return Err(dra::DraError::NoUuid {
                        node: t.node.clone(),
                        index: t.gpus[i],
                    }
                    .into());
                }
                claim_nodes.push(*n);
            }
        }
        if let Some(n) = nodes.first() {
            let mut c = *ctx;
            c.node_gpus = &node_gpus;
            pods::build_pod_in(&c, &layout, *n)?;
        }
        Ok(PodsToCreate {
            src: Some(Arc::new(PodSource {
                job: shared.job,
                job_id: ctx.job_id,
                attempt: ctx.attempt,
                tasks: shared.tasks,
                partition: shared.partition,
                partition_name: ctx.partition_name.to_string(),
                array: ctx.array,
                gpus_per_node: ctx.gpus_per_node.map(str::to_string),
                gpus_per_task: ctx.gpus_per_task.map(str::to_string),
                gpu_binding: ctx.gpu_binding,
                device_class: device_class.to_string(),
                gang,
                step: ctx.step.clone(),
                table: shared.table,
                built: std::sync::OnceLock::new(),
                limit_end: ctx.limit_end,
            })),
            nodes,
            claim_nodes,
        })
    }

    /// Nodes whose pod's claim must exist before the pod is created.
    pub fn claim_nodes(&self) -> &[u32] {
        &self.claim_nodes
    }

    /// The ResourceClaim of node `node`'s pod, with that node's GPUs of the job (`None` in
    /// `env` mode or without GPUs).
    pub fn build_claim(&self, node: u32) -> Result<Option<ResourceClaim>, pods::BuildError> {
        let s = self
            .src
            .as_ref()
            .ok_or(pods::BuildError::NoSuchNode(node))?;
        if s.gpu_binding != GpuBinding::Dra {
            return Ok(None);
        }
        let t = s
            .layout()
            .share(node)
            .ok_or(pods::BuildError::NoSuchNode(node))?;
        let pod = pods::pod_name(&s.job.job().name_any(), s.attempt, node);
        let gpus: Vec<dra::HeldGpu<'_>> = t
            .gpus
            .iter()
            .zip(
                t.gpu_uuids
                    .iter()
                    .map(String::as_str)
                    .chain(std::iter::repeat("")),
            )
            .map(|(&index, uuid)| dra::HeldGpu { index, uuid })
            .collect();
        let c = dra::ClaimFor {
            job: s.job.job(),
            job_id: s.job_id,
            attempt: s.attempt,
            pod: &pod,
            node: &t.node,
            device_class: &s.device_class,
        };
        Ok(dra::build_claim(&c, &gpus)?)
    }

    /// The group the pods belong to, where Kubernetes' gang API is used.
    pub fn gang(&self) -> Option<&GangRef> {
        self.src.as_ref().and_then(|s| s.gang.as_ref())
    }

    /// No pods.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// How many pods.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The node indices, in order.
    pub fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    /// Builds the pod of node `node`.
    pub fn build(&self, node: u32) -> Result<Pod, pods::BuildError> {
        let s = self
            .src
            .as_ref()
            .ok_or(pods::BuildError::NoSuchNode(node))?;
        let d = s.derived();
        let ctx = JobContext {
            job: s.job.job(),
            job_id: s.job_id,
            attempt: s.attempt,
            tasks: &d.tasks,
            partition: s.partition.as_deref(),
            partition_name: &s.partition_name,
            array: s.array,
            gpus_per_node: s.gpus_per_node.as_deref(),
            gpus_per_task: s.gpus_per_task.as_deref(),
            gpu_binding: s.gpu_binding,
            step: &s.step,
            node_gpus: &d.node_gpus,
            limit_end: s.limit_end,
        };
        pods::build_pod_in(&ctx, &d.layout, node)
    }

    /// Builds every pod.
    pub fn build_all(&self) -> Result<Vec<Pod>, pods::BuildError> {
        self.nodes.iter().map(|n| self.build(*n)).collect()
    }
}

impl JobPlan {
    fn is_empty(&self) -> bool {
        !self.add_finalizer
            && self.status.is_none()
            && self.secret.is_none()
            && self.service.is_none()
            && self.group.is_none()
            && self.create.is_empty()
            && self.delete.is_empty()
            && self.delete_claims.is_empty()
            && self.delete_groups.is_empty()
            && self.children.is_empty()
            && self.child_patches.is_empty()
            && !self.remove_finalizer
            && self.events.is_empty()
    }
}

/// A Partition's status to write.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionWrite {
    /// Partition name.
    pub name: String,
    /// The whole status.
    pub status: PartitionStatus,
}

/// Gauge values after the cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gauges {
    /// Pending jobs by partition and reason.
    pub queue: BTreeMap<(String, String), u64>,
    /// Running jobs by partition.
    pub running: BTreeMap<String, u64>,
    /// GPUs by partition and state (`total`, `allocated`, `unhealthy`).
    pub gpus: BTreeMap<(String, String), u64>,
}

/// The cycle's result.
#[derive(Clone, Debug, Default)]
pub struct CyclePlan {
    /// Writes per job (only jobs with something to do).
    pub jobs: Vec<JobPlan>,
    /// Partition statuses to write.
    pub partitions: Vec<PartitionWrite>,
    /// Gauges.
    pub gauges: Gauges,
    /// Jobs holding allocations, as fair-share usage reads them.
    pub running: Vec<UsageSpan>,
    /// Jobs started this cycle.
    pub starts: usize,
    /// Gangs preempted this cycle.
    pub preemptions: usize,
    /// Jobs in the scheduler's queue.
    pub queued: usize,
}

/// How many jobs need a job id (so the caller can reserve enough before [`plan`]).
pub fn new_job_count(jobs: &[Arc<JobObs>]) -> usize {
    jobs.iter()
        .map(|j| j.job())
        .filter(|j| {
            j.metadata.deletion_timestamp.is_none()
                && j.status.as_ref().and_then(|s| s.job_id).is_none()
        })
        .count()
}

/// A job's working state during the cycle.
struct Work<'a> {
    /// The job as cached.
    obs: &'a Arc<JobObs>,
    /// `obs`'s object: its status (`prev`) has no task records, `records` has them.
    job: &'a BatchJob,
    uid: String,
    ns: String,
    name: String,
    /// The stored status, without its task records (`status.tasks` is `records`).
    prev: Option<&'a BatchJobStatus>,
    /// The stored status's task records.
    records: &'a TaskRecords,
    /// The status being decided, always without task records: those are `tasks`. Copying
    /// every job's task records into each cycle was the largest transient allocation
    /// (200,000 records at 16,384 nodes), and a cycle's admissions hold theirs until written.
    st: BatchJobStatus,
    /// `st`'s task records.
    tasks: Tasks,
    plan: JobPlan,
    id: Option<JobId>,
    parsed: Option<Parsed>,
    part: Option<PartitionId>,
    part_name: Option<String>,
    /// Index in the snapshot's pending list.
    queued: bool,
    /// Holds its `status.tasks` allocation (RUNNING and staying so).
    holds: bool,
    /// Array element: (array job id, index, max running).
    array: Option<ArrayTask>,
    /// Array parent: its elements' indices.
    is_parent: bool,
    /// Skip entirely this cycle (no id available).
    skip: bool,
    /// What the planner knows about a pending job that its Slurm reason does not say (for
    /// the conditions).
    known: Option<Why>,
}

/// A job's task records during the cycle.
enum Tasks {
    /// The stored ones ([`Work::records`]).
    Kept,
    /// Replaced this cycle (an admission; none once the allocation is released).
    New(Arc<TaskRecords>),
}

impl Work<'_> {
    /// `st`'s task records.
    fn task_records(&self) -> &TaskRecords {
        match &self.tasks {
            Tasks::Kept => self.records,
            Tasks::New(r) => r,
        }
    }

    /// `st`'s task records are now `tasks` (an empty list releases the allocation).
    fn set_tasks(&mut self, tasks: &[TaskAllocation]) {
        self.tasks = Tasks::New(Arc::new(TaskRecords::new(tasks)));
    }

    /// Whether `st` has task records (an allocation).
    fn has_tasks(&self) -> bool {
        !self.task_records().is_empty()
    }

    /// The node indices of `st`'s tasks, ascending, each once.
    fn node_ranks(&self) -> Vec<u32> {
        self.task_records().node_ranks()
    }

    /// `st`'s task records as the core's running job reads them.
    fn core_tasks(&self, nodes: &NodeTable) -> Vec<TaskAlloc> {
        self.task_records()
            .iter()
            .map(|t| TaskAlloc {
                node: nodes.id(t.node()),
                gpus: t.gpus().to_vec(),
                cpu_millis: t.cpu_millis(),
                memory_mib: t.memory_mib(),
            })
            .collect()
    }

    /// Whether `st`'s task records differ from the stored ones.
    fn tasks_changed(&self) -> bool {
        match &self.tasks {
            Tasks::Kept => false,
            Tasks::New(r) => **r != *self.records,
        }
    }
}

/// Whether `j` is an array's parent (its elements are BatchJobs of their own; it never holds
/// an allocation).
pub(super) fn is_array_parent(j: &BatchJob) -> bool {
    j.spec.array.is_some() && !j.labels().contains_key(labels::ARRAY_PARENT)
}

pub(super) fn has_finalizer(j: &BatchJob) -> bool {
    j.finalizers().iter().any(|f| f == labels::FINALIZER)
}

fn event(warning: bool, reason: &str, note: impl Into<String>) -> JobEvent {
    JobEvent {
        warning,
        reason: reason.to_string(),
        note: note.into(),
    }
}

/// Requested sizes of a pending job, for its status (`numNodes`, `numTasks`, `numGpus`,
/// `numCpus`).
fn requested(st: &mut BatchJobStatus, parsed: &ParsedJob, part: Option<&core::Partition>) {
    let Some(p) = part else { return };
    if let Ok(d) = core::shape::normalize(&parsed.request, p) {
        st.num_nodes = Some(d.min_nodes);
        st.num_tasks = Some(d.min_tasks());
        st.num_gpus = Some(d.min_gpus().min(u64::from(u32::MAX)) as u32);
        st.num_cpus = Some(d.min_cpu().div_ceil(1000).min(u64::from(u32::MAX)) as u32);
    }
}

/// Status fields that only inform (message, estimated start, array counts) are "soft": a
/// change to them alone is written at most every `status_refresh_secs`.
fn hard_view(st: &BatchJobStatus) -> BatchJobStatus {
    let mut s = st.clone();
    s.message = None;
    s.start_time = if s.state == Some(JobState::Pending) {
        None
    } else {
        s.start_time
    };
    s.array_tasks = None;
    for c in &mut s.conditions {
        c.message.clear();
        c.last_transition_time = time(0);
    }
    s
}

/// Runs one cycle: see the [module docs](self).
pub fn plan(
    inp: &Inputs<'_>,
    cfg: &PlanSettings,
    mem: &mut PlanMemory,
    ids: &mut dyn FnMut() -> Option<JobId>,
) -> CyclePlan {
    let now = inp.now;
    let table: PartitionTable = translate::partitions(inp.partitions.iter().map(|p| p.as_ref()));
    let crd_parts: HashMap<String, &Partition> = inp
        .partitions
        .iter()
        .map(|p| (p.name_any(), p.as_ref()))
        .collect();
    let bind = BindCtx::new(inp);
    // Taken out for the cycle and kept again at its end (a panic in between loses it:
    // rebuilt next cycle).
    let (mut cluster, built) =
        ClusterCache::reuse_or_build(mem.cluster.take(), inp.nodes, &table.parts);
    mem.cluster_builds += u64::from(built);
    let mut snap = Snapshot {
        nodes: cluster.nodes(),
        partitions: table.parts.clone(),
        usage: inp.usage.clone(),
        ..Default::default()
    };

    // Pods by (namespace, job name).
    let mut pods_of: HashMap<(&str, &str), Vec<&PodObs>> = HashMap::default();
    for p in inp.pods {
        pods_of
            .entry((p.namespace(), p.job()))
            .or_default()
            .push(p.as_ref());
    }

    // Jobs in submission order, so that new ids increase with it.
    let mut order: Vec<&Arc<JobObs>> = inp.jobs.iter().collect();
    // Keys borrowed, not `namespace()`/`name_any()` copies: jobs submitted in the same second
    // tie on the time, and the copies were most of the sort's cost.
    fn submit_key(j: &BatchJob) -> (Option<i64>, Option<&str>, &str) {
        let m = &j.metadata;
        let name = m.name.as_deref().or(m.generate_name.as_deref());
        (
            m.creation_timestamp.as_ref().map(secs),
            m.namespace.as_deref(),
            name.unwrap_or_default(),
        )
    }
    order.sort_by(|a, b| submit_key(a.job()).cmp(&submit_key(b.job())));
    let live_uids: HashSet<String> = order.iter().filter_map(|j| j.job().uid()).collect();
    mem.retain(&live_uids);

    // Parents by uid; children by parent uid.
    let by_uid: HashMap<String, &BatchJob> = order
        .iter()
        .filter_map(|j| Some((j.job().uid()?, j.job())))
        .collect();

    let mut works: Vec<Work<'_>> = Vec::with_capacity(order.len());
    for obs in &order {
        let job = obs.job();
        let prev = job.status.as_ref();
        let uid = job.uid().unwrap_or_default();
        let mut w = Work {
            obs,
            job,
            uid: uid.clone(),
            ns: job.namespace().unwrap_or_default(),
            name: job.name_any(),
            prev,
            records: obs.tasks(),
            // The cached status has no task records to copy: `records` stands for them.
            st: prev.cloned().unwrap_or_default(),
            tasks: Tasks::Kept,
            plan: JobPlan {
                namespace: job.namespace().unwrap_or_default(),
                name: job.name_any(),
                uid,
                ..Default::default()
            },
            id: prev.and_then(|s| s.job_id),
            parsed: None,
            part: None,
            part_name: None,
            queued: false,
            holds: false,
            array: None,
            is_parent: is_array_parent(job),
            skip: false,
            known: None,
        };
        if job.metadata.deletion_timestamp.is_none() && w.id.is_none() {
            match ids() {
                Some(id) => {
                    w.id = Some(id);
                    w.st.job_id = Some(id);
                    w.st.state = Some(JobState::Pending);
                    w.st.submit_time = Some(
                        job.metadata
                            .creation_timestamp
                            .clone()
                            .unwrap_or_else(|| time(now)),
                    );
                    w.plan
                        .events
                        .push(event(false, "Submitted", format!("job id {id} assigned")));
                    w.plan.effects.push(Effect::Transition(JobState::Pending));
                }
                None => w.skip = true,
            }
        }
        if !w.skip && job.metadata.deletion_timestamp.is_none() {
            let parsed = mem.parse(job);
            // Partition and time limit. A job that names none keeps the default it was given
            // when first seen (as Slurm fixes it at submission): a new default never moves
            // pending jobs.
            let pinned = match (
                &job.spec.partition,
                prev.and_then(|p| p.partition.as_deref()),
            ) {
                (None, Some(p)) if prev.and_then(|p| p.job_id).is_some() => Some(p),
                _ => None,
            };
            let resolved = match pinned {
                Some(p) => table.by_name.get(p).copied().ok_or_else(|| p.to_string()),
                None => table.resolve(job.spec.partition.as_deref()),
            };
            match resolved {
                Ok(pid) => {
                    w.part = Some(pid);
                    w.part_name = Some(table.name(pid).to_string());
                }
                Err(n) => {
                    w.part_name = (!n.is_empty()).then_some(n);
                }
            }
            if !(w.st.state == Some(JobState::Running)
                || w.st.state.is_some_and(|s| s.is_terminal()))
            {
                w.st.partition = w.part_name.clone();
                if let Ok(p) = parsed.as_ref() {
                    let part = w.part.map(|i| &table.parts[i as usize]);
                    w.st.time_limit = Some(format_limit(translate::effective_time_limit(p, part)));
                    requested(&mut w.st, p, part);
                }
            }
            w.parsed = Some(parsed);
        }
        works.push(w);
    }

    // Dependency index over every job.
    let dep_index = build_dep_index(&works);
    let id_to_work: HashMap<JobId, usize> = works
        .iter()
        .enumerate()
        .filter_map(|(i, w)| Some((w.id?, i)))
        .collect();

    // Arrays: each parent's elements and `%N`.
    let mut children_of: HashMap<String, Vec<usize>> = HashMap::default();
    for (i, w) in works.iter().enumerate() {
        if w.job.labels().contains_key(labels::ARRAY_PARENT)
            && let Some(o) = w
                .job
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
        {
            children_of.entry(o.uid.clone()).or_default().push(i);
        }
    }
    let max_running: HashMap<String, Option<u32>> = works
        .iter()
        .filter(|w| w.is_parent)
        .filter_map(|w| {
            let p = w.parsed.as_deref()?.as_ref().ok()?;
            Some((w.uid.clone(), p.array.as_ref().and_then(|a| a.max_running)))
        })
        .collect();

    // Held allocations: (uid, attempt).
    let mut held: HashSet<(String, u32)> = HashSet::default();
    for wi in 0..works.len() {
        if works[wi].skip {
            continue;
        }
        let key = (works[wi].ns.clone(), works[wi].name.clone());
        let pods: Vec<&PodObs> = pods_of
            .get(&(key.0.as_str(), key.1.as_str()))
            .map(|v| {
                v.iter()
                    .copied()
                    .filter(|p| p.owner_uid() == Some(works[wi].uid.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        if works[wi].is_parent {
            let kids = children_of.get(&works[wi].uid).cloned().unwrap_or_default();
            step_parent(
                &mut works,
                wi,
                &kids,
                &dep_index,
                inp.expected_jobs,
                cfg,
                now,
            );
            continue;
        }
        step_job(
            &mut works[wi],
            &pods,
            &snap,
            &crd_parts,
            &bind,
            &by_uid,
            &max_running,
            &dep_index,
            inp.nodes,
            cfg,
            now,
        );
        let w = &works[wi];
        if w.holds {
            let attempt = w.st.attempt.unwrap_or(0);
            held.insert((w.uid.clone(), attempt));
            snap.running.push(translate::running_job_with(
                w.job,
                w.core_tasks(inp.nodes),
                w.id.unwrap_or(0),
                w.part,
                None,
            ));
        }
        if w.queued {
            let parsed = w.parsed.as_ref().and_then(|p| p.as_ref().as_ref().ok());
            if let (Some(p), Some(id)) = (parsed, w.id) {
                let submit = w.st.submit_time.as_ref().map(secs).unwrap_or(now);
                let eligible = w.st.eligible_time.as_ref().map(secs);
                snap.pending.push(translate::pending_job(
                    w.job,
                    id,
                    p,
                    w.part,
                    submit,
                    eligible,
                    w.array.clone(),
                ));
            }
        }
    }
    // The jobs holding allocations (for fair-share usage): `snap.running` up to here, kept
    // as spans once the cycle is decided (not the jobs: a task record each).
    let usage_running_len = snap.running.len();

    // Live pods not covered by a held allocation keep their resources until gone.
    let mut groups: PodGroups<'_> = BTreeMap::new();
    for p in inp.pods.iter().map(|p| p.as_ref()).filter(|p| p.live()) {
        if let (Some(u), Some(a)) = (p.owner_uid(), p.attempt)
            && held.contains(&(u.to_string(), a))
        {
            continue;
        }
        groups
            .entry((
                p.namespace().to_string(),
                p.job().to_string(),
                p.owner_uid().map(str::to_string),
                p.attempt,
            ))
            .or_default()
            .push(p);
    }
    let mut synthetic = JobId::MAX;
    for ((ns, job, _, _), pods) in groups {
        let tasks: Vec<TaskAlloc> = pods
            .iter()
            .filter_map(|p| p.alloc.as_ref())
            .map(|a| TaskAlloc {
                node: inp.nodes.id(&a.node),
                gpus: a.gpus.to_vec(),
                cpu_millis: a.cpu_millis,
                memory_mib: a.memory_mib,
            })
            .filter(|t| (t.node as usize) < inp.nodes.nodes.len())
            .collect();
        if tasks.is_empty() {
            continue;
        }
        snap.running.push(RunningJob {
            id: synthetic,
            name: job,
            namespace: ns,
            partition: None,
            start_time: now,
            stopping_since: Some(now),
            tasks,
            ..Default::default()
        });
        synthetic -= 1;
    }
    // GPUs allocated to a ResourceClaim (anyone's) that nothing above counts: kube-scheduler
    // would give them to no other claim, so neither does Muster until the claim lets go.
    if !inp.claims.is_empty() {
        for r in claim_holds(inp, &held, &snap.running, now, &mut synthetic) {
            snap.running.push(r);
        }
    }

    let queued = snap.pending.len();
    let decisions: Decisions = if snap.pending.is_empty() && snap.running.is_empty() {
        Decisions::default()
    } else {
        cluster.schedule(&snap, now, &cfg.scheduler)
    };

    // Starts.
    let mut starts = 0;
    for s in &decisions.starts {
        let Some(&wi) = id_to_work.get(&s.job) else {
            continue;
        };
        admit(&mut works[wi], s, inp.nodes, &crd_parts, &bind, cfg, now);
        starts += 1;
    }
    // Preemptions.
    let mut preemptions = 0;
    for pr in &decisions.preemptions {
        for v in &pr.victims {
            let Some(&wi) = id_to_work.get(&v.job) else {
                continue;
            };
            let pods: Vec<&PodObs> = pods_of
                .get(&(works[wi].ns.as_str(), works[wi].name.as_str()))
                .cloned()
                .unwrap_or_default();
            preempt(&mut works[wi], pr.for_job, v.requeue, &pods, now);
            preemptions += 1;
        }
    }
    // Pending reasons and estimates.
    for info in &decisions.pending {
        let Some(&wi) = id_to_work.get(&info.job) else {
            continue;
        };
        let w = &mut works[wi];
        if w.st.state != Some(JobState::Pending) {
            continue;
        }
        w.st.reason = Some(info.reason.as_str().to_string());
        w.st.message = Some(info.message.clone()).filter(|m| !m.is_empty());
        w.st.start_time = info.start_estimate.map(time);
        if info.eligible && w.st.eligible_time.is_none() {
            w.st.eligible_time = Some(time(now));
        }
    }

    // Array parents' summaries need their elements' new states: done in step_parent from the
    // stored states (one cycle behind), which keeps parents out of the critical path.

    // Gauges and partition statuses.
    let mut gauges = Gauges::default();
    for w in &works {
        if w.skip || w.is_parent || w.job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let part = w.st.partition.clone().unwrap_or_default();
        match w.st.state {
            Some(JobState::Pending) | None => {
                let r = w.st.reason.clone().unwrap_or_else(|| "None".into());
                *gauges.queue.entry((part, r)).or_default() += 1;
            }
            Some(JobState::Running) => *gauges.running.entry(part).or_default() += 1,
            _ => {}
        }
    }
    let partitions = partition_statuses(
        inp,
        &bind,
        &table,
        &snap,
        &decisions,
        &works,
        &mut gauges,
        mem,
        cfg,
    );
    mem.cluster = Some(cluster);
    let usage_running: Vec<UsageSpan> = snap.running[..usage_running_len]
        .iter()
        .map(UsageSpan::of)
        .collect();
    drop(snap);

    // Muster's claims by job: those not of an allocation the job keeps are deleted.
    let mut claims_of: HashMap<(&str, &str), Vec<&ClaimObs>> = HashMap::default();
    for c in inp.claims.iter().filter(|c| c.is_musters() && !c.deleting) {
        if let Some(j) = c.job() {
            claims_of
                .entry((c.namespace(), j))
                .or_default()
                .push(c.as_ref());
        }
    }

    // Finish statuses and decide which to write.
    let mut out = Vec::new();
    for mut w in works {
        if w.skip {
            continue;
        }
        if let Some(cs) = claims_of.get(&(w.ns.as_str(), w.name.as_str())) {
            let keep = (w.holds && w.job.metadata.deletion_timestamp.is_none())
                .then(|| w.st.attempt.unwrap_or(0));
            for c in cs {
                if c.owner_uid() == Some(w.uid.as_str()) && c.attempt != keep {
                    w.plan.delete_claims.push(c.name().to_string());
                }
            }
        }
        // The gang group of an attempt that stopped holding its allocation. (One a crash
        // left behind holds nothing and goes with the job.)
        if let (Some(api), Some(p)) = (bind.gang, w.prev)
            && p.state == Some(JobState::Running)
            && !w.records.is_empty()
        {
            let still =
                w.holds && w.st.attempt == p.attempt && w.job.metadata.deletion_timestamp.is_none();
            if !still {
                let name = gang::group_name(&w.name, p.attempt.unwrap_or(0));
                w.plan.delete_groups.push((api, name));
            }
        }
        if w.job.metadata.deletion_timestamp.is_none() {
            let generation = w.job.metadata.generation;
            let known = w.known.filter(|_| w.st.state == Some(JobState::Pending));
            status::finish(&mut w.st, w.prev, generation, now, known);
            // The stored status and `w.st` are compared without their task records (neither
            // holds any), and those apart.
            let tasks_changed = w.tasks_changed();
            let write = match w.prev {
                None => true,
                Some(p) if *p == w.st && !tasks_changed => false,
                Some(p) => {
                    if tasks_changed || hard_view(p) != hard_view(&w.st) {
                        true
                    } else {
                        // Soft change only: rate-limited, and small estimate moves ignored.
                        let moved = match (&p.start_time, &w.st.start_time) {
                            (Some(a), Some(b)) => {
                                (secs(a) - secs(b)).abs() >= cfg.estimate_tolerance_secs
                            }
                            (a, b) => a.is_some() != b.is_some(),
                        };
                        let other = p.message != w.st.message || p.array_tasks != w.st.array_tasks;
                        let last = mem
                            .last_status_write
                            .get(&w.uid)
                            .copied()
                            .unwrap_or(i64::MIN);
                        (moved || other) && now.saturating_sub(last) >= cfg.status_refresh_secs
                    }
                }
            };
            if write {
                let tasks = match std::mem::replace(&mut w.tasks, Tasks::Kept) {
                    Tasks::Kept => Arc::new(w.records.clone()),
                    Tasks::New(r) => r,
                };
                w.plan.status = Some(PlannedStatus {
                    status: std::mem::take(&mut w.st),
                    tasks,
                    resource_version: w.job.resource_version(),
                });
            }
        }
        if !w.plan.is_empty() {
            out.push(w.plan);
        }
    }

    CyclePlan {
        jobs: out,
        partitions,
        gauges,
        running: usage_running,
        starts,
        preemptions,
        queued,
    }
}

/// How each partition binds GPUs this cycle, and Kubernetes' gang API.
struct BindCtx {
    /// The Partitions by name.
    partitions: HashMap<String, Arc<Partition>>,
    /// By partition name: the binding, or why its explicit `dra` cannot be had.
    by_partition: HashMap<String, Result<GpuBinding, String>>,
    /// DeviceClass by partition name.
    class: HashMap<String, String>,
    /// The gang API, where served.
    gang: Option<GangApi>,
}

impl BindCtx {
    fn new(inp: &Inputs<'_>) -> Self {
        let mut by_partition = HashMap::default();
        let mut class = HashMap::default();
        let mut partitions = HashMap::default();
        for p in inp.partitions {
            let name = p.name_any();
            partitions.insert(name.clone(), p.clone());
            let c = p.spec.device_class_name.as_deref();
            by_partition.insert(name.clone(), dra::resolve(p.spec.gpu_binding, c, inp.dra));
            class.insert(name, c.unwrap_or(dra::DEFAULT_DEVICE_CLASS).to_string());
        }
        BindCtx {
            partitions,
            by_partition,
            class,
            gang: inp.gang,
        }
    }

    /// Partition `p`, shared.
    fn partition(&self, p: &str) -> Option<Arc<Partition>> {
        self.partitions.get(p).cloned()
    }

    /// The binding of partition `p` (`env` for one that cannot have its `dra`, whose jobs
    /// do not start anyway).
    fn binding(&self, p: &str) -> GpuBinding {
        match self.by_partition.get(p) {
            Some(Ok(b)) => *b,
            _ => GpuBinding::Env,
        }
    }

    fn device_class(&self, p: &str) -> &str {
        self.class
            .get(p)
            .map(String::as_str)
            .unwrap_or(dra::DEFAULT_DEVICE_CLASS)
    }

    /// The group of attempt `attempt` of `job`, where the gang API is served.
    fn gang_ref(&self, job: &str, attempt: u32) -> Option<GangRef> {
        self.gang.map(|api| GangRef {
            api,
            name: gang::group_name(job, attempt),
        })
    }
}

/// Synthetic running jobs for GPUs allocated to ResourceClaims that no allocation Muster keeps
/// (`held`) and nothing in `running` already counts: a claim someone made by hand, or one of
/// Muster's of an ended attempt whose pods are still live.
///
/// A claim of Muster's whose attempt has no live pod left does not hold its GPUs: its
/// processes are gone, Muster deletes it this cycle, and kube-scheduler (whose resourceclaim
/// controller deallocates it once no pod uses it) gives a new claim pinned to the same devices
/// nothing until then — the new pod just waits in the scheduling queue for a moment. Counting
/// it would place the next job elsewhere than the simulator and `--test-only` predict.
fn claim_holds(
    inp: &Inputs<'_>,
    held: &HashSet<(String, u32)>,
    running: &[RunningJob],
    now: i64,
    synthetic: &mut JobId,
) -> Vec<RunningJob> {
    let mut taken: HashSet<(core::NodeId, u32)> = HashSet::default();
    for r in running {
        for t in &r.tasks {
            taken.extend(t.gpus.iter().map(|g| (t.node, *g)));
        }
    }
    let live: HashSet<(&str, u32)> = inp
        .pods
        .iter()
        .filter(|p| p.live())
        .filter_map(|p| Some((p.owner_uid()?, p.attempt?)))
        .collect();
    let mut out = Vec::new();
    for c in inp.claims.iter() {
        if c.devices().len() == 0 {
            continue;
        }
        if let (Some(u), Some(a)) = (c.owner_uid(), c.attempt)
            && c.is_musters()
            && (held.contains(&(u.to_string(), a)) || !live.contains(&(u, a)))
        {
            continue;
        }
        let mut by_node: BTreeMap<core::NodeId, Vec<u32>> = BTreeMap::new();
        for (driver, pool, device) in c.devices() {
            if driver != dra::NVIDIA_DRIVER {
                continue;
            }
            if let Some((node, gpu)) = inp.nodes.device(pool, device)
                && taken.insert((node, gpu))
            {
                by_node.entry(node).or_default().push(gpu);
            }
        }
        if by_node.is_empty() {
            continue;
        }
        out.push(RunningJob {
            id: *synthetic,
            name: c.name().to_string(),
            namespace: c.namespace().to_string(),
            partition: None,
            start_time: now,
            // One of Muster's lets go once its pod is gone; someone else's has no known end
            // (no reservation counts on it).
            stopping_since: c.is_musters().then_some(now),
            tasks: by_node
                .into_iter()
                .map(|(node, gpus)| TaskAlloc {
                    node,
                    gpus,
                    cpu_millis: 0,
                    memory_mib: 0,
                })
                .collect(),
            ..Default::default()
        });
        *synthetic -= 1;
    }
    out
}

fn build_dep_index(works: &[Work<'_>]) -> DepIndex {
    let mut jobs: Vec<DepJob> = Vec::with_capacity(works.len());
    let mut parent_pos: HashMap<&str, usize> = HashMap::default();
    for w in works {
        let st = &w.st;
        jobs.push(DepJob {
            namespace: w.ns.clone(),
            name: w.name.clone(),
            slurm_name: w.job.job_name().to_string(),
            id: w.id,
            state: st.state,
            start: st
                .start_time
                .as_ref()
                .map(secs)
                .filter(|_| st.state != Some(JobState::Pending)),
            end: st.end_time.as_ref().map(secs),
            elements: BTreeMap::new(),
            is_array: w.is_parent,
        });
        if w.is_parent {
            parent_pos.insert(w.uid.as_str(), jobs.len() - 1);
        }
    }
    for w in works {
        if let Some(o) = w
            .job
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            && let Some(&pi) = parent_pos.get(o.uid.as_str())
            && let Some(idx) = w
                .job
                .labels()
                .get(labels::ARRAY_TASK_ID)
                .and_then(|v| v.parse::<u32>().ok())
        {
            jobs[pi].elements.insert(
                idx,
                (
                    w.st.state.unwrap_or(JobState::Pending),
                    w.st.end_time.as_ref().map(secs),
                ),
            );
        }
    }
    DepIndex::new(jobs)
}

fn parent_of<'a>(job: &BatchJob, by_uid: &HashMap<String, &'a BatchJob>) -> Option<&'a BatchJob> {
    job.labels().get(labels::ARRAY_PARENT)?;
    let o = job
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true))?;
    by_uid.get(&o.uid).copied()
}

#[allow(clippy::too_many_arguments)]
fn step_job(
    w: &mut Work<'_>,
    pods: &[&PodObs],
    snap: &Snapshot,
    crd_parts: &HashMap<String, &Partition>,
    bind: &BindCtx,
    by_uid: &HashMap<String, &BatchJob>,
    max_running: &HashMap<String, Option<u32>>,
    dep_index: &DepIndex,
    nodes_table: &Arc<NodeTable>,
    cfg: &PlanSettings,
    now: i64,
) {
    let job = w.job;
    let attempt = w.st.attempt.unwrap_or(0);
    let state = w.st.state.unwrap_or(JobState::Pending);
    let is_cur = |p: &PodObs| attempt >= 1 && p.attempt == Some(attempt);

    // Pods of other attempts never belong to the gang: stop them.
    for p in pods {
        if !is_cur(p) && p.live() && !p.deleting {
            w.plan.delete.push(p.name().to_string());
        }
    }

    if job.metadata.deletion_timestamp.is_some() {
        for p in pods {
            if is_cur(p) && p.live() && !p.deleting {
                w.plan.delete.push(p.name().to_string());
            }
        }
        if has_finalizer(job) && !pods.iter().any(|p| p.live()) {
            w.plan.remove_finalizer = true;
        }
        return;
    }

    // Array element: its array.
    if let Some(parent) = parent_of(job, by_uid)
        && let Some(aid) = parent.status.as_ref().and_then(|s| s.job_id)
    {
        let idx = job
            .labels()
            .get(labels::ARRAY_TASK_ID)
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0);
        w.array = Some(ArrayTask {
            array_job_id: aid,
            task_id: idx,
            max_running: parent
                .uid()
                .and_then(|u| max_running.get(&u).copied())
                .flatten(),
        });
        w.st.array_job_id = Some(aid);
        w.st.array_task_id = Some(idx);
    }

    let cur: Vec<&PodObs> = pods.iter().copied().filter(|p| is_cur(p)).collect();
    let delete_cur = |w: &mut Work<'_>| {
        for p in &cur {
            if p.live() && !p.deleting && !w.plan.delete.iter().any(|d| d == p.name()) {
                w.plan.delete.push(p.name().to_string());
            }
        }
    };

    match state {
        JobState::Running if w.has_tasks() => {
            let nodes = w.node_ranks();
            let npods = nodes.len();
            let mut by_node: BTreeMap<u32, &PodObs> = BTreeMap::new();
            for p in &cur {
                if let Some(n) = p.node {
                    by_node.entry(n).or_insert(p);
                }
            }
            // The batch host's pod: its batch step's end is the job's (as in Slurm).
            let batch = nodes.first().and_then(|n| by_node.get(n)).copied();
            let rj = translate::running_job_with(
                job,
                w.core_tasks(nodes_table),
                w.id.unwrap_or(0),
                w.part,
                None,
            );
            let start = w.st.start_time.as_ref().map(secs).unwrap_or(now);
            if batch.is_some_and(|p| p.phase == Phase::Succeeded) {
                end(
                    w,
                    JobState::Completed,
                    None,
                    "the batch script exited 0",
                    now,
                );
                w.st.exit_code = Some(0);
                w.st.exit_signal = None;
                delete_cur(w);
                return;
            }
            if job.spec.cancel == Some(true) {
                end(w, JobState::Cancelled, None, "cancelled", now);
                delete_cur(w);
                return;
            }
            if let Some(stop) = core::enforce::stop_for(snap, &rj, now) {
                match stop.state {
                    JobState::Timeout => {
                        end(w, JobState::Timeout, Some("TimeLimit"), &stop.message, now);
                        delete_cur(w);
                    }
                    _ => {
                        node_fail(w, &stop.message, now);
                        delete_cur(w);
                        if w.st.state == Some(JobState::Pending) {
                            queue_pending(w, crd_parts, bind, dep_index, now);
                        }
                    }
                }
                return;
            }
            // The batch pod failing decides; another node's daemon failing ends the job too
            // (its steps cannot run there any more).
            let failed = batch.filter(|p| p.phase == Phase::Failed).or_else(|| {
                nodes
                    .iter()
                    .filter_map(|n| by_node.get(n))
                    .find(|p| p.phase == Phase::Failed)
                    .copied()
            });
            if let Some(p) = failed {
                let what = if Some(p.name()) == batch.map(|b| b.name()) {
                    format!("the batch script (pod {})", p.name())
                } else {
                    format!(
                        "the node daemon of node {} (pod {})",
                        p.node.unwrap_or(0),
                        p.name()
                    )
                };
                match &p.exit {
                    Some(x) => {
                        let msg = match x.signal {
                            Some(sig) => {
                                format!("{what} exited with code {} (signal {sig})", x.code)
                            }
                            None => format!("{what} exited with code {}", x.code),
                        };
                        end(w, JobState::Failed, Some("NonZeroExitCode"), &msg, now);
                        w.st.exit_code = Some(x.code);
                        w.st.exit_signal = x.signal;
                        delete_cur(w);
                    }
                    // Like a Slurm prolog failing: the job could not be launched there. Requeued
                    // with a backoff: requeued at once, a failure that repeats (a step binary
                    // that cannot run on the node) would spin.
                    None if p.init_failed => {
                        let msg = format!(
                            "pod {} could not start: {}",
                            p.name(),
                            p.failure().unwrap_or_default()
                        );
                        launch_failure(w, "LaunchFailed", &msg, now);
                        delete_cur(w);
                    }
                    None => {
                        let msg = format!(
                            "pod {} failed without an exit ({})",
                            p.name(),
                            p.failure().unwrap_or_default()
                        );
                        node_fail(w, &msg, now);
                        delete_cur(w);
                    }
                }
                return;
            }
            let missing: Vec<u32> = nodes
                .iter()
                .copied()
                .filter(|n| !by_node.contains_key(n))
                .collect();
            let late = now.saturating_sub(start) >= cfg.gang_start_timeout_secs;
            if !missing.is_empty() {
                if late {
                    launch_failure(
                        w,
                        "GangStartTimeout",
                        &format!(
                            "gang start timeout: {} of {npods} node pods missing {}s after admission",
                            missing.len(),
                            cfg.gang_start_timeout_secs
                        ),
                        now,
                    );
                    delete_cur(w);
                    return;
                }
                // Finish the admission: create the pods it lacks.
                let part_crd =
                    w.st.partition
                        .as_deref()
                        .and_then(|n| crd_parts.get(n))
                        .copied();
                let (gpn, gpt) = match w.parsed.as_deref() {
                    Some(Ok(p)) => (p.gpus_per_node_echo.clone(), p.gpus_per_task_echo.clone()),
                    _ => (None, None),
                };
                let pname = w.st.partition.clone().unwrap_or_default();
                // The binding recorded with the allocation, never today's: the gang's pods
                // must agree.
                let gpu_binding = w.st.gpu_binding.unwrap_or_default();
                // Decoded for the pods only (a job whose pods are missing: few per cycle).
                let tasks = w.task_records().to_vec();
                let shared = Shared {
                    job: w.obs.clone(),
                    tasks: match &w.tasks {
                        Tasks::Kept => Arc::new(w.records.clone()),
                        Tasks::New(r) => r.clone(),
                    },
                    partition: bind.partition(&pname),
                    table: nodes_table.clone(),
                };
                let ctx = JobContext {
                    job,
                    job_id: w.id.unwrap_or(0),
                    attempt,
                    tasks: &tasks,
                    partition: part_crd,
                    partition_name: &pname,
                    array: w.array.as_ref().map(|a| (a.array_job_id, a.task_id)),
                    gpus_per_node: gpn.as_deref(),
                    gpus_per_task: gpt.as_deref(),
                    gpu_binding,
                    step: &cfg.step,
                    node_gpus: &[],
                    limit_end: pods::limit_end(&w.st),
                };
                let gang = bind.gang_ref(&w.name, attempt);
                let built = match PodsToCreate::new(
                    &ctx,
                    shared,
                    missing,
                    bind.device_class(&pname),
                    gang.clone(),
                ) {
                    Ok(b) => b,
                    Err(e) => {
                        launch_failure(
                            w,
                            "LaunchFailed",
                            &format!("cannot build node pods: {e}"),
                            now,
                        );
                        delete_cur(w);
                        return;
                    }
                };
                // The credential before any pod (kept if it exists: a crash after it); a
                // one-node job's pod makes its own.
                if !muster_crds::step::key_in_pod(npods) {
                    w.plan.secret = Some(Box::new(pods::build_secret(job)));
                }
                if cur.is_empty() && npods > 1 {
                    w.plan.service = Some(Box::new(pods::build_service(job)));
                }
                if cur.is_empty()
                    && let Some(g) = &gang
                {
                    // Created before the first pod; a crash after it finds it there.
                    w.plan.group = Some(gang::build_group(
                        g,
                        job,
                        w.id.unwrap_or(0),
                        attempt,
                        npods as u32,
                    ));
                }
                w.plan.create = built;
                w.holds = true;
                return;
            }
            // `Unknown` (the kubelet stopped reporting) is left to node failure detection.
            let waiting: Vec<&str> = cur
                .iter()
                .filter(|p| p.phase == Phase::Pending)
                .map(|p| p.name())
                .collect();
            if late && !waiting.is_empty() {
                launch_failure(
                    w,
                    "GangStartTimeout",
                    &format!(
                        "gang start timeout: {} of {npods} node pods not running {}s after admission: {}",
                        waiting.len(),
                        cfg.gang_start_timeout_secs,
                        waiting.join(", ")
                    ),
                    now,
                );
                delete_cur(w);
                return;
            }
            w.holds = true;
        }
        JobState::Running => {
            // RUNNING without an allocation cannot be honoured: queue it again.
            w.st.state = Some(JobState::Pending);
            queue_pending(w, crd_parts, bind, dep_index, now);
        }
        JobState::Pending => {
            delete_cur(w);
            queue_pending(w, crd_parts, bind, dep_index, now);
        }
        _ => {
            // Ended (COMPLETING is never written by Muster; treated as ended).
            delete_cur(w);
        }
    }
}

/// A PENDING job: cancelled, invalid (it ends FAILED), its partition missing or unable to run
/// it, backing off, waiting on a dependency, or queued.
fn queue_pending(
    w: &mut Work<'_>,
    crd_parts: &HashMap<String, &Partition>,
    bind: &BindCtx,
    dep_index: &DepIndex,
    now: i64,
) {
    let job = w.job;
    w.known = None;
    if job.spec.cancel == Some(true) {
        end(
            w,
            JobState::Cancelled,
            None,
            "cancelled before it started",
            now,
        );
        return;
    }
    let parsed = match w.parsed.as_deref() {
        Some(Ok(p)) => p.clone(),
        Some(Err(errs)) => {
            invalid(w, &translate::join_errors(errs), now);
            return;
        }
        None => return,
    };
    let pname = w.part_name.clone().unwrap_or_default();
    if w.part.is_none() {
        let m = if pname.is_empty() {
            "no partition given and no Partition is the default".to_string()
        } else {
            format!("partition {pname} does not exist")
        };
        set_pending(w, PARTITION_CONFIG, &m);
        w.known = Some(Why::PartitionNotFound);
        return;
    }
    match pods::check_buildable(job, crd_parts.get(&pname).copied(), &pname) {
        Ok(()) => {}
        Err(e @ pods::BuildError::NoImage { .. }) => {
            // The partition may get a default image: wait, stalled, rather than fail.
            set_pending(w, PARTITION_CONFIG, &e.to_string());
            w.known = Some(Why::NoImage);
            return;
        }
        Err(e) => {
            invalid(w, &e.to_string(), now);
            return;
        }
    }
    if let Some(Err(why)) = bind.by_partition.get(&pname) {
        // The partition asks for DRA the cluster cannot give: wait, stalled, until it can
        // (the driver installed) or the partition changes.
        let m = format!("partition {pname} has gpuBinding: dra, but {why}");
        set_pending(w, PARTITION_CONFIG, &m);
        w.known = Some(Why::GpuBindingUnavailable);
        return;
    }
    if let Some(t) = &w.st.eligible_time
        && secs(t) > now
    {
        // Backing off after a launch failure: keep the recorded reason.
        return;
    }
    if let Some(dep) = &parsed.dependency {
        let who = Asker {
            namespace: &w.ns,
            name: &w.name,
            slurm_name: job.job_name(),
            id: w.id,
            array_index: w.array.as_ref().map(|a| a.task_id),
        };
        match deps::evaluate(dep, &who, dep_index, now) {
            DepState::Satisfied => {}
            DepState::Waiting(m) => {
                set_pending(w, DEPENDENCY, &m);
                return;
            }
            DepState::Missing(m) => {
                set_pending(w, DEPENDENCY, &m);
                w.known = Some(Why::DependencyNotFound);
                return;
            }
            DepState::Never(m) => {
                set_pending(w, DEPENDENCY_NEVER, &m);
                return;
            }
        }
    }
    w.queued = true;
}

/// A job whose spec cannot run ends FAILED with reason `InvalidSpec` and the message naming
/// the field (the API's CEL rules and the admission webhook refuse most such specs first).
fn invalid(w: &mut Work<'_>, message: &str, now: i64) {
    if w.st.state == Some(JobState::Failed) && w.st.reason.as_deref() == Some(INVALID_SPEC) {
        return;
    }
    end(w, JobState::Failed, Some(INVALID_SPEC), message, now);
}

fn set_pending(w: &mut Work<'_>, reason: &str, message: &str) {
    w.st.state = Some(JobState::Pending);
    w.st.reason = Some(reason.to_string());
    w.st.message = Some(message.to_string());
    w.st.start_time = None;
}

fn end(w: &mut Work<'_>, state: JobState, reason: Option<&str>, message: &str, now: i64) {
    let st = status::ended(&w.st, state, reason.unwrap_or("None"), message, now);
    w.st = st;
    if reason.is_none() {
        w.st.reason = None;
    }
    let (warning, ev) = match state {
        JobState::Completed => (false, "Completed"),
        JobState::Cancelled => (false, "Cancelled"),
        JobState::Failed => (true, "Failed"),
        JobState::Timeout => (true, "Timeout"),
        JobState::NodeFail => (true, "NodeFail"),
        JobState::Preempted => (true, "Preempted"),
        _ => (false, "Ended"),
    };
    w.plan.events.push(event(warning, ev, message));
    w.plan.effects.push(Effect::Transition(state));
}

fn node_fail(w: &mut Work<'_>, message: &str, now: i64) {
    if w.job.spec.requeue == Some(false) {
        end(w, JobState::NodeFail, Some("NodeFail"), message, now);
        return;
    }
    // A first failure is requeued at once (another node will do); again after a restart, a
    // growing backoff: a failure that follows the job (a kubelet refusing its pods) would
    // otherwise requeue it many times a second. Slurm holds every requeued batch job ~2 min.
    let restarts = w.st.restarts.unwrap_or(0);
    let backoff = if restarts == 0 {
        0
    } else {
        status::launch_backoff(restarts - 1)
    };
    let msg = if backoff == 0 {
        format!("requeued after NODE_FAIL: {message}")
    } else {
        format!("requeued after NODE_FAIL: {message}; eligible again in {backoff}s")
    };
    w.st = status::requeued(&w.st, "NodeFail", &msg, now + backoff);
    w.set_tasks(&[]);
    w.plan.events.push(event(true, "NodeFail", message));
    w.plan.events.push(event(false, "Requeued", &msg));
    w.plan.effects.push(Effect::Transition(JobState::NodeFail));
    w.plan.effects.push(Effect::Transition(JobState::Pending));
}

/// The job's pods could not all start (`event`: why, as the event's reason): requeued with a
/// backoff that grows with its restarts.
fn launch_failure(w: &mut Work<'_>, event_reason: &str, message: &str, now: i64) {
    let backoff = status::launch_backoff(w.st.restarts.unwrap_or(0));
    let msg = format!("{message}; requeued, eligible again in {backoff}s");
    w.st = status::requeued(&w.st, LAUNCH_FAILURE, &msg, now + backoff);
    w.set_tasks(&[]);
    w.plan.events.push(event(true, event_reason, &msg));
    w.plan.effects.push(Effect::Transition(JobState::Pending));
}

fn admit(
    w: &mut Work<'_>,
    s: &core::Start,
    nodes: &Arc<NodeTable>,
    crd_parts: &HashMap<String, &Partition>,
    bind: &BindCtx,
    cfg: &PlanSettings,
    now: i64,
) {
    let job = w.job;
    let attempt = w.st.attempt.unwrap_or(0).max(1);
    let name = w.name.clone();
    let tasks: Vec<TaskAllocation> = s
        .tasks
        .iter()
        .map(|t| {
            let node = &nodes.nodes[t.node as usize];
            let uuids: Vec<String> = t
                .gpus
                .iter()
                .filter_map(|g| {
                    node.gpus
                        .iter()
                        .find(|x| x.index == *g)
                        .map(|x| x.uuid.clone())
                })
                .collect();
            TaskAllocation {
                rank: t.rank,
                node: node.name.clone(),
                node_rank: t.node_rank,
                local_rank: t.local_rank,
                cpu_millis: t.cpu_millis,
                memory_mib: t.memory_mib,
                gpus: t.gpus.clone(),
                gpu_uuids: if uuids.len() == t.gpus.len() {
                    uuids
                } else {
                    Vec::new()
                },
                pod: Some(pods::pod_name(&name, attempt, t.node_rank)),
            }
        })
        .collect();
    let submit = w.st.submit_time.as_ref().map(secs).unwrap_or(now);
    // Admitted in the cycle that first saw it: one event says both.
    let new = w.prev.and_then(|p| p.job_id).is_none();
    if new {
        w.plan.events.retain(|e| e.reason != "Submitted");
    }
    let st = &mut w.st;
    st.state = Some(JobState::Running);
    st.reason = None;
    st.message = None;
    st.attempt = Some(attempt);
    st.start_time = Some(time(now));
    st.end_time = None;
    st.exit_code = None;
    st.exit_signal = None;
    if st.eligible_time.is_none() {
        st.eligible_time = Some(time(now));
    }
    st.time_limit = Some(format_limit(s.time_limit));
    st.node_list = Some(pods::node_list(&tasks));
    st.num_nodes = Some(s.nodes.len() as u32);
    st.num_tasks = Some(tasks.len() as u32);
    // Tasks that share their node's GPUs hold each GPU once.
    st.num_gpus = Some(
        core::distinct_gpus(s.tasks.iter().map(|t| (t.node, t.gpus.as_slice())))
            .min(u64::from(u32::MAX)) as u32,
    );
    // As Slurm's AllocCPUS: an exclusive job holds its nodes' every CPU, not just those asked.
    let cpu_millis: u64 = if s.exclusive {
        s.nodes
            .iter()
            .map(|&n| nodes.nodes[n as usize].cpu_millis)
            .sum()
    } else {
        tasks.iter().map(|t| t.cpu_millis).sum()
    };
    st.num_cpus = Some(cpu_millis.div_ceil(1000).min(u64::from(u32::MAX)) as u32);
    tracing::debug!(
        job = %w.name,
        id = w.id.unwrap_or(0),
        attempt,
        gpus = ?tasks.iter().map(|t| (t.node.as_str(), t.gpus.clone())).collect::<Vec<_>>(),
        "admit"
    );
    let records = Arc::new(TaskRecords::new(&tasks));
    w.tasks = Tasks::New(records.clone());
    let pname = w.st.partition.clone().unwrap_or_default();
    let gpu_binding = bind.binding(&pname);
    w.st.gpu_binding = Some(gpu_binding);
    let (gpn, gpt) = match w.parsed.as_deref() {
        Some(Ok(p)) => (p.gpus_per_node_echo.clone(), p.gpus_per_task_echo.clone()),
        _ => (None, None),
    };
    let ctx = JobContext {
        job,
        job_id: w.id.unwrap_or(0),
        attempt,
        tasks: &tasks,
        partition: crd_parts.get(&pname).copied(),
        partition_name: &pname,
        array: w.array.as_ref().map(|a| (a.array_job_id, a.task_id)),
        gpus_per_node: gpn.as_deref(),
        gpus_per_task: gpt.as_deref(),
        gpu_binding,
        step: &cfg.step,
        node_gpus: &[],
        limit_end: pods::limit_end(&w.st),
    };
    let node_ranks = records.node_ranks();
    let npods = node_ranks.len();
    let gang = bind.gang_ref(&name, attempt);
    let shared = Shared {
        job: w.obs.clone(),
        tasks: records,
        partition: bind.partition(&pname),
        table: nodes.clone(),
    };
    let built = match PodsToCreate::new(
        &ctx,
        shared,
        node_ranks,
        bind.device_class(&pname),
        gang.clone(),
    ) {
        Ok(b) => b,
        Err(e) => {
            // check_buildable ran before queueing, so this is not expected; keep the job
            // pending rather than record an allocation without pods.
            let prev = w.prev.cloned().unwrap_or_default();
            w.st.state = Some(JobState::Pending);
            // The stored records again (as they were before this admission).
            w.tasks = Tasks::Kept;
            w.st.start_time = None;
            w.st.node_list = None;
            w.st.gpu_binding = prev.gpu_binding;
            set_pending(w, PARTITION_CONFIG, &e.to_string());
            return;
        }
    };
    if !muster_crds::step::key_in_pod(npods) {
        w.plan.secret = Some(Box::new(pods::build_secret(job)));
    }
    if npods > 1 {
        w.plan.service = Some(Box::new(pods::build_service(job)));
    }
    if let Some(g) = &gang {
        w.plan.group = Some(gang::build_group(
            g,
            job,
            w.id.unwrap_or(0),
            attempt,
            npods as u32,
        ));
    }
    w.plan.create = built;
    w.plan.add_finalizer = !has_finalizer(job);
    w.holds = true;
    w.queued = false;
    let nl = w.st.node_list.clone().unwrap_or_default();
    w.plan.events.push(event(
        false,
        "Started",
        format!(
            "job {} allocated {nl}: {} task(s), {} GPU(s); attempt {attempt}",
            w.id.unwrap_or(0),
            w.task_records().len(),
            w.st.num_gpus.unwrap_or(0)
        ),
    ));
    w.plan.effects.push(Effect::Transition(JobState::Running));
    w.plan.effects.push(Effect::TimeToStart {
        partition: pname,
        secs: (now - submit).max(0) as f64,
    });
}

fn preempt(w: &mut Work<'_>, for_job: JobId, requeue: bool, pods: &[&PodObs], now: i64) {
    if w.st.state != Some(JobState::Running) {
        return;
    }
    let attempt = w.st.attempt.unwrap_or(0);
    let part = w.st.partition.clone().unwrap_or_default();
    let msg = format!("preempted by job {for_job}");
    if requeue && w.job.spec.requeue != Some(false) {
        let m = format!("{msg}; requeued");
        w.st = status::requeued(&w.st, "Preempted", &m, now);
        w.set_tasks(&[]);
        w.plan.events.push(event(true, "Preempted", &m));
        w.plan.effects.push(Effect::Transition(JobState::Preempted));
        w.plan.effects.push(Effect::Transition(JobState::Pending));
    } else {
        end(w, JobState::Preempted, Some("Preempted"), &msg, now);
    }
    w.plan.effects.push(Effect::Preempted { partition: part });
    w.holds = false;
    for p in pods {
        if p.owner_uid() == Some(w.uid.as_str())
            && p.attempt == Some(attempt)
            && p.live()
            && !p.deleting
            && !w.plan.delete.iter().any(|d| d == p.name())
        {
            w.plan.delete.push(p.name().to_string());
        }
    }
}

/// Array parents: create elements within the throttle, propagate cancel and hold, summarise.
fn step_parent(
    works: &mut [Work<'_>],
    wi: usize,
    kids: &[usize],
    dep_index: &DepIndex,
    expected: &std::collections::HashSet<(String, String)>,
    cfg: &PlanSettings,
    now: i64,
) {
    let (ns, name) = (works[wi].ns.clone(), works[wi].name.clone());
    let job = works[wi].job;
    if job.metadata.deletion_timestamp.is_some() {
        if has_finalizer(job) {
            works[wi].plan.remove_finalizer = true;
        }
        return;
    }
    // Elements.
    let mut elems: BTreeMap<u32, (&BatchJob, BatchJobStatus)> = BTreeMap::new();
    for &i in kids {
        let w = &works[i];
        if i == wi || w.ns != ns {
            continue;
        }
        if let Some(idx) = w
            .job
            .labels()
            .get(labels::ARRAY_TASK_ID)
            .and_then(|v| v.parse::<u32>().ok())
        {
            elems.insert(idx, (w.job, w.st.clone()));
        }
    }
    // A spec that cannot run ends the array (cancelled, if it was): it never has elements.
    let ended_invalid = |w: &mut Work<'_>, m: &str| {
        if w.st.state.is_some_and(|s| s.is_terminal()) {
            return;
        }
        if w.job.spec.cancel == Some(true) {
            end(w, JobState::Cancelled, None, "cancelled", now);
        } else {
            invalid(w, m, now);
        }
    };
    let parsed = match works[wi].parsed.as_deref() {
        Some(Ok(p)) => p.clone(),
        Some(Err(errs)) => {
            let m = translate::join_errors(errs);
            ended_invalid(&mut works[wi], &m);
            return;
        }
        None => return,
    };
    let Some(array) = parsed.array.clone() else {
        return;
    };
    let max_idx = array.indices.iter().copied().max().unwrap_or(0);
    if name.len() + 1 + max_idx.to_string().len() > 63 {
        let m = format!(
            "metadata.name {name:?} is too long for array elements named {name}-{max_idx}: at most {} characters",
            62 - max_idx.to_string().len()
        );
        ended_invalid(&mut works[wi], &m);
        return;
    }
    let w = &mut works[wi];
    let cancel = job.spec.cancel == Some(true);
    let hold = job.spec.hold == Some(true);

    // Summary.
    let mut sum = ArrayTaskSummary {
        total: array.indices.len() as u32,
        ..Default::default()
    };
    let mut active = 0usize;
    let mut first_fail: Option<(u32, BatchJobStatus)> = None;
    let mut first_pending_reason: Option<(String, String)> = None;
    let mut min_start: Option<i64> = None;
    let mut max_end: Option<i64> = None;
    for idx in &array.indices {
        match elems.get(idx) {
            None => sum.pending += 1,
            Some((ej, est)) => {
                let s = est.state.unwrap_or(JobState::Pending);
                if let Some(t) = est.start_time.as_ref().filter(|_| s != JobState::Pending) {
                    min_start = Some(min_start.map_or(secs(t), |m: i64| m.min(secs(t))));
                }
                if let Some(t) = &est.end_time {
                    max_end = Some(max_end.map_or(secs(t), |m: i64| m.max(secs(t))));
                }
                match s {
                    JobState::Pending => {
                        sum.pending += 1;
                        active += 1;
                        if first_pending_reason.is_none() {
                            first_pending_reason = Some((
                                est.reason.clone().unwrap_or_else(|| "None".into()),
                                est.message.clone().unwrap_or_default(),
                            ));
                        }
                    }
                    JobState::Running | JobState::Completing => {
                        sum.running += 1;
                        active += 1;
                    }
                    JobState::Completed => sum.completed += 1,
                    JobState::Cancelled => sum.cancelled += 1,
                    _ => {
                        sum.failed += 1;
                        if first_fail.is_none() {
                            first_fail = Some((*idx, est.clone()));
                        }
                    }
                }
                // Propagate cancel and hold to elements that have not ended.
                if !s.is_terminal() {
                    let mut patch = serde_json::Map::new();
                    if cancel && ej.spec.cancel != Some(true) {
                        patch.insert("cancel".into(), true.into());
                    }
                    if !cancel && s == JobState::Pending && ej.spec.hold.unwrap_or(false) != hold {
                        patch.insert("hold".into(), hold.into());
                    }
                    if !patch.is_empty() {
                        w.plan
                            .child_patches
                            .push((ej.name_any(), serde_json::json!({ "spec": patch })));
                    }
                }
            }
        }
    }

    // Create elements within the throttle, once the parent has its id and its dependency
    // allows.
    let mut throttled = false;
    let mut dep_wait: Option<(String, String)> = None;
    let mut dep_missing = false;
    let has_id = w.prev.and_then(|p| p.job_id).is_some();
    if has_id && !cancel && !hold {
        let limit = array.max_running.map(|m| m as usize).unwrap_or(usize::MAX);
        let mut created = 0usize;
        for idx in &array.indices {
            if elems.contains_key(idx) {
                continue;
            }
            if expected.contains(&(ns.clone(), format!("{name}-{idx}"))) {
                // Created, not yet seen: counts as a pending element.
                active += 1;
                continue;
            }
            if active >= limit {
                throttled = true;
                break;
            }
            if created >= cfg.max_children_per_cycle {
                break;
            }
            if let Some(dep) = &parsed.dependency {
                let who = Asker {
                    namespace: &ns,
                    name: &name,
                    slurm_name: job.job_name(),
                    id: w.id,
                    array_index: Some(*idx),
                };
                match deps::evaluate(dep, &who, dep_index, now) {
                    DepState::Satisfied => {}
                    DepState::Waiting(m) => {
                        dep_wait.get_or_insert((DEPENDENCY.into(), m));
                        continue;
                    }
                    DepState::Missing(m) => {
                        if dep_wait.is_none() {
                            dep_missing = true;
                        }
                        dep_wait.get_or_insert((DEPENDENCY.into(), m));
                        continue;
                    }
                    DepState::Never(m) => {
                        dep_wait.get_or_insert((DEPENDENCY_NEVER.into(), m));
                        continue;
                    }
                }
            }
            w.plan.children.push(child_job(job, *idx));
            created += 1;
            active += 1;
        }
    }

    // The array's own state.
    let st = &mut w.st;
    st.array_tasks = Some(sum.clone());
    st.start_time = min_start.map(time);
    let done = sum.completed + sum.failed + sum.cancelled;
    let prev_state = w.prev.and_then(|p| p.state);
    let (state, reason, message): (JobState, Option<String>, String) = if cancel {
        (JobState::Cancelled, None, "cancelled".into())
    } else if done == sum.total && elems.len() as u32 >= sum.total {
        if sum.completed == sum.total {
            (JobState::Completed, None, "every element completed".into())
        } else if let Some((idx, est)) = &first_fail {
            st.exit_code = est.exit_code;
            st.exit_signal = est.exit_signal;
            (
                JobState::Failed,
                Some("NonZeroExitCode".into()),
                format!(
                    "{} of {} elements did not complete; first: element {idx} {}",
                    sum.failed + sum.cancelled,
                    sum.total,
                    est.state.unwrap_or(JobState::Failed)
                ),
            )
        } else {
            (
                JobState::Cancelled,
                None,
                format!("{} of {} elements cancelled", sum.cancelled, sum.total),
            )
        }
    } else if sum.running > 0 {
        (
            JobState::Running,
            None,
            format!("{} element(s) running", sum.running),
        )
    } else if hold {
        (JobState::Pending, Some(HELD.into()), "held".into())
    } else if let Some((r, m)) = dep_wait.filter(|_| active == 0) {
        if dep_missing {
            w.known = Some(Why::DependencyNotFound);
        }
        (JobState::Pending, Some(r), m)
    } else if throttled && first_pending_reason.is_none() {
        (
            JobState::Pending,
            Some("JobArrayTaskLimit".into()),
            format!(
                "{} element(s) may run at once",
                array.max_running.unwrap_or(0)
            ),
        )
    } else if let Some((r, m)) = first_pending_reason {
        (JobState::Pending, Some(r), m)
    } else {
        (JobState::Pending, Some("None".into()), String::new())
    };
    if state.is_terminal() {
        st.end_time = max_end.map(time).or_else(|| Some(time(now)));
        if state == JobState::Completed {
            st.exit_code = Some(0);
        }
    } else {
        st.end_time = None;
    }
    st.state = Some(state);
    st.reason = reason;
    st.message = Some(message.clone()).filter(|m| !m.is_empty());
    if prev_state != Some(state) && prev_state.is_some() {
        let warning = matches!(state, JobState::Failed);
        w.plan.events.push(event(
            warning,
            &format!("Array{}", state_word(state)),
            message,
        ));
        w.plan.effects.push(Effect::Transition(state));
    }
}

fn state_word(s: JobState) -> &'static str {
    match s {
        JobState::Pending => "Pending",
        JobState::Running => "Running",
        JobState::Completing => "Completing",
        JobState::Completed => "Completed",
        JobState::Failed => "Failed",
        JobState::Cancelled => "Cancelled",
        JobState::Timeout => "Timeout",
        JobState::NodeFail => "NodeFail",
        JobState::Preempted => "Preempted",
    }
}

/// The BatchJob running element `idx` of an array: the parent's spec without `array` and
/// `dependency` (evaluated by the parent), the array's job name, owned by the parent, labelled
/// with the parent and index, and created with the allocation finalizer already on.
pub fn child_job(parent: &BatchJob, idx: u32) -> BatchJob {
    let mut spec = parent.spec.clone();
    spec.array = None;
    spec.dependency = None;
    spec.job_name = Some(parent.job_name().to_string());
    let pname = parent.name_any();
    let mut lbl = parent.labels().clone();
    lbl.insert(labels::ARRAY_PARENT.into(), pname.clone());
    lbl.insert(labels::ARRAY_TASK_ID.into(), idx.to_string());
    let ann = parent.annotations().clone();
    let mut owner = pods::owner_ref(parent);
    owner.block_owner_deletion = Some(true);
    BatchJob {
        metadata: ObjectMeta {
            name: Some(format!("{pname}-{idx}")),
            namespace: parent.namespace(),
            labels: Some(lbl),
            annotations: (!ann.is_empty()).then_some(ann),
            owner_references: Some(vec![owner]),
            finalizers: Some(vec![labels::FINALIZER.to_string()]),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

#[allow(clippy::too_many_arguments)]
fn partition_statuses(
    inp: &Inputs<'_>,
    bind: &BindCtx,
    table: &PartitionTable,
    snap: &Snapshot,
    decisions: &Decisions,
    works: &[Work<'_>],
    gauges: &mut Gauges,
    mem: &mut PlanMemory,
    cfg: &PlanSettings,
) -> Vec<PartitionWrite> {
    let now = inp.now;
    // GPUs held per node (running jobs, holds, and this cycle's starts).
    let mut used: HashMap<u32, HashSet<u32>> = HashMap::default();
    for r in &snap.running {
        for t in &r.tasks {
            used.entry(t.node)
                .or_default()
                .extend(t.gpus.iter().copied());
        }
    }
    for s in &decisions.starts {
        for t in &s.tasks {
            used.entry(t.node)
                .or_default()
                .extend(t.gpus.iter().copied());
        }
    }
    let mut counts: HashMap<&str, (u32, u32)> = HashMap::default();
    for w in works {
        if w.skip || w.is_parent || w.job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(p) = w.st.partition.as_deref() else {
            continue;
        };
        let e = counts.entry(p).or_default();
        match w.st.state {
            Some(JobState::Pending) | None => e.0 += 1,
            Some(JobState::Running) => e.1 += 1,
            _ => {}
        }
    }
    let mut out = Vec::new();
    for p in inp.partitions {
        let name = p.name_any();
        let mut st = PartitionStatus {
            observed_generation: p.metadata.generation,
            ..Default::default()
        };
        let mut conds: Vec<Condition> = Vec::new();
        let prev = p.status.as_ref();
        let prev_conds = prev.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
        let mk = |t: &str, on: bool, reason: &str, msg: String| {
            let status = if on { "True" } else { "False" };
            Condition {
                type_: t.into(),
                status: status.into(),
                reason: status::condition_reason(reason),
                message: status::clip(&msg),
                observed_generation: p.metadata.generation,
                last_transition_time: prev_conds
                    .iter()
                    .find(|c| c.type_ == t && c.status == status)
                    .map(|c| c.last_transition_time.clone())
                    .unwrap_or_else(|| time(now)),
            }
        };
        if let Some(&pid) = table.by_name.get(&name) {
            let cp = &table.parts[pid as usize];
            let mut names = Vec::new();
            let (mut total, mut alloc, mut bad) = (0u32, 0u32, 0u32);
            for (ni, n) in inp.nodes.nodes.iter().enumerate() {
                if !translate::in_partition(cp, n) {
                    continue;
                }
                names.push(n.name.clone());
                let u = used.get(&(ni as u32));
                for g in &n.gpus {
                    total += 1;
                    if !g.healthy {
                        bad += 1;
                    }
                    if u.is_some_and(|u| u.contains(&g.index)) {
                        alloc += 1;
                    }
                }
            }
            st.nodes = names.len() as u32;
            st.node_list =
                (!names.is_empty()).then(|| muster_crds::slurm::hostlist::compress_sorted(&names));
            st.gpus_total = total;
            st.gpus_allocated = alloc;
            st.gpus_unhealthy = bad;
            let (pend, run) = counts.get(name.as_str()).copied().unwrap_or_default();
            st.pending_jobs = pend;
            st.running_jobs = run;
            for (s, v) in [("total", total), ("allocated", alloc), ("unhealthy", bad)] {
                gauges.gpus.insert((name.clone(), s.into()), u64::from(v));
            }
            let state = p.state();
            let binding = bind.by_partition.get(&name);
            st.gpu_binding = binding.and_then(|b| b.as_ref().ok().copied());
            conds.push(if let Some(Err(why)) = binding {
                mk(
                    "Ready",
                    false,
                    "GpuBindingUnavailable",
                    format!("gpuBinding is dra, but {why}"),
                )
            } else if state == PartitionState::Up {
                mk(
                    "Ready",
                    true,
                    "Up",
                    format!("{} node(s), {total} GPU(s)", st.nodes),
                )
            } else {
                mk(
                    "Ready",
                    false,
                    &format!("{state:?}"),
                    format!("partition is {state:?}"),
                )
            });
        } else {
            let errs = table.invalid.get(&name).cloned().unwrap_or_default();
            conds.push(mk(
                "Ready",
                false,
                "InvalidSpec",
                translate::join_errors(&errs),
            ));
        }
        if table.default_conflict.contains(&name) {
            let msg = format!(
                "partitions {} all claim default: true; new jobs without a partition go to {} (pending jobs keep theirs)",
                table.default_conflict.join(", "),
                table.default_conflict[0]
            );
            // Shown in `kubectl get partitions` (the Ready column) as well as in its own
            // condition.
            conds.retain(|c| c.type_ != "Ready");
            conds.push(mk("Ready", false, "DefaultConflict", msg.clone()));
            conds.push(mk("DefaultConflict", true, "SeveralDefaults", msg));
        }
        st.conditions = conds;
        let write = match prev {
            None => true,
            Some(prev) if *prev == st => false,
            Some(prev) => {
                let hard = |s: &PartitionStatus| {
                    let mut s = s.clone();
                    s.gpus_allocated = 0;
                    s.pending_jobs = 0;
                    s.running_jobs = 0;
                    for c in &mut s.conditions {
                        c.message.clear();
                    }
                    s
                };
                let last = mem
                    .last_partition_write
                    .get(&name)
                    .copied()
                    .unwrap_or(i64::MIN);
                hard(prev) != hard(&st) || now.saturating_sub(last) >= cfg.status_refresh_secs
            }
        };
        if write {
            out.push(PartitionWrite { name, status: st });
        }
    }
    out
}
