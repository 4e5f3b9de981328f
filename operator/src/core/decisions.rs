//! What one cycle decides: the core's output (starts, reservations, preemptions, stops and
//! every pending job's reason), kept apart from the snapshot it reads ([`super::model`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::model::{JobId, JobState, Snapshot};
use super::node::NodeId;

/// What one cycle decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decisions {
    /// Jobs to start now, in the order they were decided.
    pub starts: Vec<Start>,
    /// Jobs that wait with room held for them, in queue order.
    pub reservations: Vec<Reservation>,
    /// Running gangs to evict, grouped by the job they make room for.
    pub preemptions: Vec<Preemption>,
    /// Running jobs to stop now (time limit, failed node or GPU).
    pub stops: Vec<Stop>,
    /// Every pending job not started, in queue order, with its reason.
    pub pending: Vec<PendingInfo>,
}

/// A job to start now, with every task placed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Start {
    /// The job.
    pub job: JobId,
    /// Its nodes, in node-list order (names in natural order: `gpu2` before `gpu10`).
    pub nodes: Vec<NodeId>,
    /// Every task, by rank.
    pub tasks: Vec<TaskAssignment>,
    /// Effective time limit in seconds (`None`: unlimited).
    pub time_limit: Option<u64>,
    /// Whole nodes.
    pub exclusive: bool,
    /// Leaf switches the job spans.
    pub leaves: u32,
    /// The priority it was ordered by.
    pub priority: u32,
}

/// Where one task runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskAssignment {
    /// Global rank (`SLURM_PROCID`).
    pub rank: u32,
    /// The node.
    pub node: NodeId,
    /// Index of the node in the job's node list (`SLURM_NODEID`).
    pub node_rank: u32,
    /// Rank on the node (`SLURM_LOCALID`).
    pub local_rank: u32,
    /// GPU indices (NVML) on the node.
    pub gpus: Vec<u32>,
    /// CPU millicores.
    pub cpu_millis: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
}

/// Room held for a waiting job: its estimated start (`squeue --start`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// The job.
    pub job: JobId,
    /// Estimated start.
    pub start_time: i64,
    /// The nodes planned for it, in node-list order.
    pub nodes: Vec<NodeId>,
}

/// Gangs evicted to make room for a higher-tier job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preemption {
    /// The job that needs the room.
    pub for_job: JobId,
    /// The victims.
    pub victims: Vec<Victim>,
}

/// One evicted gang.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Victim {
    /// The running job.
    pub job: JobId,
    /// Requeue it (partition `PreemptMode=Requeue`) rather than end it (`Cancel`).
    pub requeue: bool,
}

/// A running job that must stop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stop {
    /// The job.
    pub job: JobId,
    /// TIMEOUT or NODE_FAIL.
    pub state: JobState,
    /// Why, for the job's status message.
    pub message: String,
}

/// A pending job's status after the cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingInfo {
    /// The job.
    pub job: JobId,
    /// Slurm's reason.
    pub reason: Reason,
    /// Detail for the status message.
    pub message: String,
    /// Estimated start, when a reservation was made.
    pub start_estimate: Option<i64>,
    /// The priority the job was ordered by.
    pub priority: u32,
    /// Whether it is eligible (not held, dependencies met, partition and limits allow it);
    /// the operator records the first time this is true as the eligible time.
    pub eligible: bool,
}

/// Slurm's pending reasons, spelled as `squeue` prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Reason {
    /// Waiting for resources held by running jobs.
    Resources,
    /// A higher-priority job in the partition is waiting (or holds a reservation).
    Priority,
    /// Waiting for a dependency.
    Dependency,
    /// A dependency can never be met.
    DependencyNeverSatisfied,
    /// Held by the user.
    JobHeldUser,
    /// `--begin` has not come yet.
    BeginTime,
    /// The array's `%N` limit is reached.
    JobArrayTaskLimit,
    /// The partition is Down.
    PartitionDown,
    /// The partition is Inactive.
    PartitionInactive,
    /// The time limit exceeds the partition's maximum.
    PartitionTimeLimit,
    /// The node count is outside the partition's limits.
    PartitionNodeLimit,
    /// The job names a partition that does not exist.
    PartitionConfig,
    /// The namespace may not use the partition.
    AccountNotAllowed,
    /// The job fits the partition only with nodes (or GPUs) that are down, cordoned or
    /// unhealthy.
    ReqNodeNotAvail,
    /// The request can never be met by the partition, or is contradictory.
    BadConstraints,
}

impl Reason {
    /// The spelling `squeue` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Resources => "Resources",
            Reason::Priority => "Priority",
            Reason::Dependency => "Dependency",
            Reason::DependencyNeverSatisfied => "DependencyNeverSatisfied",
            Reason::JobHeldUser => "JobHeldUser",
            Reason::BeginTime => "BeginTime",
            Reason::JobArrayTaskLimit => "JobArrayTaskLimit",
            Reason::PartitionDown => "PartitionDown",
            Reason::PartitionInactive => "PartitionInactive",
            Reason::PartitionTimeLimit => "PartitionTimeLimit",
            Reason::PartitionNodeLimit => "PartitionNodeLimit",
            Reason::PartitionConfig => "PartitionConfig",
            Reason::AccountNotAllowed => "AccountNotAllowed",
            Reason::ReqNodeNotAvail => "ReqNodeNotAvail",
            Reason::BadConstraints => "BadConstraints",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TaskAssignment {
    /// The UUIDs of the task's GPUs (for `NVIDIA_VISIBLE_DEVICES`), in the order of
    /// [`TaskAssignment::gpus`]; empty strings for GPUs the snapshot does not list.
    pub fn gpu_uuids(&self, snap: &Snapshot) -> Vec<String> {
        let node = snap.nodes.get(self.node as usize);
        self.gpus
            .iter()
            .map(|i| {
                node.and_then(|n| n.gpus.iter().find(|g| g.index == *i))
                    .map(|g| g.uuid.clone())
                    .unwrap_or_default()
            })
            .collect()
    }
}

impl Start {
    /// The job's node names in node-list order (compress them with
    /// `muster_crds::slurm::hostlist::compress` for `SLURM_JOB_NODELIST`).
    pub fn node_names<'s>(&self, snap: &'s Snapshot) -> Vec<&'s str> {
        self.nodes
            .iter()
            .filter_map(|&n| snap.nodes.get(n as usize).map(|x| x.name.as_str()))
            .collect()
    }
}
