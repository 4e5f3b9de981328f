//! Partition: a pool of nodes with its topology, limits and policies (Slurm's
//! `PartitionName=` line plus `topology.conf`, as a cluster-scoped object).

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::rules;

/// A partition: which nodes, how they are wired, and the rules for jobs that run there.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "Partition",
    plural = "partitions",
    singular = "partition",
    shortname = "part",
    status = "PartitionStatus",
    category = "muster",
    doc = "A Slurm-style partition: a pool of GPU nodes, its network topology, limits and preemption policy.",
    printcolumn(name = "State", type_ = "string", json_path = ".spec.state"),
    printcolumn(name = "Default", type_ = "boolean", json_path = ".spec.default"),
    printcolumn(name = "Tier", type_ = "integer", json_path = ".spec.priorityTier"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.nodes"),
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".status.gpusTotal"),
    printcolumn(name = "Alloc", type_ = "integer", json_path = ".status.gpusAllocated"),
    printcolumn(name = "Pending", type_ = "integer", json_path = ".status.pendingJobs"),
    printcolumn(name = "Running", type_ = "integer", json_path = ".status.runningJobs"),
    printcolumn(
        name = "MaxTime",
        type_ = "string",
        json_path = ".spec.maxTime",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    cel
)]
#[x_kube(validation = rules::rule(
    "!has(self.minNodes) || !has(self.maxNodes) || self.minNodes <= self.maxNodes",
    "minNodes must not exceed maxNodes"
))]
#[serde(rename_all = "camelCase")]
pub struct PartitionSpec {
    /// The partition's nodes (Slurm's `Nodes=`). Omitted or empty: every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,

    /// Network topology as node-label keys from the broadest switch level to the node itself,
    /// ending with `kubernetes.io/hostname` (e.g. spine, leaf, hostname), each once. Jobs are placed under
    /// the lowest level that holds them whole. Omitted: the nodes form one flat switch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = rules::rule(
        "size(self) == 0 || self[size(self) - 1] == 'kubernetes.io/hostname'",
        "topology must list node-label keys from broadest to narrowest and end with kubernetes.io/hostname"
    ))]
    #[x_kube(validation = rules::rule(
        "self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",
        "topology entries must be Kubernetes label keys such as topology.example.com/leaf"
    ))]
    #[schemars(length(max = 8), inner(length(min = 1, max = 317)), extend("x-kubernetes-list-type" = "set"))]
    pub topology: Vec<String>,

    /// Jobs that name no partition go to the default one (Slurm's `Default=YES`). At most one
    /// partition may be the default (the operator's admission webhook refuses a second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub default: Option<bool>,

    /// Up: jobs queue and start. Down: jobs queue but do not start. Drain: no new jobs are
    /// accepted, running ones finish. Inactive: no new jobs and none start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Up"))]
    pub state: Option<PartitionState>,

    /// Time limit for jobs that give none (Slurm's `DefaultTime`). Same syntax as a job's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::TIME, rules::TIME_MSG))]
    #[schemars(extend("maxLength" = 64))]
    pub default_time: Option<IntOrString>,

    /// Longest time limit a job may ask for (Slurm's `MaxTime`); longer jobs wait with reason
    /// PartitionTimeLimit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::TIME, rules::TIME_MSG))]
    #[schemars(extend("maxLength" = 64))]
    pub max_time: Option<IntOrString>,

    /// Fewest nodes a job may ask for (`MinNodes`); smaller jobs wait with PartitionNodeLimit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_nodes: Option<u32>,

    /// Most nodes a job may ask for (`MaxNodes`); larger jobs wait with PartitionNodeLimit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_nodes: Option<u32>,

    /// Jobs of a higher tier are scheduled first and may preempt lower tiers (`PriorityTier`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 65533), extend("default" = 0))]
    pub priority_tier: Option<u32>,

    /// What happens to this partition's jobs when a higher tier needs their GPUs
    /// (`PreemptMode`): None (never preempted, the default), Requeue or Cancel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_mode: Option<PreemptMode>,

    /// Namespaces whose jobs may use the partition (Slurm's `AllowAccounts`). Empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = rules::rule(
        "self.all(n, n.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",
        "allowedNamespaces must be namespace names"
    ))]
    #[schemars(length(max = 256), inner(length(min = 1, max = 63)), extend("x-kubernetes-list-type" = "set"))]
    pub allowed_namespaces: Vec<String>,

    /// Tolerations added to every task pod (for tainted GPU nodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// RuntimeClass of every task pod. Set `nvidia` where the GPU Operator uses CDI (v25.10 and
    /// later) so that `NVIDIA_VISIBLE_DEVICES` is honoured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::DNS_SUBDOMAIN, "runtimeClassName must be a RuntimeClass name"))]
    pub runtime_class_name: Option<String>,

    /// Image for task containers that give none (what `muster sbatch` uses without `--image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_image: Option<String>,

    /// CPUs per GPU for jobs that ask for neither CPUs nor memory (`DefCpuPerGPU`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub def_cpu_per_gpu: Option<u32>,

    /// Memory per GPU for jobs that ask for none (`DefMemPerGPU`), same syntax as `mem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::MEM, rules::MEM_MSG))]
    pub def_mem_per_gpu: Option<String>,

    /// Seconds a preempted or timed-out task gets between SIGTERM and SIGKILL (`GraceTime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 86400))]
    pub grace_time_seconds: Option<u32>,
}

/// Slurm's partition states.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
pub enum PartitionState {
    /// Jobs queue and start.
    #[default]
    Up,
    /// Jobs queue but none start (reason PartitionDown).
    Down,
    /// No new jobs are accepted; queued and running ones go on.
    Drain,
    /// No new jobs are accepted and none start (reason PartitionInactive).
    Inactive,
}

/// Slurm's `PreemptMode` values Muster implements.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
pub enum PreemptMode {
    /// Jobs here are never preempted (Slurm's `OFF`; spelled `None` because YAML 1.1
    /// readers such as kubectl turn a bare `Off` into the boolean `false`).
    #[default]
    None,
    /// A preempted job goes back to the queue (state PREEMPTED, then PENDING).
    Requeue,
    /// A preempted job ends as PREEMPTED.
    Cancel,
}

/// What the operator sees of the partition.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionStatus {
    /// Number of nodes in the partition.
    #[serde(default)]
    pub nodes: u32,
    /// The nodes as a Slurm hostlist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_list: Option<String>,
    /// GPUs on the partition's nodes.
    #[serde(default)]
    pub gpus_total: u32,
    /// GPUs allocated to running jobs.
    #[serde(default)]
    pub gpus_allocated: u32,
    /// GPUs reported unhealthy by the node agents.
    #[serde(default)]
    pub gpus_unhealthy: u32,
    /// Jobs waiting in the partition.
    #[serde(default)]
    pub pending_jobs: u32,
    /// Jobs running in the partition.
    #[serde(default)]
    pub running_jobs: u32,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (the partition is valid and Up; reason `DefaultConflict` when more than one
    /// partition claims to be the default) and, in that case, `DefaultConflict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl Partition {
    /// The partition's state, Up when unset.
    pub fn state(&self) -> PartitionState {
        self.spec.state.unwrap_or_default()
    }
}
