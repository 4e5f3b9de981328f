//! The kubelet loop: pods from the watch, their timed actions, and the writes that carry them
//! out.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use muster_operator::core::cluster_spec::NodeInfo;
use serde_json::json;
use tokio::sync::{mpsc, watch};

use super::node::SimNode;
use super::plan::{Plan, plan_of};
use super::pod::{Action, ExecPod, Exited, SimPod, State, restart_backoff};
use super::status::cond;
use super::writes::{MiscFut, PodFut, PodWrite, WriteError, pod_write, with_retries};
use super::{COMPONENT, Command, KubeletOptions, KubeletStats};
use crate::clock::{SimClock, after};
use crate::exec::{self, ExecEvent};
use crate::nodes;
use crate::scheduler::filter::Tol;

pub(super) struct Sim {
    pub(super) client: Client,
    pub(super) clock: SimClock,
    pub(super) opts: KubeletOptions,
    stats: Arc<KubeletStats>,
    pub(super) nodes: HashMap<String, SimNode>,
    pub(super) pods: HashMap<String, SimPod>,
    timers: BinaryHeap<Reverse<(Timestamp, u64, String)>>,
    ready: VecDeque<(String, u64)>,
    seq: u64,
    relist: Option<HashSet<String>>,
    pub(super) misc: VecDeque<MiscFut>,
    exec: Option<exec::Runtime>,
}

impl Sim {
    pub(super) fn schedule(&mut self, uid: &str) {
        let now = self.clock.now();
        let max_grace = self.opts.max_grace;
        let Some(p) = self.pods.get_mut(uid) else {
            return;
        };
        let failed = self.nodes.get(&p.node).and_then(|n| n.failed);
        self.seq += 1;
        p.seq = self.seq;
        if let Some((t, _)) = p.next(failed, max_grace, now) {
            self.timers.push(Reverse((t, p.seq, uid.to_string())));
        }
    }

    fn report_problems(&mut self, uid: &str, problems: Vec<String>) {
        let Some(p) = self.pods.get_mut(uid) else {
            return;
        };
        if problems.is_empty() || p.reported_problems {
            return;
        }
        p.reported_problems = true;
        tracing::warn!(pod = %p.name, namespace = %p.ns, "{}", problems.join("; "));
        let ev = crate::scheduler::pod_event(
            crate::scheduler::PodRef {
                ns: &p.ns,
                name: &p.name,
                uid: &p.uid,
            },
            "Warning",
            "InvalidSimulation",
            &problems.join("; "),
            COMPONENT,
            self.clock.now(),
        );
        let api: Api<Event> = Api::namespaced(self.client.clone(), &p.ns);
        self.misc.push_back(
            async move {
                let _ = with_retries(|| {
                    let (api, ev) = (api.clone(), ev.clone());
                    async move { api.create(&PostParams::default(), &ev).await }
                })
                .await;
            }
            .boxed(),
        );
    }

    fn apply_pod(&mut self, pod: Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Some(seen) = &mut self.relist {
            seen.insert(uid.clone());
        }
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let Some(node) = spec
            .node_name
            .clone()
            .filter(|n| self.nodes.contains_key(n))
        else {
            return;
        };
        let now = self.clock.now();
        let (plan, problems) = if self.exec.is_some() {
            // Exec mode runs the containers; the simulation's knobs do not apply.
            let (p, _) = plan_of(&pod);
            (
                Plan {
                    start: p.start,
                    ..Plan::default()
                },
                Vec::new(),
            )
        } else {
            plan_of(&pod)
        };
        let deletion = pod.metadata.deletion_timestamp.as_ref().map(|_| {
            pod.metadata
                .deletion_grace_period_seconds
                .or(spec.termination_grace_period_seconds)
                .unwrap_or(30)
        });
        if let Some(p) = self.pods.get_mut(&uid) {
            p.plan = plan;
            match (deletion, &mut p.deleting) {
                (Some(g), None) => p.deleting = Some((now, g)),
                (Some(g), Some((_, old))) if g < *old => *old = g,
                _ => {}
            }
            if let Some(x) = &mut p.exec {
                // As the kubelet re-syncs an updated pod: new labels or annotations reach its
                // downwardAPI files. A supervisor not launched yet starts from the snapshot.
                let meta_changed = x.snapshot.as_ref().is_some_and(|old| {
                    old.metadata.labels != pod.metadata.labels
                        || old.metadata.annotations != pod.metadata.annotations
                });
                if meta_changed
                    && x.supervisor
                    && let Some(rt) = &self.exec
                {
                    rt.update(&uid, pod.clone());
                }
                x.snapshot = Some(pod.clone());
                if let (Some((_, g)), Some(rt)) = (p.deleting, &self.exec)
                    && x.supervisor
                    && !x.terminating
                    && p.state != State::Terminated
                {
                    x.terminating = true;
                    let mut grace = g.max(0) as f64;
                    if let Some(cap) = self.opts.max_grace {
                        grace = grace.min(cap.as_secs_f64());
                    }
                    rt.terminate(&uid, Duration::from_secs_f64(grace));
                }
            }
        } else {
            let status = pod.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
            let started = status
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.first())
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .map(|t| t.0);
            let state = match phase {
                "Succeeded" | "Failed" => State::Terminated,
                "Running" => match started {
                    Some(t) => State::Running { started: t },
                    None => State::BackOff { until: now },
                },
                _ => State::Pending,
            };
            let restarts = status
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.first())
                .map(|c| c.restart_count.max(0) as u32)
                .unwrap_or(0);
            let names = |cs: &[k8s_openapi::api::core::v1::Container]| {
                cs.iter()
                    .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                    .collect::<Vec<_>>()
            };
            let start_delay = plan.start.unwrap_or(self.opts.start_delay.as_secs_f64());
            let tolerations = spec
                .tolerations
                .iter()
                .flatten()
                .map(|t| Tol {
                    key: t.key.clone().unwrap_or_default(),
                    exists: t.operator.as_deref() == Some("Exists"),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect.clone().unwrap_or_default(),
                    seconds: t.toleration_seconds,
                })
                .collect();
            let p = SimPod {
                ns: pod.namespace().unwrap_or_default(),
                name: pod.name_any(),
                uid: uid.clone(),
                node: node.clone(),
                containers: names(&spec.containers),
                init_containers: names(spec.init_containers.as_deref().unwrap_or_default()),
                restart_policy: spec
                    .restart_policy
                    .clone()
                    .unwrap_or_else(|| "Always".into()),
                host_network: spec.host_network.unwrap_or(false),
                tolerations,
                plan,
                reported_problems: false,
                state,
                start_time: status
                    .and_then(|s| s.start_time.as_ref())
                    .map(|t| t.0)
                    .unwrap_or(now),
                start_at: after(now, start_delay),
                deleting: deletion.map(|g| (now, g)),
                evicted: false,
                final_delete_sent: false,
                ip: status.and_then(|s| s.pod_ip.clone()),
                restarts,
                last: None,
                busy: false,
                retry_after: None,
                seq: 0,
                exec: self.exec.is_some().then(|| ExecPod {
                    snapshot: Some(pod.clone()),
                    ..ExecPod::default()
                }),
            };
            self.pods.insert(uid.clone(), p);
        }
        self.report_problems(&uid, problems);
        self.schedule(&uid);
    }

    fn pod_event(&mut self, ev: watcher::Event<Pod>) {
        match ev {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => self.apply_pod(p),
            watcher::Event::Delete(p) => {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                self.pods.remove(&uid);
                if let Some(rt) = &mut self.exec {
                    rt.forget(&uid);
                }
            }
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist.take() {
                    let gone: Vec<String> = self
                        .pods
                        .keys()
                        .filter(|u| !seen.contains(*u))
                        .cloned()
                        .collect();
                    for u in gone {
                        self.pods.remove(&u);
                        if let Some(rt) = &mut self.exec {
                            rt.forget(&u);
                        }
                    }
                }
            }
        }
    }

    /// Turn an action into a write; `None` when nothing is to be written.
    /// `due`: when the action was due, in simulated time (not later than now); what the pod
    /// reports (`startedAt`, `finishedAt`) uses it, so the simulated timeline stays exact
    /// however late the loop gets to it.
    fn begin(&mut self, uid: &str, action: Action, due: Timestamp) -> Option<PodFut> {
        let now = due;
        let p = self.pods.get_mut(uid)?;
        let node = self.nodes.get_mut(&p.node)?;
        let host_ip = nodes::internal_ip(node.index);
        if let (Some(x), Some(rt), Action::Start) = (&mut p.exec, &mut self.exec, &action)
            && x.started_at.is_none()
        {
            // Launch (or relaunch) the containers; their `Started` report leads to the write.
            if p.ip.is_none() {
                p.ip = Some(if p.host_network {
                    host_ip.clone()
                } else {
                    rt.next_ip()
                });
            }
            x.awaiting = true;
            x.ends = None;
            if x.supervisor && rt.has(uid) {
                rt.restart(uid);
            } else {
                let pod = x.snapshot.clone()?;
                x.supervisor = true;
                rt.launch(exec::pod::Launch {
                    pod,
                    ip: p.ip.clone().unwrap_or_default(),
                    host_ip: host_ip.clone(),
                    node_cpu_milli: node.info.cpu_millis,
                    node_memory_mib: node.info.memory_mib,
                });
            }
            self.seq += 1;
            p.seq = self.seq;
            return None;
        }
        let w = match &action {
            Action::Start => {
                if p.ip.is_none() {
                    p.ip = Some(if p.host_network {
                        host_ip.clone()
                    } else {
                        let ip = nodes::pod_ip(node.index, node.next_ip);
                        node.next_ip += 1;
                        ip
                    });
                }
                if p.state == State::Pending {
                    p.start_time = now;
                }
                let mut restarted = p.restarts;
                if matches!(p.state, State::BackOff { .. }) {
                    restarted += 1;
                }
                let saved = p.restarts;
                p.restarts = restarted;
                let v = p.running(&host_ip, now, now);
                p.restarts = saved;
                PodWrite::Status(v)
            }
            Action::Exit(code) => {
                let started = match p.state {
                    State::Running { started } => started,
                    _ => now,
                };
                let init_failed = p.exec.as_ref().is_some_and(|x| x.init_failed);
                if p.should_restart(*code) && !init_failed {
                    let saved = p.last.clone();
                    p.last = Some(Exited {
                        code: *code,
                        started,
                        finished: now,
                    });
                    let v = p.backoff(&host_ip, restart_backoff(p.restarts), now);
                    p.last = saved;
                    PodWrite::Status(v)
                } else {
                    PodWrite::Status(p.terminated(&host_ip, Some(*code), Some(started), now))
                }
            }
            Action::Kill(code) => {
                let started = match p.state {
                    State::Running { started } => Some(started),
                    _ => None,
                };
                PodWrite::Status(p.terminated(&host_ip, *code, started, now))
            }
            Action::FinalDelete => PodWrite::FinalDelete,
            Action::Evict => PodWrite::Evict(json!({"status": {"conditions": [
                cond("DisruptionTarget", true, now, Some("DeletionByTaintManager"),
                     Some("Taint manager: deleting due to NoExecute taint")),
            ]}})),
        };
        p.busy = true;
        Some(pod_write(&self.client, p, action, now, w))
    }

    fn complete(
        &mut self,
        uid: String,
        action: Action,
        at: Timestamp,
        res: Result<(), WriteError>,
    ) {
        let Some(p) = self.pods.get_mut(&uid) else {
            return;
        };
        p.busy = false;
        match res {
            Err(WriteError::Gone) => {
                self.pods.remove(&uid);
                return;
            }
            Err(WriteError::Failed(e)) => {
                tracing::warn!(pod = %p.name, namespace = %p.ns, error = %e, ?action, "kubelet write failed; retrying");
                p.retry_after = Some(after(self.clock.now(), 1.0));
            }
            Ok(()) => {
                p.retry_after = None;
                if let Some(x) = &mut p.exec {
                    match action {
                        Action::Start => {
                            x.awaiting = false;
                            x.started_at = None;
                        }
                        Action::Exit(_) if !x.init_failed => x.ends = None,
                        _ => {}
                    }
                }
                match action {
                    Action::Start => {
                        if matches!(p.state, State::BackOff { .. }) {
                            p.restarts += 1;
                        }
                        p.state = State::Running { started: at };
                        self.stats.started.fetch_add(1, Ordering::Relaxed);
                    }
                    Action::Exit(code) => {
                        let started = match p.state {
                            State::Running { started } => started,
                            _ => at,
                        };
                        let init_failed = p.exec.as_ref().is_some_and(|x| x.init_failed);
                        if p.should_restart(code) && !init_failed {
                            p.last = Some(Exited {
                                code,
                                started,
                                finished: at,
                            });
                            p.state = State::BackOff {
                                until: after(at, restart_backoff(p.restarts)),
                            };
                        } else {
                            p.state = State::Terminated;
                            self.stats.finished.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Action::Kill(_) => {
                        p.state = State::Terminated;
                        self.stats.finished.fetch_add(1, Ordering::Relaxed);
                    }
                    Action::FinalDelete => {
                        // Forgotten when the watch shows it gone (finalizers may hold it).
                        self.stats.deleted.fetch_add(1, Ordering::Relaxed);
                        p.final_delete_sent = true;
                    }
                    Action::Evict => p.evicted = true,
                }
            }
        }
        self.schedule(&uid);
    }

    /// A pod supervisor's report (exec mode).
    fn exec_event(&mut self, ev: ExecEvent) {
        let uid = match &ev {
            ExecEvent::Started { uid, .. } | ExecEvent::Ended { uid, .. } => uid.clone(),
        };
        let Some(x) = self.pods.get_mut(&uid).and_then(|p| p.exec.as_mut()) else {
            return;
        };
        match ev {
            ExecEvent::Started { at, inits, .. } => {
                x.started_at = Some(at);
                x.inits = Some(inits);
            }
            ExecEvent::Ended { inits, ends, .. } => {
                x.awaiting = false;
                x.init_failed = inits.iter().any(|e| e.code != 0);
                x.inits = Some(inits);
                x.ends = Some(ends);
            }
        }
        self.schedule(&uid);
    }

    /// Due actions into the ready queue.
    fn collect_due(&mut self) {
        let now = self.clock.now();
        while let Some(Reverse((t, seq, _))) = self.timers.peek() {
            if *t > now {
                break;
            }
            let seq = *seq;
            let Some(Reverse((_, _, uid))) = self.timers.pop() else {
                break;
            };
            if self.pods.get(&uid).is_some_and(|p| p.seq == seq && !p.busy) {
                self.ready.push_back((uid, seq));
            }
        }
    }

    fn next_due(&mut self) -> Option<Timestamp> {
        // Drop stale timers from the top so the sleep is for a live one.
        while let Some(Reverse((_, seq, uid))) = self.timers.peek() {
            if self.pods.get(uid).is_some_and(|p| p.seq == *seq) {
                break;
            }
            self.timers.pop();
        }
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }
}

pub(super) async fn run(
    client: Client,
    clock: SimClock,
    infos: Vec<NodeInfo>,
    opts: KubeletOptions,
    stats: Arc<KubeletStats>,
    cmds: mpsc::UnboundedReceiver<Command>,
    stop: watch::Receiver<bool>,
) {
    run_with(client, clock, infos, opts, stats, cmds, stop, None).await
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn run_with(
    client: Client,
    clock: SimClock,
    infos: Vec<NodeInfo>,
    opts: KubeletOptions,
    stats: Arc<KubeletStats>,
    mut cmds: mpsc::UnboundedReceiver<Command>,
    mut stop: watch::Receiver<bool>,
    mut rt: Option<exec::Runtime>,
) {
    let mut exec_events = rt.as_mut().map(exec::Runtime::events);
    let now = clock.now();
    let nodes = infos
        .into_iter()
        .enumerate()
        .map(|(index, info)| {
            let health = nodes::healthy_gpus(&info, now);
            (
                info.name.clone(),
                SimNode {
                    info,
                    index,
                    failed: None,
                    health,
                    next_ip: 0,
                },
            )
        })
        .collect();
    let mut sim = Sim {
        client: client.clone(),
        clock: clock.clone(),
        opts: opts.clone(),
        stats,
        nodes,
        pods: HashMap::new(),
        timers: BinaryHeap::new(),
        ready: VecDeque::new(),
        seq: 0,
        relist: None,
        misc: VecDeque::new(),
        exec: rt,
    };
    let pods: Api<Pod> = Api::all(client.clone());
    let mut stream =
        pin!(watcher(pods, watcher::Config::default().fields("spec.nodeName!=")).default_backoff());
    let mut writes: FuturesUnordered<PodFut> = FuturesUnordered::new();
    let mut misc: FuturesUnordered<MiscFut> = FuturesUnordered::new();
    let mut jumps = clock.jumps();
    let mut next_heartbeat = opts.heartbeat.map(|h| after(clock.now(), h.as_secs_f64()));
    loop {
        let due = sim.next_due();
        let wake = [due, next_heartbeat].into_iter().flatten().min();
        let sleep = match wake {
            Some(t) => clock.real_until(t),
            None => Duration::from_secs(3600),
        };
        tokio::select! {
            _ = stop.changed() => break,
            ev = stream.next() => match ev {
                Some(Ok(e)) => sim.pod_event(e),
                Some(Err(e)) => tracing::debug!(error = %e, "kubelet pod watch"),
                None => break,
            },
            Some(cmd) = cmds.recv() => match cmd {
                Command::FailNode(n, r) => sim.fail_node(&n, r),
                Command::RecoverNode(n, r) => sim.recover_node(&n, r),
                Command::GpuHealth(n, i, h, r) => sim.gpu_health(&n, i, h, r),
            },
            Some((uid, seq, action, at, res)) = writes.next(), if !writes.is_empty() => {
                let _ = seq;
                sim.complete(uid, action, at, res);
            }
            Some(()) = misc.next(), if !misc.is_empty() => {}
            Some(ev) = async { match exec_events.as_mut() { Some(r) => r.recv().await, None => std::future::pending().await } } => {
                sim.exec_event(ev);
            }
            _ = tokio::time::sleep(sleep) => {}
            _ = jumps.changed() => {}
        }
        for _ in 0..100_000 {
            match stream.next().now_or_never() {
                Some(Some(Ok(e))) => sim.pod_event(e),
                Some(Some(Err(_))) => {}
                _ => break,
            }
        }
        while let Some(Some((uid, _, action, at, res))) = writes.next().now_or_never() {
            sim.complete(uid, action, at, res);
        }
        if let (Some(h), Some(t)) = (opts.heartbeat, next_heartbeat)
            && t <= clock.now()
        {
            sim.heartbeat();
            next_heartbeat = Some(after(clock.now(), h.as_secs_f64()));
        }
        sim.collect_due();
        while writes.len() < opts.max_in_flight.max(1) {
            let Some((uid, seq)) = sim.ready.pop_front() else {
                break;
            };
            let now = clock.now();
            let max_grace = opts.max_grace;
            let Some(p) = sim.pods.get(&uid) else {
                continue;
            };
            if p.seq != seq || p.busy {
                continue;
            }
            let failed = sim.nodes.get(&p.node).and_then(|n| n.failed);
            match p.next(failed, max_grace, now) {
                Some((t, action)) if t <= now => {
                    if let Some(f) = sim.begin(&uid, action, t) {
                        writes.push(f);
                    }
                }
                _ => sim.schedule(&uid),
            }
        }
        while misc.len() < 32 {
            let Some(f) = sim.misc.pop_front() else {
                break;
            };
            misc.push(f);
        }
    }
}
