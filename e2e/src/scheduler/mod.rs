//! A stand-in for kube-scheduler's default profile, for clusters without one (the API server
//! double). Muster places pods with a required node affinity and leaves the bind to the
//! default scheduler, so the test control plane needs one that behaves the same way.
//!
//! What it does, as kube-scheduler does it:
//! - watches pods that are not finished (`status.phase!=Succeeded,status.phase!=Failed`) and
//!   nodes; schedules pods with `spec.schedulerName` = [`SchedulerOptions::name`], no
//!   `spec.nodeName`, no `deletionTimestamp` and no scheduling gates, highest
//!   `spec.priority` first, then oldest;
//! - filters nodes with NodeUnschedulable, TaintToleration (NoSchedule/NoExecute), NodeAffinity
//!   (`nodeSelector`, required node affinity with `matchExpressions` In/NotIn/Exists/
//!   DoesNotExist/Gt/Lt and `matchFields` `metadata.name`) and NodeResourcesFit (every
//!   requested resource, including pod slots, against allocatable minus what bound,
//!   unfinished pods request); a node whose Ready condition is not True counts as tainted
//!   `node.kubernetes.io/not-ready` (or `unreachable` when Unknown), as the node lifecycle
//!   controller would taint it;
//! - searches nodes round-robin and stops at `numFeasibleNodesToFind` feasible nodes, picks
//!   the LeastAllocated one;
//! - assumes the pod on the node and binds it through `pods/binding`, many binds at once;
//!   records a `Scheduled` event (optional);
//! - an unschedulable pod gets `PodScheduled=False`, reason `Unschedulable`, with
//!   kube-scheduler's `0/N nodes are available: …` message, and a `FailedScheduling` Warning
//!   event (one per distinct message: kube's event aggregation folds repeats into a series);
//!   it is retried after a cluster change (node added or changed, a pod finished or removed)
//!   or its own update, with backoff from 1 s to 10 s, and every 60 s regardless.
//!
//! - where the API server serves `resource.k8s.io/v1`: the DynamicResources plugin ([`dra`]):
//!   a pod's ResourceClaims are checked, allocated on the chosen node with their CEL
//!   selectors, and written (allocation, `reservedFor`, the delete-protection finalizer)
//!   before the pod is bound; and the resourceclaim controller's part: a claim whose pods are
//!   all gone or finished is released (`reservedFor` emptied, allocation cleared, finalizer
//!   removed, so a deleted claim goes);
//! - where it serves the Workload/PodGroup API: gang scheduling ([`gang`]).
//!
//! Not done: preemption (no `nominatedNodeName`, no victims; the message has no
//! `preemption:` part), scoring beyond LeastAllocated, pod (anti-)affinity, topology spread,
//! volumes, host ports, preferred affinity.

pub mod dra;
pub mod filter;
pub mod gang;

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use muster_operator::controller::dra::{DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::SimClock;
use dra::{ClaimWrite, Dra, Refusal};
use filter::{NodeView, PodNeeds, Reason, Res};
use gang::{Groups, SchedPod};

/// How the scheduler stand-in behaves.
#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    /// The `spec.schedulerName` it serves.
    pub name: String,
    /// Binds in flight at once.
    pub max_in_flight: usize,
    /// Status and event writes in flight at once.
    pub max_reports_in_flight: usize,
    /// Record a `Scheduled` event per bound pod, as kube-scheduler does (one more write per
    /// pod; benchmarks may turn it off).
    pub scheduled_events: bool,
    /// First retry delay of an unschedulable pod.
    pub initial_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
    /// Unschedulable pods are retried at least this often, cluster change or not.
    pub flush_interval: Duration,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        Self {
            name: "default-scheduler".into(),
            max_in_flight: 64,
            max_reports_in_flight: 32,
            scheduled_events: true,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            flush_interval: Duration::from_secs(60),
        }
    }
}

/// Counters, for tests and benchmarks.
#[derive(Debug, Default)]
pub struct SchedulerStats {
    /// Successful binds.
    pub bound: AtomicU64,
    /// Scheduling attempts that found no node.
    pub unschedulable: AtomicU64,
    /// Binds the API server refused or failed.
    pub bind_errors: AtomicU64,
}

/// A running scheduler stand-in; dropping it stops it.
pub struct Scheduler {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    stats: Arc<SchedulerStats>,
}

impl Scheduler {
    /// Start scheduling with `client`; timestamps come from `clock`.
    pub fn start(client: Client, clock: SimClock, opts: SchedulerOptions) -> Scheduler {
        let (stop, rx) = watch::channel(false);
        let stats = Arc::new(SchedulerStats::default());
        let task = tokio::spawn(run(client, clock, opts, stats.clone(), rx));
        Scheduler {
            stop,
            task: Some(task),
            stats,
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> &SchedulerStats {
        &self.stats
    }

    /// Stop and wait for the loop to end (writes in flight are dropped).
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Where {
    Active,
    Unschedulable {
        retry_at: Instant,
        since: Instant,
        /// [`State::epoch`] when it was found unschedulable; a later epoch means the cluster
        /// changed since.
        epoch: u64,
    },
    Assumed,
}

struct Pending {
    ns: String,
    name: String,
    needs: Result<Arc<PodNeeds>, String>,
    key: (Reverse<i32>, u64),
    at: Where,
    attempts: u32,
    reported: Option<String>,
}

enum Write {
    Bind {
        uid: String,
        ns: String,
        name: String,
        node: String,
        /// Claim writes before the binding (PreBind).
        claims: Vec<ClaimWrite>,
    },
    /// The resourceclaim controller's release of a claim whose pods are gone.
    Release {
        ns: String,
        name: String,
        resource_version: String,
        reserved_for: Vec<muster_operator::controller::dra::ResourceClaimConsumerReference>,
        deallocate: bool,
        finalizers: Option<Vec<String>>,
    },
    Report {
        uid: String,
        ns: String,
        name: String,
        message: String,
    },
    Scheduled {
        uid: String,
        ns: String,
        name: String,
        node: String,
    },
}

#[derive(Default)]
struct State {
    opts: SchedulerOptions,
    nodes: BTreeMap<String, NodeView>,
    node_order: Vec<String>,
    by_host: HashMap<String, Vec<String>>,
    requested: HashMap<String, Res>,
    bound: HashMap<String, (String, Res)>,
    pending: HashMap<String, Pending>,
    active: BTreeMap<(Reverse<i32>, u64), String>,
    seq: u64,
    next_start: usize,
    nodes_synced: bool,
    pods_synced: bool,
    pod_relist: Option<HashSet<String>>,
    node_relist: Option<HashSet<String>>,
    /// Unschedulable pods (to retry).
    unsched: HashSet<String>,
    /// Bumped on every cluster change that may let unschedulable pods fit.
    epoch: u64,
    last_flush: Option<Instant>,
    reports: VecDeque<Write>,
    /// DRA state, where `resource.k8s.io/v1` is served.
    dra: Option<Dra>,
    /// Gang groups, where the Workload/PodGroup API is served.
    groups: Option<Groups>,
    /// Claims whose release is in flight (so a sweep does not write it twice), since when.
    releasing: HashMap<(String, String), Instant>,
    /// Gang group of each bound pod (by uid): (namespace, group).
    bound_group: HashMap<String, (String, String)>,
    last_sweep: Option<Instant>,
    claim_relist: Option<HashSet<(String, String)>>,
    slice_relist: Option<HashSet<String>>,
}

impl State {
    fn unbind(&mut self, uid: &str) {
        self.bound_group.remove(uid);
        if let Some((node, r)) = self.bound.remove(uid) {
            if let Some(t) = self.requested.get_mut(&node) {
                t.sub(&r);
            }
            self.cluster_changed();
        }
    }

    fn bind_local(&mut self, uid: &str, node: &str, r: Res) {
        if let Some((n, _)) = self.bound.get(uid)
            && n == node
        {
            return;
        }
        self.unbind(uid);
        self.requested.entry(node.to_string()).or_default().add(&r);
        self.bound.insert(uid.to_string(), (node.to_string(), r));
    }

    /// Something changed that may make unschedulable pods fit.
    fn cluster_changed(&mut self) {
        self.epoch += 1;
    }

    fn activate(&mut self, uid: &str) {
        if let Some(p) = self.pending.get_mut(uid) {
            p.at = Where::Active;
            self.active.insert(p.key, uid.to_string());
            self.unsched.remove(uid);
        }
    }

    fn forget_pending(&mut self, uid: &str) {
        if let Some(p) = self.pending.remove(uid) {
            self.active.remove(&p.key);
            self.unsched.remove(uid);
        }
    }

    fn mark_unschedulable(&mut self, uid: &str, retry_at: Instant, epoch: u64) {
        if let Some(p) = self.pending.get_mut(uid) {
            p.at = Where::Unschedulable {
                retry_at,
                since: Instant::now(),
                epoch,
            };
            self.unsched.insert(uid.to_string());
        }
    }

    fn apply_pod(&mut self, sp: SchedPod) {
        let SchedPod { pod, group } = sp;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(seen) = &mut self.pod_relist {
            seen.insert(uid.clone());
        }
        let spec = pod.spec.as_ref();
        let node = spec
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            self.forget_pending(&uid);
            self.unbind(&uid);
            return;
        }
        if let Some(node) = node {
            if let Some(g) = &group {
                self.bound_group.insert(
                    uid.clone(),
                    (pod.namespace().unwrap_or_default(), g.clone()),
                );
            }
            self.forget_pending(&uid);
            let req = PodNeeds::from_pod(&pod)
                .map(|n| n.requests)
                .unwrap_or_else(|_| Res {
                    pods: 1,
                    ..Res::default()
                });
            self.bind_local(&uid, &node, req);
            return;
        }
        let ours = spec
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler")
            == self.opts.name;
        let gated = spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty());
        if !ours || gated || pod.metadata.deletion_timestamp.is_some() {
            self.forget_pending(&uid);
            return;
        }
        let needs = PodNeeds::from_pod(&pod).map(|mut n| {
            n.group = group;
            Arc::new(n)
        });
        if let Some(p) = self.pending.get_mut(&uid) {
            let changed = match (&p.needs, &needs) {
                (Ok(a), Ok(b)) => a != b,
                (Err(a), Err(b)) => a != b,
                _ => true,
            };
            if changed {
                p.needs = needs;
                if matches!(p.at, Where::Unschedulable { .. }) {
                    self.activate(&uid);
                }
            }
            return;
        }
        if needs.as_ref().is_ok_and(|n| n.group.is_some()) {
            // A gang's new pod may complete its quorum: its parked members try again.
            self.cluster_changed();
        }
        let priority = spec.and_then(|s| s.priority).unwrap_or(0);
        self.seq += 1;
        let key = (Reverse(priority), self.seq);
        self.pending.insert(
            uid.clone(),
            Pending {
                ns: pod.namespace().unwrap_or_default(),
                name: pod.name_any(),
                needs,
                key,
                at: Where::Active,
                attempts: 0,
                reported: None,
            },
        );
        self.active.insert(key, uid);
    }

    fn delete_pod(&mut self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.forget_pending(&uid);
        self.unbind(&uid);
    }

    fn pod_event(&mut self, ev: watcher::Event<SchedPod>) {
        match ev {
            watcher::Event::Apply(p) => self.apply_pod(p),
            watcher::Event::Delete(p) => self.delete_pod(&p.pod),
            watcher::Event::Init => self.pod_relist = Some(HashSet::new()),
            watcher::Event::InitApply(p) => self.apply_pod(p),
            watcher::Event::InitDone => {
                if let Some(seen) = self.pod_relist.take() {
                    let gone: Vec<String> = self
                        .bound
                        .keys()
                        .chain(self.pending.keys())
                        .filter(|u| !seen.contains(*u))
                        .cloned()
                        .collect();
                    for u in gone {
                        self.forget_pending(&u);
                        self.unbind(&u);
                    }
                }
                self.pods_synced = true;
            }
        }
    }

    fn rebuild_node_index(&mut self) {
        self.node_order = self.nodes.keys().cloned().collect();
        self.by_host.clear();
        for n in self.nodes.values() {
            if let Some(h) = n.hostname() {
                self.by_host
                    .entry(h.to_string())
                    .or_default()
                    .push(n.name.clone());
            }
        }
    }

    fn apply_node(&mut self, node: &Node) {
        let v = NodeView::from_node(node);
        if let Some(seen) = &mut self.node_relist {
            seen.insert(v.name.clone());
        }
        let changed = self.nodes.get(&v.name) != Some(&v);
        if changed {
            let new = !self.nodes.contains_key(&v.name);
            let relabel = self.nodes.get(&v.name).map(|o| o.hostname()) != Some(v.hostname());
            self.nodes.insert(v.name.clone(), v);
            if new || relabel {
                self.rebuild_node_index();
            }
            self.cluster_changed();
        }
    }

    fn node_event(&mut self, ev: watcher::Event<Node>) {
        match ev {
            watcher::Event::Apply(n) | watcher::Event::InitApply(n) => self.apply_node(&n),
            watcher::Event::Delete(n) => {
                if self.nodes.remove(&n.name_any()).is_some() {
                    self.rebuild_node_index();
                }
            }
            watcher::Event::Init => self.node_relist = Some(HashSet::new()),
            watcher::Event::InitDone => {
                if let Some(seen) = self.node_relist.take() {
                    let before = self.nodes.len();
                    self.nodes.retain(|k, _| seen.contains(k));
                    if self.nodes.len() != before {
                        self.rebuild_node_index();
                    }
                }
                self.nodes_synced = true;
            }
        }
    }

    fn backoff(&self, attempts: u32) -> Duration {
        let d = self
            .opts
            .initial_backoff
            .saturating_mul(1u32 << attempts.saturating_sub(1).min(16));
        d.min(self.opts.max_backoff)
    }

    /// Move unschedulable pods whose retry is due back to the active queue.
    fn requeue(&mut self, now: Instant) {
        if self.unsched.is_empty() {
            return;
        }
        // At most every 100 ms: a pass over every unschedulable pod.
        if self
            .last_flush
            .is_some_and(|t| now.duration_since(t) < Duration::from_millis(100))
        {
            return;
        }
        self.last_flush = Some(now);
        let mut due = Vec::new();
        for uid in &self.unsched {
            if let Some(Pending {
                at:
                    Where::Unschedulable {
                        retry_at,
                        since,
                        epoch,
                    },
                ..
            }) = self.pending.get(uid)
            {
                let woken = self.epoch > *epoch;
                let periodic = now.duration_since(*since) >= self.opts.flush_interval;
                if (woken && *retry_at <= now) || periodic {
                    due.push(uid.clone());
                }
            }
        }
        for uid in due {
            self.activate(&uid);
        }
    }

    /// Pick a node for one pod (`pod`: namespace, name, uid): `Ok(node)` with the writes its
    /// claims need before the bind, or the FitError message.
    fn place(
        &mut self,
        needs: &PodNeeds,
        pod: (&str, &str, &str),
    ) -> Result<(String, Vec<ClaimWrite>), String> {
        let total = self.nodes.len();
        let mut reasons: HashMap<Reason, usize> = HashMap::new();
        let empty = Res::default();
        let note = |rs: Vec<Reason>, reasons: &mut HashMap<Reason, usize>| {
            for r in rs {
                *reasons.entry(r).or_default() += 1;
            }
        };
        // PreFilter of DynamicResources.
        let claims = if needs.claims.is_empty() {
            Vec::new()
        } else {
            let Some(dra) = self.dra.as_ref() else {
                return Err(format!(
                    "0/{total} nodes are available: resource.k8s.io/v1 is not served."
                ));
            };
            dra.prefilter(pod.0, pod.2, &needs.claims)
                .map_err(|m| format!("0/{total} nodes are available: {m}."))?
        };
        // Filter of DynamicResources on a node that passed the others.
        let dra_filter = |dra: &mut Option<Dra>,
                          node: &NodeView,
                          reasons: &mut HashMap<Reason, usize>|
         -> Result<Option<Vec<ClaimWrite>>, String> {
            if claims.is_empty() {
                return Ok(Some(Vec::new()));
            }
            let dra = dra.as_mut().expect("checked in PreFilter");
            match dra.filter(&node.name, &node.labels, (pod.1, pod.2), &claims) {
                Ok(w) => Ok(Some(w)),
                Err(Refusal::Node(r)) => {
                    *reasons.entry(Reason::Dra(r)).or_default() += 1;
                    Ok(None)
                }
                Err(Refusal::Error(e)) => {
                    Err(format!("running Filter plugin \"DynamicResources\": {e}"))
                }
            }
        };
        if let Some(pin) = &needs.pin {
            let mut cands: Vec<&String> = pin
                .names
                .iter()
                .filter(|n| self.nodes.contains_key(*n))
                .collect();
            for h in &pin.hosts {
                cands.extend(self.by_host.get(h).into_iter().flatten());
            }
            cands.sort();
            cands.dedup();
            let mut best: Option<(i64, &String, Vec<ClaimWrite>)> = None;
            for name in &cands {
                let node = &self.nodes[*name];
                let req = self.requested.get(*name).unwrap_or(&empty);
                match filter::check(needs, node, req) {
                    Ok(()) => {
                        let Some(w) = dra_filter(&mut self.dra, node, &mut reasons)? else {
                            continue;
                        };
                        let s = filter::score(needs, node, req);
                        if best.as_ref().is_none_or(|(b, _, _)| s > *b) {
                            best = Some((s, name, w));
                        }
                    }
                    Err(rs) => note(rs, &mut reasons),
                }
            }
            if let Some((_, n, w)) = best {
                return Ok((n.clone(), w));
            }
            let others = total - cands.len();
            if others > 0 {
                *reasons.entry(Reason::Affinity).or_default() += others;
            }
            return Err(filter::fit_error(total, &reasons));
        }
        if total == 0 {
            return Err(filter::fit_error(0, &reasons));
        }
        let want = filter::feasible_to_find(total);
        let start = self.next_start % total;
        let mut found: Vec<(i64, usize, Vec<ClaimWrite>)> = Vec::new();
        let mut examined = 0;
        for k in 0..total {
            let i = (start + k) % total;
            examined += 1;
            let name = &self.node_order[i];
            let node = &self.nodes[name];
            let req = self.requested.get(name).unwrap_or(&empty);
            match filter::check(needs, node, req) {
                Ok(()) => {
                    let Some(w) = dra_filter(&mut self.dra, node, &mut reasons)? else {
                        continue;
                    };
                    found.push((filter::score(needs, node, req), i, w));
                    if found.len() >= want {
                        break;
                    }
                }
                Err(rs) => note(rs, &mut reasons),
            }
        }
        self.next_start = (start + examined) % total;
        // Highest score; among equals the first found (round-robin spreads ties).
        let mut best: Option<(i64, usize, Vec<ClaimWrite>)> = None;
        for f in found {
            if best.as_ref().is_none_or(|(bs, _, _)| f.0 > *bs) {
                best = Some(f);
            }
        }
        match best {
            Some((_, i, w)) => Ok((self.node_order[i].clone(), w)),
            None => Err(filter::fit_error(total, &reasons)),
        }
    }

    /// One scheduling pass: up to `room` binds.
    fn schedule(&mut self, now: Instant, room: usize, stats: &SchedulerStats) -> Vec<Write> {
        let mut out = Vec::new();
        if !(self.nodes_synced && self.pods_synced) {
            return out;
        }
        self.requeue(now);
        let mut binds = 0;
        while binds < room {
            let Some((_, uid)) = self.active.pop_first() else {
                break;
            };
            let Some(p) = self.pending.get(&uid) else {
                continue;
            };
            let gang = match &p.needs {
                Ok(n) => n.group.clone().map(|g| (p.ns.clone(), g)),
                Err(_) => None,
            };
            if let Some((ns, group)) = gang {
                let policy = self.groups.as_ref().and_then(|g| g.policy(&ns, &group));
                match policy {
                    // PreEnqueue: no group yet, or a gang short of pods: wait, unreported.
                    None => {
                        self.park(&uid, now);
                        continue;
                    }
                    Some(Some(min)) => {
                        binds += self.schedule_gang(&ns, &group, min, now, stats, &mut out);
                        continue;
                    }
                    Some(None) => {}
                }
            }
            match self.try_place(&uid) {
                Ok((node, req, claims)) => {
                    self.assume(&uid, &node, req, &claims);
                    let p = &self.pending[&uid];
                    out.push(Write::Bind {
                        uid: uid.clone(),
                        ns: p.ns.clone(),
                        name: p.name.clone(),
                        node,
                        claims,
                    });
                    binds += 1;
                }
                Err(message) => self.fail(&uid, message, now, stats),
            }
        }
        out
    }

    /// Places one pending pod.
    fn try_place(&mut self, uid: &str) -> Result<(String, Res, Vec<ClaimWrite>), String> {
        let p = &self.pending[uid];
        match &p.needs {
            Ok(n) => {
                let n = n.clone();
                let (ns, name) = (p.ns.clone(), p.name.clone());
                self.place(&n, (&ns, &name, uid))
                    .map(|(node, w)| (node, n.requests.clone(), w))
            }
            Err(e) => Err(format!("0/{} nodes are available: {e}.", self.nodes.len())),
        }
    }

    /// Assumes a pod on a node (and its claims' allocations) until the bind is confirmed.
    fn assume(&mut self, uid: &str, node: &str, req: Res, claims: &[ClaimWrite]) {
        if let Some(p) = self.pending.get_mut(uid) {
            p.at = Where::Assumed;
        }
        self.bind_local(uid, node, req);
        if let Some(d) = self.dra.as_mut() {
            d.assume(claims);
        }
    }

    /// Undoes [`State::assume`] (a gang that did not fit whole, a failed bind).
    fn unassume(&mut self, uid: &str, claims: &[ClaimWrite]) {
        self.unbind(uid);
        if let Some(d) = self.dra.as_mut() {
            d.forget(claims);
        }
    }

    /// An unschedulable pod: reported (once per message), retried after its backoff.
    fn fail(&mut self, uid: &str, message: String, now: Instant, stats: &SchedulerStats) {
        stats.unschedulable.fetch_add(1, Ordering::Relaxed);
        let Some(p) = self.pending.get_mut(uid) else {
            return;
        };
        p.attempts += 1;
        let attempts = p.attempts;
        if p.reported.as_deref() != Some(message.as_str()) {
            p.reported = Some(message.clone());
            self.reports.push_back(Write::Report {
                uid: uid.to_string(),
                ns: p.ns.clone(),
                name: p.name.clone(),
                message,
            });
        }
        let retry_at = now + self.backoff(attempts);
        let epoch = self.epoch;
        self.mark_unschedulable(uid, retry_at, epoch);
    }

    /// A pod that may not be attempted yet (PreEnqueue): waits for a cluster change.
    fn park(&mut self, uid: &str, now: Instant) {
        let epoch = self.epoch;
        let retry = now + self.opts.initial_backoff;
        self.mark_unschedulable(uid, retry, epoch);
    }

    /// Places every pending pod of a gang of at least `min` at once, or none of them.
    fn schedule_gang(
        &mut self,
        ns: &str,
        group: &str,
        min: u32,
        now: Instant,
        stats: &SchedulerStats,
        out: &mut Vec<Write>,
    ) -> usize {
        let in_group = |n: &Result<Arc<PodNeeds>, String>| {
            n.as_ref().is_ok_and(|n| n.group.as_deref() == Some(group))
        };
        let mut members: Vec<(u64, String)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.ns == ns && in_group(&p.needs) && p.at != Where::Assumed)
            .map(|(u, p)| (p.key.1, u.clone()))
            .collect();
        members.sort();
        let members: Vec<String> = members.into_iter().map(|(_, u)| u).collect();
        let bound = self
            .bound_group
            .values()
            .filter(|(n, g)| n == ns && g == group)
            .count();
        if members.len() + bound < min as usize {
            for u in &members {
                self.park(u, now);
            }
            return 0;
        }
        let mut placed: Vec<(String, String, Vec<ClaimWrite>)> = Vec::new();
        for u in &members {
            match self.try_place(u) {
                Ok((node, req, claims)) => {
                    self.assume(u, &node, req, &claims);
                    placed.push((u.clone(), node, claims));
                }
                Err(message) => {
                    for (pu, _, claims) in &placed {
                        self.unassume(pu, claims);
                    }
                    for m in &members {
                        if let Some(p) = self.pending.get_mut(m) {
                            p.at = Where::Active;
                        }
                        self.fail(m, message.clone(), now, stats);
                    }
                    return 0;
                }
            }
        }
        let n = placed.len();
        for (u, node, claims) in placed {
            let p = &self.pending[&u];
            let (pns, name, key) = (p.ns.clone(), p.name.clone(), p.key);
            self.active.remove(&key);
            self.unsched.remove(&u);
            out.push(Write::Bind {
                uid: u,
                ns: pns,
                name,
                node,
                claims,
            });
        }
        n
    }

    /// The resourceclaim controller's sweep: releases claims reserved for pods that are gone
    /// or finished (all of them: the allocation is cleared and the delete-protection
    /// finalizer removed, so a deleted claim goes).
    fn sweep_claims(&mut self, now: Instant) {
        if !self.pods_synced {
            return;
        }
        let Some(dra) = self.dra.as_ref() else {
            return;
        };
        if self
            .last_sweep
            .is_some_and(|t| now.duration_since(t) < Duration::from_millis(200))
        {
            return;
        }
        self.last_sweep = Some(now);
        self.releasing
            .retain(|_, t| now.duration_since(*t) < Duration::from_secs(5));
        let protect = muster_operator::controller::dra::DELETE_PROTECTION;
        let mut writes = Vec::new();
        for (key, c) in dra.claims() {
            if self.releasing.contains_key(key) {
                continue;
            }
            let st = c.status.as_ref();
            let reserved = st.map(|s| s.reserved_for.as_slice()).unwrap_or(&[]);
            let valid: Vec<_> = reserved
                .iter()
                .filter(|r| self.pending.contains_key(&r.uid) || self.bound.contains_key(&r.uid))
                .cloned()
                .collect();
            let has_fin = c.finalizers().iter().any(|f| f == protect);
            let allocated = st.is_some_and(|s| s.allocation.is_some());
            let deleting = c.metadata.deletion_timestamp.is_some();
            let drop_fin = has_fin && valid.is_empty();
            let without_fin = || {
                c.finalizers()
                    .iter()
                    .filter(|f| *f != protect)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            if valid.len() < reserved.len() {
                writes.push(Write::Release {
                    ns: key.0.clone(),
                    name: key.1.clone(),
                    resource_version: c.resource_version().unwrap_or_default(),
                    deallocate: valid.is_empty() && has_fin && allocated,
                    reserved_for: valid,
                    finalizers: drop_fin.then(without_fin),
                });
            } else if reserved.is_empty() && deleting && has_fin {
                writes.push(Write::Release {
                    ns: key.0.clone(),
                    name: key.1.clone(),
                    resource_version: c.resource_version().unwrap_or_default(),
                    reserved_for: Vec::new(),
                    deallocate: allocated,
                    finalizers: Some(without_fin()),
                });
            }
        }
        for w in writes {
            if let Write::Release { ns, name, .. } = &w {
                self.releasing.insert((ns.clone(), name.clone()), now);
            }
            self.reports.push_back(w);
        }
    }

    fn bind_done(&mut self, done: BindDone, stats: &SchedulerStats) {
        let BindDone {
            uid,
            ns,
            name,
            node,
            res,
            claims,
            claim_failed,
        } = done;
        match res {
            Ok(()) => {
                stats.bound.fetch_add(1, Ordering::Relaxed);
                // The watch shows it bound soon (or already has); it stays assumed until then.
                if self.opts.scheduled_events {
                    self.reports.push_back(Write::Scheduled {
                        uid,
                        ns,
                        name,
                        node,
                    });
                }
            }
            Err(e) => {
                stats.bind_errors.fetch_add(1, Ordering::Relaxed);
                self.unassume(&uid, &claims);
                let gone = !claim_failed
                    && matches!(&e, kube::Error::Api(s) if s.code == 404 || s.code == 409);
                if gone {
                    // Deleted, or bound by someone else: the watch tells the truth.
                    tracing::debug!(%uid, error = %e, "bind refused");
                    self.forget_pending(&uid);
                } else if let Some(p) = self.pending.get_mut(&uid) {
                    tracing::debug!(%uid, error = %e, "bind failed; retrying");
                    p.attempts += 1;
                    let attempts = p.attempts;
                    let retry_at = Instant::now() + self.backoff(attempts);
                    // Epoch 0: counts as woken, so it is retried after the backoff.
                    self.mark_unschedulable(&uid, retry_at, 0);
                    self.cluster_changed();
                }
            }
        }
    }
}

struct BindDone {
    uid: String,
    ns: String,
    name: String,
    node: String,
    res: Result<(), kube::Error>,
    /// The claim writes made before the bind (undone in the cache on failure).
    claims: Vec<ClaimWrite>,
    /// The failure was a claim write's (the pod is retried), not the bind's.
    claim_failed: bool,
}

type BindFut = BoxFuture<'static, BindDone>;
type ReportFut = BoxFuture<'static, Option<String>>;

/// PreBind's claim writes: the delete-protection finalizer, then the allocation and the
/// reservation in the status, each with the resourceVersion read as a precondition.
async fn write_claim(client: &Client, w: &ClaimWrite) -> Result<(), kube::Error> {
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &w.key.0);
    let mut rv = w.resource_version.clone();
    if let Some(f) = &w.finalizers {
        let c = api
            .patch(
                &w.key.1,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": f, "resourceVersion": rv}})),
            )
            .await?;
        rv = c.metadata.resource_version.unwrap_or_default();
    }
    let mut patch = w.status_patch();
    patch["metadata"]["resourceVersion"] = json!(rv);
    api.patch_status(&w.key.1, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

fn bind_future(
    client: &Client,
    uid: String,
    ns: String,
    name: String,
    node: String,
    claims: Vec<ClaimWrite>,
) -> BindFut {
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let client = client.clone();
    async move {
        for w in &claims {
            if let Err(e) = write_claim(&client, w).await {
                return BindDone {
                    uid,
                    ns,
                    name,
                    node,
                    res: Err(e),
                    claims,
                    claim_failed: true,
                };
            }
        }
        let body = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let res = api
            .create_subresource::<serde_json::Value, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &body,
            )
            .await
            .map(|_| ());
        BindDone {
            uid,
            ns,
            name,
            node,
            res,
            claims,
            claim_failed: false,
        }
    }
    .boxed()
}

static EVENT_SEQ: AtomicU64 = AtomicU64::new(0);

/// The pod an event is about.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PodRef<'a> {
    pub ns: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// A core/v1 Event about a pod from `component`; `kind` is `Normal` or `Warning`.
pub(crate) fn pod_event(
    pod: PodRef<'_>,
    kind: &str,
    reason: &str,
    message: &str,
    component: &str,
    now: jiff::Timestamp,
) -> Event {
    let PodRef { ns, name: pod, uid } = pod;
    let n = EVENT_SEQ.fetch_add(1, Ordering::Relaxed);
    let name = format!(
        "{pod}.{:x}",
        (now.as_nanosecond() as u128 as u64).wrapping_add(n)
    );
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": pod, "uid": uid},
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": format!("{component}-muster-sim"),
        "firstTimestamp": Time(now),
        "lastTimestamp": Time(now),
        "count": 1,
    }))
    .expect("a well-formed Event")
}

fn report_future(client: &Client, w: Write, clock: &SimClock, component: &str) -> ReportFut {
    let now = clock.now();
    let client = client.clone();
    let component = component.to_string();
    async move {
        match w {
            Write::Report {
                uid,
                ns,
                name,
                message,
            } => {
                let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let patch = json!({"status": {"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": message, "lastProbeTime": null, "lastTransitionTime": Time(now)}]}});
                let ok = pods
                    .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
                    .await
                    .is_ok();
                let events: Api<Event> = Api::namespaced(client, &ns);
                let ev = pod_event(
                    PodRef {
                        ns: &ns,
                        name: &name,
                        uid: &uid,
                    },
                    "Warning",
                    "FailedScheduling",
                    &message,
                    &component,
                    now,
                );
                let ok = ok && events.create(&PostParams::default(), &ev).await.is_ok();
                (!ok).then_some(uid)
            }
            Write::Scheduled {
                uid,
                ns,
                name,
                node,
            } => {
                let events: Api<Event> = Api::namespaced(client, &ns);
                let ev = pod_event(
                    PodRef {
                        ns: &ns,
                        name: &name,
                        uid: &uid,
                    },
                    "Normal",
                    "Scheduled",
                    &format!("Successfully assigned {ns}/{name} to {node}"),
                    &component,
                    now,
                );
                let _ = events.create(&PostParams::default(), &ev).await;
                None
            }
            Write::Release {
                ns,
                name,
                resource_version,
                reserved_for,
                deallocate,
                finalizers,
            } => {
                let api: Api<ResourceClaim> = Api::namespaced(client, &ns);
                let mut st = json!({
                    "reservedFor": if reserved_for.is_empty() { json!(null) } else { json!(reserved_for) },
                });
                if deallocate {
                    st["allocation"] = json!(null);
                }
                let patch = json!({"metadata": {"resourceVersion": resource_version}, "status": st});
                let res = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await;
                if let (Ok(c), Some(f)) = (res, finalizers) {
                    let rv = c.metadata.resource_version.unwrap_or_default();
                    let _ = api
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(
                                json!({"metadata": {"finalizers": f, "resourceVersion": rv}}),
                            ),
                        )
                        .await;
                }
                None
            }
            Write::Bind { .. } => None,
        }
    }
    .boxed()
}

/// Which optional APIs the server serves (what feature gates give kube-scheduler).
async fn served(client: &Client) -> (bool, Option<ApiResource>) {
    let has = |gv: &'static str, r: &'static str| {
        let client = client.clone();
        async move {
            client
                .list_api_group_resources(gv)
                .await
                .is_ok_and(|l| l.resources.iter().any(|x| x.name == r))
        }
    };
    let dra = has("resource.k8s.io/v1", "resourceclaims").await;
    let groups = if has("scheduling.k8s.io/v1alpha2", "podgroups").await {
        Some(ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("scheduling.k8s.io", "v1alpha2", "PodGroup"),
            "podgroups",
        ))
    } else if has("scheduling.k8s.io/v1alpha1", "workloads").await {
        Some(ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("scheduling.k8s.io", "v1alpha1", "Workload"),
            "workloads",
        ))
    } else {
        None
    };
    (dra, groups)
}

type EventStream<K> =
    futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// A watch, or nothing (for an API that is not served).
fn watch_or_pending<K>(api: Option<Api<K>>) -> EventStream<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    match api {
        Some(a) => watcher(a, watcher::Config::default())
            .default_backoff()
            .boxed(),
        None => futures::stream::pending().boxed(),
    }
}

/// A watch of Workloads or PodGroups, or nothing.
fn watch_groups(client: &Client, ar: Option<&ApiResource>) -> EventStream<DynamicObject> {
    match ar {
        Some(ar) => watcher::watcher(
            Api::<DynamicObject>::all_with(client.clone(), ar),
            watcher::Config::default(),
        )
        .default_backoff()
        .boxed(),
        None => futures::stream::pending().boxed(),
    }
}

impl State {
    fn claim_event(&mut self, ev: watcher::Event<ResourceClaim>) {
        let Some(d) = self.dra.as_mut() else {
            return;
        };
        match ev {
            watcher::Event::Apply(c) | watcher::Event::InitApply(c) => {
                let key = (c.namespace().unwrap_or_default(), c.name_any());
                if let Some(seen) = &mut self.claim_relist {
                    seen.insert(key.clone());
                }
                self.releasing.remove(&key);
                d.apply_claim(c);
            }
            watcher::Event::Delete(c) => {
                let (ns, n) = (c.namespace().unwrap_or_default(), c.name_any());
                self.releasing.remove(&(ns.clone(), n.clone()));
                d.delete_claim(&ns, &n);
            }
            watcher::Event::Init => self.claim_relist = Some(HashSet::new()),
            watcher::Event::InitDone => {
                if let Some(seen) = self.claim_relist.take() {
                    d.retain_claims(&seen);
                }
            }
        }
        self.cluster_changed();
    }

    fn slice_event(&mut self, ev: watcher::Event<ResourceSlice>) {
        let Some(d) = self.dra.as_mut() else {
            return;
        };
        match ev {
            watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                if let Some(seen) = &mut self.slice_relist {
                    seen.insert(s.name_any());
                }
                d.apply_slice(s);
            }
            watcher::Event::Delete(s) => d.delete_slice(&s.name_any()),
            watcher::Event::Init => self.slice_relist = Some(HashSet::new()),
            watcher::Event::InitDone => {
                if let Some(seen) = self.slice_relist.take() {
                    d.retain_slices(&seen);
                }
            }
        }
        self.cluster_changed();
    }

    fn class_event(&mut self, ev: watcher::Event<DeviceClass>) {
        let Some(d) = self.dra.as_mut() else {
            return;
        };
        match ev {
            watcher::Event::Apply(c) | watcher::Event::InitApply(c) => d.apply_class(c),
            watcher::Event::Delete(c) => d.delete_class(&c.name_any()),
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
        self.cluster_changed();
    }

    fn group_event(&mut self, ev: watcher::Event<DynamicObject>) {
        let Some(g) = self.groups.as_mut() else {
            return;
        };
        match ev {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => g.apply(&o),
            watcher::Event::Delete(o) => g.delete(&o),
            watcher::Event::Init => g.clear(),
            watcher::Event::InitDone => {}
        }
        self.cluster_changed();
    }
}

async fn run(
    client: Client,
    clock: SimClock,
    opts: SchedulerOptions,
    stats: Arc<SchedulerStats>,
    mut stop: watch::Receiver<bool>,
) {
    let pods: Api<SchedPod> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let (dra_served, groups_ar) = served(&client).await;
    let mut pod_stream = pin!(
        watcher(
            pods,
            watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
        )
        .default_backoff()
    );
    let mut node_stream = pin!(watcher(nodes, watcher::Config::default()).default_backoff());
    let mut claim_stream =
        watch_or_pending(dra_served.then(|| Api::<ResourceClaim>::all(client.clone())));
    let mut slice_stream =
        watch_or_pending(dra_served.then(|| Api::<ResourceSlice>::all(client.clone())));
    let mut class_stream =
        watch_or_pending(dra_served.then(|| Api::<DeviceClass>::all(client.clone())));
    let mut group_stream = watch_groups(&client, groups_ar.as_ref());
    let mut st = State {
        opts: opts.clone(),
        dra: dra_served.then(Dra::default),
        groups: groups_ar.map(|_| Groups::default()),
        ..State::default()
    };
    let mut binds: FuturesUnordered<BindFut> = FuturesUnordered::new();
    let mut reports: FuturesUnordered<ReportFut> = FuturesUnordered::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            ev = pod_stream.next() => match ev {
                Some(Ok(e)) => st.pod_event(e),
                Some(Err(e)) => tracing::debug!(error = %e, "scheduler pod watch"),
                None => break,
            },
            ev = node_stream.next() => match ev {
                Some(Ok(e)) => st.node_event(e),
                Some(Err(e)) => tracing::debug!(error = %e, "scheduler node watch"),
                None => break,
            },
            Some(ev) = claim_stream.next() => match ev {
                Ok(e) => st.claim_event(e),
                Err(e) => tracing::debug!(error = %e, "scheduler claim watch"),
            },
            Some(ev) = slice_stream.next() => match ev {
                Ok(e) => st.slice_event(e),
                Err(e) => tracing::debug!(error = %e, "scheduler slice watch"),
            },
            Some(ev) = class_stream.next() => match ev {
                Ok(e) => st.class_event(e),
                Err(e) => tracing::debug!(error = %e, "scheduler device class watch"),
            },
            Some(ev) = group_stream.next() => match ev {
                Ok(e) => st.group_event(e),
                Err(e) => tracing::debug!(error = %e, "scheduler gang group watch"),
            },
            Some(done) = binds.next(), if !binds.is_empty() => st.bind_done(done, &stats),
            Some(failed) = reports.next(), if !reports.is_empty() => {
                if let Some(uid) = failed && let Some(p) = st.pending.get_mut(&uid) {
                    p.reported = None;
                }
            }
            _ = tick.tick() => {}
        }
        // Take in everything already there, so one pass schedules a batch.
        for _ in 0..100_000 {
            match pod_stream.next().now_or_never() {
                Some(Some(Ok(e))) => st.pod_event(e),
                Some(Some(Err(_))) => {}
                _ => break,
            }
        }
        while let Some(Some(Ok(e))) = node_stream.next().now_or_never() {
            st.node_event(e);
        }
        while let Some(Some(Ok(e))) = claim_stream.next().now_or_never() {
            st.claim_event(e);
        }
        while let Some(Some(Ok(e))) = slice_stream.next().now_or_never() {
            st.slice_event(e);
        }
        while let Some(Some(done)) = binds.next().now_or_never() {
            st.bind_done(done, &stats);
        }
        let room = opts.max_in_flight.saturating_sub(binds.len());
        for w in st.schedule(Instant::now(), room, &stats) {
            if let Write::Bind {
                uid,
                ns,
                name,
                node,
                claims,
            } = w
            {
                binds.push(bind_future(&client, uid, ns, name, node, claims));
            }
        }
        st.sweep_claims(Instant::now());
        while reports.len() < opts.max_reports_in_flight {
            let Some(w) = st.reports.pop_front() else {
                break;
            };
            reports.push(report_future(&client, w, &clock, &opts.name));
        }
    }
}
