//! Reservations for jobs that must wait, and preemption of lower-tier jobs to make room for
//! a higher-tier one.

use super::*;

impl Cycle<'_> {
    /// A running job's holds.
    fn nodes_of(&self, v: usize) -> &[crate::core::occupancy::Held] {
        &self.run[v].nodes
    }

    /// Holds the selection's resources from `t` for the job's run and records the estimate.
    pub(super) fn reserve(
        &mut self,
        job: &PendingJob,
        jc: &JobCtx,
        t: i64,
        sel: &Selection,
        info: &mut PendingInfo,
    ) {
        let part = jc.part as usize;
        let end = end_of(t, jc.limit);
        let mut nodes = Vec::with_capacity(sel.len());
        for &(pos, units) in sel {
            let n = self.e.parts[part].tree.nodes[pos as usize];
            let total = self.e.nodes[n as usize].total;
            let res = if jc.demand.exclusive {
                total
            } else {
                jc.demand.take(units, total)
            };
            self.e.claim(n, Claim { start: t, end, res });
            nodes.push(n);
        }
        let names = &self.snap.nodes;
        sort_by_name(&mut nodes, |&n| &names[n as usize].name);
        self.reservations += 1;
        info.start_estimate = Some(t);
        self.out.reservations.push(Reservation {
            job: job.id,
            start_time: t,
            nodes,
        });
    }

    /// Chooses lower-tier gangs to evict so the job can be placed: within each candidate
    /// switch at the lowest level where evicting every candidate would make room, victims in
    /// order of least lost work until the job fits, then any that turn out unnecessary are
    /// spared; the switch whose set loses the fewest GPU-seconds wins.
    pub(super) fn preempt(
        &mut self,
        jc: &JobCtx,
        alt: &Alt,
        tier: u32,
    ) -> Option<(Vec<usize>, i64, Selection)> {
        let counts = self.count_masks(alt);
        let part = jc.part as usize;
        let now = self.now;
        let cands: Vec<usize> = (0..self.run.len())
            .filter(|&i| {
                let r = &self.run[i];
                r.live
                    && !r.stopping
                    && r.tier < tier
                    && r.mode != PreemptMode::None
                    && r.nodes.iter().any(|h| {
                        self.e
                            .member_of
                            .of(h.node)
                            .iter()
                            .any(|&(p, _)| p as usize == part)
                    })
            })
            .collect();
        if cands.is_empty() {
            return None;
        }
        let grace = cands.iter().map(|&i| self.run[i].grace).max().unwrap_or(0);
        let t = now + grace.max(1);
        let end = end_of(t, jc.limit);
        let ps = &self.e.parts[part];
        let tree = &ps.tree;
        let c = &self.e.classes[alt.cid as usize];
        let npos = tree.nodes.len();
        let cap_with = |pos: usize, moved: &[bool]| -> u32 {
            let n = tree.nodes[pos];
            let ns = &self.e.nodes[n as usize];
            if !ns.sched {
                return 0;
            }
            // User rules are not undone by evictions here: such nodes are left alone.
            if let (Some((user, excl)), Some(users)) = (c.gate, &self.e.users)
                && !users[n as usize].admit(user, excl)
            {
                return 0;
            }
            let early = |j: u32| moved.get(j as usize).copied().unwrap_or(false);
            if let Some(x) = &self.e.ext
                && !x.admits(c.part, n, t, now, &early)
            {
                return 0;
            }
            let w = ns.window_if(t, end, now, &early);
            self.e.units_for_count(c, pos as u32, w, u64::MAX, ns.total)
        };
        // Positions of each candidate's nodes in this partition.
        let pos_of = |n: NodeId| self.e.member_of.position(n, part);
        let mut all_moved = vec![false; self.run.len()];
        for &i in &cands {
            all_moved[i] = true;
        }
        let caps_all: Vec<u32> = (0..npos).map(|p| cap_with(p, &all_moved)).collect();
        let leaf_aggs = |caps: &[u32]| -> Vec<LeafAgg> {
            let mut a = vec![LeafAgg::default(); tree.leaves.len()];
            for (p, &u) in caps.iter().enumerate() {
                if u > 0 {
                    let l = tree.leaf_of[p] as usize;
                    a[l].units += u;
                    a[l].nodes += 1;
                }
            }
            a
        };
        let aggs_all = leaf_aggs(&caps_all);
        let d = &jc.demand;
        let fits_switch = |s: u32, aggs: &[LeafAgg]| -> bool {
            let r = &tree.switches[s as usize].leaves;
            let (u, n) = aggs[r.start as usize..r.end as usize]
                .iter()
                .fold((0u64, 0u64), |(u, n), a| {
                    (u + u64::from(a.units), n + u64::from(a.nodes))
                });
            u >= u64::from(d.need()) && n >= u64::from(d.min_nodes)
        };
        // Lowest level where some switch could hold the job with every candidate evicted.
        let level = (0..ps.levels.len())
            .rev()
            .find(|&l| ps.levels[l].iter().any(|&s| fits_switch(s, &aggs_all)))?;
        let ml = if t < jc.leaves_deadline {
            jc.max_leaves
        } else {
            None
        };
        let try_fit = |caps: &[u32], dom: u32| -> Option<Selection> {
            let r = tree.switches[dom as usize].nodes.clone();
            let masked: Vec<u32> = caps
                .iter()
                .enumerate()
                .map(|(p, &u)| if r.contains(&(p as u32)) { u } else { 0 })
                .collect();
            let aggs = leaf_aggs(&masked);
            let inp = SelectInput {
                tree,
                levels: ps.levels,
                leaf_aggs: LeafView {
                    base: &aggs,
                    patch: &[],
                },
                demand: d,
                max_leaves: ml,
                counts: &counts,
                placement: self.e.placement,
                order: ps.node_order,
            };
            select(&inp, &|p| (masked[p as usize], masked[p as usize]))
        };
        let mut best: Option<(u128, usize, u32, Vec<usize>, Selection)> = None;
        for &dom in &ps.levels[level] {
            if !fits_switch(dom, &aggs_all) {
                continue;
            }
            let range = tree.switches[dom as usize].nodes.clone();
            let mut vs: Vec<usize> = cands
                .iter()
                .copied()
                .filter(|&i| {
                    self.nodes_of(i)
                        .iter()
                        .any(|h| pos_of(h.node).is_some_and(|p| range.contains(&p)))
                })
                .collect();
            vs.sort_by_key(|&i| (self.run[i].cost(now), self.run[i].id));
            let mut moved = vec![false; self.run.len()];
            let mut caps: Vec<u32> = (0..npos).map(|p| cap_with(p, &moved)).collect();
            let mut chosen = Vec::new();
            let mut fit = None;
            for &v in &vs {
                moved[v] = true;
                chosen.push(v);
                for h in self.nodes_of(v) {
                    if let Some(p) = pos_of(h.node) {
                        caps[p as usize] = cap_with(p as usize, &moved);
                    }
                }
                if let Some(sel) = try_fit(&caps, dom) {
                    fit = Some(sel);
                    break;
                }
            }
            let Some(mut sel) = fit else { continue };
            // Spare victims that turn out unnecessary, costliest first.
            for k in (0..chosen.len()).rev() {
                let v = chosen[k];
                moved[v] = false;
                let mut trial = caps.clone();
                for h in self.nodes_of(v) {
                    if let Some(p) = pos_of(h.node) {
                        trial[p as usize] = cap_with(p as usize, &moved);
                    }
                }
                if let Some(s) = try_fit(&trial, dom) {
                    caps = trial;
                    sel = s;
                    chosen.remove(k);
                } else {
                    moved[v] = true;
                }
            }
            let cost: u128 = chosen.iter().map(|&v| self.run[v].cost(now)).sum();
            let key = (cost, chosen.len(), dom);
            if best.as_ref().is_none_or(|b| key < (b.0, b.1, b.2)) {
                chosen.sort_unstable_by_key(|&v| self.run[v].id);
                best = Some((cost, chosen.len(), dom, chosen, sel));
            }
        }
        let (_, _, _, victims, sel) = best?;
        // The victims now release their resources when their grace time ends.
        for &v in &victims {
            self.run[v].stopping = true;
            self.stopped_now.push(v as u32);
            let rel = now + self.run[v].grace.max(1);
            for k in 0..self.run[v].nodes.len() {
                let n = self.run[v].nodes[k].node;
                self.e.move_release(n, v as u32, rel);
                if let Some(x) = &mut self.e.ext {
                    x.set_release(n, v as u32, rel);
                }
            }
            self.stop_horizon = self.stop_horizon.max(rel);
        }
        self.lowest_preemptable_tier = self
            .run
            .iter()
            .filter(|r| r.live && !r.stopping && r.mode != PreemptMode::None)
            .map(|r| r.tier)
            .min()
            .unwrap_or(u32::MAX);
        Some((victims, t, sel))
    }
}
