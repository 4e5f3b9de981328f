//! The yardsticks Muster is measured against, run by the same cycle so that they honour
//! every rule Muster does — eligibility, dependencies, partition limits, constraints, GPU
//! types, binding, exclusivity, per-node fit, gangs all-or-nothing, GPUs never shared — and
//! differ only in what they are named for:
//!
//! - [`Yardstick::FirstFit`]: jobs in submit order (after partition tier), each on the first
//!   nodes in node-list order with room, whatever their switches ([`Placement::FirstFit`]);
//!   a job that does not fit is passed over; no reservations (big gangs can starve), no
//!   preemption.
//! - [`Yardstick::SlurmBackfill`]: what a Slurm 22.05 site runs by default with
//!   sched/backfill and topology/tree: jobs in submit order (`priority/basic`), each started
//!   when it fits without delaying an earlier one, every waiting job the pass tests given a
//!   reservation at its earliest start (`bf_max_job_test` is the queue depth the caller
//!   passes), and Slurm's tree placement ([`Placement::SlurmTree`]: the lowest switch with
//!   enough nodes, the tightest one; largest-first spill across leaves; nodes in order).
//!   Preemption follows the caller's configuration.

use super::model::{Config, Decisions, Snapshot};
use super::occupancy::{Occupancy, schedule_incremental_with};
use super::prepared::Prepared;
use super::select::Placement;

/// A yardstick policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Yardstick {
    /// Topology-unaware first fit in submit order, no reservations.
    FirstFit,
    /// Slurm-like EASY backfill: submit order, a reservation for every job tested, Slurm's
    /// topology/tree placement.
    SlurmBackfill,
}

impl Yardstick {
    /// The core configuration the yardstick runs with, from `base` (Muster's): priority
    /// weights and the short-limit credit zeroed, so the order is tier, submit time, job id.
    pub fn config(self, base: &Config) -> Config {
        let fifo = Config {
            weight_age: 0.0,
            weight_job_size: 0.0,
            weight_fair_share: 0.0,
            short_limit_age_secs: 0,
            backfill: true,
            ..base.clone()
        };
        match self {
            Yardstick::FirstFit => Config {
                max_reservations: 0,
                reserve_after_secs: 0,
                topology_wait_secs: 0,
                preemption: false,
                ..fifo
            },
            Yardstick::SlurmBackfill => Config {
                max_reservations: usize::MAX,
                reserve_after_secs: 0,
                topology_wait_secs: 0,
                ..fifo
            },
        }
    }

    /// How it places gangs.
    pub fn placement(self) -> Placement {
        match self {
            Yardstick::FirstFit => Placement::FirstFit,
            Yardstick::SlurmBackfill => Placement::SlurmTree,
        }
    }

    /// One cycle over `snap` at `now` (see [`crate::core::schedule()`]); `base` is Muster's
    /// configuration, from which [`Yardstick::config`] derives the yardstick's.
    pub fn schedule(self, snap: &Snapshot, now: i64, base: &Config) -> Decisions {
        let prep = Prepared::new(&snap.nodes, &snap.partitions);
        let mut occ = Occupancy::new(&prep, snap);
        self.schedule_incremental(&prep, &mut occ, snap, now, base)
    }

    /// [`Yardstick::schedule`] over an [`Occupancy`] kept between cycles, as
    /// [`crate::core::schedule_incremental`].
    pub fn schedule_incremental(
        self,
        prep: &Prepared,
        occ: &mut Occupancy,
        snap: &Snapshot,
        now: i64,
        base: &Config,
    ) -> Decisions {
        schedule_incremental_with(prep, occ, snap, now, &self.config(base), self.placement())
    }
}

/// Schedules `snap` at `now` by first fit ([`Yardstick::FirstFit`] with the default
/// configuration).
pub fn first_fit(snap: &Snapshot, now: i64) -> Decisions {
    Yardstick::FirstFit.schedule(snap, now, &Config::default())
}
