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

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, KeyToPath, NodeAffinity,
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector, Pod,
    PodDNSConfig, PodTemplateSpec, ResourceRequirements, Secret, SecretVolumeSource, Service,
    ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use muster_crds::labels;
use muster_crds::step;
use muster_crds::v1alpha1::{BatchJob, GpuBinding, Partition, TaskAllocation};

use super::{dra, quantity};

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
/// Seconds left between SIGTERM to the steps and the kubelet's SIGKILL at the grace period.
const KILL_MARGIN_SECS: u32 = 5;

/// Variables the operator owns on every container; template entries of these names are
/// dropped.
pub const BINDING_VARS: &[&str] = &[
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_NNODES",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_TASKS_PER_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_CPUS_ON_NODE",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURMD_NODENAME",
    "SLURM_JOB_PARTITION",
    "SLURM_SUBMIT_DIR",
    "SLURM_JOB_ACCOUNT",
    "SLURM_CPUS_PER_TASK",
    "SLURM_GPU_BIND",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "MASTER_ADDR",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    step::ENV_NODE_GPUS,
    step::ENV_POD_IP,
    step::ENV_PORT,
    step::ENV_KEY_FILE,
    step::ENV_LOCAL_KEY,
    step::ENV_KILL_WAIT,
    step::ENV_STDOUT,
    step::ENV_STDERR,
    step::ENV_STDOUT_DEFAULT,
    step::ENV_OPEN_MODE,
    step::ENV_SHARED_DIRS,
    step::ENV_CHDIR,
    step::ENV_SIGNAL,
    step::ENV_END_TIME,
];

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

/// The job's task template with pyxis's `containerImage` and `containerWorkdir` given to its
/// first container (created when the template has none): the one place these fields become
/// the pod's, for building, for the buildability check and for `SLURM_SUBMIT_DIR`.
pub fn task_template(job: &BatchJob) -> Result<PodTemplateSpec, BuildError> {
    let mut t = job.spec.template.as_deref().cloned().unwrap_or_default();
    let image = job
        .spec
        .container_image
        .as_deref()
        .map(|i| {
            muster_crds::slurm::pyxis::image(i).map_err(|source| BuildError::Pyxis {
                field: "containerImage",
                source,
            })
        })
        .transpose()?;
    let workdir = job
        .spec
        .container_workdir
        .as_deref()
        .map(|w| {
            muster_crds::slurm::pyxis::workdir(w).map_err(|source| BuildError::Pyxis {
                field: "containerWorkdir",
                source,
            })
        })
        .transpose()?;
    if let Some(m) = job.spec.container_mounts.as_deref() {
        muster_crds::slurm::pyxis::mounts(m).map_err(|source| BuildError::Pyxis {
            field: "containerMounts",
            source,
        })?;
    }
    if image.is_none() && workdir.is_none() {
        return Ok(t);
    }
    let spec = t.spec.get_or_insert_with(Default::default);
    if spec.containers.is_empty() {
        spec.containers.push(Container {
            name: TASK_CONTAINER.into(),
            ..Default::default()
        });
    }
    let c = &mut spec.containers[0];
    for (field, template_field, ours, theirs) in [
        ("containerImage", "image", image, &mut c.image),
        (
            "containerWorkdir",
            "workingDir",
            workdir,
            &mut c.working_dir,
        ),
    ] {
        let Some(ours) = ours else { continue };
        match theirs.as_deref().filter(|t| !t.is_empty()) {
            Some(t) if t != ours => {
                return Err(BuildError::PyxisConflict {
                    field,
                    template_field,
                    ours,
                    theirs: t.to_string(),
                });
            }
            _ => *theirs = Some(ours),
        }
    }
    Ok(t)
}

/// The job's `containerMounts`, parsed (checked by [`task_template`]).
fn container_mounts(job: &BatchJob) -> Vec<muster_crds::slurm::pyxis::ContainerMount> {
    job.spec
        .container_mounts
        .as_deref()
        .and_then(|m| muster_crds::slurm::pyxis::mounts(m).ok())
        .unwrap_or_default()
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

/// When the time limit of the admission in `st` ends: its start plus its limit.
pub fn limit_end(st: &muster_crds::v1alpha1::BatchJobStatus) -> Option<i64> {
    let start = st.start_time.as_ref()?.0.as_second();
    let secs = i64::try_from(super::translate::status_limit_secs(st)?).ok()?;
    start.checked_add(secs)
}

/// The batch step's output files and open mode (node 0), and the warning signal (every
/// node): the step runtime's variables ([`step::ENV_STDOUT`] ...). The file names are
/// expanded here with the same fields `scontrol show job` uses, so the file lands where
/// `StdOut=` says.
fn stdio_env(ctx: &JobContext<'_>, batch_host: bool) -> Vec<(String, String)> {
    use muster_crds::slurm::fname;
    let spec = &ctx.job.spec;
    let mut env = Vec::new();
    if let (Some(sig), Some(end)) = (spec.signal.as_deref(), ctx.limit_end) {
        env.push((step::ENV_SIGNAL.into(), sig.to_string()));
        env.push((step::ENV_END_TIME.into(), end.to_string()));
    }
    if !batch_host {
        return env;
    }
    let user = ctx
        .job
        .annotations()
        .get(labels::USER)
        .cloned()
        .unwrap_or_default();
    let first = ctx
        .tasks
        .iter()
        .find(|t| t.node_rank == node_ranks(ctx.tasks).first().copied().unwrap_or(0))
        .map(|t| t.node.clone());
    let fields = fname::StdioFields {
        job_id: ctx.job_id,
        array: ctx.array,
        job_name: ctx.job.job_name(),
        user: &user,
        first_node: first.as_deref(),
        work_dir: None,
    };
    if let Some(d) = spec.chdir.as_deref().filter(|d| !d.is_empty()) {
        env.push((step::ENV_CHDIR.into(), d.to_string()));
    }
    let out = fname::output_pattern(spec.output.as_deref(), ctx.array.is_some());
    env.push((step::ENV_STDOUT.into(), fname::expand(out, &fields)));
    if spec.output.as_deref().is_none_or(str::is_empty) {
        env.push((step::ENV_STDOUT_DEFAULT.into(), "1".into()));
    }
    if let Some(e) = spec.error.as_deref().filter(|e| !e.is_empty()) {
        env.push((step::ENV_STDERR.into(), fname::expand(e, &fields)));
    }
    // A requeued run truncates too unless --open-mode=append: checked with Slurm 22.05 (a
    // requeued job's file holds only its last run).
    let append = spec.open_mode == Some(muster_crds::v1alpha1::OpenMode::Append);
    env.push((
        step::ENV_OPEN_MODE.into(),
        if append { "append" } else { "truncate" }.into(),
    ));
    let dirs: Vec<&str> = ctx
        .partition
        .map(|p| super::jobenv::shared_volumes(&p.spec))
        .unwrap_or_default()
        .iter()
        .filter(|v| v.read_only != Some(true))
        .map(|v| v.mount_path.as_str())
        .collect();
    if !dirs.is_empty() {
        env.push((step::ENV_SHARED_DIRS.into(), dirs.join(":")));
    }
    env
}

/// How node pods reach the step runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepSettings {
    /// The image holding `muster-step` at [`step::IMAGE_BINARY`] (the operator's).
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

/// Short stable hash for names that must be shortened.
fn short_hash(s: &str) -> String {
    let h = crate::core::util::fnv1a(crate::core::util::FNV_OFFSET, s.as_bytes());
    format!("{:05x}", h & 0xfffff)
}

/// `s` as a DNS-1123 label fragment: lowercase alphanumerics and `-` (`.` becomes `-`).
fn label_chars(s: &str) -> String {
    s.chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() { c } else { '-' }
        })
        .collect()
}

/// `base` + `suffix` as a DNS label of at most 63 characters: `base` shortened with a hash
/// when needed, so distinct long names stay distinct.
pub(crate) fn fit_label(base: &str, suffix: &str) -> String {
    let b = label_chars(base);
    if b.len() + suffix.len() <= 63 {
        return format!("{b}{suffix}");
    }
    let keep = 63 - suffix.len() - 6;
    let head = b[..keep].trim_end_matches('-');
    format!("{head}-{}{suffix}", short_hash(base))
}

fn attempt_suffix(attempt: u32, node: u32) -> String {
    if attempt <= 1 {
        format!("-{node}")
    } else {
        format!("-{node}-a{attempt}")
    }
}

/// The name of node `node`'s pod: `<job>-<node>` for the first attempt, `<job>-<node>-a<attempt>`
/// after a requeue (old pods may still be terminating under the first name).
pub fn pod_name(job: &str, attempt: u32, node: u32) -> String {
    format!("{job}{}", attempt_suffix(attempt, node))
}

/// The headless Service of a job: its name when that is a DNS-1035 label (starts with a
/// letter, at most 63 characters, no dots), else a sanitized, hashed form.
pub fn service_name(job: &str) -> String {
    let ok = job.len() <= 63
        && job.starts_with(|c: char| c.is_ascii_lowercase())
        && job
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        return job.to_string();
    }
    let mut s = label_chars(job);
    if !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        s = format!("j{s}");
    }
    if s.len() <= 63 && s != job {
        // Sanitizing changed it: add the hash so that `a.b` and `a-b` stay distinct.
        return fit_label(&s, &format!("-{}", short_hash(job)));
    }
    fit_label(&s, "")
}

/// Node `node`'s host name (a DNS label, its name in `SLURM_JOB_NODELIST`): the pod's name,
/// shortened with a hash when too long.
pub fn hostname(job: &str, attempt: u32, node: u32) -> String {
    fit_label(job, &attempt_suffix(attempt, node))
}

/// `SLURM_TASKS_PER_NODE`: `2(x3),1` — task counts per node in node order, runs compressed.
pub fn tasks_per_node(counts: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let mut j = i;
        while j < counts.len() && counts[j] == counts[i] {
            j += 1;
        }
        if j - i > 1 {
            out.push(format!("{}(x{})", counts[i], j - i));
        } else {
            out.push(counts[i].to_string());
        }
        i = j;
    }
    out.join(",")
}

/// Node names in node-rank order (first occurrence of each node rank).
pub fn job_nodes(tasks: &[TaskAllocation]) -> Vec<String> {
    let mut by_rank: BTreeMap<u32, &str> = BTreeMap::new();
    for t in tasks {
        by_rank.entry(t.node_rank).or_insert(&t.node);
    }
    by_rank.into_values().map(str::to_string).collect()
}

/// The job's node indices (`node_rank`s), in order: one pod each.
pub fn node_ranks(tasks: &[TaskAllocation]) -> Vec<u32> {
    let mut v: Vec<u32> = tasks.iter().map(|t| t.node_rank).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The job's nodes as a Slurm hostlist (`gpu[001-004]`), in node-rank order.
pub fn node_list(tasks: &[TaskAllocation]) -> String {
    muster_crds::slurm::hostlist::compress(job_nodes(tasks))
}

/// The host names of the node pods, in node order (what `SLURM_JOB_NODELIST` lists).
pub fn node_hosts(job: &str, attempt: u32, tasks: &[TaskAllocation]) -> Vec<String> {
    node_ranks(tasks)
        .into_iter()
        .map(|n| hostname(job, attempt, n))
        .collect()
}

/// Node `node`'s share of the allocation, as its pod holds it: the node, the sum of its tasks'
/// CPUs and memory, their GPUs (each once, NVML index order, UUIDs alongside when every GPU
/// has one), `rank` the node's first task's, `local_rank` 0.
pub fn node_share(tasks: &[TaskAllocation], node: u32) -> Option<TaskAllocation> {
    let on: Vec<&TaskAllocation> = tasks.iter().filter(|t| t.node_rank == node).collect();
    share_of(node, &on)
}

/// The share of node `node` holding the tasks `on` (see [`node_share`]).
fn share_of(node: u32, on: &[&TaskAllocation]) -> Option<TaskAllocation> {
    let first = on.iter().min_by_key(|t| t.rank)?;
    let mut gpus: BTreeMap<u32, String> = BTreeMap::new();
    let mut all_uuids = true;
    for t in on {
        all_uuids &= t.gpu_uuids.len() == t.gpus.len();
        for (i, g) in t.gpus.iter().enumerate() {
            let u = t.gpu_uuids.get(i).cloned().unwrap_or_default();
            gpus.entry(*g).or_insert(u);
        }
    }
    Some(TaskAllocation {
        rank: first.rank,
        node: first.node.clone(),
        node_rank: node,
        local_rank: 0,
        cpu_millis: on.iter().map(|t| t.cpu_millis).sum(),
        memory_mib: on.iter().map(|t| t.memory_mib).sum(),
        gpus: gpus.keys().copied().collect(),
        gpu_uuids: if all_uuids {
            gpus.into_values().collect()
        } else {
            Vec::new()
        },
        pod: first.pod.clone(),
    })
}

/// What all node pods of one admission share, computed in one pass over its tasks: every pod
/// needs the whole job's node list, tasks and CPUs per node, and scanning the tasks for each
/// node of each pod made a 512-node gang's pods cost 512 x 512 x 4,096 steps.
#[derive(Clone, Debug)]
pub struct JobLayout {
    /// The node indices (`node_rank`s), in order: one pod each.
    ranks: Vec<u32>,
    /// Each node's share ([`node_share`]), in `ranks` order.
    shares: Vec<TaskAllocation>,
    /// Tasks per node, in `ranks` order.
    counts: Vec<u32>,
    /// CPUs per node (`SLURM_CPUS_ON_NODE`), in `ranks` order.
    cpus: Vec<u32>,
    /// The pods' host names, in `ranks` order.
    hosts: Vec<String>,
    /// `hosts` as a Slurm hostlist (`SLURM_JOB_NODELIST`).
    hostlist: String,
}

impl JobLayout {
    /// The layout of `job`'s admission `attempt` with `tasks`.
    pub fn new(job: &BatchJob, attempt: u32, tasks: &[TaskAllocation]) -> JobLayout {
        let mut by_node: BTreeMap<u32, Vec<&TaskAllocation>> = BTreeMap::new();
        for t in tasks {
            by_node.entry(t.node_rank).or_default().push(t);
        }
        let cpt = job.spec.cpus_per_task.unwrap_or(1).max(1);
        let name = job.name_any();
        let n = by_node.len();
        let mut l = JobLayout {
            ranks: Vec::with_capacity(n),
            shares: Vec::with_capacity(n),
            counts: Vec::with_capacity(n),
            cpus: Vec::with_capacity(n),
            hosts: Vec::with_capacity(n),
            hostlist: String::new(),
        };
        for (node, on) in by_node {
            let count = on.len() as u32;
            let millis: u64 = on.iter().map(|t| t.cpu_millis).sum();
            l.ranks.push(node);
            l.counts.push(count);
            l.cpus.push(if millis == 0 {
                count * cpt
            } else {
                millis.div_ceil(1000).min(u64::from(u32::MAX)) as u32
            });
            l.hosts.push(hostname(&name, attempt, node));
            if let Some(s) = share_of(node, &on) {
                l.shares.push(s);
            }
        }
        l.hostlist = muster_crds::slurm::hostlist::compress(l.hosts.iter().cloned());
        l
    }

    /// The node indices, in order.
    pub fn ranks(&self) -> &[u32] {
        &self.ranks
    }

    /// Node `node`'s share ([`node_share`]).
    pub fn share(&self, node: u32) -> Option<&TaskAllocation> {
        self.position(node).map(|i| &self.shares[i])
    }

    /// Each node's share, in node order.
    pub fn shares(&self) -> &[TaskAllocation] {
        &self.shares
    }

    fn position(&self, node: u32) -> Option<usize> {
        self.ranks.binary_search(&node).ok()
    }
}

/// `MUSTER_NODE_GPUS` of a node's share without topology: indices and UUIDs.
pub fn plain_node_gpus(share: &TaskAllocation) -> String {
    let gpus: Vec<serde_json::Value> = share
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut v = serde_json::json!({ "index": g });
            if let Some(u) = share.gpu_uuids.get(i) {
                v["uuid"] = u.clone().into();
            }
            v
        })
        .collect();
    serde_json::json!({ "gpus": gpus }).to_string()
}

/// `MUSTER_NODE_GPUS` of a node's share with the topology the scheduler placed with: each
/// GPU's NUMA node and NVLink peers (the core's [`crate::core::node::Gpu`] fields).
pub fn node_gpus_json(share: &TaskAllocation, node: Option<&crate::core::Node>) -> String {
    let Some(node) = node else {
        return plain_node_gpus(share);
    };
    let gpus: Vec<serde_json::Value> = share
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let known = node.gpus.iter().find(|x| x.index == *g);
            let uuid = share
                .gpu_uuids
                .get(i)
                .cloned()
                .or_else(|| known.map(|k| k.uuid.clone()))
                .unwrap_or_default();
            let mut v = serde_json::json!({ "index": g, "uuid": uuid });
            if let Some(k) = known {
                if let Some(n) = k.numa {
                    v["numa"] = n.into();
                }
                if !k.nvlink_peers.is_empty() {
                    v["nvlinkPeers"] = k.nvlink_peers.clone().into();
                }
            }
            v
        })
        .collect();
    serde_json::json!({ "gpus": gpus }).to_string()
}

fn join<T: ToString>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The environment of node `node`'s pod (the batch step's on node 0), in the order it is set.
pub fn node_env(ctx: &JobContext<'_>, node: u32) -> Result<Vec<(String, String)>, BuildError> {
    node_env_in(ctx, &JobLayout::new(ctx.job, ctx.attempt, ctx.tasks), node)
}

/// [`node_env`] with the job's [`JobLayout`] computed already (once for all its pods).
pub fn node_env_in(
    ctx: &JobContext<'_>,
    layout: &JobLayout,
    node: u32,
) -> Result<Vec<(String, String)>, BuildError> {
    let here = layout.position(node).ok_or(BuildError::NoSuchNode(node))?;
    let share = &layout.shares[here];
    let job_name = ctx.job.job_name().to_string();
    let (ranks, counts, cpus, hosts) = (&layout.ranks, &layout.counts, &layout.cpus, &layout.hosts);
    let ntasks = ctx.tasks.len();
    let hl = layout.hostlist.clone();
    // The batch script starts in the container's working directory, which is what
    // SLURM_SUBMIT_DIR names in Slurm (the directory the script started in); pyxis's
    // --container-workdir sets it.
    let main = ctx
        .job
        .spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.containers.first());
    let submit_dir = ctx
        .job
        .spec
        .container_workdir
        .clone()
        .or_else(|| main.and_then(|c| c.working_dir.clone()))
        .unwrap_or_else(|| "/".into());
    let mut env: Vec<(String, String)> = vec![
        ("SLURM_JOB_ID".into(), ctx.job_id.to_string()),
        ("SLURM_JOBID".into(), ctx.job_id.to_string()),
        ("SLURM_JOB_NAME".into(), job_name),
        ("SLURM_JOB_NODELIST".into(), hl.clone()),
        ("SLURM_NODELIST".into(), hl),
        ("SLURM_JOB_NUM_NODES".into(), ranks.len().to_string()),
        ("SLURM_NNODES".into(), ranks.len().to_string()),
        ("SLURM_NTASKS".into(), ntasks.to_string()),
        ("SLURM_NPROCS".into(), ntasks.to_string()),
        ("SLURM_TASKS_PER_NODE".into(), tasks_per_node(counts)),
        ("SLURM_JOB_CPUS_PER_NODE".into(), tasks_per_node(cpus)),
        ("SLURM_NODEID".into(), here.to_string()),
        ("SLURM_PROCID".into(), "0".into()),
        ("SLURM_LOCALID".into(), "0".into()),
        ("SLURMD_NODENAME".into(), hosts[here].clone()),
        ("SLURM_CPUS_ON_NODE".into(), cpus[here].to_string()),
        ("SLURM_JOB_PARTITION".into(), ctx.partition_name.to_string()),
        ("SLURM_SUBMIT_DIR".into(), submit_dir),
        (
            "SLURM_JOB_ACCOUNT".into(),
            ctx.job
                .spec
                .account
                .clone()
                .or_else(|| ctx.job.namespace())
                .unwrap_or_default(),
        ),
    ];
    if let Some(c) = ctx.job.spec.cpus_per_task {
        env.push(("SLURM_CPUS_PER_TASK".into(), c.to_string()));
    }
    if let Some(n) = ctx.job.spec.ntasks_per_node {
        env.push(("SLURM_NTASKS_PER_NODE".into(), n.to_string()));
    }
    if let Some(b) = ctx.job.spec.gpu_bind.as_deref().filter(|b| !b.is_empty()) {
        env.push(("SLURM_GPU_BIND".into(), b.to_string()));
    }
    if let Some((a, i)) = ctx.array {
        env.push(("SLURM_ARRAY_JOB_ID".into(), a.to_string()));
        env.push(("SLURM_ARRAY_TASK_ID".into(), i.to_string()));
    }
    if let Some(g) = ctx.gpus_per_node {
        env.push(("SLURM_GPUS_PER_NODE".into(), g.to_string()));
    }
    if let Some(g) = ctx.gpus_per_task {
        env.push(("SLURM_GPUS_PER_TASK".into(), g.to_string()));
    }
    if !share.gpus.is_empty() {
        env.push(("SLURM_GPUS_ON_NODE".into(), share.gpus.len().to_string()));
        env.push(("SLURM_JOB_GPUS".into(), join(&share.gpus)));
        let gj = ctx
            .node_gpus
            .get(node as usize)
            .filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| plain_node_gpus(share));
        env.push((step::ENV_NODE_GPUS.into(), gj));
    }
    env.push((step::ENV_PORT.into(), step::DEFAULT_PORT.to_string()));
    env.push((step::ENV_KEY_FILE.into(), step::KEY_FILE.into()));
    if step::key_in_pod(ranks.len()) {
        env.push((step::ENV_LOCAL_KEY.into(), "1".into()));
    }
    if let Some(g) = ctx.partition.and_then(|p| p.spec.grace_time_seconds) {
        // The daemon's SIGKILL comes before the kubelet's, so steps end as it reports.
        env.push((
            step::ENV_KILL_WAIT.into(),
            g.saturating_sub(KILL_MARGIN_SECS).max(1).to_string(),
        ));
    }
    env.extend(stdio_env(ctx, here == 0));
    env.extend([
        ("MASTER_ADDR".into(), hosts[0].clone()),
        ("WORLD_SIZE".into(), ntasks.to_string()),
        ("NODE_RANK".into(), here.to_string()),
        ("LOCAL_WORLD_SIZE".into(), counts[here].to_string()),
    ]);
    if share.gpus.is_empty() {
        env.push(("NVIDIA_VISIBLE_DEVICES".into(), "void".into()));
        env.push(("CUDA_VISIBLE_DEVICES".into(), String::new()));
    } else {
        // Under DRA the kubelet gives the container its claim's devices (the NVIDIA driver's
        // CDI spec sets the variable itself): nothing is set by hand.
        if ctx.gpu_binding == GpuBinding::Env {
            let uuids = if share.gpu_uuids.len() == share.gpus.len() {
                share.gpu_uuids.join(",")
            } else {
                // No UUIDs known (no GpuNode inventory): fall back to NVML indices.
                join(&share.gpus)
            };
            env.push(("NVIDIA_VISIBLE_DEVICES".into(), uuids));
        }
        let cuda: Vec<usize> = (0..share.gpus.len()).collect();
        env.push(("CUDA_VISIBLE_DEVICES".into(), join(&cuda)));
    }
    Ok(env)
}

fn set_env(c: &mut Container, ours: &[(String, String)], master_port: Option<&str>) {
    let mut env: Vec<EnvVar> = c
        .env
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !BINDING_VARS.contains(&e.name.as_str()))
        .collect();
    let has_port = env.iter().any(|e| e.name == "MASTER_PORT");
    env.extend(ours.iter().map(|(k, v)| EnvVar {
        name: k.clone(),
        value: Some(v.clone()),
        value_from: None,
    }));
    env.push(EnvVar {
        name: step::ENV_POD_IP.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: "status.podIP".into(),
            }),
            ..Default::default()
        }),
    });
    if let Some(p) = master_port
        && !has_port
    {
        env.push(EnvVar {
            name: "MASTER_PORT".into(),
            value: Some(p.to_string()),
            value_from: None,
        });
    }
    c.env = Some(env);
}

fn strip_device_resources(r: &mut Option<ResourceRequirements>) {
    if let Some(r) = r {
        for m in [&mut r.requests, &mut r.limits].into_iter().flatten() {
            m.retain(|k, _| !k.starts_with("nvidia.com/"));
        }
    }
}

/// The owner reference every object of the job carries.
pub fn owner_ref(job: &BatchJob) -> OwnerReference {
    job.controller_owner_ref(&())
        .unwrap_or_else(|| OwnerReference {
            api_version: BatchJob::api_version(&()).to_string(),
            kind: BatchJob::kind(&()).to_string(),
            name: job.name_any(),
            uid: job.uid().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        })
}

/// The labels every pod of the job carries.
pub fn pod_labels(ctx: &JobContext<'_>, node: u32) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(labels::BATCHJOB.to_string(), ctx.job.name_any());
    l.insert(labels::JOB_ID.to_string(), ctx.job_id.to_string());
    l.insert(labels::NODE_RANK.to_string(), node.to_string());
    l.insert(labels::ATTEMPT.to_string(), ctx.attempt.to_string());
    if let Some((_, i)) = ctx.array {
        if let Some(p) = ctx.job.labels().get(labels::ARRAY_PARENT) {
            l.insert(labels::ARRAY_PARENT.to_string(), p.clone());
        }
        l.insert(labels::ARRAY_TASK_ID.to_string(), i.to_string());
    }
    l
}

/// Checks that the job's name can label its pods.
pub fn check_name(job: &BatchJob) -> Result<(), BuildError> {
    let name = job.name_any();
    if name.len() > 63 {
        return Err(BuildError::NameTooLong {
            name,
            key: labels::BATCHJOB,
        });
    }
    Ok(())
}

/// Whether pods can be built for the job in this partition at all (name, something to run,
/// images), without building them: checked before a job is offered to the scheduler, so an
/// allocation is never made for a job whose pods cannot exist.
pub fn check_buildable(
    job: &BatchJob,
    partition: Option<&Partition>,
    partition_name: &str,
) -> Result<(), BuildError> {
    check_name(job)?;
    let has_default = partition.is_some_and(|p| p.spec.default_image.is_some());
    let task = task_template(job)?;
    let spec = task.spec.as_ref();
    let script = job
        .spec
        .script
        .as_deref()
        .is_some_and(|s| !s.trim().is_empty());
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);
    if containers.is_empty() && !script {
        return Err(BuildError::NothingToRun);
    }
    if !script
        && let Some(c) = containers.first()
        && c.command.as_ref().is_none_or(|v| v.is_empty())
    {
        return Err(BuildError::NoCommand {
            container: c.name.clone(),
        });
    }
    if !has_default && let Some(c) = container_without_image(job) {
        return Err(BuildError::NoImage {
            container: format!("container {c:?}"),
            partition: partition_name.to_string(),
        });
    }
    if let Some(p) = partition {
        // The template as a pod: what conflicts with the partition's environment here
        // conflicts in every pod built from it.
        let pod = Pod {
            metadata: task.metadata.unwrap_or_default(),
            spec: task.spec,
            status: None,
        };
        super::jobenv::apply(&p.spec, &container_mounts(job), pod).map_err(|source| {
            BuildError::JobEnv {
                partition: partition_name.to_string(),
                source,
            }
        })?;
    }
    Ok(())
}

/// The first task container (or init container) that gives no image, which then needs the
/// partition's `defaultImage` ([`TASK_CONTAINER`] when the template has no containers).
pub fn container_without_image(job: &BatchJob) -> Option<String> {
    let task = task_template(job).ok();
    let task = task.as_ref().or(job.spec.template.as_deref());
    let spec = task.and_then(|t| t.spec.as_ref());
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or(&[]);
    if containers.is_empty() {
        return Some(TASK_CONTAINER.to_string());
    }
    containers
        .iter()
        .chain(
            spec.and_then(|s| s.init_containers.as_ref())
                .into_iter()
                .flatten(),
        )
        .find(|c| c.image.as_deref().is_none_or(str::is_empty))
        .map(|c| c.name.clone())
}

/// Kubernetes expands `$(VAR)` and turns `$$` into `$` in `command` and `args`: a script must
/// reach bash as written, so every `$` is escaped.
fn escape_dollars(s: &str) -> String {
    s.replace('$', "$$")
}

/// The main container's command: the node daemon, running the batch step on node 0.
fn daemon_command(
    first: bool,
    script: Option<&str>,
    user: Option<Vec<String>>,
) -> Result<Vec<String>, BuildError> {
    let mut cmd = vec![step::POD_BINARY.to_string(), "node".to_string()];
    if !first {
        return Ok(cmd);
    }
    cmd.extend(["--batch".to_string(), "--".to_string()]);
    match script {
        Some(s) => cmd.extend([
            "/bin/bash".into(),
            "-c".into(),
            escape_dollars(s),
            "bash".into(),
        ]),
        None => {
            // A job without a script: its command is one step over every task.
            let user = user
                .filter(|u| !u.is_empty())
                .ok_or(BuildError::NoCommand {
                    container: TASK_CONTAINER.into(),
                })?;
            cmd.push(step::POD_SRUN.into());
            cmd.extend(user);
        }
    }
    Ok(cmd)
}

/// The pod of node `node` (its index in the job, `node_rank`).
pub fn build_pod(ctx: &JobContext<'_>, node: u32) -> Result<Pod, BuildError> {
    build_pod_in(ctx, &JobLayout::new(ctx.job, ctx.attempt, ctx.tasks), node)
}

/// [`build_pod`] with the job's [`JobLayout`] computed already (once for all its pods).
pub fn build_pod_in(
    ctx: &JobContext<'_>,
    layout: &JobLayout,
    node: u32,
) -> Result<Pod, BuildError> {
    check_name(ctx.job)?;
    let share = layout.share(node).ok_or(BuildError::NoSuchNode(node))?;
    let first = layout.ranks.first() == Some(&node);
    let name = ctx.job.name_any();
    let template = task_template(ctx.job)?;
    let mut meta = template.metadata.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    let part_name = ctx.partition_name.to_string();
    let default_image = ctx.partition.and_then(|p| p.spec.default_image.clone());
    let script = ctx.job.spec.script.clone().filter(|s| !s.trim().is_empty());

    if spec.containers.is_empty() {
        if script.is_none() {
            return Err(BuildError::NothingToRun);
        }
        spec.containers.push(Container {
            name: TASK_CONTAINER.into(),
            ..Default::default()
        });
    }
    {
        let c = &mut spec.containers[0];
        if script.is_none() && c.command.as_ref().is_none_or(|v| v.is_empty()) {
            return Err(BuildError::NoCommand {
                container: c.name.clone(),
            });
        }
        let user = c.command.take();
        c.command = Some(daemon_command(first, script.as_deref(), user)?);
        if !first {
            // The daemon takes no arguments; the batch step's are node 0's ($1, $2, ...).
            c.args = None;
        }
    }
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        if c.image.as_deref().is_none_or(str::is_empty) {
            c.image = Some(default_image.clone().ok_or_else(|| BuildError::NoImage {
                container: format!("container {:?}", c.name),
                partition: part_name.clone(),
            })?);
        }
        strip_device_resources(&mut c.resources);
    }

    // Requests of the node's share from the allocation; memory limited to what was
    // allocated (Slurm's ConstrainRAMSpace) unless the template sets a limit itself.
    {
        let c = &mut spec.containers[0];
        let r = c.resources.get_or_insert_with(Default::default);
        let req = r.requests.get_or_insert_with(Default::default);
        if share.cpu_millis > 0 {
            req.insert("cpu".into(), quantity::cpu_quantity(share.cpu_millis));
        }
        if share.memory_mib > 0 {
            req.insert("memory".into(), quantity::memory_quantity(share.memory_mib));
            let lim = r.limits.get_or_insert_with(Default::default);
            lim.entry("memory".into())
                .or_insert_with(|| quantity::memory_quantity(share.memory_mib));
        }
    }

    let env = node_env_in(ctx, layout, node)?;
    // MASTER_PORT: the task container's template value, else the annotation, else 29500;
    // every container gets the same unless it sets its own.
    let port = spec.containers[0]
        .env
        .as_ref()
        .and_then(|e| e.iter().find(|v| v.name == "MASTER_PORT"))
        .and_then(|v| v.value.clone())
        .or_else(|| ctx.job.annotations().get(MASTER_PORT_ANNOTATION).cloned())
        .unwrap_or_else(|| DEFAULT_MASTER_PORT.to_string());
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        set_env(c, &env, Some(&port));
    }

    // The step runtime: the binary from the operator image, the job's credential.
    let bin_mount = VolumeMount {
        name: step::BIN_VOLUME.into(),
        mount_path: step::BIN_DIR.into(),
        ..Default::default()
    };
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    volumes.retain(|v| v.name != step::BIN_VOLUME && v.name != step::KEY_VOLUME);
    volumes.push(Volume {
        name: step::BIN_VOLUME.into(),
        empty_dir: Some(Default::default()),
        ..Default::default()
    });
    let local_key = step::key_in_pod(layout.ranks.len());
    volumes.push(if local_key {
        // One node: the daemon writes its own key here (memory-backed, this pod's only).
        Volume {
            name: step::KEY_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(Quantity("1Mi".into())),
            }),
            ..Default::default()
        }
    } else {
        Volume {
            name: step::KEY_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(step::secret_name(&name)),
                default_mode: Some(0o400),
                items: Some(vec![KeyToPath {
                    key: step::SECRET_KEY.into(),
                    path: step::SECRET_KEY.into(),
                    mode: None,
                }]),
                optional: None,
            }),
            ..Default::default()
        }
    });
    {
        let c = &mut spec.containers[0];
        let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
        mounts.retain(|m| m.mount_path != step::BIN_DIR && m.mount_path != step::KEY_DIR);
        mounts.push(bin_mount.clone());
        mounts.push(VolumeMount {
            name: step::KEY_VOLUME.into(),
            mount_path: step::KEY_DIR.into(),
            read_only: Some(!local_key),
            ..Default::default()
        });
    }
    spec.init_containers.get_or_insert_with(Vec::new).insert(
        0,
        Container {
            name: step::INSTALL_CONTAINER.into(),
            image: Some(ctx.step.image.clone()),
            command: Some(vec![
                step::IMAGE_BINARY.into(),
                "install".into(),
                step::BIN_DIR.into(),
            ]),
            volume_mounts: Some(vec![bin_mount]),
            ..Default::default()
        },
    );

    // Placement: required affinity to the node, ANDed into every term the template gives.
    let req = NodeSelectorRequirement {
        key: labels::HOSTNAME.into(),
        operator: "In".into(),
        values: Some(vec![share.node.clone()]),
    };
    let aff = spec.affinity.get_or_insert_with(Affinity::default);
    let na = aff.node_affinity.get_or_insert_with(NodeAffinity::default);
    let sel = na
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(|| NodeSelector {
            node_selector_terms: Vec::new(),
        });
    if sel.node_selector_terms.is_empty() {
        sel.node_selector_terms.push(NodeSelectorTerm::default());
    }
    for t in &mut sel.node_selector_terms {
        t.match_expressions
            .get_or_insert_with(Vec::new)
            .push(req.clone());
    }
    spec.node_name = None;

    if let Some(p) = ctx.partition {
        if !p.spec.tolerations.is_empty() {
            spec.tolerations
                .get_or_insert_with(Vec::new)
                .extend(p.spec.tolerations.iter().cloned());
        }
        if let Some(rc) = &p.spec.runtime_class_name {
            spec.runtime_class_name = Some(rc.clone());
        }
        if let Some(g) = p.spec.grace_time_seconds {
            spec.termination_grace_period_seconds = Some(i64::from(g));
        }
    }
    spec.restart_policy = Some("Never".into());
    spec.hostname = Some(hostname(&name, ctx.attempt, node));
    if layout.ranks.len() > 1 {
        let svc = service_name(&name);
        let ns = ctx.job.namespace().unwrap_or_else(|| "default".into());
        let search = format!("{svc}.{ns}.svc.{}", ctx.step.cluster_domain);
        let dns = spec.dns_config.get_or_insert_with(PodDNSConfig::default);
        let searches = dns.searches.get_or_insert_with(Vec::new);
        if !searches.contains(&search) {
            searches.insert(0, search);
        }
        spec.subdomain = Some(svc);
    } else {
        spec.subdomain = None;
    }
    if spec.enable_service_links.is_none() {
        // Service links put one variable per Service of the namespace into every pod: noise
        // for batch jobs, and slow with thousands of job Services.
        spec.enable_service_links = Some(false);
    }

    let pod_name = pod_name(&name, ctx.attempt, node);
    let mut lbl = meta.labels.take().unwrap_or_default();
    lbl.extend(pod_labels(ctx, node));
    let mut ann = meta.annotations.take().unwrap_or_default();
    let mut record = share.clone();
    record.pod = None;
    ann.insert(
        TASK_ANNOTATION.into(),
        serde_json::to_string(&record).unwrap_or_default(),
    );
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(pod_name.clone()),
            namespace: ctx.job.namespace(),
            labels: Some(lbl),
            annotations: Some(ann),
            owner_references: Some(vec![owner_ref(ctx.job)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    if let Some(p) = ctx.partition {
        pod = super::jobenv::apply(&p.spec, &container_mounts(ctx.job), pod).map_err(|source| {
            BuildError::JobEnv {
                partition: part_name.clone(),
                source,
            }
        })?;
    }
    if ctx.gpu_binding == GpuBinding::Dra && !share.gpus.is_empty() {
        dra::attach_claim(&mut pod, &dra::claim_name(&pod_name));
    }
    Ok(pod)
}

/// The headless Service giving every node pod a stable DNS name (`<job>-<node>.<service>`, and
/// the short name through the pods' search path), for jobs on more than one node. Not-ready
/// pods are published so that nodes resolve each other while they start.
pub fn build_service(job: &BatchJob) -> Service {
    let name = job.name_any();
    Service {
        metadata: ObjectMeta {
            name: Some(service_name(&name)),
            namespace: job.namespace(),
            labels: Some([(labels::BATCHJOB.to_string(), name.clone())].into()),
            owner_references: Some(vec![owner_ref(job)]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some([(labels::BATCHJOB.to_string(), name)].into()),
            publish_not_ready_addresses: Some(true),
            ..Default::default()
        }),
        status: None,
    }
}

/// The job's step credential Secret ([`step::secret_name`]), owned by the BatchJob, without
/// its key: the writer adds fresh random bytes ([`with_key`]) when it creates it, so the plan
/// stays pure. Only the job's node pods mount it.
pub fn build_secret(job: &BatchJob) -> Secret {
    let name = job.name_any();
    Secret {
        metadata: ObjectMeta {
            name: Some(step::secret_name(&name)),
            namespace: job.namespace(),
            labels: Some([(labels::BATCHJOB.to_string(), name)].into()),
            owner_references: Some(vec![owner_ref(job)]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        immutable: Some(true),
        ..Default::default()
    }
}

/// `secret` with `key` (hex) as its credential.
pub fn with_key(mut secret: Secret, key: &str) -> Secret {
    secret.string_data = Some([(step::SECRET_KEY.to_string(), key.to_string())].into());
    secret
}

/// The allocation a pod records in its [`TASK_ANNOTATION`].
pub fn pod_allocation(pod: &Pod) -> Option<TaskAllocation> {
    serde_json::from_str(pod.annotations().get(TASK_ANNOTATION)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
    use muster_crds::v1alpha1::{BatchJobSpec, PartitionSpec};

    fn spec_of(p: &Pod) -> &PodSpec {
        p.spec.as_ref().unwrap()
    }

    fn env_of(c: &Container) -> BTreeMap<String, String> {
        c.env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    }

    fn job(name: &str, spec: BatchJobSpec) -> BatchJob {
        let mut j = BatchJob::new(name, spec);
        j.metadata.namespace = Some("ml".into());
        j.metadata.uid = Some("uid-1".into());
        j
    }

    /// 2 nodes x 2 tasks x 1 GPU.
    fn gang() -> Vec<TaskAllocation> {
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

    fn partition() -> Partition {
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

    fn ctx<'a>(
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

    /// The batch host gets the expanded output files, the open mode and the partition's
    /// writable shared directories; every node gets the warning signal and the limit's end;
    /// the account is `--account`, else the namespace.
    #[test]
    fn output_files_signal_and_account_reach_the_step_runtime() {
        let mut j = job(
            "train",
            BatchJobSpec {
                job_name: Some("tr".into()),
                output: Some("/scratch/%x-%j-%N-%u.out".into()),
                error: Some("e-%j.err".into()),
                open_mode: Some(muster_crds::v1alpha1::OpenMode::Append),
                signal: Some("B:USR1@90".into()),
                account: Some("physics".into()),
                ..Default::default()
            },
        );
        j.annotations_mut()
            .insert(labels::USER.into(), "alice".into());
        let tasks = gang();
        let mut p = partition();
        p.spec.job_environment = Some(
            serde_json::from_value(serde_json::json!({"volumes": [
                {"name": "scratch", "mountPath": "/scratch", "claimName": "s"},
                {"name": "data", "mountPath": "/data", "claimName": "d", "readOnly": true},
                {"name": "home", "mountPath": "/home", "hostPath": "/home"}]}))
            .unwrap(),
        );
        let mut c = ctx(&j, &tasks, Some(&p));
        c.limit_end = Some(5000);
        let env0: BTreeMap<String, String> = node_env(&c, 0).unwrap().into_iter().collect();
        assert_eq!(env0[step::ENV_STDOUT], "/scratch/tr-1234-gpu001-alice.out");
        assert_eq!(env0[step::ENV_STDERR], "e-1234.err");
        assert_eq!(env0[step::ENV_OPEN_MODE], "append");
        assert_eq!(env0[step::ENV_SHARED_DIRS], "/scratch:/home");
        assert_eq!(env0[step::ENV_SIGNAL], "B:USR1@90");
        assert_eq!(env0[step::ENV_END_TIME], "5000");
        assert_eq!(env0["SLURM_JOB_ACCOUNT"], "physics");
        assert!(!env0.contains_key(step::ENV_STDOUT_DEFAULT));
        let env1: BTreeMap<String, String> = node_env(&c, 1).unwrap().into_iter().collect();
        assert!(
            !env1.contains_key(step::ENV_STDOUT),
            "only the batch host writes files"
        );
        assert_eq!(env1[step::ENV_SIGNAL], "B:USR1@90");

        // Defaults: slurm-%j.out, truncate, no signal without one; the namespace as account.
        let j = job("plain", BatchJobSpec::default());
        let env: BTreeMap<String, String> = node_env(&ctx(&j, &tasks, None), 0)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(env[step::ENV_STDOUT], "slurm-1234.out");
        assert_eq!(env[step::ENV_STDOUT_DEFAULT], "1");
        assert_eq!(env[step::ENV_OPEN_MODE], "truncate");
        assert!(!env.contains_key(step::ENV_SIGNAL));
        assert!(!env.contains_key(step::ENV_SHARED_DIRS));
        assert_eq!(env["SLURM_JOB_ACCOUNT"], "ml");
    }

    #[test]
    fn the_limit_ends_at_start_plus_limit() {
        let st = muster_crds::v1alpha1::BatchJobStatus {
            start_time: Some(crate::controller::translate::time(1000)),
            time_limit: Some("1:00:00".into()),
            ..Default::default()
        };
        assert_eq!(limit_end(&st), Some(4600));
        let unlimited = muster_crds::v1alpha1::BatchJobStatus {
            time_limit: Some("UNLIMITED".into()),
            ..st
        };
        assert_eq!(limit_end(&unlimited), None);
    }

    #[test]
    fn one_pod_per_node_holds_the_nodes_share_and_the_batch_environment() {
        let j = job(
            "train",
            BatchJobSpec {
                script: Some("srun python train.py $1".into()),
                cpus_per_task: Some(4),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p = partition();
        let c = ctx(&j, &tasks, Some(&p));
        assert_eq!(node_ranks(&tasks), [0, 1]);
        let pod = build_pod(&c, 1).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("train-1"));
        let s = spec_of(&pod);
        let e = env_of(&s.containers[0]);
        assert_eq!(e["SLURM_JOB_ID"], "1234");
        assert_eq!(e["SLURM_JOB_NAME"], "train");
        // Host names of the node pods, as Slurm lists nodes.
        assert_eq!(e["SLURM_JOB_NODELIST"], "train-[0-1]");
        assert_eq!(e["SLURM_NNODES"], "2");
        assert_eq!(e["SLURM_NTASKS"], "4");
        assert_eq!(e["SLURM_TASKS_PER_NODE"], "2(x2)");
        assert_eq!(e["SLURM_JOB_CPUS_PER_NODE"], "8(x2)");
        assert_eq!(e["SLURM_CPUS_ON_NODE"], "8");
        assert_eq!(e["SLURM_NODEID"], "1");
        assert_eq!(e["SLURMD_NODENAME"], "train-1");
        assert_eq!(e["SLURM_CPUS_PER_TASK"], "4");
        assert_eq!(e["SLURM_GPUS_PER_TASK"], "1");
        assert_eq!(e["SLURM_GPUS_ON_NODE"], "2");
        assert_eq!(e["SLURM_JOB_GPUS"], "2,3");
        assert_eq!(e["SLURM_JOB_PARTITION"], "gpu");
        assert_eq!(e["MASTER_ADDR"], "train-0");
        assert_eq!(e["MASTER_PORT"], "29500");
        assert_eq!(e["WORLD_SIZE"], "4");
        assert_eq!(e["NODE_RANK"], "1");
        assert_eq!(e["LOCAL_WORLD_SIZE"], "2");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "GPU-2,GPU-3");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0,1");
        assert_eq!(e[step::ENV_PORT], step::DEFAULT_PORT.to_string());
        assert_eq!(e[step::ENV_KEY_FILE], step::KEY_FILE);
        assert_eq!(e[step::ENV_KILL_WAIT], "40");
        let gpus: serde_json::Value = serde_json::from_str(&e[step::ENV_NODE_GPUS]).unwrap();
        assert_eq!(
            gpus,
            serde_json::json!({"gpus": [{"index": 2, "uuid": "GPU-2"}, {"index": 3, "uuid": "GPU-3"}]})
        );
        let ip = s.containers[0]
            .env
            .iter()
            .flatten()
            .find(|v| v.name == step::ENV_POD_IP)
            .unwrap();
        assert_eq!(
            ip.value_from
                .as_ref()
                .unwrap()
                .field_ref
                .as_ref()
                .unwrap()
                .field_path,
            "status.podIP"
        );
        // Names resolve under the Service.
        assert_eq!(s.hostname.as_deref(), Some("train-1"));
        assert_eq!(s.subdomain.as_deref(), Some("train"));
        assert_eq!(
            s.dns_config.as_ref().unwrap().searches.as_deref(),
            Some(&["train.ml.svc.cluster.local".to_string()][..])
        );
        // The node's share: both tasks' CPUs, memory and GPUs.
        let r = s.containers[0].resources.as_ref().unwrap();
        assert_eq!(r.requests.as_ref().unwrap()["cpu"].0, "8");
        assert_eq!(r.requests.as_ref().unwrap()["memory"].0, "16384Mi");
        let rec = pod_allocation(&pod).unwrap();
        assert_eq!((rec.node.as_str(), rec.node_rank), ("gpu002", 1));
        assert_eq!(rec.gpus, vec![2, 3]);
        assert_eq!(rec.gpu_uuids, vec!["GPU-2", "GPU-3"]);
        // Not the batch host: the daemon only, waiting for steps.
        assert_eq!(
            s.containers[0].command.as_deref().unwrap(),
            [step::POD_BINARY, "node"]
        );
        // The step binary from the operator image; the credential mounted read-only.
        let init = &s.init_containers.as_ref().unwrap()[0];
        assert_eq!(init.name, step::INSTALL_CONTAINER);
        assert_eq!(init.image.as_deref(), Some("muster/operator:test"));
        assert_eq!(
            init.command.as_deref().unwrap(),
            [step::IMAGE_BINARY, "install", step::BIN_DIR]
        );
        let mounts = s.containers[0].volume_mounts.as_ref().unwrap();
        assert!(mounts.iter().any(|m| m.mount_path == step::BIN_DIR));
        let key = mounts
            .iter()
            .find(|m| m.mount_path == step::KEY_DIR)
            .unwrap();
        assert_eq!(key.read_only, Some(true));
        let vol = s
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == key.name)
            .unwrap();
        let sv = vol.secret.as_ref().unwrap();
        assert_eq!(sv.secret_name.as_deref(), Some("train-step"));
        assert_eq!(sv.default_mode, Some(0o400));
        assert!(!env_of(&s.containers[0]).contains_key(step::ENV_LOCAL_KEY));
    }

    #[test]
    fn the_first_node_runs_the_script_once_through_the_daemon() {
        let j = job(
            "train",
            BatchJobSpec {
                script: Some("echo $HOSTNAME $$".into()),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p = partition();
        let pod = build_pod(&ctx(&j, &tasks, Some(&p)), 0).unwrap();
        let s = spec_of(&pod);
        assert_eq!(s.containers[0].name, TASK_CONTAINER);
        assert_eq!(
            s.containers[0].image.as_deref(),
            Some("nvcr.io/nvidia/pytorch:24.01-py3")
        );
        assert_eq!(
            s.containers[0].command.as_deref().unwrap(),
            [
                step::POD_BINARY,
                "node",
                "--batch",
                "--",
                "/bin/bash",
                "-c",
                "echo $$HOSTNAME $$$$",
                "bash"
            ]
        );
        let e = env_of(&s.containers[0]);
        assert_eq!(e["SLURM_NODEID"], "0");
        assert_eq!(e["SLURM_PROCID"], "0");
        assert_eq!(e["SLURMD_NODENAME"], "train-0");
    }

    #[test]
    fn a_job_without_a_script_runs_its_command_as_one_step() {
        let tmpl = PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("img".into()),
                    command: Some(vec!["python".into(), "-m".into(), "train".into()]),
                    args: Some(vec!["--lr=1".into()]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let j = job(
            "torch",
            BatchJobSpec {
                template: Some(Box::new(tmpl)),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p0 = build_pod(&ctx(&j, &tasks, None), 0).unwrap();
        let c0 = &spec_of(&p0).containers[0];
        assert_eq!(
            c0.command.as_deref().unwrap(),
            [
                step::POD_BINARY,
                "node",
                "--batch",
                "--",
                step::POD_SRUN,
                "python",
                "-m",
                "train"
            ]
        );
        assert_eq!(c0.args.as_deref(), Some(&["--lr=1".to_string()][..]));
        let p1 = build_pod(&ctx(&j, &tasks, None), 1).unwrap();
        let c1 = &spec_of(&p1).containers[0];
        assert_eq!(c1.command.as_deref().unwrap(), [step::POD_BINARY, "node"]);
        assert_eq!(c1.args, None);
        // An image's entrypoint cannot become a step: refused before any allocation.
        let mut no_cmd = j.clone();
        no_cmd
            .spec
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .command = None;
        let e = check_buildable(&no_cmd, None, "gpu").unwrap_err();
        assert!(matches!(e, BuildError::NoCommand { .. }), "{e}");
        assert!(e.to_string().contains("containers[0]"), "{e}");
    }

    #[test]
    fn placement_is_required_affinity_never_node_name() {
        let tmpl = PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                node_name: Some("elsewhere".into()),
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("busybox".into()),
                    command: Some(vec!["sleep".into(), "1".into()]),
                    resources: Some(ResourceRequirements {
                        limits: Some([("nvidia.com/gpu".to_string(), Quantity("8".into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let j = job(
            "train",
            BatchJobSpec {
                template: Some(Box::new(tmpl)),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p = partition();
        let pod = build_pod(&ctx(&j, &tasks, Some(&p)), 1).unwrap();
        let s = spec_of(&pod);
        assert_eq!(s.node_name, None);
        let terms = &s
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms;
        assert_eq!(terms.len(), 1);
        let m = &terms[0].match_expressions.as_ref().unwrap()[0];
        assert_eq!(m.key, "kubernetes.io/hostname");
        assert_eq!(m.values.as_deref(), Some(&["gpu002".to_string()][..]));
        let r = s.containers[0].resources.as_ref().unwrap();
        assert!(
            r.limits
                .as_ref()
                .unwrap()
                .keys()
                .all(|k| !k.starts_with("nvidia.com/"))
        );
        assert_eq!(r.limits.as_ref().unwrap()["memory"].0, "16384Mi");
        assert_eq!(s.runtime_class_name.as_deref(), Some("nvidia"));
        assert_eq!(s.termination_grace_period_seconds, Some(45));
        assert_eq!(s.restart_policy.as_deref(), Some("Never"));
        assert_eq!(s.tolerations.as_ref().unwrap().len(), 1);
        // Ownership and labels.
        let o = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(o.kind, "BatchJob");
        assert_eq!(o.uid, "uid-1");
        assert_eq!(o.controller, Some(true));
        let l = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(l[labels::BATCHJOB], "train");
        assert_eq!(l[labels::JOB_ID], "1234");
        assert_eq!(l[labels::NODE_RANK], "1");
        assert_eq!(l[labels::ATTEMPT], "1");
    }

    #[test]
    fn template_cannot_override_binding_vars_but_may_set_master_port() {
        let mut tmpl = PodTemplateSpec::default();
        let env = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| EnvVar {
                        name: k.to_string(),
                        value: Some(v.to_string()),
                        value_from: None,
                    })
                    .collect::<Vec<_>>(),
            )
        };
        tmpl.spec = Some(PodSpec {
            containers: vec![
                Container {
                    name: "main".into(),
                    image: Some("img".into()),
                    env: env(&[
                        ("NVIDIA_VISIBLE_DEVICES", "all"),
                        ("WORLD_SIZE", "99"),
                        ("MUSTER_STEP_PORT", "1"),
                        ("MASTER_PORT", "1234"),
                        ("MY_VAR", "x"),
                    ]),
                    ..Default::default()
                },
                Container {
                    name: "sidecar".into(),
                    image: Some("side".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let mut j = job(
            "train",
            BatchJobSpec {
                template: Some(Box::new(tmpl)),
                script: Some("echo hi".into()),
                ..Default::default()
            },
        );
        j.metadata.annotations = Some([(MASTER_PORT_ANNOTATION.to_string(), "5555".into())].into());
        let tasks = gang();
        let pod = build_pod(&ctx(&j, &tasks, None), 0).unwrap();
        let s = spec_of(&pod);
        let main = env_of(&s.containers[0]);
        assert_eq!(main["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-1");
        assert_eq!(main["WORLD_SIZE"], "4");
        assert_eq!(main["MUSTER_STEP_PORT"], step::DEFAULT_PORT.to_string());
        assert_eq!(
            main["MASTER_PORT"], "1234",
            "template env wins over the annotation"
        );
        assert_eq!(main["MY_VAR"], "x");
        let names: Vec<&str> = s.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(names.iter().filter(|n| **n == "WORLD_SIZE").count(), 1);
        // The sidecar sees the same GPU binding (a CUDA image would default to all).
        let side = env_of(&s.containers[1]);
        assert_eq!(side["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-1");
        assert_eq!(side["MASTER_PORT"], "1234");
        // The script runs in the first container through the daemon.
        assert_eq!(s.containers[0].command.as_ref().unwrap()[6], "echo hi");
        assert!(s.containers[1].command.is_none());
    }

    #[test]
    fn a_one_node_job_has_no_service_and_a_gpuless_pod_sees_no_gpu() {
        let mut j = job(
            "solo",
            BatchJobSpec {
                script: Some("true".into()),
                ..Default::default()
            },
        );
        j.metadata.annotations = Some([(MASTER_PORT_ANNOTATION.to_string(), "5555".into())].into());
        let tasks = vec![TaskAllocation {
            node: "n1".into(),
            ..Default::default()
        }];
        let p = partition();
        let pod = build_pod(&ctx(&j, &tasks, Some(&p)), 0).unwrap();
        let s = spec_of(&pod);
        let e = env_of(&s.containers[0]);
        assert_eq!(e["MASTER_PORT"], "5555");
        assert_eq!(e["MASTER_ADDR"], "solo-0");
        assert_eq!(e["SLURM_JOB_NODELIST"], "solo-0");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "void");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "");
        assert_eq!(e["SLURM_CPUS_ON_NODE"], "1");
        assert!(!e.contains_key("SLURM_GPUS_ON_NODE"));
        assert!(!e.contains_key(step::ENV_NODE_GPUS));
        assert_eq!(s.subdomain, None);
        assert_eq!(s.dns_config, None);
        // No cpu/memory allocation: no requests invented.
        let r = s.containers[0].resources.as_ref().unwrap();
        assert!(r.requests.as_ref().unwrap().is_empty());
        // Its steps stay in the pod: the daemon makes the key, on a writable in-memory
        // emptyDir at the key path; no Secret is referenced.
        assert_eq!(e[step::ENV_LOCAL_KEY], "1");
        assert_eq!(e[step::ENV_KEY_FILE], step::KEY_FILE);
        let key = s.containers[0]
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.mount_path == step::KEY_DIR)
            .unwrap();
        assert_eq!(key.read_only, Some(false));
        let vol = s
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == key.name)
            .unwrap();
        assert!(vol.secret.is_none());
        assert_eq!(
            vol.empty_dir.as_ref().unwrap().medium.as_deref(),
            Some("Memory")
        );
        // Only the main container mounts it.
        assert!(
            s.init_containers.iter().flatten().all(|c| c
                .volume_mounts
                .iter()
                .flatten()
                .all(|m| m.name != key.name))
        );
    }

    #[test]
    fn arrays_and_attempts_show_in_names_env_and_labels() {
        let mut j = job(
            "sweep-3",
            BatchJobSpec {
                script: Some("true".into()),
                ..Default::default()
            },
        );
        j.metadata.labels = Some([(labels::ARRAY_PARENT.to_string(), "sweep".into())].into());
        let tasks = vec![TaskAllocation {
            node: "n1".into(),
            gpus: vec![5, 6],
            gpu_uuids: vec!["GPU-a".into(), "GPU-b".into()],
            ..Default::default()
        }];
        let p = partition();
        let mut c = ctx(&j, &tasks, Some(&p));
        c.array = Some((100, 3));
        c.attempt = 2;
        let gj = vec![r#"{"gpus":[{"index":5,"uuid":"GPU-a","numa":1}]}"#.to_string()];
        c.node_gpus = &gj;
        let pod = build_pod(&c, 0).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("sweep-3-0-a2"));
        let s = spec_of(&pod);
        assert_eq!(s.hostname.as_deref(), Some("sweep-3-0-a2"));
        let e = env_of(&s.containers[0]);
        assert_eq!(e["SLURM_JOB_NODELIST"], "sweep-3-0-a2");
        assert_eq!(e["SLURM_ARRAY_JOB_ID"], "100");
        assert_eq!(e["SLURM_ARRAY_TASK_ID"], "3");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "GPU-a,GPU-b");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0,1");
        assert_eq!(e[step::ENV_NODE_GPUS], gj[0]);
        let l = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(l[labels::ATTEMPT], "2");
        assert_eq!(l[labels::ARRAY_PARENT], "sweep");
        assert_eq!(l[labels::ARRAY_TASK_ID], "3");
    }

    #[test]
    fn dra_pods_reference_one_claim_with_the_nodes_gpus() {
        let j = job(
            "train",
            BatchJobSpec {
                script: Some("true".into()),
                ..Default::default()
            },
        );
        let tasks = gang();
        let p = partition();
        let mut c = ctx(&j, &tasks, Some(&p));
        c.gpu_binding = GpuBinding::Dra;
        let pod = build_pod(&c, 0).unwrap();
        let s = spec_of(&pod);
        let claims = s.resource_claims.as_ref().unwrap();
        assert_eq!(claims.len(), 1);
        let e = env_of(&s.containers[0]);
        assert!(!e.contains_key("NVIDIA_VISIBLE_DEVICES"));
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0,1");
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let j = job("empty", BatchJobSpec::default());
        let tasks = gang();
        assert_eq!(
            build_pod(&ctx(&j, &tasks, None), 0).unwrap_err(),
            BuildError::NothingToRun
        );
        let j = job(
            "noimg",
            BatchJobSpec {
                script: Some("x".into()),
                ..Default::default()
            },
        );
        let e = build_pod(&ctx(&j, &tasks, None), 0).unwrap_err();
        assert!(e.to_string().contains("defaultImage"), "{e}");
        let p = partition();
        assert_eq!(
            build_pod(&ctx(&j, &tasks, Some(&p)), 9).unwrap_err(),
            BuildError::NoSuchNode(9)
        );
        let long = job(&"x".repeat(70), BatchJobSpec::default());
        assert!(matches!(
            build_pod(&ctx(&long, &tasks, Some(&p)), 0).unwrap_err(),
            BuildError::NameTooLong { .. }
        ));
    }

    #[test]
    fn buildability_is_checked_without_building() {
        let p = partition();
        let ok = job(
            "a",
            BatchJobSpec {
                script: Some("x".into()),
                ..Default::default()
            },
        );
        assert_eq!(check_buildable(&ok, Some(&p), "gpu"), Ok(()));
        assert!(matches!(
            check_buildable(&ok, None, "gpu"),
            Err(BuildError::NoImage { .. })
        ));
        let empty = job("b", BatchJobSpec::default());
        assert_eq!(
            check_buildable(&empty, Some(&p), "gpu"),
            Err(BuildError::NothingToRun)
        );
        let tmpl = PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("img".into()),
                    command: Some(vec!["true".into()]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let own = job(
            "c",
            BatchJobSpec {
                template: Some(Box::new(tmpl)),
                ..Default::default()
            },
        );
        assert_eq!(check_buildable(&own, None, "gpu"), Ok(()));
    }

    #[test]
    fn names_fit_dns_rules() {
        assert_eq!(service_name("train"), "train");
        let s = service_name("7b.run");
        assert!(s.starts_with("j7b-run-"), "{s}");
        assert_ne!(service_name("a.b"), service_name("a-b"));
        let long = "a".repeat(63);
        assert_eq!(service_name(&long), long);
        let h = hostname(&long, 1, 31);
        assert!(h.len() <= 63 && h.ends_with("-31"), "{h}");
        assert_ne!(
            hostname(&format!("{long}x"), 1, 1),
            hostname(&format!("{long}y"), 1, 1)
        );
        assert_eq!(hostname("train", 1, 0), "train-0");
        assert_eq!(pod_name("train", 1, 7), "train-7");
        assert_eq!(pod_name("train", 3, 7), "train-7-a3");
        assert_eq!(step::secret_name("train"), "train-step");
    }

    #[test]
    fn node_shares_sum_their_tasks_and_name_each_gpu_once() {
        let mut tasks = gang();
        // Two tasks sharing one GPU (more tasks than GPUs).
        tasks[1].gpus = vec![2];
        tasks[1].gpu_uuids = vec!["GPU-0".into()];
        let s = node_share(&tasks, 0).unwrap();
        assert_eq!((s.cpu_millis, s.memory_mib), (8000, 16384));
        assert_eq!(s.gpus, vec![2]);
        assert_eq!(s.gpu_uuids, vec!["GPU-0"]);
        assert_eq!(node_share(&tasks, 5), None);
        assert_eq!(node_list(&tasks), "gpu[001-002]");
        assert_eq!(node_hosts("run2", 1, &tasks), ["run2-0", "run2-1"]);
    }

    #[test]
    fn tasks_per_node_compresses_runs() {
        assert_eq!(tasks_per_node(&[2, 2, 2, 1]), "2(x3),1");
        assert_eq!(tasks_per_node(&[1]), "1");
        assert_eq!(tasks_per_node(&[1, 2, 1]), "1,2,1");
        assert_eq!(tasks_per_node(&[]), "");
    }

    #[test]
    fn service_is_headless_and_secret_is_owned_and_keyed_at_write() {
        let j = job("train", BatchJobSpec::default());
        let s = build_service(&j);
        let sp = s.spec.unwrap();
        assert_eq!(sp.cluster_ip.as_deref(), Some("None"));
        assert_eq!(sp.publish_not_ready_addresses, Some(true));
        assert_eq!(sp.selector.unwrap()[labels::BATCHJOB], "train");
        assert_eq!(s.metadata.owner_references.unwrap()[0].name, "train");
        let sec = build_secret(&j);
        assert_eq!(sec.metadata.name.as_deref(), Some("train-step"));
        assert_eq!(
            sec.metadata.owner_references.as_ref().unwrap()[0].uid,
            "uid-1"
        );
        assert!(sec.data.is_none() && sec.string_data.is_none());
        let keyed = with_key(sec, "abcd");
        assert_eq!(keyed.string_data.unwrap()[step::SECRET_KEY], "abcd");
    }
}
