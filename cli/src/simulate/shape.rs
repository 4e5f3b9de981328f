//! How trace jobs that only record a GPU count (ITP, sacct) become gang requests, and how
//! jobs without a recorded time limit get one.
//!
//! **Gangs** (`--gang`, `G` = GPUs per node of the cluster spec's node template):
//! - `nodes` (default): a job of `n ≤ G` GPUs asks for one node with `n` GPUs
//!   (`--nodes=1 --gpus-per-node=n`); a bigger job asks for whole nodes, rounding up:
//!   `--nodes=⌈n/G⌉ --gpus-per-node=G` (a 12-GPU job on 8-GPU nodes takes 2 nodes, 16 GPUs).
//!   A sacct job that recorded its node count keeps it with `⌈n/nodes⌉` GPUs per node when
//!   that fits a node; otherwise the whole-node rule applies.
//! - `gpus`: `--gpus=n` alone; the core packs the GPUs on as few nodes as it can, so a job
//!   may share nodes with others and use partial nodes.
//!
//! **Time limits** (`--time-limit`), for jobs whose trace records none:
//! - `auto` (default): the run time × `--limit-factor` (default 1.5), rounded up to the next
//!   of 15m, 30m, 1h, 2h, 4h, 8h, 12h, 1d, 2d, 3d, 7d, 14d, 30d (then whole 30-day steps):
//!   the coarse, padded limits users write. Backfill plans with limits, so the padding is
//!   what makes its estimates pessimistic, as on a real cluster.
//! - `exact`: the run time itself (rounded up to the minute, as Slurm counts): a perfectly
//!   informed backfill, an upper bound on its benefit.
//! - a Slurm time (`4:00:00`, `2-00:00:00`, `UNLIMITED`): the same limit for every job; jobs
//!   running longer are killed at it (TIMEOUT) as Slurm would.
//!
//! Jobs whose trace records a limit keep it (sacct `Timelimit`, a native spec's `time`).

use muster_crds::slurm::TimeLimit;
use muster_operator::core::JobRequest;

use super::trace::{Ask, TraceLimit};

/// How a GPU count becomes a gang.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GangRule {
    /// One node up to a node's GPUs, else whole nodes (rounding up).
    Nodes,
    /// `--gpus=N`: packed on as few nodes as possible by the scheduler.
    Gpus,
}

/// The limit given to jobs whose trace records none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitRule {
    /// Run time × factor, rounded up to a bucket.
    Auto,
    /// The run time (rounded up to the minute).
    Exact,
    /// One limit for all.
    Fixed(TimeLimit),
}

impl std::str::FromStr for LimitRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(LimitRule::Auto),
            "exact" => Ok(LimitRule::Exact),
            _ => TimeLimit::parse(s).map(LimitRule::Fixed).map_err(|e| {
                format!("{e}; or 'auto' (run time × --limit-factor, bucketed) or 'exact'")
            }),
        }
    }
}

impl std::fmt::Display for LimitRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitRule::Auto => f.write_str("auto"),
            LimitRule::Exact => f.write_str("exact"),
            LimitRule::Fixed(t) => write!(f, "{t}"),
        }
    }
}

/// The buckets of the `auto` rule, in seconds.
pub const BUCKETS: [u64; 13] = [
    900,
    1_800,
    3_600,
    2 * 3_600,
    4 * 3_600,
    8 * 3_600,
    12 * 3_600,
    86_400,
    2 * 86_400,
    3 * 86_400,
    7 * 86_400,
    14 * 86_400,
    30 * 86_400,
];

/// The `auto` limit for a run time: `runtime × factor` rounded up to a bucket.
pub fn auto_limit(runtime: u64, factor: f64) -> u64 {
    let want = (runtime as f64 * factor).ceil().max(1.0);
    let want = if want >= u64::MAX as f64 {
        u64::MAX
    } else {
        want as u64
    };
    BUCKETS
        .iter()
        .copied()
        .find(|&b| b >= want)
        .unwrap_or_else(|| want.div_ceil(BUCKETS[12]).saturating_mul(BUCKETS[12]))
}

/// A limit of `secs` seconds, rounded up to whole minutes as Slurm counts.
fn minutes(secs: u64) -> TimeLimit {
    let m = u32::try_from(secs.div_ceil(60).max(1)).unwrap_or(TimeLimit::MAX_MINUTES);
    TimeLimit::Minutes(m.min(TimeLimit::MAX_MINUTES))
}

/// The job's time limit.
pub fn limit_for(recorded: TraceLimit, runtime: u64, rule: LimitRule, factor: f64) -> TimeLimit {
    match recorded {
        TraceLimit::Secs(s) => minutes(s),
        TraceLimit::Unlimited => TimeLimit::Unlimited,
        TraceLimit::Missing | TraceLimit::Partition => match rule {
            LimitRule::Auto => minutes(auto_limit(runtime, factor)),
            LimitRule::Exact => minutes(runtime),
            LimitRule::Fixed(t) => t,
        },
    }
}

/// The request of a job that asks for `ask`, on nodes of `gpus_per_node` GPUs.
pub fn request_for(ask: &Ask, rule: GangRule, gpus_per_node: u32) -> JobRequest {
    match ask {
        Ask::Request(r) => (**r).clone(),
        Ask::Gpus { gpus, nodes } => {
            let g = gpus_per_node.max(1);
            match rule {
                GangRule::Gpus => JobRequest::gpus(*gpus),
                GangRule::Nodes => {
                    if let Some(n) = nodes.filter(|&n| n >= 1) {
                        let per = gpus.div_ceil(n);
                        if per <= g {
                            return JobRequest::nodes(n, per);
                        }
                    }
                    if *gpus <= g {
                        JobRequest::nodes(1, *gpus)
                    } else {
                        JobRequest::nodes(gpus.div_ceil(g), g)
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_limits_pad_and_bucket() {
        assert_eq!(auto_limit(600, 1.5), 900);
        assert_eq!(auto_limit(601, 1.5), 1_800);
        assert_eq!(auto_limit(3_890, 1.5), 2 * 3_600);
        assert_eq!(auto_limit(86_400, 1.5), 2 * 86_400);
        assert_eq!(auto_limit(899_735, 1.5), 30 * 86_400);
        assert_eq!(auto_limit(40 * 86_400, 1.5), 60 * 86_400);
        assert_eq!(auto_limit(0, 1.5), 900);
    }

    #[test]
    fn recorded_limits_win_and_rules_apply_otherwise() {
        let secs = |t: TimeLimit| t.seconds();
        let rec = limit_for(TraceLimit::Secs(7_200), 10, LimitRule::Exact, 1.5);
        assert_eq!(secs(rec), Some(7_200));
        let unl = limit_for(TraceLimit::Unlimited, 10, LimitRule::Auto, 1.5);
        assert_eq!(unl, TimeLimit::Unlimited);
        let exact = limit_for(TraceLimit::Missing, 61, LimitRule::Exact, 1.5);
        assert_eq!(secs(exact), Some(120));
        let auto = limit_for(TraceLimit::Missing, 3_890, LimitRule::Auto, 1.5);
        assert_eq!(secs(auto), Some(7_200));
        let fixed: LimitRule = "4:00:00".parse().unwrap();
        assert_eq!(
            secs(limit_for(TraceLimit::Missing, 61, fixed, 1.5)),
            Some(14_400)
        );
        assert!("soon".parse::<LimitRule>().unwrap_err().contains("'auto'"));
    }

    #[test]
    fn gpu_counts_become_whole_node_gangs() {
        let r = |gpus, nodes| request_for(&Ask::Gpus { gpus, nodes }, GangRule::Nodes, 8);
        assert_eq!(r(4, None), JobRequest::nodes(1, 4));
        assert_eq!(r(8, None), JobRequest::nodes(1, 8));
        assert_eq!(r(12, None), JobRequest::nodes(2, 8));
        assert_eq!(r(64, None), JobRequest::nodes(8, 8));
        // sacct node counts are kept when a node can hold its share.
        assert_eq!(r(8, Some(2)), JobRequest::nodes(2, 4));
        assert_eq!(r(32, Some(2)), JobRequest::nodes(4, 8));
        assert_eq!(
            request_for(
                &Ask::Gpus {
                    gpus: 12,
                    nodes: None
                },
                GangRule::Gpus,
                8
            ),
            JobRequest::gpus(12)
        );
    }
}
