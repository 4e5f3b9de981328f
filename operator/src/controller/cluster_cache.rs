//! The cluster's shape kept between cycles: the core's [`Prepared`] trees (switch trees, node
//! memberships, GPU hierarchies) and the running jobs' layout on them ([`KeptOccupancy`]), so
//! a cycle costs the queue and what changed rather than the cluster. Building the trees of
//! 4,096 nodes takes longer than scheduling a 512-node gang on them, and laying out every
//! running job of 16,384 nodes a sixth of the cycle. The snapshot's node list is the table's
//! own (shared, never copied).
//!
//! The cache is keyed on the [`NodeTable`] itself: the runner builds a new table whenever a
//! Node, GpuNode or ResourceSlice changes (and keeps the same `Arc` otherwise), and the cache
//! holds a reference to the table it was built from, so that allocation cannot be freed and
//! reused, nor (being shared) mutated: the same address means the same nodes. Partitions
//! are compared by value (they are few). Any difference rebuilds everything — trees built
//! for other nodes would place jobs on GPUs that are not where the trees say, a
//! double allocation.

use std::sync::Arc;

use crate::core::{self, Config, Decisions, KeptOccupancy, Prepared, Snapshot};

use super::translate::NodeTable;

/// What the planner keeps of the cluster between cycles (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct ClusterCache {
    /// The table it was built from (held: see the module docs).
    table: Arc<NodeTable>,
    /// The core partitions it was built for.
    parts: Vec<core::Partition>,
    /// The trees of `parts` over the table's nodes.
    prep: Prepared,
    /// The running jobs laid out on `prep`, brought up to date by each cycle's snapshot.
    kept: KeptOccupancy,
}

impl ClusterCache {
    /// `kept` if it was built from this table and these partitions, else a new cache (the
    /// bool says which).
    pub(crate) fn reuse_or_build(
        kept: Option<ClusterCache>,
        table: &Arc<NodeTable>,
        parts: &[core::Partition],
    ) -> (ClusterCache, bool) {
        match kept {
            Some(c) if Arc::ptr_eq(&c.table, table) && c.parts == parts => (c, false),
            _ => {
                let prep = Prepared::new(&table.nodes, parts);
                let c = ClusterCache {
                    table: table.clone(),
                    parts: parts.to_vec(),
                    prep,
                    kept: KeptOccupancy::new(),
                };
                (c, true)
            }
        }
    }

    /// The node list for the cycle's snapshot: the table's, shared.
    pub(crate) fn nodes(&self) -> Arc<Vec<core::Node>> {
        self.table.nodes.clone()
    }

    /// The prepared trees.
    #[cfg(test)]
    pub(crate) fn prepared(&self) -> &Prepared {
        &self.prep
    }

    /// The core's cycle over `snap` (whose nodes are [`ClusterCache::nodes`]) with the
    /// kept trees and running-job layout: what [`core::schedule_prepared`] decides.
    pub(crate) fn schedule(&mut self, snap: &Snapshot, now: i64, cfg: &Config) -> Decisions {
        self.kept.schedule(&self.prep, snap, now, cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{JobRequest, PendingJob, schedule, schedule_prepared};

    const NOW: i64 = 1_700_000_000;

    fn table(leaf_of: &dyn Fn(usize) -> &'static str, gpus: u32, n: usize) -> Arc<NodeTable> {
        let nodes = Arc::unwrap_or_clone(core::synth::cluster(1, n as u32).nodes)
            .into_iter()
            .enumerate()
            .map(|(i, mut node)| {
                node.labels.insert("leaf".into(), leaf_of(i).into());
                node.gpus.truncate(gpus as usize);
                node.gpu_links.truncate(gpus as usize);
                for row in &mut node.gpu_links {
                    row.truncate(gpus as usize);
                }
                node
            })
            .collect();
        Arc::new(NodeTable::new(nodes))
    }

    fn parts(topology: &[&str]) -> Vec<core::Partition> {
        vec![core::Partition {
            name: "gpu".into(),
            topology: topology.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }]
    }

    /// One cycle as the planner runs it with `cache`, and a fresh `schedule` of the same
    /// snapshot.
    fn both(
        cache: &mut ClusterCache,
        pending: &[PendingJob],
    ) -> (core::Decisions, core::Decisions) {
        let snap = Snapshot {
            nodes: cache.nodes(),
            partitions: cache.parts.clone(),
            pending: pending.to_vec(),
            ..Default::default()
        };
        let kept = cache.schedule(&snap, NOW, &Config::default());
        let fresh = schedule(&snap, NOW, &Config::default());
        (kept, fresh)
    }

    fn gang(id: u64, nodes: u32) -> PendingJob {
        gang_of(id, nodes, 8)
    }

    fn gang_of(id: u64, nodes: u32, gpus: u32) -> PendingJob {
        PendingJob::new(id, NOW - 10, JobRequest::nodes(nodes, gpus).time(3600))
    }

    #[test]
    fn kept_while_the_table_and_partitions_are_the_same() {
        let t = table(&|i| if i < 4 { "a" } else { "b" }, 8, 8);
        let p = parts(&["leaf"]);
        let (c, built) = ClusterCache::reuse_or_build(None, &t, &p);
        assert!(built);
        let (mut c, built) = ClusterCache::reuse_or_build(Some(c), &t, &p);
        assert!(!built, "the same table and partitions keep the trees");
        let (kept, fresh) = both(&mut c, &[gang(1, 4)]);
        assert_eq!(kept, fresh);
        assert_eq!(kept.starts.len(), 1);
        // The snapshot's node list is the table's own, not a copy.
        let (c, built) = ClusterCache::reuse_or_build(Some(c), &t, &p);
        assert!(!built);
        assert!(Arc::ptr_eq(&c.nodes(), &t.nodes));
        assert_eq!(c.nodes().len(), 8);
    }

    #[test]
    fn running_jobs_kept_between_cycles_decide_like_fresh_ones() {
        let t = table(&|i| if i < 4 { "a" } else { "b" }, 8, 8);
        let p = parts(&["leaf"]);
        let (mut c, _) = ClusterCache::reuse_or_build(None, &t, &p);
        let mut snap = Snapshot {
            nodes: c.nodes(),
            partitions: p.clone(),
            pending: vec![gang(1, 4), gang(2, 2)],
            ..Default::default()
        };
        for (step, more) in [(0, vec![gang(3, 4)]), (1, vec![gang(4, 2)]), (2, vec![])] {
            let now = NOW + step * 600;
            let kept = c.schedule(&snap, now, &Config::default());
            assert_eq!(
                kept,
                schedule(&snap, now, &Config::default()),
                "cycle {step}"
            );
            snap.apply(&kept, now);
            // The oldest running job ends; new ones arrive.
            if step == 1 {
                snap.running.remove(0);
            }
            snap.pending.extend(more);
        }
    }

    #[test]
    fn rebuilt_when_nodes_or_partitions_change() {
        let p = parts(&["leaf"]);
        // Leaves a = n00..n03, b = n04..n07: a 4-node gang fits one leaf.
        let t1 = table(&|i| if i < 4 { "a" } else { "b" }, 8, 8);
        let (mut c, _) = ClusterCache::reuse_or_build(None, &t1, &p);
        let (d1, _) = both(&mut c, &[gang(1, 4)]);
        assert_eq!(d1.starts[0].leaves, 1);

        // Same node names, new wiring: the leaves interleave. A table with equal content
        // but a new identity is rebuilt too (the runner only builds one on a change).
        let t2 = table(&|i| if i % 2 == 0 { "a" } else { "b" }, 8, 8);
        let stale = c.prepared().clone();
        let (mut c, built) = ClusterCache::reuse_or_build(Some(c), &t2, &p);
        assert!(built, "a new node table rebuilds the trees");
        let pending = [gang(1, 4)];
        let (kept, fresh) = both(&mut c, &pending);
        assert_eq!(kept, fresh);
        // The stale trees would place on the old leaves: the check above can fail.
        let snap = Snapshot {
            nodes: t2.nodes.clone(),
            partitions: p.clone(),
            pending: pending.to_vec(),
            ..Default::default()
        };
        let stale_d = schedule_prepared(&stale, &snap, NOW, &Config::default());
        assert_ne!(stale_d, fresh, "stale trees decide differently here");

        // Fewer GPUs per node: rebuilt, same decisions as fresh.
        let t3 = table(&|i| if i % 2 == 0 { "a" } else { "b" }, 4, 8);
        let (mut c, built) = ClusterCache::reuse_or_build(Some(c), &t3, &p);
        assert!(built);
        let (kept, fresh) = both(&mut c, &[gang_of(1, 2, 4), gang_of(2, 4, 4)]);
        assert_eq!(kept, fresh);
        assert_eq!(kept.starts.len(), 2);

        // A node more.
        let t4 = table(&|i| if i % 2 == 0 { "a" } else { "b" }, 4, 9);
        let (mut c, built) = ClusterCache::reuse_or_build(Some(c), &t4, &p);
        assert!(built);
        assert_eq!(c.nodes().len(), 9);
        let (kept, fresh) = both(&mut c, &[gang_of(1, 5, 4)]);
        assert_eq!(kept, fresh);
        assert_eq!(kept.starts.len(), 1);

        // The partition's topology changes (flat): rebuilt for the same table.
        let flat = parts(&[]);
        let (mut c, built) = ClusterCache::reuse_or_build(Some(c), &t4, &flat);
        assert!(built, "a partition change rebuilds the trees");
        let (kept, fresh) = both(&mut c, &[gang_of(1, 5, 4), gang_of(2, 3, 4)]);
        assert_eq!(kept, fresh);
        assert_eq!(kept.starts[0].leaves, 1);
    }
}
