//! Multifactor priority and fair-share usage.
//!
//! ```text
//! priority = round( weight_age        * min(1, (age + short_limit_age * short) / max_age)
//!                 + weight_job_size   * min(1, job GPUs / partition GPUs)
//!                 + weight_fair_share * 2^(-U/S) )  -  nice
//! ```
//! `age` counts from the job's eligible time (its submit time until the operator records
//! one). For a job without GPUs the size factor is its node count over the partition's. `U`
//! is the namespace's share of all decayed usage (GPU-seconds, halved every
//! `fair_share_half_life_secs`), `S` its share of the configured shares (1 each by default)
//! among namespaces that have usage or jobs — Slurm's classic fair-share factor, so a
//! namespace using exactly its share scores 0.5, an idle one 1. `--priority` replaces the
//! sum; the result is clamped to `0..=u32::MAX`. Ties go to the earlier queued time (when the
//! age starts less the credit below, [`queued_since`]), then the earlier submit time, then
//! the lower job id ([`queue_key`]).
//!
//! **Short limits first, within a bound.** `short` is the job's short-limit factor
//! ([`short_limit_factor`]): 1 for a time limit of 15 minutes or less, 0 for 30 days or
//! more (and unlimited), linear in the logarithm of the limit between (1 h: 0.83, 8 h: 0.56,
//! 1 day: 0.43, 7 days: 0.18). A job's age is credited `short_limit_age * short` (default:
//! 7 days times the factor): among jobs of equal fair share a shorter job is queued as if it
//! had been submitted that much earlier, and jobs of equal priority are ordered by that
//! queued time, so the order does not change when an age factor fills. The credit is
//! bounded twice. With equal fair share and nice, a job is passed only by jobs submitted
//! less than `short_limit_age` after it. And a one-node job never passes a waiting multi-node
//! gang ([`spans_nodes`]) of its partition whose age started before its own
//! ([`capped_short_limit_factors`]): a gang needs room freed on many nodes at once, and a
//! later job that passed it would take the nodes it waits for, without end under a steady
//! stream of short jobs. Under overload that cap makes the tail of the wait: the gangs'
//! reservations hold the whole nodes that long one-node jobs, passed by every shorter job
//! too, wait for. So a one-node job that has waited `pass_gangs_after_secs` (4 h) is capped
//! only by the gangs that have waited `gang_firm_after_secs` (8 h): it may pass a younger
//! gang, and a gang is passed by no one-node job once firm, so it cannot starve. A gang gets
//! the credit of its own limit, so it is not put ahead of
//! earlier jobs for being a gang. A one-node job that would end after every running job of
//! its partition ([`ends_last`]) gets the whole credit: it sets when the work ends, and the
//! credit alone would have it passed for days. Why, and what it gives (`muster bench
//! --quality`): README, "Scheduling quality", and operator/QUALITY.md. It needs limits that
//! say something about run times: with one limit for every job it orders by submit time.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::engine::end_of;
use super::model::{Config, JobId, PartitionId, PendingJob, RunningJob};
use super::shape::Demand;

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
    /// The short-limit factor, 0–1 ([`capped_short_limit_factors`]; 0: no age credit).
    pub short_limit: f64,
}

/// Time limits up to this get the whole short-limit factor.
pub const SHORT_LIMIT_FULL_SECS: u64 = 15 * 60;

/// Time limits from this (and unlimited jobs) get none.
pub const SHORT_LIMIT_NONE_SECS: u64 = 30 * 24 * 3600;

/// The short-limit factor of a time limit (`None`: unlimited): 1 up to
/// [`SHORT_LIMIT_FULL_SECS`], 0 from [`SHORT_LIMIT_NONE_SECS`], linear in the logarithm of
/// the limit between.
pub fn short_limit_factor(limit_secs: Option<u64>) -> f64 {
    let Some(l) = limit_secs else {
        return 0.0;
    };
    let l = l.clamp(SHORT_LIMIT_FULL_SECS, SHORT_LIMIT_NONE_SECS) as f64;
    let none = SHORT_LIMIT_NONE_SECS as f64;
    (none / l).ln() / (none / SHORT_LIMIT_FULL_SECS as f64).ln()
}

/// Whether a request spans nodes: more than one node, or more GPUs than the widest node has
/// (`widest_node`). Such a gang gets the whole short-limit factor.
pub fn spans_nodes(d: &Demand, widest_node: u32) -> bool {
    d.min_nodes >= 2 || d.min_gpus() > u64::from(widest_node)
}

/// A request's share of its partition, for the size factor: its GPUs over the partition's
/// `gpus`, or, for a request without GPUs (or a partition without any), its nodes over the
/// partition's `nodes`; 0 for an empty partition.
pub fn size_fraction(d: &Demand, gpus: u64, nodes: u64) -> f64 {
    if d.unit.gpus > 0 && gpus > 0 {
        d.min_gpus() as f64 / gpus as f64
    } else if nodes > 0 {
        f64::from(d.min_nodes) / nodes as f64
    } else {
        0.0
    }
}

/// One waiting job, for [`capped_short_limit_factors`].
#[derive(Clone, Copy, Debug)]
pub struct ShortLimitInput {
    /// When its age starts (eligible time, else submit time).
    pub since: i64,
    /// Its partition (gangs cap only the jobs of their own partition).
    pub partition: Option<u32>,
    /// Its own short-limit factor ([`short_limit_factor`]).
    pub factor: f64,
    /// Whether it spans nodes ([`spans_nodes`]).
    pub gang: bool,
}

/// The short-limit factors of a queue at `now`, each one-node job's own capped so that it
/// passes no gang of its partition whose age started before or with its own: the credit is
/// at most the gang's credit plus how much longer the gang has waited, less one second. A
/// gang needs room freed on many nodes at once; a later job that passed it would take the
/// nodes it waits for, without end under a steady stream of short jobs.
///
/// A one-node job that has waited [`Config::pass_gangs_after_secs`] is capped only by the
/// gangs that have waited [`Config::gang_firm_after_secs`]: under overload the gangs'
/// reservations would otherwise hold the whole nodes that long one-node jobs wait for, and
/// those jobs, passed by every shorter one too, make the wait's tail; a gang still becomes
/// firm after a bounded wait, so a stream of old one-node jobs cannot starve it.
pub fn capped_short_limit_factors(jobs: &[ShortLimitInput], now: i64, cfg: &Config) -> Vec<f64> {
    let mut out: Vec<f64> = jobs.iter().map(|j| j.factor).collect();
    let span = cfg.short_limit_age_secs as f64;
    if span <= 0.0 || cfg.weight_age <= 0.0 || !jobs.iter().any(|j| j.gang) {
        return out;
    }
    let secs = |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
    let (pass_after, firm_after) = (
        secs(cfg.pass_gangs_after_secs),
        secs(cfg.gang_firm_after_secs),
    );
    let waited = |j: &ShortLimitInput| now.saturating_sub(j.since);
    let mut by_since: Vec<usize> = (0..jobs.len()).collect();
    // Gangs first among equal times: a job is capped by a gang that started with it.
    by_since.sort_unstable_by_key(|&i| (jobs[i].since, !jobs[i].gang, i));
    // Per partition, the least of (gang credit - gang since) over the gangs seen, and over
    // the firm ones among them.
    let mut least: BTreeMap<Option<u32>, f64> = BTreeMap::new();
    let mut least_firm: BTreeMap<Option<u32>, f64> = BTreeMap::new();
    let lower = |m: &mut BTreeMap<Option<u32>, f64>, p: Option<u32>, v: f64| {
        m.entry(p).and_modify(|l| *l = l.min(v)).or_insert(v);
    };
    for i in by_since {
        let j = &jobs[i];
        if j.gang {
            let v = j.factor.clamp(0.0, 1.0) * span - j.since as f64;
            lower(&mut least, j.partition, v);
            if waited(j) >= firm_after {
                lower(&mut least_firm, j.partition, v);
            }
        } else {
            let bound = if waited(j) >= pass_after {
                &least_firm
            } else {
                &least
            };
            if let Some(l) = bound.get(&j.partition) {
                // A second less than the bound: at the bound the job would tie the gang on
                // priority and queued time and could come first on its id.
                let cap = ((j.since as f64 + l - 1.0) / span).max(0.0);
                out[i] = j.factor.min(cap);
            }
        }
    }
    out
}

/// When the running jobs of each partition end at the latest, by their time limits
/// ([`NEVER`](super::engine::NEVER) when one is unlimited). Jobs being stopped are left
/// out: they end within their grace time, not at their limit.
pub fn latest_ends(running: &[RunningJob]) -> BTreeMap<Option<PartitionId>, i64> {
    let mut ends = BTreeMap::new();
    for r in running.iter().filter(|r| r.stopping_since.is_none()) {
        let end = end_of(r.start_time, r.time_limit);
        ends.entry(r.partition)
            .and_modify(|e: &mut i64| *e = (*e).max(end))
            .or_insert(end);
    }
    ends
}

/// Whether a one-node job of `partition` with limit `limit_secs`, started at `now`, would
/// end after every running job of its partition ([`latest_ends`]): such a job sets when
/// the partition's work ends, so each hour it is passed is an hour more for all of it, and
/// it gets the whole short-limit credit. Under the credit alone the longest jobs were passed
/// for days (a 159 h job waited 32 h where first fit started it in 43 minutes, and the run
/// ended 15% later; operator/QUALITY.md). Never for an unlimited job, nor in a
/// partition where nothing runs (every job would qualify, and the order would be submit
/// order).
pub fn ends_last(
    limit_secs: Option<u64>,
    partition: Option<PartitionId>,
    now: i64,
    ends: &BTreeMap<Option<PartitionId>, i64>,
) -> bool {
    limit_secs.is_some()
        && ends
            .get(&partition)
            .is_some_and(|&latest| end_of(now, limit_secs) > latest)
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

/// Seconds of age a job is credited for its short-limit factor (`short_limit` ×
/// [`Config::short_limit_age_secs`], whole seconds; none when age has no weight).
pub fn short_limit_credit(short_limit: f64, cfg: &Config) -> i64 {
    if cfg.weight_age <= 0.0 {
        return 0;
    }
    (cfg.short_limit_age_secs as f64 * short_limit.clamp(0.0, 1.0)).round() as i64
}

/// When a job counts as queued, for ordering jobs of equal priority: when its age starts
/// ([`age_start`]) less its short-limit credit. Ordering ties by it (then by submit time and
/// id) keeps jobs in the order of their credited age when their age factors are full. It is
/// read from the same clock as the age and the gang cap: a job whose eligible time was
/// recorded a second after its submit time would otherwise tie a gang it may not pass and
/// come first.
pub fn queued_since(age_start: i64, short_limit: f64, cfg: &Config) -> i64 {
    age_start.saturating_sub(short_limit_credit(short_limit, cfg))
}

/// When a waiting job's age starts: its eligible time, else (until the operator records one)
/// its submit time.
pub fn age_start(job: &PendingJob) -> i64 {
    job.eligible_time.unwrap_or(job.submit_time)
}

/// A waiting job's place in the queue, smallest first: partition tier (high first), priority
/// (high first), queued time ([`queued_since`]), submit time, job id, then `pos` (the job's
/// index in its list). The one order of the scheduling cycle and of the simulator's queue cut.
pub type QueueKey = (Reverse<u32>, Reverse<u32>, i64, i64, JobId, usize);

/// [`QueueKey`] of `job` with its partition's `tier`, its `priority` and its (capped)
/// short-limit factor.
pub fn queue_key(
    job: &PendingJob,
    tier: u32,
    priority: u32,
    short_limit: f64,
    cfg: &Config,
    pos: usize,
) -> QueueKey {
    let queued = queued_since(age_start(job), short_limit, cfg);
    (
        Reverse(tier),
        Reverse(priority),
        queued,
        job.submit_time,
        job.id,
        pos,
    )
}

/// What the queue order reads of one waiting job beside the job itself.
#[derive(Clone, Copy, Debug)]
pub struct QueueInput<'a> {
    /// The job.
    pub job: &'a PendingJob,
    /// Its partition's priority tier (0 without a partition).
    pub tier: u32,
    /// Its effective time limit in seconds (`None`: unlimited), for [`short_limit_factor`].
    pub limit_secs: Option<u64>,
    /// Whether it spans nodes ([`spans_nodes`]).
    pub gang: bool,
    /// Its GPUs (or nodes when it has none) over its partition's.
    pub size_fraction: f64,
}

/// The [`QueueKey`] of every job of a queue at `now`, in input order (`pos` is the index):
/// short-limit factors (the whole factor for a one-node job that would end after every job
/// of `running` in its partition, [`ends_last`]) capped by the queue's gangs
/// ([`capped_short_limit_factors`]), then
/// [`priority`] and [`queue_key`]. The one pipeline of the scheduling cycle's order and of
/// the simulator's queue cut.
pub fn queue_keys(
    jobs: &[QueueInput<'_>],
    running: &[RunningJob],
    fair_share: &BTreeMap<String, f64>,
    now: i64,
    cfg: &Config,
) -> Vec<QueueKey> {
    let ends = latest_ends(running);
    let shorts: Vec<ShortLimitInput> = jobs
        .iter()
        .map(|q| ShortLimitInput {
            since: age_start(q.job),
            partition: q.job.partition,
            factor: if !q.gang && ends_last(q.limit_secs, q.job.partition, now, &ends) {
                1.0
            } else {
                short_limit_factor(q.limit_secs)
            },
            gang: q.gang,
        })
        .collect();
    let shorts = capped_short_limit_factors(&shorts, now, cfg);
    jobs.iter()
        .zip(shorts)
        .enumerate()
        .map(|(pos, (q, short))| {
            let j = q.job;
            let pr = priority(
                &PriorityInput {
                    namespace: &j.namespace,
                    age_secs: now - age_start(j),
                    size_fraction: q.size_fraction,
                    nice: j.nice,
                    fixed: j.priority,
                    short_limit: short,
                },
                fair_share,
                cfg,
            );
            queue_key(j, q.tier, pr, short, cfg, pos)
        })
        .collect()
}

/// A job's priority.
pub fn priority(inp: &PriorityInput<'_>, fair_share: &BTreeMap<String, f64>, cfg: &Config) -> u32 {
    if let Some(p) = inp.fixed {
        return p;
    }
    let credit = short_limit_credit(inp.short_limit, cfg) as f64;
    let age = if cfg.max_age_secs == 0 {
        1.0
    } else {
        ((inp.age_secs.max(0) as f64 + credit) / cfg.max_age_secs as f64).min(1.0)
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
            short_limit: 0.0,
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
    fn the_short_limit_factor_falls_with_the_log_of_the_limit() {
        let f = short_limit_factor;
        assert_eq!(f(Some(60)), 1.0);
        assert_eq!(f(Some(SHORT_LIMIT_FULL_SECS)), 1.0);
        assert_eq!(f(Some(SHORT_LIMIT_NONE_SECS)), 0.0);
        assert_eq!(f(Some(u64::MAX)), 0.0);
        assert_eq!(f(None), 0.0);
        for (limit, want) in [
            (3_600, 0.83),
            (8 * 3_600, 0.56),
            (86_400, 0.43),
            (7 * 86_400, 0.18),
        ] {
            assert!(
                (f(Some(limit)) - want).abs() < 0.005,
                "{limit}: {}",
                f(Some(limit))
            );
        }
        // Halving the limit always adds the same amount.
        let step = f(Some(1_800)) - f(Some(3_600));
        assert!((f(Some(43_200)) - f(Some(86_400)) - step).abs() < 1e-12);
    }

    #[test]
    fn the_size_fraction_is_gpus_over_the_partitions_else_nodes() {
        use crate::core::model::{JobRequest, Partition};
        use crate::core::shape::normalize;
        let gang = normalize(
            &JobRequest {
                min_nodes: Some(4),
                gpus_per_node: Some(8),
                ..JobRequest::default()
            },
            &Partition::default(),
        )
        .unwrap();
        let cpu_only = normalize(
            &JobRequest {
                min_nodes: Some(2),
                ..JobRequest::default()
            },
            &Partition::default(),
        )
        .unwrap();
        assert_eq!(size_fraction(&gang, 128, 16), 0.25);
        // No GPUs in the partition: nodes.
        assert_eq!(size_fraction(&gang, 0, 16), 0.25);
        assert_eq!(size_fraction(&cpu_only, 128, 16), 0.125);
        assert_eq!(size_fraction(&cpu_only, 0, 0), 0.0);
    }

    #[test]
    fn queue_keys_put_a_later_short_job_behind_an_earlier_gang_and_ahead_of_longer_jobs() {
        let cfg = Config::default();
        let job = |id, submit| {
            let mut j = PendingJob::new(id, submit, Default::default());
            j.partition = Some(0);
            j
        };
        let (gang, long, short, tiered) = (job(1, 0), job(2, 10), job(3, 3_600), job(4, 7_000));
        let month = Some(SHORT_LIMIT_NONE_SECS);
        let q = |job, limit_secs, gang, tier| QueueInput {
            job,
            tier,
            limit_secs,
            gang,
            size_fraction: 0.0,
        };
        let mut keys = queue_keys(
            &[
                q(&gang, month, true, 0),
                q(&long, month, false, 0),
                q(&short, Some(900), false, 0),
                q(&tiered, month, false, 1),
            ],
            &[],
            &BTreeMap::new(),
            7_200,
            &cfg,
        );
        // `pos` is the input index.
        assert_eq!(keys.iter().map(|k| k.5).collect::<Vec<_>>(), [0, 1, 2, 3]);
        keys.sort_unstable();
        // The higher tier first; the short job is credited past the long one but capped a
        // second behind the gang that waited longer.
        assert_eq!(keys.iter().map(|k| k.4).collect::<Vec<_>>(), [4, 1, 3, 2]);
        assert_eq!(
            keys[2].2, 1,
            "the short job is queued a second after the gang"
        );
    }

    #[test]
    fn a_one_node_job_that_would_end_after_every_running_job_is_not_passed_for_its_limit() {
        let cfg = Config::default();
        let job = |id, submit| {
            let mut j = PendingJob::new(id, submit, Default::default());
            j.partition = Some(0);
            j
        };
        let (long, short) = (job(1, 0), job(2, 600));
        let week = Some(7 * 24 * 3600);
        let q = |job, limit_secs| QueueInput {
            job,
            tier: 0,
            limit_secs,
            gang: false,
            size_fraction: 0.0,
        };
        let running = |limit: Option<u64>| RunningJob {
            id: 9,
            partition: Some(0),
            time_limit: limit,
            ..Default::default()
        };
        let first = |run: &[RunningJob]| {
            let mut keys = queue_keys(
                &[q(&long, week), q(&short, Some(3_600))],
                run,
                &BTreeMap::new(),
                3_600,
                &cfg,
            );
            keys.sort_unstable();
            keys[0].4
        };
        // A running job ends within the hour: the week-long job would end last, so the
        // later one-hour job does not pass it.
        assert_eq!(first(&[running(Some(3_600))]), 1);
        // A running job ends after it (or has no limit): short limits first.
        assert_eq!(first(&[running(Some(30 * 24 * 3600))]), 2);
        assert_eq!(first(&[running(None)]), 2);
        // Nothing runs in the partition: short limits first too.
        assert_eq!(first(&[]), 2);
        let ends = latest_ends(&[running(Some(100)), running(Some(50))]);
        assert_eq!(ends.get(&Some(0)), Some(&100));
        // A job being stopped ends within its grace time, not at its limit.
        let mut stopping = running(Some(200));
        stopping.stopping_since = Some(0);
        let with_stopping = latest_ends(&[running(Some(100)), stopping.clone()]);
        assert_eq!(with_stopping.get(&Some(0)), Some(&100));
        assert!(latest_ends(&[stopping]).is_empty());
        assert!(!ends_last(None, Some(0), 0, &ends), "unlimited");
        assert!(
            !ends_last(Some(100), Some(1), 0, &ends),
            "another partition"
        );
        assert!(!ends_last(Some(100), Some(0), 0, &ends), "ends with it");
        assert!(ends_last(Some(101), Some(0), 0, &ends));
    }

    #[test]
    fn one_node_jobs_are_capped_by_the_gangs_that_waited_longer() {
        let cfg = Config::default();
        let span = cfg.short_limit_age_secs as f64;
        let job = |since, partition, factor, gang| ShortLimitInput {
            since,
            partition: Some(partition),
            factor,
            gang,
        };
        let jobs = [
            // A gang with no limit, waiting since 0.
            job(0, 0, 0.0, true),
            // A 15-minute job an hour later: capped to the gang's credit plus the hour, less
            // a second.
            job(3_600, 0, 1.0, false),
            // The same before the gang: not capped.
            job(-60, 0, 1.0, false),
            // The same in another partition: not capped.
            job(3_600, 1, 1.0, false),
            // A later gang keeps its own factor.
            job(7_200, 0, 0.9, true),
            // Under its cap already.
            job(3_600, 0, 0.0001, false),
        ];
        // An hour and a half in: no one-node job has waited long enough to pass a gang.
        let now = 5_400;
        let got = capped_short_limit_factors(&jobs, now, &cfg);
        assert_eq!(got, [0.0, 3_599.0 / span, 1.0, 1.0, 0.9, 0.0001]);
        // No gang, or no credit: the jobs' own factors.
        assert_eq!(
            capped_short_limit_factors(&jobs[1..4], now, &cfg),
            [1.0, 1.0, 1.0]
        );
        let off = Config {
            short_limit_age_secs: 0,
            ..Config::default()
        };
        assert_eq!(
            capped_short_limit_factors(&jobs, now, &off),
            jobs.map(|j| j.factor)
        );
    }

    #[test]
    fn a_one_node_job_that_waited_long_passes_gangs_until_they_are_firm() {
        let cfg = Config::default();
        let span = cfg.short_limit_age_secs as f64;
        let (pass, firm) = (
            cfg.pass_gangs_after_secs as i64,
            cfg.gang_firm_after_secs as i64,
        );
        let job = |since, factor, gang| ShortLimitInput {
            since,
            partition: Some(0),
            factor,
            gang,
        };
        // A gang with no limit, then a 15-minute job an hour after it.
        let jobs = [job(0, 0.0, true), job(3_600, 1.0, false)];
        let capped = 3_599.0 / span;
        let at = |now| capped_short_limit_factors(&jobs, now, &cfg)[1];
        // Capped while the job has waited less than `pass_gangs_after_secs`.
        assert_eq!(at(3_600 + pass - 1), capped);
        // Then its own credit, while the gang has waited less than `gang_firm_after_secs`.
        assert_eq!(at(3_600 + pass), 1.0);
        assert_eq!(at(firm - 1), 1.0);
        // A firm gang caps it again, however long it has waited.
        assert_eq!(at(firm), capped);
        assert_eq!(at(10 * firm), capped);
        // 0 makes every gang firm from its start: the cap without exception.
        let always = Config {
            gang_firm_after_secs: 0,
            ..Config::default()
        };
        assert_eq!(
            capped_short_limit_factors(&jobs, 3_600 + pass, &always)[1],
            capped
        );
        // Of two gangs, only the firm one bounds a job that waited long, though the younger
        // one's bound is tighter.
        let two = [
            job(0, 0.5, true),
            job(1_000, 0.0, true),
            job(3_600, 1.0, false),
        ];
        let now = firm + 500;
        assert_eq!(
            capped_short_limit_factors(&two, now, &cfg)[2],
            (3_599.0 + 0.5 * span) / span,
            "the first gang is firm, the second not"
        );
        // Once the second is firm too, its tighter bound holds.
        assert_eq!(
            capped_short_limit_factors(&two, firm + 1_000, &cfg)[2],
            (3_600.0 - 1_000.0 - 1.0) / span
        );
        let young = [job(0, 0.5, true), job(3_600, 1.0, false)];
        assert_eq!(
            capped_short_limit_factors(&young, firm - 1, &cfg)[1],
            1.0,
            "a younger gang with credit does not bound it"
        );
    }

    #[test]
    fn a_short_limit_is_credited_as_age_up_to_the_full_factor() {
        let cfg = Config::default();
        let fs = BTreeMap::new();
        let at = |age: i64, short: f64| {
            priority(
                &PriorityInput {
                    namespace: "a",
                    age_secs: age,
                    size_fraction: 0.0,
                    nice: 0,
                    fixed: None,
                    short_limit: short,
                },
                &fs,
                &cfg,
            )
        };
        // Fair share 1 for a namespace without usage: 10,000.
        assert_eq!(at(0, 0.0), 10_000);
        // Half the credit is half of max_age.
        assert_eq!(at(0, 0.5), 10_500);
        assert_eq!(at(3 * 86_400, 0.5), at(3 * 86_400 + 302_400, 0.0));
        // The credit and the age together are capped at the full age factor.
        assert_eq!(at(0, 1.0), 11_000);
        assert_eq!(at(86_400, 1.0), 11_000);
        assert_eq!(at(30 * 86_400, 0.0), 11_000);
        // No credit without the age weight, nor with shortLimitAgeSecs 0.
        let off = Config {
            short_limit_age_secs: 0,
            ..Config::default()
        };
        let p = |cfg: &Config| {
            let inp = PriorityInput {
                namespace: "a",
                age_secs: 0,
                size_fraction: 0.0,
                nice: 0,
                fixed: None,
                short_limit: 1.0,
            };
            priority(&inp, &fs, cfg)
        };
        assert_eq!(p(&off), 10_000);
        let no_age = Config {
            weight_age: 0.0,
            ..Config::default()
        };
        assert_eq!(p(&no_age), 10_000);
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
