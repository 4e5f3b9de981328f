//! What a cycle is given and what it makes: settings, memory between cycles, inputs, and the plan of writes.

use super::*;

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
pub(super) type Parsed = Arc<Result<ParsedJob, Vec<FieldError>>>;

/// Live pods grouped by (namespace, job, owner uid, attempt).
pub(super) type PodGroups<'a> =
    BTreeMap<(String, String, Option<String>, Option<u32>), Vec<&'a PodObs>>;

/// What the planner remembers between cycles. Not authoritative: losing it (a restart, a new
/// leader) costs at most a few extra writes.
#[derive(Debug, Default)]
pub struct PlanMemory {
    /// Last status write per BatchJob uid.
    pub(super) last_status_write: HashMap<String, i64>,
    /// Last status write per Partition name.
    pub(super) last_partition_write: HashMap<String, i64>,
    /// Parsed specs by uid, with the generation they were parsed at.
    pub(super) parsed: HashMap<String, (Option<i64>, Parsed)>,
    /// The snapshot's nodes and the core's trees, kept while the node table and the
    /// partitions stay the same.
    pub(super) cluster: Option<ClusterCache>,
    /// How many times `cluster` was built.
    pub(super) cluster_builds: u64,
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

    pub(super) fn parse(&mut self, job: &BatchJob) -> Parsed {
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

    pub(super) fn retain(&mut self, live: &HashSet<String>) {
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
    pub(super) status: BatchJobStatus,
    /// Its task records.
    pub(super) tasks: Arc<TaskRecords>,
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
    /// Running pods whose annotations to set: the job's signal requests
    /// (`muster.dev/signals`) and when its time limit ends (`muster.dev/end-time`, for
    /// `--signal`'s warning): (pod name, annotation → value; `None` removes it).
    pub annotate_pods: Vec<(String, BTreeMap<String, Option<String>>)>,
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

impl JobPlan {
    pub(super) fn is_empty(&self) -> bool {
        !self.add_finalizer
            && self.status.is_none()
            && self.secret.is_none()
            && self.service.is_none()
            && self.group.is_none()
            && self.create.is_empty()
            && self.delete.is_empty()
            && self.annotate_pods.is_empty()
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
