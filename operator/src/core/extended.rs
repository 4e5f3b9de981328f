//! Extended resources the partitions' node pods request (`spec.jobEnvironment.resources`,
//! e.g. `rdma/ib: 1`), counted as running jobs consume them.
//!
//! Every job has one node pod per node it runs on, and each node pod requests its
//! partition's per-pod amounts ([`Partition::node_resources`]). kube-scheduler binds a pod
//! only where the node's allocatable minus what bound pods request still holds the request,
//! so a node with `rdma/ib: 1` that runs one job's node pod cannot take another's: the core
//! must not start a second gang there, or its pod would stay Pending with the rest of the
//! gang started (a half-started gang). [`ExtUse`] is that count for one cycle: built from
//! the running jobs (their partition's amounts on each of their nodes), kept current with the
//! cycle's starts, stops and evictions, and read
//!
//! - for placements now ([`Engine::units_now`](super::engine::Engine::units_now)): a node
//!   whose free amount is below the partition's takes no unit of its jobs;
//! - for estimates ([`Engine::earliest`](super::engine::Engine::earliest)) at a future time:
//!   jobs whose resources come back by then (time limit, grace time) give theirs back;
//! - for preemption plans: evicted jobs give theirs back.
//!
//! Reservations do not hold extended resources: two jobs may be promised the same node's
//! last `rdma/ib` at the same time; the one that starts first takes it and the other gets a
//! later estimate (an estimate may be early, a start is never wrong). Amounts are the
//! partition's as it is now (a pod that asks for more itself, or a partition changed while
//! its jobs run, is not seen), and pods that are not Muster's are not counted.
//!
//! Built only when some partition's pods request an extended resource: other clusters pay
//! nothing.

use smallvec::SmallVec;

use super::engine::NEVER;
use super::model::{Partition, Snapshot};
use super::node::NodeId;

/// Running job index meaning "started by this cycle" (as in node releases).
pub const STARTED_NOW: u32 = u32::MAX;

/// A job's node pod on a node: its partition, its running-job index (or [`STARTED_NOW`])
/// and when its resources come back (`NEVER`: no time limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Holder {
    part: u32,
    job: u32,
    release: i64,
}

/// Extended resources held on every node during one cycle (see the [module docs](self)).
#[derive(Clone, Debug, Default)]
pub struct ExtUse {
    /// Per partition: `(resource, amount per node pod)`.
    need: Vec<SmallVec<[(u16, u64); 2]>>,
    /// Per node: allocatable of each resource some partition requests, by its index among
    /// their sorted names (0 if absent).
    cap: Vec<SmallVec<[u64; 2]>>,
    /// Per node: node pods holding some of those resources.
    held: Vec<SmallVec<[Holder; 2]>>,
}

impl ExtUse {
    /// The count for `snap`'s nodes with nothing running, or `None` when no partition's pods
    /// request an extended resource.
    pub fn new(snap: &Snapshot) -> Option<ExtUse> {
        let mut names: Vec<String> = snap
            .partitions
            .iter()
            .flat_map(|p| p.node_resources.keys().cloned())
            .collect();
        if names.is_empty() {
            return None;
        }
        names.sort_unstable();
        names.dedup();
        let index = |k: &str| names.binary_search_by(|n| n.as_str().cmp(k)).ok();
        let need = snap
            .partitions
            .iter()
            .map(|p| {
                p.node_resources
                    .iter()
                    .filter(|&(_, &v)| v > 0)
                    .filter_map(|(k, &v)| index(k).map(|i| (i as u16, v)))
                    .collect()
            })
            .collect();
        let cap = snap
            .nodes
            .iter()
            .map(|n| {
                names
                    .iter()
                    .map(|k| n.extended.get(k).copied().unwrap_or(0))
                    .collect()
            })
            .collect();
        Some(ExtUse {
            held: vec![SmallVec::new(); snap.nodes.len()],
            need,
            cap,
        })
    }

    /// Whether jobs of partition `part` request any extended resource.
    pub fn requests(&self, part: u32) -> bool {
        self.need.get(part as usize).is_some_and(|n| !n.is_empty())
    }

    /// Records a node pod of a job of `part` on node `n` (running job `job`, or
    /// [`STARTED_NOW`]) whose resources come back at `release`. Partitions that request no
    /// extended resource are not recorded.
    pub fn add(&mut self, n: NodeId, part: u32, job: u32, release: i64) {
        if !self.requests(part) {
            return;
        }
        if let Some(h) = self.held.get_mut(n as usize) {
            h.push(Holder { part, job, release });
        }
    }

    /// Running job `job`'s resources on node `n` now come back at `release` (it is being
    /// stopped).
    pub fn set_release(&mut self, n: NodeId, job: u32, release: i64) {
        if let Some(hs) = self.held.get_mut(n as usize) {
            for h in hs.iter_mut().filter(|h| h.job == job) {
                h.release = release;
            }
        }
    }

    /// Whether node `n` has room for one node pod of partition `part` at time `t >= now`:
    /// node pods whose resources come back by `t` (for `t > now`) and those of running jobs
    /// for which `early` holds (eviction victims) are gone.
    pub fn admits(
        &self,
        part: u32,
        n: NodeId,
        t: i64,
        now: i64,
        early: &dyn Fn(u32) -> bool,
    ) -> bool {
        let Some(need) = self.need.get(part as usize) else {
            return true;
        };
        if need.is_empty() {
            return true;
        }
        let (Some(cap), Some(held)) = (self.cap.get(n as usize), self.held.get(n as usize)) else {
            return false;
        };
        need.iter().all(|&(r, amount)| {
            let used: u64 = held
                .iter()
                .filter(|h| {
                    let gone = (t > now && h.release != NEVER && h.release <= t)
                        || (h.job != STARTED_NOW && early(h.job));
                    !gone
                })
                .map(|h| self.amount(h.part, r))
                .sum();
            cap[r as usize] >= used.saturating_add(amount)
        })
    }

    fn amount(&self, part: u32, r: u16) -> u64 {
        self.need[part as usize]
            .iter()
            .find(|x| x.0 == r)
            .map_or(0, |x| x.1)
    }

    /// For a message: partition `p`'s requests as `rdma/ib: 1`, and how many of the nodes
    /// `nodes` could hold one node pod when idle and how many of those cannot now.
    pub fn describe(&self, part: u32, p: &Partition, nodes: &[NodeId], now: i64) -> String {
        let asked: Vec<String> = p
            .node_resources
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let need = &self.need[part as usize];
        let with: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|&n| {
                need.iter()
                    .all(|&(r, a)| self.cap[n as usize][r as usize] >= a)
            })
            .collect();
        let busy = with
            .iter()
            .filter(|&&n| !self.admits(part, n, now, now, &|_| false))
            .count();
        format!(
            "each node pod of partition {} also requests {}, which running jobs hold on {busy} of the {} node(s) that have it",
            p.name,
            asked.join(", "),
            with.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::node::Node;

    fn snap() -> Snapshot {
        let node = |name: &str, ib: u64| {
            let mut n = Node {
                name: name.into(),
                cpu_millis: 8000,
                memory_mib: 8192,
                ..Default::default()
            };
            if ib > 0 {
                n.extended.insert("rdma/ib".into(), ib);
            }
            n
        };
        let mut s = Snapshot::with_nodes(vec![node("a", 1), node("b", 2), node("c", 0)], vec![]);
        s.partitions[0].node_resources.insert("rdma/ib".into(), 1);
        s.partitions.push(Partition::new("cpu", vec![]));
        s
    }

    #[test]
    fn nothing_is_built_without_requests() {
        let mut s = snap();
        s.partitions[0].node_resources.clear();
        assert!(ExtUse::new(&s).is_none());
    }

    #[test]
    fn node_pods_consume_until_their_release() {
        let s = snap();
        let mut x = ExtUse::new(&s).unwrap();
        let none = |_: u32| false;
        assert!(x.admits(0, 0, 0, 0, &none));
        assert!(!x.admits(0, 2, 0, 0, &none), "c has no rdma/ib");
        assert!(
            x.admits(1, 2, 0, 0, &none),
            "the cpu partition asks nothing"
        );
        x.add(0, 0, 7, 100);
        x.add(0, 1, 8, 50); // a cpu-partition job takes no rdma/ib
        assert!(!x.admits(0, 0, 0, 0, &none), "a's only rdma/ib is held");
        assert!(!x.admits(0, 0, 99, 0, &none));
        assert!(x.admits(0, 0, 100, 0, &none), "back at its release");
        assert!(
            x.admits(0, 0, 0, 0, &|j| j == 7),
            "an evicted job gives it back"
        );
        x.set_release(0, 7, 30);
        assert!(x.admits(0, 0, 30, 0, &none));
        // b holds two: a second pod fits, a third does not; one started now never goes early.
        x.add(1, 0, STARTED_NOW, NEVER);
        assert!(x.admits(0, 1, 0, 0, &none));
        x.add(1, 0, 9, NEVER);
        assert!(!x.admits(0, 1, 0, 0, &|j| j == STARTED_NOW));
        assert!(
            !x.admits(0, 1, i64::MAX - 1, 0, &none),
            "unlimited jobs never give back"
        );
        assert!(x.admits(0, 1, 0, 0, &|j| j == 9));
        let msg = x.describe(0, &s.partitions[0], &[0, 1, 2], 0);
        assert!(
            msg.contains("rdma/ib: 1") && msg.contains("on 2 of the 2 node(s)"),
            "{msg}"
        );
    }

    /// Two 8-GPU nodes with one `rdma/ib` each, a partition whose node pods request one.
    fn ib_cluster(ib: u64) -> Snapshot {
        let spec = crate::core::ClusterSpec::tree("ib", 1, 1, 2, 8);
        let mut nodes = spec.nodes().unwrap();
        for n in &mut nodes {
            n.extended.insert("rdma/ib".into(), ib);
        }
        let mut s = Snapshot::with_nodes(nodes, vec![]);
        s.partitions[0].node_resources.insert("rdma/ib".into(), 1);
        s
    }

    fn two_node_job(id: u64, submit: i64) -> crate::core::PendingJob {
        crate::core::PendingJob::new(id, submit, crate::core::JobRequest::nodes(2, 2).time(600))
    }

    #[test]
    fn a_second_gang_waits_for_the_nodes_rdma_and_starts_when_the_first_ends() {
        let cfg = crate::core::Config::default();
        let mut s = ib_cluster(1);
        s.pending = vec![two_node_job(1, 0), two_node_job(2, 1)];
        let d = crate::core::schedule(&s, 10, &cfg);
        // GPUs are free for both (2 of 8 per node), the nodes' only rdma/ib is not.
        assert_eq!(d.starts.iter().map(|x| x.job).collect::<Vec<_>>(), [1]);
        let p = &d.pending[0];
        assert_eq!((p.job, p.reason), (2, crate::core::Reason::Resources));
        assert!(
            p.message.contains("rdma/ib: 1")
                && p.message
                    .contains("running jobs hold on 2 of the 2 node(s)"),
            "{}",
            p.message
        );
        // Its estimate is when job 1's time limit gives the resource back.
        assert_eq!(p.start_estimate, Some(610));
        s.apply(&d, 10);
        let d = crate::core::schedule(&s, 20, &cfg);
        assert!(d.starts.is_empty(), "still held: {d:?}");
        s.running.clear();
        let d = crate::core::schedule(&s, 30, &cfg);
        assert_eq!(d.starts.iter().map(|x| x.job).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn nodes_with_room_for_two_node_pods_take_two_gangs_and_other_partitions_are_free() {
        let cfg = crate::core::Config::default();
        let mut s = ib_cluster(2);
        s.partitions.push(Partition::new("plain", vec![]));
        let mut plain = two_node_job(4, 3);
        plain.partition = Some(1);
        s.pending = vec![
            two_node_job(1, 0),
            two_node_job(2, 1),
            two_node_job(3, 2),
            plain,
        ];
        let d = crate::core::schedule(&s, 10, &cfg);
        let mut started: Vec<u64> = d.starts.iter().map(|x| x.job).collect();
        started.sort_unstable();
        assert_eq!(
            started,
            [1, 2, 4],
            "two rdma/ib per node; plain pods ask none"
        );
        assert_eq!(d.pending[0].job, 3);
    }

    #[test]
    fn an_evicted_gang_gives_its_rdma_back_to_the_preemptor() {
        let cfg = crate::core::Config::default();
        let mut s = ib_cluster(1);
        let mut high = Partition::new("high", vec![]);
        high.priority_tier = 1;
        high.node_resources.insert("rdma/ib".into(), 1);
        s.partitions[0].preempt_mode = crate::core::PreemptMode::Cancel;
        s.partitions.push(high);
        s.pending = vec![two_node_job(1, 0)];
        let d = crate::core::schedule(&s, 10, &cfg);
        s.apply(&d, 10);
        assert_eq!(s.running.len(), 1);
        let mut urgent = two_node_job(2, 20);
        urgent.partition = Some(1);
        s.pending = vec![urgent];
        let d = crate::core::schedule(&s, 30, &cfg);
        assert!(d.starts.is_empty());
        assert_eq!(d.preemptions.len(), 1, "{d:?}");
        assert_eq!(d.preemptions[0].victims[0].job, 1);
    }

    #[test]
    fn incremental_cycles_count_the_same() {
        let cfg = crate::core::Config::default();
        let mut s = ib_cluster(1);
        s.pending = vec![two_node_job(1, 0)];
        let d = crate::core::schedule(&s, 10, &cfg);
        s.apply(&d, 10);
        s.pending = vec![two_node_job(2, 11), two_node_job(3, 12)];
        let prep = crate::core::Prepared::new(&s.nodes, &s.partitions);
        let mut occ = crate::core::Occupancy::new(&prep, &s);
        let want = crate::core::schedule(&s, 20, &cfg);
        assert!(want.starts.is_empty());
        for _ in 0..2 {
            assert_eq!(
                crate::core::schedule_incremental(&prep, &mut occ, &s, 20, &cfg),
                want
            );
        }
        assert!(occ.remove_job(&prep, 1));
        s.running.clear();
        let d = crate::core::schedule_incremental(&prep, &mut occ, &s, 700, &cfg);
        assert_eq!(d, crate::core::schedule(&s, 700, &cfg));
        assert_eq!(d.starts.iter().map(|x| x.job).collect::<Vec<_>>(), [2]);
    }
}
