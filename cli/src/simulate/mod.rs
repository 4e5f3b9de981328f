//! `muster simulate`: replays a job trace through the real scheduling core on a modelled
//! cluster with a virtual clock, so a platform team sees how Muster would schedule its
//! workload before installing it, compares policies, and sizes a cluster.
//!
//! ```text
//! muster simulate                                  # built-in superpod + bundled ITP trace
//! muster simulate --compare                        # Muster vs Slurm-like vs FIFO vs first fit
//! muster simulate --until 2d                       # figures and placements two days in
//! muster simulate --trace sacct.txt --cluster my-cluster.yaml --out report/
//! muster simulate --synthetic 100000 --cluster big.yaml --load 0.9
//! ```
//!
//! - Inputs: the cluster spec format of [`muster_operator::core::cluster_spec`]; traces in
//!   the formats of [`trace`]; gang and time-limit rules of [`shape`].
//! - The engine and its cycle model: [`engine`]. Figures and their definitions:
//!   [`metrics`]. Outputs: [`report`] (terminal, CSV, JSON) and [`html`].

pub mod engine;
pub mod html;
pub mod metrics;
pub mod report;
pub mod shape;
pub mod trace;
pub mod workload;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use muster_operator::controller::scheduler_config;
use muster_operator::core::{ClusterSpec, Config};

use engine::{Cluster, Policy, SimOptions, SimRun, Workload, simulate};
use metrics::Summary;
use shape::{GangRule, LimitRule};
use trace::{Format, Trace};
use workload::Rules;

/// The bundled ITP trace (MIT licence: `examples/traces/LICENSE-itp-traces`), embedded so
/// `muster simulate` works from any directory.
pub const BUILTIN_TRACE: &str = include_str!("../../../examples/traces/itp-cluster06.csv");

/// How the bundled trace is named in reports.
pub const BUILTIN_TRACE_NAME: &str = "itp-cluster06.csv (bundled ITP trace)";

/// Arrival speed-up applied to the bundled trace when `--speedup` is not given: the trace
/// was recorded on a smaller cluster and offers the 1,024-GPU superpod only ~8% load at its
/// own pace; 8x faster arrivals make the peak demand (~1,400 GPUs) exceed the cluster, so
/// the policies differ.
pub const BUILTIN_SPEEDUP: f64 = 8.0;

const AFTER_HELP: &str = "\
Inputs:
  --cluster FILE    cluster spec YAML (levels, nodesPerLeaf, node template, overrides), or
                    'superpod' (default: 4 leaves x 32 nodes x 8 H100) or 'sandbox'.
  --trace FILE      ITP CSV (job_id,submission_time,duration,num_gpu); sacct --parsable2
                    output with a header (JobID|Submit|Start|End|NNodes|AllocTRES|Timelimit|
                    Partition; steps like 123.batch are skipped, arrays 123_4 kept); or native
                    YAML/JSON {partitions: [...], jobs: [{submit, runtime, spec: BatchJobSpec}]}.
                    Default: the bundled ITP trace, 8x faster arrivals (--speedup).

Cycles: the scheduler runs after a change (arrival, job end) but at most once per
--interval seconds; cycles that provably cannot start a job are skipped; each cycle sees
at most --max-queue waiting jobs in priority order (like Slurm's bf_max_job_test).

Metrics:
  wait              start - submit (mean, median, p95 by nearest rank) of started jobs;
                    longest: the longest of a started gang of 8 or more nodes
  JCT               end - submit of ended jobs
  bounded slowdown  mean of max(1, (end - submit) / max(run, 10 s))
  GPU utilisation   GPU-seconds held / (GPUs x makespan); makespan = last end - first submit
  fragmentation     while jobs wait: time-averaged share of GPUs free but stranded on
                    partially used nodes (unusable for whole-node gangs)
  idle while waiting  while jobs wait: time-averaged share of GPUs free at all
  leaf span         multi-node jobs: mean leaf switches spanned vs ceil(nodes/nodes per leaf);
                    also weighted by GPUs x run time (a long wide gang counts for more)
  estimated starts  |start - first reservation estimate| of jobs that got one

Policies (--policy, or all with --compare):
  muster     the scheduling core: topology-aware gangs, multifactor priority, backfill
             with reservations, preemption
  slurm      Slurm-like EASY backfill: submit order, a reservation for every waiting job a
             cycle tests, Slurm's topology/tree placement (lowest switch with enough nodes,
             largest-first spill, nodes in order)
  fifo       the core's placement in submit order, no backfill (stops at the first job
             that does not fit, like Slurm's sched/builtin)
  first-fit  topology-unaware first fit in submit order; jobs that do not fit are passed
             over (no reservations); every other placement rule is kept";

/// `muster simulate` options.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
#[command(
    about = "Replay a job trace through the scheduler on a modelled cluster",
    after_long_help = AFTER_HELP
)]
pub struct SimulateArgs {
    /// Job trace: ITP CSV, sacct --parsable2 output, or native YAML/JSON [default: the
    /// bundled ITP trace].
    #[arg(long, short = 't', value_name = "FILE", conflicts_with = "synthetic")]
    pub trace: Option<PathBuf>,

    /// Trace format.
    #[arg(long, value_enum, default_value_t = Format::Auto, value_name = "FORMAT")]
    pub format: Format,

    /// Generate this many jobs shaped like the trace (sizes and run times drawn from it,
    /// Poisson arrivals at --load) instead of replaying it.
    #[arg(long, value_name = "JOBS")]
    pub synthetic: Option<usize>,

    /// Offered load of a synthetic trace: GPU-seconds asked per second over the cluster's
    /// GPUs.
    #[arg(long, default_value = "0.9", value_name = "LOAD")]
    pub load: Factor,

    /// Cluster spec YAML, or the built-in 'superpod' or 'sandbox'.
    #[arg(long, short = 'c', value_name = "FILE", default_value = "superpod")]
    pub cluster: String,

    /// The scheduling core's configuration for the Muster policy, as YAML: the same file as
    /// the operator's --scheduler-config (keys weightAge, weightJobSize, weightFairShare,
    /// maxAgeSecs, backfill, maxReservations, preemption, ...; omitted keys keep their
    /// defaults; unknown keys and bad values are refused).
    #[arg(long, value_name = "FILE")]
    pub scheduler_config: Option<PathBuf>,

    /// Policy to run (ignored with --compare).
    #[arg(long, short = 'p', value_enum, default_value_t = Policy::Muster)]
    pub policy: Policy,

    /// Run every policy (muster, slurm, fifo, first-fit) and report them side by side.
    #[arg(long)]
    pub compare: bool,

    /// How GPU counts become gangs: 'nodes' = up to a node's GPUs on one node, more on
    /// whole nodes rounding up; 'gpus' = --gpus=N packed by the scheduler.
    #[arg(long, value_enum, default_value_t = GangRule::Nodes)]
    pub gang: GangRule,

    /// Time limit of jobs whose trace records none: 'auto' = run time x --limit-factor
    /// rounded up to 15m/30m/1h/2h/4h/8h/12h/1d/2d/3d/7d/14d/30d; 'exact' = the run time;
    /// or a Slurm time (4:00:00, 2-00:00:00, UNLIMITED) for all.
    #[arg(long, default_value = "auto", value_name = "RULE")]
    pub time_limit: LimitArg,

    /// Padding of 'auto' time limits.
    #[arg(long, default_value = "1.5", value_name = "FACTOR")]
    pub limit_factor: Factor,

    /// Least seconds between scheduling cycles (0: after every event).
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub interval: u64,

    /// Most waiting jobs one cycle considers, in priority order.
    #[arg(long, default_value_t = 1000, value_name = "JOBS")]
    pub max_queue: usize,

    /// Divide submit times by this (faster arrivals; run times unchanged) [default: 1, or 8
    /// for the bundled trace].
    #[arg(long, value_name = "FACTOR")]
    pub speedup: Option<Factor>,

    /// Skip (and count) trace rows that do not parse instead of stopping at the first.
    #[arg(long)]
    pub skip_bad_rows: bool,

    /// Seed of the synthetic trace generator (replays themselves are deterministic).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Stop at this simulated time after the first submit (seconds, or with a unit: 90m,
    /// 36h, 2d, or a Slurm time 1-12:00:00) and report the figures and every job's
    /// placement at that moment.
    #[arg(long, value_name = "T")]
    pub until: Option<Until>,

    /// Write report.html (inline SVG plots), summary.csv, summary.json and jobs-POLICY.csv
    /// here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// No progress bar (it is also hidden when standard error is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
}

/// A positive, finite factor (an `f64` that can be compared for equality).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Factor(pub f64);

impl Eq for Factor {}

impl std::str::FromStr for Factor {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() && v > 0.0 => Ok(Factor(v)),
            _ => Err(format!("{s:?} is not a positive number")),
        }
    }
}

impl std::fmt::Display for Factor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// `--until` value: seconds after the first submit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Until(pub i64);

impl std::str::FromStr for Until {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{s:?} is not a time: give seconds (3600), a number with s, m, h or d (90m, 2d), \
                 or a Slurm time ([D-]HH:MM:SS)"
            )
        };
        let t = s.trim();
        if t.contains(':') || t.contains('-') {
            let secs = muster_crds::slurm::TimeLimit::parse(t)
                .ok()
                .and_then(|l| l.seconds())
                .ok_or_else(bad)?;
            return i64::try_from(secs).map(Until).map_err(|_| bad());
        }
        let (num, unit) = match t.char_indices().last() {
            Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c),
            _ => (t, 's'),
        };
        let mult = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: i64 = num.parse().map_err(|_| bad())?;
        if n < 0 {
            return Err(bad());
        }
        n.checked_mul(mult).map(Until).ok_or_else(bad)
    }
}

/// `--time-limit` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitArg(pub LimitRule);

impl std::str::FromStr for LimitArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse().map(LimitArg)
    }
}

impl Default for SimulateArgs {
    fn default() -> Self {
        SimulateArgs {
            trace: None,
            format: Format::Auto,
            synthetic: None,
            load: Factor(0.9),
            cluster: "superpod".into(),
            scheduler_config: None,
            policy: Policy::Muster,
            compare: false,
            gang: GangRule::Nodes,
            time_limit: LimitArg(LimitRule::Auto),
            limit_factor: Factor(1.5),
            interval: 10,
            max_queue: 1000,
            speedup: None,
            skip_bad_rows: false,
            seed: 1,
            until: None,
            out: None,
            no_progress: true,
        }
    }
}

/// Everything a `muster simulate` run produced.
pub struct Replay {
    /// The cluster.
    pub cluster: Cluster,
    /// The trace as read.
    pub trace: Trace,
    /// The jobs as replayed.
    pub workload: Workload,
    /// The rules used.
    pub rules: Rules,
    /// Engine options used.
    pub options: SimOptions,
    /// One run per policy.
    pub runs: Vec<SimRun>,
    /// Their figures.
    pub summaries: Vec<Summary>,
}

/// `p` relative to `cwd` unless absolute.
fn resolve(cwd: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// Loads the cluster `--cluster` names (a file relative to `cwd`, or a built-in name).
pub fn load_cluster(arg: &str, cwd: &Path) -> anyhow::Result<ClusterSpec> {
    let path = resolve(cwd, Path::new(arg));
    if path.exists() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read cluster spec {arg}"))?;
        return ClusterSpec::from_yaml(&text).with_context(|| arg.to_string());
    }
    match arg {
        "superpod" => Ok(ClusterSpec::superpod()),
        "sandbox" => Ok(ClusterSpec::sandbox()),
        _ => anyhow::bail!(
            "--cluster {arg}: no such file (the built-in clusters are 'superpod' and 'sandbox')"
        ),
    }
}

/// Reads (or generates) the trace the arguments name (paths relative to `cwd`).
pub fn load_trace(args: &SimulateArgs, cwd: &Path, cluster_gpus: u64) -> anyhow::Result<Trace> {
    let base = match &args.trace {
        Some(p) => trace::read_file(
            &resolve(cwd, p),
            &p.display().to_string(),
            args.format,
            args.skip_bad_rows,
        )?,
        None => trace::parse(
            BUILTIN_TRACE_NAME,
            BUILTIN_TRACE,
            Format::Itp,
            args.skip_bad_rows,
        )?,
    };
    Ok(match args.synthetic {
        Some(n) => trace::synth::generate(n, args.seed, cluster_gpus, args.load.0, &base),
        None => base,
    })
}

/// The arrival speed-up in effect.
pub fn speedup(args: &SimulateArgs) -> f64 {
    match (args.speedup, &args.trace, args.synthetic) {
        (Some(f), _, _) => f.0,
        (None, None, None) => BUILTIN_SPEEDUP,
        _ => 1.0,
    }
}

/// Runs the replay(s) the arguments ask for; relative paths are from `cwd`.
pub fn replay(args: &SimulateArgs, cwd: &Path) -> anyhow::Result<Replay> {
    let spec = load_cluster(&args.cluster, cwd)?;
    let cluster = Cluster::from_spec(&spec).with_context(|| args.cluster.clone())?;
    let trace = load_trace(args, cwd, cluster.total_gpus)?;
    let rules = Rules {
        gang: args.gang,
        limit: args.time_limit.0,
        limit_factor: args.limit_factor.0,
        speedup: speedup(args),
    };
    let workload = workload::build(&trace, &cluster, &rules);
    let config = match &args.scheduler_config {
        None => Config::default(),
        Some(p) => {
            // The operator's parser (its --scheduler-config): one rule for both.
            scheduler_config::load(&resolve(cwd, p)).with_context(|| format!("{}", p.display()))?
        }
    };
    let options = SimOptions {
        interval: args.interval,
        max_queue: args.max_queue.max(1),
        config,
        until: args.until.map(|u| u.0),
    };
    let policies: Vec<Policy> = if args.compare {
        Policy::ALL.to_vec()
    } else {
        vec![args.policy]
    };
    let show = !args.no_progress && std::io::stderr().is_terminal();
    let multi = MultiProgress::with_draw_target(if show {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let style = ProgressStyle::with_template(
        "{prefix:>18} [{bar:40}] {pos}/{len} jobs, {elapsed} (eta {eta})",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    let bars: Vec<ProgressBar> = policies
        .iter()
        .map(|p| {
            let pb = multi.add(ProgressBar::new(workload.jobs.len() as u64));
            pb.set_style(style.clone());
            pb.set_prefix(p.label());
            pb
        })
        .collect();
    // Policies are independent replays: one thread each (deterministic all the same).
    let runs: Vec<SimRun> = std::thread::scope(|s| {
        let handles: Vec<_> = policies
            .iter()
            .zip(&bars)
            .map(|(&p, pb)| {
                let (c, w, o) = (&cluster, &workload, &options);
                s.spawn(move || {
                    let r = simulate(c, w, p, o, Some(pb));
                    pb.finish();
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a replay thread panicked"))
            .collect()
    });
    let _ = multi.clear();
    let summaries = runs
        .iter()
        .map(|r| metrics::summarize(r, &workload, &cluster))
        .collect();
    Ok(Replay {
        cluster,
        trace,
        workload,
        rules,
        options,
        runs,
        summaries,
    })
}

/// The lines above the table: what was replayed, on what, how.
pub fn header(r: &Replay) -> Vec<String> {
    let t = &r.trace;
    let span = |jobs: &[engine::SimJob]| match (jobs.first(), jobs.last()) {
        (Some(a), Some(b)) => report::dur((b.submit - a.submit) as f64),
        _ => "-".into(),
    };
    let mut v = vec![
        format!(
            "muster simulate: {} jobs from {} ({}), submitted over {}",
            report::thousands(t.jobs.len() as u64),
            t.source,
            t.format.as_str(),
            span(&r.workload.jobs)
        ),
        format!("  cluster    {}", report::cluster_line(&r.cluster)),
        format!(
            "  gangs      {}; time limits {}; arrivals x{}",
            gang_line(r),
            limit_line(r),
            r.rules.speedup
        ),
        format!(
            "  cycles     after changes, at most every {}s; up to {} waiting jobs per cycle",
            r.options.interval, r.options.max_queue
        ),
    ];
    if let Some(u) = r.options.until {
        v.push(format!(
            "  stopped    at {} after the first submit: running jobs and their nodes below",
            report::dur(u as f64)
        ));
    }
    let s = &t.skipped;
    if s.total() > 0 {
        v.push(format!(
            "  left out   {} bad row(s), {} job step(s), {} job(s) that never ran, {} without GPUs",
            s.bad_rows, s.steps, s.not_run, s.no_gpus
        ));
        for e in &s.first_errors {
            v.push(format!("             {e}"));
        }
    }
    v
}

/// How the trace's jobs became gangs: the gang rule for jobs that record only a GPU count,
/// the job's own request for the others (native traces).
fn gang_line(r: &Replay) -> String {
    let own = r
        .trace
        .jobs
        .iter()
        .filter(|j| matches!(j.ask, trace::Ask::Request(_)))
        .count();
    let rule = match r.rules.gang {
        GangRule::Nodes => format!(
            "up to {} GPUs on one node, more on whole nodes",
            r.cluster.gpus_per_node
        ),
        GangRule::Gpus => "--gpus=N packed by the scheduler".to_string(),
    };
    let total = r.trace.jobs.len();
    if total > 0 && own == total {
        "as each job's spec asks".to_string()
    } else if own == 0 {
        rule
    } else {
        format!(
            "as the spec asks for {own} job(s), {rule} for the {} with a GPU count only",
            total - own
        )
    }
}

/// Where the time limits came from: recorded in the trace, or the `--time-limit` rule.
fn limit_line(r: &Replay) -> String {
    let missing = r
        .trace
        .jobs
        .iter()
        .filter(|j| j.limit == trace::TraceLimit::Missing)
        .count();
    let rule = if r.rules.limit == LimitRule::Auto {
        format!("auto (run time x {}, bucketed)", r.rules.limit_factor)
    } else {
        r.rules.limit.to_string()
    };
    let total = r.trace.jobs.len();
    if missing == 0 && total > 0 {
        "as recorded".to_string()
    } else if missing == total {
        rule
    } else {
        format!(
            "as recorded for {}, {rule} for the {missing} without one",
            total - missing
        )
    }
}

/// Writes the terminal report.
pub fn write_report(out: &mut dyn Write, r: &Replay) -> std::io::Result<()> {
    for line in header(r) {
        writeln!(out, "{line}")?;
    }
    writeln!(out)?;
    let headings: Vec<&str> = r.runs.iter().map(|x| x.policy.label()).collect();
    report::write_table(out, &headings, &r.summaries)?;
    writeln!(out)?;
    if let Some(u) = r.options.until {
        for run in &r.runs {
            report::write_placements(out, run, &r.workload, &r.cluster, u)?;
            writeln!(out)?;
        }
    }
    writeln!(
        out,
        "Metric definitions: muster simulate --help. Plots and per-job results: --out DIR."
    )?;
    Ok(())
}

/// Writes `report.html`, `summary.csv`, `summary.json` and `jobs-POLICY.csv` to `dir`.
pub fn write_out(dir: &Path, r: &Replay) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut files = Vec::new();
    let mut put = |name: &str, body: &str| -> anyhow::Result<()> {
        let p = dir.join(name);
        std::fs::write(&p, body).with_context(|| format!("cannot write {}", p.display()))?;
        files.push(p);
        Ok(())
    };
    put("summary.csv", &report::summary_csv(&r.summaries)?)?;
    put(
        "summary.json",
        &serde_json::to_string_pretty(&serde_json::json!({
            "cluster": report::cluster_line(&r.cluster),
            "trace": r.trace.source,
            "format": r.trace.format,
            "skipped": r.trace.skipped,
            "policies": r.summaries,
        }))?,
    )?;
    for run in &r.runs {
        put(
            &format!("jobs-{}.csv", run.policy.name()),
            &report::jobs_csv(run, &r.workload, &r.cluster)?,
        )?;
    }
    put("report.html", &html::render(r))?;
    Ok(files)
}

/// `muster simulate`: runs the replay and prints the report to `out`; relative paths are
/// from `cwd`.
pub fn run(args: &SimulateArgs, cwd: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    let r = replay(args, cwd)?;
    write_report(out, &r)?;
    if let Some(dir) = &args.out {
        write_out(&resolve(cwd, dir), &r)?;
        let files = ["report.html", "summary.csv", "summary.json"]
            .iter()
            .map(|f| dir.join(f).display().to_string())
            .collect::<Vec<_>>();
        writeln!(out, "Wrote {} and jobs-POLICY.csv there", files.join(", "))?;
    }
    Ok(())
}
