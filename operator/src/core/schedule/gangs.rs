//! The cycle's later gangs, which a placement with a choice of leaves looks at so as not to
//! spend the room one of them needs ([`Cycle::lookahead`]), kept current as the cycle's
//! starts and holds change the leaves.

use super::*;

impl Cycle<'_> {
    /// Waiting multi-node gangs in queue order with plain requests (no constraint, GPU
    /// type or binding): the jobs whose room a placement should not take by accident.
    pub(super) fn collect_gangs(&self, order: &[(usize, u32)]) -> Vec<Gang> {
        // Read in pending order (sequential memory in long queues), then put in queue order.
        let mut pos_of = vec![usize::MAX; self.snap.pending.len()];
        for (pos, &(idx, _)) in order.iter().enumerate() {
            pos_of[idx] = pos;
        }
        let mut out = Vec::new();
        for (idx, &pos) in pos_of.iter().enumerate() {
            // One-node jobs first, from their demand alone: most of a queue.
            let Some(Some(Ok(d))) = self.demands.get(idx) else {
                continue;
            };
            if pos == usize::MAX || !spans_nodes(d, self.widest_node) {
                continue;
            }
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
            let Some(part) = job.partition else {
                continue;
            };
            let Some(p) = self.snap.partitions.get(part as usize) else {
                continue;
            };
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
        out.sort_unstable_by_key(|g| g.pos);
        out
    }

    /// What the next later gangs of the job's partition hold now: per gang its class, need,
    /// fewest nodes, per-leaf aggregates and how many leaves hold it whole (the indices of
    /// up to [`LOOKAHEAD`] gangs that fit some leaf; each gang's [`Gang::ahead`] is current).
    /// Built only for a job with a choice of leaves.
    pub(super) fn lookahead(&mut self, part: u32) -> Vec<usize> {
        let mut out = Vec::new();
        let start = self.gangs.partition_point(|g| g.pos <= self.at);
        // The gangs the cursor has passed are never read again: their per-leaf aggregates
        // go (one per leaf, 8 KiB a gang over 512 leaves: kept, a cycle admitting 6,250
        // gangs held 49 MB of them at its end).
        for g in &mut self.gangs[self.ahead_from.min(start)..start] {
            g.ahead = None;
        }
        self.ahead_from = self.ahead_from.max(start);
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
    /// partition changed since it was read; else only the leaves changed (or newly held)
    /// since are read again, those with holds for the gang's window through the class's
    /// cache; the first time, every leaf.
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
        let (need, min_nodes) = (self.gangs[k].demand.need(), self.gangs[k].demand.min_nodes);
        let fits = |a: &LeafAgg| a.units >= need && a.nodes >= min_nodes;
        let logged = self.e.parts[part as usize].changed.len();
        if let Some((_, seen, mut a)) = self.gangs[k].ahead.take() {
            // The leaves logged since: a leaf without holds as the class's base says (brought
            // up to date here), one with holds read for this gang's window.
            self.e.catch_up_base(cid);
            let mut dirty = self.e.parts[part as usize].changed[seen..logged].to_vec();
            dirty.sort_unstable();
            dirty.dedup();
            for l in dirty {
                let new = if self.e.parts[part as usize].leaf_claims[l as usize].is_empty() {
                    self.e.classes[cid as usize].base[l as usize]
                } else {
                    self.e.held_leaf_agg(cid, l, end)
                };
                let old = a.leaves[l as usize];
                a.fitting = a.fitting - u32::from(fits(&old)) + u32::from(fits(&new));
                a.leaves[l as usize] = new;
            }
            // Test builds check the kept aggregates against a fresh read of every leaf.
            #[cfg(debug_assertions)]
            {
                let mut patch = Vec::new();
                self.e.leaf_aggs_now(cid, end, &mut patch);
                let view = LeafView {
                    base: &self.e.classes[cid as usize].base,
                    patch: &patch,
                };
                for (l, agg) in view.iter().enumerate() {
                    debug_assert_eq!(a.leaves[l], agg, "lookahead kept leaf {l} stale");
                }
                debug_assert_eq!(a.fitting, view.iter().filter(fits).count() as u32);
            }
            self.gangs[k].ahead = Some((version, logged, a));
        } else {
            // Brings the class's base up to date and reads the leaves with holds.
            let mut buf = std::mem::take(&mut self.ahead_buf);
            self.e.leaf_aggs_now(cid, end, &mut buf);
            // Most later gangs are larger than any leaf's room: the largest units and nodes
            // of a leaf (kept per class while no leaf changes) say so without a scan.
            let (mut units, mut nodes) = self.base_max(cid, part);
            for (_, a) in &buf {
                units = units.max(a.units);
                nodes = nodes.max(a.nodes);
            }
            let base = &self.e.classes[cid as usize].base;
            let view = LeafView { base, patch: &buf };
            let fitting = if units >= need && nodes >= min_nodes {
                view.iter().filter(fits).count() as u32
            } else {
                0
            };
            // A gang no leaf holds is never read again this cycle: its leaves are not
            // kept (most gangs behind a busy queue are such).
            let leaves = if fitting > 0 {
                view.iter().collect()
            } else {
                Vec::new()
            };
            self.gangs[k].ahead = Some((
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
            self.ahead_buf = buf;
        }
    }

    /// The most units and the most nodes of class `cid` that a leaf without holds has now
    /// (its base must be current), read again only when a leaf of the partition changed.
    fn base_max(&mut self, cid: u32, part: u32) -> (u32, u32) {
        let ps = &self.e.parts[part as usize];
        if let Some(&(v, u, n)) = self.base_max.get(&cid)
            && v == ps.version
        {
            return (u, n);
        }
        let (mut u, mut n) = (0, 0);
        for (l, a) in self.e.classes[cid as usize].base.iter().enumerate() {
            if ps.leaf_claims[l].is_empty() {
                u = a.units.max(u);
                n = a.nodes.max(n);
            }
        }
        self.base_max.insert(cid, (ps.version, u, n));
        (u, n)
    }
}
