//! BatchJob: one `sbatch` submission — a gang of tasks placed all at once.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::rules;

/// What a user submits: the camelCase twin of each `sbatch` long option, with values in
/// Slurm's own syntax, plus the pod template each task runs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "BatchJob",
    plural = "batchjobs",
    singular = "batchjob",
    shortname = "bj",
    namespaced,
    status = "BatchJobStatus",
    category = "muster",
    doc = "A batch job: Slurm's sbatch as a Kubernetes object. All tasks start together or not at all.",
    printcolumn(name = "JobID", type_ = "integer", json_path = ".status.jobId"),
    printcolumn(name = "Partition", type_ = "string", json_path = ".status.partition"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.reason"),
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.numNodes"),
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".status.numGpus"),
    printcolumn(
        name = "Time",
        type_ = "string",
        json_path = ".status.timeLimit",
        priority = 1
    ),
    printcolumn(name = "NodeList", type_ = "string", json_path = ".status.nodeList"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    cel
)]
#[x_kube(
    validation = rules::rule(
        "(has(self.mem) ? 1 : 0) + (has(self.memPerCpu) ? 1 : 0) + (has(self.memPerGpu) ? 1 : 0) <= 1",
        "mem, memPerCpu and memPerGpu are mutually exclusive (as sbatch's --mem, --mem-per-cpu and --mem-per-gpu)"
    ),
    validation = rules::rule(
        "!has(self.gpusPerTask) || has(self.ntasks) || has(self.ntasksPerNode)",
        "gpusPerTask needs a task count: set ntasks or ntasksPerNode (as sbatch's --gpus-per-task needs -n)"
    ),
    validation = rules::rule(
        "!(has(self.gres) && has(self.gpusPerNode))",
        "gres and gpusPerNode both set GPUs per node: give one of them"
    ),
    validation = rules::rule(
        "!has(self.gpuType) || ((!has(self.gpus) || !string(self.gpus).contains(':')) && (!has(self.gpusPerNode) || !string(self.gpusPerNode).contains(':')) && (!has(self.gpusPerTask) || !string(self.gpusPerTask).contains(':')) && (!has(self.gres) || self.gres.split(':').size() == 1 || (self.gres.split(':').size() == 2 && self.gres.split(':')[1].matches('^[0-9]+$'))))",
        "gpuType is set and a GPU request names a type too: give the type once"
    ),
    validation = rules::rule(
        "!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel) || (has(self.requeueRequests) && self.requeueRequests > (has(oldSelf.requeueRequests) ? oldSelf.requeueRequests : 0))",
        "cancel cannot be undone once set, but by a requeue request (scontrol requeue)"
    ),
    validation = rules::rule(
        "!has(oldSelf.requeueRequests) || (has(self.requeueRequests) && self.requeueRequests >= oldSelf.requeueRequests)",
        "requeueRequests only grows: each increase requeues the job once"
    ),
    validation = rules::rule(
        "!has(self.memPerGpu) || has(self.gpus) || has(self.gpusPerNode) || has(self.gpusPerTask) || has(self.gres)",
        "memPerGpu needs a GPU request (gpus, gpusPerNode, gpusPerTask or gres)"
    ),
    validation = rules::rule(rules::SOMETHING_TO_RUN, rules::SOMETHING_TO_RUN_MSG)
)]
#[serde(rename_all = "camelCase")]
pub struct BatchJobSpec {
    /// `--partition`: the Partition to run in. Omitted: the cluster's default partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::DNS_SUBDOMAIN, "partition must be a Partition name (lowercase letters, digits, '-' and '.')"))]
    #[schemars(length(max = 253))]
    pub partition: Option<String>,

    /// `--job-name`: the job's name as squeue shows it. Omitted: `metadata.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub job_name: Option<String>,

    /// `--nodes`: node count as `N` or `MIN-MAX`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::NODES, "nodes must be a count N >= 1 or a range MIN-MAX with 1 <= MIN <= MAX (e.g. 4 or \"2-8\")"))]
    #[schemars(extend("maxLength" = 64))]
    pub nodes: Option<IntOrString>,

    /// `--ntasks`: total number of tasks (ranks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub ntasks: Option<u32>,

    /// `--ntasks-per-node`: tasks on each node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub ntasks_per_node: Option<u32>,

    /// `--cpus-per-task`: CPUs reserved for each task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub cpus_per_task: Option<u32>,

    /// `--mem`: memory per node (`16G`, `64000`, `512M`; unit K/M/G/T, default M; `0` = the
    /// whole node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::MEM, rules::MEM_MSG))]
    #[schemars(length(max = 32))]
    pub mem: Option<String>,

    /// `--mem-per-cpu`: memory per allocated CPU, same syntax as `mem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::MEM, rules::MEM_MSG))]
    #[schemars(length(max = 32))]
    pub mem_per_cpu: Option<String>,

    /// `--mem-per-gpu`: memory per allocated GPU, same syntax as `mem`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::MEM, rules::MEM_MSG))]
    #[schemars(length(max = 32))]
    pub mem_per_gpu: Option<String>,

    /// `--gpus` / `-G`: GPUs for the whole job, `[TYPE:]COUNT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::GPUS, rules::GPUS_MSG))]
    #[schemars(extend("maxLength" = 64))]
    pub gpus: Option<IntOrString>,

    /// `--gpus-per-node`: GPUs on each node, `[TYPE:]COUNT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::GPUS, rules::GPUS_MSG))]
    #[schemars(extend("maxLength" = 64))]
    pub gpus_per_node: Option<IntOrString>,

    /// `--gpus-per-task`: GPUs for each task, `[TYPE:]COUNT`; needs `ntasks` or `ntasksPerNode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::GPUS, rules::GPUS_MSG))]
    #[schemars(extend("maxLength" = 64))]
    pub gpus_per_task: Option<IntOrString>,

    /// `--gres`: generic resources per node; Muster schedules `gpu[:TYPE][:COUNT]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::GRES, "gres must be gpu[:TYPE][:COUNT] (e.g. gpu:4 or gpu:a100:2); Muster schedules GPUs only"))]
    #[schemars(length(max = 128))]
    pub gres: Option<String>,

    /// GPU model to run on, the TYPE of `--gres=gpu:TYPE:N` or `--gpus=TYPE:N` given on its own.
    /// Matched case-insensitively against the GPU model (`a100` matches `NVIDIA A100-SXM4-80GB`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::GPU_TYPE, "gpuType must be letters, digits, '_', '-' or '.'"))]
    #[schemars(length(max = 63))]
    pub gpu_type: Option<String>,

    /// `--constraint` / `-C`: node features, combined with `&` (and), `|` (or), `[a|b]` (every
    /// node matches the same one), `feat*N` counts and parentheses. A node has feature `f` when
    /// it carries the label `muster.dev/feature.f`, or any label whose value is `f`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::CONSTRAINT, "constraint must be node features joined by & (and), | (or), with [..] for one alternative on every node, feat*N counts and parentheses, e.g. \"a100&ib\" or \"[rack1*2&rack2*2]\""))]
    #[schemars(length(max = 1024))]
    pub constraint: Option<String>,

    /// `--nodelist` / `-w`: nodes the job must run on, as a Slurm hostlist of Node names
    /// (`gpu[001-004],gpu010`). The job gets at least these nodes, and more when its size asks
    /// for more. (`sbatch -w FILE` reads the names from a file; here they are written out.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::HOSTLIST, rules::NODELIST_MSG))]
    #[schemars(length(max = 8192))]
    pub nodelist: Option<String>,

    /// `--exclude` / `-x`: nodes the job must not run on, as a Slurm hostlist of Node names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::HOSTLIST, rules::EXCLUDE_MSG))]
    #[schemars(length(max = 8192))]
    pub exclude: Option<String>,

    /// `--exclusive`: `true` takes whole nodes (no other job shares them); `user`
    /// (`--exclusive=user`) shares the job's nodes only with jobs of the same user;
    /// `false` or omitted shares nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "exclusive_schema")]
    pub exclusive: Option<Exclusive>,

    /// `--time` / `-t`: time limit, `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`
    /// or `UNLIMITED`. A bare integer is minutes. Omitted: the partition's default time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::TIME, rules::TIME_MSG))]
    #[schemars(extend("maxLength" = 64))]
    pub time: Option<IntOrString>,

    /// `--array` / `-a`: run one gang per index: `0-15`, `1,3,5-7`, `0-15:4` (step), with an
    /// optional `%N` to run at most N at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::ARRAY, "array must be indices N or N-M[:STEP] joined by commas, then an optional %MAX_RUNNING, e.g. \"0-15%4\" or \"1,3,5-7\""))]
    #[x_kube(validation = rules::rule(rules::ARRAY_MAX, rules::ARRAY_MAX_MSG))]
    #[x_kube(validation = rules::rule(rules::ARRAY_RANGES, rules::ARRAY_RANGES_MSG))]
    #[schemars(extend("maxLength" = 64))]
    pub array: Option<IntOrString>,

    /// `--dependency` / `-d`: `TYPE:JOB[:JOB...]` joined by `,` (all must hold) or `?` (any);
    /// types after, afterany, afterok, afternotok, aftercorr; or `singleton`. JOB is a BatchJob
    /// name in this namespace or a numeric job id, optionally `+MINUTES`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::DEPENDENCY, "dependency must be TYPE:JOB[:JOB...] items joined by ',' (all) or '?' (any), TYPE one of after, afterany, afterok, afternotok, aftercorr, JOB a job name or id with optional +MINUTES; or singleton"))]
    #[schemars(length(max = 1024))]
    pub dependency: Option<String>,

    /// `--switches`: `COUNT[@MAX_WAIT]`: at most COUNT leaf switches, waiting up to MAX_WAIT
    /// (Slurm time) for such a placement before taking any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::SWITCHES, "switches must be COUNT or COUNT@MAX_WAIT with COUNT >= 1 and MAX_WAIT a Slurm time such as 30 or 1:00:00"))]
    #[schemars(extend("maxLength" = 64))]
    pub switches: Option<IntOrString>,

    /// `--gpu-bind`: `closest`, `map_gpu:0,1`, `mask_gpu:0x3,0xC`, `per_task:N`, `single:N`
    /// or `none`, optionally prefixed `verbose,`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::GPU_BIND, "gpuBind must be closest, none, map_gpu:LIST, mask_gpu:LIST, per_task:N or single:N, optionally after verbose,"))]
    #[schemars(length(max = 512))]
    pub gpu_bind: Option<String>,

    /// `--nice`: lowers the job's priority by this much (negative raises it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -2147483645, max = 2147483645))]
    pub nice: Option<i32>,

    /// `--priority`: a fixed priority replacing the computed one (for administrators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,

    /// `--requeue` / `--no-requeue`: requeue after a node failure or preemption. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue: Option<bool>,

    /// `scontrol requeue`: how many times the job has been asked to run again. Each request
    /// the operator has not yet honoured (`status.requeueRequests`) requeues a running or
    /// ended job once: its pods are stopped and it waits again, under the same job id, as a
    /// new attempt (`Restarts` counts it). A new job's count is where it starts (a GitOps
    /// manifest raises it to requeue). Only grows; a raise is refused for a pending job, a
    /// `requeue: false` one, an array (requeue its elements) and with `cancel: true` (clear
    /// it to requeue a cancelled job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_requests: Option<u32>,

    /// `--hold` / `scontrol hold|release`: keep the job pending (reason JobHeldUser).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<bool>,

    /// `--account` / `-A`: the account the job is charged to, shown by squeue (`%a`) and sacct
    /// (`Account`). Fair share is per namespace; the account is recorded and shown.
    /// Omitted: the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::ACCOUNT, rules::ACCOUNT_MSG))]
    #[schemars(length(min = 1, max = 64))]
    pub account: Option<String>,

    /// `--begin` / `-b`: the job is not started before this time (squeue reason `BeginTime`
    /// until then). sbatch resolves Slurm's forms (`now+1hour`, `16:00`, `tomorrow`, ...)
    /// into this timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin: Option<Time>,

    /// `--signal`: `[{R|B}:]SIG[@TIME]`: send SIG TIME seconds (default 60) before the time
    /// limit to every step's tasks, or with `B:` to the batch script only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(rules::SIGNAL, rules::SIGNAL_MSG))]
    #[schemars(length(max = 32))]
    pub signal: Option<String>,

    /// `--output` / `-o`: the batch script's standard output file, a Slurm filename pattern
    /// (`%j`, `%x`, `%A`, `%a`, `%N`, `%u`, `%%`, ...); relative to the working directory.
    /// Written by the batch step when the path lies on a shared filesystem of the
    /// partition (`jobEnvironment.volumes`), besides the pod log. Omitted: `slurm-%j.out`
    /// (`slurm-%A_%a.out` for an array element) in the working directory, when that lies on
    /// one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub output: Option<String>,

    /// `--error` / `-e`: the batch script's standard error file, same rules as `output`.
    /// Omitted: standard error goes where standard output goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub error: Option<String>,

    /// `--open-mode`: `truncate` (the default, as Slurm's `JobFileAppend=0`) or `append` to
    /// an existing output or error file. As in Slurm, a requeued job's new run truncates too
    /// unless `append` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_mode: Option<OpenMode>,

    /// `--chdir` / `-D`: the directory the batch script runs in (and its `srun` steps, unless
    /// they give their own `--chdir`); relative `output`/`error` files are relative to it. A
    /// relative path is relative to the container's working directory, which stays what
    /// `SLURM_SUBMIT_DIR` names. If it does not exist, the script runs in `/tmp` with a
    /// notice, as Slurm's does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub chdir: Option<String>,

    /// Set by `scancel`: stop the job and keep its record as CANCELLED. Cannot be undone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<bool>,

    /// The batch script. Run by `/bin/bash` in every task's first container unless the
    /// template gives that container a command of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::slurm::script::SCRIPT_MAX_CHARS))]
    pub script: Option<String>,

    /// pyxis's `--container-image`: the image every node pod of the job runs, as an enroot URI
    /// (`nvcr.io#nvidia/pytorch:24.01-py3`) or a Kubernetes image reference. Overrides the
    /// partition's `defaultImage`; the template's first container must then give no other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(
        "!self.startsWith('/') && !self.startsWith('.') && !self.endsWith('.sqsh') && !self.endsWith('.sqfs') && !self.endsWith('.squashfs')",
        "containerImage must be an image in a registry ([REGISTRY#]IMAGE[:TAG]); squashfs files cannot be a pod's image"
    ))]
    #[schemars(length(min = 1, max = 1024))]
    pub container_image: Option<String>,

    /// pyxis's `--container-mounts`: `SRC[:DST[:FLAGS]]` entries joined by `,`, flags joined
    /// by `+` (`ro`, `rw`, `rslave`, …). SRC is a shared volume of the partition
    /// (`spec.jobEnvironment.volumes`) by name, an absolute path inside one (under its
    /// `mountPath`, or its `hostPath`), or `tmpfs`; mounted at DST in the job's container.
    /// A SRC the partition does not provide is refused with the list of what it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(
        "self.matches('^[^,:]+(:[^,:]+(:[^,]*)?)?(,[^,:]+(:[^,:]+(:[^,]*)?)?)*$')",
        "containerMounts must be SRC[:DST[:FLAGS]] entries joined by ',' (pyxis's --container-mounts), e.g. scratch:/ckpt or /scratch/data:/data:ro"
    ))]
    #[schemars(length(min = 1, max = 4096))]
    pub container_mounts: Option<String>,

    /// pyxis's `--container-workdir`: the working directory of the job's container, where
    /// the batch script starts (and `SLURM_SUBMIT_DIR`). The template's first container must
    /// then give no other `workingDir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = rules::rule(
        "self.startsWith('/')",
        "containerWorkdir must be an absolute path"
    ))]
    #[schemars(length(min = 1, max = 4096))]
    pub container_workdir: Option<String>,

    /// The pod template of one task. Its first container runs the task; Muster adds the
    /// placement (node affinity), the Slurm/torchrun environment and the GPU binding.
    /// Omitted containers get the partition's default image.
    // Boxed: a pod template is ~1.7 KB inline even when absent, most of a BatchJob's size,
    // and the operator caches every BatchJob (the JSON and the schema are the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::pod_template")]
    pub template: Option<Box<PodTemplateSpec>>,
}

/// `spec.openMode`: how the output and error files are opened.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum OpenMode {
    /// Empty an existing file first (Slurm's default).
    #[default]
    Truncate,
    /// Add to an existing file.
    Append,
}

/// `spec.exclusive`: `false`, `true` or `"user"` (a boolean, or Slurm's `--exclusive=user`).
///
/// The schema is a typeless leaf (`x-kubernetes-preserve-unknown-fields`) with an `enum` of
/// the three values: a structural schema must give a type unless it preserves unknown fields,
/// so a field that is a boolean *or* a string can be written no other way, and existing
/// manifests keep `exclusive: true`. The API server checks the enum at `kubectl apply`
/// (`Unsupported value: "users": supported values: "false", "true", "user"`). No CEL rule
/// can reach such a field: Kubernetes gives CEL no type for a preserved leaf and refuses a
/// CRD whose rule names one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Exclusive {
    /// Nodes are shared (`false`).
    #[default]
    Shared,
    /// Whole nodes (`true`, `--exclusive`).
    Node,
    /// Nodes shared only with jobs of the same user (`"user"`, `--exclusive=user`).
    User,
}

impl Exclusive {
    /// Whether the job takes whole nodes.
    pub fn is_node(self) -> bool {
        self == Exclusive::Node
    }
}

impl Serialize for Exclusive {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Exclusive::Shared => s.serialize_bool(false),
            Exclusive::Node => s.serialize_bool(true),
            Exclusive::User => s.serialize_str("user"),
        }
    }
}

impl<'de> Deserialize<'de> for Exclusive {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Exclusive;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("exclusive: true, false or \"user\"")
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Exclusive, E> {
                Ok(if b {
                    Exclusive::Node
                } else {
                    Exclusive::Shared
                })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Exclusive, E> {
                match v {
                    "user" => Ok(Exclusive::User),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl From<bool> for Exclusive {
    fn from(b: bool) -> Self {
        if b {
            Exclusive::Node
        } else {
            Exclusive::Shared
        }
    }
}

/// The schema of [`Exclusive`] (see there why it has no type).
fn exclusive_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "`--exclusive`: `true` takes whole nodes (no other job shares them); `user` (`--exclusive=user`) shares the job's nodes only with jobs of the same user; `false` or omitted shares nodes.",
        "x-kubernetes-preserve-unknown-fields": true,
        "enum": [false, true, "user"]
    })
}

/// Slurm's job states (`squeue -t`), spelled as Slurm spells them.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Waiting for resources, priority, a dependency or a hold.
    Pending,
    /// Every task is placed and running.
    Running,
    /// Tasks are being stopped after the job ended.
    Completing,
    /// Every task exited 0.
    Completed,
    /// A task exited non-zero, or the job could not be run.
    Failed,
    /// Cancelled by `scancel` (or a dependency that can never be satisfied).
    Cancelled,
    /// Reached its time limit.
    Timeout,
    /// A node or GPU failed under a running task.
    NodeFail,
    /// Evicted by a higher-priority job.
    Preempted,
}

impl JobState {
    /// Slurm's two-letter compact code, as `squeue %t` prints it.
    pub fn short(self) -> &'static str {
        match self {
            JobState::Pending => "PD",
            JobState::Running => "R",
            JobState::Completing => "CG",
            JobState::Completed => "CD",
            JobState::Failed => "F",
            JobState::Cancelled => "CA",
            JobState::Timeout => "TO",
            JobState::NodeFail => "NF",
            JobState::Preempted => "PR",
        }
    }

    /// The full name, as `squeue %T` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Completing => "COMPLETING",
            JobState::Completed => "COMPLETED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Timeout => "TIMEOUT",
            JobState::NodeFail => "NODE_FAIL",
            JobState::Preempted => "PREEMPTED",
        }
    }

    /// Whether the job has ended and will not run again in this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Completed
                | JobState::Failed
                | JobState::Cancelled
                | JobState::Timeout
                | JobState::NodeFail
                | JobState::Preempted
        )
    }

    /// Every state, in Slurm's order.
    pub const ALL: [JobState; 9] = [
        JobState::Pending,
        JobState::Running,
        JobState::Completing,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
        JobState::NodeFail,
        JobState::Preempted,
    ];
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobState {
    type Err = String;
    /// Accepts the full name or the compact code, in any case (`squeue -t pd,running`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let up = s.trim().to_ascii_uppercase();
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == up || st.short() == up)
            .ok_or_else(|| {
                format!(
                    "invalid job state '{s}': expected one of {}",
                    JobState::ALL.map(|s| s.as_str()).join(", ")
                )
            })
    }
}

/// Where one task (rank) runs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskAllocation {
    /// Global rank (`SLURM_PROCID`, `RANK`).
    pub rank: u32,
    /// Node (Kubernetes Node name).
    pub node: String,
    /// Index of the node in the job's node list (`SLURM_NODEID`, `NODE_RANK`).
    pub node_rank: u32,
    /// Rank on the node (`SLURM_LOCALID`, `LOCAL_RANK`).
    pub local_rank: u32,
    /// CPUs reserved for the task (millicores).
    #[serde(default)]
    pub cpu_millis: u64,
    /// Memory reserved for the task (MiB).
    #[serde(default)]
    pub memory_mib: u64,
    /// GPU indices on the node (NVML index order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<u32>,
    /// GPU UUIDs, in the same order as `gpus`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_uuids: Vec<String>,
    /// The node pod running the task (one pod per allocated node), once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

/// How many elements of an array job are in each state.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArrayTaskSummary {
    /// Number of indices in the array.
    pub total: u32,
    /// Indices waiting to start (including those held back by the `%N` throttle).
    pub pending: u32,
    /// Indices running.
    pub running: u32,
    /// Indices that completed successfully.
    pub completed: u32,
    /// Indices that ended in FAILED, TIMEOUT, NODE_FAIL or PREEMPTED.
    pub failed: u32,
    /// Indices cancelled.
    pub cancelled: u32,
}

/// What the operator observed and decided. Written by server-side apply; never by users.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchJobStatus {
    /// Slurm job id: cluster-unique, increasing, never reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<u64>,
    /// For an array element: the array's job id (`SLURM_ARRAY_JOB_ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job_id: Option<u64>,
    /// For an array element: its index (`SLURM_ARRAY_TASK_ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_task_id: Option<u32>,
    /// Job state, as squeue prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    /// Slurm reason code for a pending or ended job: `Resources`, `Priority`, `Dependency`,
    /// `PartitionDown`, `PartitionTimeLimit`, `ReqNodeNotAvail`, `BeginTime`, `JobHeldUser`,
    /// `DependencyNeverSatisfied`, `NonZeroExitCode`, `TimeLimit`, … `None` when running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable detail of the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The partition the job runs in (the default partition resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The effective time limit, in Slurm's format (`1:00:00`, `UNLIMITED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<String>,
    /// Allocated nodes as a Slurm hostlist (`gpu[001-004]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_list: Option<String>,
    /// Number of nodes allocated (or requested, while pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_nodes: Option<u32>,
    /// Number of tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_tasks: Option<u32>,
    /// Number of GPUs allocated (or requested, while pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_gpus: Option<u32>,
    /// Number of CPUs allocated (or requested, while pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_cpus: Option<u32>,
    /// Where each task runs, rank by rank. Written before any pod is created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskAllocation>,
    /// How this admission's pods get their GPUs (`dra`: a ResourceClaim per pod; `env`:
    /// `NVIDIA_VISIBLE_DEVICES`), fixed when the allocation is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_binding: Option<super::GpuBinding>,
    /// Which admission this allocation belongs to; bumps on every requeue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// How many times the job was requeued (Slurm's `Restarts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<u32>,
    /// The `spec.requeueRequests` the operator has honoured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_requests: Option<u32>,
    /// The priority the scheduler orders the job by (`squeue %Q`, Slurm's `Priority`):
    /// `spec.priority` when set, else the computed one. Refreshed while the job waits (a
    /// change under 1% waits for another write); once it starts, the one it started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// When the job was submitted (first seen by the operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_time: Option<Time>,
    /// When the job became eligible to run (dependencies met, not held).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible_time: Option<Time>,
    /// When the job started (allocation admitted); for a pending job, the estimated start
    /// (`squeue --start`), or absent when none can be estimated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the job ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// Exit code of the first failing task (0 when all succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Signal that ended the first failing task, if any (Slurm's `ExitCode` is `code:signal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// For an array job: its elements by state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_tasks: Option<ArrayTaskSummary>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions as `batch/v1` Job and kstatus define them: `Complete` (succeeded), `Failed`
    /// (ended otherwise, with the Slurm reason), `Suspended` (held), `Ready` (running),
    /// `Reconciling` (will start by itself), `Stalled` (cannot without a change, or ended
    /// badly), and `Admitted` (holds an allocation). Reasons are CamelCase and say why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl BatchJob {
    /// The job name as Slurm shows it: `spec.jobName`, else `metadata.name`.
    pub fn job_name(&self) -> &str {
        self.spec
            .job_name
            .as_deref()
            .or(self.metadata.name.as_deref())
            .unwrap_or("")
    }

    /// The job's state, PENDING until the operator says otherwise.
    pub fn state(&self) -> JobState {
        self.status
            .as_ref()
            .and_then(|s| s.state)
            .unwrap_or(JobState::Pending)
    }
}
