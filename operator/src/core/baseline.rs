//! A naive, topology-unaware first-fit scheduler: the yardstick the benchmarks and the
//! simulator compare Muster against. Jobs go in submit order (then id); each takes the
//! first nodes in node-list order that have room, GPUs lowest index first; a job that does
//! not fit is skipped (no reservations, so big gangs can starve). Gangs are still
//! all-or-nothing and GPUs are never shared, so only placement quality and fairness differ.

use std::collections::{BTreeMap, HashSet};

use smallvec::SmallVec;

use super::engine::Prepared;
use super::model::{Decisions, PendingInfo, Reason, Snapshot, Start, TaskAssignment};
use super::node::NodeId;
use super::shape::{Demand, Res, normalize};
use super::tree::Tree;
use super::util::FnvBuild;

/// Schedules `snap` at `now` by first fit. Only `starts` and `pending` are filled.
pub fn first_fit(snap: &Snapshot, now: i64) -> Decisions {
    first_fit_with(None, snap, now)
}

/// [`first_fit`] reading the partitions' node lists from `prep` (built for the same nodes
/// and partitions; rebuilt per call if it does not fit), for callers that schedule one
/// cluster many times.
pub fn first_fit_prepared(prep: &Prepared, snap: &Snapshot, now: i64) -> Decisions {
    first_fit_with(prep.fits(snap).then_some(prep), snap, now)
}

fn first_fit_with(prep: Option<&Prepared>, snap: &Snapshot, now: i64) -> Decisions {
    let _ = now;
    let mut free: Vec<(u64, Res)> = snap
        .nodes
        .iter()
        .map(|n| {
            let mut mask = 0u64;
            for (p, g) in sorted_gpus(n).iter().enumerate() {
                if g.1 {
                    mask |= 1 << p;
                }
            }
            (
                mask,
                Res {
                    gpus: mask.count_ones(),
                    cpu: n.cpu_millis,
                    mem: n.memory_mib,
                },
            )
        })
        .collect();
    let totals: Vec<Res> = free.iter().map(|f| f.1).collect();
    let mut busy = vec![false; snap.nodes.len()];
    for j in &snap.running {
        for t in &j.tasks {
            let Some(f) = free.get_mut(t.node as usize) else {
                continue;
            };
            busy[t.node as usize] = true;
            let order = sorted_gpus(&snap.nodes[t.node as usize]);
            for g in &t.gpus {
                if let Some(p) = order.iter().position(|x| x.0 == *g) {
                    f.0 &= !(1 << p);
                }
            }
            if j.exclusive {
                f.0 = 0;
                f.1 = Res::default();
            } else {
                f.1 = Res {
                    gpus: f.0.count_ones(),
                    cpu: f.1.cpu.saturating_sub(t.cpu_millis),
                    mem: f.1.mem.saturating_sub(t.memory_mib),
                };
            }
        }
    }
    let mut order: Vec<usize> = (0..snap.pending.len()).collect();
    order.sort_by_key(|&i| (snap.pending[i].submit_time, snap.pending[i].id));
    // Per partition: membership and leaf of each node.
    let mut parts: BTreeMap<u32, (Vec<bool>, Vec<u32>)> = BTreeMap::new();
    // Lowest node index that may still have a free GPU (a cursor, so a long queue of small
    // jobs does not rescan full nodes).
    let mut first_free_gpu = 0usize;
    let mut out = Decisions::default();
    let mut failed: HashSet<(u32, Demand), FnvBuild> = HashSet::with_hasher(FnvBuild);
    for i in order {
        let job = &snap.pending[i];
        let Some(pi) = job
            .partition
            .filter(|&p| (p as usize) < snap.partitions.len())
        else {
            continue;
        };
        let part = &snap.partitions[pi as usize];
        let Ok(d) = normalize(&job.request, part) else {
            continue;
        };
        let (member, leaf_of) = parts.entry(pi).or_insert_with(|| {
            let built;
            let tree = match prep.and_then(|p| p.trees.get(pi as usize)) {
                Some((t, _)) => t,
                None => {
                    built = Tree::build(&snap.nodes, part);
                    &built
                }
            };
            let mut member = vec![false; snap.nodes.len()];
            let mut leaf_of = vec![0; snap.nodes.len()];
            for (pos, &n) in tree.nodes.iter().enumerate() {
                member[n as usize] = true;
                leaf_of[n as usize] = tree.leaf_of[pos];
            }
            (member, leaf_of)
        });
        // Room only shrinks during a cycle, so a request that did not fit still does not.
        if failed.contains(&(pi, d.clone())) {
            out.pending.push(waiting(job.id));
            continue;
        }
        let need = d.need();
        let mut picks: Vec<(usize, u32)> = Vec::new();
        let mut got = 0u32;
        while first_free_gpu < free.len() && free[first_free_gpu].1.gpus == 0 {
            first_free_gpu += 1;
        }
        let start = if d.unit.gpus > 0 { first_free_gpu } else { 0 };
        for n in start..snap.nodes.len() {
            if !member[n] {
                continue;
            }
            if got >= need || picks.len() as u32 >= d.max_nodes {
                break;
            }
            if !snap.nodes[n].schedulable() {
                continue;
            }
            let idle = free[n].1 == totals[n] && !busy[n];
            let u = d.units_fitting(free[n].1, totals[n], idle);
            if u == 0 {
                continue;
            }
            let take = u.min(need - got);
            picks.push((n, take));
            got += take;
        }
        if got < need || (picks.len() as u32) < d.min_nodes {
            failed.insert((pi, d));
            out.pending.push(waiting(job.id));
            continue;
        }
        let mut tasks = Vec::new();
        let mut rank = 0;
        let mut leaves: Vec<u32> = Vec::new();
        for (node_rank, &(n, units)) in picks.iter().enumerate() {
            let k = d.tasks_on_node(units);
            let gpus_total = d.unit.gpus * units;
            let mut mask = free[n].0;
            let order = sorted_gpus(&snap.nodes[n]);
            for local in 0..k {
                let g = gpus_total / k + u32::from(local < gpus_total % k);
                let mut ids = Vec::new();
                for _ in 0..g {
                    let p = mask.trailing_zeros();
                    mask &= !(1 << p);
                    ids.push(order[p as usize].0);
                }
                tasks.push(TaskAssignment {
                    rank,
                    node: n as NodeId,
                    node_rank: node_rank as u32,
                    local_rank: local,
                    gpus: ids,
                    cpu_millis: d.unit.cpu * u64::from(units) / u64::from(k),
                    memory_mib: d.unit.mem * u64::from(units) / u64::from(k),
                });
                rank += 1;
            }
            let used = d.take(units, totals[n]);
            if d.exclusive {
                free[n] = (0, Res::default());
            } else {
                free[n].0 = mask;
                free[n].1 = Res {
                    gpus: mask.count_ones(),
                    cpu: free[n].1.cpu.saturating_sub(used.cpu),
                    mem: free[n].1.mem.saturating_sub(used.mem),
                };
            }
            busy[n] = true;
            leaves.push(leaf_of[n]);
        }
        leaves.sort_unstable();
        leaves.dedup();
        let limit = part.effective_limit(job.request.time_limit);
        out.starts.push(Start {
            job: job.id,
            nodes: picks.iter().map(|&(n, _)| n as NodeId).collect(),
            tasks,
            time_limit: limit,
            exclusive: d.exclusive,
            leaves: leaves.len() as u32,
        });
    }
    out
}

/// A job that does not fit now (first fit gives no estimates).
fn waiting(job: u64) -> PendingInfo {
    PendingInfo {
        job,
        reason: Reason::Resources,
        message: String::new(),
        start_estimate: None,
        priority: 0,
        eligible: true,
    }
}

/// (NVML index, healthy) of a node's GPUs in index order.
fn sorted_gpus(n: &super::node::Node) -> SmallVec<[(u32, bool); 16]> {
    let mut v: SmallVec<[(u32, bool); 16]> = n.gpus.iter().map(|g| (g.index, g.healthy)).collect();
    v.sort_unstable();
    v.truncate(64);
    v
}
