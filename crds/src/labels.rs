//! Well-known label, annotation and finalizer keys shared by the operator, the node agent,
//! the command line and the chart, so each is spelled once.

/// Label on every node pod, Service and credential Secret: the owning BatchJob's name.
pub const BATCHJOB: &str = "muster.dev/batchjob";
/// Label on every node pod: the Slurm job id (decimal).
pub const JOB_ID: &str = "muster.dev/job-id";
/// Label on every node pod: the index of its node in the job (`SLURM_NODEID`; node 0 runs the
/// batch script).
pub const NODE_RANK: &str = "muster.dev/node-rank";
/// Label on every node pod: the admission attempt it belongs to; pods of an older attempt
/// (after a requeue) are never mistaken for the current gang.
pub const ATTEMPT: &str = "muster.dev/attempt";
/// Label on the BatchJobs that run the indices of an array: the parent BatchJob's name.
pub const ARRAY_PARENT: &str = "muster.dev/array-parent";
/// Label on an array element BatchJob: its array index (`SLURM_ARRAY_TASK_ID`).
pub const ARRAY_TASK_ID: &str = "muster.dev/array-task-id";

/// Node label written by the node agent: GPU model, as NVML names it with spaces as `-`
/// (`NVIDIA-H100-80GB-HBM3`).
pub const NODE_GPU_PRODUCT: &str = "muster.dev/gpu.product";
/// Node label written by the node agent: number of GPUs on the node.
pub const NODE_GPU_COUNT: &str = "muster.dev/gpu.count";
/// Node label written by the node agent: memory of one GPU in MiB.
pub const NODE_GPU_MEMORY: &str = "muster.dev/gpu.memory";
/// Node label a cluster admin sets to give a node Slurm features for `--constraint`:
/// `muster.dev/feature.<name>=true` (any value other than `false` counts).
pub const NODE_FEATURE_PREFIX: &str = "muster.dev/feature.";

/// Node annotation with why an administrator drained the node (Slurm's node `Reason`), set
/// with the cordon by `scontrol update NodeName=... State=DRAIN Reason=...` and removed by
/// `State=RESUME`; `sinfo -R` and `scontrol show node` show it.
pub const NODE_REASON: &str = "muster.dev/reason";
/// Node annotation with who set [`NODE_REASON`].
pub const NODE_REASON_USER: &str = "muster.dev/reason-user";
/// Node annotation with when [`NODE_REASON`] was set (RFC 3339).
pub const NODE_REASON_TIME: &str = "muster.dev/reason-time";

/// Annotation with the `--output` path of `sbatch`, kept for `muster logs`.
pub const OUTPUT: &str = "muster.dev/output";
/// Annotation with the `--error` path of `sbatch`, kept for `muster logs`.
pub const ERROR: &str = "muster.dev/error";
/// Annotation with the `--comment` of `sbatch` (Slurm's job comment, shown by `scontrol show
/// job` and `sacct -o Comment`).
pub const COMMENT: &str = "muster.dev/comment";
/// Annotation with the user who submitted the job (Slurm's `%u`): written at admission by the
/// operator's mutating webhook from the API server's `userInfo.username`, never by clients.
pub const USER: &str = "muster.dev/user";

/// Finalizer the operator keeps on a BatchJob while it holds an allocation, so that a deleted
/// job's GPUs are released (and its pods stopped) before the object disappears.
pub const FINALIZER: &str = "muster.dev/allocation";

/// The label key every topology must end with.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
