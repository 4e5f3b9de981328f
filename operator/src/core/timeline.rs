//! Earliest start of a waiting job: a sweep over the times at which resources come back.
//!
//! Free room on a node only rises when a running job's time limit ends or a hold ends, so the
//! earliest feasible start is now or one of those times. The sweep keeps, for every node, its
//! free room at the current time `t` and how many holds begin during the job's run
//! `(t, t + limit)`; a node's usable units are its free room at `t`, lowered to the least free
//! at any of those hold starts. Both change only at events or when a hold start enters or
//! leaves the sliding window, so per-leaf aggregates are updated incrementally (O(1) per
//! change); the topology placement runs only at times when the partition as a whole has room.

use super::engine::{Engine, LeafAgg, LeafView, NEVER, Selection};
use super::select::{SelectInput, select};
use super::shape::{Demand, Res};

/// Per-node buffers of [`Engine::earliest`], kept between its calls: a sweep touches few
/// nodes, and allocating them zeroed (or copied) for every call (~150 KB at 4,096 nodes, up
/// to ~100 calls a cycle) cost more than the sweeps. Between calls every entry is at rest
/// (`raw` and `inwin` zero, `stamp` `i64::MIN`, `caps` `None`); a call puts back what it
/// changed.
#[derive(Debug, Default)]
pub struct SweepBufs {
    raw: Vec<[i64; 3]>,
    inwin: Vec<u16>,
    stamp: Vec<i64>,
    /// Usable units of the nodes read by the sweep; `None`: the class's `node_units`.
    caps: Vec<Option<u32>>,
    aggs: Vec<LeafAgg>,
}

impl Engine<'_> {
    /// The earliest time ≥ now at which class `cid` with `demand`'s counts can be placed for
    /// `limit` seconds (`None`: unlimited), honouring `max_leaves` before `leaves_deadline`.
    /// Returns the time and the placement.
    pub fn earliest(
        &mut self,
        cid: u32,
        demand: &Demand,
        limit: Option<u64>,
        max_leaves: Option<u32>,
        leaves_deadline: i64,
        counts: &[(Vec<bool>, u32)],
    ) -> Option<(i64, Selection)> {
        let part = self.classes[cid as usize].part;
        self.events(part);
        self.catch_up_base(cid);
        let mut bufs = std::mem::take(&mut self.sweep_bufs);
        let found = self.sweep(
            cid,
            demand,
            limit,
            max_leaves,
            leaves_deadline,
            counts,
            &mut bufs,
        );
        self.sweep_bufs = bufs;
        found
    }

    /// [`Engine::earliest`] once the partition's events and the class's base are current.
    #[allow(clippy::too_many_arguments)]
    fn sweep(
        &self,
        cid: u32,
        demand: &Demand,
        limit: Option<u64>,
        max_leaves: Option<u32>,
        leaves_deadline: i64,
        counts: &[(Vec<bool>, u32)],
        bufs: &mut SweepBufs,
    ) -> Option<(i64, Selection)> {
        let c = &self.classes[cid as usize];
        let part = c.part;
        let ps = &self.parts[part as usize];
        let main = ps.events.as_deref().unwrap_or(&[]);
        let recent = ps.new_events.as_slice();
        let starts = &ps.claim_starts;
        let tree = &ps.tree;
        let now = self.now;
        let n = tree.nodes.len();
        let dur = |t: i64| match limit {
            Some(l) => t.saturating_add(i64::try_from(l).unwrap_or(i64::MAX)),
            None => NEVER,
        };
        // Raw counts may transiently exceed the total (releases before holds) or go below
        // zero (holds before releases); they are clamped when read. `raw` holds the changes
        // since now; a node's count now is read from its state when needed (most nodes are
        // never touched by a sweep, so they are never read).
        if bufs.raw.len() < n {
            bufs.raw.resize(n, [0; 3]);
            bufs.inwin.resize(n, 0);
            bufs.stamp.resize(n, i64::MIN);
            bufs.caps.resize(n, None);
        }
        let SweepBufs {
            raw,
            inwin,
            stamp,
            caps,
            aggs,
        } = bufs;
        let at = |pos: usize, raw: &[[i64; 3]]| -> [i64; 3] {
            let ns = &self.nodes[tree.nodes[pos] as usize];
            let r = if !ns.sched {
                Res::default()
            } else if ns.profile.is_empty() {
                ns.free
            } else {
                ns.profile[0].1
            };
            let d = raw[pos];
            [
                i64::from(r.gpus) + d[0],
                r.cpu as i64 + d[1],
                r.mem as i64 + d[2],
            ]
        };
        let clamp = |pos: usize, raw: &[i64; 3]| -> Res {
            let tot = self.nodes[tree.nodes[pos] as usize].total;
            Res {
                gpus: raw[0].clamp(0, i64::from(tot.gpus)) as u32,
                cpu: raw[1].clamp(0, tot.cpu as i64) as u64,
                mem: raw[2].clamp(0, tot.mem as i64) as u64,
            }
        };
        // Holds beginning in (t, end) per node.
        let mut lo = 0usize;
        let mut hi = starts.partition_point(|&(s, _)| s < dur(now));
        for &(_, p) in &starts[..hi] {
            inwin[p as usize] += 1;
        }
        // Usable units of a node for a run over [t, end).
        let eff = |pos: usize, raw: &[i64; 3], inwin: u16, t: i64, end: i64| -> u32 {
            let node = tree.nodes[pos];
            let ns = &self.nodes[node as usize];
            if !ns.sched {
                return 0;
            }
            // The partition's extended resources (`rdma/ib`) free at t, as jobs end.
            if let Some(x) = &self.ext
                && !x.admits(c.part, node, t, now, &|_| false)
            {
                return 0;
            }
            let mut r = clamp(pos, raw);
            if inwin > 0 {
                // A hold taking the whole node leaves nothing; else read the window exactly.
                if ns
                    .claims
                    .iter()
                    .any(|cl| cl.start > t && cl.start < end && cl.res == ns.total)
                {
                    return 0;
                }
                r = r.min(ns.window(t, end, now));
            }
            // Future GPUs are counted, not named: any of the node's GPUs may be free then.
            self.units_for_count(c, pos as u32, r, u64::MAX, ns.total)
        };
        // Nodes of leaves without holds have what the class's base says they have now (the
        // base names free GPUs, the sweep counts them: the same for untyped, unbound classes).
        let base_ok = c.bind.is_none() && !self.filters[c.filter as usize].typed;
        aggs.clear();
        if base_ok {
            // The class's base, with only the leaves with holds read node by node (a cycle's
            // holds are on few leaves).
            aggs.extend_from_slice(&c.base);
            for &l in &ps.claimed_leaves {
                let mut agg = LeafAgg::default();
                for p in tree.leaf(l).nodes.clone() {
                    let p = p as usize;
                    let u = eff(p, &at(p, raw), inwin[p], now, dur(now));
                    caps[p] = Some(u);
                    if u > 0 {
                        agg.units += u;
                        agg.nodes += 1;
                    }
                }
                aggs[l as usize] = agg;
            }
        } else {
            aggs.resize(tree.leaves.len(), LeafAgg::default());
            for p in 0..n {
                let u = eff(p, &at(p, raw), inwin[p], now, dur(now));
                caps[p] = Some(u);
                if u > 0 {
                    let l = tree.leaf_of[p] as usize;
                    aggs[l].units += u;
                    aggs[l].nodes += 1;
                }
            }
        }
        let cap = |caps: &[Option<u32>], p: usize| caps[p].unwrap_or_else(|| c.node_units[p]);
        // Slack is not tracked over time: a future placement is judged by units alone.
        let mut root_units = 0u64;
        let mut root_nodes = 0u64;
        for a in aggs.iter_mut() {
            a.slack = 0;
            root_units += u64::from(a.units);
            root_nodes += u64::from(a.nodes);
        }
        let need = u64::from(demand.need());
        // Two sorted lists read as one.
        let mut i = main.partition_point(|e| e.time <= now);
        let mut j = recent.partition_point(|e| e.time <= now);
        let mut t = now;
        let mut check = true;
        // Every (node, time) the sweep touched, in order; `mark` starts the current time's.
        let mut touched: Vec<u32> = Vec::new();
        let found = loop {
            if check && root_units >= need && root_nodes >= u64::from(demand.min_nodes) {
                let ml = if t < leaves_deadline {
                    max_leaves
                } else {
                    None
                };
                let inp = SelectInput {
                    tree,
                    levels: ps.levels,
                    leaf_aggs: LeafView {
                        base: aggs,
                        patch: &[],
                    },
                    demand,
                    max_leaves: ml,
                    counts,
                    placement: self.placement,
                    order: ps.node_order,
                };
                let node_fn = |p: u32| -> (u32, u32) {
                    (
                        cap(caps, p as usize),
                        clamp(p as usize, &at(p as usize, raw)).gpus,
                    )
                };
                if let Some(sel) = select(&inp, &node_fn) {
                    break Some((t, sel));
                }
            }
            // Advance to the next event time (or the switches deadline).
            let next_event = match (main.get(i), recent.get(j)) {
                (Some(a), Some(b)) => Some(a.time.min(b.time)),
                (Some(a), None) => Some(a.time),
                (None, Some(b)) => Some(b.time),
                (None, None) => None,
            };
            let next = match next_event {
                Some(et) if leaves_deadline > t && leaves_deadline < et => leaves_deadline,
                Some(et) => et,
                None if leaves_deadline > t && leaves_deadline != NEVER => leaves_deadline,
                None => break None,
            };
            t = next;
            let end = dur(t);
            check = t == leaves_deadline;
            let mark = touched.len();
            let mut touch = |p: u32, touched: &mut Vec<u32>| {
                if stamp[p as usize] != t {
                    stamp[p as usize] = t;
                    touched.push(p);
                }
            };
            loop {
                let e = if i < main.len() && main[i].time == t {
                    i += 1;
                    main[i - 1]
                } else if j < recent.len() && recent[j].time == t {
                    j += 1;
                    recent[j - 1]
                } else {
                    break;
                };
                let r = &mut raw[e.pos as usize];
                r[0] += e.d[0];
                r[1] += e.d[1];
                r[2] += e.d[2];
                if e.adds() {
                    check = true;
                }
                touch(e.pos, &mut touched);
            }
            while lo < starts.len() && starts[lo].0 <= t {
                let p = starts[lo].1;
                if lo < hi {
                    inwin[p as usize] -= 1;
                }
                lo += 1;
                touch(p, &mut touched);
            }
            hi = hi.max(lo);
            while hi < starts.len() && starts[hi].0 < end {
                let p = starts[hi].1;
                inwin[p as usize] += 1;
                hi += 1;
                touch(p, &mut touched);
            }
            for &p in &touched[mark..] {
                let p = p as usize;
                let u = eff(p, &at(p, raw), inwin[p], t, end);
                let old = cap(caps, p);
                if u != old {
                    let l = tree.leaf_of[p] as usize;
                    aggs[l].units = aggs[l].units - old + u;
                    aggs[l].nodes = aggs[l].nodes - u32::from(old > 0) + u32::from(u > 0);
                    root_units = root_units - u64::from(old) + u64::from(u);
                    root_nodes = root_nodes - u64::from(old > 0) + u64::from(u > 0);
                    caps[p] = Some(u);
                }
            }
        };
        // Back to rest: events and window changes touched their nodes; the window's first
        // holds were counted without a touch.
        for &p in &touched {
            raw[p as usize] = [0; 3];
            inwin[p as usize] = 0;
            stamp[p as usize] = i64::MIN;
            caps[p as usize] = None;
        }
        if base_ok {
            for &l in &ps.claimed_leaves {
                let r = tree.leaf(l).nodes.clone();
                caps[r.start as usize..r.end as usize].fill(None);
            }
        } else {
            caps[..n].fill(None);
        }
        for &(_, p) in &starts[..hi] {
            inwin[p as usize] = 0;
        }
        found
    }
}
