//! The mutable state of one cycle: what is free on every node now and later, per-leaf
//! aggregates, and the placement and reservation searches that read them.
//!
//! Hot paths use indices only: nodes by [`NodeId`], partition members by position in their
//! [`Tree`], GPUs as 64-bit position masks. Per-leaf capacity for a class of jobs (same
//! partition, filter and per-node needs) is cached with a version stamp per leaf, so a queue
//! of thousands of similar jobs costs one pass over the leaves per job, and a leaf is re-read
//! only after an allocation changed it.

use std::collections::HashMap;
use std::sync::Arc;

use smallvec::SmallVec;

use super::extended::ExtUse;
use super::gpus::GpuTree;
use super::model::{Partition, Snapshot};
use super::node::{Node, NodeId};
use super::node_state::{NodeState, NodeUsers};
use super::prepared::{Members, Prepared};
use super::select::Placement;
use super::shape::{Demand, Mode, Res};
use super::timeline::SweepBufs;
use super::tree::Tree;
use super::util::FnvBuild;

/// "Never" as a time.
pub const NEVER: i64 = i64::MAX;

/// A hold on a node's resources for a reserved job, from `start` until `end`.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    /// When the reserved job starts.
    pub start: i64,
    /// When its time limit ends (`NEVER` if unlimited).
    pub end: i64,
    /// What it takes on the node.
    pub res: Res,
}

/// The user rule a class applies now (`--exclusive=user`): the job's user id and whether the
/// job itself is `--exclusive=user`.
pub type Gate = Option<(u32, bool)>;

/// Units of one class on one leaf.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeafAgg {
    /// Units of the class that fit on the leaf's nodes.
    pub units: u32,
    /// Nodes that can take at least one unit.
    pub nodes: u32,
    /// Free room on the nodes that can take units (GPUs, or CPU cores for CPU-only classes):
    /// what a placement leaves over is judged by it.
    pub slack: u64,
}

/// Per-leaf aggregates: a base array with a few leaves replaced (`patch`, sorted by leaf).
#[derive(Clone, Copy, Debug)]
pub struct LeafView<'a> {
    /// Aggregates by leaf.
    pub base: &'a [LeafAgg],
    /// Replacements `(leaf, aggregate)`, sorted by leaf.
    pub patch: &'a [(u32, LeafAgg)],
}

impl LeafView<'_> {
    /// Number of leaves.
    pub fn len(&self) -> usize {
        self.base.len()
    }

    /// Whether there are no leaves.
    pub fn is_empty(&self) -> bool {
        self.base.is_empty()
    }

    /// Every leaf's aggregate in leaf order: the base with the patch merged in one pass
    /// (whole-view scans run for every gang a cycle places; a binary search of the patch per
    /// leaf cost more than the scan).
    pub fn iter(&self) -> LeafIter<'_> {
        LeafIter {
            base: self.base,
            patch: self.patch,
            at: 0,
            next_patched: self.patch.first().map_or(usize::MAX, |p| p.0 as usize),
        }
    }

    /// The aggregate of leaf `l`.
    pub fn get(&self, l: usize) -> LeafAgg {
        if self.patch.is_empty() {
            return self.base[l];
        }
        match self.patch.binary_search_by_key(&(l as u32), |p| p.0) {
            Ok(i) => self.patch[i].1,
            Err(_) => self.base[l],
        }
    }
}

/// [`LeafView::iter`].
pub struct LeafIter<'a> {
    base: &'a [LeafAgg],
    patch: &'a [(u32, LeafAgg)],
    at: usize,
    /// The leaf of `patch[0]` (`usize::MAX`: none), so an unpatched leaf costs one compare.
    next_patched: usize,
}

impl Iterator for LeafIter<'_> {
    type Item = LeafAgg;

    fn next(&mut self) -> Option<LeafAgg> {
        let l = self.at;
        let b = *self.base.get(l)?;
        self.at += 1;
        if l != self.next_patched {
            return Some(b);
        }
        let a = self.patch[0].1;
        self.patch = &self.patch[1..];
        self.next_patched = self.patch.first().map_or(usize::MAX, |p| p.0 as usize);
        Some(a)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.base.len() - self.at;
        (n, Some(n))
    }
}

impl ExactSizeIterator for LeafIter<'_> {}

/// A cached leaf aggregate: valid at leaf version `ver` for window ends in `(lo, hi]`
/// (between two consecutive hold starts of the leaf).
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheEntry {
    /// Leaf version read (0: empty entry).
    pub ver: u32,
    /// Window ends above this …
    pub lo: i64,
    /// … up to this one share the entry.
    pub hi: i64,
    /// The aggregate.
    pub agg: LeafAgg,
}

/// Entries kept per class and leaf (jobs of one class differ in time limit).
pub const CACHE_WAYS: usize = 3;

/// Which nodes a job may use at all, and which of their GPUs.
#[derive(Clone, Debug)]
pub struct Filter {
    /// Every node of the partition, every GPU (no type, no constraint): `ok` and `gpu_mask`
    /// are not consulted.
    pub all: bool,
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
    /// Partition.
    pub part: u32,
    /// Node filter.
    pub filter: u32,
    /// One unit.
    pub unit: Res,
    /// Per-node needs beyond the units.
    pub node: Res,
    /// `--mem=0`.
    pub whole_mem: bool,
    /// Whole nodes.
    pub exclusive: bool,
    /// Most units per node.
    pub per_node: u32,
    /// Per-node bundles rather than packed units.
    pub bundles: bool,
    /// `map_gpu`/`mask_gpu` sets.
    pub bind: Option<Vec<u64>>,
    /// The user rule applied to placements now.
    pub gate: Gate,
}

/// A class's capacities with every node idle, by class and what its filter means (filter ids
/// are per cycle): they depend on the nodes alone, so an
/// [`Occupancy`](super::occupancy::Occupancy) keeps them between cycles.
pub type StaticsCache = HashMap<(ClassKey, String, String), Arc<(Caps, Caps)>, FnvBuild>;

/// A class's base (per-leaf and per-node units now) as a cycle left it, with how much of the
/// occupancy's leaf log it has seen: leaves logged since are recomputed when a later cycle
/// uses the class again.
#[derive(Clone, Debug)]
pub struct CachedBase {
    base: Vec<LeafAgg>,
    node_units: Vec<u32>,
    seen: usize,
}

/// Class bases kept between cycles, by the same key as [`StaticsCache`].
pub type BaseCache = HashMap<(ClassKey, String, String), CachedBase, FnvBuild>;

/// Log entries after which the leaf log and the class bases are dropped (and rebuilt by
/// later cycles), so a long replay does not grow the log without bound.
const LEAF_LOG_MAX: usize = 1 << 20;

/// What an [`Occupancy`](super::occupancy::Occupancy) keeps between cycles and lends each
/// cycle's engine ([`Engine::from_base`], [`Engine::into_carried`]).
#[derive(Clone, Debug, Default)]
pub struct Carried {
    /// Every node with the running jobs laid on it.
    pub nodes: Vec<NodeState>,
    /// Job classes' capacities with every node idle.
    pub statics: StaticsCache,
    /// Each partition's future releases, sorted (empty: derived in each cycle).
    pub events: Vec<BaseEvents>,
    /// Job classes' per-leaf units as cycles left them.
    pub bases: BaseCache,
    /// Per partition, leaves whose nodes changed (cached bases' `seen` points into it).
    pub leaf_log: Vec<Vec<u32>>,
}

/// Per-class state.
#[derive(Clone, Debug)]
pub struct Class {
    /// Its key (for the statics cache).
    pub key: ClassKey,
    /// Partition.
    pub part: u32,
    /// Node filter.
    pub filter: u32,
    /// A representative demand (counts are per job).
    pub demand: Demand,
    /// GPU position sets per local rank (`map_gpu`/`mask_gpu`), if bound.
    pub bind: Option<Vec<u64>>,
    /// The user rule applied to placements now (not to future ones nor to capacities).
    pub gate: Gate,
    /// Capacity per leaf now, for leaves without holds (kept current from the partition's
    /// change log).
    pub base: Vec<LeafAgg>,
    /// Units per node (by tree position) behind `base`: current for the nodes of leaves
    /// without holds.
    pub node_units: Vec<u32>,
    /// How much of the change log `base` has seen; `usize::MAX`: not built yet.
    pub base_seen: usize,
    /// Cached capacity of leaves with holds, by window end.
    pub cache: Vec<[CacheEntry; CACHE_WAYS]>,
    /// Capacity if every node were idle: (up nodes only, all nodes).
    pub statics: Option<Arc<(Caps, Caps)>>,
    /// Requests of this class that failed to start now this cycle:
    /// (need, min_nodes, max_nodes, window end, max_leaves).
    pub failures: Vec<(u32, u32, u32, i64, Option<u32>)>,
    /// Room seen this cycle for runs ending at or after a time: `(end, units, nodes)`. Room
    /// only shrinks during a cycle, so a later job of the class needing more units or nodes
    /// with an end at least as late cannot start now.
    pub room: Vec<(i64, u64, u64)>,
}

/// A partition during the cycle.
#[derive(Clone, Debug)]
pub struct PartState<'a> {
    /// The switch tree.
    pub tree: &'a Tree,
    /// Tree positions in node-list order (see [`Prepared::node_order`]).
    pub node_order: &'a [u32],
    /// Switch ids at each level (root level 0 first).
    pub levels: &'a [Vec<u32>],
    /// Bumped whenever a node of the leaf changes.
    pub leaf_version: Vec<u32>,
    /// Hold starts on the leaf's nodes, sorted.
    pub leaf_claims: Vec<Vec<i64>>,
    /// Leaves with holds, sorted.
    pub claimed_leaves: Vec<u32>,
    /// Leaves in the order they changed or gained a hold (an append-only log classes and
    /// the lookahead's kept aggregates catch up with).
    pub changed: Vec<u32>,
    /// `(start, position)` of every hold that begins after now, sorted.
    pub claim_starts: Vec<(i64, u32)>,
    /// Future changes of free room on the partition's nodes, sorted by time once built
    /// (lazily, by the first reservation search); later changes wait in `new_events`.
    pub events: Option<Vec<Event>>,
    /// Changes recorded since `events` was last merged.
    pub new_events: Vec<Event>,
    /// Free healthy GPUs on schedulable nodes of the partition.
    pub free_gpus: u64,
    /// Bumped with every `leaf_version` bump: equal values mean no leaf of the partition
    /// changed in between (what the cycle's lookahead cache is keyed on).
    pub version: u64,
}

/// A signed change of a node's free room at a time (for the reservation sweep).
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// When.
    pub time: i64,
    /// Tree position of the node.
    pub pos: u32,
    /// Change of (GPUs, CPU millicores, memory MiB).
    pub d: [i64; 3],
}

impl Event {
    pub(crate) fn new(time: i64, pos: u32, add: Res, sub: Res) -> Event {
        Event {
            time,
            pos,
            d: [
                i64::from(add.gpus) - i64::from(sub.gpus),
                add.cpu as i64 - sub.cpu as i64,
                add.mem as i64 - sub.mem as i64,
            ],
        }
    }

    /// Whether the event gives room back (so a waiting job may fit afterwards).
    pub fn adds(&self) -> bool {
        self.d.iter().any(|&x| x > 0)
    }
}

/// A partition's future releases of running jobs, sorted, kept by an
/// [`Occupancy`](super::occupancy::Occupancy) between cycles so a cycle's reservation search
/// does not sort every running job's release again. Changes since the last cycle wait in
/// `adds`/`removes` and are merged in (linear time) when a cycle first needs the list.
#[derive(Clone, Debug, Default)]
pub struct BaseEvents {
    sorted: Vec<Event>,
    adds: Vec<Event>,
    removes: Vec<Event>,
}

fn event_key(e: &Event) -> (i64, u32, [i64; 3]) {
    (e.time, e.pos, e.d)
}

impl BaseEvents {
    /// Records a release.
    pub(crate) fn add(&mut self, e: Event) {
        self.adds.push(e);
    }

    /// Records that a release recorded before is gone.
    pub(crate) fn remove(&mut self, e: Event) {
        self.removes.push(e);
    }

    /// Merges the pending changes; the sorted list.
    fn settle(&mut self) -> &[Event] {
        if self.adds.is_empty() && self.removes.is_empty() {
            return &self.sorted;
        }
        self.adds.sort_unstable_by_key(event_key);
        self.removes.sort_unstable_by_key(event_key);
        // A release added and removed since the last merge cancels out.
        let (adds, removes) = (
            std::mem::take(&mut self.adds),
            std::mem::take(&mut self.removes),
        );
        let (mut a, mut r) = (Vec::with_capacity(adds.len()), Vec::new());
        let (mut i, mut j) = (0, 0);
        while i < adds.len() || j < removes.len() {
            match (adds.get(i), removes.get(j)) {
                (Some(x), Some(y)) if event_key(x) == event_key(y) => {
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if event_key(x) < event_key(y) => {
                    a.push(*x);
                    i += 1;
                }
                (Some(x), None) => {
                    a.push(*x);
                    i += 1;
                }
                (_, Some(y)) => {
                    r.push(*y);
                    j += 1;
                }
                (None, None) => break,
            }
        }
        let old = std::mem::take(&mut self.sorted);
        let mut out = Vec::with_capacity(old.len() + a.len());
        let (mut i, mut j, mut k) = (0, 0, 0);
        while i < old.len() {
            let o = old[i];
            while j < a.len() && event_key(&a[j]) < event_key(&o) {
                out.push(a[j]);
                j += 1;
            }
            while k < r.len() && event_key(&r[k]) < event_key(&o) {
                k += 1;
            }
            if k < r.len() && event_key(&r[k]) == event_key(&o) {
                k += 1;
            } else {
                out.push(o);
            }
            i += 1;
        }
        out.extend_from_slice(&a[j..]);
        self.sorted = out;
        &self.sorted
    }
}

/// A placement: `(tree position, units)` in selection order.
pub type Selection = Vec<(u32, u32)>;

/// The cycle's state.
pub struct Engine<'a> {
    /// The input.
    pub snap: &'a Snapshot,
    /// The cycle's time.
    pub now: i64,
    /// Every node's state, by [`NodeId`].
    pub nodes: Vec<NodeState>,
    /// GPU hierarchies (see [`NodeState::gtree`]).
    pub gpu_trees: &'a [GpuTree],
    /// Every partition's state.
    pub parts: Vec<PartState<'a>>,
    /// For each node: `(partition, position)` memberships.
    pub member_of: &'a Members,
    /// How gangs are placed (Muster's, or a yardstick's).
    pub placement: Placement,
    /// The filter with no GPU type and no constraint, per partition.
    plain_filter: Vec<Option<u32>>,
    /// Interned job classes.
    pub classes: Vec<Class>,
    class_ids: HashMap<ClassKey, u32, FnvBuild>,
    /// Interned node filters.
    pub filters: Vec<Filter>,
    /// `(partition, GPU type, constraint key)` of each filter; few, so searched linearly
    /// without allocating.
    filter_keys: Vec<(u32, String, String)>,
    /// Each node's state before this cycle first changed it, so the occupancy's base is
    /// restored in time proportional to what the cycle touched (see
    /// [`Engine::into_carried`]).
    undo: Vec<(NodeId, NodeState)>,
    /// Which nodes `undo` holds.
    saved: Vec<bool>,
    /// Idle capacities of classes, kept across cycles by an occupancy.
    statics_cache: StaticsCache,
    /// Each partition's releases before the cycle (empty for an uncached occupancy).
    base_events: Vec<BaseEvents>,
    /// Changes of future free room made by this cycle, by node (when tracking), for
    /// partitions whose events are built from `base_events` later.
    event_log: Vec<(NodeId, Event)>,
    /// Class bases from earlier cycles.
    base_cache: BaseCache,
    /// Per partition, the leaves whose nodes changed since cached bases were taken (the
    /// occupancy's log; `CachedBase::seen` indexes it).
    leaf_log: Vec<Vec<u32>>,
    /// Who holds each node (by [`NodeId`]), when the cycle applies `--exclusive=user`; kept
    /// current with the cycle's starts (a class's [`Gate`] reads it).
    pub users: Option<Vec<NodeUsers>>,
    /// Extended resources held on each node by the jobs' node pods, when some partition's
    /// pods request one; kept current with the cycle's starts, stops and evictions.
    pub ext: Option<ExtUse>,
    /// Buffers of the reservation sweep, kept between its calls.
    pub(super) sweep_bufs: SweepBufs,
}

impl<'a> Engine<'a> {
    /// An engine over what an [`Occupancy`](super::occupancy::Occupancy) lends a cycle:
    /// node states with the running jobs laid on them and the caches kept between cycles.
    /// It records what it changes so [`Engine::into_carried`] gives everything back as it
    /// came.
    pub fn from_base(
        snap: &'a Snapshot,
        prep: &'a Prepared,
        now: i64,
        carried: Carried,
        part_free: &[u64],
    ) -> Engine<'a> {
        let parts = prep
            .trees
            .iter()
            .enumerate()
            .map(|(pi, (tree, levels))| {
                let nl = tree.leaves.len();
                PartState {
                    tree,
                    node_order: prep.node_order.get(pi).map_or(&[], Vec::as_slice),
                    levels,
                    leaf_version: vec![1; nl],
                    leaf_claims: vec![Vec::new(); nl],
                    claimed_leaves: Vec::new(),
                    changed: Vec::new(),
                    claim_starts: Vec::new(),
                    events: None,
                    new_events: Vec::new(),
                    free_gpus: part_free.get(pi).copied().unwrap_or(0),
                    version: 0,
                }
            })
            .collect();
        let Carried {
            nodes,
            statics,
            events,
            bases,
            leaf_log,
        } = carried;
        Engine {
            plain_filter: vec![None; snap.partitions.len()],
            snap,
            now,
            saved: vec![false; nodes.len()],
            undo: Vec::new(),
            statics_cache: statics,
            base_events: events,
            event_log: Vec::new(),
            base_cache: bases,
            leaf_log,
            nodes,
            gpu_trees: &prep.gpu_trees,
            parts,
            member_of: &prep.member_of,
            placement: Placement::Topology,
            classes: Vec::new(),
            class_ids: HashMap::with_hasher(FnvBuild),
            filters: Vec::new(),
            filter_keys: Vec::new(),
            users: None,
            ext: None,
            sweep_bufs: SweepBufs::default(),
        }
    }

    /// Keeps node `n`'s state as it was before this cycle first changes it.
    fn save(&mut self, n: NodeId) {
        if let Some(s) = self.saved.get_mut(n as usize)
            && !*s
        {
            *s = true;
            self.undo.push((n, self.nodes[n as usize].clone()));
        }
    }

    /// What [`Engine::from_base`] received, every change of the cycle undone; with
    /// `keep_bases`, the cycle's class bases join the cache and the leaves the cycle changed
    /// or held are logged (their bases are not those of the running jobs alone).
    pub fn into_carried(mut self, keep_bases: bool) -> Carried {
        for (n, st) in self.undo.drain(..) {
            self.nodes[n as usize] = st;
        }
        let mut bases = std::mem::take(&mut self.base_cache);
        let mut log = std::mem::take(&mut self.leaf_log);
        if keep_bases {
            // Bases as this cycle left them have seen the log up to its present end.
            let seen: Vec<usize> = log.iter().map(Vec::len).collect();
            for c in std::mem::take(&mut self.classes) {
                if c.base_seen == usize::MAX {
                    continue;
                }
                let k = self.cache_key(&c.key);
                let seen = seen.get(c.part as usize).copied().unwrap_or(0);
                bases.insert(
                    k,
                    CachedBase {
                        base: c.base,
                        node_units: c.node_units,
                        seen,
                    },
                );
            }
            for (l, ps) in log.iter_mut().zip(&self.parts) {
                let mut d: Vec<u32> = ps
                    .changed
                    .iter()
                    .chain(&ps.claimed_leaves)
                    .copied()
                    .collect();
                d.sort_unstable();
                d.dedup();
                l.extend(d);
            }
            if log.iter().map(Vec::len).sum::<usize>() > LEAF_LOG_MAX {
                log.iter_mut().for_each(Vec::clear);
                bases.clear();
            }
        }
        Carried {
            nodes: self.nodes,
            statics: self.statics_cache,
            events: self.base_events,
            bases,
            leaf_log: log,
        }
    }

    /// Marks resources of node `n` busy now (an existing allocation, or a start), returning
    /// what was taken. `gpus` is a position mask; `whole` takes the whole node.
    pub fn hold(&mut self, n: NodeId, gpus: u64, cpu: u64, mem: u64, whole: bool) -> Res {
        self.save(n);
        let ns = &mut self.nodes[n as usize];
        let (taken, _) = ns.take(gpus, cpu, mem, whole);
        let sched = ns.sched;
        if !ns.claims.is_empty() {
            ns.rebuild_profile(self.now);
        }
        self.touch(n, if sched { taken.gpus } else { 0 });
        taken
    }

    /// Records that `res` of node `n` comes back at `t` (from running job `job`); `NEVER`
    /// is kept too, so that preempting the job can bring it forward.
    pub fn release_at(&mut self, n: NodeId, t: i64, res: Res, job: u32) {
        if res == Res::default() {
            return;
        }
        let t = t.max(self.now + 1);
        self.save(n);
        let ns = &mut self.nodes[n as usize];
        ns.releases.push((t, res, job));
        if !ns.claims.is_empty() {
            ns.rebuild_profile(self.now);
        }
        if t != NEVER {
            self.push_event(n, Event::new(t, 0, res, Res::default()));
        }
    }

    /// Brings the release of running job `job` on node `n` forward to `t` (preemption).
    pub fn move_release(&mut self, n: NodeId, job: u32, t: i64) {
        let t = t.max(self.now + 1);
        if !self.nodes[n as usize]
            .releases
            .iter()
            .any(|r| r.2 == job && r.0 > t)
        {
            return;
        }
        self.save(n);
        let mut moved = Vec::new();
        for r in &mut self.nodes[n as usize].releases {
            if r.2 == job && r.0 > t {
                moved.push((r.0, r.1));
                r.0 = t;
            }
        }
        if moved.is_empty() {
            return;
        }
        let ns = &mut self.nodes[n as usize];
        if !ns.claims.is_empty() {
            ns.rebuild_profile(self.now);
        }
        for (old, res) in moved {
            // Cancel the old event (if it was a real time) and add the new one.
            if old != NEVER {
                self.push_event(n, Event::new(old, 0, Res::default(), res));
            }
            self.push_event(n, Event::new(t, 0, res, Res::default()));
        }
    }

    /// Sets the release of running job `job` on node `n` to `t` whether earlier or later (a
    /// job this cycle stops: it gives its resources back when its grace time ends). Only
    /// before the partitions' future events are built.
    pub fn set_release(&mut self, n: NodeId, job: u32, t: i64) {
        let t = t.max(self.now + 1);
        self.save(n);
        let mut changed: SmallVec<[(i64, Res); 2]> = SmallVec::new();
        for r in &mut self.nodes[n as usize].releases {
            if r.2 == job && r.0 != t {
                changed.push((r.0, r.1));
                r.0 = t;
            }
        }
        let ns = &mut self.nodes[n as usize];
        if !ns.claims.is_empty() {
            ns.rebuild_profile(self.now);
        }
        for (old, res) in changed {
            if old != NEVER {
                self.push_event(n, Event::new(old, 0, Res::default(), res));
            }
            self.push_event(n, Event::new(t, 0, res, Res::default()));
        }
    }

    fn push_event(&mut self, n: NodeId, e: Event) {
        self.event_log.push((n, e));
        for &(p, pos) in self.member_of.of(n) {
            let ps = &mut self.parts[p as usize];
            if ps.events.is_some() {
                ps.new_events.push(Event { pos, ..e });
            }
        }
    }

    /// Brings the partition's future events up to date: `events` and `new_events` are then
    /// both sorted, and together hold every change.
    pub fn events(&mut self, part: u32) {
        let now = self.now;
        if self.parts[part as usize].events.is_none()
            && let Some(base) = self.base_events.get_mut(part as usize)
        {
            let sorted = base.settle();
            // Releases at or before now are read as now + 1 (see `release_at`); a list with
            // any is built afresh below.
            if sorted.first().is_none_or(|e| e.time > now) {
                let events = sorted.to_vec();
                let mut recent = Vec::new();
                for &(n, e) in &self.event_log {
                    for &(p, pos) in self.member_of.of(n) {
                        if p == part {
                            recent.push(Event { pos, ..e });
                        }
                    }
                }
                let ps = &mut self.parts[part as usize];
                ps.events = Some(events);
                ps.new_events = recent;
            }
        }
        if self.parts[part as usize].events.is_none() {
            let ps = &self.parts[part as usize];
            let mut ev = Vec::new();
            for (pos, &n) in ps.tree.nodes.iter().enumerate() {
                let ns = &self.nodes[n as usize];
                for &(t, r, _) in ns.releases.iter().filter(|r| r.0 != NEVER) {
                    // A base state's releases are not clamped to the cycle's time.
                    ev.push(Event::new(t.max(now + 1), pos as u32, r, Res::default()));
                }
                for c in &ns.claims {
                    if c.start > now {
                        ev.push(Event::new(c.start, pos as u32, Res::default(), c.res));
                    }
                    if c.end > now && c.end != NEVER {
                        ev.push(Event::new(c.end, pos as u32, c.res, Res::default()));
                    }
                }
            }
            ev.sort_unstable_by_key(|e| (e.time, e.pos));
            let ps = &mut self.parts[part as usize];
            ps.events = Some(ev);
            ps.new_events.clear();
        }
        let ps = &mut self.parts[part as usize];
        let main = ps.events.as_ref().map_or(0, Vec::len);
        ps.new_events.sort_unstable_by_key(|e| (e.time, e.pos));
        if ps.new_events.len() * 8 > main {
            // Fold the recent changes into the main list once they are many.
            let add = std::mem::take(&mut ps.new_events);
            let old = ps.events.take().unwrap_or_default();
            let mut merged = Vec::with_capacity(old.len() + add.len());
            let (mut i, mut j) = (0, 0);
            while i < old.len() || j < add.len() {
                if j >= add.len()
                    || (i < old.len() && (old[i].time, old[i].pos) <= (add[j].time, add[j].pos))
                {
                    merged.push(old[i]);
                    i += 1;
                } else {
                    merged.push(add[j]);
                    j += 1;
                }
            }
            ps.events = Some(merged);
        }
    }

    fn touch(&mut self, n: NodeId, gpus_taken: u32) {
        for &(p, pos) in self.member_of.of(n) {
            let ps = &mut self.parts[p as usize];
            let leaf = ps.tree.leaf_of[pos as usize] as usize;
            ps.leaf_version[leaf] = ps.leaf_version[leaf].wrapping_add(1);
            ps.version += 1;
            ps.changed.push(leaf as u32);
            ps.free_gpus = ps.free_gpus.saturating_sub(u64::from(gpus_taken));
        }
    }

    /// Adds a hold on node `n`.
    pub fn claim(&mut self, n: NodeId, c: Claim) {
        self.save(n);
        let now = self.now;
        if c.start > now {
            self.event_log
                .push((n, Event::new(c.start, 0, Res::default(), c.res)));
        }
        if c.end > now && c.end != NEVER {
            self.event_log
                .push((n, Event::new(c.end, 0, c.res, Res::default())));
        }
        let ns = &mut self.nodes[n as usize];
        ns.claims.push(c);
        ns.rebuild_profile(now);
        for &(p, pos) in self.member_of.of(n) {
            let ps = &mut self.parts[p as usize];
            let leaf = ps.tree.leaf_of[pos as usize] as usize;
            let starts = &mut ps.leaf_claims[leaf];
            let at = starts.partition_point(|&t| t <= c.start);
            starts.insert(at, c.start);
            ps.leaf_version[leaf] = ps.leaf_version[leaf].wrapping_add(1);
            ps.version += 1;
            // Logged like a start: kept per-leaf aggregates (the lookahead's) read it again.
            ps.changed.push(leaf as u32);
            if let Err(k) = ps.claimed_leaves.binary_search(&(leaf as u32)) {
                ps.claimed_leaves.insert(k, leaf as u32);
            }
            if c.start > now {
                let k = ps.claim_starts.partition_point(|&x| x <= (c.start, pos));
                ps.claim_starts.insert(k, (c.start, pos));
            }
            if ps.events.is_some() {
                if c.start > now {
                    ps.new_events
                        .push(Event::new(c.start, pos, Res::default(), c.res));
                }
                if c.end != NEVER {
                    ps.new_events
                        .push(Event::new(c.end, pos, c.res, Res::default()));
                }
            }
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
        let ty_in = gpu_type.unwrap_or("");
        let plain = ty_in.is_empty() && constraint_key.is_empty();
        if plain && let Some(id) = self.plain_filter[part as usize] {
            return id;
        }
        if let Some(id) = self.filter_keys.iter().position(|(p, t, c)| {
            *p == part && t.eq_ignore_ascii_case(ty_in) && c == constraint_key
        }) {
            return id as u32;
        }
        let ty = ty_in.to_ascii_lowercase();
        let tree = self.parts[part as usize].tree;
        if plain {
            self.filters.push(Filter {
                all: true,
                ok: vec![true; tree.nodes.len()],
                gpu_mask: Vec::new(),
                typed: false,
            });
            self.filter_keys.push((part, String::new(), String::new()));
            let id = self.filters.len() as u32 - 1;
            self.plain_filter[part as usize] = Some(id);
            return id;
        }
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
            all: false,
            ok,
            gpu_mask,
            typed: !ty.is_empty(),
        });
        self.filter_keys
            .push((part, ty, constraint_key.to_string()));
        let id = self.filters.len() as u32 - 1;
        if plain {
            self.plain_filter[part as usize] = Some(id);
        }
        id
    }

    /// The class id for a demand (interned), with the user rule `gate` for placements now.
    pub fn class(
        &mut self,
        part: u32,
        filter: u32,
        d: &Demand,
        bind: Option<Vec<u64>>,
        gate: Gate,
    ) -> u32 {
        let key = ClassKey {
            part,
            filter,
            unit: d.unit,
            node: d.node,
            whole_mem: d.whole_mem,
            exclusive: d.exclusive,
            per_node: d.per_node_cap(),
            bundles: matches!(d.mode, Mode::Bundles { .. }),
            bind: bind.clone(),
            gate,
        };
        if let Some(&id) = self.class_ids.get(&key) {
            return id;
        }
        let cached = if self.base_cache.is_empty() {
            None
        } else {
            let k = self.cache_key(&key);
            self.base_cache.remove(&k)
        };
        let nl = self.parts[part as usize].tree.leaves.len();
        self.classes.push(Class {
            key: key.clone(),
            part,
            filter,
            demand: d.clone(),
            bind,
            gate,
            base: vec![LeafAgg::default(); nl],
            node_units: vec![0; self.parts[part as usize].tree.nodes.len()],
            base_seen: usize::MAX,
            cache: vec![[CacheEntry::default(); CACHE_WAYS]; nl],
            statics: None,
            failures: Vec::new(),
            room: Vec::new(),
        });
        let id = self.classes.len() as u32 - 1;
        self.class_ids.insert(key, id);
        if let Some(cb) = cached {
            // Leaves logged since the base was taken, and those this cycle changed, are read
            // again; the rest are as the base says (as a fresh class would compute them).
            let mut dirty: Vec<u32> = self
                .leaf_log
                .get(part as usize)
                .map(|l| l[cb.seen.min(l.len())..].to_vec())
                .unwrap_or_default();
            let logged = self.parts[part as usize].changed.len();
            dirty.extend_from_slice(&self.parts[part as usize].changed[..logged]);
            dirty.sort_unstable();
            dirty.dedup();
            let c = &mut self.classes[id as usize];
            c.base = cb.base;
            c.node_units = cb.node_units;
            for l in dirty {
                self.base_leaf(id, l);
            }
            self.classes[id as usize].base_seen = logged;
        }
        id
    }

    /// The key of a class's idle capacities and cached base: its key with the filter spelled
    /// out (filter ids are per cycle).
    fn cache_key(&self, key: &ClassKey) -> (ClassKey, String, String) {
        let (_, ty, ck) = &self.filter_keys[key.filter as usize];
        (
            ClassKey {
                filter: u32::MAX,
                ..key.clone()
            },
            ty.clone(),
            ck.clone(),
        )
    }

    /// Units of class `c` that fit on tree position `pos` given `avail` (by count) and the
    /// GPUs that may be used (`mask`; all ones for a future time, when GPUs are counted).
    pub fn units_for_count(&self, c: &Class, pos: u32, avail: Res, mask: u64, total: Res) -> u32 {
        let f = &self.filters[c.filter as usize];
        if !f.all && !f.ok[pos as usize] {
            return 0;
        }
        let mut a = avail;
        if f.typed {
            a.gpus = a.gpus.min((mask & f.gpu_mask[pos as usize]).count_ones());
        }
        // Only an exclusive job asks whether the node is idle.
        let idle = !c.demand.exclusive || avail == total;
        let mut k = c.demand.units_fitting(a, total, idle);
        if let Some(sets) = &c.bind {
            // map_gpu/mask_gpu: local task i uses sets[i % len]; tasks may not share GPUs.
            let usable = if f.all {
                mask
            } else {
                mask & f.gpu_mask[pos as usize]
            };
            let tasks = c.demand.tasks_on_node(k.max(1)).max(k);
            let mut used = 0u64;
            let mut ok = 0;
            for i in 0..tasks {
                let s = sets[i as usize % sets.len()];
                if s & !usable != 0 || s & used != 0 {
                    break;
                }
                used |= s;
                ok += 1;
            }
            k = match c.demand.mode {
                Mode::Bundles { tasks_per_node } => {
                    if ok >= tasks_per_node {
                        k
                    } else {
                        0
                    }
                }
                Mode::Units { .. } => k.min(ok),
            };
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
        if let Some((user, excl)) = c.gate
            && let Some(users) = &self.users
            && !users[n as usize].admit(user, excl)
        {
            return (0, 0);
        }
        if let Some(x) = &self.ext
            && !x.admits(c.part, n, self.now, self.now, &|_| false)
        {
            return (0, 0);
        }
        let avail = ns.window_now(end);
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

    /// Leaf `leaf`'s base aggregate for class `cid` (runs ending whenever), recording the
    /// units per node.
    fn base_leaf(&mut self, cid: u32, leaf: u32) {
        let c = &self.classes[cid as usize];
        let tree = &self.parts[c.part as usize].tree;
        let mut agg = LeafAgg::default();
        let range = tree.leaf(leaf).nodes.clone();
        let mut units: SmallVec<[u32; 64]> = SmallVec::new();
        for pos in range.clone() {
            let (u, slack) = self.units_now(c, pos, NEVER);
            units.push(u);
            if u > 0 {
                agg.units += u;
                agg.nodes += 1;
                agg.slack += u64::from(slack);
            }
        }
        let c = &mut self.classes[cid as usize];
        c.base[leaf as usize] = agg;
        c.node_units[range.start as usize..range.end as usize].copy_from_slice(&units);
    }

    /// Brings class `cid`'s `base` up to date with the partition's change log.
    pub fn catch_up_base(&mut self, cid: u32) {
        let part = self.classes[cid as usize].part as usize;
        let nl = self.parts[part].tree.leaves.len();
        let logged = self.parts[part].changed.len();
        let seen = self.classes[cid as usize].base_seen;
        if seen == usize::MAX {
            for l in 0..nl {
                self.base_leaf(cid, l as u32);
            }
        } else if seen < logged {
            let mut dirty: Vec<u32> = self.parts[part].changed[seen..logged].to_vec();
            if dirty.len() > 1 {
                dirty.sort_unstable();
                dirty.dedup();
            }
            for l in dirty {
                if self.parts[part].leaf_claims[l as usize].is_empty() {
                    self.base_leaf(cid, l);
                }
            }
        }
        self.classes[cid as usize].base_seen = logged;
    }

    /// Leaf aggregates of class `cid` for a job starting now and running until `end`: the
    /// class's `base` (brought up to date here) with `patch` holding the leaves that have
    /// holds, read for this window.
    pub fn leaf_aggs_now(&mut self, cid: u32, end: i64, patch: &mut Vec<(u32, LeafAgg)>) {
        self.catch_up_base(cid);
        let part = self.classes[cid as usize].part as usize;
        patch.clear();
        for i in 0..self.parts[part].claimed_leaves.len() {
            let l = self.parts[part].claimed_leaves[i];
            patch.push((l, self.held_leaf_agg(cid, l, end)));
        }
    }

    /// Leaf `l` (one with holds) of class `cid` for a job starting now and running until
    /// `end`, read through the class's cache (valid while the leaf is unchanged and the
    /// same holds begin before `end`).
    pub fn held_leaf_agg(&mut self, cid: u32, l: u32, end: i64) -> LeafAgg {
        let l = l as usize;
        let ps = &self.parts[self.classes[cid as usize].part as usize];
        let ver = ps.leaf_version[l];
        let ways = &self.classes[cid as usize].cache[l];
        if let Some(e) = ways
            .iter()
            .find(|e| e.ver == ver && e.lo < end && end <= e.hi)
        {
            return e.agg;
        }
        // The ends for which the same holds matter: between consecutive hold starts.
        let starts = &ps.leaf_claims[l];
        let i = starts.partition_point(|&t| t < end);
        let lo = if i == 0 { i64::MIN } else { starts[i - 1] };
        let hi = starts.get(i).copied().unwrap_or(i64::MAX);
        let agg = self.leaf_agg_now(&self.classes[cid as usize], l as u32, end);
        let ways = &mut self.classes[cid as usize].cache[l];
        // Replace an outdated entry, else one chosen by the end (entries differ by end).
        let slot = ways
            .iter()
            .position(|e| e.ver != ver)
            .unwrap_or((end as usize) % CACHE_WAYS);
        ways[slot] = CacheEntry { ver, lo, hi, agg };
        agg
    }

    /// Capacity of class `cid` with every node idle, for (schedulable nodes with healthy
    /// GPUs, all nodes with all GPUs).
    pub fn statics(&mut self, cid: u32) -> &(Caps, Caps) {
        if self.classes[cid as usize].statics.is_none() {
            let key = self.cache_key(&self.classes[cid as usize].key);
            let c = &self.classes[cid as usize];
            let st = match self.statics_cache.get(&key) {
                Some(st) => st.clone(),
                None => {
                    let tree = &self.parts[c.part as usize].tree;
                    let mut up = Vec::new();
                    let mut all = Vec::new();
                    for (pos, &n) in tree.nodes.iter().enumerate() {
                        let ns = &self.nodes[n as usize];
                        all.push(self.units_for_count(
                            c,
                            pos as u32,
                            ns.all_total,
                            ns.all_mask,
                            ns.all_total,
                        ));
                        up.push(if ns.sched {
                            self.units_for_count(c, pos as u32, ns.total, ns.healthy_mask, ns.total)
                        } else {
                            0
                        });
                    }
                    let st = Arc::new((Caps::new(up), Caps::new(all)));
                    self.statics_cache.insert(key, st.clone());
                    st
                }
            };
            self.classes[cid as usize].statics = Some(st);
        }
        self.classes[cid as usize]
            .statics
            .as_deref()
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

/// Per-node capacities of a class, summarized: how many nodes can take a unit, and the most
/// units any `k` nodes hold (prefix sums of the capacities sorted descending).
#[derive(Clone, Debug, Default)]
pub struct Caps {
    /// Nodes with room for a unit.
    pub nodes: u32,
    /// `prefix[k]`: most units on any `k` nodes.
    pub prefix: Vec<u64>,
}

impl Caps {
    fn new(mut caps: Vec<u32>) -> Caps {
        caps.retain(|&u| u > 0);
        caps.sort_unstable_by(|a, b| b.cmp(a));
        let mut prefix = Vec::with_capacity(caps.len() + 1);
        prefix.push(0);
        let mut acc = 0u64;
        for u in &caps {
            acc += u64::from(*u);
            prefix.push(acc);
        }
        Caps {
            nodes: caps.len() as u32,
            prefix,
        }
    }

    /// Whether these capacities can hold `d` (ignoring topology).
    pub fn hold(&self, d: &Demand) -> bool {
        if self.nodes < d.min_nodes {
            return false;
        }
        match d.mode {
            Mode::Bundles { .. } => true,
            Mode::Units { total, .. } => {
                let k = (d.max_nodes as usize).min(self.nodes as usize);
                self.prefix[k] >= u64::from(total)
            }
        }
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
