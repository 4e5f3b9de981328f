//! The figures of a replay. Definitions (also in `muster simulate --help`):
//!
//! - **wait**: start of the job's last run − submit, over jobs that started; mean, median and
//!   95th percentile (nearest rank).
//! - **JCT** (job completion time): end − submit, over jobs that ended.
//! - **bounded slowdown**: mean over ended jobs of `max(1, (end − submit) / max(run, 10 s))`,
//!   `run` = end − start; the 10 s bound keeps very short jobs from dominating (Feitelson's
//!   τ = 10 s).
//! - **makespan**: last end − first submit.
//! - **GPU utilisation**: GPU-seconds held by jobs ÷ (cluster GPUs × makespan). Exclusive jobs
//!   hold their nodes' every GPU.
//! - **fragmentation**: while at least one job waits, the time-averaged share of the
//!   cluster's GPUs that are free but stranded on partially used nodes (nodes with some GPUs
//!   busy): capacity that a whole-node gang cannot use.
//! - **idle while waiting**: while at least one job waits, the time-averaged share of GPUs that
//!   are free at all (stranded, or whole nodes held back for a reservation or too few for the
//!   next gang).
//! - **leaf span**: over started multi-node jobs, mean leaf switches spanned, against the
//!   mean lower bound `⌈nodes / nodes per leaf⌉`, and the share of jobs at that bound.
//! - **leaf span by GPU-hours**: the same means, each job weighted by its GPUs × run time
//!   (to the stop, for a job still running), so a 4-day gang spread over leaves counts for
//!   what it costs, and a 10-minute one for little.
//! - **preemptions**: gangs evicted; GPU-hours of work they lost (GPUs × time run).
//! - **estimated starts**: over started jobs that got a reservation, the mean of |start −
//!   first estimate| and the share that started no later than first estimated.

use muster_operator::bench::BIG_GANG_NODES;
use serde::Serialize;

use super::engine::{Cluster, Outcome, SimRun, Workload};

/// Bounded slowdown's lower bound on the run time, in seconds.
pub const BSLD_TAU_SECS: f64 = 10.0;

/// One policy's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Policy name (`muster`, `slurm`, `fifo`, `first-fit`).
    pub policy: String,
    /// Jobs in the trace.
    pub jobs: usize,
    /// Jobs that started at least once.
    pub started: usize,
    /// Jobs that ran their whole run time.
    pub completed: usize,
    /// Jobs killed at their time limit.
    pub timeouts: usize,
    /// Jobs ended by preemption (not requeued).
    pub preempted: usize,
    /// Jobs the scheduler refused for good.
    pub rejected: usize,
    /// Jobs still waiting at the end.
    pub never_started: usize,
    /// Last end − first submit.
    pub makespan_secs: i64,
    /// Mean wait.
    pub wait_mean_secs: f64,
    /// Median wait.
    pub wait_median_secs: f64,
    /// 95th percentile wait.
    pub wait_p95_secs: f64,
    /// Longest wait of a started gang of [`BIG_GANG_NODES`] or more nodes, seconds (`None`:
    /// none started).
    pub big_gang_wait_max_secs: Option<f64>,
    /// Mean job completion time.
    pub jct_mean_secs: f64,
    /// Mean bounded slowdown.
    pub bounded_slowdown: f64,
    /// Held GPU-seconds over available GPU-seconds (0–1).
    pub gpu_utilisation: f64,
    /// Stranded free GPUs while jobs wait, share of all GPUs (0–1).
    pub fragmentation: f64,
    /// Free GPUs while jobs wait, share of all GPUs (0–1).
    pub idle_while_waiting: f64,
    /// Started jobs on more than one node.
    pub multi_node_jobs: usize,
    /// Their mean leaf span.
    pub leaf_span_mean: f64,
    /// Their mean lower bound.
    pub leaf_span_lower_bound: f64,
    /// Share of them at the lower bound (0–1).
    pub at_leaf_lower_bound: f64,
    /// Their leaf span, each weighted by its GPUs × run time.
    pub leaf_span_gpu_hours: f64,
    /// Their lower bound, weighted the same way.
    pub leaf_span_lower_bound_gpu_hours: f64,
    /// Gangs evicted.
    pub preemptions: u64,
    /// Requeues after eviction.
    pub requeues: u64,
    /// GPU-hours lost to evictions.
    pub lost_gpu_hours: f64,
    /// Started jobs that had an estimated start.
    pub estimated_jobs: usize,
    /// Their mean |start − first estimate|.
    pub estimate_error_mean_secs: f64,
    /// Share of them that started no later than first estimated (0–1).
    pub started_by_estimate: f64,
    /// Cycles that called the policy.
    pub cycles: u64,
    /// Due cycles skipped (no job could start).
    pub skipped_cycles: u64,
    /// Cycles whose queue was cut to the queue depth.
    pub truncated_cycles: u64,
    /// Seconds in the policy.
    pub policy_secs: f64,
    /// Seconds for the whole replay.
    pub wall_secs: f64,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The `p` quantile (0–1) of sorted `v` by nearest rank.
pub fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let k = (p * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[k.min(sorted.len()) - 1]
}

/// Waits of started jobs, sorted.
pub fn waits(run: &SimRun, w: &Workload) -> Vec<f64> {
    let mut v: Vec<f64> = run
        .jobs
        .iter()
        .zip(&w.jobs)
        .filter_map(|(o, j)| o.start.map(|s| (s - j.submit) as f64))
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Computes the figures of `run`.
pub fn summarize(run: &SimRun, w: &Workload, cl: &Cluster) -> Summary {
    let count = |o: Outcome| run.jobs.iter().filter(|j| j.outcome == o).count();
    let wait = waits(run, w);
    let mut jct = Vec::new();
    let mut bsld = Vec::new();
    let mut makespan_end = i64::MIN;
    for (o, j) in run.jobs.iter().zip(&w.jobs) {
        if let (Some(s), Some(e)) = (o.start, o.end) {
            let resp = (e - j.submit) as f64;
            jct.push(resp);
            let ran = (e - s) as f64;
            bsld.push((resp / ran.max(BSLD_TAU_SECS)).max(1.0));
            makespan_end = makespan_end.max(e);
        }
    }
    let first = w.jobs.first().map(|j| j.submit).unwrap_or(0);
    let makespan = if makespan_end == i64::MIN {
        0
    } else {
        makespan_end - first
    };
    let gpus = cl.total_gpus.max(1) as f64;
    let it = &run.integrals;
    let share = |x: f64, secs: f64| {
        if secs > 0.0 { x / (gpus * secs) } else { 0.0 }
    };
    let multi: Vec<(u32, u32)> = run
        .jobs
        .iter()
        .filter(|o| o.start.is_some() && o.nodes > 1)
        .map(|o| (o.leaves, cl.leaf_lower_bound(o.nodes)))
        .collect();
    // (leaves, bound) sums weighted by GPU-seconds; a job still running at the stop counts
    // to the stop, and every started job for at least a second.
    let (span_w, bound_w, weight) = run
        .jobs
        .iter()
        .filter(|o| o.nodes > 1)
        .filter_map(|o| {
            let start = o.start?;
            let end = o.end.or(run.stopped_at).unwrap_or(start);
            Some((o, (f64::from(o.gpus) * (end - start).max(1) as f64)))
        })
        .fold((0.0, 0.0, 0.0), |(s, b, w), (o, x)| {
            (
                s + x * f64::from(o.leaves),
                b + x * f64::from(cl.leaf_lower_bound(o.nodes)),
                w + x,
            )
        });
    let per_weight = |x: f64| if weight > 0.0 { x / weight } else { 0.0 };
    let est: Vec<(i64, i64)> = run
        .jobs
        .iter()
        .filter_map(|o| Some((o.start?, o.first_estimate?)))
        .collect();
    let ratio = |a: usize, b: usize| if b > 0 { a as f64 / b as f64 } else { 0.0 };
    Summary {
        policy: run.policy.name().to_string(),
        jobs: run.jobs.len(),
        started: wait.len(),
        completed: count(Outcome::Completed),
        timeouts: count(Outcome::Timeout),
        preempted: count(Outcome::Preempted),
        rejected: count(Outcome::Rejected),
        never_started: count(Outcome::NeverStarted),
        makespan_secs: makespan,
        wait_mean_secs: mean(&wait),
        wait_median_secs: nearest_rank(&wait, 0.5),
        wait_p95_secs: nearest_rank(&wait, 0.95),
        big_gang_wait_max_secs: run
            .jobs
            .iter()
            .zip(&w.jobs)
            .filter(|(o, _)| o.nodes as usize >= BIG_GANG_NODES)
            .filter_map(|(o, j)| o.start.map(|s| (s - j.submit) as f64))
            .reduce(f64::max),
        jct_mean_secs: mean(&jct),
        bounded_slowdown: mean(&bsld),
        // Stopped early (--until), GPUs were held up to the stop, not the last end.
        gpu_utilisation: share(
            it.busy_gpu_secs,
            makespan.max(run.stopped_at.map_or(0, |t| t - first)) as f64,
        ),
        fragmentation: share(it.stranded_gpu_secs, it.waiting_secs),
        idle_while_waiting: share(it.idle_gpu_secs, it.waiting_secs),
        multi_node_jobs: multi.len(),
        leaf_span_mean: mean(&multi.iter().map(|m| f64::from(m.0)).collect::<Vec<_>>()),
        leaf_span_lower_bound: mean(&multi.iter().map(|m| f64::from(m.1)).collect::<Vec<_>>()),
        at_leaf_lower_bound: ratio(multi.iter().filter(|m| m.0 <= m.1).count(), multi.len()),
        leaf_span_gpu_hours: per_weight(span_w),
        leaf_span_lower_bound_gpu_hours: per_weight(bound_w),
        preemptions: run.preemptions,
        requeues: run.jobs.iter().map(|j| u64::from(j.requeues)).sum(),
        lost_gpu_hours: run.lost_gpu_secs / 3600.0,
        estimated_jobs: est.len(),
        estimate_error_mean_secs: mean(
            &est.iter()
                .map(|(s, e)| (s - e).abs() as f64)
                .collect::<Vec<_>>(),
        ),
        started_by_estimate: ratio(est.iter().filter(|(s, e)| s <= e).count(), est.len()),
        cycles: run.stats.cycles,
        skipped_cycles: run.stats.skipped,
        truncated_cycles: run.stats.truncated,
        policy_secs: run.stats.policy_secs,
        wall_secs: run.stats.wall_secs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.5), 10.0);
        assert_eq!(nearest_rank(&v, 0.95), 19.0);
        assert_eq!(nearest_rank(&v, 1.0), 20.0);
        assert_eq!(nearest_rank(&[7.0], 0.95), 7.0);
        assert_eq!(nearest_rank(&[], 0.5), 0.0);
    }
}
