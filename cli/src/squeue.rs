//! `squeue`: the job queue, in Slurm's columns, widths and truncation.

use std::cmp::Ordering;

use clap::Args;
use jiff::tz::TimeZone;
use muster_crds::v1alpha1::JobState;

use crate::Io;
use crate::cluster::Target;
use crate::format::{self, Format, pad};
use crate::rows::JobRow;
use muster_crds::slurm::TimeLimit;

/// squeue's default format.
pub const DEFAULT_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R";
/// `squeue -l`.
pub const LONG_FORMAT: &str = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R";
/// `squeue --start`.
pub const START_FORMAT: &str = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R";

/// `muster squeue`
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
#[command(
    infer_long_args = true,
    args_override_self = true,
    about = "Show the job queue (Slurm's squeue)",
    disable_help_flag = true
)]
pub struct SqueueArgs {
    /// Jobs in every namespace (default: the current namespace only).
    #[arg(short = 'a', long = "all", visible_alias = "all-namespaces")]
    pub all_namespaces: bool,

    /// Show one line per array element, pending ones included.
    #[arg(short = 'r', long = "array")]
    pub array: bool,

    /// Output format, Slurm's `%[.][size]type[suffix]` fields (not with `-l`).
    #[arg(short = 'o', long = "format", value_name = "FORMAT")]
    pub format: Option<String>,

    /// Output format by field names, Slurm's `name[:[.][size][suffix]]`, comma separated
    /// (`-O JobID,Name:30,State`); over `-o`, `-l` and `--start`.
    #[arg(short = 'O', long = "Format", value_name = "FORMAT")]
    pub format_long: Option<String>,

    /// `SQUEUE_FORMAT`: the format when neither `-o`, `-l` nor `--start` gives one.
    #[arg(skip)]
    pub env_format: Option<String>,

    /// No header line.
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,

    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,

    /// Only these job ids (comma separated; `123` or `123_4`).
    #[arg(
        short = 'j',
        long = "jobs",
        value_name = "JOB_ID_LIST",
        value_delimiter = ','
    )]
    pub jobs: Vec<String>,

    /// The long format (STATE and TIME_LIMIT columns).
    #[arg(short = 'l', long = "long")]
    pub long: bool,

    /// Only my jobs.
    #[arg(long = "me")]
    pub me: bool,

    /// Only these job names.
    #[arg(
        short = 'n',
        long = "name",
        value_name = "NAMES",
        value_delimiter = ','
    )]
    pub names: Vec<String>,

    /// Only these partitions.
    #[arg(
        short = 'p',
        long = "partition",
        value_name = "PARTITIONS",
        value_delimiter = ','
    )]
    pub partitions: Vec<String>,

    /// Pending jobs with their expected start times, soonest first.
    #[arg(long = "start")]
    pub start: bool,

    /// Only these states (names or compact codes, or `all`; default PD,R,CG).
    #[arg(
        short = 't',
        long = "states",
        value_name = "STATES",
        value_delimiter = ','
    )]
    pub states: Vec<String>,

    /// Sort by these format letters, comma separated, each optionally preceded by `+`
    /// (ascending, the default) or `-` (descending): `-S P,-i`. Default: `P,t,-p`.
    #[arg(
        short = 'S',
        long = "sort",
        value_name = "SORT_LIST",
        allow_hyphen_values = true
    )]
    pub sort: Option<String>,

    /// Print the queue again every SECONDS, each time after the current date.
    #[arg(short = 'i', long = "iterate", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub iterate: Option<u64>,

    /// Only these users.
    #[arg(
        short = 'u',
        long = "user",
        visible_alias = "users",
        value_name = "USERS",
        value_delimiter = ','
    )]
    pub users: Vec<String>,
}

/// Which jobs to show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Job ids (`123`, `123_4`); empty: all.
    pub jobs: Vec<String>,
    /// Job names; empty: all.
    pub names: Vec<String>,
    /// Partitions; empty: all.
    pub partitions: Vec<String>,
    /// States; `None`: every state.
    pub states: Option<Vec<JobState>>,
    /// Users; empty: all.
    pub users: Vec<String>,
}

/// squeue's default states: pending, running, completing.
pub const DEFAULT_STATES: [JobState; 3] =
    [JobState::Pending, JobState::Running, JobState::Completing];

/// Parse a `-t` list: names or compact codes, any case, or `all`.
pub fn parse_states(list: &[String]) -> Result<Option<Vec<JobState>>, String> {
    if list.iter().any(|s| s.eq_ignore_ascii_case("all")) {
        return Ok(None);
    }
    list.iter()
        .map(|s| s.parse::<JobState>())
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Compare partition names as users type them (`gpu_partition` matches `gpu-partition`).
fn same_partition(a: &str, b: &str) -> bool {
    crate::sbatch::manifest::partition_object_name(a)
        == crate::sbatch::manifest::partition_object_name(b)
}

impl Filter {
    /// Whether `row` passes.
    pub fn keep(&self, row: &JobRow) -> bool {
        (self.jobs.is_empty() || self.jobs.iter().any(|j| row.matches_id(j)))
            && (self.names.is_empty() || self.names.iter().any(|n| n == &row.job_name))
            && (self.partitions.is_empty()
                || self
                    .partitions
                    .iter()
                    .any(|p| same_partition(p, &row.partition)))
            && self.states.as_ref().is_none_or(|s| s.contains(&row.state))
            && (self.users.is_empty() || self.users.iter().any(|u| u == &row.user))
    }
}

fn state_rank(s: JobState) -> u8 {
    // Slurm's job state enum order (PENDING first).
    match s {
        JobState::Pending => 0,
        JobState::Running => 1,
        JobState::Completed => 3,
        JobState::Cancelled => 4,
        JobState::Failed => 5,
        JobState::Timeout => 6,
        JobState::NodeFail => 7,
        JobState::Preempted => 8,
        JobState::Completing => 9,
    }
}

/// squeue's default order (Slurm's `P,t,-p`): partition, then state, then priority, highest
/// first (the order the scheduler takes a partition's waiting jobs in), then job id.
pub fn sort_default(rows: &mut [JobRow]) {
    rows.sort_by(|a, b| {
        a.partition
            .cmp(&b.partition)
            .then(state_rank(a.state).cmp(&state_rank(b.state)))
            .then(b.priority.cmp(&a.priority))
            .then(
                a.array_job_id
                    .or(a.job_id)
                    .cmp(&b.array_job_id.or(b.job_id)),
            )
            .then(a.array_task_id.cmp(&b.array_task_id))
    });
}

/// `--start`'s order: expected start time, unknown last.
pub fn sort_by_start(rows: &mut [JobRow]) {
    rows.sort_by(|a, b| match (a.start_time, b.start_time) {
        (Some(x), Some(y)) => x.cmp(&y).then(a.job_id.cmp(&b.job_id)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.job_id.cmp(&b.job_id),
    });
}

/// One `-S` key: a format letter and whether it sorts descending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SortKey {
    /// The format letter (`i`, `P`, `t`, …).
    pub code: char,
    /// `-` given.
    pub descending: bool,
}

/// squeue's `-O` field names and the `-o` letters printing them. `Priority` prints the
/// integer priority (Slurm's is a fraction of the highest possible).
pub const LONG_NAMES: &[(&str, char)] = &[
    ("Account", 'a'),
    ("ArrayJobID", 'F'),
    ("ArrayTaskID", 'K'),
    ("Dependency", 'E'),
    ("EndTime", 'e'),
    ("ExcNodes", 'x'),
    ("Feature", 'f'),
    ("JobArrayID", 'i'),
    ("JobID", 'A'),
    ("Name", 'j'),
    ("Nice", 'y'),
    ("NodeList", 'N'),
    ("NumCPUs", 'C'),
    ("NumNodes", 'D'),
    ("OverSubscribe", 'h'),
    ("Partition", 'P'),
    ("Priority", 'Q'),
    ("PriorityLong", 'Q'),
    ("Reason", 'r'),
    ("ReasonList", 'R'),
    ("ReqNodes", 'n'),
    ("SchedNodes", 'Y'),
    ("StartTime", 'S'),
    ("State", 'T'),
    ("StateCompact", 't'),
    ("SubmitTime", 'V'),
    ("TimeLeft", 'L'),
    ("TimeLimit", 'l'),
    ("TimeUsed", 'M'),
    ("tres-per-node", 'b'),
    ("UserName", 'u'),
];

/// Format letters `-S` sorts by (the letters squeue prints, plus `p`, priority, which a
/// queue's job ids follow).
const SORT_CODES: &str = "aAbCDeEfFhijKlLMNPpQrRStTuVyY";

/// Parse a `-S` list (`P,t,-p`, `+i`, `-M,j`): an unknown letter is an error naming it.
pub fn parse_sort(list: &str) -> Result<Vec<SortKey>, String> {
    let mut keys = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (descending, rest) = match item.as_bytes()[0] {
            b'-' => (true, &item[1..]),
            b'+' => (false, &item[1..]),
            _ => (false, item),
        };
        // Slurm's `#P` (configuration order) sorts as P: partitions have no order here.
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        let mut chars = rest.chars();
        match (chars.next(), chars.next()) {
            (Some(code), None) if SORT_CODES.contains(code) => {
                keys.push(SortKey { code, descending })
            }
            _ => {
                return Err(format!(
                    "Invalid sort specification: {item} (give format letters such as P,t,-p,i,j,u,M,S, each optionally after + or -)"
                ));
            }
        }
    }
    Ok(keys)
}

fn cmp_key(a: &JobRow, b: &JobRow, code: char, tz: &TimeZone) -> Ordering {
    let id = |r: &JobRow| (r.array_job_id.or(r.job_id), r.array_task_id);
    match code {
        'i' | 'A' | 'F' | 'K' => id(a).cmp(&id(b)),
        // Priority, then (the queue's order among equals) a lower id first.
        'p' | 'Q' => a.priority.cmp(&b.priority).then(id(b).cmp(&id(a))),
        'C' => a.num_cpus.cmp(&b.num_cpus),
        'D' => a.num_nodes.cmp(&b.num_nodes),
        'M' => a.elapsed_secs.cmp(&b.elapsed_secs),
        'l' | 'L' => {
            let secs = |r: &JobRow| r.time_limit.map(|l| l.seconds().unwrap_or(u64::MAX));
            secs(a).cmp(&secs(b))
        }
        'S' => a.start_time.cmp(&b.start_time),
        'V' => a.submit_time.cmp(&b.submit_time),
        'e' => a.end_time.cmp(&b.end_time),
        't' | 'T' => state_rank(a.state).cmp(&state_rank(b.state)),
        'y' => a.nice.cmp(&b.nice),
        c => field(c, Some(a), tz).0.cmp(&field(c, Some(b), tz).0),
    }
}

/// Sort by `-S` keys; ties keep squeue's default order.
pub fn sort_by_keys(rows: &mut [JobRow], keys: &[SortKey], tz: &TimeZone) {
    sort_default(rows);
    rows.sort_by(|a, b| {
        keys.iter()
            .map(|k| {
                let o = cmp_key(a, b, k.code, tz);
                if k.descending { o.reverse() } else { o }
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    });
}

/// The format letters this squeue prints.
pub fn valid_code(c: char) -> bool {
    "aAbCDeEfFhijKlLMnNPQrRStTuVxyY".contains(c)
}

fn limit_text(l: Option<TimeLimit>) -> String {
    match l {
        None => "NOT_SET".to_string(),
        Some(l) => l.to_string(),
    }
}

/// Slurm's OverSubscribe of a job: `NO` for whole nodes, `USER` for `--exclusive=user`,
/// else `OK`.
pub fn oversubscribe(r: &JobRow) -> &'static str {
    if r.exclusive {
        "NO"
    } else if r.exclusive_user {
        "USER"
    } else {
        "OK"
    }
}

/// Header, value and whether the value is cut to the width, for one field.
fn field(code: char, row: Option<&JobRow>, tz: &TimeZone) -> (String, bool) {
    let Some(r) = row else {
        let h = match code {
            'a' => "ACCOUNT",
            'A' => "JOBID",
            'b' => "TRES_PER_NODE",
            'C' => "CPUS",
            'D' => "NODES",
            'e' => "END_TIME",
            'E' => "DEPENDENCY",
            'f' => "FEATURES",
            'F' => "ARRAY_JOB_ID",
            'h' => "OVER_SUBSCRIBE",
            'i' => "JOBID",
            'j' => "NAME",
            'K' => "ARRAY_TASK_ID",
            'l' => "TIME_LIMIT",
            'L' => "TIME_LEFT",
            'M' => "TIME",
            'n' => "REQ_NODES",
            'N' => "NODELIST",
            'P' => "PARTITION",
            'Q' => "PRIORITY",
            'r' => "REASON",
            'R' => "NODELIST(REASON)",
            'S' => "START_TIME",
            't' => "ST",
            'T' => "STATE",
            'u' => "USER",
            'V' => "SUBMIT_TIME",
            'x' => "EXC_NODES",
            'y' => "NICE",
            'Y' => "SCHEDNODES",
            _ => "",
        };
        // NODELIST headers are never cut.
        return (h.to_string(), !matches!(code, 'N' | 'R' | 'Y'));
    };
    match code {
        'a' => (r.account.clone(), true),
        'A' => (
            r.job_id.map(|i| i.to_string()).unwrap_or("N/A".into()),
            true,
        ),
        'b' => (r.tres_per_node.clone().unwrap_or("N/A".into()), true),
        'C' => (r.num_cpus.to_string(), true),
        'D' => (r.num_nodes.to_string(), true),
        'e' => (format::timestamp(r.end_time, tz), true),
        'E' => (r.dependency.clone().unwrap_or("(null)".into()), true),
        'f' => (r.features.clone().unwrap_or("(null)".into()), true),
        'F' => (
            r.array_job_id
                .or(r.job_id)
                .map(|i| i.to_string())
                .unwrap_or("N/A".into()),
            true,
        ),
        'h' => (oversubscribe(r).into(), true),
        'i' => (r.id_string(), true),
        'j' => (r.job_name.clone(), true),
        'K' => (
            r.array_task_str
                .clone()
                .or(r.array_task_id.map(|t| t.to_string()))
                .unwrap_or("N/A".into()),
            true,
        ),
        'l' => (limit_text(r.time_limit), false),
        'L' => (
            match r.time_limit {
                None => "NOT_SET".into(),
                Some(TimeLimit::Unlimited) => "UNLIMITED".into(),
                Some(l) => format::secs_short(l.seconds().unwrap_or(0) as i64 - r.elapsed_secs),
            },
            false,
        ),
        'M' => (format::secs_short(r.elapsed_secs), false),
        'n' => (r.req_nodes.clone().unwrap_or_default(), false),
        'N' => (r.node_list.clone(), false),
        'P' => (r.partition.clone(), true),
        'r' => (r.reason.clone(), true),
        'R' => {
            if matches!(
                r.state,
                JobState::Pending | JobState::Timeout | JobState::Failed
            ) {
                (format!("({})", r.reason), true)
            } else {
                (r.node_list.clone(), false)
            }
        }
        'S' => (format::timestamp(r.start_time, tz), true),
        't' => (r.state.short().into(), true),
        'T' => (r.state.as_str().into(), true),
        'u' => (r.user.clone(), true),
        'V' => (format::timestamp(r.submit_time, tz), true),
        'x' => (r.exc_nodes.clone().unwrap_or_default(), false),
        'y' => (r.nice.to_string(), true),
        'Q' => (
            r.priority.map(|p| p.to_string()).unwrap_or("N/A".into()),
            true,
        ),
        // Nodes a pending job is expected to get: not reported by the operator.
        'Y' => ("(null)".into(), false),
        _ => (String::new(), true),
    }
}

fn line(f: &Format, row: Option<&JobRow>, tz: &TimeZone) -> String {
    let mut s = f.prefix.clone();
    for fl in &f.fields {
        let (v, cut) = field(fl.code, row, tz);
        s.push_str(&pad(&v, fl.width, fl.right, cut));
        s.push_str(&fl.suffix);
    }
    s.push('\n');
    s
}

/// Format rows as squeue prints them.
pub fn render(rows: &[JobRow], format: &Format, header: bool, tz: &TimeZone) -> String {
    let mut out = String::new();
    if header {
        out.push_str(&line(format, None, tz));
    }
    for r in rows {
        out.push_str(&line(format, Some(r), tz));
    }
    out
}

/// The format a report prints: `-o` (refused with `-l`, as squeue refuses it), else
/// `--start`'s or `-l`'s, else `SQUEUE_FORMAT`, else the default (checked against Slurm 22.05:
/// `-l` and `--start` set the environment's format aside, `-o` with `-l` is fatal).
pub fn format_of(args: &SqueueArgs) -> Result<String, String> {
    if args.long && args.format.is_some() {
        return Err(format::FORMAT_WITH_LONG.to_string());
    }
    Ok(if let Some(f) = &args.format {
        f.clone()
    } else if args.start {
        START_FORMAT.to_string()
    } else if args.long {
        LONG_FORMAT.to_string()
    } else {
        args.env_format
            .clone()
            .unwrap_or_else(|| DEFAULT_FORMAT.to_string())
    })
}

/// What squeue says, and exits 1 with, for `-j ID` of no job (Slurm's words, unprefixed).
pub const NO_SUCH_JOB: &str = "slurm_load_jobs error: Invalid job id specified";

/// Choose rows and format for the arguments: returns the text, and format warnings.
pub fn report(
    args: &SqueueArgs,
    mut rows: Vec<JobRow>,
    me: &str,
    tz: &TimeZone,
) -> Result<(String, Vec<String>), String> {
    let jobs =
        crate::rows::ids::expand(&args.jobs).map_err(|bad| format!("Invalid job id: {bad}"))?;
    // One job asked for by its plain id, and no such job: Slurm's squeue loads that job
    // alone and fails (a list, or an array task, just shows nothing).
    if let [one] = jobs.as_slice()
        && one.parse::<u64>().is_ok()
        && !rows.iter().any(|r| r.matches_id(one))
    {
        return Err(NO_SUCH_JOB.to_string());
    }
    let mut states = parse_states(&args.states)?;
    if args.states.is_empty() {
        states = Some(if args.start {
            vec![JobState::Pending]
        } else {
            DEFAULT_STATES.to_vec()
        });
    }
    let mut users = args.users.clone();
    if args.me {
        users.push(me.to_string());
    }
    // A job named with -j is shown whatever its state, as Slurm does.
    if !args.jobs.is_empty() && args.states.is_empty() {
        states = None;
    }
    let filter = Filter {
        jobs,
        names: args.names.clone(),
        partitions: args.partitions.clone(),
        states,
        users,
    };
    rows.retain(|r| filter.keep(r));
    if let Some(list) = &args.sort {
        sort_by_keys(&mut rows, &parse_sort(list)?, tz);
    } else if args.start {
        sort_by_start(&mut rows);
    } else {
        sort_default(&mut rows);
    }
    let (format, warnings) = match &args.format_long {
        Some(f) => format::parse_long_format(f, LONG_NAMES, "job"),
        None => format::parse_format(&format_of(args)?, valid_code),
    };
    Ok((render(&rows, &format, !args.noheader, tz), warnings))
}

/// Run `muster squeue`.
pub async fn run(args: &SqueueArgs, target: &Target<'_>, io: &mut Io<'_>) -> anyhow::Result<()> {
    let mut args = args.clone();
    args.env_format = (io.env)("SQUEUE_FORMAT");
    let args = &args;
    if let Err(e) = format_of(args) {
        writeln!(io.err, "squeue: fatal: {e}")?;
        return Err(crate::Failed.into());
    }
    let cluster = target.cluster(io.env).await?;
    let tz = TimeZone::system();
    // Bad -S lists fail before anything is printed, even with -i.
    if let Some(list) = &args.sort {
        parse_sort(list).map_err(|e| anyhow::anyhow!(e))?;
    }
    let mut first = true;
    loop {
        let now = jiff::Timestamp::now();
        let jobs = crate::fetch::batchjobs(&cluster, args.all_namespaces).await?;
        let rows = crate::rows::job_rows(&jobs, now, args.array);
        if std::mem::take(&mut first) {
            for name in &args.names {
                if !rows.iter().any(|r| &r.job_name == name)
                    && let Some(h) =
                        crate::cluster::dash_n_hint(&cluster, "squeue", "job name", name).await
                {
                    writeln!(io.err, "{h}")?;
                }
            }
        }
        let (text, warnings) = match report(args, rows, &cluster.user, &tz) {
            Ok(r) => r,
            Err(e) if e == NO_SUCH_JOB => {
                writeln!(io.err, "{e}")?;
                return Err(crate::Failed.into());
            }
            Err(e) => return Err(anyhow::anyhow!(e)),
        };
        for w in warnings {
            writeln!(io.err, "squeue: error: {w}")?;
        }
        // As squeue.c: the date heads every report of -i and of -l (unless -h).
        if !args.noheader && (args.iterate.is_some() || args.long) {
            writeln!(io.out, "{}", format::date_line(now, &tz))?;
        }
        let Some(secs) = args.iterate else {
            write!(io.out, "{text}")?;
            return Ok(());
        };
        writeln!(io.out, "{text}")?;
        io.out.flush()?;
        tokio::time::sleep(std::time::Duration::from_secs(secs)).await;
    }
}
