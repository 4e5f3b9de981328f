//! Topology waits: whether a gang that could start now spread over more leaves than it needs
//! starts so or waits for its fewest leaves.

use super::*;

/// Most [`Cycle::worth_waiting`] sweeps per cycle.
const TOPOLOGY_CHECKS: u32 = 32;

impl Cycle<'_> {
    /// Whether a gang of `part` that could start now spread over more leaves than it needs
    /// should start so rather than wait for its fewest leaves: it is the only job of its
    /// partition waiting for room in this cycle's queue, none before it and none after (the
    /// queue has drained: the wait would delay no one's start but the gang's own, and a
    /// one-leaf room it waits for would serve no one else; while earlier jobs wait too, the
    /// partition is contended and the gang waits for its leaf as any gang does), and no
    /// running job of the partition that one leaf could hold is spread (so spreading at once
    /// is never the habit: at most one such gang runs at a time, and leaf span stays near its
    /// bound); and, with [`Config::spread_at_once_max_limit_secs`] set, its limit is at most
    /// that.
    pub(super) fn spread_at_once(&self, jc: &JobCtx) -> bool {
        let max = self.cfg.spread_at_once_max_limit_secs;
        if max > 0 && jc.limit.is_none_or(|l| l > max) {
            return false;
        }
        let part = jc.part as usize;
        // Another job of the partition waits: an earlier one (`blocked`) or a later one.
        if self.blocked[part] || self.last_of_part[part].is_some_and(|l| l > self.at) {
            return false;
        }
        let widest = self.widest_leaf[part];
        let tree = self.e.parts[part].tree;
        let leaf_of = |h: &crate::core::occupancy::Held| {
            (self.e.member_of)
                .position(h.node, part)
                .map(|pos| tree.leaf_of[pos as usize])
        };
        !self.run.iter().any(|r| {
            let n = r.nodes.len() as u64;
            r.live && n > 1 && n <= widest && {
                let mut leaves = r.nodes.iter().filter_map(leaf_of);
                leaves
                    .next()
                    .is_some_and(|first| leaves.any(|l| l != first))
            }
        })
    }

    /// Whether a gang that could start now spread over more leaves than it needs should
    /// wait for its fewest leaves instead: they come (by the running jobs' time limits and
    /// the reservations) within [`Config::topology_wait_secs`]. Each check is a sweep of
    /// the timeline; past a budget per cycle the gang does not wait.
    pub(super) fn worth_waiting(&mut self, jc: &JobCtx, alt: &Alt, now: i64) -> bool {
        if self.topology_checks >= TOPOLOGY_CHECKS {
            return false;
        }
        self.topology_checks += 1;
        let counts = self.count_masks(alt);
        let wait = i64::try_from(self.cfg.topology_wait_secs).unwrap_or(NEVER);
        self.e
            .earliest(alt.cid, &jc.demand, jc.limit, jc.max_leaves, NEVER, &counts)
            .is_some_and(|(t, _)| t.saturating_sub(now) <= wait)
    }
}
