//! Choosing nodes for a gang over a snapshot of per-leaf aggregates: Muster's topology
//! placement (lowest switch that holds the gang whole, best fit; spanning gangs on the
//! fewest children), the weighing of candidate leaves against the cycle's later gangs, and
//! the two yardsticks' placements (Slurm's topology/tree, first fit). Pure functions of
//! their inputs: the engine supplies the aggregates and per-node units.

use super::engine::{Engine, LeafAgg, LeafView, PartState, Selection};
use super::shape::{Demand, Mode};
use super::tree::Tree;

/// How a cycle chooses nodes for a gang. Muster places by [`Placement::Topology`]; the
/// other two are the yardsticks of [`super::baseline`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Muster's: the lowest switch that can hold the gang whole, best fit among candidates;
    /// a gang that must span switches takes the set of children that uses the fewest and
    /// leaves the most room whole elsewhere; within a leaf the fullest nodes first.
    #[default]
    Topology,
    /// Slurm 22.05's select/cons_tres under topology/tree (`_eval_nodes_topo`): the lowest
    /// switch with enough available nodes, the one with the fewest among those; a gang that
    /// spans switches takes, at each step, the child that holds the rest with the fewest
    /// nodes, else the child with the most nodes (largest-first spill); within a leaf, nodes
    /// in node order.
    SlurmTree,
    /// Topology-unaware first fit: the first nodes in node-list order that have room.
    FirstFit,
}

/// Placement inputs for [`select`].
pub struct SelectInput<'t> {
    /// The partition's tree.
    pub tree: &'t Tree,
    /// Switch ids per level.
    pub levels: &'t [Vec<u32>],
    /// Units per leaf.
    pub leaf_aggs: LeafView<'t>,
    /// The gang.
    pub demand: &'t Demand,
    /// `--switches` while it applies.
    pub max_leaves: Option<u32>,
    /// Feature counts: `(eligible by position, nodes)`: that many distinct nodes of the
    /// placement must be eligible for each.
    pub counts: &'t [(Vec<bool>, u32)],
    /// How to choose.
    pub placement: Placement,
    /// Tree positions in node-list order (read by [`Placement::FirstFit`] only).
    pub order: &'t [u32],
}

/// The best-fit leaf switch (`(slack, spare units, switch)`, least first) among the leaves
/// of `aggs` that hold `need` units on `min_nodes` nodes whole, leaving out `tried`; with
/// the leaves' total units and nodes.
fn best_leaf(
    aggs: impl Iterator<Item = LeafAgg>,
    tree: &Tree,
    need: u32,
    min_nodes: u32,
    tried: &[u32],
) -> (Option<(u64, u64, u32)>, u64, u64) {
    let mut best: Option<(u64, u64, u32)> = None;
    let (mut tu, mut tn) = (0u64, 0u64);
    for (a, &sid) in aggs.zip(&tree.leaves) {
        tu += u64::from(a.units);
        tn += u64::from(a.nodes);
        if a.units < need || a.nodes < min_nodes {
            continue;
        }
        let key = (a.slack, u64::from(a.units - need), sid);
        if best.is_none_or(|b| key < b) && (tried.is_empty() || !tried.contains(&sid)) {
            best = Some(key);
        }
    }
    (best, tu, tn)
}

/// Chooses nodes for a gang: under the lowest switch that can hold it whole, best fit among
/// candidates; within a switch, children that hold the rest whole (best fit) else the largest
/// children whole. `node` gives `(units, slack)` for a tree position: units that fit and a
/// measure of free room used to prefer fuller nodes.
pub fn select(inp: &SelectInput<'_>, node: &dyn Fn(u32) -> (u32, u32)) -> Option<Selection> {
    let d = inp.demand;
    let need = d.need();
    if need == 0 {
        return None;
    }
    if !inp.counts.is_empty() {
        return select_counts(inp, node);
    }
    match inp.placement {
        Placement::Topology => {}
        Placement::SlurmTree => return select_slurm(inp, node),
        Placement::FirstFit => return select_first_fit(inp, node),
    }
    let view = inp.leaf_aggs;
    let nl = view.len();
    // A switch's aggregate by summing its leaves (used below the leaf level only for the
    // few switches a placement descends into).
    let direct = |s: u32| -> (u64, u64) {
        let r = &inp.tree.switches[s as usize].leaves;
        (r.start..r.end).fold((0, 0), |(u, n), l| {
            let a = view.get(l as usize);
            (u + u64::from(a.units), n + u64::from(a.nodes))
        })
    };
    // Leaves first, best fit found in one pass (sorting only if the best one fails).
    // The first pass also sums the partition's room: a job it cannot hold is refused at
    // once. One pass over the leaves (this runs for every job that starts), over the bare
    // base when no leaf is patched.
    let mut tried: Vec<u32> = Vec::new();
    let mut first = true;
    loop {
        let (best, tu, tn) = if view.patch.is_empty() {
            best_leaf(
                view.base.iter().copied(),
                inp.tree,
                need,
                d.min_nodes,
                &tried,
            )
        } else {
            best_leaf(view.iter(), inp.tree, need, d.min_nodes, &tried)
        };
        if first {
            first = false;
            if tu < u64::from(need) || tn < u64::from(d.min_nodes) {
                return None;
            }
        }
        let Some((_, _, sid)) = best else { break };
        if let Some(sel) = take_switch(inp, sid, node, &direct) {
            return Some(sel);
        }
        tried.push(sid);
    }
    if inp.levels.len() < 2 {
        return None;
    }
    // Prefix sums over leaves give any switch's aggregate in O(1).
    let mut pu = vec![0u64; nl + 1];
    let mut pn = vec![0u64; nl + 1];
    let mut psl = vec![0u64; nl + 1];
    for i in 0..nl {
        let a = view.get(i);
        pu[i + 1] = pu[i] + u64::from(a.units);
        pn[i + 1] = pn[i] + u64::from(a.nodes);
        psl[i + 1] = psl[i] + a.slack;
    }
    let slack = |s: u32| -> u64 {
        let r = &inp.tree.switches[s as usize].leaves;
        psl[r.end as usize] - psl[r.start as usize]
    };
    let agg = |s: u32| -> (u64, u64) {
        let r = &inp.tree.switches[s as usize].leaves;
        (
            pu[r.end as usize] - pu[r.start as usize],
            pn[r.end as usize] - pn[r.start as usize],
        )
    };
    let min_leaves = |s: u32| -> u32 {
        let r = inp.tree.switches[s as usize].leaves.clone();
        let mut us: Vec<u32> = (r.start..r.end)
            .map(|l| view.get(l as usize).units)
            .filter(|&u| u > 0)
            .collect();
        us.sort_unstable_by(|a, b| b.cmp(a));
        let mut left = u64::from(need);
        let mut k = 0;
        for u in us {
            if left == 0 {
                break;
            }
            left = left.saturating_sub(u64::from(u));
            k += 1;
        }
        if left > 0 { u32::MAX } else { k }
    };
    // Then each level above, lowest first.
    for level in (0..inp.levels.len() - 1).rev() {
        // Best fit: least free room left over, then fewest spare units, then tree order.
        let mut cands: Vec<(u64, u64, u32)> = inp.levels[level]
            .iter()
            .filter_map(|&s| {
                let (u, n) = agg(s);
                (u >= u64::from(need) && n >= u64::from(d.min_nodes))
                    .then(|| (slack(s), u - u64::from(need), s))
            })
            .collect();
        if let Some(ml) = inp.max_leaves {
            cands.retain(|&(_, _, s)| min_leaves(s) <= ml);
        }
        cands.sort_unstable();
        for (_, _, s) in cands {
            if let Some(sel) = take_switch(inp, s, node, &agg) {
                return Some(sel);
            }
        }
    }
    None
}

/// Placement with feature counts (`[rack1*2&rack2*2]`, `gpu*4`): such a job asks for nodes
/// of given kinds wherever they are, so the switch tree only orders the choice: each count
/// takes its nodes first (fullest first, then in tree order), then the rest of the gang
/// comes from nodes on the leaves already used, then from any other.
fn select_counts(inp: &SelectInput<'_>, node: &dyn Fn(u32) -> (u32, u32)) -> Option<Selection> {
    let d = inp.demand;
    let n = inp.tree.nodes.len() as u32;
    let caps: Vec<(u32, u32)> = (0..n).map(node).collect();
    let mut used = vec![false; n as usize];
    let mut out: Selection = Vec::new();
    let per = d.per_node_cap();
    let mut left = u64::from(d.need());
    // Every node of the placement takes at least one unit: units for the nodes still to come
    // (counted ones, and those the node minimum adds) are kept back.
    let mut counted_left: u64 = inp.counts.iter().map(|&(_, k)| u64::from(k)).sum();
    let beyond = match d.mode {
        Mode::Bundles { .. } => 0,
        Mode::Units { .. } => u64::from(d.min_nodes).saturating_sub(counted_left),
    };
    for (ok, k) in inp.counts {
        let mut cands: Vec<(u32, u32)> = (0..n)
            .filter(|&p| ok[p as usize] && !used[p as usize] && caps[p as usize].0 > 0)
            .map(|p| (caps[p as usize].1, p))
            .collect();
        cands.sort_unstable();
        if (cands.len() as u32) < *k {
            return None;
        }
        for &(_, p) in cands.iter().take(*k as usize) {
            used[p as usize] = true;
            counted_left -= 1;
            let share = left.saturating_sub(counted_left + beyond).max(1);
            let u = caps[p as usize]
                .0
                .min(per)
                .min(u32::try_from(share).unwrap_or(u32::MAX));
            left = left.saturating_sub(u64::from(u));
            out.push((p, u));
        }
    }
    let leaves: Vec<u32> = out
        .iter()
        .map(|&(p, _)| inp.tree.leaf_of[p as usize])
        .collect();
    let mut rest: Vec<(bool, u32, u32)> = (0..n)
        .filter(|&p| !used[p as usize] && caps[p as usize].0 > 0)
        .map(|p| {
            (
                !leaves.contains(&inp.tree.leaf_of[p as usize]),
                caps[p as usize].1,
                p,
            )
        })
        .collect();
    rest.sort_unstable();
    let mut rest = rest.into_iter();
    let target_nodes = match d.mode {
        Mode::Bundles { .. } => d.min_nodes.max(out.len() as u32),
        Mode::Units { .. } => d.min_nodes,
    };
    while left > 0 || (out.len() as u32) < target_nodes {
        let (_, _, p) = rest.next()?;
        let after = u64::from(target_nodes).saturating_sub(out.len() as u64 + 1);
        let share = left.saturating_sub(after).max(1);
        let u = caps[p as usize]
            .0
            .min(per)
            .min(u32::try_from(share).unwrap_or(u32::MAX));
        left = left.saturating_sub(u64::from(u));
        out.push((p, u));
    }
    if out.len() as u32 > d.max_nodes {
        return None;
    }
    Some(out)
}

/// A later gang of the cycle as a placement sees it (see [`select_weighed`]).
#[derive(Clone, Debug)]
pub struct Ahead {
    /// Its class.
    pub cid: u32,
    /// Units it needs.
    pub need: u32,
    /// Fewest nodes.
    pub min_nodes: u32,
    /// End of its run if it started now.
    pub end: i64,
    /// Its aggregates per leaf now.
    pub leaves: Vec<LeafAgg>,
    /// Leaves that hold it whole now.
    pub fitting: u32,
}

impl Engine<'_> {
    /// What placing `sel` (a job with demand `d`, all on one leaf) costs the
    /// later gangs `ahead`: each gang that fitted that leaf whole and no longer would counts
    /// 1, or 2^20 if it was the only leaf that held it.
    pub fn lookahead_penalty(
        &self,
        d: &Demand,
        sel: &Selection,
        ahead: &[&Ahead],
        ps: &PartState<'_>,
    ) -> u64 {
        let Some(&(p0, _)) = sel.first() else {
            return 0;
        };
        let leaf = ps.tree.leaf_of[p0 as usize] as usize;
        let mut pen = 0u64;
        for g in ahead {
            let a = g.leaves[leaf];
            if a.units < g.need || a.nodes < g.min_nodes {
                continue;
            }
            let cg = &self.classes[g.cid as usize];
            let (mut units, mut nodes) = (i64::from(a.units), i64::from(a.nodes));
            for &(p, u) in sel {
                let ns = &self.nodes[ps.tree.nodes[p as usize] as usize];
                if !ns.sched {
                    continue;
                }
                let avail = ns.window_now(g.end);
                let before = self.units_for_count(cg, p, avail, ns.free_mask, ns.total);
                let after = if d.exclusive {
                    0
                } else {
                    let left = avail.minus(d.take(u, ns.total));
                    self.units_for_count(cg, p, left, ns.free_mask, ns.total)
                };
                units -= i64::from(before.saturating_sub(after));
                if before > 0 && after == 0 {
                    nodes -= 1;
                }
            }
            if units < i64::from(g.need) || nodes < i64::from(g.min_nodes) {
                pen += if g.fitting <= 1 { 1 << 20 } else { 1 };
            }
        }
        pen
    }
}

/// [`select`] for a gang that one leaf holds, weighing the best-fit candidates: the first
/// `k` leaves by best fit, each placed, and the one whose placement costs `penalty` least
/// (then best fit) wins. `None` if no single leaf holds the gang.
pub fn select_weighed(
    inp: &SelectInput<'_>,
    node: &dyn Fn(u32) -> (u32, u32),
    penalty: &dyn Fn(&Selection) -> u64,
    k: usize,
) -> Option<Selection> {
    let d = inp.demand;
    let need = d.need();
    let view = inp.leaf_aggs;
    let direct = |s: u32| -> (u64, u64) {
        let r = &inp.tree.switches[s as usize].leaves;
        (r.start..r.end).fold((0, 0), |(u, n), l| {
            let a = view.get(l as usize);
            (u + u64::from(a.units), n + u64::from(a.nodes))
        })
    };
    let mut cands: Vec<(u64, u64, u32)> = view
        .iter()
        .enumerate()
        .filter(|(_, a)| a.units >= need && a.nodes >= d.min_nodes)
        .map(|(l, a)| (a.slack, u64::from(a.units - need), inp.tree.leaves[l]))
        .collect();
    cands.sort_unstable();
    let mut best: Option<(u64, usize, Selection)> = None;
    for (rank, &(_, _, sid)) in cands.iter().take(k).enumerate() {
        let Some(sel) = take_switch(inp, sid, node, &direct) else {
            continue;
        };
        let p = penalty(&sel);
        if best.as_ref().is_none_or(|b| (p, rank) < (b.0, b.1)) {
            best = Some((p, rank, sel));
            if p == 0 {
                break;
            }
        }
    }
    best.map(|b| b.2)
}

/// [`Placement::FirstFit`]: nodes in node-list order, each taking what it can. A node is
/// passed over when the nodes still allowed (`--nodes` maximum) could not carry the rest
/// after it, and a node leaves a unit for every further node `--nodes` requires, so a
/// request the cluster can hold is never refused for the order it met the nodes in
/// (`nodes: 1, ntasks: 8` takes the first node with room for all eight).
fn select_first_fit(inp: &SelectInput<'_>, node: &dyn Fn(u32) -> (u32, u32)) -> Option<Selection> {
    let d = inp.demand;
    let per = u64::from(d.per_node_cap().max(1));
    let mut left = u64::from(d.need());
    let mut out: Selection = Vec::new();
    let bundles = matches!(d.mode, Mode::Bundles { .. });
    for &p in inp.order {
        let used = out.len() as u32;
        if used >= d.max_nodes || (left == 0 && used >= d.min_nodes && !bundles) {
            break;
        }
        let (u, _) = node(p);
        if u == 0 {
            continue;
        }
        if bundles {
            // Bundles: one per node, as many nodes as a node range allows.
            out.push((p, 1));
            left = left.saturating_sub(1);
            continue;
        }
        let u = u64::from(u).min(per);
        let slots = u64::from(d.max_nodes - used);
        if u < left.saturating_sub((slots - 1).saturating_mul(per)) {
            continue;
        }
        let still = u64::from(d.min_nodes.saturating_sub(used + 1));
        let take = u.min(left.saturating_sub(still)).max(1);
        out.push((p, take as u32));
        left = left.saturating_sub(take);
    }
    if left > 0 || (out.len() as u32) < d.min_nodes {
        return None;
    }
    balance(d, node, out)
}

/// A node count and a task count: the tasks spread evenly over the nodes, as Slurm does (no
/// node gets two more than another, room permitting). `None` if `out` is empty.
fn balance(d: &Demand, node: &dyn Fn(u32) -> (u32, u32), mut out: Selection) -> Option<Selection> {
    if matches!(d.mode, Mode::Units { .. }) && d.min_nodes > 1 {
        loop {
            let (imax, &(_, umax)) = out
                .iter()
                .enumerate()
                .max_by_key(|(i, (_, u))| (*u, std::cmp::Reverse(*i)))?;
            let (imin, &(pmin, umin)) =
                out.iter().enumerate().min_by_key(|(i, (_, u))| (*u, *i))?;
            if umax <= umin + 1 || umin + 1 > node(pmin).0 {
                break;
            }
            out[imax].1 -= 1;
            out[imin].1 += 1;
        }
    }
    Some(out)
}

/// [`Placement::SlurmTree`]: the lowest level with a switch that has the units and nodes,
/// the candidate with the fewest available nodes (then tree order), then
/// [`slurm_take`] within it.
fn select_slurm(inp: &SelectInput<'_>, node: &dyn Fn(u32) -> (u32, u32)) -> Option<Selection> {
    let d = inp.demand;
    let view = inp.leaf_aggs;
    let nl = view.len();
    let mut pu = vec![0u64; nl + 1];
    let mut pn = vec![0u64; nl + 1];
    for i in 0..nl {
        let a = view.get(i);
        pu[i + 1] = pu[i] + u64::from(a.units);
        pn[i + 1] = pn[i] + u64::from(a.nodes);
    }
    let agg = |s: u32| -> (u64, u64) {
        let r = &inp.tree.switches[s as usize].leaves;
        (
            pu[r.end as usize] - pu[r.start as usize],
            pn[r.end as usize] - pn[r.start as usize],
        )
    };
    let need = u64::from(d.need());
    let fits = |(u, n): (u64, u64)| u >= need && n >= u64::from(d.min_nodes);
    for level in (0..inp.levels.len()).rev() {
        let best = inp.levels[level]
            .iter()
            .filter(|&&s| fits(agg(s)))
            .min_by_key(|&&s| (agg(s).1, s));
        if let Some(&s) = best {
            let mut out = Selection::new();
            let mut left = need;
            slurm_take(inp, s, &mut left, node, &agg, &mut out);
            if left > 0 || (out.len() as u32) < d.min_nodes || out.len() as u32 > d.max_nodes {
                return None;
            }
            if let Some(ml) = inp.max_leaves {
                let mut ls: Vec<u32> = out
                    .iter()
                    .map(|&(p, _)| inp.tree.leaf_of[p as usize])
                    .collect();
                ls.sort_unstable();
                ls.dedup();
                if ls.len() as u32 > ml {
                    return None;
                }
            }
            return balance(d, node, out);
        }
    }
    None
}

/// Takes `left` units under switch `s` the way Slurm's `_eval_nodes_topo` adds leaves: the
/// child that can hold the rest with the fewest available nodes, else the one with the
/// most (tree order on ties); a leaf's nodes in order.
fn slurm_take(
    inp: &SelectInput<'_>,
    s: u32,
    left: &mut u64,
    node: &dyn Fn(u32) -> (u32, u32),
    agg: &dyn Fn(u32) -> (u64, u64),
    out: &mut Selection,
) {
    let d = inp.demand;
    let sw = &inp.tree.switches[s as usize];
    let bundles = matches!(d.mode, Mode::Bundles { .. });
    if sw.children.is_empty() {
        let per = u64::from(d.per_node_cap().max(1));
        for p in sw.nodes.clone() {
            let used = out.len() as u32;
            let done = *left == 0 && used >= d.min_nodes;
            if used >= d.max_nodes || (done && !bundles) {
                return;
            }
            let (u, _) = node(p);
            if u == 0 {
                continue;
            }
            let still = u64::from(d.min_nodes.saturating_sub(used + 1));
            let take = u64::from(u).min(per).min(left.saturating_sub(still)).max(1);
            out.push((p, if bundles { 1 } else { take as u32 }));
            *left = left.saturating_sub(if bundles { 1 } else { take });
        }
        return;
    }
    let mut used = vec![false; sw.children.len()];
    while *left > 0 || (out.len() as u32) < d.min_nodes {
        let rem_nodes = u64::from(d.min_nodes.saturating_sub(out.len() as u32));
        let mut best: Option<(u64, usize)> = None;
        let mut largest: Option<(u64, usize)> = None;
        for (i, &c) in sw.children.iter().enumerate() {
            if used[i] {
                continue;
            }
            let (u, n) = agg(c);
            if n == 0 {
                continue;
            }
            if u >= *left && n >= rem_nodes && best.is_none_or(|(bn, _)| n < bn) {
                best = Some((n, i));
            }
            if largest.is_none_or(|(ln, _)| n > ln) {
                largest = Some((n, i));
            }
        }
        let Some((_, i)) = best.or(largest) else {
            return;
        };
        used[i] = true;
        slurm_take(inp, sw.children[i], left, node, agg, out);
        if best.is_some() {
            return;
        }
    }
}

fn take_switch(
    inp: &SelectInput<'_>,
    s: u32,
    node: &dyn Fn(u32) -> (u32, u32),
    agg: &dyn Fn(u32) -> (u64, u64),
) -> Option<Selection> {
    let d = inp.demand;
    let mut out: Selection = Vec::new();
    take_rec(inp, s, u64::from(d.need()), node, agg, &mut out);
    let taken: u64 = out.iter().map(|&(_, u)| u64::from(u)).sum();
    if taken < u64::from(d.need()) {
        return None;
    }
    let sw = &inp.tree.switches[s as usize];
    match d.mode {
        Mode::Bundles { .. } => {
            // As many nodes as the range allows, from the same switch (used leaves first).
            if d.max_nodes as usize > out.len() {
                let used_leaves: Vec<u32> = out
                    .iter()
                    .map(|&(p, _)| inp.tree.leaf_of[p as usize])
                    .collect();
                let mut extra: Vec<(bool, u32, u32)> = (sw.nodes.clone())
                    .filter(|p| !out.iter().any(|&(q, _)| q == *p))
                    .filter_map(|p| {
                        let (u, slack) = node(p);
                        (u > 0).then(|| {
                            (
                                !used_leaves.contains(&inp.tree.leaf_of[p as usize]),
                                slack,
                                p,
                            )
                        })
                    })
                    .collect();
                extra.sort_unstable();
                for (_, _, p) in extra.into_iter().take(d.max_nodes as usize - out.len()) {
                    out.push((p, 1));
                }
            }
        }
        Mode::Units { .. } => {
            if (out.len() as u32) < d.min_nodes {
                // Spread: move single units onto more nodes of the switch (on the leaves
                // already used first).
                let used_leaves: Vec<u32> = out
                    .iter()
                    .map(|&(p, _)| inp.tree.leaf_of[p as usize])
                    .collect();
                let mut spare: Vec<(bool, u32, u32)> = (sw.nodes.clone())
                    .filter(|p| !out.iter().any(|&(q, _)| q == *p))
                    .filter_map(|p| {
                        let (u, slack) = node(p);
                        let other_leaf = !used_leaves.contains(&inp.tree.leaf_of[p as usize]);
                        (u > 0).then_some((other_leaf, slack, p))
                    })
                    .collect();
                spare.sort_unstable();
                let mut spare = spare.into_iter();
                while (out.len() as u32) < d.min_nodes {
                    let (i, _) = out
                        .iter()
                        .enumerate()
                        .max_by_key(|(i, (_, u))| (*u, std::cmp::Reverse(*i)))?;
                    if out[i].1 < 2 {
                        return None;
                    }
                    let (_, _, p) = spare.next()?;
                    out[i].1 -= 1;
                    out.push((p, 1));
                }
            }
            if out.len() as u32 > d.max_nodes {
                return None;
            }
            if d.min_nodes > 1 {
                // A node count and a task count: spread the tasks evenly, as Slurm does (no
                // node gets two more than another, room permitting).
                loop {
                    let (imax, &(_, umax)) = out
                        .iter()
                        .enumerate()
                        .max_by_key(|(i, (_, u))| (*u, std::cmp::Reverse(*i)))?;
                    let (imin, &(pmin, umin)) =
                        out.iter().enumerate().min_by_key(|(i, (_, u))| (*u, *i))?;
                    if umax <= umin + 1 || umin + 1 > node(pmin).0 {
                        break;
                    }
                    out[imax].1 -= 1;
                    out[imin].1 += 1;
                }
            }
        }
    }
    if let Some(ml) = inp.max_leaves {
        let mut ls: Vec<u32> = out
            .iter()
            .map(|&(p, _)| inp.tree.leaf_of[p as usize])
            .collect();
        ls.sort_unstable();
        ls.dedup();
        if ls.len() as u32 > ml {
            return None;
        }
    }
    Some(out)
}

fn take_rec(
    inp: &SelectInput<'_>,
    s: u32,
    amount: u64,
    node: &dyn Fn(u32) -> (u32, u32),
    agg: &dyn Fn(u32) -> (u64, u64),
    out: &mut Selection,
) {
    let sw = &inp.tree.switches[s as usize];
    if sw.children.is_empty() {
        take_leaf(inp, sw.nodes.clone(), amount, node, out);
        return;
    }
    let units: Vec<u64> = sw.children.iter().map(|&c| agg(c).0).collect();
    if let Some(i) = best_fit(&units, amount, &[]) {
        take_rec(inp, sw.children[i], amount, node, agg, out);
        return;
    }
    // No child holds it: the set of children that uses the fewest and leaves the least room
    // over in them (so the untouched ones keep theirs whole), found by trying each child as
    // the first and completing largest-first with a best fit for the rest.
    // Children with the same room are interchangeable: one trial per distinct figure.
    let mut firsts: Vec<usize> = Vec::new();
    for i in 0..units.len() {
        if units[i] > 0 && !firsts.iter().any(|&f| units[f] == units[i]) {
            firsts.push(i);
        }
    }
    let mut plan: Option<((usize, u64, usize), Vec<usize>)> = None;
    let mut used = vec![false; units.len()];
    for first in firsts {
        used.iter_mut().for_each(|u| *u = false);
        used[first] = true;
        let mut chosen = vec![first];
        let mut left = amount - units[first];
        loop {
            if let Some(i) = best_fit(&units, left, &used) {
                chosen.push(i);
                left = 0;
                break;
            }
            // The largest unused child, the first on a tie. A plain loop: as an iterator
            // chain its fold was sometimes left out of line, and this loop runs for every
            // child of every trial (~1% of a 16,384-node cycle either way).
            let mut largest: Option<usize> = None;
            for i in 0..units.len() {
                if !used[i] && units[i] > 0 && largest.is_none_or(|b| units[i] > units[b]) {
                    largest = Some(i);
                }
            }
            let Some(i) = largest else { break };
            used[i] = true;
            chosen.push(i);
            left -= units[i];
        }
        if left > 0 {
            continue;
        }
        let over: u64 = chosen.iter().map(|&i| units[i]).sum::<u64>() - amount;
        let key = (chosen.len(), over, first);
        if plan.as_ref().is_none_or(|(k, _)| key < *k) {
            plan = Some((key, chosen));
        }
    }
    let Some((_, chosen)) = plan else { return };
    let mut left = amount;
    for (k, &i) in chosen.iter().enumerate() {
        let want = if k + 1 == chosen.len() {
            left
        } else {
            units[i].min(left)
        };
        let before: u64 = out.iter().map(|&(_, x)| u64::from(x)).sum();
        take_rec(inp, sw.children[i], want, node, agg, out);
        let after: u64 = out.iter().map(|&(_, x)| u64::from(x)).sum();
        left = left.saturating_sub(after - before);
        if left == 0 {
            return;
        }
    }
}

/// The smallest of `units` (not `used`, if given) that holds `amount`, first on ties.
fn best_fit(units: &[u64], amount: u64, used: &[bool]) -> Option<usize> {
    // The smallest that holds `amount`, the first on a tie (a plain loop, as in `take_rec`).
    let mut best: Option<usize> = None;
    for (i, &u) in units.iter().enumerate() {
        if u >= amount
            && u > 0
            && !used.get(i).copied().unwrap_or(false)
            && best.is_none_or(|b| u < units[b])
        {
            best = Some(i);
        }
    }
    best
}

fn take_leaf(
    inp: &SelectInput<'_>,
    range: std::ops::Range<u32>,
    amount: u64,
    node: &dyn Fn(u32) -> (u32, u32),
    out: &mut Selection,
) {
    let mut cands: Vec<(u32, u32, u32)> = range
        .filter_map(|p| {
            let (u, slack) = node(p);
            (u > 0).then_some((u, slack, p))
        })
        .collect();
    let mut left = amount;
    if let Mode::Bundles { .. } = inp.demand.mode {
        // Fullest nodes first so emptier ones stay whole.
        cands.sort_unstable_by_key(|&(_, slack, p)| (slack, p));
        for (_, _, p) in cands.into_iter().take(left as usize) {
            out.push((p, 1));
        }
        return;
    }
    // Largest nodes first until the rest fits one node, which is chosen by best fit.
    cands.sort_unstable_by_key(|&(u, slack, p)| (std::cmp::Reverse(u), slack, p));
    let mut taken = vec![false; cands.len()];
    while left > 0 {
        let best = cands
            .iter()
            .enumerate()
            .filter(|(i, c)| !taken[*i] && u64::from(c.0) >= left)
            .min_by_key(|(_, c)| (c.0, c.1, c.2));
        if let Some((i, c)) = best {
            taken[i] = true;
            out.push((c.2, left as u32));
            return;
        }
        let Some(i) = (0..cands.len()).find(|&i| !taken[i]) else {
            return;
        };
        taken[i] = true;
        out.push((cands[i].2, cands[i].0));
        left -= u64::from(cands[i].0);
    }
}
