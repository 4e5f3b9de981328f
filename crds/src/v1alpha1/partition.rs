//! Partition: a pool of nodes with its topology, limits and policies (Slurm's
//! `PartitionName=` line plus `topology.conf`, as a cluster-scoped object).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
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
    printcolumn(name = "Binding", type_ = "string", json_path = ".status.gpuBinding"),
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

    /// How the GPUs Muster assigns are given to the pods: `dra` (a ResourceClaim per pod,
    /// pinned to the assigned GPUs' UUIDs, that kube-scheduler and the kubelet enforce), `env`
    /// (`NVIDIA_VISIBLE_DEVICES`, which the NVIDIA container toolkit honours only where
    /// unprivileged environment requests are accepted) or `auto` (the default: `dra` where the
    /// API server serves `resource.k8s.io/v1` and the DeviceClass exists, else `env`).
    /// `status.gpuBinding` shows what the partition uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "auto"))]
    pub gpu_binding: Option<GpuBindingMode>,

    /// DeviceClass of the GPUs in `dra` mode (the NVIDIA DRA driver's, `gpu.nvidia.com`, when
    /// omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::DNS_SUBDOMAIN, "deviceClassName must be a DeviceClass name"))]
    #[schemars(length(max = 253))]
    pub device_class_name: Option<String>,

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

    /// What every job pod of the partition gets, as every node of a Slurm partition has it:
    /// shared filesystems, a large `/dev/shm`, the fabric (RDMA resources, `IPC_LOCK`, host
    /// networking or a secondary network), environment and a service account. Merged into
    /// each pod; the job's own settings win where both set the same thing, and a job volume
    /// mounted where the partition mounts a shared filesystem is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_environment: Option<JobEnvironment>,
}

/// What every job pod of a partition gets (`spec.jobEnvironment`).
///
/// Locked memory: RDMA needs an unlimited `memlock` ulimit, which is not a pod field. It comes
/// from the container runtime: containerd passes its own limits on (`LimitMEMLOCK=infinity` in
/// `containerd.service`, the default of most distributions' units), CRI-O takes
/// `default_ulimits = ["memlock=-1:-1"]`. Check with `ulimit -l` in a job (`unlimited`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = rules::rule(
    "!has(self.volumes) || !has(self.shmSize) || self.volumes.all(v, v.mountPath != '/dev/shm')",
    "volumes must not mount at /dev/shm when shmSize is set"
))]
pub struct JobEnvironment {
    /// Shared filesystems mounted in every container of every job pod (Slurm's `/home`,
    /// `/scratch`): a ReadWriteMany PersistentVolumeClaim in the job's namespace, or a
    /// directory of the nodes (hostPath, for filesystems the nodes mount themselves). pyxis's
    /// `--container-mounts` names them by `name`. Each needs its own `mountPath` (jobs of a
    /// partition where two share one are refused with the reason).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub volumes: Vec<SharedVolume>,

    /// Size of the memory-backed `/dev/shm` of every job pod (an `emptyDir` with
    /// `medium: Memory`; it counts towards the pod's memory). NCCL, PyTorch's DataLoader and
    /// Ray need more than the container runtime's 64 MiB. A job that mounts its own
    /// `/dev/shm` keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shm_size: Option<Quantity>,

    /// Extended resources every job pod requests (requests and limits of its first
    /// container), e.g. `rdma/ib: 1` for an RDMA device plugin's HCAs. A job that asks for the
    /// same resource keeps its own amount. GPUs (`nvidia.com/*`) are Muster's to bind and
    /// cannot be listed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = rules::rule(
        "self.all(k, k.contains('/') && !k.startsWith('nvidia.com/') && !k.startsWith('kubernetes.io/') && !k.startsWith('requests.'))",
        "resources must be extended resources such as rdma/ib (nvidia.com/* GPUs are bound by Muster)"
    ))]
    #[schemars(extend("maxProperties" = 16))]
    pub resources: BTreeMap<String, Quantity>,

    /// Linux capabilities added to every container, e.g. `IPC_LOCK` for RDMA memory
    /// registration. A container that drops one by name keeps it dropped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = rules::rule(
        "self.all(c, c.matches('^[A-Z][A-Z_]*$') && !c.startsWith('CAP_'))",
        "capabilities must be Linux capability names such as IPC_LOCK (no CAP_ prefix)"
    ))]
    #[schemars(length(max = 16), inner(length(max = 32)), extend("x-kubernetes-list-type" = "set"))]
    pub capabilities: Vec<String>,

    /// Run job pods in the node's network namespace (for fabrics without a CNI for RDMA);
    /// they then use `dnsPolicy: ClusterFirstWithHostNet`. A job that sets `hostNetwork`
    /// keeps its choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,

    /// Annotations on every job pod, e.g. Multus's `k8s.v1.cni.cncf.io/networks` for a
    /// secondary RDMA network. The job's own annotation of the same key wins.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// Environment of every container (`NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME`, …). A variable the
    /// job or Muster sets is kept as theirs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    pub env: Vec<EnvVar>,

    /// ServiceAccount of job pods that name none (in the job's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::DNS_SUBDOMAIN, "serviceAccountName must be a ServiceAccount name"))]
    pub service_account_name: Option<String>,
}

/// A shared filesystem of a partition (`spec.jobEnvironment.volumes[]`): exactly one of
/// `claimName` and `hostPath`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = rules::rule(
    "has(self.claimName) != has(self.hostPath)",
    "a volume needs exactly one of claimName and hostPath"
))]
pub struct SharedVolume {
    /// The volume's name in the pod, and what `--container-mounts=NAME:DST` refers to.
    #[x_kube(validation = rules::rule(
        "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && !self.startsWith('muster-')",
        "volume names must be DNS labels (lowercase letters, digits, '-') not starting with muster-"
    ))]
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Where it appears in every container (absolute; not `/dev/shm`).
    #[x_kube(validation = rules::rule(
        "self.startsWith('/') && self != '/' && self != '/dev/shm' && !self.contains(':')",
        "mountPath must be an absolute path other than / and /dev/shm, without ':'"
    ))]
    #[schemars(length(min = 2, max = 1024))]
    pub mount_path: String,
    /// Mounted read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// A PersistentVolumeClaim of the job's namespace, ReadWriteMany so that every node of
    /// a job mounts it at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::DNS_SUBDOMAIN, "claimName must be a PersistentVolumeClaim name"))]
    pub claim_name: Option<String>,
    /// A directory of every node (a filesystem the nodes mount, e.g. Lustre or NFS at
    /// `/lustre`), mounted as a `hostPath` of type `Directory`: it must exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(
        "self.startsWith('/') && self != '/'",
        "hostPath must be an absolute directory other than /"
    ))]
    #[schemars(length(min = 2, max = 1024))]
    pub host_path: Option<String>,
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

/// How a partition's pods get their GPUs (`spec.gpuBinding`).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum GpuBindingMode {
    /// `dra` where the cluster has it (resource.k8s.io/v1 served and the DeviceClass present),
    /// else `env`.
    #[default]
    Auto,
    /// A ResourceClaim per pod, one request per assigned GPU pinned by its UUID.
    Dra,
    /// `NVIDIA_VISIBLE_DEVICES` set to the assigned GPUs' UUIDs.
    Env,
}

/// The binding a partition (or one admission of a job) actually uses.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum GpuBinding {
    /// Dynamic Resource Allocation: the pod references a ResourceClaim for its GPUs.
    Dra,
    /// The `NVIDIA_VISIBLE_DEVICES` environment variable.
    #[default]
    Env,
}

impl GpuBinding {
    /// `dra` or `env`.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuBinding::Dra => "dra",
            GpuBinding::Env => "env",
        }
    }
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
    /// The GPU binding the partition's jobs get (`spec.gpuBinding` with `auto` resolved):
    /// `dra` or `env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_binding: Option<GpuBinding>,
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
