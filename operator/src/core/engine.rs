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

mod aggs;
mod classes;
mod holds;

/// "Never" as a time.
pub const NEVER: i64 = i64::MAX;

/// When a job started at `start` ends by its time limit (`None`: unlimited, [`NEVER`]).
pub fn end_of(start: i64, limit: Option<u64>) -> i64 {
    match limit {
        Some(l) => start.saturating_add(i64::try_from(l).unwrap_or(i64::MAX)),
        None => NEVER,
    }
}

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
