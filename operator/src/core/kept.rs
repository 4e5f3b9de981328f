//! Cycles over fresh snapshots of one cluster (the operator's case): the running jobs'
//! [`Occupancy`] kept from the cycle before and brought up to date with the snapshot by what
//! changed, instead of laid out afresh.
//!
//! The simulator knows which jobs started and ended and tells its occupancy
//! ([`Occupancy::add`], [`Occupancy::remove_job`]). The operator only has the snapshot it
//! built from the API: [`KeptOccupancy`] finds the difference itself by a fingerprint of
//! every running job (all of its fields, through `#[derive(Hash)]`, so a field added to
//! [`RunningJob`] is covered), removes the jobs that are gone and lays the new and changed
//! ones on again. At 16,384 nodes laying out every running job is a sixth of the cycle; the
//! fingerprints cost a pass over the running list.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;

use super::model::{Config, Decisions, JobId, RunningJob, Snapshot};
use super::occupancy::{Occupancy, schedule_incremental};
use super::prepared::Prepared;
use super::util::FnvBuild;

/// The fingerprints' hasher: fast on the tasks' integers and byte strings alike, and seeded
/// with a constant, so a fingerprint is the same in every cycle and process.
const PRINT: foldhash::fast::FixedState = foldhash::fast::FixedState::with_seed(0x6d75_7374_6572);

/// An [`Occupancy`] kept between cycles over snapshots that carry no record of what changed
/// (see the [module docs](self)). Decides exactly what
/// [`schedule_prepared`](super::schedule_prepared) decides over the same snapshot.
#[derive(Debug, Default)]
pub struct KeptOccupancy {
    /// The occupancy of the last cycle's snapshot (`None`: none yet, or it was dropped).
    occ: Option<Occupancy>,
    /// The fingerprint of each running job `occ` holds.
    prints: HashMap<JobId, u64, FnvBuild>,
    /// The [`Prepared`] build `occ` was laid out for.
    prep: u64,
}

impl KeptOccupancy {
    /// Nothing kept yet: the first cycle lays every running job out.
    pub fn new() -> KeptOccupancy {
        KeptOccupancy::default()
    }

    /// One cycle over `snap` at `now` with `prep` (built for `snap`'s nodes and partitions;
    /// if it does not fit them, this is [`schedule`](super::schedule()) and nothing is kept).
    ///
    /// `snap`'s nodes and partitions must be those of the last call unless `prep` was
    /// rebuilt (a new `Prepared` drops what was kept): a caller that changes a node
    /// (readiness, cordon, GPU health, allocatable) or a partition without building new trees
    /// must [`KeptOccupancy::clear`] it.
    pub fn schedule(
        &mut self,
        prep: &Prepared,
        snap: &Snapshot,
        now: i64,
        cfg: &Config,
    ) -> Decisions {
        if !prep.fits(snap) {
            self.clear();
            return super::schedule(snap, now, cfg);
        }
        // An order-sensitive layout (overlapping holds) is only defined by a fresh one.
        if self.prep != prep.build_id() {
            self.clear();
            self.prep = prep.build_id();
        }
        let kept = self
            .occ
            .take()
            .filter(|o| o.matches(prep, snap.nodes.len()) && !o.order_sensitive())
            .and_then(|o| self.sync(o, prep, snap))
            .filter(|o| !o.order_sensitive());
        let mut occ = match kept {
            Some(o) => o,
            None => {
                let o = Occupancy::new(prep, snap);
                self.prints = snap.running.iter().map(|j| (j.id, print(j))).collect();
                o
            }
        };
        let d = schedule_incremental(prep, &mut occ, snap, now, cfg);
        self.occ = Some(occ);
        d
    }

    /// Forgets the occupancy: the next cycle lays every running job out again.
    pub fn clear(&mut self) {
        self.occ = None;
        self.prints.clear();
    }

    /// `occ` brought to `snap.running`; `None` if the list names a job twice (only a fresh
    /// layout resolves that as [`Occupancy::new`] does). Jobs removed and added in another
    /// order than a fresh layout's give the same occupancy as long as no hold overlaps
    /// another ([`Occupancy::order_sensitive`], checked by the caller).
    fn sync(&mut self, mut occ: Occupancy, prep: &Prepared, snap: &Snapshot) -> Option<Occupancy> {
        let mut now_prints: HashMap<JobId, u64, FnvBuild> =
            HashMap::with_capacity_and_hasher(snap.running.len(), FnvBuild);
        let mut lay: Vec<&RunningJob> = Vec::new();
        for j in &snap.running {
            let p = print(j);
            match now_prints.entry(j.id) {
                Entry::Occupied(_) => return None,
                Entry::Vacant(v) => {
                    v.insert(p);
                }
            }
            if self.prints.get(&j.id) != Some(&p) {
                lay.push(j);
            }
        }
        let mut gone: Vec<JobId> = self
            .prints
            .keys()
            .filter(|id| !now_prints.contains_key(id))
            .copied()
            .collect();
        gone.sort_unstable();
        for id in gone {
            occ.remove_job(prep, id);
        }
        // In job-id order, as a fresh layout adds them; `add` replaces a changed job.
        lay.sort_by_key(|j| j.id);
        for j in lay {
            occ.add(prep, snap, j);
        }
        self.prints = now_prints;
        Some(occ)
    }
}

/// A running job's fingerprint: every field.
fn print(j: &RunningJob) -> u64 {
    PRINT.hash_one(j)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::cluster_spec::ClusterSpec;
    use crate::core::model::{JobRequest, PendingJob, TaskAlloc};
    use crate::core::schedule_prepared;

    fn snap() -> Snapshot {
        let spec = ClusterSpec::sandbox();
        Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology())
    }

    /// Job `id` on every GPU of node 0, ending at `end`.
    fn on_node0(s: &Snapshot, id: JobId, end: i64) -> RunningJob {
        let gpus = s.nodes[0].gpus.len() as u32;
        RunningJob {
            id,
            name: format!("j{id}"),
            namespace: "default".into(),
            partition: Some(0),
            start_time: 0,
            time_limit: Some(end as u64),
            tasks: vec![TaskAlloc {
                node: 0,
                gpus: (0..gpus).collect(),
                cpu_millis: 1000,
                memory_mib: 0,
            }],
            ..Default::default()
        }
    }

    /// A job asking for every GPU of one node, to see when node 0's GPUs come back.
    fn whole_node_job(s: &Snapshot) -> PendingJob {
        let gpus = s.nodes[0].gpus.len() as u32;
        let mut p = PendingJob::new(100, 0, JobRequest::nodes(1, gpus).time(60));
        p.request.nodelist = vec![s.nodes[0].name.clone()];
        p
    }

    #[test]
    fn unchanged_and_changed_snapshots_decide_like_fresh_cycles() {
        let mut s = snap();
        s.running = vec![on_node0(&s, 1, 500)];
        s.pending = vec![whole_node_job(&s)];
        let prep = Prepared::new(&s.nodes, &s.partitions);
        let mut kept = KeptOccupancy::new();
        assert_eq!(
            kept.schedule(&prep, &s, 10, &Config::default()),
            schedule_prepared(&prep, &s, 10, &Config::default())
        );
        // The job ends: the kept layout lets node 0 go.
        s.running.clear();
        let d = kept.schedule(&prep, &s, 20, &Config::default());
        assert_eq!(d, schedule_prepared(&prep, &s, 20, &Config::default()));
        assert_eq!(d.starts.len(), 1, "node 0 is free again");
        // A job changes (being stopped now): laid out again.
        let mut j = on_node0(&s, 1, 500);
        s.running = vec![j.clone()];
        kept.schedule(&prep, &s, 30, &Config::default());
        j.stopping_since = Some(30);
        s.running = vec![j];
        assert_eq!(
            kept.schedule(&prep, &s, 40, &Config::default()),
            schedule_prepared(&prep, &s, 40, &Config::default())
        );
    }

    /// Two running jobs claiming the same GPUs (a snapshot the core never makes, but one the
    /// API could hold): a fresh layout gives them to the lower job id, whatever order the
    /// jobs arrived in; so must the kept one.
    #[test]
    fn overlapping_jobs_are_laid_out_in_job_id_order() {
        let mut s = snap();
        let (early, late) = (on_node0(&s, 1, 100), on_node0(&s, 2, 10_000));
        s.pending = vec![whole_node_job(&s)];
        s.running = vec![late.clone()];
        let prep = Prepared::new(&s.nodes, &s.partitions);
        let mut kept = KeptOccupancy::new();
        kept.schedule(&prep, &s, 10, &Config::default());
        s.running = vec![late.clone(), early.clone()];
        let fresh = schedule_prepared(&prep, &s, 20, &Config::default());
        // Laid out in arrival order instead, job 2 would hold the GPUs until 10,000.
        let mut naive = Occupancy::new(
            &prep,
            &Snapshot {
                running: vec![late],
                ..s.clone()
            },
        );
        naive.add(&prep, &s, &early);
        assert!(naive.order_sensitive());
        assert_ne!(
            schedule_incremental(&prep, &mut naive, &s, 20, &Config::default()),
            fresh,
            "the test must tell the two layouts apart"
        );
        assert_eq!(kept.schedule(&prep, &s, 20, &Config::default()), fresh);
        assert_eq!(kept.schedule(&prep, &s, 30, &Config::default()), {
            schedule_prepared(&prep, &s, 30, &Config::default())
        });
    }

    /// A new `Prepared` for the same node names (a partition changed) drops the kept layout.
    #[test]
    fn a_rebuilt_prepared_starts_over() {
        let mut s = snap();
        s.running = vec![on_node0(&s, 1, 5_000)];
        s.running[0].stopping_since = Some(10);
        s.partitions[0].grace_time_secs = 90;
        s.pending = vec![whole_node_job(&s)];
        let prep = Prepared::new(&s.nodes, &s.partitions);
        let mut kept = KeptOccupancy::new();
        let before = kept.schedule(&prep, &s, 20, &Config::default());
        // Same names and the same running job, another grace time: its GPUs come back later.
        s.partitions[0].grace_time_secs = 300;
        let prep2 = Prepared::new(&s.nodes, &s.partitions);
        let fresh = schedule_prepared(&prep2, &s, 20, &Config::default());
        assert_ne!(before, fresh, "the grace time must show in the decisions");
        assert_eq!(kept.schedule(&prep2, &s, 20, &Config::default()), fresh);
    }
}
