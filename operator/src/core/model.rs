//! The snapshot the core schedules (input); the decisions it returns (output) are in
//! [`super::decisions`], re-exported here so `model::*` names both.
//!
//! Plain data: no lifetimes, ids are indices (`NodeId`, `PartitionId`) or Slurm job ids
//! (`JobId`), names are kept alongside for messages. Times are seconds since the Unix epoch
//! (`i64`); durations are seconds (`u64`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use muster_crds::slurm::{Constraint, DependencySpec, GpuBind, Switches, TimeLimit};
pub use muster_crds::v1alpha1::{JobState, PartitionState, PreemptMode};

pub use super::decisions::{
    Decisions, PendingInfo, Preemption, Reason, Reservation, Start, Stop, TaskAssignment, Victim,
};
use super::engine::end_of;
use super::node::{Node, NodeId, Toleration};

/// A Slurm job id.
pub type JobId = u64;
/// Index of a partition in [`Snapshot::partitions`].
pub type PartitionId = u32;

/// Everything one scheduling cycle looks at.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Every node (GPU or not); [`NodeId`] indexes this list. Shared: the operator's node
    /// table and every cycle's snapshot hold one list (16,384 translated nodes are ~30 MiB);
    /// `Arc::make_mut` gives a changed copy.
    #[serde(with = "shared_nodes")]
    pub nodes: Arc<Vec<Node>>,
    /// Partitions; [`PartitionId`] indexes this list.
    pub partitions: Vec<Partition>,
    /// Jobs holding an allocation (running, or being stopped).
    pub running: Vec<RunningJob>,
    /// Jobs waiting to start.
    pub pending: Vec<PendingJob>,
    /// Jobs that ended and still exist, for dependencies (`afterok:train`).
    #[serde(default)]
    pub finished: Vec<FinishedJob>,
    /// Decayed GPU-seconds used per namespace (fair share); see
    /// [`decay_usage`](super::priority::decay_usage) for how the operator keeps it current.
    #[serde(default)]
    pub usage: BTreeMap<String, f64>,
}

/// [`Snapshot::nodes`] (de)serialized as a plain list (serde's `rc` feature is not needed).
mod shared_nodes {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Node;

    pub fn serialize<S: Serializer>(v: &Arc<Vec<Node>>, s: S) -> Result<S::Ok, S::Error> {
        v.as_slice().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<Vec<Node>>, D::Error> {
        Vec::<Node>::deserialize(d).map(Arc::new)
    }
}

/// A partition, with its node selector still as labels (evaluated by the core on
/// [`Node::labels`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Partition {
    /// Partition name.
    pub name: String,
    /// Which nodes belong to the partition; empty selects every node.
    #[serde(default)]
    pub selector: LabelSelector,
    /// Node-label keys from the broadest switch level to the node; a trailing
    /// `kubernetes.io/hostname` is optional. Empty: one flat switch.
    #[serde(default)]
    pub topology: Vec<String>,
    /// Up, Down, Drain or Inactive.
    #[serde(default)]
    pub state: PartitionState,
    /// Time limit for jobs that give none; `None`: `max_time`, else unlimited.
    #[serde(default)]
    pub default_time: Option<TimeLimit>,
    /// Longest time limit a job may ask for; `None`: unlimited.
    #[serde(default)]
    pub max_time: Option<TimeLimit>,
    /// Fewest nodes a job may ask for.
    #[serde(default)]
    pub min_nodes: Option<u32>,
    /// Most nodes a job may ask for (also caps jobs that give no node count).
    #[serde(default)]
    pub max_nodes: Option<u32>,
    /// Higher tiers are scheduled first and may preempt lower tiers.
    #[serde(default)]
    pub priority_tier: u32,
    /// What happens to this partition's jobs when a higher tier needs their resources.
    #[serde(default)]
    pub preempt_mode: PreemptMode,
    /// Namespaces allowed to use the partition; empty: all.
    #[serde(default)]
    pub allowed_namespaces: Vec<String>,
    /// Tolerations of the partition's pods: nodes with `NoSchedule`/`NoExecute` taints not
    /// tolerated here are left out of the partition.
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// CPUs per GPU for jobs that ask for neither CPUs nor memory (`DefCpuPerGPU`).
    #[serde(default)]
    pub def_cpu_per_gpu: Option<u32>,
    /// Memory (MiB) per GPU for jobs that ask for no memory (`DefMemPerGPU`).
    #[serde(default)]
    pub def_mem_per_gpu_mib: Option<u64>,
    /// Seconds a stopped job's tasks get between SIGTERM and SIGKILL; its resources count as
    /// busy until then.
    #[serde(default)]
    pub grace_time_secs: u64,
    /// Image of task containers that give none; `None`: every container must give one
    /// (see [`feasible`](super::feasible)).
    #[serde(default)]
    pub default_image: Option<String>,
    /// Extended resources every node pod of the partition's jobs requests
    /// (`spec.jobEnvironment.resources`, e.g. `rdma/ib: 1`): only nodes whose allocatable
    /// has them can take the partition's jobs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_resources: BTreeMap<String, u64>,
}

/// A Kubernetes-style label selector evaluated on plain maps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Every key must have exactly this value.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Every requirement must hold.
    #[serde(default)]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectorRequirement {
    /// Label key.
    pub key: String,
    /// The test.
    pub operator: SelectorOperator,
    /// Values for `In` / `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
}

/// A selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectorOperator {
    /// The label exists with one of the values.
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label exists.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector (an empty selector matches everything).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let v = labels.get(&r.key);
                match r.operator {
                    SelectorOperator::In => v.is_some_and(|v| r.values.contains(v)),
                    SelectorOperator::NotIn => v.is_none_or(|v| !r.values.contains(v)),
                    SelectorOperator::Exists => v.is_some(),
                    SelectorOperator::DoesNotExist => v.is_none(),
                }
            })
    }
}

/// Where one task of a running job is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskAlloc {
    /// The node.
    pub node: NodeId,
    /// GPU indices (NVML) on the node.
    #[serde(default)]
    pub gpus: Vec<u32>,
    /// CPU millicores.
    #[serde(default)]
    pub cpu_millis: u64,
    /// Memory in MiB.
    #[serde(default)]
    pub memory_mib: u64,
}

/// A job holding an allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningJob {
    /// Job id.
    pub id: JobId,
    /// BatchJob name (what dependencies refer to).
    #[serde(default)]
    pub name: String,
    /// Slurm job name (`--job-name`) if it differs from `name` (for `singleton`).
    #[serde(default)]
    pub job_name: Option<String>,
    /// Namespace (Slurm's user/account for fair share and `singleton`).
    #[serde(default)]
    pub namespace: String,
    /// The partition it runs in; `None` if that partition no longer exists (then it is never
    /// preempted).
    #[serde(default)]
    pub partition: Option<PartitionId>,
    /// When it started.
    pub start_time: i64,
    /// Effective time limit in seconds; `None`: unlimited.
    #[serde(default)]
    pub time_limit: Option<u64>,
    /// Whole nodes: nothing else may run on its nodes.
    #[serde(default)]
    pub exclusive: bool,
    /// `--exclusive=user`: its nodes take no job of another user while it runs.
    #[serde(default)]
    pub exclusive_user: bool,
    /// The submitting user (`None`: unknown, a user who shares nodes with no
    /// `--exclusive=user` job).
    #[serde(default)]
    pub user: Option<String>,
    /// Every task's allocation.
    pub tasks: Vec<TaskAlloc>,
    /// Set once the operator began stopping the job (preempted, cancelled, timed out): its
    /// resources count as busy until this time plus the partition's grace time, and it is
    /// not chosen as a victim again.
    #[serde(default)]
    pub stopping_since: Option<i64>,
    /// For an array element: the array's job id (for the `%N` throttle and `aftercorr`).
    #[serde(default)]
    pub array_job_id: Option<JobId>,
    /// For an array element: its index.
    #[serde(default)]
    pub array_task_id: Option<u32>,
}

impl RunningJob {
    /// The job's name as `singleton` compares it.
    pub fn slurm_name(&self) -> &str {
        self.job_name.as_deref().unwrap_or(&self.name)
    }

    /// When its time limit runs out, if it has one ([`end_of`]).
    pub fn end_time(&self) -> Option<i64> {
        self.time_limit
            .is_some()
            .then(|| end_of(self.start_time, self.time_limit))
    }

    /// GPUs held (a GPU that tasks of one node share counts once).
    pub fn gpu_count(&self) -> u64 {
        distinct_gpus(self.tasks.iter().map(|t| (t.node, t.gpus.as_slice())))
    }
}

/// The number of distinct `(node, GPU)` pairs among tasks: tasks that outnumber their node's
/// GPUs share them, and a shared GPU is one GPU.
pub fn distinct_gpus<'a>(tasks: impl Iterator<Item = (NodeId, &'a [u32])>) -> u64 {
    // A job has few nodes, and NVML indices are below 64 on any real node: one mask per node.
    let mut per: smallvec::SmallVec<[(NodeId, u64); 4]> = smallvec::SmallVec::new();
    let mut beyond = 0u64;
    for (node, gpus) in tasks {
        let mut m = 0u64;
        for &g in gpus {
            if g < 64 {
                m |= 1 << g;
            } else {
                beyond += 1;
            }
        }
        match per.iter_mut().find(|x| x.0 == node) {
            Some(x) => x.1 |= m,
            None => per.push((node, m)),
        }
    }
    per.iter().map(|x| u64::from(x.1.count_ones())).sum::<u64>() + beyond
}

/// A job that ended (kept for dependencies).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinishedJob {
    /// Job id.
    pub id: JobId,
    /// BatchJob name.
    #[serde(default)]
    pub name: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// The final state (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED).
    pub state: JobState,
    /// When it started, if it ever did.
    #[serde(default)]
    pub start_time: Option<i64>,
    /// When it ended.
    pub end_time: i64,
    /// For an array element: the array's job id.
    #[serde(default)]
    pub array_job_id: Option<JobId>,
    /// For an array element: its index.
    #[serde(default)]
    pub array_task_id: Option<u32>,
}

/// A job waiting to start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingJob {
    /// Job id; also the last tie-break of the queue order.
    pub id: JobId,
    /// BatchJob name (what dependencies refer to).
    #[serde(default)]
    pub name: String,
    /// Slurm job name (`--job-name`) if it differs from `name` (for `singleton`).
    #[serde(default)]
    pub job_name: Option<String>,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// The submitting user, for `--exclusive=user` (`None`: unknown; such a job shares no
    /// node with an `--exclusive=user` job, and its own `--exclusive=user` means whole nodes).
    #[serde(default)]
    pub user: Option<String>,
    /// The partition (already resolved from the default); `None`: it names a partition that
    /// does not exist (reason `PartitionConfig`).
    #[serde(default)]
    pub partition: Option<PartitionId>,
    /// When it was submitted.
    pub submit_time: i64,
    /// When it became eligible (dependencies met, released); `None`: `submit_time`. Age and
    /// `--switches` waits count from here.
    #[serde(default)]
    pub eligible_time: Option<i64>,
    /// What it asks for.
    #[serde(default)]
    pub request: JobRequest,
    /// `--hold`: stays pending with reason `JobHeldUser`.
    #[serde(default)]
    pub hold: bool,
    /// `--begin`: not started before this time (seconds since the epoch); reason `BeginTime`
    /// until then.
    #[serde(default)]
    pub begin_time: Option<i64>,
    /// `--nice`: subtracted from the priority.
    #[serde(default)]
    pub nice: i32,
    /// `--priority`: replaces the computed priority.
    #[serde(default)]
    pub priority: Option<u32>,
    /// For an array element: its array and throttle.
    #[serde(default)]
    pub array: Option<ArrayTask>,
    /// `--dependency`: names refer to BatchJobs of the same namespace, ids to any job of the
    /// snapshot (pending, running or finished).
    #[serde(default)]
    pub dependency: Option<DependencySpec>,
}

impl PendingJob {
    /// The job's name as `singleton` compares it.
    pub fn slurm_name(&self) -> &str {
        self.job_name.as_deref().unwrap_or(&self.name)
    }
}

/// Array membership of a pending element.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArrayTask {
    /// The array's job id.
    pub array_job_id: JobId,
    /// This element's index.
    pub task_id: u32,
    /// `%N`: at most this many elements of the array run at once.
    #[serde(default)]
    pub max_running: Option<u32>,
}

/// A job's resource request, in sbatch's terms (values already parsed).
///
/// How these combine into tasks and nodes (the gang's *shape*) is described in the
/// [module docs](super#job-shapes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRequest {
    /// `--nodes` minimum.
    #[serde(default)]
    pub min_nodes: Option<u32>,
    /// `--nodes` maximum (`None`: equal to the minimum when that is given).
    #[serde(default)]
    pub max_nodes: Option<u32>,
    /// `--ntasks`.
    #[serde(default)]
    pub ntasks: Option<u32>,
    /// `--ntasks-per-node`.
    #[serde(default)]
    pub ntasks_per_node: Option<u32>,
    /// `--cpus-per-task`.
    #[serde(default)]
    pub cpus_per_task: Option<u32>,
    /// `--mem`, `--mem-per-cpu` or `--mem-per-gpu`.
    #[serde(default)]
    pub memory: Option<MemoryRequest>,
    /// `--gpus`: GPUs for the whole job.
    #[serde(default)]
    pub gpus: Option<u32>,
    /// `--gpus-per-node` (or `--gres=gpu:N`).
    #[serde(default)]
    pub gpus_per_node: Option<u32>,
    /// `--gpus-per-task`.
    #[serde(default)]
    pub gpus_per_task: Option<u32>,
    /// GPU type: a case-insensitive substring of the GPU model (`a100` matches
    /// `NVIDIA A100-SXM4-80GB`).
    #[serde(default)]
    pub gpu_type: Option<String>,
    /// `--exclusive`: whole nodes, shared with no other job.
    #[serde(default)]
    pub exclusive: bool,
    /// `--exclusive=user`: the job's nodes are shared only with jobs of the same user
    /// ([`PendingJob::user`]); ignored when `exclusive` is set.
    #[serde(default)]
    pub exclusive_user: bool,
    /// `--nodelist`: nodes the job must include (it gets at least these, and more when its
    /// size asks for more). Names of Kubernetes Nodes, without repeats.
    #[serde(default)]
    pub nodelist: Vec<String>,
    /// `--exclude`: nodes the job may not use.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// `--time`; `None`: the partition's default.
    #[serde(default)]
    pub time_limit: Option<TimeLimit>,
    /// `--constraint`: node features (see [`Node::has_feature`]). Matching-OR brackets
    /// (`[a|b]`) put every node on one alternative (the first alternative that fits, in
    /// order); feature counts (`a*2`, `[a*2&b*2]`) need that many distinct nodes of each.
    #[serde(default)]
    pub constraint: Option<Constraint>,
    /// `--switches=N[@WAIT]`: at most N leaf switches, waiting up to WAIT from the eligible
    /// time ([`Config::max_switch_wait_secs`] when not given) before taking any placement.
    #[serde(default)]
    pub switches: Option<Switches>,
    /// `--gpu-bind`: how GPUs are given to the tasks of a node (see the
    /// [module docs](super#gpu-binding)).
    #[serde(default)]
    pub gpu_bind: Option<GpuBind>,
}

/// A memory request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MemoryRequest {
    /// `--mem=N`: MiB on each node.
    PerNode(u64),
    /// `--mem=0`: all of each node's memory.
    WholeNode,
    /// `--mem-per-cpu`: MiB per CPU.
    PerCpu(u64),
    /// `--mem-per-gpu`: MiB per GPU.
    PerGpu(u64),
}

/// Knobs of the scheduler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Config {
    /// Weight of the age factor (0–1, full after `max_age_secs`).
    pub weight_age: f64,
    /// Weight of the job-size factor (0–1: the job's share of the partition's GPUs).
    pub weight_job_size: f64,
    /// Weight of the fair-share factor (0–1).
    pub weight_fair_share: f64,
    /// Age at which the age factor reaches 1.
    pub max_age_secs: u64,
    /// Age a waiting job is credited for a short time limit, times its short-limit factor (1
    /// for a limit of 15 minutes or less, 0 for 30 days or unlimited, on a log scale between):
    /// jobs go shortest first, no job passes another submitted more than this before it, and
    /// no one-node job passes a gang that has waited longer (but see
    /// `pass_gangs_after_secs`). 0: submit order. See [`priority`](super::priority).
    pub short_limit_age_secs: u64,
    /// A one-node job that has waited this long may pass, by its short-limit credit, an
    /// earlier gang that has not yet waited `gang_firm_after_secs`.
    pub pass_gangs_after_secs: u64,
    /// A gang that has waited this long is passed by no later one-node job (0: every gang
    /// from its start, the cap without exception).
    pub gang_firm_after_secs: u64,
    /// Half-life of the fair-share usage decay.
    pub fair_share_half_life_secs: u64,
    /// Shares per namespace (default 1 each).
    pub shares: BTreeMap<String, u32>,
    /// Start lower-priority jobs when they cannot delay a higher one (false: strict priority
    /// order per partition, like Slurm's sched/builtin).
    pub backfill: bool,
    /// How many waiting jobs get a reservation (and an estimated start) per cycle.
    pub max_reservations: usize,
    /// A waiting job gets a reservation only once it has been eligible this long (Slurm's
    /// `bf_min_age_reserve`); 0: at once.
    pub reserve_after_secs: u64,
    /// How long a multi-node gang without `--switches` waits for a placement on the fewest
    /// leaves its size allows before taking any (0: never waits). It does not wait when it is
    /// the only job of its partition waiting (none before it, none after) and no gang one
    /// leaf could hold runs spread.
    pub topology_wait_secs: u64,
    /// The exception to that wait (no other job waiting, no such gang spread) applies only to
    /// gangs whose time limit is at most this; a longer gang (or one without a limit) waits
    /// for its fewest leaves all the same, since it would run spread for long. 0: every gang.
    pub spread_at_once_max_limit_secs: u64,
    /// Whether higher tiers may preempt lower ones (still subject to each partition's
    /// preempt mode).
    pub preemption: bool,
    /// How long a job with `--switches=N` and no `@WAIT` waits for N leaves (Slurm's
    /// `max_switch_wait`, default 300 s).
    pub max_switch_wait_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            weight_age: 1_000.0,
            weight_job_size: 0.0,
            weight_fair_share: 10_000.0,
            max_age_secs: 7 * 24 * 3600,
            short_limit_age_secs: 7 * 24 * 3600,
            pass_gangs_after_secs: 4 * 3600,
            gang_firm_after_secs: 8 * 3600,
            fair_share_half_life_secs: 7 * 24 * 3600,
            shares: BTreeMap::new(),
            backfill: true,
            max_reservations: 16,
            reserve_after_secs: 0,
            topology_wait_secs: 8 * 3600,
            spread_at_once_max_limit_secs: 0,
            preemption: true,
            max_switch_wait_secs: 300,
        }
    }
}

impl Partition {
    /// A job's effective time limit in seconds (`None`: unlimited): what it asked for, else
    /// the partition's default time, else its maximum.
    pub fn effective_limit(&self, asked: Option<TimeLimit>) -> Option<u64> {
        asked
            .or(self.default_time)
            .or(self.max_time)
            .and_then(|t| t.seconds())
    }

    /// A partition named `name` over every node, with `topology` (broadest level first) and
    /// defaults elsewhere (Up, tier 0, no limits, no preemption).
    pub fn new(name: &str, topology: Vec<String>) -> Partition {
        Partition {
            name: name.into(),
            topology,
            ..Default::default()
        }
    }
}

impl JobRequest {
    /// `--gpus=N`: N GPUs on as few nodes as possible.
    pub fn gpus(n: u32) -> JobRequest {
        JobRequest {
            gpus: Some(n),
            ..Default::default()
        }
    }

    /// `--nodes=N --gpus-per-node=G` (one task per node).
    pub fn nodes(n: u32, gpus_per_node: u32) -> JobRequest {
        JobRequest {
            min_nodes: Some(n),
            gpus_per_node: (gpus_per_node > 0).then_some(gpus_per_node),
            ..Default::default()
        }
    }

    /// `--ntasks=N --gpus-per-task=G`.
    pub fn tasks(n: u32, gpus_per_task: u32) -> JobRequest {
        JobRequest {
            ntasks: Some(n),
            gpus_per_task: (gpus_per_task > 0).then_some(gpus_per_task),
            ..Default::default()
        }
    }

    /// With `--time` of `secs` seconds (rounded up to whole minutes, as Slurm does; 0 is
    /// unlimited).
    pub fn time(mut self, secs: u64) -> JobRequest {
        let minutes = u32::try_from(secs.div_ceil(60)).unwrap_or(TimeLimit::MAX_MINUTES);
        self.time_limit = Some(TimeLimit::from_minutes(minutes.min(TimeLimit::MAX_MINUTES)));
        self
    }

    /// With `--exclusive`.
    pub fn exclusive(mut self) -> JobRequest {
        self.exclusive = true;
        self
    }
}

impl PendingJob {
    /// Job `id` named `job-<id>` in namespace `default`, partition 0, submitted at `submit`.
    pub fn new(id: JobId, submit_time: i64, request: JobRequest) -> PendingJob {
        PendingJob {
            id,
            name: format!("job-{id}"),
            namespace: "default".into(),
            partition: Some(0),
            submit_time,
            request,
            ..Default::default()
        }
    }
}

impl Snapshot {
    /// A snapshot of `nodes` with one partition `gpu` over all of them using `topology`.
    pub fn with_nodes(nodes: Vec<Node>, topology: Vec<String>) -> Snapshot {
        Snapshot {
            nodes: Arc::new(nodes),
            partitions: vec![Partition::new("gpu", topology)],
            ..Default::default()
        }
    }

    /// Carries out `d` as an operator would at time `now`: started jobs move from pending
    /// to running with their allocations; stopped and preempted jobs are marked stopping.
    /// (The simulator and tests use this; jobs leave `running` when the caller says they
    /// ended.)
    pub fn apply(&mut self, d: &Decisions, now: i64) {
        let started: BTreeMap<JobId, &Start> = d.starts.iter().map(|s| (s.job, s)).collect();
        let mut keep = Vec::with_capacity(self.pending.len());
        for p in std::mem::take(&mut self.pending) {
            if let Some(s) = started.get(&p.id) {
                self.running.push(RunningJob {
                    id: p.id,
                    name: p.name.clone(),
                    job_name: p.job_name.clone(),
                    namespace: p.namespace.clone(),
                    partition: p.partition,
                    start_time: now,
                    time_limit: s.time_limit,
                    exclusive: s.exclusive,
                    exclusive_user: p.request.exclusive_user && !s.exclusive,
                    user: p.user.clone(),
                    tasks: s
                        .tasks
                        .iter()
                        .map(|t| TaskAlloc {
                            node: t.node,
                            gpus: t.gpus.clone(),
                            cpu_millis: t.cpu_millis,
                            memory_mib: t.memory_mib,
                        })
                        .collect(),
                    stopping_since: None,
                    array_job_id: p.array.as_ref().map(|a| a.array_job_id),
                    array_task_id: p.array.as_ref().map(|a| a.task_id),
                });
            } else {
                keep.push(p);
            }
        }
        self.pending = keep;
        let stopping: std::collections::BTreeSet<JobId> = d
            .stops
            .iter()
            .map(|s| s.job)
            .chain(
                d.preemptions
                    .iter()
                    .flat_map(|p| p.victims.iter().map(|v| v.job)),
            )
            .collect();
        for r in &mut self.running {
            if stopping.contains(&r.id) && r.stopping_since.is_none() {
                r.stopping_since = Some(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_follows_kubernetes_semantics() {
        let mut labels = BTreeMap::new();
        labels.insert("pool".to_string(), "gpu".to_string());
        labels.insert("zone".to_string(), "a".to_string());
        assert!(LabelSelector::default().matches(&labels));
        let mut s = LabelSelector::default();
        s.match_labels.insert("pool".into(), "gpu".into());
        assert!(s.matches(&labels));
        s.match_expressions.push(SelectorRequirement {
            key: "zone".into(),
            operator: SelectorOperator::NotIn,
            values: vec!["b".into()],
        });
        assert!(s.matches(&labels));
        s.match_expressions.push(SelectorRequirement {
            key: "spot".into(),
            operator: SelectorOperator::Exists,
            values: vec![],
        });
        assert!(!s.matches(&labels));
        let s = LabelSelector {
            match_expressions: vec![SelectorRequirement {
                key: "zone".into(),
                operator: SelectorOperator::In,
                values: vec!["b".into(), "c".into()],
            }],
            ..Default::default()
        };
        assert!(!s.matches(&labels));
    }

    #[test]
    fn running_job_end_time() {
        let j = RunningJob {
            start_time: 100,
            time_limit: Some(60),
            ..Default::default()
        };
        assert_eq!(j.end_time(), Some(160));
        let u = RunningJob {
            start_time: 100,
            ..Default::default()
        };
        assert_eq!(u.end_time(), None);
    }
}
