//! Plain rows the output commands format: one per job, node and partition, built from the
//! Kubernetes objects by pure functions (time is an argument), so every table is testable
//! without a cluster.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, Exclusive, JobState};

use muster_crds::slurm::{ArraySpec, GpuCount, NodeRange, TimeLimit, gpus_from_gres, parse_gres};

/// What squeue, sacct and scontrol show of one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRow {
    /// Kubernetes namespace.
    pub namespace: String,
    /// Slurm's account: `spec.account` (`--account`), else the namespace.
    pub account: String,
    /// BatchJob name.
    pub name: String,
    /// Slurm job id; `None` until the operator assigns it.
    pub job_id: Option<u64>,
    /// For an array element or array record: the array's job id.
    pub array_job_id: Option<u64>,
    /// For an array element: its index.
    pub array_task_id: Option<u32>,
    /// For an array's pending record: the pending indices (`4-15%4`).
    pub array_task_str: Option<String>,
    /// The row stands for the array object itself (its indices not started yet), not for a
    /// BatchJob of its own.
    pub array_record: bool,
    /// Job name.
    pub job_name: String,
    /// Submitting user (annotation `muster.dev/user`).
    pub user: String,
    /// Partition (resolved by the operator, else as requested, else empty).
    pub partition: String,
    /// State.
    pub state: JobState,
    /// Slurm reason code (`None` when there is none).
    pub reason: String,
    /// Nodes allocated, or requested while pending.
    pub num_nodes: u32,
    /// CPUs allocated, or requested while pending.
    pub num_cpus: u32,
    /// Tasks.
    pub num_tasks: u32,
    /// GPUs allocated, or requested while pending.
    pub num_gpus: u32,
    /// GPUs per node as Slurm's TresPerNode (`gres:gpu:4`).
    pub tres_per_node: Option<String>,
    /// GPUs per task as Slurm's TresPerTask (`gres:gpu:1`).
    pub tres_per_task: Option<String>,
    /// GPUs for the job as Slurm's TresPerJob (`gres:gpu:8`).
    pub tres_per_job: Option<String>,
    /// Allocated nodes as a hostlist (empty while pending).
    pub node_list: String,
    /// The time limit; `None` while not established.
    pub time_limit: Option<TimeLimit>,
    /// Submission time.
    pub submit_time: Option<Timestamp>,
    /// When the job became eligible.
    pub eligible_time: Option<Timestamp>,
    /// Start time, or the expected start of a pending job.
    pub start_time: Option<Timestamp>,
    /// End time.
    pub end_time: Option<Timestamp>,
    /// Seconds the job has run (0 while pending).
    pub elapsed_secs: i64,
    /// Dependency specification.
    pub dependency: Option<String>,
    /// Constraint (features).
    pub features: Option<String>,
    /// Whole nodes.
    pub exclusive: bool,
    /// `--exclusive=user`: nodes shared only with the user's own jobs.
    pub exclusive_user: bool,
    /// `--nodelist` as given (Slurm's ReqNodeList).
    pub req_nodes: Option<String>,
    /// `--exclude` as given (Slurm's ExcNodeList).
    pub exc_nodes: Option<String>,
    /// Nice value.
    pub nice: i32,
    /// Exit code of the first failing task.
    pub exit_code: i32,
    /// Signal that ended the first failing task.
    pub exit_signal: i32,
    /// Times requeued.
    pub restarts: u32,
    /// Requeue allowed.
    pub requeue: bool,
    /// CPUs per task requested.
    pub cpus_per_task: u32,
    /// Tasks per node requested.
    pub ntasks_per_node: Option<u32>,
    /// `--output` as given.
    pub std_out: Option<String>,
    /// `--error` as given.
    pub std_err: Option<String>,
    /// `--comment` as given.
    pub comment: Option<String>,
    /// `--chdir` as given.
    pub work_dir: Option<String>,
    /// Where rank 0 runs (Slurm's BatchHost).
    pub batch_host: Option<String>,
    /// Human-readable reason detail.
    pub message: Option<String>,
    /// Requested memory per node/cpu/gpu as given (`--mem=16G` → `16G`).
    pub mem: Option<String>,
}

impl JobRow {
    /// The job id as squeue's `%i` prints it: `123`, `123_4`, `123_[4-15%4]`.
    pub fn id_string(&self) -> String {
        match (self.array_job_id, &self.array_task_str, self.array_task_id) {
            (Some(a), Some(s), _) => format!("{a}_[{s}]"),
            (Some(a), None, Some(t)) => format!("{a}_{t}"),
            _ => self
                .job_id
                .map(|i| i.to_string())
                .unwrap_or_else(|| "N/A".to_string()),
        }
    }

    /// Whether `filter` (`123`, `123_4`) selects this job: a bare id matches the job and every
    /// element of the array with that id.
    pub fn matches_id(&self, filter: &str) -> bool {
        if let Some((a, t)) = filter.split_once('_') {
            let (Ok(a), Ok(t)) = (a.parse::<u64>(), t.parse::<u32>()) else {
                return false;
            };
            if self.array_job_id != Some(a) {
                return false;
            }
            if self.array_task_id == Some(t) {
                return true;
            }
            // A combined pending record holds index t if t is in its list.
            self.array_task_str.as_deref().is_some_and(|s| {
                ArraySpec::parse(s)
                    .map(|a| a.indices.contains(&t))
                    .unwrap_or(false)
            })
        } else {
            let Ok(id) = filter.parse::<u64>() else {
                return false;
            };
            self.job_id == Some(id) || self.array_job_id == Some(id)
        }
    }
}

fn ts(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Timestamp> {
    t.as_ref().map(|t| t.0)
}

/// A time limit given as an int-or-string (an integer is minutes).
pub fn limit_of(
    v: &Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
) -> Option<TimeLimit> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match v.as_ref()? {
        IntOrString::Int(i) => TimeLimit::from_int(i64::from(*i)).ok(),
        IntOrString::String(s) => TimeLimit::parse(s).ok(),
    }
}

fn gpu_request(s: &str) -> Option<(Option<String>, u32)> {
    GpuCount::parse(s).ok().map(|g| (g.gpu_type, g.count))
}

fn gres_gpus(s: &str) -> Option<(Option<String>, u32)> {
    let items = parse_gres(s).ok()?;
    gpus_from_gres(&items)
        .ok()
        .flatten()
        .map(|g| (g.gpu_type, g.count))
}

fn int_or_str(
    v: &Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
) -> Option<String> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    v.as_ref().map(|v| match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    })
}

/// `gres:gpu[:type]:N` as Slurm prints a GPU TRES request.
fn gres_tres(ty: Option<String>, n: u32) -> String {
    match ty {
        Some(t) => format!("gres:gpu:{t}:{n}"),
        None => format!("gres:gpu:{n}"),
    }
}

/// Build the row of one BatchJob as of `now`.
pub fn job_row(bj: &BatchJob, now: Timestamp) -> JobRow {
    let spec = &bj.spec;
    let st = bj.status.clone().unwrap_or_default();
    let state = bj.state();
    let annotations = bj.metadata.annotations.clone().unwrap_or_default();

    let nodes_req = int_or_str(&spec.nodes)
        .and_then(|n| NodeRange::parse(&n).ok())
        .map(|r| r.min)
        .unwrap_or(1);
    let tasks_req = spec
        .ntasks
        .or(spec.ntasks_per_node.map(|t| t * nodes_req))
        .unwrap_or(nodes_req);
    let cpt = spec.cpus_per_task.unwrap_or(1);
    let per_node_gpus = int_or_str(&spec.gpus_per_node)
        .and_then(|g| gpu_request(&g))
        .or_else(|| spec.gres.as_deref().and_then(gres_gpus));
    let per_task_gpus = int_or_str(&spec.gpus_per_task).and_then(|g| gpu_request(&g));
    let job_gpus = int_or_str(&spec.gpus).and_then(|g| gpu_request(&g));
    let gpus_req = per_node_gpus
        .as_ref()
        .map(|(_, n)| n * nodes_req)
        .or(per_task_gpus.as_ref().map(|(_, n)| n * tasks_req))
        .or(job_gpus.as_ref().map(|(_, n)| *n))
        .unwrap_or(0);

    let time_limit = st
        .time_limit
        .as_deref()
        .and_then(|t| TimeLimit::parse(t).ok())
        .or_else(|| limit_of(&spec.time));

    let start = ts(&st.start_time);
    let end = ts(&st.end_time);
    let elapsed = match (state, start) {
        (JobState::Pending, _) | (_, None) => 0,
        (_, Some(s)) => {
            let until = if state.is_terminal() {
                end.unwrap_or(now)
            } else {
                now
            };
            until.as_second() - s.as_second()
        }
    };

    JobRow {
        namespace: bj.metadata.namespace.clone().unwrap_or_default(),
        account: spec
            .account
            .clone()
            .or_else(|| bj.metadata.namespace.clone())
            .unwrap_or_default(),
        name: bj.metadata.name.clone().unwrap_or_default(),
        job_id: st.job_id,
        array_job_id: st.array_job_id,
        array_task_id: st.array_task_id,
        array_task_str: None,
        array_record: false,
        job_name: bj.job_name().to_string(),
        user: annotations
            .get(labels::USER)
            .cloned()
            .unwrap_or_else(|| "unknown".to_string()),
        partition: st
            .partition
            .clone()
            .or(spec.partition.clone())
            .unwrap_or_default(),
        state,
        reason: st.reason.clone().unwrap_or_else(|| "None".to_string()),
        num_nodes: st.num_nodes.unwrap_or(nodes_req),
        num_cpus: st.num_cpus.unwrap_or(tasks_req * cpt),
        num_tasks: st.num_tasks.unwrap_or(tasks_req),
        num_gpus: st.num_gpus.unwrap_or(gpus_req),
        tres_per_node: per_node_gpus.map(|(t, n)| gres_tres(t, n)),
        tres_per_task: per_task_gpus.map(|(t, n)| gres_tres(t, n)),
        tres_per_job: job_gpus.map(|(t, n)| gres_tres(t, n)),
        node_list: st.node_list.clone().unwrap_or_default(),
        time_limit,
        submit_time: ts(&st.submit_time).or(bj.metadata.creation_timestamp.as_ref().map(|t| t.0)),
        // A job waiting for its --begin becomes eligible then (as Slurm shows it).
        eligible_time: ts(&st.eligible_time).or_else(|| {
            (state == JobState::Pending && st.reason.as_deref() == Some("BeginTime"))
                .then(|| spec.begin.as_ref().map(|b| b.0))
                .flatten()
        }),
        start_time: start,
        end_time: end,
        elapsed_secs: elapsed,
        dependency: spec.dependency.clone(),
        features: spec.constraint.clone(),
        exclusive: spec.exclusive.is_some_and(Exclusive::is_node),
        exclusive_user: spec.exclusive == Some(Exclusive::User),
        req_nodes: spec.nodelist.clone(),
        exc_nodes: spec.exclude.clone(),
        nice: spec.nice.unwrap_or(0),
        exit_code: st.exit_code.unwrap_or(0),
        exit_signal: st.exit_signal.unwrap_or(0),
        restarts: st.restarts.unwrap_or(0),
        requeue: spec.requeue.unwrap_or(true),
        cpus_per_task: cpt,
        ntasks_per_node: spec.ntasks_per_node,
        // The spec's, else the annotations older sbatch versions wrote.
        std_out: spec
            .output
            .clone()
            .or_else(|| annotations.get(labels::OUTPUT).cloned()),
        std_err: spec
            .error
            .clone()
            .or_else(|| annotations.get(labels::ERROR).cloned()),
        comment: annotations.get(labels::COMMENT).cloned(),
        work_dir: spec.chdir.clone(),
        batch_host: st
            .tasks
            .iter()
            .find(|t| t.rank == 0)
            .map(|t| t.node.clone()),
        message: st.message.clone(),
        mem: spec
            .mem
            .clone()
            .or(spec.mem_per_cpu.clone().map(|m| format!("{m}/cpu")))
            .or(spec.mem_per_gpu.clone().map(|m| format!("{m}/gpu"))),
    }
}

/// Compress sorted array indices the way Slurm's `bit_fmt` prints them (`1,3,5-7`).
pub fn index_list(indices: &BTreeSet<u32>) -> String {
    let mut parts = Vec::new();
    let mut iter = indices.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().unwrap_or(end);
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// Rows for a set of BatchJobs: array elements get `ARRAYID_INDEX` ids and, unless
/// `one_per_element`, an array's pending indices (elements not yet created, and pending
/// elements) are combined into one `ARRAYID_[LIST]` record as squeue shows them.
pub fn job_rows(jobs: &[BatchJob], now: Timestamp, one_per_element: bool) -> Vec<JobRow> {
    // Elements by parent name (namespace, parent).
    let mut elements: BTreeMap<(String, String), Vec<&BatchJob>> = BTreeMap::new();
    for bj in jobs {
        if let Some(parent) = bj
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::ARRAY_PARENT))
        {
            let ns = bj.metadata.namespace.clone().unwrap_or_default();
            elements.entry((ns, parent.clone())).or_default().push(bj);
        }
    }

    let mut rows = Vec::new();
    for bj in jobs {
        let is_element = bj
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(labels::ARRAY_PARENT));
        let array_spec = int_or_str(&bj.spec.array);
        let mut row = job_row(bj, now);
        if is_element {
            if one_per_element || row.state != JobState::Pending {
                rows.push(row);
            }
            continue;
        }
        let Some(spec) = array_spec else {
            rows.push(row);
            continue;
        };
        // An array parent: the record of its pending indices.
        let key = (row.namespace.clone(), row.name.clone());
        let kids = elements.get(&key).cloned().unwrap_or_default();
        let Ok(ArraySpec {
            indices: all,
            max_running: throttle,
        }) = ArraySpec::parse(&spec)
        else {
            rows.push(row);
            continue;
        };
        let created: BTreeSet<u32> = kids
            .iter()
            .filter_map(|k| k.status.as_ref().and_then(|s| s.array_task_id))
            .collect();
        let pending_kids: BTreeSet<u32> = kids
            .iter()
            .filter(|k| k.state() == JobState::Pending)
            .filter_map(|k| k.status.as_ref().and_then(|s| s.array_task_id))
            .collect();
        let mut pending: BTreeSet<u32> = all.into_iter().filter(|i| !created.contains(i)).collect();
        if !one_per_element {
            pending.extend(pending_kids);
        }
        let summary_says_none = bj
            .status
            .as_ref()
            .and_then(|s| s.array_tasks.as_ref())
            .is_some_and(|a| a.pending == 0);
        if pending.is_empty() || summary_says_none {
            continue;
        }
        row.array_job_id = row.array_job_id.or(row.job_id);
        row.array_record = true;
        // Indices not started while `%N` elements are active wait for the throttle, as
        // Slurm says (the array's own reason is about its running elements).
        let active = kids.iter().filter(|k| !k.state().is_terminal()).count();
        if throttle.is_some_and(|t| active >= t as usize) {
            row.reason = "JobArrayTaskLimit".to_string();
        }
        if one_per_element {
            for i in pending {
                let mut r = row.clone();
                r.state = JobState::Pending;
                r.array_task_id = Some(i);
                r.elapsed_secs = 0;
                rows.push(r);
            }
        } else {
            let mut s = index_list(&pending);
            if let Some(t) = throttle {
                s.push_str(&format!("%{t}"));
            }
            row.array_task_str = Some(s);
            row.state = if row.state.is_terminal() {
                row.state
            } else {
                JobState::Pending
            };
            row.elapsed_secs = 0;
            rows.push(row);
        }
    }
    rows
}

/// Node states as sinfo names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeState {
    /// Unusable: not Ready, or no healthy GPU.
    Down,
    /// Nothing allocated.
    Idle,
    /// Fully allocated.
    Allocated,
    /// Partly allocated.
    Mixed,
    /// Cordoned, nothing allocated.
    Drained,
    /// Cordoned with jobs still on it.
    Draining,
}

impl NodeState {
    /// sinfo's `%t` (compact) name.
    pub fn compact(self) -> &'static str {
        match self {
            NodeState::Down => "down",
            NodeState::Idle => "idle",
            NodeState::Allocated => "alloc",
            NodeState::Mixed => "mix",
            NodeState::Drained => "drain",
            NodeState::Draining => "drng",
        }
    }

    /// sinfo's `%T` (long) name.
    pub fn long(self) -> &'static str {
        match self {
            NodeState::Down => "down",
            NodeState::Idle => "idle",
            NodeState::Allocated => "allocated",
            NodeState::Mixed => "mixed",
            NodeState::Drained => "drained",
            NodeState::Draining => "draining",
        }
    }

    /// Slurm's numeric state (base state plus the DRAIN flag), whose descending order is
    /// sinfo's default state order.
    pub fn slurm_value(self) -> u32 {
        const DRAIN: u32 = 0x200;
        match self {
            NodeState::Down => 1,
            NodeState::Idle => 2,
            NodeState::Allocated => 3,
            NodeState::Mixed => 5,
            NodeState::Drained => 2 | DRAIN,
            NodeState::Draining => 3 | DRAIN,
        }
    }

    /// Whether a `-t` state name selects this state.
    pub fn matches(self, name: &str) -> bool {
        let n = name.to_ascii_lowercase();
        match self {
            NodeState::Down => n == "down",
            NodeState::Idle => n == "idle",
            NodeState::Allocated => matches!(n.as_str(), "alloc" | "allocated"),
            NodeState::Mixed => matches!(n.as_str(), "mix" | "mixed"),
            NodeState::Drained => matches!(n.as_str(), "drain" | "drained"),
            NodeState::Draining => matches!(n.as_str(), "drain" | "draining" | "drng"),
        }
    }
}

/// What sinfo and scontrol show of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRow {
    /// Node name.
    pub name: String,
    /// State.
    pub state: NodeState,
    /// The node's kubelet is not reporting Ready (Slurm's `*` suffix).
    pub not_responding: bool,
    /// Allocatable CPUs.
    pub cpus: u32,
    /// CPUs held by running jobs.
    pub cpus_alloc: u32,
    /// Allocatable memory, MB.
    pub memory_mb: u64,
    /// Memory held by running jobs, MB.
    pub memory_alloc_mb: u64,
    /// Allocatable ephemeral storage, MB (Slurm's TmpDisk).
    pub tmp_disk_mb: u64,
    /// GPUs.
    pub gpus: u32,
    /// GPUs held by running jobs.
    pub gpus_alloc: u32,
    /// GPU type as a Slurm gres type (`h100`).
    pub gpu_type: Option<String>,
    /// Features (labels `muster.dev/feature.NAME`).
    pub features: Vec<String>,
    /// Why the node is down or drained.
    pub reason: Option<String>,
    /// Partitions that hold the node.
    pub partitions: Vec<String>,
    /// Architecture label.
    pub arch: Option<String>,
    /// Kernel/OS as the kubelet reports it.
    pub os: Option<String>,
}

impl NodeRow {
    /// The state with Slurm's suffix for a node that does not respond (`down*`).
    pub fn compact_state(&self) -> String {
        format!(
            "{}{}",
            self.state.compact(),
            if self.not_responding { "*" } else { "" }
        )
    }

    /// Slurm's numeric node state with the NO_RESPOND flag (sinfo sorts on it).
    pub fn slurm_value(&self) -> u32 {
        const NO_RESPOND: u32 = 0x800;
        self.state.slurm_value() | if self.not_responding { NO_RESPOND } else { 0 }
    }

    /// The long state with the same suffix.
    pub fn long_state(&self) -> String {
        format!(
            "{}{}",
            self.state.long(),
            if self.not_responding { "*" } else { "" }
        )
    }

    /// GPUs as Slurm's Gres (`gpu:h100:8`), or `(null)`.
    pub fn gres(&self) -> String {
        match (self.gpus, &self.gpu_type) {
            (0, _) => "(null)".to_string(),
            (n, Some(t)) => format!("gpu:{t}:{n}"),
            (n, None) => format!("gpu:{n}"),
        }
    }
}

/// A Slurm gres type from an NVML model name: the model family in lower case
/// (`NVIDIA H100 80GB HBM3` → `h100`, `NVIDIA A100-SXM4-80GB` → `a100`,
/// `Tesla V100-SXM2-16GB` → `v100`, `NVIDIA GeForce RTX 4090` → `rtx4090`).
pub fn gres_type(model: &str) -> Option<String> {
    let words: Vec<String> = model
        .split(|c: char| c.is_whitespace() || c == '-' || c == '_')
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .filter(|w| !matches!(w.as_str(), "nvidia" | "tesla" | "geforce" | "quadro"))
        .collect();
    let first = words.first()?;
    if matches!(first.as_str(), "rtx" | "gtx") {
        return Some(format!(
            "{first}{}",
            words.get(1).map(String::as_str).unwrap_or("")
        ));
    }
    Some(first.clone())
}

/// Whether `labels` satisfy a Kubernetes label selector (empty selector: everything).
pub fn selector_matches(
    sel: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(sel) = sel else { return true };
    if let Some(ml) = &sel.match_labels
        && ml.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for e in sel.match_expressions.iter().flatten() {
        let vals = e.values.clone().unwrap_or_default();
        let have = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => have.is_some_and(|v| vals.contains(v)),
            "NotIn" => have.is_none_or(|v| !vals.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// What sinfo and scontrol show of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartRow {
    /// Name.
    pub name: String,
    /// The default partition.
    pub default: bool,
    /// `up`, `down`, `drain` or `inactive`.
    pub avail: String,
    /// Longest time limit (`None`: unlimited).
    pub max_time: Option<TimeLimit>,
    /// Default time limit (`None`: not set).
    pub default_time: Option<TimeLimit>,
    /// Fewest nodes per job.
    pub min_nodes: Option<u32>,
    /// Most nodes per job.
    pub max_nodes: Option<u32>,
    /// Priority tier.
    pub priority_tier: u32,
    /// Preemption mode (`OFF`, `REQUEUE`, `CANCEL`).
    pub preempt_mode: String,
    /// Namespaces allowed (empty: all).
    pub allowed_namespaces: Vec<String>,
    /// Nodes in the partition, sorted.
    pub nodes: Vec<String>,
}

fn node_ready(node: &k8s_openapi::api::core::v1::Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn quantity_u64(
    q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Option<f64> {
    let s = q?.0.trim();
    let (num, mult) = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("m", 1e-3),
    ]
    .iter()
    .find_map(|(suf, m)| s.strip_suffix(suf).map(|n| (n, *m)))
    .unwrap_or((s, 1.0));
    num.parse::<f64>().ok().map(|n| n * mult)
}

fn partition_avail(p: &muster_crds::v1alpha1::Partition) -> String {
    use muster_crds::v1alpha1::PartitionState;
    match p.state() {
        PartitionState::Up => "up",
        PartitionState::Down => "down",
        PartitionState::Drain => "drain",
        PartitionState::Inactive => "inactive",
    }
    .to_string()
}

/// Build partition and node rows from the cluster's objects.
pub fn cluster_rows(
    partitions: &[muster_crds::v1alpha1::Partition],
    nodes: &[k8s_openapi::api::core::v1::Node],
    gpunodes: &[muster_crds::v1alpha1::GpuNode],
    jobs: &[BatchJob],
) -> (Vec<PartRow>, Vec<NodeRow>) {
    use muster_crds::v1alpha1::PreemptMode;

    let mut part_rows: Vec<PartRow> = partitions
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let mut members: Vec<String> = nodes
                .iter()
                .filter(|n| {
                    selector_matches(
                        p.spec.node_selector.as_ref(),
                        &n.metadata.labels.clone().unwrap_or_default(),
                    )
                })
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            members.sort();
            PartRow {
                name,
                default: p.spec.default.unwrap_or(false),
                avail: partition_avail(p),
                max_time: limit_of(&p.spec.max_time),
                default_time: limit_of(&p.spec.default_time),
                min_nodes: p.spec.min_nodes,
                max_nodes: p.spec.max_nodes,
                priority_tier: p.spec.priority_tier.unwrap_or(1),
                preempt_mode: match p.spec.preempt_mode.unwrap_or_default() {
                    PreemptMode::None => "OFF",
                    PreemptMode::Requeue => "REQUEUE",
                    PreemptMode::Cancel => "CANCEL",
                }
                .to_string(),
                allowed_namespaces: p.spec.allowed_namespaces.clone(),
                nodes: members,
            }
        })
        .collect();
    part_rows.sort_by(|a, b| a.name.cmp(&b.name));

    // Allocations of jobs that hold resources.
    // GPUs by index, so a GPU that tasks of one job share counts once.
    let mut gpus_alloc: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut cpus_alloc: BTreeMap<String, u64> = BTreeMap::new();
    let mut mem_alloc: BTreeMap<String, u64> = BTreeMap::new();
    let mut exclusive: BTreeSet<String> = BTreeSet::new();
    for j in jobs {
        if !matches!(j.state(), JobState::Running | JobState::Completing) {
            continue;
        }
        for t in j.status.iter().flat_map(|s| s.tasks.iter()) {
            gpus_alloc
                .entry(t.node.clone())
                .or_default()
                .extend(t.gpus.iter().copied());
            *cpus_alloc.entry(t.node.clone()).or_default() += t.cpu_millis;
            *mem_alloc.entry(t.node.clone()).or_default() += t.memory_mib;
            if j.spec.exclusive.is_some_and(Exclusive::is_node) {
                exclusive.insert(t.node.clone());
            }
        }
    }

    let mut node_rows: Vec<NodeRow> = nodes
        .iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let labels_map = n.metadata.labels.clone().unwrap_or_default();
            let gn = gpunodes
                .iter()
                .find(|g| g.metadata.name.as_deref() == Some(name.as_str()));
            let alloc = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
            let cap = n.status.as_ref().and_then(|s| s.capacity.as_ref());
            let cpus = quantity_u64(alloc.and_then(|a| a.get("cpu"))).unwrap_or(0.0) as u32;
            let tmp_disk_mb = (quantity_u64(alloc.and_then(|a| a.get("ephemeral-storage")))
                .unwrap_or(0.0)
                / 1048576.0) as u64;
            let memory_mb = (quantity_u64(alloc.and_then(|a| a.get("memory"))).unwrap_or(0.0)
                / 1048576.0) as u64;
            let gpus = gn
                .and_then(|g| g.status.as_ref())
                .map(|s| s.gpu_count)
                .or_else(|| {
                    labels_map
                        .get(labels::NODE_GPU_COUNT)
                        .and_then(|c| c.parse().ok())
                })
                .or_else(|| {
                    quantity_u64(cap.and_then(|c| c.get("nvidia.com/gpu"))).map(|g| g as u32)
                })
                .unwrap_or(0);
            let model = gn
                .and_then(|g| g.status.as_ref())
                .and_then(|s| s.gpus.first())
                .map(|g| g.model.clone())
                .or_else(|| labels_map.get(labels::NODE_GPU_PRODUCT).cloned())
                .or_else(|| labels_map.get("nvidia.com/gpu.product").cloned());
            let mut features: Vec<String> = labels_map
                .iter()
                .filter_map(|(k, v)| {
                    k.strip_prefix(labels::NODE_FEATURE_PREFIX)
                        .filter(|_| v != "false")
                        .map(str::to_string)
                })
                .collect();
            features.sort();

            let ready = node_ready(n);
            let healthy = gn.and_then(|g| g.status.as_ref()).map(|s| s.healthy_gpus);
            let all_gpus_bad = gpus > 0 && healthy == Some(0) && gn.is_some();
            let cordoned = n
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
            let g_alloc = gpus_alloc.get(&name).map_or(0, |g| g.len() as u32);
            let c_alloc_millis = cpus_alloc.get(&name).copied().unwrap_or(0);
            let c_alloc = c_alloc_millis.div_ceil(1000) as u32;
            let busy = g_alloc > 0 || c_alloc_millis > 0 || exclusive.contains(&name);
            let full = exclusive.contains(&name)
                || (gpus > 0 && g_alloc >= gpus)
                || (gpus == 0 && cpus > 0 && c_alloc >= cpus);
            let (state, reason) = if !ready {
                (NodeState::Down, Some("Not responding".to_string()))
            } else if all_gpus_bad {
                let why = gn
                    .and_then(|g| g.status.as_ref())
                    .and_then(|s| s.gpus.iter().find_map(|g| g.health.reason.clone()))
                    .unwrap_or_else(|| "GPUs unhealthy".to_string());
                (NodeState::Down, Some(why))
            } else if cordoned {
                let st = if busy {
                    NodeState::Draining
                } else {
                    NodeState::Drained
                };
                (st, Some("Cordoned".to_string()))
            } else if full {
                (NodeState::Allocated, None)
            } else if busy {
                (NodeState::Mixed, None)
            } else {
                (NodeState::Idle, None)
            };
            let partitions = part_rows
                .iter()
                .filter(|p| p.nodes.contains(&name))
                .map(|p| p.name.clone())
                .collect();
            let info = n.status.as_ref().and_then(|s| s.node_info.as_ref());
            NodeRow {
                name,
                state,
                not_responding: !ready,
                cpus,
                cpus_alloc: c_alloc,
                memory_mb,
                tmp_disk_mb,
                memory_alloc_mb: mem_alloc
                    .get(n.metadata.name.as_deref().unwrap_or(""))
                    .copied()
                    .unwrap_or(0),
                gpus,
                gpus_alloc: g_alloc,
                gpu_type: model.as_deref().and_then(gres_type),
                features,
                reason,
                partitions,
                arch: labels_map.get("kubernetes.io/arch").cloned(),
                os: info.map(|i| format!("{} {}", i.operating_system, i.kernel_version)),
            }
        })
        .collect();
    node_rows.sort_by(|a, b| a.name.cmp(&b.name));
    (part_rows, node_rows)
}
