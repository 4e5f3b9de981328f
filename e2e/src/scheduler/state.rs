//! The scheduler's cache and queue: pods, nodes, claims and gang groups as watched, what is
//! bound or assumed where, and which pods wait (active, or unschedulable until a retry).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use muster_operator::controller::dra::{DeviceClass, ResourceClaim, ResourceSlice};

use super::SchedulerOptions;
use super::dra::Dra;
use super::filter::{NodeView, PodNeeds, Res};
use super::gang::{Groups, SchedPod};
use super::writes::Write;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Where {
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

pub(super) struct Pending {
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) needs: Result<Arc<PodNeeds>, String>,
    pub(super) key: (Reverse<i32>, u64),
    pub(super) at: Where,
    pub(super) attempts: u32,
    pub(super) reported: Option<String>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) opts: SchedulerOptions,
    pub(super) nodes: BTreeMap<String, NodeView>,
    pub(super) node_order: Vec<String>,
    pub(super) by_host: HashMap<String, Vec<String>>,
    pub(super) requested: HashMap<String, Res>,
    pub(super) bound: HashMap<String, (String, Res)>,
    pub(super) pending: HashMap<String, Pending>,
    pub(super) active: BTreeMap<(Reverse<i32>, u64), String>,
    pub(super) seq: u64,
    pub(super) next_start: usize,
    pub(super) nodes_synced: bool,
    pub(super) pods_synced: bool,
    pub(super) pod_relist: Option<HashSet<String>>,
    pub(super) node_relist: Option<HashSet<String>>,
    /// Unschedulable pods (to retry).
    pub(super) unsched: HashSet<String>,
    /// Bumped on every cluster change that may let unschedulable pods fit.
    pub(super) epoch: u64,
    pub(super) last_flush: Option<Instant>,
    pub(super) reports: VecDeque<Write>,
    /// DRA state, where `resource.k8s.io/v1` is served.
    pub(super) dra: Option<Dra>,
    /// Gang groups, where the Workload/PodGroup API is served.
    pub(super) groups: Option<Groups>,
    /// Claims whose release is in flight (so a sweep does not write it twice), since when.
    pub(super) releasing: HashMap<(String, String), Instant>,
    /// Gang group of each bound pod (by uid): (namespace, group).
    pub(super) bound_group: HashMap<String, (String, String)>,
    pub(super) last_sweep: Option<Instant>,
    pub(super) claim_relist: Option<HashSet<(String, String)>>,
    pub(super) slice_relist: Option<HashSet<String>>,
}

impl State {
    pub(super) fn unbind(&mut self, uid: &str) {
        self.bound_group.remove(uid);
        if let Some((node, r)) = self.bound.remove(uid) {
            if let Some(t) = self.requested.get_mut(&node) {
                t.sub(&r);
            }
            self.cluster_changed();
        }
    }

    pub(super) fn bind_local(&mut self, uid: &str, node: &str, r: Res) {
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
    pub(super) fn cluster_changed(&mut self) {
        self.epoch += 1;
    }

    fn activate(&mut self, uid: &str) {
        if let Some(p) = self.pending.get_mut(uid) {
            p.at = Where::Active;
            self.active.insert(p.key, uid.to_string());
            self.unsched.remove(uid);
        }
    }

    pub(super) fn forget_pending(&mut self, uid: &str) {
        if let Some(p) = self.pending.remove(uid) {
            self.active.remove(&p.key);
            self.unsched.remove(uid);
        }
    }

    pub(super) fn mark_unschedulable(&mut self, uid: &str, retry_at: Instant, epoch: u64) {
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

    pub(super) fn pod_event(&mut self, ev: watcher::Event<SchedPod>) {
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

    pub(super) fn node_event(&mut self, ev: watcher::Event<Node>) {
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

    pub(super) fn backoff(&self, attempts: u32) -> Duration {
        let d = self
            .opts
            .initial_backoff
            .saturating_mul(1u32 << attempts.saturating_sub(1).min(16));
        d.min(self.opts.max_backoff)
    }

    /// Move unschedulable pods whose retry is due back to the active queue.
    pub(super) fn requeue(&mut self, now: Instant) {
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
}

impl State {
    pub(super) fn claim_event(&mut self, ev: watcher::Event<ResourceClaim>) {
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

    pub(super) fn slice_event(&mut self, ev: watcher::Event<ResourceSlice>) {
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

    pub(super) fn class_event(&mut self, ev: watcher::Event<DeviceClass>) {
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

    pub(super) fn group_event(&mut self, ev: watcher::Event<DynamicObject>) {
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
