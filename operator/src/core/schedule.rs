//! One scheduling cycle: eligibility, order, start-now placement with backfill, reservations
//! and preemption. See the [module docs](super) for the rules.

use std::collections::BTreeMap;

use super::deps::{self, Asker, DepIndex, DepState};
use super::engine::{Claim, Engine, Gate, LeafAgg, LeafView, NEVER, Selection, end_of};
use super::extended::STARTED_NOW;
use super::feasible;
use super::model::{
    Config, Constraint, Decisions, JobId, JobRequest, PartitionState, PendingInfo, PendingJob,
    PreemptMode, Preemption, Reason, Reservation, Snapshot, Start, TaskAssignment, Victim,
};
use super::node::NodeId;
use super::occupancy::{Occupancy, RunInfo};
use super::prepared::Prepared;
use super::priority::{QueueInput, fair_share_factors, queue_keys, size_fraction, spans_nodes};
use super::select::{Ahead, Placement, SelectInput, select, select_weighed};
use super::shape::{Demand, Mode, normalize};
use super::util::{NameKey, natural_cmp_keyed};
use muster_crds::slurm::time::format_duration_secs;

mod eligible;
mod gangs;
mod order;
mod preempt;
mod start;
mod topology;

/// Runs one scheduling cycle over `snap` at time `now` (seconds since the epoch).
///
/// Pure and deterministic: the same snapshot, time and config always give the same
/// decisions, whatever the order of `snap.running` and `snap.pending`.
pub fn schedule(snap: &Snapshot, now: i64, cfg: &Config) -> Decisions {
    let prep = Prepared::new(&snap.nodes, &snap.partitions);
    let mut occ = Occupancy::new(&prep, snap);
    run_cycle(snap, &prep, &mut occ, now, cfg, Placement::Topology)
}

/// [`schedule`] with the cluster's trees built beforehand (see [`Prepared`]), for callers
/// that schedule the same cluster many times. Same decisions as [`schedule`]; if `prep` does
/// not match the snapshot's nodes, it is rebuilt for this call.
pub fn schedule_prepared(prep: &Prepared, snap: &Snapshot, now: i64, cfg: &Config) -> Decisions {
    if prep.fits(snap) {
        let mut occ = Occupancy::new(prep, snap);
        run_cycle(snap, prep, &mut occ, now, cfg, Placement::Topology)
    } else {
        schedule(snap, now, cfg)
    }
}

/// One way to satisfy a job's constraint: a class (partition, node filter, per-node needs)
/// and the feature-count requirements `(filter, nodes)`.
struct Alt {
    cid: u32,
    counts: Vec<(u32, u32)>,
    /// Filters of the `--nodelist` nodes (one node each; also among `counts`).
    required: Vec<u32>,
}

/// What a pending job needs, resolved for this cycle.
struct JobCtx {
    part: u32,
    demand: Demand,
    limit: Option<u64>,
    /// The matching-OR alternatives of its constraint, in order (one when it has none).
    alts: Vec<Alt>,
    max_leaves: Option<u32>,
    leaves_deadline: i64,
    /// `max_leaves` is Muster's own preference for the fewest leaves (no `--switches`): it
    /// holds while the spread placement would not start more than
    /// [`Config::topology_wait_secs`] sooner.
    implicit: bool,
    /// The job's user id (0: unknown) and whether it is `--exclusive=user`, when the cycle
    /// applies user rules.
    user: Option<(u32, bool)>,
}

struct Cycle<'a> {
    snap: &'a Snapshot,
    now: i64,
    cfg: &'a Config,
    e: Engine<'a>,
    /// Running jobs by slot, taken from the [`Occupancy`] for the cycle.
    run: Vec<RunInfo>,
    /// Slots this cycle marked stopping (undone when it ends).
    stopped_now: Vec<u32>,
    array_running: BTreeMap<JobId, u32>,
    /// Per partition, whether a job before the one considered waits for room.
    blocked: Vec<bool>,
    reservations: usize,
    /// Latest time a job already being stopped releases its resources.
    stop_horizon: i64,
    /// The lowest tier of a running job that may still be preempted (`u32::MAX`: none).
    lowest_preemptable_tier: u32,
    /// Jobs for dependency lookups (built when some pending job has a dependency).
    deps: Option<DepIndex>,
    out: Decisions,
    buf: Vec<(u32, LeafAgg)>,
    /// Each pending job's normalized request, from ordering (by pending index).
    demands: Vec<Option<Result<Demand, String>>>,
    /// "waiting for …" messages by class and need (formatting is costly in long queues).
    messages: BTreeMap<(u32, u32), String>,
    /// Timeline sweeps spent deciding whether gangs wait for their fewest leaves.
    topology_checks: u32,
    /// The cycle's gangs in queue order, for placements that look ahead (see
    /// [`Cycle::lookahead`]).
    gangs: Vec<Gang>,
    /// Scratch patch of [`Cycle::refresh_ahead`].
    ahead_buf: Vec<(u32, LeafAgg)>,
    /// Gangs before this one have no [`Gang::ahead`] (the cursor has passed them).
    ahead_from: usize,
    /// Per class, the most units and nodes a leaf without holds has, with the partition's
    /// version they were read at (see [`Cycle::base_max`]).
    base_max: BTreeMap<u32, (u64, u32, u32)>,
    /// Queue position of the job being considered.
    at: usize,
    /// Most GPUs on one node (a job asking more is a gang).
    widest_node: u32,
    /// Most nodes under one leaf, per partition (read for every eligible job).
    widest_leaf: Vec<u64>,
    /// Each pending job's user id (by pending index), when some job is `--exclusive=user`
    /// (running or pending); empty otherwise, and no user rule applies.
    users: Vec<u32>,
    /// Per partition, the queue position of its last job that may start now or later
    /// (`None`: none), see [`Cycle::spread_at_once`].
    last_of_part: Vec<Option<usize>>,
}

/// A later gang of the cycle that a placement should leave room for: its queue position,
/// partition, class and request.
struct Gang {
    pos: usize,
    part: u32,
    cid: Option<u32>,
    demand: Demand,
    end: i64,
    /// Its user rule (see [`Engine::class`]).
    gate: Gate,
    /// What [`Cycle::lookahead`] found for it: its aggregates per leaf, with the partition's
    /// [`PartState::version`](super::engine::PartState::version) and length of its change
    /// log they were read at. Kept current by reading only the leaves changed or held
    /// since: every start changes a few leaves of the hundreds a later gang's aggregates
    /// cover.
    ahead: Option<(u64, usize, Ahead)>,
}

/// Later gangs a placement looks at.
const LOOKAHEAD: usize = 8;

/// One cycle over the running jobs of `occ` (which must describe `snap.running`); `occ` is
/// as before when it returns.
pub(crate) fn run_cycle(
    snap: &Snapshot,
    prep: &Prepared,
    occ: &mut Occupancy,
    now: i64,
    cfg: &Config,
    placement: Placement,
) -> Decisions {
    let stops = occ.stops(snap, now);
    let mut stop_horizon = occ.stop_horizon(now);
    let stopped: Vec<u32> = stops.iter().map(|&(_, s)| s).collect();
    let lowest_preemptable_tier = occ.lowest_preemptable_tier(&stopped);
    let array_running = occ.arrays().clone();
    let sizes: Vec<(u64, u64)> = (0..prep.trees.len()).map(|p| occ.part_size(p)).collect();
    let mut active: Vec<&str> = occ.namespaces().collect();
    active.extend(snap.pending.iter().map(|j| j.namespace.as_str()));
    let fs = fair_share_factors(&snap.usage, active, cfg);
    // User rules (`--exclusive=user`) cost nothing unless some job asks for them.
    let users: Vec<u32> = if occ.has_user_locks()
        || snap
            .pending
            .iter()
            .any(|j| j.request.exclusive_user && !j.request.exclusive)
    {
        snap.pending
            .iter()
            .map(|j| j.user.as_deref().map_or(0, |u| occ.user_id(u)))
            .collect()
    } else {
        Vec::new()
    };
    let node_users = (!users.is_empty()).then(|| occ.node_users(snap.nodes.len()));
    let ext = occ.ext_use(snap);
    let mut run = std::mem::take(&mut occ.run);
    let (carried, part_free) = occ.take_carried();
    let mut e = Engine::from_base(snap, prep, now, carried, part_free);
    e.placement = placement;
    e.users = node_users;
    e.ext = ext;
    // Jobs this cycle stops give their resources back when their grace time ends.
    for &s in &stopped {
        let r = &mut run[s as usize];
        r.stopping = true;
        let release = now.saturating_add(r.grace);
        stop_horizon = stop_horizon.max(release.max(now + 1));
        for h in &r.nodes {
            e.set_release(h.node, s, release);
            if let Some(x) = &mut e.ext {
                x.set_release(h.node, s, release);
            }
        }
    }
    let mut cycle = Cycle {
        snap,
        now,
        cfg,
        e,
        run,
        stopped_now: stopped,
        array_running,
        blocked: vec![false; snap.partitions.len()],
        reservations: 0,
        stop_horizon,
        out: Decisions {
            stops: stops.into_iter().map(|(s, _)| s).collect(),
            ..Default::default()
        },
        buf: Vec::new(),
        demands: Vec::new(),
        messages: BTreeMap::new(),
        topology_checks: 0,
        gangs: Vec::new(),
        ahead_buf: Vec::new(),
        ahead_from: 0,
        base_max: BTreeMap::new(),
        at: 0,
        widest_node: snap
            .nodes
            .iter()
            .map(|n| n.gpus.len() as u32)
            .max()
            .unwrap_or(0),
        widest_leaf: prep
            .trees
            .iter()
            .map(|(tree, _)| {
                tree.leaves
                    .iter()
                    .map(|&l| {
                        let r = &tree.switches[l as usize].nodes;
                        u64::from(r.end - r.start)
                    })
                    .max()
                    .unwrap_or(0)
            })
            .collect(),
        users,
        last_of_part: vec![None; snap.partitions.len()],
        lowest_preemptable_tier,
        deps: snap
            .pending
            .iter()
            .any(|j| j.dependency.is_some())
            .then(|| DepIndex::from_snapshot(snap)),
    };
    cycle.plan(&sizes, &fs);
    let Cycle {
        e,
        mut run,
        stopped_now,
        out,
        ..
    } = cycle;
    for s in stopped_now {
        run[s as usize].stopping = false;
    }
    occ.run = run;
    occ.put_carried(e.into_carried(occ.keeps_bases()));
    out
}

impl<'a> Cycle<'a> {
    fn plan(&mut self, sizes: &[(u64, u64)], fs: &BTreeMap<String, f64>) {
        let order = self.order(sizes, fs);
        // Held jobs and jobs before their --begin wait for no room.
        for (pos, &(idx, _)) in order.iter().enumerate() {
            let j = &self.snap.pending[idx];
            if let Some(p) = j.partition
                && !j.hold
                && j.begin_time.is_none_or(|b| b <= self.now)
                && let Some(slot) = self.last_of_part.get_mut(p as usize)
            {
                *slot = Some(pos);
            }
        }
        if self.e.placement == Placement::Topology {
            self.gangs = self.collect_gangs(&order);
        }
        for (pos, (idx, prio)) in order.into_iter().enumerate() {
            self.at = pos;
            let job = &self.snap.pending[idx];
            let mut info = PendingInfo {
                job: job.id,
                reason: Reason::Resources,
                message: String::new(),
                start_estimate: None,
                priority: prio,
                eligible: false,
            };
            match self.eligible(idx, job) {
                Err((reason, message)) => {
                    // Slurm shows a job waiting for its --begin as starting then.
                    if reason == Reason::BeginTime {
                        info.start_estimate = job.begin_time;
                    }
                    info.reason = reason;
                    info.message = message;
                    self.out.pending.push(info);
                }
                Ok(jc) => {
                    info.eligible = true;
                    if let Some(mut start) = self.consider(job, &jc, &mut info) {
                        start.priority = prio;
                        if let Some(a) = &job.array {
                            *self.array_running.entry(a.array_job_id).or_insert(0) += 1;
                        }
                        self.out.starts.push(start);
                    } else {
                        self.out.pending.push(info);
                    }
                }
            }
        }
    }

    /// Tries to start the job; otherwise preempts for it or reserves for it, and sets its
    /// reason.
    fn consider(&mut self, job: &PendingJob, jc: &JobCtx, info: &mut PendingInfo) -> Option<Start> {
        let part = jc.part as usize;
        if !self.cfg.backfill && self.blocked[part] {
            info.reason = Reason::Priority;
            info.message = "a higher-priority job of the partition is waiting".into();
            return None;
        }
        let end = end_of(self.now, jc.limit);
        let max_leaves = if self.now < jc.leaves_deadline {
            jc.max_leaves
        } else {
            None
        };
        for alt in &jc.alts {
            if let Some(sel) = self.try_now(jc, alt, end, max_leaves)
                && let Some(start) = self.commit_start(job, jc, alt, &sel)
            {
                return Some(start);
            }
        }
        // Whether it could start now on more leaves than it waits for (its message says so).
        let mut spread_now = false;
        if jc.implicit {
            // Spread now, unless the fewest leaves come soon enough to wait for them and
            // the wait is worth it.
            let at_once = self.spread_at_once(jc);
            for alt in &jc.alts {
                if let Some(sel) = self.try_now(jc, alt, end, None) {
                    if at_once || !self.worth_waiting(jc, alt, self.now) {
                        if let Some(start) = self.commit_start(job, jc, alt, &sel) {
                            return Some(start);
                        }
                    } else {
                        spread_now = true;
                    }
                }
            }
        }
        // Could it ever start? (Checked only now: jobs that start need not be.)
        // Alternatives that fit the partition with every node idle: at all (`ever`) and with
        // only the nodes and GPUs that are up (`usable`).
        let mut ever = false;
        let mut usable: Vec<usize> = Vec::new();
        for (i, alt) in jc.alts.iter().enumerate() {
            let need_nodes: u32 = alt.counts.iter().map(|&(_, n)| n).sum();
            let fits_counts = alt.counts.iter().all(|&(f, n)| {
                self.e.filters[f as usize].ok.iter().filter(|&&x| x).count() as u64 >= u64::from(n)
            }) && need_nodes <= jc.demand.max_nodes;
            let (up, all) = self.e.statics(alt.cid);
            let (up_holds, all_holds) = (up.hold(&jc.demand), all.hold(&jc.demand));
            // Each --nodelist node must itself be able to take a unit.
            let required_hold = |up: bool| {
                alt.required
                    .iter()
                    .all(|&f| self.required_fits(jc.part, alt.cid, f, up))
            };
            if fits_counts && all_holds && required_hold(false) {
                ever = true;
                if up_holds && required_hold(true) {
                    usable.push(i);
                }
            }
        }
        let part_name = &self.snap.partitions[part].name;
        let gpu_type = job.request.gpu_type.as_deref();
        if !ever {
            info.reason = Reason::BadConstraints;
            info.eligible = false;
            let p = &self.snap.partitions[part];
            if let Some(s) = feasible::shortfall(&job.request, &jc.demand, p, &self.snap.nodes) {
                // The resource and the largest that exists, as sbatch and admission say it.
                info.message = feasible::Infeasible {
                    partition: p.name.clone(),
                    shortfall: s,
                }
                .to_string();
                return None;
            }
            info.message = format!(
                "partition {part_name} can never hold {}{}{}",
                describe(&jc.demand, gpu_type),
                job.request
                    .constraint
                    .as_ref()
                    .map(|c| format!(" with constraint {c}"))
                    .unwrap_or_default(),
                placement_terms(&job.request)
            );
            return None;
        }
        if usable.is_empty() {
            info.reason = Reason::ReqNodeNotAvail;
            info.message = format!(
                "{} needs nodes or GPUs of partition {part_name} that are down, cordoned or unhealthy",
                describe(&jc.demand, gpu_type),
            );
            return None;
        }
        let was_blocked = self.blocked[part];
        self.blocked[part] = true;
        info.reason = if was_blocked {
            Reason::Priority
        } else {
            Reason::Resources
        };
        let ext = self.e.ext.as_ref().filter(|x| x.requests(jc.part));
        let (snap, now, e) = (self.snap, self.now, &self.e);
        info.message = self
            .messages
            .entry((jc.alts[0].cid, jc.demand.need()))
            .or_insert_with(|| {
                let what = describe(&jc.demand, job.request.gpu_type.as_deref());
                match ext {
                    // Name the partition's extended resources: a node with room for the
                    // GPUs may still have its `rdma/ib` held by another job's node pod.
                    Some(x) => format!(
                        "waiting for {what}; {}",
                        x.describe(
                            jc.part,
                            &snap.partitions[part],
                            &e.parts[part].tree.nodes,
                            now
                        )
                    ),
                    None => format!("waiting for {what}"),
                }
            })
            .clone();
        if spread_now {
            info.message = self.leaf_wait_message(&info.message, jc, self.now);
        }
        let tier = self.snap.partitions[part].priority_tier;
        let can_preempt = self.cfg.preemption && self.lowest_preemptable_tier < tier;
        let waited = self.now - job.eligible_time.unwrap_or(job.submit_time);
        let may_reserve = self.reservations < self.cfg.max_reservations
            && waited >= i64::try_from(self.cfg.reserve_after_secs).unwrap_or(i64::MAX);
        if !can_preempt && !may_reserve {
            return None;
        }
        // The earliest alternative (the first on a tie), and when it could start on any
        // leaves if it waits for fewer.
        let mut earliest: Option<(i64, Selection)> = None;
        let mut spread_at: Option<i64> = None;
        for alt in usable.iter().map(|&i| &jc.alts[i]) {
            let counts = self.count_masks(alt);
            let mut found = self.e.earliest(
                alt.cid,
                &jc.demand,
                jc.limit,
                jc.max_leaves,
                jc.leaves_deadline,
                &counts,
            );
            let mut any_at = None;
            if jc.implicit || (jc.max_leaves.is_some() && self.now < jc.leaves_deadline) {
                let any = self
                    .e
                    .earliest(alt.cid, &jc.demand, jc.limit, None, NEVER, &counts);
                any_at = any.as_ref().map(|(ta, _)| *ta);
                // The fewest leaves only while they are not much later than any leaves.
                let wait = i64::try_from(self.cfg.topology_wait_secs).unwrap_or(NEVER);
                if jc.implicit
                    && let Some((ta, _)) = &any
                    && found
                        .as_ref()
                        .is_none_or(|(t1, _)| t1.saturating_sub(*ta) > wait)
                {
                    found = any;
                }
            }
            if let Some((t, sel)) = found
                && earliest.as_ref().is_none_or(|(b, _)| t < *b)
            {
                spread_at = any_at.filter(|&ta| ta < t);
                earliest = Some((t, sel));
            }
        }
        if can_preempt
            && earliest
                .as_ref()
                .is_none_or(|(t, _)| *t > self.stop_horizon)
        {
            let found = usable
                .iter()
                .find_map(|&i| self.preempt(jc, &jc.alts[i], tier));
            if let Some((victims, t, sel)) = found {
                info.reason = Reason::Resources;
                info.message = format!(
                    "preempting {} lower-tier job(s); starts when they have stopped",
                    victims.len()
                );
                let vs: Vec<Victim> = victims
                    .iter()
                    .map(|&v| Victim {
                        job: self.run[v].id,
                        requeue: self.run[v].mode == PreemptMode::Requeue,
                    })
                    .collect();
                self.out.preemptions.push(Preemption {
                    for_job: job.id,
                    victims: vs,
                });
                self.reserve(job, jc, t, &sel, info);
                return None;
            }
        }
        if may_reserve && let Some((t, sel)) = earliest {
            if let Some(ta) = spread_at
                && !spread_now
            {
                info.message = self.leaf_wait_message(&info.message, jc, ta);
            }
            self.reserve(job, jc, t, &sel, info);
        }
        None
    }

    /// `waiting`, and that the job waits for fewer leaf switches than it could start on at
    /// `spread_at` (now or later): idle nodes spread over leaves are not a mistake, and the
    /// user sees for how long it waits.
    fn leaf_wait_message(&self, waiting: &str, jc: &JobCtx, spread_at: i64) -> String {
        let secs = |s: i64| format_duration_secs(u64::try_from(s).unwrap_or(0));
        let when = if spread_at <= self.now {
            "now".to_string()
        } else {
            format!("in {}", secs(spread_at - self.now))
        };
        if jc.implicit {
            format!(
                "{waiting}; it waits for one leaf switch: spread over leaves it could start \
                 {when}, and a gang waits up to {} longer for one leaf",
                format_duration_secs(self.cfg.topology_wait_secs)
            )
        } else {
            let how_long = if jc.leaves_deadline == NEVER {
                "with no limit on the wait".to_string()
            } else {
                format!(
                    "up to {} more",
                    secs(jc.leaves_deadline.saturating_sub(self.now))
                )
            };
            format!(
                "{waiting}; it waits for at most {} leaf switch(es) (--switches) {how_long}: \
                 on more leaves it could start {when}",
                jc.max_leaves.unwrap_or(1)
            )
        }
    }

    /// Whether the one node filter `f` admits can take a unit of class `cid` with nothing
    /// running (`up`: only if it is ready and with its healthy GPUs).
    fn required_fits(&self, part: u32, cid: u32, f: u32, up: bool) -> bool {
        let tree = self.e.parts[part as usize].tree;
        let c = &self.e.classes[cid as usize];
        self.e.filters[f as usize]
            .ok
            .iter()
            .enumerate()
            .any(|(pos, &ok)| {
                let ns = &self.e.nodes[tree.nodes[pos] as usize];
                ok && if up {
                    ns.sched
                        && self.e.units_for_count(
                            c,
                            pos as u32,
                            ns.total,
                            ns.healthy_mask,
                            ns.total,
                        ) > 0
                } else {
                    self.e
                        .units_for_count(c, pos as u32, ns.all_total, ns.all_mask, ns.all_total)
                        > 0
                }
            })
    }

    /// The feature-count requirements of an alternative as node masks for [`select`].
    fn count_masks(&self, alt: &Alt) -> Vec<(Vec<bool>, u32)> {
        alt.counts
            .iter()
            .map(|&(f, n)| (self.e.filters[f as usize].ok.clone(), n))
            .collect()
    }
}

/// Sorts items by their node names in natural order (a job's node list order).
fn sort_by_name<'n, T: Clone>(v: &mut [T], name: impl Fn(&T) -> &'n str) {
    if v.len() < 2 {
        return;
    }
    let mut keyed: Vec<(&'n str, NameKey, usize)> = v
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let n = name(x);
            (n, NameKey::new(n), i)
        })
        .collect();
    keyed.sort_by(|a, b| natural_cmp_keyed(a.0, a.1, b.0, b.1).then(a.2.cmp(&b.2)));
    let sorted: Vec<T> = keyed.iter().map(|k| v[k.2].clone()).collect();
    v.clone_from_slice(&sorted);
}

/// "4 nodes x 8 GPUs (h100)" and the like, for messages.
fn describe(d: &Demand, gpu_type: Option<&str>) -> String {
    let ty = gpu_type.map(|t| format!(" ({t})")).unwrap_or_default();
    let ex = if d.exclusive { ", exclusive" } else { "" };
    match d.mode {
        Mode::Bundles { .. } => {
            if d.unit.gpus > 0 {
                format!(
                    "{} node(s) with {} GPU(s) each{ty}{ex}",
                    d.min_nodes, d.unit.gpus
                )
            } else {
                format!("{} node(s){ex}", d.min_nodes)
            }
        }
        Mode::Units {
            total,
            tasks_per_unit,
            merge,
            ..
        } => {
            let tasks = if merge { total } else { total * tasks_per_unit };
            if d.node.gpus > 0 {
                format!(
                    "{tasks} task(s) on nodes with {} GPU(s) each{ty}{ex}",
                    d.node.gpus
                )
            } else if tasks_per_unit > 1 {
                format!(
                    "{tasks} task(s) sharing {} GPU(s) per {tasks_per_unit}{ty}{ex}",
                    d.unit.gpus
                )
            } else if d.unit.gpus > 0 {
                format!("{total} task(s) of {} GPU(s){ty}{ex}", d.unit.gpus)
            } else {
                format!("{total} task(s){ex}")
            }
        }
    }
}

/// " with nodelist …", " excluding …", " with gpu-bind map_gpu:…" for messages.
fn placement_terms(r: &JobRequest) -> String {
    use muster_crds::slurm::hostlist;
    let mut s = String::new();
    if !r.nodelist.is_empty() {
        s.push_str(&format!(
            " with nodelist {}",
            hostlist::compress(r.nodelist.iter())
        ));
    }
    if !r.exclude.is_empty() {
        s.push_str(&format!(
            " excluding {}",
            hostlist::compress(r.exclude.iter())
        ));
    }
    if let Some(b) = &r.gpu_bind
        && matches!(
            b.mode,
            muster_crds::slurm::GpuBindMode::MapGpu(_)
                | muster_crds::slurm::GpuBindMode::MaskGpu(_)
        )
    {
        s.push_str(&format!(" with gpu-bind {b}"));
    }
    s
}
