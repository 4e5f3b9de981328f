//! The topology-unaware first-fit baseline the simulator compares Muster against, written on
//! the core's types (request normalization is the core's [`normalize`], so both policies
//! give a job the same shape).
//!
//! Jobs go in submit order (then job id). Each takes the first nodes in node-list order that
//! have room for a unit of it — for whole-node gangs the first `N` nodes with enough free
//! GPUs, for `--gpus=N` jobs as many units as fit on each node in turn — GPUs lowest index
//! first. A job that does not fit is passed over (no reservation), so later, smaller jobs go
//! ahead of it and big gangs can starve: the greedy behaviour of a plain Kubernetes
//! scheduler with gang admission. Gangs are still all-or-nothing and GPUs are never shared,
//! so only placement quality and ordering differ from Muster.

use muster_operator::core::shape::{Demand, Mode, Res, normalize};
use muster_operator::core::tree::in_partition;
use muster_operator::core::{
    Decisions, JobId, PendingInfo, Reason, Snapshot, Start, TaskAssignment, UNLIMITED,
};

/// What is free on one node.
#[derive(Clone, Copy)]
struct Free {
    /// Free GPUs as a mask over positions in the node's GPU list.
    mask: u64,
    res: Res,
    total: Res,
}

/// One first-fit cycle over `snap` (only `starts` and `pending` are filled).
pub fn first_fit(snap: &Snapshot, now: i64) -> Decisions {
    let _ = now;
    let mut free: Vec<Free> = snap
        .nodes
        .iter()
        .map(|n| {
            let mut mask = 0u64;
            for (p, g) in n.gpus.iter().enumerate().take(64) {
                if g.healthy {
                    mask |= 1 << p;
                }
            }
            let total = Res {
                gpus: mask.count_ones(),
                cpu: n.cpu_millis,
                mem: n.memory_mib,
            };
            Free {
                mask: if n.schedulable() { mask } else { 0 },
                res: if n.schedulable() {
                    total
                } else {
                    Res::default()
                },
                total,
            }
        })
        .collect();
    for j in &snap.running {
        for t in &j.tasks {
            let Some(f) = free.get_mut(t.node as usize) else {
                continue;
            };
            let node = &snap.nodes[t.node as usize];
            if j.exclusive {
                f.mask = 0;
                f.res = Res::default();
                continue;
            }
            for g in &t.gpus {
                if let Some(p) = node.gpus.iter().position(|x| x.index == *g) {
                    f.mask &= !(1u64 << p);
                }
            }
            f.res = Res {
                gpus: f.mask.count_ones(),
                cpu: f.res.cpu.saturating_sub(t.cpu_millis),
                mem: f.res.mem.saturating_sub(t.memory_mib),
            };
        }
    }
    let mut order: Vec<usize> = (0..snap.pending.len()).collect();
    order.sort_by_key(|&i| (snap.pending[i].submit_time, snap.pending[i].id));
    let mut out = Decisions::default();
    for i in order {
        let job = &snap.pending[i];
        let Some(part) = job.partition.and_then(|p| snap.partitions.get(p as usize)) else {
            out.pending
                .push(info(job.id, Reason::PartitionConfig, "no such partition"));
            continue;
        };
        let demand = match normalize(&job.request, part) {
            Ok(d) => d,
            Err(m) => {
                out.pending.push(info(job.id, Reason::BadConstraints, &m));
                continue;
            }
        };
        let picks = pick(snap, part, &demand, &free);
        let Some(picks) = picks else {
            out.pending.push(info(
                job.id,
                Reason::Resources,
                "no room in node-list order",
            ));
            continue;
        };
        let limit = match job.request.time_limit {
            Some(UNLIMITED) => None,
            Some(t) => Some(t),
            None => part.default_time.or(part.max_time),
        };
        let mut tasks = Vec::new();
        let mut nodes = Vec::with_capacity(picks.len());
        let mut rank = 0u32;
        for (node_rank, &(n, units)) in picks.iter().enumerate() {
            let f = &mut free[n];
            let node = &snap.nodes[n];
            nodes.push(n as u32);
            let k = demand.tasks_on_node(units);
            let gpus_on_node = demand.unit.gpus * units;
            let take = if demand.exclusive {
                f.total
            } else {
                demand.take(units, f.total)
            };
            // Lowest free GPU positions, split over the node's tasks in rank order.
            let mut positions = Vec::with_capacity(gpus_on_node as usize);
            let mut m = f.mask;
            while positions.len() < gpus_on_node as usize && m != 0 {
                let p = m.trailing_zeros();
                positions.push(p);
                m &= m - 1;
            }
            let mut used = 0u64;
            for local in 0..k {
                let share = split(u64::from(gpus_on_node), k, local) as usize;
                let mine: Vec<u32> = positions.drain(..share.min(positions.len())).collect();
                for &p in &mine {
                    used |= 1 << p;
                }
                tasks.push(TaskAssignment {
                    rank,
                    node: n as u32,
                    node_rank: node_rank as u32,
                    local_rank: local,
                    gpus: mine.iter().map(|&p| node.gpus[p as usize].index).collect(),
                    cpu_millis: split(take.cpu, k, local),
                    memory_mib: split(take.mem, k, local),
                });
                rank += 1;
            }
            if demand.exclusive {
                f.mask = 0;
                f.res = Res::default();
            } else {
                f.mask &= !used;
                f.res = Res {
                    gpus: f.mask.count_ones(),
                    cpu: f.res.cpu.saturating_sub(take.cpu),
                    mem: f.res.mem.saturating_sub(take.mem),
                };
            }
        }
        out.starts.push(Start {
            job: job.id,
            nodes,
            tasks,
            time_limit: limit,
            exclusive: demand.exclusive,
            leaves: 0,
        });
    }
    out
}

/// The first nodes (in node-list order) that hold the gang: `(node, units)`.
fn pick(
    snap: &Snapshot,
    part: &muster_operator::core::Partition,
    d: &Demand,
    free: &[Free],
) -> Option<Vec<(usize, u32)>> {
    let mut left = d.need();
    if left == 0 {
        return None;
    }
    let mut picks = Vec::new();
    for (n, f) in free.iter().enumerate() {
        if f.res.gpus < d.unit.gpus || f.mask == 0 && d.unit.gpus > 0 {
            continue;
        }
        let idle = f.res == f.total;
        let k = d.units_fitting(f.res, f.total, idle);
        if k == 0 || !in_partition(&snap.nodes[n], part) {
            continue;
        }
        let take = match d.mode {
            Mode::Bundles { .. } => 1,
            Mode::Units { .. } => k.min(left),
        };
        picks.push((n, take));
        left -= take;
        if left == 0 {
            break;
        }
    }
    if left > 0 {
        return None;
    }
    let count = picks.len() as u32;
    if count > d.max_nodes {
        return None;
    }
    if count < d.min_nodes {
        // Units packed on fewer nodes than asked: not a placement first fit can repair.
        return None;
    }
    Some(picks)
}

/// `total` split into `k` near-equal parts; part `i` (the first ones get the remainder).
fn split(total: u64, k: u32, i: u32) -> u64 {
    let k = u64::from(k.max(1));
    total / k + u64::from(u64::from(i) < total % k)
}

fn info(job: JobId, reason: Reason, message: &str) -> PendingInfo {
    PendingInfo {
        job,
        reason,
        message: message.to_string(),
        start_estimate: None,
        priority: 0,
        eligible: reason == Reason::Resources,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_operator::core::{ClusterSpec, JobRequest, PendingJob, Snapshot};

    fn snap() -> Snapshot {
        let spec = ClusterSpec::tree("t", 1, 2, 2, 8);
        Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology())
    }

    #[test]
    fn takes_first_nodes_in_order_and_passes_over_what_does_not_fit() {
        let mut s = snap();
        s.pending = vec![
            PendingJob::new(1, 0, JobRequest::nodes(1, 4).time(60)),
            PendingJob::new(2, 1, JobRequest::nodes(4, 8).time(60)),
            PendingJob::new(3, 2, JobRequest::nodes(2, 8).time(60)),
            PendingJob::new(4, 3, JobRequest::gpus(6).time(60)),
        ];
        let d = first_fit(&s, 0);
        let started: Vec<(u64, Vec<u32>)> =
            d.starts.iter().map(|s| (s.job, s.nodes.clone())).collect();
        // Job 1 takes half of node 0; job 2 (4 whole nodes) does not fit and is passed
        // over; job 3 takes the first two whole nodes (1 and 2, spanning both leaves);
        // job 4's six GPUs go 4 on node 0 (its free half) and 2 on node 3.
        assert_eq!(
            started,
            vec![(1, vec![0]), (3, vec![1, 2]), (4, vec![0, 3])]
        );
        assert_eq!(d.starts[0].tasks[0].gpus, vec![0, 1, 2, 3]);
        assert_eq!(d.starts[2].tasks[0].gpus, vec![4, 5, 6, 7]);
        assert_eq!(d.pending.len(), 1);
        assert_eq!(d.pending[0].job, 2);
    }
}
