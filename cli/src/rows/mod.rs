//! Plain rows the output commands format: one per job (here), node and partition
//! (`nodes.rs`), built from the Kubernetes objects by pure functions (time is an argument), so
//! every table is testable without a cluster.

pub mod ids;
mod nodes;

pub use nodes::*;

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
    /// The priority the scheduler orders the job by (`status.priority`), once computed.
    pub priority: Option<u32>,
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
    /// What the job holds on each node, in rank order (`scontrol -d show job`).
    pub node_allocs: Vec<NodeAlloc>,
    /// The GPU type asked for, if any (`h100` of `--gpus-per-node=h100:8`).
    pub gpu_type: Option<String>,
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

/// An int-or-string field as its text.
pub(crate) fn int_or_str(
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

/// What a job holds on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeAlloc {
    /// The node.
    pub node: String,
    /// CPU millicores of its tasks there.
    pub cpu_millis: u64,
    /// Memory of its tasks there, MiB.
    pub memory_mib: u64,
    /// The node's GPU indices its tasks hold.
    pub gpus: BTreeSet<u32>,
}

/// Per node, in rank order, what the tasks hold.
fn node_allocs(tasks: &[muster_crds::v1alpha1::TaskAllocation]) -> Vec<NodeAlloc> {
    let mut ranked: Vec<&muster_crds::v1alpha1::TaskAllocation> = tasks.iter().collect();
    ranked.sort_by_key(|t| t.rank);
    let mut out: Vec<NodeAlloc> = Vec::new();
    for t in ranked {
        let i = match out.iter().position(|a| a.node == t.node) {
            Some(i) => i,
            None => {
                out.push(NodeAlloc {
                    node: t.node.clone(),
                    ..Default::default()
                });
                out.len() - 1
            }
        };
        let a = &mut out[i];
        a.cpu_millis += t.cpu_millis;
        a.memory_mib += t.memory_mib;
        a.gpus.extend(t.gpus.iter().copied());
    }
    out
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

    let gpu_type = spec.gpu_type.clone().or_else(|| {
        [&per_node_gpus, &per_task_gpus, &job_gpus]
            .into_iter()
            .find_map(|g| g.as_ref().and_then(|(t, _)| t.clone()))
    });
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
            // A status from before the operator moved a pending job's start to its end
            // (its start was the estimate) could end before it starts.
            (until.as_second() - s.as_second()).max(0)
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
        priority: st.priority,
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
        node_allocs: node_allocs(&st.tasks),
        gpu_type,
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
        // Indices not started wait for the throttle only while `%N` elements run, as Slurm
        // says; before that they wait for what the first of them waits for (the array's own
        // reason: `Priority`, `Resources`), created or not (checked against Slurm 22.05).
        let running = kids
            .iter()
            .filter(|k| !k.state().is_terminal() && k.state() != JobState::Pending)
            .count();
        if throttle.is_some_and(|t| running >= t as usize) {
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
