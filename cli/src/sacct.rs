//! `sacct`: accounting from job status — JobID, JobName, Partition, State, ExitCode
//! (`code:signal`), Elapsed, NNodes, NodeList and more, in sacct's fixed-width or parsable
//! layouts.

// The option docs are clap's help text, in Slurm's own notation (`[TYPE:]COUNT`), which
// rustdoc would read as links.
#![allow(rustdoc::broken_intra_doc_links)]

use clap::Args;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use muster_crds::v1alpha1::JobState;

use crate::Io;
use crate::cluster::Target;
use crate::format;
use crate::rows::JobRow;
use crate::squeue::{Filter, parse_states};
use muster_crds::slurm::TimeLimit;

/// sacct's default fields.
pub const DEFAULT_FIELDS: &str = "jobid,jobname,partition,account,alloccpus,state,exitcode";
/// `sacct -b`.
pub const BRIEF_FIELDS: &str = "jobid,state,exitcode";

/// `muster sacct`
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
#[command(
    infer_long_args = true,
    args_override_self = true,
    about = "Show accounting data of jobs (Slurm's sacct)"
)]
pub struct SacctArgs {
    /// Only jobs charged to these accounts.
    #[arg(
        short = 'A',
        long = "accounts",
        value_name = "ACCOUNTS",
        value_delimiter = ','
    )]
    pub accounts: Vec<String>,

    /// Every user's jobs (default: mine, unless -j or -u is given).
    #[arg(short = 'a', long = "allusers")]
    pub allusers: bool,

    /// Look in every namespace (default: the current namespace).
    #[arg(long = "all-namespaces")]
    pub all_namespaces: bool,

    /// Brief listing: jobid, state, exitcode.
    #[arg(short = 'b', long = "brief")]
    pub brief: bool,

    /// What separates fields with -p or -P (default `|`).
    #[arg(long = "delimiter", value_name = "CHARS")]
    pub delimiter: Option<String>,

    /// List the fields -o takes, and do nothing else.
    #[arg(short = 'e', long = "helpformat")]
    pub helpformat: bool,

    /// Jobs that ended (or run) before this time (YYYY-MM-DD[THH:MM[:SS]] or now).
    #[arg(short = 'E', long = "endtime", value_name = "TIME")]
    pub endtime: Option<String>,

    /// Fields to show, comma separated, each with an optional %WIDTH.
    #[arg(
        short = 'o',
        long = "format",
        value_name = "FIELDS",
        env = "SACCT_FORMAT"
    )]
    pub format: Option<String>,

    /// Only these job ids (`123`, `123_4`).
    #[arg(
        short = 'j',
        long = "jobs",
        value_name = "JOB_IDS",
        value_delimiter = ','
    )]
    pub jobs: Vec<String>,

    /// Only these job names.
    #[arg(long = "name", value_name = "NAMES", value_delimiter = ',')]
    pub names: Vec<String>,

    /// No header.
    #[arg(short = 'n', long = "noheader")]
    pub noheader: bool,

    /// `|` after every field.
    #[arg(short = 'p', long = "parsable")]
    pub parsable: bool,

    /// `|` between fields.
    #[arg(short = 'P', long = "parsable2")]
    pub parsable2: bool,

    /// Only these partitions.
    #[arg(
        short = 'r',
        long = "partition",
        value_name = "PARTITIONS",
        value_delimiter = ','
    )]
    pub partitions: Vec<String>,

    /// Only these states.
    #[arg(
        short = 's',
        long = "state",
        value_name = "STATES",
        value_delimiter = ','
    )]
    pub states: Vec<String>,

    /// Jobs that ran (or were eligible) after this time (default: midnight today, or the
    /// beginning of time with -j).
    #[arg(short = 'S', long = "starttime", value_name = "TIME")]
    pub starttime: Option<String>,

    /// Only these users.
    #[arg(
        short = 'u',
        long = "user",
        visible_alias = "uid",
        value_name = "USERS",
        value_delimiter = ','
    )]
    pub users: Vec<String>,

    /// Allocations only (Muster jobs have no steps; accepted for compatibility).
    #[arg(short = 'X', long = "allocations")]
    pub allocations: bool,
}

/// One sacct field: canonical name, default width (negative: left-justified).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// Canonical name (`JobID`).
    pub name: &'static str,
    /// Width; negative is left-justified, as in sacct's field table.
    pub width: i32,
}

const COLUMNS: &[(&str, i32)] = &[
    ("Account", 10),
    ("AllocCPUS", 10),
    ("AllocNodes", 10),
    ("AllocTRES", -10),
    ("Comment", 15),
    ("Constraints", 19),
    ("CPUTime", 10),
    ("CPUTimeRAW", 10),
    ("DerivedExitCode", 15),
    ("Elapsed", 10),
    ("ElapsedRaw", 10),
    ("Eligible", 19),
    ("End", 19),
    ("ExitCode", 8),
    ("JobID", -12),
    ("JobIDRaw", -12),
    ("JobName", 10),
    ("NCPUS", 10),
    ("NNodes", 8),
    ("NodeList", 15),
    ("NTasks", 8),
    ("Partition", 10),
    ("Priority", 10),
    ("Reason", 22),
    ("ReqTRES", -10),
    ("Restarts", 8),
    ("Start", 19),
    ("State", 10),
    ("Submit", 19),
    ("Timelimit", 10),
    ("TimelimitRaw", 10),
    ("User", 9),
    ("WorkDir", 20),
];

/// Parse `-o`: names (any case), each optionally `%WIDTH`.
pub fn parse_columns(spec: &str) -> Result<Vec<Column>, String> {
    spec.split(',')
        .filter(|f| !f.trim().is_empty())
        .map(|f| {
            let (name, width) = match f.trim().split_once('%') {
                Some((n, w)) => (
                    n,
                    Some(
                        w.parse::<i32>()
                            .map_err(|_| format!("Invalid field width in {f}"))?,
                    ),
                ),
                None => (f.trim(), None),
            };
            let (canon, default) = COLUMNS
                .iter()
                .find(|(c, _)| c.eq_ignore_ascii_case(name))
                .ok_or_else(|| format!("Invalid field requested: \"{name}\""))?;
            let width = match width {
                // A given width keeps the default's justification.
                Some(w) => w.abs() * default.signum(),
                None => *default,
            };
            Ok(Column { name: canon, width })
        })
        .collect()
}

fn date(t: Option<Timestamp>, tz: &TimeZone) -> String {
    match t {
        Some(_) => format::timestamp(t, tz),
        None => "Unknown".to_string(),
    }
}

fn tres(cpus: u32, gpus: u32, nodes: u32) -> String {
    let mut s = format!("cpu={cpus}");
    if gpus > 0 {
        s.push_str(&format!(",gres/gpu={gpus}"));
    }
    s.push_str(&format!(",node={nodes}"));
    s
}

fn cpu_secs(r: &JobRow, started: bool) -> i64 {
    if started {
        i64::from(r.num_cpus) * r.elapsed_secs
    } else {
        0
    }
}

/// The value of one field for a job.
pub fn value(col: &str, r: &JobRow, tz: &TimeZone) -> String {
    // Given an allocation: a job cancelled while pending has a start time (its end, as
    // Slurm records it) but no nodes, and Slurm counts none of its CPUs.
    let started = r.state != JobState::Pending && r.start_time.is_some() && !r.node_list.is_empty();
    match col {
        "Account" => r.account.clone(),
        "AllocCPUS" | "NCPUS" => if started { r.num_cpus } else { 0 }.to_string(),
        "AllocNodes" => if started { r.num_nodes } else { 0 }.to_string(),
        "AllocTRES" => {
            if started {
                tres(r.num_cpus, r.num_gpus, r.num_nodes)
            } else {
                String::new()
            }
        }
        "Comment" => r.comment.clone().unwrap_or_default(),
        "Constraints" => r.features.clone().unwrap_or_default(),
        // CPUs held times the time held, as sacct's CPUTime.
        "CPUTime" => format::secs_long(cpu_secs(r, started)),
        "CPUTimeRAW" => cpu_secs(r, started).to_string(),
        // The highest exit code of the job's steps; the batch script is its only one here.
        "DerivedExitCode" => format!("{}:{}", r.exit_code, r.exit_signal),
        "Elapsed" => format::secs_long(r.elapsed_secs),
        "ElapsedRaw" => r.elapsed_secs.to_string(),
        "Eligible" => date(r.eligible_time, tz),
        "End" => date(r.end_time, tz),
        "ExitCode" => format!("{}:{}", r.exit_code, r.exit_signal),
        "JobID" => r.id_string(),
        "JobIDRaw" => r.job_id.map(|i| i.to_string()).unwrap_or_default(),
        "JobName" => r.job_name.clone(),
        "NNodes" => r.num_nodes.to_string(),
        "NodeList" => {
            if r.node_list.is_empty() {
                "None assigned".to_string()
            } else {
                r.node_list.clone()
            }
        }
        "NTasks" => r.num_tasks.to_string(),
        "Partition" => r.partition.clone(),
        "Priority" => r.priority.map(|p| p.to_string()).unwrap_or_default(),
        "Reason" => r.reason.clone(),
        "ReqTRES" => tres(r.num_cpus, r.num_gpus, r.num_nodes),
        "Restarts" => r.restarts.to_string(),
        "Start" => date(r.start_time, tz),
        "State" => r.state.as_str().to_string(),
        "Submit" => date(r.submit_time, tz),
        "Timelimit" => match r.time_limit {
            None => "Partition_Limit".to_string(),
            Some(TimeLimit::Unlimited) => "UNLIMITED".to_string(),
            Some(l) => format::secs_long(l.seconds().unwrap_or(0) as i64),
        },
        "TimelimitRaw" => match r.time_limit {
            None => "Partition_Limit".to_string(),
            Some(TimeLimit::Unlimited) => "UNLIMITED".to_string(),
            Some(l) => (l.seconds().unwrap_or(0) / 60).to_string(),
        },
        "User" => r.user.clone(),
        "WorkDir" => r.work_dir.clone().unwrap_or_default(),
        _ => String::new(),
    }
}

/// sacct's fixed-width cell: `%*.*s ` with a `+` marking a cut value.
fn cell(v: &str, width: i32, mark_cut: bool) -> String {
    let w = width.unsigned_abs() as usize;
    let mut s: String = v.chars().take(w).collect();
    if mark_cut && v.chars().count() > w && w > 0 {
        s.pop();
        s.push('+');
    }
    let pad = " ".repeat(w - s.chars().count());
    if width < 0 {
        format!("{s}{pad} ")
    } else {
        format!("{pad}{s} ")
    }
}

/// Layouts of sacct's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Fixed-width columns with a dashed rule under the header.
    Fixed,
    /// `-p`: a `|` after every field.
    Parsable,
    /// `-P`: `|` between fields.
    Parsable2,
}

/// `sacct -e`: the fields `-o` takes, four to a line, each 20 wide (as Slurm lists its own).
pub fn help_format() -> String {
    let mut out = String::new();
    for chunk in COLUMNS.chunks(4) {
        for (name, _) in chunk {
            out.push_str(&format!("{name:<20}"));
        }
        out.push('\n');
    }
    out
}

/// Format rows as sacct prints them; `delimiter` separates `-p`/`-P` fields.
pub fn render(
    rows: &[JobRow],
    cols: &[Column],
    layout: Layout,
    header: bool,
    delimiter: &str,
    tz: &TimeZone,
) -> String {
    let mut out = String::new();
    let join = |cells: Vec<String>| -> String {
        match layout {
            Layout::Fixed => cells.concat(),
            Layout::Parsable => cells.iter().map(|c| format!("{c}{delimiter}")).collect(),
            Layout::Parsable2 => cells.join(delimiter),
        }
    };
    if header {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| match layout {
                Layout::Fixed => cell(c.name, c.width, false),
                _ => c.name.to_string(),
            })
            .collect();
        out.push_str(&join(cells));
        out.push('\n');
        if layout == Layout::Fixed {
            for c in cols {
                out.push_str(&"-".repeat(c.width.unsigned_abs() as usize));
                out.push(' ');
            }
            out.push('\n');
        }
    }
    for r in rows {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| {
                let v = value(c.name, r, tz);
                match layout {
                    Layout::Fixed => cell(&v, c.width, true),
                    _ => v,
                }
            })
            .collect();
        out.push_str(&join(cells));
        out.push('\n');
    }
    out
}

/// Parse a -S/-E time as sacct does: Slurm's time forms, looking back (`now-2hours`,
/// `09:00` today, `11/30` this year or last; see `muster_crds::slurm::begin`).
pub fn parse_time(s: &str, now: Timestamp, tz: &TimeZone) -> Result<Timestamp, String> {
    muster_crds::slurm::begin::parse_past(s, &now.to_zoned(tz.clone())).map_err(|e| e.to_string())
}

/// Select, order and format jobs for the arguments.
pub fn report(
    args: &SacctArgs,
    mut rows: Vec<JobRow>,
    me: &str,
    now: Timestamp,
    tz: &TimeZone,
) -> Result<String, String> {
    let start = match &args.starttime {
        Some(s) => parse_time(s, now, tz)?,
        None if !args.jobs.is_empty() => Timestamp::UNIX_EPOCH,
        None => now
            .to_zoned(tz.clone())
            .start_of_day()
            .map(|z| z.timestamp())
            .map_err(|e| e.to_string())?,
    };
    let end = match &args.endtime {
        Some(s) => parse_time(s, now, tz)?,
        None => now,
    };
    let users = if !args.users.is_empty() {
        args.users.clone()
    } else if args.allusers || !args.jobs.is_empty() {
        Vec::new()
    } else {
        vec![me.to_string()]
    };
    let states = if args.states.is_empty() {
        None
    } else {
        parse_states(&args.states)?
    };
    let filter = Filter {
        jobs: args.jobs.clone(),
        names: args.names.clone(),
        partitions: args.partitions.clone(),
        states,
        users,
    };
    rows.retain(|r| {
        filter.keep(r)
            && (args.accounts.is_empty() || args.accounts.contains(&r.account))
            && r.end_time.is_none_or(|e| e >= start)
            && r.submit_time.is_none_or(|s| s <= end)
    });
    rows.sort_by_key(|r| (r.job_id, r.array_task_id));
    let spec = args.format.clone().unwrap_or_else(|| {
        if args.brief {
            BRIEF_FIELDS
        } else {
            DEFAULT_FIELDS
        }
        .to_string()
    });
    let cols = parse_columns(&spec)?;
    let layout = if args.parsable2 {
        Layout::Parsable2
    } else if args.parsable {
        Layout::Parsable
    } else {
        Layout::Fixed
    };
    let delimiter = args.delimiter.as_deref().unwrap_or("|");
    Ok(render(&rows, &cols, layout, !args.noheader, delimiter, tz))
}

/// Run `muster sacct`.
pub async fn run(args: &SacctArgs, target: &Target<'_>, io: &mut Io<'_>) -> anyhow::Result<()> {
    if args.helpformat {
        write!(io.out, "{}", help_format())?;
        return Ok(());
    }
    let cluster = target.cluster(io.env).await?;
    let jobs = crate::fetch::batchjobs(&cluster, args.all_namespaces).await?;
    let now = Timestamp::now();
    let rows = crate::rows::job_rows(&jobs, now, false);
    let text = report(args, rows, &cluster.user, now, &TimeZone::system())
        .map_err(|e| anyhow::anyhow!(e))?;
    write!(io.out, "{text}")?;
    Ok(())
}
