//! The scheduling cycle: filter and pick a node for each pod (with its claims), gangs all or
//! nothing, failures reported and retried, bind outcomes; and the resourceclaim controller's
//! sweep.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use super::SchedulerStats;
use super::dra::{ClaimWrite, Dra, Refusal};
use super::filter::{self, NodeView, PodNeeds, Reason, Res};
use super::state::{State, Where};
use super::writes::{BindDone, Write};

impl State {
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
    pub(super) fn schedule(
        &mut self,
        now: Instant,
        room: usize,
        stats: &SchedulerStats,
    ) -> Vec<Write> {
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
    pub(super) fn sweep_claims(&mut self, now: Instant) {
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

    pub(super) fn bind_done(&mut self, done: BindDone, stats: &SchedulerStats) {
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
