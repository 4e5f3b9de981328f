//! `sinfo`: partitions and nodes, with GPUs shown as GRES.

use clap::Args;

use crate::Io;
use crate::cluster::Target;
use crate::format::{self, Format, pad};
use crate::rows::{NodeRow, PartRow};
use muster_crds::slurm::{TimeLimit, hostlist};

/// sinfo's default (partition) format.
pub const DEFAULT_FORMAT: &str = "%#P %.5a %.10l %.6D %.6t %N";
/// `sinfo -N`.
pub const NODE_FORMAT: &str = "%#N %.6D %.#P %6t";
/// `sinfo -l`.
pub const LONG_FORMAT: &str = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N";
/// `sinfo -N -l`.
pub const NODE_LONG_FORMAT: &str = "%#N %.6D %.#P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E";
/// `sinfo -s`.
pub const SUMMARIZE_FORMAT: &str = "%#P %.5a %.10l %.16F %N";
/// `sinfo -R`.
pub const REASONS_FORMAT: &str = "%20E %9u %19H %N";
/// `sinfo -R -l`.
pub const REASONS_LONG_FORMAT: &str = "%20E %12U %19H %6t %N";

/// `muster sinfo`
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
#[command(
    infer_long_args = true,
    args_override_self = true,
    about = "Show partitions and nodes (Slurm's sinfo)",
    disable_help_flag = true
)]
pub struct SinfoArgs {
    /// Accepted for compatibility (every partition is always shown).
    #[arg(short = 'a', long = "all")]
    pub all: bool,

    /// Only nodes that do not respond.
    #[arg(short = 'd', long = "dead")]
    pub dead: bool,

    /// No header line.
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,

    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,

    /// Long format.
    #[arg(short = 'l', long = "long")]
    pub long: bool,

    /// One line per node (and partition).
    #[arg(short = 'N', long = "Node")]
    pub node: bool,

    /// Only these nodes (a hostlist).
    #[arg(short = 'n', long = "nodes", value_name = "HOSTLIST")]
    pub nodes: Option<String>,

    /// Output format, Slurm's `%[.][size]type[suffix]` fields (not with `-l`).
    #[arg(short = 'o', long = "format", value_name = "FORMAT")]
    pub format: Option<String>,

    /// Output format by field names, Slurm's `name[:[.][size][suffix]]`, comma separated
    /// (`-O NodeList,Gres,GresUsed`; not with `-l`); over `-o` and the views' formats.
    #[arg(short = 'O', long = "Format", value_name = "FORMAT")]
    pub format_long: Option<String>,

    /// `SINFO_FORMAT`: the format when neither `-o`, `-N`, `-R` nor `-s` gives one.
    #[arg(skip)]
    pub env_format: Option<String>,

    /// Only these partitions.
    #[arg(
        short = 'p',
        long = "partition",
        value_name = "PARTITIONS",
        value_delimiter = ','
    )]
    pub partitions: Vec<String>,

    /// Only nodes that respond.
    #[arg(short = 'r', long = "responding")]
    pub responding: bool,

    /// Why nodes are down, drained or draining: one line per reason, who gave it and when.
    #[arg(short = 'R', long = "list-reasons")]
    pub list_reasons: bool,

    /// A summary per partition (NODES(A/I/O/T)).
    #[arg(short = 's', long = "summarize")]
    pub summarize: bool,

    /// Only nodes in these states (idle, mix, alloc, down, drain, …).
    #[arg(
        short = 't',
        long = "states",
        value_name = "STATES",
        value_delimiter = ','
    )]
    pub states: Vec<String>,
}

/// One output line: a partition (or none) and the nodes it groups.
#[derive(Clone, Debug)]
pub struct Record<'a> {
    /// The partition, `None` for a node in no partition.
    pub part: Option<&'a PartRow>,
    /// The nodes of the line.
    pub nodes: Vec<&'a NodeRow>,
}

/// The letters sinfo prints here.
pub fn valid_code(c: char) -> bool {
    "aACcdDEfFGghHlLmMnNopPrRstTuUwz".contains(c)
}

/// GresUsed, which `-O` alone names (no `%` letter prints it in Slurm 22.05): a code no
/// format string can give.
const GRES_USED: char = '\u{e000}';

/// sinfo's `-O` field names and the letters printing them.
pub const LONG_NAMES: &[(&str, char)] = &[
    ("Available", 'a'),
    ("CPUs", 'c'),
    ("CPUsState", 'C'),
    ("DefaultTime", 'L'),
    ("Disk", 'd'),
    ("Features", 'f'),
    ("Gres", 'G'),
    ("GresUsed", GRES_USED),
    ("Groups", 'g'),
    ("Memory", 'm'),
    ("NodeAddr", 'o'),
    ("NodeAI", 'A'),
    ("NodeAIOT", 'F'),
    ("NodeHost", 'n'),
    ("NodeList", 'N'),
    ("Nodes", 'D'),
    ("OverSubscribe", 'h'),
    ("Partition", 'P'),
    ("PartitionName", 'R'),
    ("PreemptMode", 'M'),
    ("PriorityTier", 'p'),
    ("Reason", 'E'),
    ("Root", 'r'),
    ("Size", 's'),
    ("SocketCoreThread", 'z'),
    ("StateCompact", 't'),
    ("StateLong", 'T'),
    ("Time", 'l'),
    ("TimeStamp", 'H'),
    ("User", 'u'),
    ("UserLong", 'U'),
    ("Weight", 'w'),
];

fn limit(l: Option<TimeLimit>, unset: &str) -> String {
    match l {
        None => unset.to_string(),
        Some(TimeLimit::Unlimited) => "infinite".to_string(),
        Some(l) => l.to_string(),
    }
}

fn min_max(values: impl Iterator<Item = u64>) -> String {
    let v: Vec<u64> = values.collect();
    match (v.iter().min(), v.iter().max()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(_)) => format!("{a}+"),
        _ => "0".to_string(),
    }
}

fn counts(nodes: &[&NodeRow]) -> (usize, usize, usize) {
    use crate::rows::NodeState::*;
    let alloc = nodes
        .iter()
        .filter(|n| matches!(n.state, Allocated | Mixed | Draining))
        .count();
    let idle = nodes.iter().filter(|n| n.state == Idle).count();
    (alloc, idle, nodes.len() - alloc - idle)
}

/// `(value, cut)` of one field for a record, or the header when `rec` is `None`.
fn field(code: char, rec: Option<&Record<'_>>, tz: &jiff::tz::TimeZone) -> String {
    let Some(r) = rec else {
        return match code {
            'a' => "AVAIL",
            'A' => "NODES(A/I)",
            'c' => "CPUS",
            'd' => "TMP_DISK",
            'C' => "CPUS(A/I/O/T)",
            'D' => "NODES",
            'E' => "REASON",
            'f' => "AVAIL_FEATURES",
            'F' => "NODES(A/I/O/T)",
            'G' => "GRES",
            'g' => "GROUPS",
            'H' => "TIMESTAMP",
            'u' | 'U' => "USER",
            'h' => "OVERSUBSCRIBE",
            'r' => "ROOT",
            'l' => "TIMELIMIT",
            'L' => "DEFAULTTIME",
            'm' => "MEMORY",
            'M' => "PREEMPT_MODE",
            'N' => "NODELIST",
            'n' => "HOSTNAMES",
            'o' => "NODE_ADDR",
            GRES_USED => "GRES_USED",
            'p' => "PRIO_TIER",
            'P' | 'R' => "PARTITION",
            's' => "JOB_SIZE",
            't' | 'T' => "STATE",
            'w' => "WEIGHT",
            'z' => "S:C:T",
            _ => "",
        }
        .to_string();
    };
    let na = || "n/a".to_string();
    let first = r.nodes.first();
    match code {
        'a' => r.part.map(|p| p.avail.clone()).unwrap_or_else(na),
        'A' => {
            let (a, i, _) = counts(&r.nodes);
            format!("{a}/{i}")
        }
        'c' => min_max(r.nodes.iter().map(|n| n.cpus as u64)),
        'C' => {
            let total: u32 = r.nodes.iter().map(|n| n.cpus).sum();
            let alloc: u32 = r.nodes.iter().map(|n| n.cpus_alloc.min(n.cpus)).sum();
            let other: u32 = r
                .nodes
                .iter()
                .filter(|n| {
                    use crate::rows::NodeState::*;
                    matches!(n.state, Down | Drained)
                })
                .map(|n| n.cpus - n.cpus_alloc.min(n.cpus))
                .sum();
            format!("{alloc}/{}/{other}/{total}", total - alloc - other)
        }
        'd' => min_max(r.nodes.iter().map(|n| n.tmp_disk_mb)),
        'D' => r.nodes.len().to_string(),
        'E' => first
            .and_then(|n| n.reason.clone())
            .unwrap_or_else(|| "none".to_string()),
        'f' => first
            .map(|n| {
                if n.features.is_empty() {
                    "(null)".to_string()
                } else {
                    n.features.join(",")
                }
            })
            .unwrap_or_else(|| "(null)".to_string()),
        'F' => {
            let (a, i, o) = counts(&r.nodes);
            format!("{a}/{i}/{o}/{}", r.nodes.len())
        }
        'G' => first
            .map(|n| n.gres())
            .unwrap_or_else(|| "(null)".to_string()),
        'g' => r.part.map(|_| "all".to_string()).unwrap_or_else(na),
        'h' => r.part.map(|_| "NO".to_string()).unwrap_or_else(na),
        // No partition is kept for root alone (Slurm's RootOnly).
        'r' => r.part.map(|_| "no".to_string()).unwrap_or_else(na),
        'l' => r
            .part
            .map(|p| limit(p.max_time, "infinite"))
            .unwrap_or_else(na),
        'L' => r
            .part
            .map(|p| limit(p.default_time, "n/a"))
            .unwrap_or_else(na),
        'm' => min_max(r.nodes.iter().map(|n| n.memory_mb)),
        'M' => r.part.map(|p| p.preempt_mode.clone()).unwrap_or_else(na),
        // A Kubernetes node's name is its host name and address as Slurm means them.
        'N' | 'n' | 'o' => {
            let names: Vec<String> = r.nodes.iter().map(|n| n.name.clone()).collect();
            hostlist::compress_sorted(&names)
        }
        GRES_USED => first.map(|n| n.gres_used()).unwrap_or_else(na),
        'p' => r
            .part
            .map(|p| p.priority_tier.to_string())
            .unwrap_or_else(na),
        'P' => r
            .part
            .map(|p| format!("{}{}", p.name, if p.default { "*" } else { "" }))
            .unwrap_or_else(na),
        'R' => r.part.map(|p| p.name.clone()).unwrap_or_else(na),
        's' => r
            .part
            .map(|p| {
                let min = p.min_nodes.unwrap_or(1).max(1);
                match p.max_nodes {
                    None => format!("{min}-infinite"),
                    Some(max) if max == min => max.to_string(),
                    Some(max) => format!("{min}-{max}"),
                }
            })
            .unwrap_or_else(na),
        // `%U` is Slurm's `name(uid)`: a Kubernetes user has no uid, so the name alone.
        'u' | 'U' => first
            .and_then(|n| n.reason_user.clone())
            .unwrap_or_else(|| "Unknown".to_string()),
        'H' => first
            .and_then(|n| n.reason_time)
            .map(|t| format::timestamp(Some(t), tz))
            .unwrap_or_else(|| "Unknown".to_string()),
        't' => first.map(|n| n.compact_state()).unwrap_or_else(na),
        'T' => first.map(|n| n.long_state()).unwrap_or_else(na),
        // Kubernetes has no node weights; every node weighs Slurm's default.
        'w' => "1".to_string(),
        // Sockets, cores and threads are not published by the kubelet.
        'z' => "*:*:*".to_string(),
        _ => String::new(),
    }
}

/// Format records; `%#` fields get the width of their widest value (at least 9).
pub fn render(
    records: &[Record<'_>],
    format: &Format,
    header: bool,
    tz: &jiff::tz::TimeZone,
) -> String {
    let mut fmt = format.clone();
    for f in fmt.fields.iter_mut().filter(|f| f.auto) {
        let widest = records
            .iter()
            .map(|r| field(f.code, Some(r), tz).chars().count())
            .max()
            .unwrap_or(0);
        f.width = widest.max(9);
    }
    let line = |rec: Option<&Record<'_>>| {
        let mut s = fmt.prefix.clone();
        for f in &fmt.fields {
            // sinfo cuts every field except a header NODELIST.
            let cut = !(rec.is_none() && f.code == 'N');
            s.push_str(&pad(&field(f.code, rec, tz), f.width, f.right, cut));
            s.push_str(&f.suffix);
        }
        s.push('\n');
        s
    };
    let mut out = String::new();
    if header {
        out.push_str(&line(None));
    }
    for r in records {
        out.push_str(&line(Some(r)));
    }
    out
}

/// The node attributes a format prints, which split a partition's nodes into lines.
fn group_key(n: &NodeRow, format: &Format) -> Vec<String> {
    let mut key = vec![n.compact_state()];
    for f in &format.fields {
        match f.code {
            'c' => key.push(n.cpus.to_string()),
            'm' => key.push(n.memory_mb.to_string()),
            'G' => key.push(n.gres()),
            GRES_USED => key.push(n.gres_used()),
            'f' => key.push(n.features.join(",")),
            'E' => key.push(n.reason.clone().unwrap_or_default()),
            'u' | 'U' => key.push(n.reason_user.clone().unwrap_or_default()),
            'H' => key.push(n.reason_time.map(|t| t.to_string()).unwrap_or_default()),
            _ => {}
        }
    }
    key
}

/// The lines sinfo prints for these partitions and (already filtered) nodes.
pub fn records<'a>(
    parts: &'a [PartRow],
    nodes: &'a [NodeRow],
    format: &Format,
    node_view: bool,
    summarize: bool,
) -> Vec<Record<'a>> {
    let mut out = Vec::new();
    if node_view {
        for n in nodes {
            let mut in_any = false;
            for p in parts.iter().filter(|p| n.partitions.contains(&p.name)) {
                in_any = true;
                out.push(Record {
                    part: Some(p),
                    nodes: vec![n],
                });
            }
            if !in_any && parts.is_empty() {
                out.push(Record {
                    part: None,
                    nodes: vec![n],
                });
            }
        }
        return out;
    }
    for p in parts {
        let members: Vec<&NodeRow> = nodes
            .iter()
            .filter(|n| n.partitions.contains(&p.name))
            .collect();
        if summarize {
            out.push(Record {
                part: Some(p),
                nodes: members,
            });
            continue;
        }
        let mut groups: Vec<(Vec<String>, u32, Vec<&NodeRow>)> = Vec::new();
        for n in members {
            let key = group_key(n, format);
            match groups.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, _, v)) => v.push(n),
                None => groups.push((key, n.slurm_value(), vec![n])),
            }
        }
        // Decreasing Slurm state value, as sinfo's default sort "#P,-t".
        groups.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        if groups.is_empty() {
            out.push(Record {
                part: Some(p),
                nodes: Vec::new(),
            });
        }
        for (_, _, v) in groups {
            out.push(Record {
                part: Some(p),
                nodes: v,
            });
        }
    }
    out
}

/// `sinfo -R`: the nodes down, drained or draining (of `parts`, when filtered), one record
/// per reason, who gave it and when (and whatever else the format prints), in node order.
fn reasons<'a>(parts: &[PartRow], nodes: &'a [NodeRow], format: &Format) -> Vec<Record<'a>> {
    use crate::rows::NodeState::*;
    let mut groups: Vec<(Vec<String>, Vec<&NodeRow>)> = Vec::new();
    for n in nodes.iter().filter(|n| {
        matches!(n.state, Down | Drained | Draining)
            && n.reason.is_some()
            && parts.iter().any(|p| n.partitions.contains(&p.name))
    }) {
        let mut key = group_key(n, format);
        if !format.fields.iter().any(|f| matches!(f.code, 't' | 'T')) {
            key[0].clear(); // the state splits a reason's line only when printed
        }
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(n),
            None => groups.push((key, vec![n])),
        }
    }
    groups
        .into_iter()
        .map(|(_, nodes)| Record { part: None, nodes })
        .collect()
}

/// The format a report prints: `-o` (refused with `-l`, as sinfo refuses it), else `-R`'s,
/// `-s`'s or `-N`'s, else `SINFO_FORMAT`, else the partition view's (checked against Slurm
/// 22.05: those three set the environment's format aside, `-l` does not).
pub fn format_of(args: &SinfoArgs) -> Result<String, String> {
    if args.long && (args.format.is_some() || args.format_long.is_some()) {
        return Err(format::FORMAT_WITH_LONG.to_string());
    }
    let fixed = match (args.list_reasons, args.summarize, args.node, args.long) {
        (true, _, _, false) => Some(REASONS_FORMAT),
        (true, _, _, true) => Some(REASONS_LONG_FORMAT),
        (false, true, _, _) => Some(SUMMARIZE_FORMAT),
        (false, false, true, true) => Some(NODE_LONG_FORMAT),
        (false, false, true, false) => Some(NODE_FORMAT),
        (false, false, false, _) => None,
    };
    Ok(match (&args.format, fixed, &args.env_format) {
        (Some(f), _, _) => f.clone(),
        (None, Some(f), _) => f.to_string(),
        (None, None, Some(f)) => f.clone(),
        (None, None, None) if args.long => LONG_FORMAT.to_string(),
        (None, None, None) => DEFAULT_FORMAT.to_string(),
    })
}

/// Pick the format, filter, group and format.
pub fn report(
    args: &SinfoArgs,
    parts: &[PartRow],
    nodes: &[NodeRow],
    tz: &jiff::tz::TimeZone,
) -> Result<(String, Vec<String>), String> {
    let wanted_nodes: Option<Vec<String>> = match &args.nodes {
        Some(list) => Some(hostlist::expand(list).map_err(|e| e.to_string())?),
        None => None,
    };
    let parts: Vec<PartRow> = parts
        .iter()
        .filter(|p| {
            args.partitions.is_empty()
                || args
                    .partitions
                    .iter()
                    .any(|q| crate::sbatch::manifest::partition_object_name(q) == p.name)
        })
        .cloned()
        .collect();
    let nodes: Vec<NodeRow> = nodes
        .iter()
        .filter(|n| wanted_nodes.as_ref().is_none_or(|w| w.contains(&n.name)))
        .filter(|n| args.states.is_empty() || args.states.iter().any(|s| n.state.matches(s)))
        .filter(|n| !args.dead || n.not_responding)
        .filter(|n| !args.responding || !n.not_responding)
        .cloned()
        .collect();
    let fmt = format_of(args)?;
    let (format, warnings) = match &args.format_long {
        Some(f) => format::parse_long_format(f, LONG_NAMES, "node"),
        None => format::parse_format(&fmt, valid_code),
    };
    if args.list_reasons {
        let recs = reasons(&parts, &nodes, &format);
        return Ok((render(&recs, &format, !args.noheader, tz), warnings));
    }
    let filtering =
        wanted_nodes.is_some() || !args.states.is_empty() || args.dead || args.responding;
    let mut recs = records(
        &parts,
        &nodes,
        &format,
        args.node,
        args.summarize && args.format.is_none(),
    );
    if filtering {
        recs.retain(|r| !r.nodes.is_empty());
    }
    Ok((render(&recs, &format, !args.noheader, tz), warnings))
}

/// Run `muster sinfo`.
pub async fn run(args: &SinfoArgs, target: &Target<'_>, io: &mut Io<'_>) -> anyhow::Result<()> {
    let mut args = args.clone();
    args.env_format = (io.env)("SINFO_FORMAT");
    let args = &args;
    if let Err(e) = format_of(args) {
        writeln!(io.err, "sinfo: fatal: {e}")?;
        return Err(crate::Failed.into());
    }
    let cluster = target.cluster(io.env).await?;
    let partitions = crate::fetch::partitions(&cluster).await?;
    let nodes = crate::fetch::nodes(&cluster).await?;
    let gpunodes = crate::fetch::gpunodes(&cluster).await;
    let jobs = crate::fetch::batchjobs_all_or_own(&cluster).await?;
    let (parts, node_rows) = crate::rows::cluster_rows(&partitions, &nodes, &gpunodes, &jobs);
    if let Some(v) = &args.nodes
        && !v.contains(['[', ','])
        && !nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(v.as_str()))
        && let Some(h) = crate::cluster::dash_n_hint(&cluster, "sinfo", "node list", v).await
    {
        writeln!(io.err, "{h}")?;
    }
    let tz = jiff::tz::TimeZone::system();
    let (text, warnings) = report(args, &parts, &node_rows, &tz).map_err(|e| anyhow::anyhow!(e))?;
    for w in warnings {
        writeln!(io.err, "sinfo: error: {w}")?;
    }
    // As sinfo.c: the date heads a long report (unless -h).
    if args.long && !args.noheader {
        writeln!(io.out, "{}", format::date_line(jiff::Timestamp::now(), &tz))?;
    }
    write!(io.out, "{text}")?;
    Ok(())
}
