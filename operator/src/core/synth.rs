//! Seeded synthetic clusters and queues for benchmarks, property tests and demos.

use super::cluster_spec::ClusterSpec;
use super::model::{Config, JobId, JobRequest, PendingJob, RunningJob, Snapshot, TaskAlloc};
use super::schedule::schedule;
use super::util::SplitMix64;

/// A two-level cluster of `leaves` leaves × `nodes_per_leaf` DGX H100 nodes under one spine.
pub fn cluster(leaves: u32, nodes_per_leaf: u32) -> Snapshot {
    let spec = ClusterSpec::tree("synthetic", 1, leaves, nodes_per_leaf, 8);
    Snapshot::with_nodes(
        spec.nodes().expect("synthetic spec is valid"),
        spec.topology(),
    )
}

/// A job request drawn from a GPU-cluster-like mix: mostly 1–8 GPU jobs, some multi-node
/// gangs up to `max_nodes` whole nodes, time limits from 10 minutes to a day.
pub fn request(rng: &mut SplitMix64, max_nodes: u32) -> JobRequest {
    let r = rng.below(1000);
    let req = if r < 450 {
        JobRequest::gpus(1)
    } else if r < 600 {
        JobRequest::gpus(2)
    } else if r < 700 {
        JobRequest::gpus(4)
    } else if r < 800 {
        JobRequest::nodes(1, 8)
    } else if r < 900 {
        JobRequest::nodes(2 + rng.below(7) as u32, 8).exclusive()
    } else if r < 975 {
        JobRequest::nodes((16 + rng.below(49) as u32).min(max_nodes), 8).exclusive()
    } else {
        JobRequest::nodes((128 + rng.below(129) as u32).min(max_nodes), 8).exclusive()
    };
    let limits = [600u64, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600];
    req.time(limits[rng.below(limits.len() as u64) as usize])
}

/// `n` pending jobs with ids from `first_id`, submitted over the hour before `now`, in a few
/// namespaces.
pub fn queue(
    rng: &mut SplitMix64,
    n: usize,
    first_id: JobId,
    now: i64,
    max_nodes: u32,
) -> Vec<PendingJob> {
    (0..n)
        .map(|i| {
            let mut j = PendingJob::new(
                first_id + i as JobId,
                now - 3600 + rng.below(3600) as i64,
                request(rng, max_nodes),
            );
            j.namespace = format!("team-{}", rng.below(8));
            j
        })
        .collect()
}

/// Fills `snap` with running jobs up to about `fill` of its GPUs (scheduled by the core
/// itself, started at random times in the past), then ends a random `churn` fraction of them
/// so the free room is fragmented as in a live cluster.
pub fn fill(
    snap: &mut Snapshot,
    rng: &mut SplitMix64,
    fill: f64,
    churn: f64,
    now: i64,
    first_id: JobId,
) {
    let total: u64 = snap.nodes.iter().map(|n| n.gpus.len() as u64).sum();
    let target = (total as f64 * fill) as u64;
    let max_nodes = (snap.nodes.len() as u32 / 16).max(1);
    let mut id = first_id;
    let cfg = Config {
        max_reservations: 0,
        ..Config::default()
    };
    let mut used: u64 = snap.running.iter().map(RunningJob::gpu_count).sum();
    let mut rounds = 0;
    while used < target && rounds < 50 {
        rounds += 1;
        let want = ((target - used) / 6).max(16) as usize;
        let q = queue(rng, want, id, now, max_nodes);
        id += want as JobId;
        // Only as much as fits the remaining target, smallest-first would bias: keep the mix.
        let mut budget = target - used;
        snap.pending = q
            .into_iter()
            .filter(|j| {
                let g = u64::from(j.request.gpus.unwrap_or(0))
                    + u64::from(j.request.min_nodes.unwrap_or(0)) * 8;
                if g <= budget {
                    budget -= g;
                    true
                } else {
                    false
                }
            })
            .collect();
        if snap.pending.is_empty() {
            break;
        }
        let d = schedule(snap, now, &cfg);
        if d.starts.is_empty() {
            break;
        }
        snap.apply(&d, now);
        snap.pending.clear();
        used = snap.running.iter().map(RunningJob::gpu_count).sum();
    }
    // Random past start times, inside each job's limit.
    for r in &mut snap.running {
        let lim = r.time_limit.unwrap_or(3600) as i64;
        r.start_time = now - rng.below(lim.max(2) as u64 - 1) as i64 - 1;
    }
    if churn > 0.0 {
        snap.running.retain(|_| rng.unit() >= churn);
    }
}

/// A cluster where every other node of each leaf has `busy_gpus` GPUs taken by a
/// long-running single-node job: half the nodes are whole, the other half fragmented.
pub fn half_fragmented(leaves: u32, nodes_per_leaf: u32, busy_gpus: u32, now: i64) -> Snapshot {
    let mut s = cluster(leaves, nodes_per_leaf);
    let mut id = 1_000_000;
    for n in (0..s.nodes.len() as u32).step_by(2) {
        id += 1;
        s.running.push(RunningJob {
            id,
            name: format!("frag-{id}"),
            namespace: "other".into(),
            partition: Some(0),
            start_time: now - 100,
            time_limit: Some(86_400),
            tasks: vec![TaskAlloc {
                node: n,
                gpus: (0..busy_gpus).collect(),
                cpu_millis: 1000,
                memory_mib: 1024,
            }],
            ..Default::default()
        });
    }
    s
}
