//! Multifactor priority and fair-share usage.
//!
//! ```text
//! priority = round( weight_age       * min(1, age / max_age)
//!                 + weight_job_size  * min(1, job GPUs / partition GPUs)
//!                 + weight_fair_share * 2^(-U/S) )  -  nice
//! ```
//! `age` counts from the job's eligible time (its submit time until the operator records
//! one). For a job without GPUs the size factor is its node count over the partition's. `U`
//! is the namespace's share of all decayed usage (GPU-seconds, halved every
//! `fair_share_half_life_secs`), `S` its share of the configured shares (1 each by default)
//! among namespaces that have usage or jobs — Slurm's classic fair-share factor, so a
//! namespace using exactly its share scores 0.5, an idle one 1. `--priority` replaces the
//! sum; the result is clamped to `0..=u32::MAX`. Ties go to the earlier submit time, then the
//! lower job id.

use std::collections::BTreeMap;

use super::model::{Config, RunningJob};

/// Inputs of one job's priority.
pub struct PriorityInput<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Seconds since eligible.
    pub age_secs: i64,
    /// The job's GPUs (or nodes when it has none) over the partition's.
    pub size_fraction: f64,
    /// `--nice`.
    pub nice: i32,
    /// `--priority`.
    pub fixed: Option<u32>,
}

/// The fair-share factor of every namespace (Slurm's `2^(-U/S)`).
pub fn fair_share_factors<'a>(
    usage: &'a BTreeMap<String, f64>,
    active: impl IntoIterator<Item = &'a str>,
    cfg: &Config,
) -> BTreeMap<String, f64> {
    let mut names: std::collections::BTreeSet<&str> = usage.keys().map(String::as_str).collect();
    names.extend(active);
    let total_usage: f64 = usage.values().filter(|v| v.is_finite() && **v > 0.0).sum();
    let share = |ns: &str| f64::from(*cfg.shares.get(ns).unwrap_or(&1));
    let total_shares: f64 = names.iter().map(|k| share(k)).sum();
    names
        .into_iter()
        .map(|ns| {
            let u = if total_usage > 0.0 {
                usage
                    .get(ns)
                    .copied()
                    .filter(|v| v.is_finite() && *v > 0.0)
                    .unwrap_or(0.0)
                    / total_usage
            } else {
                0.0
            };
            let s = if total_shares > 0.0 {
                share(ns) / total_shares
            } else {
                0.0
            };
            let f = if s > 0.0 { (-(u / s)).exp2() } else { 0.0 };
            (ns.to_string(), f)
        })
        .collect()
}

/// A job's priority.
pub fn priority(inp: &PriorityInput<'_>, fair_share: &BTreeMap<String, f64>, cfg: &Config) -> u32 {
    if let Some(p) = inp.fixed {
        return p;
    }
    let age = if cfg.max_age_secs == 0 {
        1.0
    } else {
        (inp.age_secs.max(0) as f64 / cfg.max_age_secs as f64).min(1.0)
    };
    let size = inp.size_fraction.clamp(0.0, 1.0);
    let fs = fair_share.get(inp.namespace).copied().unwrap_or(1.0);
    let sum = cfg.weight_age * age + cfg.weight_job_size * size + cfg.weight_fair_share * fs;
    let p = sum.round() - f64::from(inp.nice);
    p.clamp(0.0, f64::from(u32::MAX)) as u32
}

/// What fair-share accrual reads of a running job: its namespace, when it started, when its
/// time limit ends it, and the GPUs it holds. The operator keeps these between cycles rather
/// than the jobs (whose task records are one per task: 200,000 at 16,384 nodes).
#[derive(Clone, Debug, PartialEq)]
pub struct UsageSpan {
    /// The namespace charged.
    pub namespace: String,
    /// When the job started.
    pub start: i64,
    /// When its time limit ends it (`None`: unlimited).
    pub end: Option<i64>,
    /// GPUs held ([`RunningJob::gpu_count`]).
    pub gpus: u64,
}

impl UsageSpan {
    /// The span of `job`.
    pub fn of(job: &RunningJob) -> UsageSpan {
        UsageSpan {
            namespace: job.namespace.clone(),
            start: job.start_time,
            end: job.end_time(),
            gpus: job.gpu_count(),
        }
    }
}

/// Fair-share usage carried from `from` to `to`: every namespace's usage decays by
/// `2^(-(to-from)/half_life)`, and each running job adds its GPUs × the seconds it ran in
/// `[from, to)`, decayed from the middle of that span. The operator stores the result (e.g.
/// in a status) and passes it as [`Snapshot::usage`](super::Snapshot::usage) next cycle.
pub fn decay_usage(
    usage: &BTreeMap<String, f64>,
    running: &[RunningJob],
    from: i64,
    to: i64,
    half_life_secs: u64,
) -> BTreeMap<String, f64> {
    let spans: Vec<UsageSpan> = running.iter().map(UsageSpan::of).collect();
    decay_usage_spans(usage, &spans, from, to, half_life_secs)
}

/// [`decay_usage`] over the jobs' [`UsageSpan`]s.
pub fn decay_usage_spans(
    usage: &BTreeMap<String, f64>,
    running: &[UsageSpan],
    from: i64,
    to: i64,
    half_life_secs: u64,
) -> BTreeMap<String, f64> {
    let span = (to - from).max(0) as f64;
    let hl = half_life_secs.max(1) as f64;
    let factor = (-span / hl).exp2();
    let mut out: BTreeMap<String, f64> = usage
        .iter()
        .filter(|(_, v)| v.is_finite() && **v > 0.0)
        .map(|(k, v)| (k.clone(), v * factor))
        .collect();
    for j in running {
        let start = j.start.max(from);
        let end = j.end.unwrap_or(to).min(to);
        if end <= start {
            continue;
        }
        let mid = (start + end) as f64 / 2.0;
        let add = j.gpus as f64 * (end - start) as f64 * (-(to as f64 - mid) / hl).exp2();
        *out.entry(j.namespace.clone()).or_insert(0.0) += add;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::TaskAlloc;

    #[test]
    fn fair_share_is_half_at_fair_use_and_one_when_idle() {
        let cfg = Config::default();
        let mut usage = BTreeMap::new();
        usage.insert("a".to_string(), 100.0);
        usage.insert("b".to_string(), 100.0);
        let f = fair_share_factors(&usage, ["c"], &cfg);
        // a and b each used 1/2 with a 1/3 share: 2^(-1.5).
        assert!((f["a"] - 0.5f64.powf(1.5)).abs() < 1e-9);
        assert!((f["c"] - 1.0).abs() < 1e-9);
        let mut usage = BTreeMap::new();
        usage.insert("a".to_string(), 50.0);
        usage.insert("b".to_string(), 50.0);
        let f = fair_share_factors(&usage, [], &cfg);
        assert!((f["a"] - 0.5).abs() < 1e-9);
    }

    #[test]
    fn priority_orders_by_factors_and_nice() {
        let cfg = Config::default();
        let fs: BTreeMap<String, f64> = [("heavy".to_string(), 0.1), ("light".to_string(), 0.9)]
            .into_iter()
            .collect();
        let base = PriorityInput {
            namespace: "light",
            age_secs: 0,
            size_fraction: 0.0,
            nice: 0,
            fixed: None,
        };
        let light = priority(&base, &fs, &cfg);
        let heavy = priority(
            &PriorityInput {
                namespace: "heavy",
                ..base
            },
            &fs,
            &cfg,
        );
        assert!(light > heavy);
        assert_eq!(light, 9000);
        let old = priority(
            &PriorityInput {
                age_secs: 7 * 24 * 3600 * 2,
                namespace: "light",
                ..base
            },
            &fs,
            &cfg,
        );
        assert_eq!(old, 10_000);
        let nice = priority(
            &PriorityInput {
                nice: 500,
                namespace: "light",
                ..base
            },
            &fs,
            &cfg,
        );
        assert_eq!(nice, 8500);
        let fixed = priority(
            &PriorityInput {
                fixed: Some(7),
                namespace: "light",
                ..base
            },
            &fs,
            &cfg,
        );
        assert_eq!(fixed, 7);
    }

    #[test]
    fn usage_decays_by_half_life_and_adds_running_work() {
        let mut usage = BTreeMap::new();
        usage.insert("a".to_string(), 1000.0);
        let out = decay_usage(&usage, &[], 0, 100, 100);
        assert!((out["a"] - 500.0).abs() < 1e-9);
        let job = RunningJob {
            namespace: "b".into(),
            start_time: 0,
            tasks: vec![TaskAlloc {
                gpus: vec![0, 1],
                ..Default::default()
            }],
            ..Default::default()
        };
        let out = decay_usage(&BTreeMap::new(), &[job], 0, 10, 1_000_000);
        assert!((out["b"] - 20.0).abs() < 0.01);
    }
}
