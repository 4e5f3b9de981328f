//! Building a job's node pods, its headless Service and its step credential Secret (pure: no
//! client calls). A one-node job has no Secret: its steps never leave its pod, whose daemon
//! makes the key itself ([`step::ENV_LOCAL_KEY`], an in-memory `emptyDir` at the key path).
//!
//! One pod per allocated node of an admission, holding the job's share of that node (the sum
//! of its tasks' CPUs and memory, and their GPUs), owned by the BatchJob (controller
//! ownerReference, so deleting the job deletes its pods). This is the step runtime's contract
//! (`muster_cli::step`, constants in [`muster_crds::step`]): every pod runs `muster-step
//! node`, the node daemon; the first node's daemon runs the batch script once (the template's
//! command, for a job without a script, runs as one `srun` step over every task), and the
//! others wait for `srun` steps. The job's state and exit code are the batch step's: the
//! first pod's.
//!
//! Placement is a *required node affinity* on `kubernetes.io/hostname` — never `nodeName` —
//! so kube-scheduler still binds the pod and quotas, admission and scheduler plugins apply.
//! GPUs are bound through the pod's ResourceClaim in `dra` mode (see [`dra`]) or
//! `NVIDIA_VISIBLE_DEVICES` in `env` mode; pods never request `nvidia.com/*` resources, which
//! would let the kubelet's device plugin pick other GPUs. Inside the pod `srun` gives each
//! task its own `CUDA_VISIBLE_DEVICES` from the node's GPUs (`MUSTER_NODE_GPUS`).
//!
//! # Names
//! Pod `<job>-<node>` (`<job>-<node>-a<attempt>` after a requeue, while the old pods may
//! still terminate), `spec.hostname` the same (a DNS label), `spec.subdomain` the job's
//! headless Service and a DNS search path under it, so the short names of
//! `SLURM_JOB_NODELIST` (`train-[0-3]`) resolve inside the job and
//! `scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1` is a working `MASTER_ADDR`. A
//! one-node job has no Service (its one name is its own host name).
//!
//! # Environment
//! Every container (and the template's init containers) gets the variables below. They are set
//! by the operator and **cannot be overridden** by the template: any template `env` entry of
//! the same name is dropped ([`BINDING_VARS`]; `env` beats `envFrom` in Kubernetes).
//!
//! What sbatch gives a batch script: `SLURM_JOB_ID`/`SLURM_JOBID`, `SLURM_JOB_NAME`,
//! `SLURM_JOB_NODELIST`/`SLURM_NODELIST`, `SLURM_JOB_NUM_NODES`/`SLURM_NNODES`,
//! `SLURM_NTASKS`/`SLURM_NPROCS`, `SLURM_TASKS_PER_NODE`, `SLURM_JOB_CPUS_PER_NODE`,
//! `SLURM_NODEID`, `SLURM_PROCID`/`SLURM_LOCALID` (0), `SLURMD_NODENAME` (this pod's name in
//! the nodelist), `SLURM_CPUS_ON_NODE`, `SLURM_JOB_PARTITION`, `SLURM_SUBMIT_DIR`,
//! `SLURM_JOB_ACCOUNT` (`--account`, else the namespace),
//! `SLURM_CPUS_PER_TASK`/`SLURM_NTASKS_PER_NODE`/`SLURM_GPU_BIND` (when asked),
//! `SLURM_ARRAY_JOB_ID`/`SLURM_ARRAY_TASK_ID` (array elements), `SLURM_GPUS_PER_NODE` /
//! `SLURM_GPUS_PER_TASK` (echoing the request), `SLURM_GPUS_ON_NODE` and `SLURM_JOB_GPUS`
//! (the job's GPUs on this node: count and NVML indices). The step runtime's:
//! `MUSTER_NODE_GPUS`, `MUSTER_POD_IP`, `MUSTER_STEP_PORT`, `MUSTER_STEP_KEY_FILE`,
//! `MUSTER_STEP_KILL_WAIT`, and the batch step's output files and `--signal`'s warning
//! (`MUSTER_STEP_STDOUT`, `MUSTER_STEP_SIGNAL`, ...: see `stdio_env`). Rendezvous for launchers that read them: `MASTER_ADDR` (node 0's
//! host name), `WORLD_SIZE` (tasks), `NODE_RANK`, `LOCAL_WORLD_SIZE` (tasks on this node).
//!
//! `MASTER_PORT` is the exception: it defaults to 29500 and may be changed by the BatchJob
//! annotation [`MASTER_PORT_ANNOTATION`] or by a `MASTER_PORT` entry in the first container's
//! template env (which is then kept as written).
//!
//! GPU binding (`env` mode): `NVIDIA_VISIBLE_DEVICES` is the node's GPU UUIDs of the job,
//! comma-joined, or `void` for a pod without GPUs — the NVIDIA container toolkit then behaves
//! like plain runc and exposes neither GPUs nor driver libraries. Setting it on every
//! container matters: CUDA base images default to `all`. In `dra` mode a pod with GPUs gets
//! no `NVIDIA_VISIBLE_DEVICES` (every container references the pod's claim and the DRA driver
//! injects exactly its devices); a pod without GPUs still gets `void`.
//! `CUDA_VISIBLE_DEVICES` is `0..n-1` for the batch step (indices relative to the devices the
//! container sees, as Slurm sets them under `ConstrainDevices`); `srun` narrows it per task.
//!
//! [`step::ENV_LOCAL_KEY`]: muster_crds::step::ENV_LOCAL_KEY

mod env;
mod layout;
mod names;
mod objects;
mod pod;
mod template;

pub use env::{
    BINDING_VARS, limit_end, node_env, node_env_in, node_gpus_json, plain_node_gpus, tasks_per_node,
};
pub use layout::{JobLayout, job_nodes, node_hosts, node_list, node_ranks, node_share};
pub(crate) use names::fit_label;
pub use names::{hostname, pod_name, service_name};
pub use objects::{build_secret, build_service, with_key};
pub use pod::{build_pod, build_pod_in, owner_ref, pod_allocation, pod_labels, warning_end};
pub use template::{check_buildable, check_name, container_without_image, task_template};

use muster_crds::v1alpha1::{BatchJob, GpuBinding, Partition, TaskAllocation};

use super::dra;

/// BatchJob annotation overriding `MASTER_PORT` (default 29500).
pub const MASTER_PORT_ANNOTATION: &str = "muster.dev/master-port";
/// Pod annotation with the node pod's share of the allocation (JSON of a `TaskAllocation`:
/// the node, the sum of its tasks' CPUs and memory, their GPUs), so that a pod whose BatchJob
/// or attempt is gone still tells what it holds until it terminates.
pub const TASK_ANNOTATION: &str = "muster.dev/task";
/// The default rendezvous port (torchrun's).
pub const DEFAULT_MASTER_PORT: u16 = 29500;
/// Name of the container created when the template has none.
pub const TASK_CONTAINER: &str = "task";
/// The step image when none is configured (the operator's own, which holds `muster-step`).
pub const DEFAULT_STEP_IMAGE: &str = concat!(
    "ghcr.io/muster-dev/muster-operator:",
    env!("CARGO_PKG_VERSION")
);

/// Why a pod cannot be built from the job (reported on the job; the allocation is released).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Nothing to run.
    #[error(
        "spec.template has no containers and spec.script is empty: give a script or a container to run"
    )]
    NothingToRun,
    /// A job without a script whose container gives no command: its command runs as an
    /// `srun` step, and the image's entrypoint cannot be read from the API.
    #[error(
        "spec.template.spec.containers[0] ({container:?}) has no command and spec.script is empty: give the container a command (it runs as one srun step over every task) or a script"
    )]
    NoCommand {
        /// Which container.
        container: String,
    },
    /// A container without an image and no default.
    #[error(
        "{container} has no image and partition {partition} has no defaultImage: set the container's image"
    )]
    NoImage {
        /// Which container.
        container: String,
        /// The partition.
        partition: String,
    },
    /// The job's name cannot label its pods.
    #[error(
        "metadata.name {name:?} is longer than 63 characters; it labels the node pods ({key}), so it must fit a label value"
    )]
    NameTooLong {
        /// The name.
        name: String,
        /// The label key.
        key: &'static str,
    },
    /// A node index without an allocation.
    #[error("node {0} of the job has no allocation in status.tasks")]
    NoSuchNode(u32),
    /// The pod cannot take the partition's job environment.
    #[error("partition {partition}: {source}")]
    JobEnv {
        /// The partition.
        partition: String,
        /// The conflict.
        source: super::jobenv::JobEnvError,
    },
    /// A pod's ResourceClaim cannot be built (`dra` mode).
    #[error(transparent)]
    Claim(#[from] dra::DraError),
    /// A pyxis field (`containerImage`, `containerMounts`, …) does not parse.
    #[error("spec.{field}: {source}")]
    Pyxis {
        /// The field.
        field: &'static str,
        /// Why.
        source: muster_crds::slurm::SyntaxError,
    },
    /// A pyxis field and the template's first container give different values.
    #[error(
        "spec.{field} ({ours:?}) and spec.template.spec.containers[0].{template_field} ({theirs:?}) differ: give one of them"
    )]
    PyxisConflict {
        /// The pyxis field.
        field: &'static str,
        /// The container's field.
        template_field: &'static str,
        /// The pyxis field's value.
        ours: String,
        /// The container's.
        theirs: String,
    },
}

/// Everything the pods of one admission are built from.
#[derive(Clone, Copy, Debug)]
pub struct JobContext<'a> {
    /// The BatchJob (template, name, namespace, uid, annotations).
    pub job: &'a BatchJob,
    /// Its Slurm job id.
    pub job_id: u64,
    /// The admission attempt (1 for the first).
    pub attempt: u32,
    /// Every task's allocation, by rank.
    pub tasks: &'a [TaskAllocation],
    /// The partition the job runs in (tolerations, runtime class, default image, grace time).
    pub partition: Option<&'a Partition>,
    /// The partition's name.
    pub partition_name: &'a str,
    /// `(array job id, index)` for an array element.
    pub array: Option<(u64, u32)>,
    /// `--gpus-per-node` as given (for `SLURM_GPUS_PER_NODE`).
    pub gpus_per_node: Option<&'a str>,
    /// `--gpus-per-task` as given (for `SLURM_GPUS_PER_TASK`).
    pub gpus_per_task: Option<&'a str>,
    /// How the pods get their GPUs (recorded with the allocation): `env` sets
    /// `NVIDIA_VISIBLE_DEVICES`; `dra` references the pod's ResourceClaim
    /// ([`dra::claim_name`]) instead.
    pub gpu_binding: GpuBinding,
    /// Where the pods come from: the step image and the cluster domain.
    pub step: &'a StepSettings,
    /// `MUSTER_NODE_GPUS` per node index, with the GPUs' topology (NUMA, NVLink peers) as the
    /// scheduler saw it; a node missing here gets its GPUs' indices and UUIDs only.
    pub node_gpus: &'a [String],
    /// When the admission's time limit ends (seconds since the epoch; `None`: unlimited), for
    /// `--signal`'s warning ([`limit_end`]).
    pub limit_end: Option<i64>,
}

/// How node pods reach the step runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepSettings {
    /// The image holding `muster-step` at
    /// [`step::IMAGE_BINARY`](muster_crds::step::IMAGE_BINARY) (the operator's).
    pub image: String,
    /// The cluster's DNS domain (`cluster.local`), for the node names' search path.
    pub cluster_domain: String,
}

impl Default for StepSettings {
    fn default() -> Self {
        StepSettings {
            image: DEFAULT_STEP_IMAGE.into(),
            cluster_domain: "cluster.local".into(),
        }
    }
}

#[cfg(test)]
mod fixtures {
    //! What the submodules' tests build pods from: a job, a two-node gang, a partition.
    use super::*;
    use muster_crds::v1alpha1::{BatchJobSpec, PartitionSpec};

    pub(super) fn job(name: &str, spec: BatchJobSpec) -> BatchJob {
        let mut j = BatchJob::new(name, spec);
        j.metadata.namespace = Some("ml".into());
        j.metadata.uid = Some("uid-1".into());
        j
    }

    /// 2 nodes x 2 tasks x 1 GPU.
    pub(super) fn gang() -> Vec<TaskAllocation> {
        (0..4)
            .map(|r| TaskAllocation {
                rank: r,
                node: format!("gpu00{}", r / 2 + 1),
                node_rank: r / 2,
                local_rank: r % 2,
                cpu_millis: 4000,
                memory_mib: 8192,
                gpus: vec![r % 2 + 2],
                gpu_uuids: vec![format!("GPU-{r}")],
                pod: None,
            })
            .collect()
    }

    pub(super) fn partition() -> Partition {
        Partition::new(
            "gpu",
            PartitionSpec {
                default_image: Some("nvcr.io/nvidia/pytorch:24.01-py3".into()),
                runtime_class_name: Some("nvidia".into()),
                grace_time_seconds: Some(45),
                tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                    key: Some("nvidia.com/gpu".into()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                }],
                ..Default::default()
            },
        )
    }

    fn step_settings() -> &'static StepSettings {
        static S: std::sync::OnceLock<StepSettings> = std::sync::OnceLock::new();
        S.get_or_init(|| StepSettings {
            image: "muster/operator:test".into(),
            cluster_domain: "cluster.local".into(),
        })
    }

    pub(super) fn ctx<'a>(
        j: &'a BatchJob,
        tasks: &'a [TaskAllocation],
        p: Option<&'a Partition>,
    ) -> JobContext<'a> {
        JobContext {
            job: j,
            job_id: 1234,
            attempt: 1,
            tasks,
            partition: p,
            partition_name: "gpu",
            array: None,
            gpus_per_node: None,
            gpus_per_task: Some("1"),
            gpu_binding: GpuBinding::Env,
            step: step_settings(),
            node_gpus: &[],
            limit_end: None,
        }
    }
}
