//! Earliest start of a waiting job: a sweep over the times at which resources come back.
//!
//! Availability on a node only rises when a running job's time limit ends or a hold ends, so
//! the earliest feasible start is now or one of those times. The sweep keeps each node's free
//! count at the current time and the per-leaf aggregates incrementally (O(1) per event); only
//! at times where the partition as a whole has room does it run the topology placement, with
//! nodes whose holds begin during the job's run read exactly over its whole window.

use super::engine::{Engine, LeafAgg, NEVER, SelectInput, Selection, select};
use super::shape::Res;

/// A signed change of a node's free resources.
#[derive(Clone, Copy, Debug)]
struct Event {
    time: i64,
    pos: u32,
    add: Res,
    sub: Res,
}

impl Engine<'_> {
    /// The earliest time ≥ now at which class `cid` with `demand`'s counts can be placed for
    /// `limit` seconds (`None`: unlimited), honouring `max_leaves` before `leaves_deadline`.
    /// Returns the time and the placement.
    pub fn earliest(
        &self,
        cid: u32,
        demand: &super::shape::Demand,
        limit: Option<u64>,
        max_leaves: Option<u32>,
        leaves_deadline: i64,
    ) -> Option<(i64, Selection)> {
        let c = &self.classes[cid as usize];
        let ps = &self.parts[c.part as usize];
        let tree = &ps.tree;
        let now = self.now;
        let n = tree.nodes.len();
        let dur = |t: i64| match limit {
            Some(l) => t.saturating_add(i64::try_from(l).unwrap_or(i64::MAX)),
            None => NEVER,
        };
        // Point availability at now and the events after it.
        let mut pt: Vec<Res> = Vec::with_capacity(n);
        let mut events: Vec<Event> = Vec::new();
        let mut claimed: Vec<u32> = Vec::new();
        for (pos, &node) in tree.nodes.iter().enumerate() {
            let ns = &self.nodes[node as usize];
            let pos = pos as u32;
            if !ns.sched {
                pt.push(Res::default());
                continue;
            }
            pt.push(ns.point(now, now));
            for &(t, r, _) in ns.releases.iter().filter(|r| r.0 != NEVER) {
                events.push(Event {
                    time: t,
                    pos,
                    add: r,
                    sub: Res::default(),
                });
            }
            if !ns.claims.is_empty() {
                claimed.push(pos);
            }
            for cl in &ns.claims {
                if cl.start > now {
                    events.push(Event {
                        time: cl.start,
                        pos,
                        add: Res::default(),
                        sub: cl.res,
                    });
                }
                if cl.end > now && cl.end != NEVER {
                    events.push(Event {
                        time: cl.end,
                        pos,
                        add: cl.res,
                        sub: Res::default(),
                    });
                }
            }
        }
        events.sort_unstable_by_key(|e| (e.time, e.pos));
        // `pt` tracks raw counts which may transiently exceed the total (releases before
        // holds) or go below zero (holds before releases); clamp when reading.
        let mut raw: Vec<(i128, i128, i128)> = pt
            .iter()
            .map(|r| (i128::from(r.gpus), i128::from(r.cpu), i128::from(r.mem)))
            .collect();
        let clamp = |pos: usize, raw: &(i128, i128, i128)| -> Res {
            let tot = self.nodes[tree.nodes[pos] as usize].total;
            Res {
                gpus: raw.0.clamp(0, i128::from(tot.gpus)) as u32,
                cpu: raw.1.clamp(0, i128::from(tot.cpu)) as u64,
                mem: raw.2.clamp(0, i128::from(tot.mem)) as u64,
            }
        };
        let cap_of = |pos: usize, r: Res| -> u32 {
            let node = tree.nodes[pos];
            let ns = &self.nodes[node as usize];
            if !ns.sched {
                return 0;
            }
            // Future GPUs are counted, not named: any of the node's GPUs may be free then.
            self.units_for_count(c, pos as u32, r, u64::MAX, ns.total)
        };
        let mut caps: Vec<u32> = (0..n).map(|p| cap_of(p, clamp(p, &raw[p]))).collect();
        let nl = tree.leaves.len();
        let mut aggs = vec![LeafAgg::default(); nl];
        for (p, &u) in caps.iter().enumerate() {
            if u > 0 {
                let l = tree.leaf_of[p] as usize;
                aggs[l].units += u;
                aggs[l].nodes += 1;
            }
        }
        // Slack is not tracked over time: the future placement is judged by units alone.
        let mut root_units: u64 = aggs.iter().map(|a| u64::from(a.units)).sum();
        let mut root_nodes: u64 = aggs.iter().map(|a| u64::from(a.nodes)).sum();
        let need = u64::from(demand.need());
        let mut i = 0;
        let mut t = now;
        let mut check = true;
        loop {
            if check && root_units >= need && root_nodes >= u64::from(demand.min_nodes) {
                let end = dur(t);
                // Exact window for nodes whose holds begin during [t, end).
                let mut adj_aggs = aggs.clone();
                let mut adj: Vec<(u32, u32)> = Vec::new();
                for &pos in &claimed {
                    let node = tree.nodes[pos as usize];
                    let ns = &self.nodes[node as usize];
                    if ns.claims.iter().any(|cl| cl.start > t && cl.start < end) {
                        let w = ns.window(t, end, now);
                        let u =
                            cap_of(pos as usize, w.min(clamp(pos as usize, &raw[pos as usize])));
                        let old = caps[pos as usize];
                        if u != old {
                            let l = tree.leaf_of[pos as usize] as usize;
                            adj_aggs[l].units = adj_aggs[l].units - old + u;
                            adj_aggs[l].nodes =
                                adj_aggs[l].nodes - u32::from(old > 0) + u32::from(u > 0);
                            adj.push((pos, u));
                        }
                    }
                }
                let ml = if t < leaves_deadline {
                    max_leaves
                } else {
                    None
                };
                let inp = SelectInput {
                    tree,
                    levels: &ps.levels,
                    leaf_aggs: &adj_aggs,
                    demand,
                    max_leaves: ml,
                };
                let node_fn = |p: u32| -> (u32, u32) {
                    let u = adj
                        .iter()
                        .find(|&&(q, _)| q == p)
                        .map(|&(_, u)| u)
                        .unwrap_or(caps[p as usize]);
                    (u, clamp(p as usize, &raw[p as usize]).gpus)
                };
                if let Some(sel) = select(&inp, &node_fn) {
                    return Some((t, sel));
                }
            }
            // Advance to the next event time (or the switches deadline).
            let next_event = events.get(i).map(|e| e.time);
            let next = match next_event {
                Some(et) if leaves_deadline > t && leaves_deadline < et => leaves_deadline,
                Some(et) => et,
                None if leaves_deadline > t && leaves_deadline != NEVER => leaves_deadline,
                None => return None,
            };
            t = next;
            check = t == leaves_deadline;
            while i < events.len() && events[i].time == t {
                let e = events[i];
                i += 1;
                let p = e.pos as usize;
                let r = &mut raw[p];
                r.0 += i128::from(e.add.gpus) - i128::from(e.sub.gpus);
                r.1 += i128::from(e.add.cpu) - i128::from(e.sub.cpu);
                r.2 += i128::from(e.add.mem) - i128::from(e.sub.mem);
                if e.add != Res::default() {
                    check = true;
                }
                let u = cap_of(p, clamp(p, &raw[p]));
                let old = caps[p];
                if u != old {
                    let l = tree.leaf_of[p] as usize;
                    aggs[l].units = aggs[l].units - old + u;
                    aggs[l].nodes = aggs[l].nodes - u32::from(old > 0) + u32::from(u > 0);
                    root_units = root_units - u64::from(old) + u64::from(u);
                    root_nodes = root_nodes - u64::from(old > 0) + u64::from(u > 0);
                    caps[p] = u;
                }
            }
        }
    }
}
