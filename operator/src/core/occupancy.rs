//! What running jobs hold, kept between cycles.
//!
//! A cycle starts from every node's free room with the running jobs laid on it, plus per-job
//! facts (tier, grace time, release times) that preemption and reservations read. Deriving
//! that from [`Snapshot::running`] costs time in proportion to the cluster and the running
//! jobs, in every cycle; on a large cluster with a short queue it is most of the cycle. An
//! [`Occupancy`] keeps it instead, updated by [`Occupancy::add`] and [`Occupancy::remove_job`] as
//! jobs start and end, so [`schedule_incremental`] costs what the queue and the changes cost.
//! A cycle changes the state while it plans (starts, holds, preemptions) and undoes those
//! changes before returning (an undo log of the nodes it touched), so the occupancy always
//! describes the running jobs alone.
//!
//! Three more things are kept for the next cycle, each tested against a derivation from
//! scratch (`operator/tests/core_props/`): every partition's future releases, sorted
//! (changes are merged in linearly instead of sorting every release again); every job class's
//! capacity with each node idle (it depends on the nodes alone); and every class's units per
//! leaf as a cycle left them, with a log of the leaves changed since, so a later cycle reads
//! only those leaves again.
//!
//! [`schedule_prepared`](super::schedule_prepared) builds a fresh one each call, so both
//! entry points run the same code.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use smallvec::SmallVec;

use super::enforce;
use super::engine::{BaseEvents, Carried, Event, NEVER, end_of};
use super::extended::ExtUse;
use super::model::{Config, Decisions, JobId, PreemptMode, RunningJob, Snapshot, Stop};
use super::node::NodeId;
use super::node_state::{NodeUsers, base_nodes, part_free_gpus};
use super::prepared::Prepared;
use super::select::Placement;
use super::shape::Res;
use super::util::FnvBuild;

/// What a running job holds on one node: the node, the resources (by count) and the GPU
/// positions taken.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    pub node: NodeId,
    pub res: Res,
    pub mask: u64,
}

/// A running job as cycles see it (a slot of [`Occupancy`]; `live` is false for a free slot).
#[derive(Clone, Debug)]
pub(crate) struct RunInfo {
    pub id: JobId,
    pub live: bool,
    pub tier: u32,
    pub mode: PreemptMode,
    pub grace: i64,
    pub nodes: SmallVec<[Held; 2]>,
    /// Being stopped (in the snapshot, or by this cycle while it runs).
    pub stopping: bool,
    pub gpus: u64,
    pub start: i64,
    /// When its time limit ends (`NEVER`: unlimited).
    pub end: i64,
    /// When its resources come back.
    pub release: i64,
    /// Its tasks are on ready nodes and healthy GPUs (as when it was added).
    pub placed_well: bool,
    pub array: Option<JobId>,
    /// Index into [`Occupancy`]'s namespace names.
    pub ns: u32,
    /// The submitting user's id (0: unknown), see [`Occupancy::user_id`].
    pub user: u32,
    /// `--exclusive=user`.
    pub exclusive_user: bool,
    /// Its partition (`None`: it no longer exists), for the extended resources its node pods
    /// hold.
    pub part: Option<u32>,
}

impl RunInfo {
    /// GPU-seconds of work lost if evicted at `now` (GPUs × elapsed).
    pub fn cost(&self, now: i64) -> u128 {
        u128::from(self.gpus) * (now - self.start).max(0) as u128
    }
}

/// The running jobs laid onto the cluster, kept between cycles (see the [module
/// docs](self)).
///
/// It is tied to the [`Prepared`] trees and the snapshot nodes it was built from: build a new
/// one when nodes change (including readiness, cordons and GPU health) or partitions change.
/// [`schedule_incremental`] checks the node count and the trees, and builds it again on a
/// mismatch.
#[derive(Clone, Debug)]
pub struct Occupancy {
    /// Node states with the running jobs laid on, and the caches cycles keep.
    carried: Carried,
    part_free: Vec<u64>,
    /// Healthy GPUs and nodes of each partition (the priority's job-size factor).
    part_size: Vec<(u64, u64)>,
    /// Each ready node's healthy GPU indices as a bit set (`None`: not ready, or an index past
    /// 63), to tell jobs placed on failed hardware.
    healthy: Vec<Option<u64>>,
    pub(crate) run: Vec<RunInfo>,
    free_slots: Vec<u32>,
    slot_of: HashMap<JobId, u32, FnvBuild>,
    /// `(time-limit end, slot)` of live jobs not being stopped.
    expiring: BTreeSet<(i64, u32)>,
    /// Live jobs not being stopped whose tasks sit on failed nodes or GPUs.
    misplaced: BTreeSet<u32>,
    /// `(release, slot)` of jobs being stopped.
    stopping: BTreeSet<(i64, u32)>,
    /// Tiers of live jobs not being stopped that may be preempted, with counts.
    tiers: BTreeMap<u32, u32>,
    /// Running elements per array job.
    arrays: BTreeMap<JobId, u32>,
    ns_names: Vec<String>,
    ns_count: Vec<u32>,
    ns_index: BTreeMap<String, u32>,
    /// User names to ids (from 1; 0 is "unknown"), for `--exclusive=user`.
    user_ids: HashMap<String, u32, FnvBuild>,
    /// Running `--exclusive=user` jobs.
    user_locks: u32,
    names: (usize, u64),
    /// Built by [`Occupancy::new_uncached`]: nothing is cached between cycles.
    uncached: bool,
    /// Some hold did not get exactly what its job asked for (two jobs claim the same GPU or
    /// more CPU than a node has, or an exclusive job shares a node): the layout then depends
    /// on the order jobs were added in, which only [`Occupancy::new`]'s job-id order defines.
    order_sensitive: bool,
}

impl Occupancy {
    /// The running jobs of `snap` laid onto its nodes, in job-id order (so a snapshot whose
    /// jobs overlap resolves the same way whatever the order of its list).
    pub fn new(prep: &Prepared, snap: &Snapshot) -> Occupancy {
        let nodes = base_nodes(&snap.nodes, prep);
        let part_free = part_free_gpus(prep, &nodes);
        let part_size = prep
            .trees
            .iter()
            .map(|(tree, _)| {
                let gpus = tree
                    .nodes
                    .iter()
                    .map(|&n| u64::from(nodes[n as usize].total.gpus))
                    .sum();
                (gpus, tree.nodes.len() as u64)
            })
            .collect();
        let healthy = enforce::healthy_masks(&snap.nodes);
        let mut occ = Occupancy {
            carried: Carried {
                nodes,
                events: vec![BaseEvents::default(); prep.trees.len()],
                leaf_log: vec![Vec::new(); prep.trees.len()],
                ..Default::default()
            },
            part_free,
            part_size,
            healthy,
            run: Vec::with_capacity(snap.running.len()),
            free_slots: Vec::new(),
            slot_of: HashMap::with_capacity_and_hasher(snap.running.len(), FnvBuild),
            expiring: BTreeSet::new(),
            misplaced: BTreeSet::new(),
            stopping: BTreeSet::new(),
            tiers: BTreeMap::new(),
            arrays: BTreeMap::new(),
            ns_names: Vec::new(),
            ns_count: Vec::new(),
            ns_index: BTreeMap::new(),
            user_ids: HashMap::with_hasher(FnvBuild),
            user_locks: 0,
            names: prep.names(),
            uncached: false,
            order_sensitive: false,
        };
        let mut order: Vec<&RunningJob> = snap.running.iter().collect();
        order.sort_by_key(|j| j.id);
        for j in order {
            occ.add(prep, snap, j);
        }
        occ
    }

    /// [`Occupancy::new`] without the sorted release lists: cycles derive the future events
    /// from the node states each time. The reference the cached lists are tested against.
    #[doc(hidden)]
    pub fn new_uncached(prep: &Prepared, snap: &Snapshot) -> Occupancy {
        let mut occ = Occupancy::new(prep, snap);
        occ.carried.events.clear();
        occ.uncached = true;
        occ
    }

    /// Number of running jobs.
    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    /// Whether no job runs.
    pub fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
    }

    /// Lays running job `j` onto the nodes (`snap` gives the nodes and partitions). A job
    /// with an id already present is replaced.
    pub fn add(&mut self, prep: &Prepared, snap: &Snapshot, j: &RunningJob) {
        self.remove_job(prep, j.id);
        let part = j.partition.and_then(|p| snap.partitions.get(p as usize));
        let grace = part.map(|p| p.grace_time_secs).unwrap_or(0) as i64;
        let end = end_of(j.start_time, j.time_limit);
        let release = match j.stopping_since {
            Some(s) => end.min(s.saturating_add(grace)),
            None => end,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.run.push(RunInfo {
                    id: 0,
                    live: false,
                    tier: 0,
                    mode: PreemptMode::None,
                    grace: 0,
                    nodes: SmallVec::new(),
                    stopping: false,
                    gpus: 0,
                    start: 0,
                    end: 0,
                    release: 0,
                    placed_well: true,
                    array: None,
                    ns: 0,
                    user: 0,
                    exclusive_user: false,
                    part: None,
                });
                self.run.len() as u32 - 1
            }
        };
        // The job's tasks grouped per node (a job has few nodes: a sorted small vector).
        let mut per_node: SmallVec<[(NodeId, u64, u64, u64); 4]> = SmallVec::new();
        for t in &j.tasks {
            if t.node as usize >= snap.nodes.len() {
                continue;
            }
            let gt = &prep.gpu_trees[self.carried.nodes[t.node as usize].gtree as usize];
            let mut mask = 0u64;
            for g in &t.gpus {
                if let Some(p) = gt.position(*g) {
                    mask |= 1 << p;
                }
            }
            match per_node.iter_mut().find(|x| x.0 == t.node) {
                Some(x) => {
                    x.1 |= mask;
                    x.2 += t.cpu_millis;
                    x.3 += t.memory_mib;
                }
                None => per_node.push((t.node, mask, t.cpu_millis, t.memory_mib)),
            }
        }
        per_node.sort_unstable_by_key(|x| x.0);
        let user = j.user.as_deref().map_or(0, |u| self.user_id(u));
        // An --exclusive=user job of an unknown user shares with no one: whole nodes.
        let exclusive = j.exclusive || (j.exclusive_user && user == 0);
        let exclusive_user = j.exclusive_user && !exclusive;
        let mut nodes = SmallVec::new();
        for &(n, mask, cpu, mem) in &per_node {
            let (res, taken_mask) = self.hold(prep, n, mask, cpu, mem, exclusive);
            if res != Res::default() {
                self.carried.nodes[n as usize]
                    .releases
                    .push((release, res, slot));
            }
            nodes.push(Held {
                node: n,
                res,
                mask: taken_mask,
            });
        }
        self.release_events(prep, &nodes, release, true);
        self.log_leaves(prep, &nodes);
        let placed_well = j
            .tasks
            .iter()
            .all(|t| match self.healthy.get(t.node as usize) {
                Some(Some(m)) => t.gpus.iter().all(|&g| g < 64 && m & (1 << g) != 0),
                _ => false,
            });
        let ns = match self.ns_index.get(j.namespace.as_str()) {
            Some(&i) => i,
            None => {
                self.ns_names.push(j.namespace.clone());
                self.ns_count.push(0);
                let i = self.ns_names.len() as u32 - 1;
                self.ns_index.insert(j.namespace.clone(), i);
                i
            }
        };
        self.ns_count[ns as usize] += 1;
        let info = RunInfo {
            id: j.id,
            live: true,
            tier: part.map(|p| p.priority_tier).unwrap_or(u32::MAX),
            mode: part.map(|p| p.preempt_mode).unwrap_or(PreemptMode::None),
            grace,
            nodes,
            stopping: j.stopping_since.is_some(),
            gpus: j.gpu_count(),
            start: j.start_time,
            end,
            release,
            placed_well,
            array: j.array_job_id,
            ns,
            user,
            exclusive_user,
            part: j.partition,
        };
        self.user_locks += u32::from(exclusive_user);
        if let Some(a) = info.array {
            *self.arrays.entry(a).or_insert(0) += 1;
        }
        self.run[slot as usize] = info;
        self.index(slot, true);
        self.slot_of.insert(j.id, slot);
    }

    /// Takes job `id` off the nodes (it ended); false if it was not there.
    pub fn remove_job(&mut self, prep: &Prepared, id: JobId) -> bool {
        let Some(slot) = self.slot_of.remove(&id) else {
            return false;
        };
        self.index(slot, false);
        let held = std::mem::take(&mut self.run[slot as usize].nodes);
        let release = self.run[slot as usize].release;
        self.user_locks -= u32::from(self.run[slot as usize].exclusive_user);
        self.release_events(prep, &held, release, false);
        self.log_leaves(prep, &held);
        for h in &held {
            let ns = &mut self.carried.nodes[h.node as usize];
            ns.releases.retain(|r| r.2 != slot);
            ns.free_mask |= h.mask;
            ns.free = Res {
                gpus: ns.free_mask.count_ones(),
                cpu: ns.free.cpu.saturating_add(h.res.cpu),
                mem: ns.free.mem.saturating_add(h.res.mem),
            }
            .min(ns.total);
            if ns.sched {
                for &(p, _) in prep.member_of.of(h.node) {
                    self.part_free[p as usize] += u64::from(h.res.gpus);
                }
            }
        }
        let r = &mut self.run[slot as usize];
        r.live = false;
        if let Some(a) = r.array.take()
            && let Some(c) = self.arrays.get_mut(&a)
        {
            *c -= 1;
            if *c == 0 {
                self.arrays.remove(&a);
            }
        }
        self.ns_count[r.ns as usize] -= 1;
        self.free_slots.push(slot);
        true
    }

    /// Logs the leaves of the nodes of `held` as changed (for cached class bases).
    fn log_leaves(&mut self, prep: &Prepared, held: &[Held]) {
        if self.carried.bases.is_empty() {
            return;
        }
        for h in held {
            for &(p, pos) in prep.member_of.of(h.node) {
                let leaf = prep.trees[p as usize].0.leaf_of[pos as usize];
                self.carried.leaf_log[p as usize].push(leaf);
            }
        }
    }

    /// Records (or takes back) the release events of holds `held` at `release`.
    fn release_events(&mut self, prep: &Prepared, held: &[Held], release: i64, add: bool) {
        if release == NEVER || self.uncached {
            return;
        }
        for h in held {
            if h.res == Res::default() {
                continue;
            }
            for &(p, pos) in prep.member_of.of(h.node) {
                let e = Event::new(release, pos, h.res, Res::default());
                if add {
                    self.carried.events[p as usize].add(e);
                } else {
                    self.carried.events[p as usize].remove(e);
                }
            }
        }
    }

    /// Marks job `id` as being stopped since `since` (preempted, cancelled, timed out): its
    /// resources come back when its partition's grace time ends (or at its time limit, if
    /// sooner), and it is not chosen as a victim again. False if it is not running or was
    /// already being stopped.
    pub fn set_stopping(&mut self, prep: &Prepared, id: JobId, since: i64) -> bool {
        let Some(&slot) = self.slot_of.get(&id) else {
            return false;
        };
        if self.run[slot as usize].stopping {
            return false;
        }
        self.index(slot, false);
        let (old, held) = {
            let r = &mut self.run[slot as usize];
            (r.release, std::mem::take(&mut r.nodes))
        };
        self.release_events(prep, &held, old, false);
        let r = &mut self.run[slot as usize];
        r.nodes = held;
        r.stopping = true;
        r.release = r.end.min(since.saturating_add(r.grace));
        let release = r.release;
        for h in &r.nodes {
            for x in &mut self.carried.nodes[h.node as usize].releases {
                if x.2 == slot {
                    x.0 = release;
                }
            }
        }
        let held = std::mem::take(&mut self.run[slot as usize].nodes);
        self.release_events(prep, &held, release, true);
        self.run[slot as usize].nodes = held;
        self.index(slot, true);
        true
    }

    /// Marks node `n`'s resources taken (see `Engine::hold`), returning what was taken and
    /// the GPU positions.
    fn hold(
        &mut self,
        prep: &Prepared,
        n: NodeId,
        gpus: u64,
        cpu: u64,
        mem: u64,
        whole: bool,
    ) -> (Res, u64) {
        let ns = &mut self.carried.nodes[n as usize];
        // Exact: every healthy GPU asked for is free and so are the CPU and memory; a whole
        // node is idle. Holds that are all exact commute (see `order_sensitive`).
        let exact = if whole {
            ns.free == ns.total && ns.free_mask == ns.healthy_mask
        } else {
            gpus & ns.healthy_mask & !ns.free_mask == 0 && cpu <= ns.free.cpu && mem <= ns.free.mem
        };
        self.order_sensitive |= !exact;
        let (taken, taken_mask) = ns.take(gpus, cpu, mem, whole);
        if ns.sched {
            for &(p, _) in prep.member_of.of(n) {
                let f = &mut self.part_free[p as usize];
                *f = f.saturating_sub(u64::from(taken.gpus));
            }
        }
        (taken, taken_mask)
    }

    /// Adds slot `slot` to (or takes it from) the indexes cycles read.
    fn index(&mut self, slot: u32, add: bool) {
        let r = &self.run[slot as usize];
        let (end, release, stopping, placed_well, tier, mode) =
            (r.end, r.release, r.stopping, r.placed_well, r.tier, r.mode);
        if stopping {
            if add {
                self.stopping.insert((release, slot));
            } else {
                self.stopping.remove(&(release, slot));
            }
            return;
        }
        if end != NEVER {
            if add {
                self.expiring.insert((end, slot));
            } else {
                self.expiring.remove(&(end, slot));
            }
        }
        if !placed_well {
            if add {
                self.misplaced.insert(slot);
            } else {
                self.misplaced.remove(&slot);
            }
        }
        if mode != PreemptMode::None {
            if add {
                *self.tiers.entry(tier).or_insert(0) += 1;
            } else if let Some(c) = self.tiers.get_mut(&tier) {
                *c -= 1;
                if *c == 0 {
                    self.tiers.remove(&tier);
                }
            }
        }
    }

    /// Running jobs that must stop at `now` (see [`enforce::stops`]), by job id, with their
    /// slots.
    pub(crate) fn stops(&self, snap: &Snapshot, now: i64) -> Vec<(Stop, u32)> {
        let mut slots: Vec<u32> = self
            .expiring
            .range(..=(now, u32::MAX))
            .map(|&(_, s)| s)
            .chain(self.misplaced.iter().copied())
            .collect();
        slots.sort_unstable();
        slots.dedup();
        let mut out: Vec<(Stop, u32)> = slots
            .into_iter()
            .filter_map(|s| {
                let id = self.run[s as usize].id;
                // Rare (a job past its limit or on failed hardware): a search of the list
                // for the job's tasks, which say why.
                let j = snap.running.iter().find(|j| j.id == id)?;
                enforce::stop_for(snap, j, now).map(|st| (st, s))
            })
            .collect();
        out.sort_by_key(|(s, _)| s.job);
        out
    }

    /// Latest release of a job being stopped, at least `now` (and `now + 1` if any).
    pub(crate) fn stop_horizon(&self, now: i64) -> i64 {
        match self.stopping.last() {
            Some(&(t, _)) => now.max(t.max(now + 1)),
            None => now,
        }
    }

    /// The lowest tier of a job that may still be preempted, leaving out `stopped` slots
    /// (`u32::MAX`: none).
    pub(crate) fn lowest_preemptable_tier(&self, stopped: &[u32]) -> u32 {
        if stopped.is_empty() {
            return self.tiers.keys().next().copied().unwrap_or(u32::MAX);
        }
        let mut tiers = self.tiers.clone();
        for &s in stopped {
            let r = &self.run[s as usize];
            if r.mode != PreemptMode::None
                && let Some(c) = tiers.get_mut(&r.tier)
            {
                *c -= 1;
                if *c == 0 {
                    tiers.remove(&r.tier);
                }
            }
        }
        tiers.keys().next().copied().unwrap_or(u32::MAX)
    }

    /// The id of user `name` for `--exclusive=user` (ids are handed out on first sight and
    /// kept: a user is a few bytes, and ids must stay stable while jobs run).
    pub(crate) fn user_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.user_ids.get(name) {
            return id;
        }
        let id = self.user_ids.len() as u32 + 1;
        self.user_ids.insert(name.to_string(), id);
        id
    }

    /// Whether some running job keeps its nodes to its user (`--exclusive=user`).
    pub(crate) fn has_user_locks(&self) -> bool {
        self.user_locks > 0
    }

    /// Who holds each of `nodes` nodes: the running jobs' users, counted per node.
    pub(crate) fn node_users(&self, nodes: usize) -> Vec<NodeUsers> {
        let mut out = vec![NodeUsers::default(); nodes];
        for r in self.run.iter().filter(|r| r.live) {
            for h in &r.nodes {
                if let Some(u) = out.get_mut(h.node as usize) {
                    u.count(r.user, r.exclusive_user, true);
                }
            }
        }
        out
    }

    /// The extended resources the running jobs' node pods hold (see [`ExtUse`]), when some
    /// partition's pods request one.
    pub(crate) fn ext_use(&self, snap: &Snapshot) -> Option<ExtUse> {
        let mut x = ExtUse::new(snap)?;
        for (slot, r) in self.run.iter().enumerate().filter(|(_, r)| r.live) {
            let Some(p) = r.part.filter(|&p| x.requests(p)) else {
                continue;
            };
            for h in &r.nodes {
                x.add(h.node, p, slot as u32, r.release);
            }
        }
        Some(x)
    }

    /// Running elements per array job.
    pub(crate) fn arrays(&self) -> &BTreeMap<JobId, u32> {
        &self.arrays
    }

    /// Namespaces with running jobs.
    pub(crate) fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.ns_names
            .iter()
            .zip(&self.ns_count)
            .filter(|(_, c)| **c > 0)
            .map(|(n, _)| n.as_str())
    }

    /// Healthy GPUs and nodes of partition `p`.
    pub(crate) fn part_size(&self, p: usize) -> (u64, u64) {
        self.part_size.get(p).copied().unwrap_or((0, 0))
    }

    /// Lends the node states and caches to a cycle, with the partitions' free GPUs.
    pub(crate) fn take_carried(&mut self) -> (Carried, &[u64]) {
        (std::mem::take(&mut self.carried), &self.part_free)
    }

    /// Takes back what [`Occupancy::take_carried`] lent.
    pub(crate) fn put_carried(&mut self, carried: Carried) {
        self.carried = carried;
    }

    /// Whether cycles should keep their class bases (not for [`Occupancy::new_uncached`]).
    pub(crate) fn keeps_bases(&self) -> bool {
        !self.uncached
    }

    /// Whether some job's hold overlapped another's when it was added, so that the layout
    /// depends on the order of [`Occupancy::add`] calls (jobs added in another order than
    /// [`Occupancy::new`]'s would not give the same free room). Never the case for jobs the
    /// core placed; once set it stays set.
    pub fn order_sensitive(&self) -> bool {
        self.order_sensitive
    }

    /// Whether this was built for `prep` and a snapshot with `nodes` nodes.
    pub(crate) fn matches(&self, prep: &Prepared, nodes: usize) -> bool {
        self.names == prep.names()
            && self.healthy.len() == nodes
            && self.part_free.len() == prep.trees.len()
    }
}

/// [`schedule_prepared`](super::schedule_prepared) with the running jobs already laid out in
/// `occ`, which must describe exactly `snap.running` on `snap.nodes` (kept so with
/// [`Occupancy::add`], [`Occupancy::remove_job`] and [`Occupancy::set_stopping`] as jobs
/// start, end and are stopped). Same decisions as `schedule_prepared`; `occ` is unchanged
/// afterwards (starts are not added: the caller adds them when it acts on them).
///
/// If `occ` was built for other trees or another number of nodes, it is built again from
/// `snap` (and the call costs what `schedule_prepared` costs); if `prep` does not fit the
/// snapshot either, this is [`schedule`](super::schedule()).
pub fn schedule_incremental(
    prep: &Prepared,
    occ: &mut Occupancy,
    snap: &Snapshot,
    now: i64,
    cfg: &Config,
) -> Decisions {
    if !occ.matches(prep, snap.nodes.len()) {
        if !prep.fits(snap) {
            return super::schedule(snap, now, cfg);
        }
        *occ = Occupancy::new(prep, snap);
    }
    super::schedule::run_cycle(snap, prep, occ, now, cfg, Placement::Topology)
}

/// [`schedule_incremental`] with another way of placing gangs (the yardsticks of
/// [`super::baseline`]).
pub(crate) fn schedule_incremental_with(
    prep: &Prepared,
    occ: &mut Occupancy,
    snap: &Snapshot,
    now: i64,
    cfg: &Config,
    placement: Placement,
) -> Decisions {
    if !prep.fits(snap) {
        let prep = Prepared::new(&snap.nodes, &snap.partitions);
        let mut occ = Occupancy::new(&prep, snap);
        return super::schedule::run_cycle(snap, &prep, &mut occ, now, cfg, placement);
    }
    if !occ.matches(prep, snap.nodes.len()) {
        *occ = Occupancy::new(prep, snap);
    }
    super::schedule::run_cycle(snap, prep, occ, now, cfg, placement)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::cluster_spec::ClusterSpec;
    use crate::core::model::{JobRequest, PendingJob};
    use crate::core::schedule_prepared;

    fn snap() -> Snapshot {
        let spec = ClusterSpec::sandbox();
        Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology())
    }

    /// Starts `jobs` GPU requests on `s` at time 0 through the core.
    fn start(s: &mut Snapshot, gpus: &[u32]) {
        s.pending = gpus
            .iter()
            .enumerate()
            .map(|(i, &g)| PendingJob::new(i as u64 + 1, 0, JobRequest::gpus(g).time(3600)))
            .collect();
        let d = crate::core::schedule(s, 0, &Config::default());
        s.apply(&d, 0);
        assert_eq!(s.running.len(), gpus.len(), "every job started");
    }

    #[test]
    fn removing_every_job_gives_back_exactly_what_was_free() {
        let mut s = snap();
        let prep = Prepared::new(&s.nodes, &s.partitions);
        let empty = Occupancy::new(&prep, &s);
        start(&mut s, &[1, 3, 8, 16, 2]);
        let mut occ = Occupancy::new(&prep, &s);
        assert_eq!(occ.len(), 5);
        assert!(occ.part_free[0] < empty.part_free[0]);
        for j in &s.running {
            assert!(occ.remove_job(&prep, j.id));
        }
        assert!(!occ.remove_job(&prep, 1), "a job is removed once");
        assert!(occ.is_empty());
        assert_eq!(occ.part_free, empty.part_free);
        for (a, b) in occ.carried.nodes.iter().zip(&empty.carried.nodes) {
            assert_eq!((a.free, a.free_mask), (b.free, b.free_mask));
            assert!(a.releases.is_empty());
        }
    }

    #[test]
    fn an_occupancy_for_other_nodes_is_built_again() {
        let mut small = snap();
        std::sync::Arc::make_mut(&mut small.nodes).truncate(4);
        let prep_small = Prepared::new(&small.nodes, &small.partitions);
        let mut occ = Occupancy::new(&prep_small, &small);
        let mut s = snap();
        start(&mut s, &[8, 8]);
        s.pending = vec![PendingJob::new(10, 5, JobRequest::gpus(4).time(60))];
        let prep = Prepared::new(&s.nodes, &s.partitions);
        let want = schedule_prepared(&prep, &s, 10, &Config::default());
        assert_eq!(
            schedule_incremental(&prep, &mut occ, &s, 10, &Config::default()),
            want
        );
        assert_eq!(occ.len(), 2);
        // Trees that do not fit the snapshot: a fresh cycle all the same.
        assert_eq!(
            schedule_incremental(&prep_small, &mut occ, &s, 10, &Config::default()),
            want
        );
    }
}
