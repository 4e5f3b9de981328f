//! `scontrol`: `show job|partition|node` in Slurm's key=value layout, `show hostnames|hostlist`
//! (no cluster needed), `hold`/`release`, `requeue`/`requeuehold`
//! ([`crate::scontrol_requeue`]) and `update` ([`crate::scontrol_update`]).

use clap::{Args, Subcommand, ValueEnum};
use jiff::tz::TimeZone;
use kube::Api;
use kube::api::{Patch, PatchParams};
use muster_crds::v1alpha1::{BatchJob, JobState};

use crate::Io;
use crate::cluster::Target;
use crate::format;
use crate::rows::{JobRow, NodeRow, NodeState, PartRow};
use muster_crds::slurm::{TimeLimit, hostlist};

/// `muster scontrol`
#[derive(Args, Clone, Debug, PartialEq, Eq)]
#[command(
    infer_long_args = true,
    infer_subcommands = true,
    about = "Show jobs, partitions and nodes; expand hostlists; hold, release, requeue and update jobs (Slurm's scontrol)"
)]
pub struct ScontrolArgs {
    /// One record per line.
    #[arg(short = 'o', long = "oneliner", global = true)]
    pub oneliner: bool,

    /// More detail: a running job's GPUs on each of its nodes (`GRES=gpu:h100:8(IDX:0-7)`).
    #[arg(short = 'd', long = "details", global = true)]
    pub details: bool,

    /// Look for jobs in every namespace (default: the current namespace).
    #[arg(
        short = 'a',
        long = "all",
        visible_alias = "all-namespaces",
        global = true
    )]
    pub all_namespaces: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: ScontrolCommand,
}

/// scontrol's commands.
#[derive(Subcommand, Clone, Debug, PartialEq, Eq)]
pub enum ScontrolCommand {
    /// Show jobs, partitions or nodes, or expand/compress a hostlist.
    Show {
        /// job, partition, node, hostnames or hostlist.
        #[arg(value_enum, ignore_case = true)]
        entity: Entity,
        /// A job id, partition or node name, or a hostlist (hostnames defaults to
        /// $SLURM_JOB_NODELIST).
        name: Option<String>,
    },
    /// Keep pending jobs from starting.
    Hold {
        /// Job ids, comma or space separated.
        #[arg(required = true, value_delimiter = ',')]
        job_ids: Vec<String>,
    },
    /// Let held jobs start.
    Release {
        /// Job ids, comma or space separated.
        #[arg(required = true, value_delimiter = ',')]
        job_ids: Vec<String>,
    },
    /// Run running or ended jobs again, under the same id (`--no-requeue` jobs refuse).
    Requeue {
        /// Job ids, comma or space separated (an array id: its started elements).
        #[arg(required = true, value_delimiter = ',')]
        job_ids: Vec<String>,
    },
    /// Requeue jobs and hold them (`scontrol release` lets them start).
    Requeuehold {
        /// Job ids, comma or space separated.
        #[arg(required = true, value_delimiter = ',')]
        job_ids: Vec<String>,
    },
    /// Write a job's batch script to `slurm-JOBID.sh`, to FILE, or to standard output (`-`):
    /// `write batch_script JOBID [FILE]`.
    Write {
        /// What to write (`batch_script`).
        #[arg(value_enum, ignore_case = true)]
        what: WriteWhat,
        /// The job.
        job_id: String,
        /// Where (default `slurm-JOBID.sh`; `-` for standard output).
        file: Option<String>,
    },
    /// Change what pending jobs ask for: `update JobId=12 TimeLimit=2:00:00 Partition=big`;
    /// or drain and resume nodes: `update NodeName=gpu[001-002] State=DRAIN Reason="bad fan"`,
    /// `State=RESUME` (administrators: it cordons and uncordons the Nodes).
    /// Keys: TimeLimit, Partition, JobName, NumNodes, NumTasks, Nice, Priority, Dependency,
    /// ExcNodeList, ReqNodeList, Features, Gres, Account, MinMemoryNode, StartTime, Requeue,
    /// ArrayTaskThrottle (an empty value clears an optional one). Once a job has started only
    /// Nice, Priority and Dependency change, and a running job's TimeLimit may be lowered; a
    /// whole array's update changes its pending elements and the ones it has yet to create.
    Update {
        /// JobId=ID[,ID...] and KEY=VALUE pairs.
        #[arg(required = true, num_args = 1.., value_name = "KEY=VALUE")]
        specs: Vec<String>,
    },
}

/// What `scontrol write` writes.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteWhat {
    /// The job's batch script.
    #[value(name = "batch_script")]
    BatchScript,
}

/// What `scontrol show` shows.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entity {
    /// Jobs.
    #[value(alias = "jobs", alias = "jobid")]
    Job,
    /// Partitions.
    #[value(alias = "partitions", alias = "part")]
    Partition,
    /// Nodes.
    #[value(alias = "nodes")]
    Node,
    /// One host name per line from a hostlist.
    #[value(alias = "hostname")]
    Hostnames,
    /// A hostlist from host names.
    Hostlist,
}

/// `scontrol show hostnames LIST`: one name per line.
pub fn hostnames(list: &str) -> Result<String, String> {
    let names = hostlist::expand(list).map_err(|e| e.to_string())?;
    Ok(names.iter().map(|n| format!("{n}\n")).collect())
}

/// `scontrol show hostlist NAMES`: the compressed hostlist.
pub fn hostlist(names: &str) -> Result<String, String> {
    let expanded = hostlist::expand(names).map_err(|e| e.to_string())?;
    Ok(format!("{}\n", hostlist::compress(&expanded)))
}

fn time_or(t: Option<jiff::Timestamp>, tz: &TimeZone, none: &str) -> String {
    match t {
        Some(_) => format::timestamp(t, tz),
        None => none.to_string(),
    }
}

fn limit_long(l: Option<TimeLimit>) -> String {
    match l {
        None => "NONE".to_string(),
        Some(TimeLimit::Unlimited) => "UNLIMITED".to_string(),
        Some(l) => format::secs_long(l.seconds().unwrap_or(0) as i64),
    }
}

fn record(lines: Vec<String>, oneliner: bool) -> String {
    if oneliner {
        format!("{}\n", lines.join(" "))
    } else {
        let mut s = String::new();
        for (i, l) in lines.iter().enumerate() {
            if i > 0 {
                s.push_str("   ");
            }
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

/// One job in `scontrol show job`'s layout.
pub fn show_job(r: &JobRow, tz: &TimeZone, oneliner: bool) -> String {
    show_job_with(r, tz, oneliner, false)
}

/// `scontrol -d`'s lines for a job holding nodes: `JOB_GRES=`, then one `Nodes=` line per run
/// of nodes holding the same (Slurm's layout). The CPUs' ids are the kubelet's to choose and
/// not known here (`CPU_IDs=N/A`); `Mem=` is MiB, GRES the GPU indices on each node.
pub fn detail_lines(r: &JobRow) -> Vec<String> {
    if r.node_allocs.is_empty() || r.state.is_terminal() {
        return Vec::new();
    }
    let gpu = |n: usize| match &r.gpu_type {
        Some(t) => format!("gpu:{t}:{n}"),
        None => format!("gpu:{n}"),
    };
    let total: usize = r.node_allocs.iter().map(|a| a.gpus.len()).sum();
    let mut lines = vec![format!(
        "JOB_GRES={}",
        if total > 0 {
            gpu(total)
        } else {
            "(null)".into()
        }
    )];
    let mut runs: Vec<(Vec<&str>, &crate::rows::NodeAlloc)> = Vec::new();
    for a in &r.node_allocs {
        match runs.last_mut() {
            Some((names, last))
                if last.gpus == a.gpus
                    && last.memory_mib == a.memory_mib
                    && last.cpu_millis == a.cpu_millis =>
            {
                names.push(&a.node)
            }
            _ => runs.push((vec![&a.node], a)),
        }
    }
    for (names, a) in runs {
        let gres = if a.gpus.is_empty() {
            String::new()
        } else {
            format!(
                "{}(IDX:{})",
                gpu(a.gpus.len()),
                crate::rows::index_list(&a.gpus)
            )
        };
        lines.push(format!(
            "  Nodes={} CPU_IDs=N/A Mem={} GRES={gres}",
            muster_crds::slurm::hostlist::compress(names),
            a.memory_mib
        ));
    }
    lines
}

/// [`show_job`], with `scontrol -d`'s per-node lines when `details`.
pub fn show_job_with(r: &JobRow, tz: &TimeZone, oneliner: bool, details: bool) -> String {
    let id = r.job_id.map(|i| i.to_string()).unwrap_or("N/A".into());
    let mut first = format!("JobId={id}");
    if let Some(a) = r.array_job_id {
        first.push_str(&format!(" ArrayJobId={a}"));
        match (&r.array_task_str, r.array_task_id) {
            (Some(s), _) => first.push_str(&format!(" ArrayTaskId={s}")),
            (None, Some(t)) => first.push_str(&format!(" ArrayTaskId={t}")),
            _ => {}
        }
    }
    first.push_str(&format!(" JobName={}", r.job_name));
    let end = match (r.state, r.start_time, r.time_limit) {
        (s, _, _) if s.is_terminal() => r.end_time,
        (JobState::Running | JobState::Completing, Some(st), Some(TimeLimit::Minutes(m))) => {
            Some(st + jiff::SignedDuration::from_secs(i64::from(m) * 60))
        }
        _ => None,
    };
    let mut lines = vec![
        first,
        format!("UserId={}", r.user),
        format!(
            "Priority={} Nice={} Account={} QOS=(null)",
            r.priority.map(|p| p.to_string()).unwrap_or("N/A".into()),
            r.nice,
            r.account
        ),
        format!(
            "JobState={} Reason={} Dependency={}",
            r.state.as_str(),
            r.reason,
            r.dependency.as_deref().unwrap_or("(null)")
        ),
        format!(
            "Requeue={} Restarts={} ExitCode={}:{}",
            u8::from(r.requeue),
            r.restarts,
            r.exit_code,
            r.exit_signal
        ),
        format!(
            "RunTime={} TimeLimit={}",
            format::secs_long(r.elapsed_secs),
            match r.time_limit {
                None => "NOT_SET".to_string(),
                other => limit_long(other),
            }
        ),
        format!(
            "SubmitTime={} EligibleTime={}",
            time_or(r.submit_time, tz, "Unknown"),
            time_or(r.eligible_time, tz, "Unknown")
        ),
        format!(
            "StartTime={} EndTime={}",
            time_or(r.start_time, tz, "Unknown"),
            time_or(end, tz, "Unknown")
        ),
        format!("Partition={}", r.partition),
        format!(
            "ReqNodeList={} ExcNodeList={}",
            r.req_nodes.as_deref().unwrap_or("(null)"),
            r.exc_nodes.as_deref().unwrap_or("(null)")
        ),
        format!(
            "NodeList={}",
            if r.node_list.is_empty() {
                "(null)"
            } else {
                &r.node_list
            }
        ),
    ];
    if let Some(h) = &r.batch_host {
        lines.push(format!("BatchHost={h}"));
    }
    lines.push(format!(
        "NumNodes={} NumCPUs={} NumTasks={} CPUs/Task={}",
        r.num_nodes, r.num_cpus, r.num_tasks, r.cpus_per_task
    ));
    let mut tres = format!("cpu={},node={}", r.num_cpus, r.num_nodes);
    if r.num_gpus > 0 {
        tres.push_str(&format!(",gres/gpu={}", r.num_gpus));
    }
    lines.push(format!("TRES={tres}"));
    if details {
        lines.extend(detail_lines(r));
    }
    lines.push(format!(
        "Features={} OverSubscribe={}",
        r.features.as_deref().unwrap_or("(null)"),
        crate::squeue::oversubscribe(r)
    ));
    // Slurm's keys for --mem, --mem-per-cpu and --mem-per-gpu.
    if let Some(m) = &r.mem {
        lines.push(if let Some(c) = m.strip_suffix("/cpu") {
            format!("MinMemoryCPU={c}")
        } else if let Some(g) = m.strip_suffix("/gpu") {
            format!("MemPerTres=gres:gpu:{g}")
        } else {
            format!("MinMemoryNode={m}")
        });
    }
    // --chdir, when given (else the container's working directory, which Muster does not
    // know): relative output files are shown under it.
    let work_dir = r.work_dir.as_deref().filter(|d| d.starts_with('/'));
    if let Some(d) = &r.work_dir {
        lines.push(format!("WorkDir={d}"));
    }
    if let Some(c) = &r.comment {
        lines.push(format!("Comment={c}"));
    }
    // Slurm's patterns (`%j`, `%x`, …) expanded as scontrol does. Without --output the task
    // logs are the pods' (`muster logs`), so no file is named.
    let fields = muster_crds::slurm::fname::StdioFields {
        job_id: r.job_id.unwrap_or(0),
        array: r.array_job_id.zip(r.array_task_id),
        job_name: &r.job_name,
        user: &r.user,
        first_node: r.batch_host.as_deref(),
        work_dir,
    };
    let file = |p: Option<&str>| match p {
        Some(p) => muster_crds::slurm::fname::expand(p, &fields),
        None => "(pod log)".to_string(),
    };
    lines.push(format!(
        "StdErr={}",
        file(r.std_err.as_deref().or(r.std_out.as_deref()))
    ));
    lines.push(format!("StdOut={}", file(r.std_out.as_deref())));
    if let Some(t) = &r.tres_per_job {
        lines.push(format!("TresPerJob={t}"));
    }
    if let Some(t) = &r.tres_per_node {
        lines.push(format!("TresPerNode={t}"));
    }
    if let Some(t) = &r.tres_per_task {
        lines.push(format!("TresPerTask={t}"));
    }
    if let Some(m) = &r.message {
        lines.push(format!("Message={m}"));
    }
    lines.push(format!("BatchJob={}/{}", r.namespace, r.name));
    record(lines, oneliner)
}

/// One partition in `scontrol show partition`'s layout.
pub fn show_partition(p: &PartRow, nodes: &[NodeRow], oneliner: bool) -> String {
    let members: Vec<&NodeRow> = nodes.iter().filter(|n| p.nodes.contains(&n.name)).collect();
    let cpus: u32 = members.iter().map(|n| n.cpus).sum();
    let gpus: u32 = members.iter().map(|n| n.gpus).sum();
    let mem: u64 = members.iter().map(|n| n.memory_mb).sum();
    let mut tres = format!("cpu={cpus},mem={mem}M,node={}", members.len());
    if gpus > 0 {
        tres.push_str(&format!(",gres/gpu={gpus}"));
    }
    let lines = vec![
        format!("PartitionName={}", p.name),
        format!(
            "AllowAccounts={} Default={}",
            if p.allowed_namespaces.is_empty() {
                "ALL".to_string()
            } else {
                p.allowed_namespaces.join(",")
            },
            if p.default { "YES" } else { "NO" }
        ),
        format!("DefaultTime={}", limit_long(p.default_time)),
        format!(
            "MaxNodes={} MaxTime={} MinNodes={}",
            p.max_nodes
                .map(|n| n.to_string())
                .unwrap_or("UNLIMITED".into()),
            match p.max_time {
                None => "UNLIMITED".to_string(),
                other => limit_long(other),
            },
            p.min_nodes.unwrap_or(0)
        ),
        format!(
            "Nodes={}",
            if p.nodes.is_empty() {
                "(null)".to_string()
            } else {
                hostlist::compress_sorted(&p.nodes)
            }
        ),
        format!(
            "PriorityTier={} OverSubscribe=NO PreemptMode={}",
            p.priority_tier, p.preempt_mode
        ),
        format!(
            "State={} TotalCPUs={cpus} TotalNodes={}",
            p.avail.to_ascii_uppercase(),
            members.len()
        ),
        format!("TRES={tres}"),
    ];
    record(lines, oneliner)
}

fn scontrol_state(n: &NodeRow) -> String {
    let base = match n.state {
        NodeState::Down => "DOWN",
        NodeState::Idle => "IDLE",
        NodeState::Allocated => "ALLOCATED",
        NodeState::Mixed => "MIXED",
        NodeState::Drained => "IDLE+DRAIN",
        NodeState::Draining => "MIXED+DRAIN",
    };
    if n.not_responding {
        format!("{base}+NOT_RESPONDING")
    } else {
        base.to_string()
    }
}

/// One node in `scontrol show node`'s layout.
pub fn show_node(n: &NodeRow, tz: &TimeZone, oneliner: bool) -> String {
    let feats = if n.features.is_empty() {
        "(null)".to_string()
    } else {
        n.features.join(",")
    };
    let mut cfg = format!("cpu={},mem={}M", n.cpus, n.memory_mb);
    let mut alloc = format!("cpu={}", n.cpus_alloc);
    if n.memory_alloc_mb > 0 {
        alloc.push_str(&format!(",mem={}M", n.memory_alloc_mb));
    }
    if n.gpus > 0 {
        cfg.push_str(&format!(",gres/gpu={}", n.gpus));
        if n.gpus_alloc > 0 {
            alloc.push_str(&format!(",gres/gpu={}", n.gpus_alloc));
        }
    }
    let mut lines = vec![
        format!(
            "NodeName={} Arch={}",
            n.name,
            n.arch.as_deref().unwrap_or("(null)")
        ),
        format!("CPUAlloc={} CPUTot={}", n.cpus_alloc, n.cpus),
        format!("AvailableFeatures={feats}"),
        format!("ActiveFeatures={feats}"),
        format!("Gres={}", n.gres()),
        format!("NodeAddr={} NodeHostName={}", n.name, n.name),
    ];
    if let Some(os) = &n.os {
        lines.push(format!("OS={os}"));
    }
    lines.push(format!(
        "RealMemory={} AllocMem={}",
        n.memory_mb, n.memory_alloc_mb
    ));
    lines.push(format!("State={}", scontrol_state(n)));
    lines.push(format!(
        "Partitions={}",
        if n.partitions.is_empty() {
            "(null)".to_string()
        } else {
            n.partitions.join(",")
        }
    ));
    lines.push(format!("CfgTRES={cfg}"));
    lines.push(format!("AllocTRES={alloc}"));
    if let Some(r) = &n.reason {
        // Slurm's `Reason=bad fan [root@2026-12-01T19:58:46]`, when who and when are known.
        let by = match (&n.reason_user, n.reason_time) {
            (Some(u), Some(t)) => format!(" [{u}@{}]", format::timestamp(Some(t), tz)),
            (Some(u), None) => format!(" [{u}]"),
            (None, Some(t)) => format!(" [@{}]", format::timestamp(Some(t), tz)),
            (None, None) => String::new(),
        };
        lines.push(format!("Reason={r}{by}"));
    }
    record(lines, oneliner)
}

/// The single ids of scontrol's job id arguments ([`crate::rows::ids::expand`]); `None`
/// once a malformed one is reported.
pub(crate) fn job_ids(ids: &[String], io: &mut Io<'_>) -> anyhow::Result<Option<Vec<String>>> {
    match crate::rows::ids::expand(ids) {
        Ok(ids) => Ok(Some(ids)),
        Err(bad) => {
            writeln!(
                io.err,
                "scontrol: error: Invalid job id specified for job {bad}"
            )?;
            Ok(None)
        }
    }
}

/// Set `spec.hold` on the named pending jobs (merge patch). Errors are per job, as Slurm
/// reports them; the result is false if any failed.
async fn set_hold(
    cluster: &crate::cluster::Cluster,
    all: bool,
    ids: &[String],
    hold: bool,
    io: &mut Io<'_>,
) -> anyhow::Result<bool> {
    let jobs = crate::fetch::batchjobs(cluster, all).await?;
    let rows = crate::rows::job_rows(&jobs, jiff::Timestamp::now(), true);
    let mut ok = true;
    let Some(ids) = job_ids(ids, io)? else {
        return Ok(false);
    };
    for id in &ids {
        let id = id.as_str();
        let targets: Vec<&JobRow> = rows.iter().filter(|r| r.matches_id(id)).collect();
        if targets.is_empty() {
            writeln!(
                io.err,
                "scontrol: error: Invalid job id specified for job {id}"
            )?;
            ok = false;
            continue;
        }
        if id.contains('_') && targets.iter().all(|r| r.array_record) {
            writeln!(
                io.err,
                "scontrol: error: array index {id} has not started: hold or release the whole array"
            )?;
            ok = false;
            continue;
        }
        let mut seen = std::collections::BTreeSet::new();
        for r in targets {
            if !seen.insert((r.namespace.clone(), r.name.clone())) {
                continue;
            }
            if r.state != JobState::Pending {
                writeln!(
                    io.err,
                    "scontrol: error: Job is no longer pending execution for job {}",
                    r.id_string()
                )?;
                ok = false;
                continue;
            }
            let api: Api<BatchJob> = Api::namespaced(cluster.client.clone(), &r.namespace);
            let patch = serde_json::json!({ "spec": { "hold": hold } });
            api.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
    }
    Ok(ok)
}

/// Run `muster scontrol`.
pub async fn run(args: &ScontrolArgs, target: &Target<'_>, io: &mut Io<'_>) -> anyhow::Result<()> {
    let tz = TimeZone::system();
    match &args.command {
        ScontrolCommand::Show {
            entity: Entity::Hostnames,
            name,
        } => {
            let list = name
                .clone()
                .or_else(|| (io.env)("SLURM_JOB_NODELIST"))
                .ok_or_else(|| {
                    anyhow::anyhow!("host list is empty (give one or set SLURM_JOB_NODELIST)")
                })?;
            write!(
                io.out,
                "{}",
                hostnames(&list).map_err(|e| anyhow::anyhow!(e))?
            )?;
            Ok(())
        }
        ScontrolCommand::Show {
            entity: Entity::Hostlist,
            name,
        } => {
            let list = name
                .clone()
                .ok_or_else(|| anyhow::anyhow!("host list is empty"))?;
            write!(
                io.out,
                "{}",
                hostlist(&list).map_err(|e| anyhow::anyhow!(e))?
            )?;
            Ok(())
        }
        ScontrolCommand::Show {
            entity: Entity::Job,
            name,
        } => {
            let cluster = target.cluster(io.env).await?;
            let jobs = crate::fetch::batchjobs(&cluster, args.all_namespaces).await?;
            let mut rows = crate::rows::job_rows(&jobs, jiff::Timestamp::now(), true);
            rows.sort_by_key(|r| (r.job_id, r.array_task_id));
            if let Some(id) = name {
                rows.retain(|r| r.matches_id(id));
                if rows.is_empty() {
                    writeln!(io.err, "{}", crate::squeue::NO_SUCH_JOB)?;
                    return Err(crate::Failed.into());
                }
            } else if rows.is_empty() {
                writeln!(io.out, "No jobs in the system")?;
                return Ok(());
            }
            let text: Vec<String> = rows
                .iter()
                .map(|r| show_job_with(r, &tz, args.oneliner, args.details))
                .collect();
            write!(io.out, "{}", join_records(&text, args.oneliner))?;
            Ok(())
        }
        ScontrolCommand::Show { entity, name } => {
            let cluster = target.cluster(io.env).await?;
            let partitions = crate::fetch::partitions(&cluster).await?;
            let nodes = crate::fetch::nodes(&cluster).await?;
            let gpunodes = crate::fetch::gpunodes(&cluster).await;
            let jobs = crate::fetch::batchjobs_all_or_own(&cluster).await?;
            let (parts, node_rows) =
                crate::rows::cluster_rows(&partitions, &nodes, &gpunodes, &jobs);
            let text: Vec<String> = if *entity == Entity::Partition {
                let sel: Vec<&PartRow> = parts
                    .iter()
                    .filter(|p| {
                        name.as_ref().is_none_or(|n| {
                            crate::sbatch::manifest::partition_object_name(n) == p.name
                        })
                    })
                    .collect();
                if sel.is_empty() {
                    match name {
                        Some(n) => {
                            // Slurm's words, unprefixed.
                            writeln!(io.err, "Partition {n} not found")?;
                            return Err(crate::Failed.into());
                        }
                        None => {
                            writeln!(io.out, "No partitions in the system")?;
                            return Ok(());
                        }
                    }
                }
                sel.iter()
                    .map(|p| show_partition(p, &node_rows, args.oneliner))
                    .collect()
            } else {
                let wanted = match name {
                    Some(n) => Some(hostlist::expand(n)?),
                    None => None,
                };
                let sel: Vec<&NodeRow> = node_rows
                    .iter()
                    .filter(|n| wanted.as_ref().is_none_or(|w| w.contains(&n.name)))
                    .collect();
                if sel.is_empty() {
                    match name {
                        Some(n) => {
                            writeln!(io.err, "Node {n} not found")?;
                            return Err(crate::Failed.into());
                        }
                        None => {
                            writeln!(io.out, "No nodes in the system")?;
                            return Ok(());
                        }
                    }
                }
                sel.iter()
                    .map(|n| show_node(n, &tz, args.oneliner))
                    .collect()
            };
            write!(io.out, "{}", join_records(&text, args.oneliner))?;
            Ok(())
        }
        ScontrolCommand::Update { specs } if crate::scontrol_node::is_node_update(specs) => {
            let update = match crate::scontrol_node::parse(specs) {
                Ok(u) => u,
                Err(e) => {
                    writeln!(io.err, "scontrol: error: {e}")?;
                    return Err(crate::Failed.into());
                }
            };
            let cluster = target.cluster(io.env).await?;
            if !crate::scontrol_node::run(&cluster, &update, io).await? {
                return Err(crate::Failed.into());
            }
            Ok(())
        }
        ScontrolCommand::Update { specs } => {
            let update = match crate::scontrol_update::parse(specs) {
                Ok(u) => u,
                Err(e) => {
                    writeln!(io.err, "scontrol: error: {e}")?;
                    return Err(crate::Failed.into());
                }
            };
            let cluster = target.cluster(io.env).await?;
            if !crate::scontrol_update::run(&cluster, args.all_namespaces, &update, io).await? {
                return Err(crate::Failed.into());
            }
            Ok(())
        }
        ScontrolCommand::Requeue { job_ids } | ScontrolCommand::Requeuehold { job_ids } => {
            let hold = matches!(args.command, ScontrolCommand::Requeuehold { .. });
            let cluster = target.cluster(io.env).await?;
            if !crate::scontrol_requeue::run(&cluster, args.all_namespaces, job_ids, hold, io)
                .await?
            {
                return Err(crate::Failed.into());
            }
            Ok(())
        }
        ScontrolCommand::Write { job_id, file, .. } => {
            let cluster = target.cluster(io.env).await?;
            if !crate::scontrol_write::run(
                &cluster,
                args.all_namespaces,
                job_id,
                file.as_deref(),
                io,
            )
            .await?
            {
                return Err(crate::Failed.into());
            }
            Ok(())
        }
        ScontrolCommand::Hold { job_ids } | ScontrolCommand::Release { job_ids } => {
            let hold = matches!(args.command, ScontrolCommand::Hold { .. });
            let cluster = target.cluster(io.env).await?;
            if !set_hold(&cluster, args.all_namespaces, job_ids, hold, io).await? {
                return Err(crate::Failed.into());
            }
            Ok(())
        }
    }
}

/// Records are separated by a blank line (none with --oneliner).
pub fn join_records(records: &[String], oneliner: bool) -> String {
    if oneliner {
        records.concat()
    } else {
        records.join("\n") + if records.is_empty() { "" } else { "\n" }
    }
}
