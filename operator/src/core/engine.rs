//! The mutable state of one cycle: what is free on every node now and later, per-leaf
//! aggregates, and the placement and reservation searches that read them.
//!
//! Hot paths use indices only: nodes by [`NodeId`], partition members by position in their
//! [`Tree`], GPUs as 64-bit position masks. Per-leaf capacity for a class of jobs (same
//! partition, filter and per-node needs) is cached with a version stamp per leaf, so a queue
//! of thousands of similar jobs costs one pass over the leaves per job, and a leaf is re-read
//! only after an allocation changed it.

use std::collections::HashMap;

use super::gpus::GpuTree;
use super::model::{Partition, Snapshot};
use super::node::{Node, NodeId};
use super::shape::{Demand, Mode, Res};
use super::tree::Tree;

/// "Never" as a time.
pub const NEVER: i64 = i64::MAX;

/// A hold on a node's resources for a reserved job, from `start` until `end`.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    pub start: i64,
    pub end: i64,
    pub res: Res,
}

/// One node during the cycle.
#[derive(Clone, Debug)]
pub struct NodeState {
    /// Allocatable CPU, memory and healthy GPUs.
    pub total: Res,
    /// Free now.
    pub free: Res,
    /// Free healthy GPUs (positions in the node's [`GpuTree`]).
    pub free_mask: u64,
    /// Ready and not cordoned.
    pub sched: bool,
    /// Index into [`Engine::gpu_trees`].
    pub gtree: u32,
    /// Resources coming back, `(time, res, running job index)`, time > now. Jobs started
    /// this cycle use index `u32::MAX`.
    pub releases: Vec<(i64, Res, u32)>,
    /// Holds of reservations.
    pub claims: Vec<Claim>,
}

impl NodeState {
    /// Free at time `t >= now` by count: free now, plus releases by `t`, minus holds active
    /// at `t`.
    pub fn point(&self, t: i64, now: i64) -> Res {
        self.point_if(t, now, &|_| false)
    }

    /// [`NodeState::point`] with the releases of running jobs for which `early` holds
    /// counted as already done (preemption victims).
    pub fn point_if(&self, t: i64, now: i64, early: &dyn Fn(u32) -> bool) -> Res {
        let mut r = self.free;
        for &(rt, rr, j) in &self.releases {
            if (t > now && rt <= t && rt != NEVER) || early(j) {
                r = r.add(rr);
            }
        }
        let mut held = Res::default();
        for c in &self.claims {
            if c.start <= t && t < c.end {
                held = held.add(c.res);
            }
        }
        r.min(self.total).sub(held)
    }

    /// The least that is free over `[s, e)`: availability only drops when a hold begins.
    pub fn window(&self, s: i64, e: i64, now: i64) -> Res {
        self.window_if(s, e, now, &|_| false)
    }

    /// [`NodeState::window`] with `early` as in [`NodeState::point_if`].
    pub fn window_if(&self, s: i64, e: i64, now: i64, early: &dyn Fn(u32) -> bool) -> Res {
        let mut m = self.point_if(s, now, early);
        for c in &self.claims {
            if c.start > s && c.start < e {
                m = m.min(self.point_if(c.start, now, early));
            }
        }
        m
    }
}

/// Units of one class on one leaf.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeafAgg {
    pub units: u32,
    pub nodes: u32,
    /// Free room on the nodes that can take units (GPUs, or CPU cores for CPU-only classes):
    /// what a placement leaves over is judged by it.
    pub slack: u64,
}

/// Which nodes a job may use at all, and which of their GPUs.
#[derive(Clone, Debug)]
pub struct Filter {
    /// By tree position.
    pub ok: Vec<bool>,
    /// GPU positions of the right type, by tree position (all ones when no type is asked).
    pub gpu_mask: Vec<u64>,
    /// Whether any type restriction applies.
    pub typed: bool,
}

/// A class of jobs that see the same per-node capacity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClassKey {
    pub part: u32,
    pub filter: u32,
    pub unit: Res,
    pub node_mem: u64,
    pub whole_mem: bool,
    pub exclusive: bool,
    pub per_node: u32,
    pub bundles: bool,
    pub bind: Option<Vec<u64>>,
}

/// Per-class state.
#[derive(Clone, Debug)]
pub struct Class {
    pub part: u32,
    pub filter: u32,
    /// A representative demand (counts are per job).
    pub demand: Demand,
    /// GPU position sets per local rank (`map_gpu`/`mask_gpu`), if bound.
    pub bind: Option<Vec<u64>>,
    /// Cached now-capacity per leaf with the leaf version it was read at.
    pub cache: Vec<(u32, LeafAgg)>,
    /// Capacity if every node were idle: (up nodes only, all nodes), sorted descending.
    pub statics: Option<(Vec<u32>, Vec<u32>)>,
    /// Requests of this class that failed to start now this cycle:
    /// (need, min_nodes, max_nodes, window end, max_leaves).
    pub failures: Vec<(u32, u32, u32, i64, Option<u32>)>,
}

/// A partition during the cycle.
#[derive(Clone, Debug)]
pub struct PartState {
    pub tree: Tree,
    /// Switch ids at each level (root level 0 first).
    pub levels: Vec<Vec<u32>>,
    /// Bumped whenever a node of the leaf changes.
    pub leaf_version: Vec<u32>,
    /// Earliest hold start on any node of the leaf.
    pub leaf_claim_start: Vec<i64>,
    /// Free healthy GPUs on schedulable nodes of the partition.
    pub free_gpus: u64,
}

/// A placement: `(tree position, units)` in selection order.
pub type Selection = Vec<(u32, u32)>;

/// The cycle's state.
pub struct Engine<'a> {
    pub snap: &'a Snapshot,
    pub now: i64,
    pub nodes: Vec<NodeState>,
    pub gpu_trees: Vec<GpuTree>,
    pub parts: Vec<PartState>,
    /// For each node: `(partition, position)` memberships.
    pub member_of: Vec<Vec<(u32, u32)>>,
    pub classes: Vec<Class>,
    class_ids: HashMap<ClassKey, u32>,
    pub filters: Vec<Filter>,
    filter_ids: HashMap<(u32, String, String), u32>,
}

fn node_total(node: &Node, tree: &GpuTree) -> (Res, u64) {
    let mut mask = 0u64;
    for (p, &idx) in tree.index.iter().enumerate() {
        if node.gpus.iter().any(|g| g.index == idx && g.healthy) {
            mask |= 1 << p;
        }
    }
    (
        Res {
            gpus: mask.count_ones(),
            cpu: node.cpu_millis,
            mem: node.memory_mib,
        },
        mask,
    )
}

/// A key describing a node's GPU wiring, so identical nodes share one [`GpuTree`].
fn gpu_signature(node: &Node) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let mut gs: Vec<usize> = (0..node.gpus.len()).collect();
    gs.sort_by_key(|&i| node.gpus[i].index);
    for &i in &gs {
        let g = &node.gpus[i];
        let _ = write!(s, "{}:{:?}:{:?};", g.index, g.numa, g.nvlink_peers);
    }
    for a in &gs {
        for b in &gs {
            let _ = write!(s, "{}", node.link(*a, *b).distance());
        }
    }
    s
}

impl<'a> Engine<'a> {
    /// Builds node states and partition trees from the snapshot (allocations are applied by
    /// the caller with [`Engine::hold`]).
    pub fn new(snap: &'a Snapshot, now: i64) -> Engine<'a> {
        let mut gpu_trees = Vec::new();
        let mut sig_ids: HashMap<String, u32> = HashMap::new();
        let mut nodes = Vec::with_capacity(snap.nodes.len());
        for node in &snap.nodes {
            let sig = gpu_signature(node);
            let gt = *sig_ids.entry(sig).or_insert_with(|| {
                gpu_trees.push(GpuTree::new(node));
                gpu_trees.len() as u32 - 1
            });
            let (total, mask) = node_total(node, &gpu_trees[gt as usize]);
            nodes.push(NodeState {
                total,
                free: total,
                free_mask: mask,
                sched: node.schedulable(),
                gtree: gt,
                releases: Vec::new(),
                claims: Vec::new(),
            });
        }
        let mut member_of = vec![Vec::new(); snap.nodes.len()];
        let parts = snap
            .partitions
            .iter()
            .enumerate()
            .map(|(pi, p)| {
                let tree = Tree::build(&snap.nodes, p);
                for (pos, &n) in tree.nodes.iter().enumerate() {
                    member_of[n as usize].push((pi as u32, pos as u32));
                }
                let mut levels = vec![Vec::new(); tree.depth + 1];
                for (sid, s) in tree.switches.iter().enumerate() {
                    levels[s.level].push(sid as u32);
                }
                let nl = tree.leaves.len();
                PartState {
                    tree,
                    levels,
                    leaf_version: vec![1; nl],
                    leaf_claim_start: vec![NEVER; nl],
                    free_gpus: 0,
                }
            })
            .collect();
        let mut e = Engine {
            snap,
            now,
            nodes,
            gpu_trees,
            parts,
            member_of,
            classes: Vec::new(),
            class_ids: HashMap::new(),
            filters: Vec::new(),
            filter_ids: HashMap::new(),
        };
        for pi in 0..e.parts.len() {
            e.parts[pi].free_gpus = e.parts[pi]
                .tree
                .nodes
                .iter()
                .filter(|&&n| e.nodes[n as usize].sched)
                .map(|&n| u64::from(e.nodes[n as usize].free.gpus))
                .sum();
        }
        e
    }

    /// Marks resources of node `n` busy now (an existing allocation, or a start), returning
    /// what was taken. `gpus` is a position mask; `whole` takes the whole node.
    pub fn hold(&mut self, n: NodeId, gpus: u64, cpu: u64, mem: u64, whole: bool) -> Res {
        let ns = &mut self.nodes[n as usize];
        let before = ns.free;
        if whole {
            ns.free = Res::default();
            ns.free_mask = 0;
        } else {
            ns.free_mask &= !gpus;
            ns.free = Res {
                gpus: ns.free_mask.count_ones(),
                cpu: ns.free.cpu.saturating_sub(cpu),
                mem: ns.free.mem.saturating_sub(mem),
            };
        }
        let taken = before.sub(ns.free);
        let sched = ns.sched;
        self.touch(n, if sched { taken.gpus } else { 0 });
        taken
    }

    /// Records that `res` of node `n` comes back at `t` (from running job `job`); `NEVER`
    /// is kept too, so that preempting the job can bring it forward.
    pub fn release_at(&mut self, n: NodeId, t: i64, res: Res, job: u32) {
        if res != Res::default() {
            self.nodes[n as usize]
                .releases
                .push((t.max(self.now + 1), res, job));
        }
    }

    fn touch(&mut self, n: NodeId, gpus_taken: u32) {
        for &(p, pos) in &self.member_of[n as usize] {
            let ps = &mut self.parts[p as usize];
            let leaf = ps.tree.leaf_of[pos as usize] as usize;
            ps.leaf_version[leaf] = ps.leaf_version[leaf].wrapping_add(1);
            ps.free_gpus = ps.free_gpus.saturating_sub(u64::from(gpus_taken));
        }
    }

    /// Adds a hold on node `n`.
    pub fn claim(&mut self, n: NodeId, c: Claim) {
        self.nodes[n as usize].claims.push(c);
        for &(p, pos) in &self.member_of[n as usize] {
            let ps = &mut self.parts[p as usize];
            let leaf = ps.tree.leaf_of[pos as usize] as usize;
            ps.leaf_claim_start[leaf] = ps.leaf_claim_start[leaf].min(c.start);
        }
    }

    /// The filter id for a partition, GPU type and constraint (interned).
    pub fn filter(
        &mut self,
        part: u32,
        gpu_type: Option<&str>,
        constraint_key: &str,
        node_ok: &dyn Fn(&Node) -> bool,
    ) -> u32 {
        let ty = gpu_type.map(str::to_ascii_lowercase).unwrap_or_default();
        let key = (part, ty.clone(), constraint_key.to_string());
        if let Some(&id) = self.filter_ids.get(&key) {
            return id;
        }
        let tree = &self.parts[part as usize].tree;
        let mut ok = Vec::with_capacity(tree.nodes.len());
        let mut gpu_mask = Vec::with_capacity(tree.nodes.len());
        for &n in &tree.nodes {
            let node = &self.snap.nodes[n as usize];
            let gt = &self.gpu_trees[self.nodes[n as usize].gtree as usize];
            let mut m = 0u64;
            for (p, &idx) in gt.index.iter().enumerate() {
                let matches = ty.is_empty()
                    || node
                        .gpus
                        .iter()
                        .any(|g| g.index == idx && g.model.to_ascii_lowercase().contains(&ty));
                if matches {
                    m |= 1 << p;
                }
            }
            let good = node_ok(node) && (ty.is_empty() || m != 0);
            ok.push(good);
            gpu_mask.push(m);
        }
        self.filters.push(Filter {
            ok,
            gpu_mask,
            typed: !ty.is_empty(),
        });
        let id = self.filters.len() as u32 - 1;
        self.filter_ids.insert(key, id);
        id
    }

    /// The class id for a demand (interned).
    pub fn class(&mut self, part: u32, filter: u32, d: &Demand, bind: Option<Vec<u64>>) -> u32 {
        let key = ClassKey {
            part,
            filter,
            unit: d.unit,
            node_mem: d.node_mem,
            whole_mem: d.whole_mem,
            exclusive: d.exclusive,
            per_node: d.per_node_cap(),
            bundles: matches!(d.mode, Mode::Bundles { .. }),
            bind: bind.clone(),
        };
        if let Some(&id) = self.class_ids.get(&key) {
            return id;
        }
        let nl = self.parts[part as usize].tree.leaves.len();
        self.classes.push(Class {
            part,
            filter,
            demand: d.clone(),
            bind,
            cache: vec![(0, LeafAgg::default()); nl],
            statics: None,
            failures: Vec::new(),
        });
        let id = self.classes.len() as u32 - 1;
        self.class_ids.insert(key, id);
        id
    }

    /// Units of class `c` that fit on tree position `pos` given `avail` (by count) and the
    /// GPUs that may be used (`mask`; all ones for a future time, when GPUs are counted).
    pub fn units_for_count(&self, c: &Class, pos: u32, avail: Res, mask: u64, total: Res) -> u32 {
        let f = &self.filters[c.filter as usize];
        if !f.ok[pos as usize] {
            return 0;
        }
        let mut a = avail;
        if f.typed {
            a.gpus = a.gpus.min((mask & f.gpu_mask[pos as usize]).count_ones());
        }
        let idle = avail == total;
        let mut k = c.demand.units_fitting(a, total, idle);
        if let Some(sets) = &c.bind {
            // map_gpu/mask_gpu: local rank i uses sets[i % len]; ranks may not share GPUs.
            let usable = mask & f.gpu_mask[pos as usize];
            let mut used = 0u64;
            let mut ok = 0;
            for i in 0..k {
                let s = sets[i as usize % sets.len()];
                if s & !usable != 0 || s & used != 0 {
                    break;
                }
                used |= s;
                ok += 1;
            }
            k = ok;
        }
        k
    }

    /// Units of class `c` on position `pos` now, for a job running until `end`.
    pub fn units_now(&self, c: &Class, pos: u32, end: i64) -> (u32, u32) {
        let n = self.parts[c.part as usize].tree.nodes[pos as usize];
        let ns = &self.nodes[n as usize];
        if !ns.sched {
            return (0, 0);
        }
        let avail = if ns.claims.is_empty() {
            ns.free
        } else {
            ns.free.min(ns.window(self.now, end, self.now))
        };
        (
            self.units_for_count(c, pos, avail, ns.free_mask, ns.total),
            slack_of(c, avail),
        )
    }

    fn leaf_agg_now(&self, c: &Class, leaf: u32, end: i64) -> LeafAgg {
        let tree = &self.parts[c.part as usize].tree;
        let mut agg = LeafAgg::default();
        for pos in tree.leaf(leaf).nodes.clone() {
            let (u, slack) = self.units_now(c, pos, end);
            if u > 0 {
                agg.units += u;
                agg.nodes += 1;
                agg.slack += u64::from(slack);
            }
        }
        agg
    }

    /// Leaf aggregates of class `cid` for a job starting now and running until `end`.
    pub fn leaf_aggs_now(&mut self, cid: u32, end: i64, out: &mut Vec<LeafAgg>) {
        let part = self.classes[cid as usize].part as usize;
        let nl = self.parts[part].tree.leaves.len();
        out.clear();
        for l in 0..nl {
            let ps = &self.parts[part];
            let c = &self.classes[cid as usize];
            if ps.leaf_claim_start[l] < end {
                // Holds overlap the job's run: read the leaf exactly, uncached.
                out.push(self.leaf_agg_now(c, l as u32, end));
                continue;
            }
            let (ver, agg) = c.cache[l];
            if ver == ps.leaf_version[l] {
                out.push(agg);
            } else {
                let agg = self.leaf_agg_now(c, l as u32, NEVER.min(end).max(self.now));
                let v = ps.leaf_version[l];
                self.classes[cid as usize].cache[l] = (v, agg);
                out.push(agg);
            }
        }
    }

    /// Capacity of class `cid` with every node idle: units per node, sorted descending, for
    /// (schedulable nodes with healthy GPUs, all nodes with all GPUs).
    pub fn statics(&mut self, cid: u32) -> &(Vec<u32>, Vec<u32>) {
        if self.classes[cid as usize].statics.is_none() {
            let c = &self.classes[cid as usize];
            let tree = &self.parts[c.part as usize].tree;
            let mut up = Vec::new();
            let mut all = Vec::new();
            for (pos, &n) in tree.nodes.iter().enumerate() {
                let ns = &self.nodes[n as usize];
                let gt = &self.gpu_trees[ns.gtree as usize];
                let full_mask = if gt.len() >= 64 {
                    u64::MAX
                } else {
                    (1u64 << gt.len()) - 1
                };
                let node = &self.snap.nodes[n as usize];
                let all_total = Res {
                    gpus: gt.len() as u32,
                    cpu: node.cpu_millis,
                    mem: node.memory_mib,
                };
                let (healthy_total, healthy_mask) = node_total(node, gt);
                all.push(self.units_for_count(c, pos as u32, all_total, full_mask, all_total));
                up.push(if ns.sched {
                    self.units_for_count(c, pos as u32, healthy_total, healthy_mask, healthy_total)
                } else {
                    0
                });
            }
            up.sort_unstable_by(|a, b| b.cmp(a));
            all.sort_unstable_by(|a, b| b.cmp(a));
            self.classes[cid as usize].statics = Some((up, all));
        }
        self.classes[cid as usize]
            .statics
            .as_ref()
            .expect("just set")
    }
}

/// The room a node has left for judging best fit: free GPUs for GPU classes, free CPU cores
/// otherwise.
pub fn slack_of(c: &Class, avail: Res) -> u32 {
    if c.demand.unit.gpus > 0 {
        avail.gpus
    } else {
        u32::try_from(avail.cpu / 1000).unwrap_or(u32::MAX)
    }
}

/// Whether sorted-descending per-node capacities can hold `d` (ignoring topology).
pub fn caps_hold(caps: &[u32], d: &Demand) -> bool {
    let nodes = caps.iter().take_while(|&&u| u > 0).count() as u32;
    if nodes < d.min_nodes {
        return false;
    }
    match d.mode {
        Mode::Bundles { .. } => true,
        Mode::Units { total, .. } => {
            let best: u64 = caps
                .iter()
                .take(d.max_nodes as usize)
                .map(|&u| u64::from(u))
                .sum();
            best >= u64::from(total)
        }
    }
}

/// Placement inputs for [`select`].
pub struct SelectInput<'t> {
    pub tree: &'t Tree,
    pub levels: &'t [Vec<u32>],
    pub leaf_aggs: &'t [LeafAgg],
    pub demand: &'t Demand,
    pub max_leaves: Option<u32>,
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
    let nl = inp.leaf_aggs.len();
    // Prefix sums over leaves give any switch's aggregate in O(1).
    let mut pu = vec![0u64; nl + 1];
    let mut pn = vec![0u64; nl + 1];
    let mut psl = vec![0u64; nl + 1];
    for (i, a) in inp.leaf_aggs.iter().enumerate() {
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
    if agg(0).0 < u64::from(need) || agg(0).1 < u64::from(d.min_nodes) {
        return None;
    }
    let min_leaves = |s: u32| -> u32 {
        let r = inp.tree.switches[s as usize].leaves.clone();
        let mut us: Vec<u32> = inp.leaf_aggs[r.start as usize..r.end as usize]
            .iter()
            .map(|a| a.units)
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
    for level in (0..inp.levels.len()).rev() {
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
                // Spread: move single units onto more nodes of the switch.
                let mut spare: Vec<(bool, u32, u32)> = (sw.nodes.clone())
                    .filter(|p| !out.iter().any(|&(q, _)| q == *p))
                    .filter_map(|p| {
                        let (u, slack) = node(p);
                        (u > 0).then_some((false, slack, p))
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
    let mut left = amount;
    let mut used = vec![false; sw.children.len()];
    while left > 0 {
        let mut best: Option<(u64, usize)> = None;
        let mut largest: Option<(u64, usize)> = None;
        for (i, &c) in sw.children.iter().enumerate() {
            if used[i] {
                continue;
            }
            let (u, _) = agg(c);
            if u == 0 {
                continue;
            }
            if u >= left && best.is_none_or(|(bu, _)| u < bu) {
                best = Some((u, i));
            }
            if largest.is_none_or(|(lu, _)| u > lu) {
                largest = Some((u, i));
            }
        }
        if let Some((_, i)) = best {
            take_rec(inp, sw.children[i], left, node, agg, out);
            return;
        }
        let Some((u, i)) = largest else { return };
        used[i] = true;
        let before: u64 = out.iter().map(|&(_, x)| u64::from(x)).sum();
        take_rec(inp, sw.children[i], u, node, agg, out);
        let after: u64 = out.iter().map(|&(_, x)| u64::from(x)).sum();
        left = left.saturating_sub(after - before);
        if after == before {
            return;
        }
    }
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

/// Helper for tests and callers that need a partition's node list by name.
pub fn partition_nodes<'s>(snap: &'s Snapshot, part: &Partition) -> Vec<&'s str> {
    let t = Tree::build(&snap.nodes, part);
    t.nodes
        .iter()
        .map(|&n| snap.nodes[n as usize].name.as_str())
        .collect()
}
