//! One scheduling cycle: eligibility, order, start-now placement with backfill, reservations
//! and preemption. See the [module docs](super) for the rules.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::deps::{self, Asker, DepIndex, DepState};
use super::engine::{Claim, Engine, Gate, LeafAgg, LeafView, NEVER, Selection};
use super::extended::STARTED_NOW;
use super::feasible;
use super::model::{
    Config, Constraint, Decisions, JobId, JobRequest, PartitionState, PendingInfo, PendingJob,
    PreemptMode, Preemption, Reason, Reservation, Snapshot, Start, TaskAssignment, Victim,
};
use super::node::NodeId;
use super::occupancy::{Occupancy, RunInfo};
use super::prepared::Prepared;
use super::priority::{
    PriorityInput, ShortLimitInput, capped_short_limit_factors, fair_share_factors, priority,
    queued_since, short_limit_factor, spans_nodes,
};
use super::select::{Ahead, Placement, SelectInput, select, select_weighed};
use super::shape::{Demand, Mode, normalize};
use super::util::{NameKey, natural_cmp_keyed};

mod eligible;
mod gangs;

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

/// Queue order: tier (high first), priority (high first), queued time (submit time less the
/// short-limit credit, [`queued_since`]), submit time, job id, then the pending index.
type OrderKey = (Reverse<u32>, Reverse<u32>, i64, i64, JobId, usize);

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

/// Candidate leaves a placement weighs against the later gangs.
const LOOKAHEAD_LEAVES: usize = 8;

/// Most [`Cycle::worth_waiting`] sweeps per cycle.
const TOPOLOGY_CHECKS: u32 = 32;

fn end_of(start: i64, limit: Option<u64>) -> i64 {
    match limit {
        Some(l) => start.saturating_add(i64::try_from(l).unwrap_or(i64::MAX)),
        None => NEVER,
    }
}

/// `total` split into `k` near-equal parts; part `i` (the first ones get the remainder).
fn split(total: u64, k: u32, i: u32) -> u64 {
    let k = u64::from(k.max(1));
    total / k + u64::from(u64::from(i) < total % k)
}

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
    /// A running job's holds.
    fn nodes_of(&self, v: usize) -> &[super::occupancy::Held] {
        &self.run[v].nodes
    }

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
                    if let Some(start) = self.consider(job, &jc, &mut info) {
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

    /// Pending jobs in queue order with their priorities: partition tier, priority, submit
    /// time, job id.
    fn order(&mut self, sizes: &[(u64, u64)], fs: &BTreeMap<String, f64>) -> Vec<(usize, u32)> {
        let snap = self.snap;
        let demands: Vec<Option<Result<Demand, String>>> = snap
            .pending
            .iter()
            .map(|j| {
                j.partition
                    .and_then(|p| snap.partitions.get(p as usize))
                    .map(|p| normalize(&j.request, p))
            })
            .collect();
        let widest = self.widest_node;
        let shorts: Vec<ShortLimitInput> = snap
            .pending
            .iter()
            .zip(&demands)
            .map(|(j, demand)| {
                let part = j.partition.and_then(|p| snap.partitions.get(p as usize));
                let gang = matches!(demand, Some(Ok(d)) if spans_nodes(d, widest));
                ShortLimitInput {
                    since: j.eligible_time.unwrap_or(j.submit_time),
                    partition: j.partition,
                    factor: short_limit_factor(
                        part.and_then(|p| p.effective_limit(j.request.time_limit)),
                    ),
                    gang,
                }
            })
            .collect();
        let shorts = capped_short_limit_factors(&shorts, self.cfg);
        let mut keyed: Vec<OrderKey> = snap
            .pending
            .iter()
            .zip(&demands)
            .enumerate()
            .map(|(i, (j, demand))| {
                let part = j.partition.and_then(|p| snap.partitions.get(p as usize));
                let tier = part.map(|p| p.priority_tier).unwrap_or(0);
                let short = shorts[i];
                let size = match (demand, j.partition) {
                    (Some(dm), Some(pi)) => match dm {
                        Ok(d) => {
                            let (g, n) = sizes[pi as usize];
                            if d.unit.gpus > 0 && g > 0 {
                                d.min_gpus() as f64 / g as f64
                            } else if n > 0 {
                                f64::from(d.min_nodes) / n as f64
                            } else {
                                0.0
                            }
                        }
                        Err(_) => 0.0,
                    },
                    _ => 0.0,
                };
                let pr = priority(
                    &PriorityInput {
                        namespace: &j.namespace,
                        age_secs: self.now - j.eligible_time.unwrap_or(j.submit_time),
                        size_fraction: size,
                        nice: j.nice,
                        fixed: j.priority,
                        short_limit: short,
                    },
                    fs,
                    self.cfg,
                );
                let since = queued_since(j.submit_time, short, self.cfg);
                (Reverse(tier), Reverse(pr), since, j.submit_time, j.id, i)
            })
            .collect();
        self.demands = demands;
        keyed.sort_unstable();
        keyed.into_iter().map(|k| (k.5, k.1.0)).collect()
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
        if jc.implicit {
            // Spread now, unless the fewest leaves come soon enough to wait for them and
            // the wait is worth it.
            let at_once = self.spread_at_once(part);
            for alt in &jc.alts {
                if let Some(sel) = self.try_now(jc, alt, end, None)
                    && (at_once || !self.worth_waiting(jc, alt, self.now))
                    && let Some(start) = self.commit_start(job, jc, alt, &sel)
                {
                    return Some(start);
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
        let tier = self.snap.partitions[part].priority_tier;
        let can_preempt = self.cfg.preemption && self.lowest_preemptable_tier < tier;
        let waited = self.now - job.eligible_time.unwrap_or(job.submit_time);
        let may_reserve = self.reservations < self.cfg.max_reservations
            && waited >= i64::try_from(self.cfg.reserve_after_secs).unwrap_or(i64::MAX);
        if !can_preempt && !may_reserve {
            return None;
        }
        // The earliest alternative (the first on a tie).
        let mut earliest: Option<(i64, Selection)> = None;
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
            if jc.implicit {
                // The fewest leaves only while they are not much later than any leaves.
                let any = self
                    .e
                    .earliest(alt.cid, &jc.demand, jc.limit, None, NEVER, &counts);
                let wait = i64::try_from(self.cfg.topology_wait_secs).unwrap_or(NEVER);
                if let Some((ta, _)) = &any
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
            self.reserve(job, jc, t, &sel, info);
        }
        None
    }

    /// Whether a gang of `part` that could start now spread over more leaves than it needs
    /// should start so rather than wait for its fewest leaves: no later job of the partition
    /// waits in this cycle's queue (the wait would delay no one's start but the gang's own,
    /// and a one-leaf room it waits for would serve no one else), and no running job of the
    /// partition that one leaf could hold is spread (so spreading at once is never the
    /// habit: at most one such gang runs at a time, and leaf span stays near its bound).
    fn spread_at_once(&self, part: usize) -> bool {
        if self.last_of_part[part].is_some_and(|l| l > self.at) {
            return false;
        }
        let widest = self.widest_leaf[part];
        let tree = self.e.parts[part].tree;
        let leaf_of = |h: &super::occupancy::Held| {
            self.e
                .member_of
                .of(h.node)
                .iter()
                .find(|&&(p, _)| p as usize == part)
                .map(|&(_, pos)| tree.leaf_of[pos as usize])
        };
        !self.run.iter().any(|r| {
            let n = r.nodes.len() as u64;
            r.live && n > 1 && n <= widest && {
                let mut leaves = r.nodes.iter().filter_map(leaf_of);
                leaves
                    .next()
                    .is_some_and(|first| leaves.any(|l| l != first))
            }
        })
    }

    /// Whether a gang that could start now spread over more leaves than it needs should
    /// wait for its fewest leaves instead: they come (by the running jobs' time limits and
    /// the reservations) within [`Config::topology_wait_secs`]. Each check is a sweep of
    /// the timeline; past a budget per cycle the gang does not wait.
    fn worth_waiting(&mut self, jc: &JobCtx, alt: &Alt, now: i64) -> bool {
        if self.topology_checks >= TOPOLOGY_CHECKS {
            return false;
        }
        self.topology_checks += 1;
        let counts = self.count_masks(alt);
        let wait = i64::try_from(self.cfg.topology_wait_secs).unwrap_or(NEVER);
        self.e
            .earliest(alt.cid, &jc.demand, jc.limit, jc.max_leaves, NEVER, &counts)
            .is_some_and(|(t, _)| t.saturating_sub(now) <= wait)
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

    fn try_now(
        &mut self,
        jc: &JobCtx,
        alt: &Alt,
        end: i64,
        max_leaves: Option<u32>,
    ) -> Option<Selection> {
        let cid = alt.cid;
        let d = &jc.demand;
        let part = jc.part as usize;
        if d.min_gpus() > self.e.parts[part].free_gpus {
            return None;
        }
        let key = (d.need(), d.min_nodes, d.max_nodes, end, max_leaves);
        let dominated = |f: &(u32, u32, u32, i64, Option<u32>)| {
            key.0 >= f.0
                && key.1 >= f.1
                && key.2 <= f.2
                && key.3 >= f.3
                && match (f.4, key.4) {
                    (None, _) => true,
                    (Some(a), Some(b)) => b <= a,
                    (Some(_), None) => false,
                }
        };
        let c = &self.e.classes[cid as usize];
        if c.failures.iter().any(dominated)
            || c.room.iter().any(|&(e, u, n)| {
                end >= e && (u64::from(d.need()) > u || u64::from(d.min_nodes) > n)
            })
        {
            return None;
        }
        let counts = self.count_masks(alt);
        let mut buf = std::mem::take(&mut self.buf);
        self.e.leaf_aggs_now(cid, end, &mut buf);
        let e = &self.e;
        let c = &e.classes[cid as usize];
        let ps = &e.parts[part];
        let inp = SelectInput {
            tree: ps.tree,
            levels: ps.levels,
            leaf_aggs: LeafView {
                base: &c.base,
                patch: &buf,
            },
            demand: d,
            max_leaves,
            counts: &counts,
            placement: e.placement,
            order: ps.node_order,
        };
        let node_fn = |p: u32| e.units_now(c, p, end);
        let sel = select(&inp, &node_fn);
        if let Some(first) = sel {
            // A choice of leaves, and later gangs of the cycle that a leaf may hold: weigh
            // the candidates against them.
            let one_leaf = first
                .iter()
                .all(|&(p, _)| ps.tree.leaf_of[p as usize] == ps.tree.leaf_of[first[0].0 as usize]);
            let view = inp.leaf_aggs;
            // The leaf scan last: with no later gang (every one-node job's case) it is not
            // needed, and it reads every leaf.
            let no_choice = || {
                view.iter()
                    .filter(|a| a.units >= d.need() && a.nodes >= d.min_nodes)
                    .nth(1)
                    .is_none()
            };
            if e.placement != Placement::Topology
                || !one_leaf
                || !counts.is_empty()
                || self.gangs.partition_point(|g| g.pos <= self.at) >= self.gangs.len()
                || no_choice()
            {
                self.buf = buf;
                return Some(first);
            }
            let ahead_ks = self.lookahead(jc.part);
            if ahead_ks.is_empty() {
                self.buf = buf;
                return Some(first);
            }
            // The lookahead may have refreshed this class's base (other classes share no
            // state with it, but its leaves could be patched again): read it afresh.
            self.e.leaf_aggs_now(cid, end, &mut buf);
            let e = &self.e;
            let c = &e.classes[cid as usize];
            let ps = &e.parts[part];
            let ahead: Vec<&Ahead> = ahead_ks
                .iter()
                .filter_map(|&k| self.gangs[k].ahead.as_ref().map(|(_, _, a)| a))
                .collect();
            let penalty = |s: &Selection| -> u64 { e.lookahead_penalty(d, s, &ahead, ps) };
            let inp = SelectInput {
                tree: ps.tree,
                levels: ps.levels,
                leaf_aggs: LeafView {
                    base: &c.base,
                    patch: &buf,
                },
                demand: d,
                max_leaves,
                counts: &counts,
                placement: e.placement,
                order: ps.node_order,
            };
            let node_fn = |p: u32| e.units_now(c, p, end);
            let sel = select_weighed(&inp, &node_fn, &penalty, LOOKAHEAD_LEAVES).or(Some(first));
            self.buf = buf;
            return sel;
        }
        let view = LeafView {
            base: &c.base,
            patch: &buf,
        };
        let (units, nodes) = view.iter().fold((0u64, 0u64), |(u, n), a| {
            (u + u64::from(a.units), n + u64::from(a.nodes))
        });
        self.buf = buf;
        // Keep the least room seen per window end (a few distinct time limits in practice).
        let room = &mut self.e.classes[cid as usize].room;
        match room.binary_search_by_key(&end, |r| r.0) {
            Ok(k) => {
                room[k].1 = room[k].1.min(units);
                room[k].2 = room[k].2.min(nodes);
            }
            Err(k) if room.len() < 32 => room.insert(k, (end, units, nodes)),
            Err(_) => {}
        }
        let f = &mut self.e.classes[cid as usize].failures;
        if f.len() < 8 {
            f.push(key);
        } else {
            f[(key.0 as usize) % 8] = key;
        }
        None
    }

    /// Binds GPUs and records the start; `None` (nothing held) if some node cannot give the
    /// GPUs after all (a counting model disagreeing with the GPU masks — never expected).
    fn commit_start(
        &mut self,
        job: &PendingJob,
        jc: &JobCtx,
        alt: &Alt,
        sel: &Selection,
    ) -> Option<Start> {
        let d = &jc.demand;
        let part = jc.part as usize;
        let end = end_of(self.now, jc.limit);
        let tree_nodes = &self.e.parts[part].tree.nodes;
        let leaf_of = &self.e.parts[part].tree.leaf_of;
        let mut picks: Vec<(NodeId, u32, u32)> = sel
            .iter()
            .map(|&(p, u)| (tree_nodes[p as usize], u, leaf_of[p as usize]))
            .collect();
        let names = &self.snap.nodes;
        sort_by_name(&mut picks, |p| &names[p.0 as usize].name);
        let mut leaves: Vec<u32> = picks.iter().map(|p| p.2).collect();
        leaves.sort_unstable();
        leaves.dedup();
        let filter = self.e.classes[alt.cid as usize].filter as usize;
        let bind = self.e.classes[alt.cid as usize].bind.clone();
        let mut tasks = Vec::new();
        let mut nodes = Vec::with_capacity(picks.len());
        // (node, GPUs, CPU, memory) to hold once every node is bound.
        let mut holds: Vec<(NodeId, u64, u64, u64)> = Vec::with_capacity(picks.len());
        let mut rank = 0u32;
        for (node_rank, &(n, units, _)) in picks.iter().enumerate() {
            nodes.push(n);
            let ns = &self.e.nodes[n as usize];
            let total = ns.total;
            let pos = self
                .e
                .member_of
                .of(n)
                .iter()
                .find(|&&(p, _)| p as usize == part)
                .map(|&(_, pos)| pos)
                .unwrap_or(0);
            let f = &self.e.filters[filter];
            let usable = if f.all {
                ns.free_mask
            } else {
                ns.free_mask & f.gpu_mask[pos as usize]
            };
            let k = d.tasks_on_node(units);
            let node_gpus = d.unit.gpus * units + d.node.gpus;
            let node_cpu = d.unit.cpu * u64::from(units) + d.node.cpu;
            let node_mem = if d.whole_mem {
                total.mem
            } else {
                d.unit.mem * u64::from(units) + d.node.mem
            };
            let gt = &self.e.gpu_trees[ns.gtree as usize];
            let masks: Vec<u64> = match &bind {
                Some(sets) => (0..k as usize).map(|i| sets[i % sets.len()]).collect(),
                // More tasks than GPUs on the node: they share the node's GPUs (each task
                // sees all of them), as Slurm's tasks do.
                None if node_gpus > 0 && k > node_gpus => {
                    let m = gt.pick_tasks(&[node_gpus], usable)?;
                    vec![m[0]; k as usize]
                }
                None => {
                    let counts: Vec<u32> = (0..k)
                        .map(|i| split(u64::from(node_gpus), k, i) as u32)
                        .collect();
                    gt.pick_tasks(&counts, usable)?
                }
            };
            let mut all = 0u64;
            for (local, m) in masks.iter().enumerate() {
                all |= m;
                tasks.push(TaskAssignment {
                    rank,
                    node: n,
                    node_rank: node_rank as u32,
                    local_rank: local as u32,
                    gpus: gt.indices(*m),
                    cpu_millis: split(node_cpu, k, local as u32),
                    memory_mib: split(node_mem, k, local as u32),
                });
                rank += 1;
            }
            holds.push((n, all, node_cpu, node_mem));
        }
        for (n, all, cpu, mem) in holds {
            let taken = self.e.hold(n, all, cpu, mem, d.exclusive);
            self.e.release_at(n, end, taken, u32::MAX);
            if let (Some((user, exclusive_user)), Some(users)) = (jc.user, &mut self.e.users) {
                users[n as usize].count(user, exclusive_user, true);
            }
            if let Some(x) = &mut self.e.ext {
                x.add(n, jc.part, STARTED_NOW, end);
            }
        }
        Some(Start {
            job: job.id,
            nodes,
            tasks,
            time_limit: jc.limit,
            exclusive: d.exclusive,
            leaves: leaves.len() as u32,
        })
    }

    /// Holds the selection's resources from `t` for the job's run and records the estimate.
    fn reserve(
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
    fn preempt(
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
        let pos_of = |n: NodeId| -> Option<u32> {
            self.e
                .member_of
                .of(n)
                .iter()
                .find(|&&(p, _)| p as usize == part)
                .map(|&(_, pos)| pos)
        };
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
