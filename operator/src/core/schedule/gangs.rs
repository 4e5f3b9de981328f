//! The cycle's later gangs, which a placement with a choice of leaves looks at so as not to
//! spend the room one of them needs ([`Cycle::lookahead`]), kept current as the cycle's
//! starts and holds change the leaves.

use super::*;

impl Cycle<'_> {
    /// Waiting multi-node gangs in queue order with plain requests (no constraint, GPU
    /// type or binding): the jobs whose room a placement should not take by accident.
    pub(super) fn collect_gangs(&self, order: &[(usize, u32)]) -> Vec<Gang> {
        let mut out = Vec::new();
        for (pos, &(idx, _)) in order.iter().enumerate() {
            let job = &self.snap.pending[idx];
            let r = &job.request;
            if job.hold
                || r.constraint.is_some()
                || r.gpu_type.is_some()
                || r.gpu_bind.is_some()
                || r.exclusive_user
                || !r.nodelist.is_empty()
                || !r.exclude.is_empty()
            {
                continue;
            }
            let (Some(part), Some(Some(Ok(d)))) = (job.partition, self.demands.get(idx)) else {
                continue;
            };
            let Some(p) = self.snap.partitions.get(part as usize) else {
                continue;
            };
            if d.min_nodes < 2 && d.min_gpus() <= u64::from(self.widest_node) {
                continue;
            }
            out.push(Gang {
                pos,
                part,
                cid: None,
                demand: d.clone(),
                end: end_of(self.now, p.effective_limit(r.time_limit)),
                gate: self.users.get(idx).map(|&u| (u, false)),
                ahead: None,
            });
        }
        out
    }

    /// What the next later gangs of the job's partition hold now: per gang its class, need,
    /// fewest nodes, per-leaf aggregates and how many leaves hold it whole (the indices of
    /// up to [`LOOKAHEAD`] gangs that fit some leaf; each gang's [`Gang::ahead`] is current).
    /// Built only for a job with a choice of leaves.
    pub(super) fn lookahead(&mut self, part: u32) -> Vec<usize> {
        let mut out = Vec::new();
        let start = self.gangs.partition_point(|g| g.pos <= self.at);
        let mut k = start;
        while k < self.gangs.len() && out.len() < LOOKAHEAD {
            // Room only shrinks during a cycle: a gang no leaf held whole never fits one
            // again this cycle (skipped without reading its leaves).
            if self.gangs[k].part != part
                || matches!(&self.gangs[k].ahead, Some((_, _, a)) if a.fitting == 0)
            {
                k += 1;
                continue;
            }
            self.refresh_ahead(k, part);
            if matches!(&self.gangs[k].ahead, Some((_, _, a)) if a.fitting > 0) {
                out.push(k);
            }
            k += 1;
        }
        out
    }

    /// Brings gang `k`'s [`Gang::ahead`] up to date: nothing to do if no leaf of the
    /// partition changed since it was read; else the leaves changed since and those with
    /// holds (patched per window end) are read again; the first time, every leaf.
    pub(super) fn refresh_ahead(&mut self, k: usize, part: u32) {
        let version = self.e.parts[part as usize].version;
        if matches!(&self.gangs[k].ahead, Some((v, _, _)) if *v == version) {
            return;
        }
        let cid = match self.gangs[k].cid {
            Some(c) => c,
            None => {
                let f = self.e.filter(part, None, "", &|_| true);
                let d = self.gangs[k].demand.clone();
                let c = self.e.class(part, f, &d, None, self.gangs[k].gate);
                self.gangs[k].cid = Some(c);
                c
            }
        };
        let end = self.gangs[k].end;
        let mut buf = std::mem::take(&mut self.ahead_buf);
        // Brings the class's base up to date and reads the leaves with holds.
        self.e.leaf_aggs_now(cid, end, &mut buf);
        let ps = &self.e.parts[part as usize];
        let base = &self.e.classes[cid as usize].base;
        let logged = ps.changed.len();
        let g = &mut self.gangs[k];
        let (need, min_nodes) = (g.demand.need(), g.demand.min_nodes);
        let fits = |a: &LeafAgg| a.units >= need && a.nodes >= min_nodes;
        match &mut g.ahead {
            Some((v, seen, a)) => {
                let mut set = |l: usize, new: LeafAgg| {
                    let old = a.leaves[l];
                    a.fitting = a.fitting - u32::from(fits(&old)) + u32::from(fits(&new));
                    a.leaves[l] = new;
                };
                // Leaves without holds changed since: their base (leaves with holds are
                // patched below; a leaf never loses its holds within a cycle).
                for &l in &ps.changed[*seen..] {
                    if ps.leaf_claims[l as usize].is_empty() {
                        set(l as usize, base[l as usize]);
                    }
                }
                for &(l, agg) in &buf {
                    set(l as usize, agg);
                }
                *v = version;
                *seen = logged;
                // Test builds check the kept aggregates against a fresh read of every leaf.
                #[cfg(debug_assertions)]
                {
                    let view = LeafView { base, patch: &buf };
                    for (l, agg) in view.iter().enumerate() {
                        debug_assert_eq!(a.leaves[l], agg, "lookahead kept leaf {l} stale");
                    }
                    debug_assert_eq!(a.fitting, view.iter().filter(fits).count() as u32);
                }
            }
            None => {
                let view = LeafView { base, patch: &buf };
                let fitting = view.iter().filter(fits).count() as u32;
                // A gang no leaf holds is never read again this cycle: its leaves are not
                // kept (most gangs behind a busy queue are such).
                let leaves = if fitting > 0 {
                    view.iter().collect()
                } else {
                    Vec::new()
                };
                g.ahead = Some((
                    version,
                    logged,
                    Ahead {
                        cid,
                        need,
                        min_nodes,
                        end,
                        leaves,
                        fitting,
                    },
                ));
            }
        }
        self.ahead_buf = buf;
    }
}
