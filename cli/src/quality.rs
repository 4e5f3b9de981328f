//! `muster bench --quality`: the placement-quality benchmark. Muster, the Slurm-like EASY
//! backfill baseline, FIFO and first fit replay the same workloads through `muster
//! simulate`'s engine, and the figures are printed side by side with the targets Muster is
//! held to (a benchmark prints figures; nothing here is a timed test):
//!
//! - the bundled ITP trace as `muster simulate` replays it (whole-node gangs, arrivals x8);
//! - the same trace (`itp-cluster06.csv`, MIT licence beside it in `examples/traces/`) with
//!   `--gang gpus` at its own pace, as `muster simulate --trace itp-cluster06.csv --gang
//!   gpus` replays it;
//! - synthetic traces shaped like it at offered loads 0.7, 0.9 and 1.1, three seeds each.
//!
//! Targets, per workload: Muster's mean and p95 wait at most the best of the other three,
//! its longest wait of an 8+-node gang at most the Slurm-like baseline's, its makespan
//! within 1% of the best, its mean leaf span at most 1.05 x the lower bound.

use std::path::Path;

use muster_operator::bench::BIG_GANG_NODES;

use crate::simulate::engine::Policy;
use crate::simulate::shape::GangRule;
use crate::simulate::{Factor, Replay, SimulateArgs, replay};

/// The figures of one policy on one workload.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    /// Mean wait, seconds.
    pub mean: f64,
    /// 95th percentile wait, seconds.
    pub p95: f64,
    /// Makespan, seconds.
    pub makespan: f64,
    /// Longest wait of a gang of 8 or more nodes, seconds.
    pub big_wait: f64,
    /// Mean leaf span of multi-node jobs.
    pub span: f64,
    /// Its lower bound.
    pub bound: f64,
    /// Share of multi-node jobs at the bound (0–1).
    pub at_bound: f64,
    /// Leaf span weighted by GPU-hours (not a target: a figure beside it).
    pub span_gpu_hours: f64,
    /// Its lower bound, weighted the same way.
    pub bound_gpu_hours: f64,
    /// Multi-node jobs.
    pub multi: usize,
}

/// One workload's figures, by policy in [`Policy::ALL`] order.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Its name.
    pub name: String,
    /// Figures per policy.
    pub figures: Vec<(Policy, Figures)>,
}

/// Which targets Muster meets on a workload: (mean, p95, big-gang wait, makespan, leaf
/// span).
pub fn targets(w: &Workload) -> [bool; 5] {
    let get = |p: Policy| w.figures.iter().find(|f| f.0 == p).map(|f| &f.1);
    let Some(m) = get(Policy::Muster) else {
        return [false; 5];
    };
    let others: Vec<&Figures> = w
        .figures
        .iter()
        .filter(|f| f.0 != Policy::Muster)
        .map(|f| &f.1)
        .collect();
    let best = |f: &dyn Fn(&Figures) -> f64| others.iter().map(|o| f(o)).fold(f64::MAX, f64::min);
    // Waits are whole seconds in the replay: compare them as such.
    let le = |a: f64, b: f64| a.round() <= b.round() + 1e-9;
    let slurm_big = get(Policy::Slurm).map_or(f64::MAX, |s| s.big_wait);
    [
        le(m.mean, best(&|f| f.mean)),
        le(m.p95, best(&|f| f.p95)),
        le(m.big_wait, slurm_big),
        m.makespan <= 1.01 * best(&|f| f.makespan).min(m.makespan),
        m.multi == 0 || m.span <= 1.05 * m.bound + 1e-9,
    ]
}

/// The figures of a replay.
fn figures(r: &Replay) -> Vec<(Policy, Figures)> {
    r.runs
        .iter()
        .zip(&r.summaries)
        .map(|(run, s)| {
            (
                run.policy,
                Figures {
                    mean: s.wait_mean_secs,
                    p95: s.wait_p95_secs,
                    makespan: s.makespan_secs as f64,
                    big_wait: s.big_gang_wait_max_secs.unwrap_or(0.0),
                    span: s.leaf_span_mean,
                    bound: s.leaf_span_lower_bound,
                    at_bound: s.at_leaf_lower_bound,
                    span_gpu_hours: s.leaf_span_gpu_hours,
                    bound_gpu_hours: s.leaf_span_lower_bound_gpu_hours,
                    multi: s.multi_node_jobs,
                },
            )
        })
        .collect()
}

/// Runs every workload: `synthetic_jobs` jobs per synthetic trace, `loads` and `seeds` of
/// them; Muster under `scheduler_config` (a file of the chart's `scheduler:` keys) when
/// given. `progress` is told each workload's name as it starts.
pub fn run(
    synthetic_jobs: usize,
    loads: &[f64],
    seeds: &[u64],
    scheduler_config: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<Workload>> {
    let base = SimulateArgs {
        compare: true,
        no_progress: true,
        scheduler_config: scheduler_config.map(Path::to_path_buf),
        ..SimulateArgs::default()
    };
    let mut cases: Vec<(String, SimulateArgs)> = vec![
        (
            "bundled ITP trace (whole-node gangs, arrivals x8)".into(),
            base.clone(),
        ),
        (
            "itp-cluster06.csv --gang gpus (own pace)".into(),
            SimulateArgs {
                gang: GangRule::Gpus,
                speedup: Some(Factor(1.0)),
                ..base.clone()
            },
        ),
    ];
    for &load in loads {
        for &seed in seeds {
            cases.push((
                format!("synthetic {synthetic_jobs} jobs, load {load}, seed {seed}"),
                SimulateArgs {
                    synthetic: Some(synthetic_jobs),
                    load: Factor(load),
                    seed,
                    ..base.clone()
                },
            ));
        }
    }
    let mut out = Vec::new();
    for (name, args) in cases {
        progress(&name);
        let r = replay(&args, Path::new("."))?;
        out.push(Workload {
            name,
            figures: figures(&r),
        });
    }
    Ok(out)
}

/// The report: one table per workload, the targets met, and a tally.
pub fn render(ws: &[Workload]) -> String {
    use crate::simulate::report::dur;
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Placement quality: Muster against the Slurm-like backfill baseline, FIFO and first fit"
    );
    let _ = writeln!(
        s,
        "(superpod: 4 leaves x 32 nodes x 8 GPUs; targets: Muster's mean and p95 wait <= the best \
         other, big-gang wait <= Slurm-like, makespan within 1% of the best, leaf span <= 1.05 x \
         the lower bound)"
    );
    let mut met = [0usize; 5];
    for w in ws {
        let _ = writeln!(s);
        let _ = writeln!(s, "{}", w.name);
        let _ = write!(s, "  {:<34}", "");
        for (p, _) in &w.figures {
            let _ = write!(s, " {:>20}", p.label());
        }
        let _ = writeln!(s);
        let row = |s: &mut String, label: &str, f: &dyn Fn(&Figures) -> String| {
            let _ = write!(s, "  {label:<34}");
            for (_, x) in &w.figures {
                let _ = write!(s, " {:>20}", f(x));
            }
            let _ = writeln!(s);
        };
        row(&mut s, "wait: mean", &|f| dur(f.mean));
        row(&mut s, "wait: p95", &|f| dur(f.p95));
        row(&mut s, "makespan", &|f| dur(f.makespan));
        row(
            &mut s,
            &format!("longest wait, gang of {BIG_GANG_NODES}+ nodes"),
            &|f| dur(f.big_wait),
        );
        row(&mut s, "leaf span / lower bound", &|f| {
            if f.multi == 0 {
                "-".into()
            } else {
                format!("{:.3} / {:.3}", f.span, f.bound)
            }
        });
        row(&mut s, "leaf span by GPU-hours / bound", &|f| {
            if f.multi == 0 {
                "-".into()
            } else {
                format!("{:.3} / {:.3}", f.span_gpu_hours, f.bound_gpu_hours)
            }
        });
        row(&mut s, "multi-node jobs at the bound", &|f| {
            if f.multi == 0 {
                "-".into()
            } else {
                format!("{:.1}% of {}", f.at_bound * 100.0, f.multi)
            }
        });
        let t = targets(w);
        for (m, ok) in met.iter_mut().zip(t) {
            *m += usize::from(ok);
        }
        let mark = |ok: bool| if ok { "met" } else { "MISSED" };
        let _ = writeln!(
            s,
            "  targets: mean {}, p95 {}, big-gang wait {}, makespan {}, leaf span {}",
            mark(t[0]),
            mark(t[1]),
            mark(t[2]),
            mark(t[3]),
            mark(t[4])
        );
    }
    let n = ws.len();
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "targets met over {n} workloads: mean wait {}/{n}, p95 wait {}/{n}, big-gang wait {}/{n}, \
         makespan {}/{n}, leaf span {}/{n}",
        met[0], met[1], met[2], met[3], met[4]
    );
    s
}
