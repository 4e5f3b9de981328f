//! The agent loop: (inventory snapshot + events + processes + pods) → pure functions →
//! GpuNode status, Node labels, Events, kills → thin kube calls.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use muster_crds::v1alpha1::{BatchJob, GpuHealthState, GpuNodeStatus};

use crate::binding::{self, Evaluation, Violation};
use crate::enforce::{self, Policy, ProcessKiller, ViolationLedger};
use crate::health::{HealthBook, HealthChange, HealthConfig};
use crate::inventory::GpuInventory;
use crate::kube_io::{self, EventSpec, NodePods};
use crate::model::{GpuProcess, NodeInventory, Observation};
use crate::procfs::{ProcFs, ProcessHome};
use crate::publish::{self, PublishGate, Readiness};

/// Event reason for a process on a GPU its pod was not given.
pub const VIOLATION_REASON: &str = "GpuBindingViolation";
/// Event reason on the GpuNode when a GPU turns Unhealthy.
pub const UNHEALTHY_REASON: &str = "GpuUnhealthy";
/// Event reason on the GpuNode when a GPU turns Healthy again.
pub const RECOVERED_REASON: &str = "GpuRecovered";

/// How long a BatchJob read is trusted for pods that are not in violation.
const BATCHJOB_CACHE_TTL: SignedDuration = SignedDuration::from_secs(60);

/// The identities a pod's cgroup may carry: its UID, or a static pod's config hash.
fn pod_keys(pod: &Pod) -> impl Iterator<Item = String> + '_ {
    pod.metadata
        .uid
        .iter()
        .chain(
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(binding::CONFIG_HASH)),
        )
        .map(|s| s.to_ascii_lowercase())
}

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The Node this agent serves.
    pub node_name: String,
    /// What to do about binding violations.
    pub policy: Policy,
    /// Longest time between two status publishes.
    pub heartbeat: SignedDuration,
    /// Time between polls.
    pub poll_interval: SignedDuration,
    /// Health rules.
    pub health: HealthConfig,
    /// Root of the `/proc` tree the GPU processes' PIDs refer to.
    pub proc_root: PathBuf,
}

/// A failed cycle (it is retried at the next poll).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A Kubernetes API call failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being done.
        what: String,
        /// The client's error.
        source: kube::Error,
    },
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> AgentError {
    let what = what.into();
    move |source| AgentError::Kube { what, source }
}

/// What one cycle did (for logs and tests).
#[derive(Clone, Debug, Default)]
pub struct CycleReport {
    /// The status computed (published or not).
    pub status: GpuNodeStatus,
    /// Whether the status was written.
    pub published: bool,
    /// Whether the Node labels were written.
    pub labels_applied: bool,
    /// Health transitions.
    pub health_changes: Vec<HealthChange>,
    /// Violations seen for the first time this cycle.
    pub new_violations: Vec<Violation>,
    /// PIDs killed this cycle.
    pub killed: Vec<u32>,
    /// GPU processes outside pods.
    pub host_processes: Vec<GpuProcess>,
}

/// The node agent.
pub struct Agent {
    client: Client,
    cfg: AgentConfig,
    inventory: Box<dyn GpuInventory>,
    killer: Arc<dyn ProcessKiller>,
    procfs: ProcFs,
    health: HealthBook,
    ledger: ViolationLedger,
    /// (pid, gpu) of host processes already logged.
    seen_host: HashSet<(u32, u32)>,
    last_inventory: Option<NodeInventory>,
    gate: PublishGate,
    /// Watch cache of the node's pods.
    pods: Option<NodePods>,
    /// BatchJobs read recently, with when.
    bj_cache: HashMap<(String, String), (BatchJob, Timestamp)>,
    /// Whether the "processes not visible, hostPID?" warning was given.
    warned_invisible: bool,
    last_labels: Option<BTreeMap<String, String>>,
    gpunode_uid: Option<String>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("node", &self.cfg.node_name)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Prepares an agent: reads the node's GpuNode, if any, to carry on its GPUs' health and
    /// violation count (state lives in the API, not in this process).
    pub async fn new(
        client: Client,
        cfg: AgentConfig,
        inventory: Box<dyn GpuInventory>,
        killer: Arc<dyn ProcessKiller>,
        now: Timestamp,
    ) -> Result<Self, AgentError> {
        let existing = kube_io::get_gpunode(&client, &cfg.node_name)
            .await
            .map_err(kube_err(format!("reading GpuNode {}", cfg.node_name)))?;
        let status = existing.as_ref().and_then(|g| g.status.clone());
        let health = HealthBook::seeded(
            status
                .iter()
                .flat_map(|s| s.gpus.iter().map(|g| (g.uuid.as_str(), &g.health))),
            now,
        );
        let violations_total = status.as_ref().map_or(0, |s| s.binding_violations);
        if let Some(s) = &status {
            let unhealthy: Vec<_> = s
                .gpus
                .iter()
                .filter(|g| g.health.state == GpuHealthState::Unhealthy)
                .map(|g| g.index)
                .collect();
            tracing::info!(
                violations = violations_total,
                ?unhealthy,
                "carrying on from the published GpuNode status"
            );
        }
        let pods = NodePods::watch(&client, &cfg.node_name);
        Ok(Agent {
            procfs: ProcFs::new(cfg.proc_root.clone()),
            client,
            cfg,
            inventory,
            killer,
            health,
            ledger: ViolationLedger::starting_at(violations_total),
            seen_host: HashSet::new(),
            last_inventory: None,
            gate: PublishGate::after(status),
            pods: Some(pods),
            bj_cache: HashMap::new(),
            warned_invisible: false,
            last_labels: None,
            gpunode_uid: existing.and_then(|g| g.metadata.uid),
        })
    }

    /// Polls every `poll_interval` until `shutdown` resolves. A failed cycle is logged and
    /// retried at the next poll.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        let period = self
            .cfg
            .poll_interval
            .unsigned_abs()
            .max(std::time::Duration::from_millis(100));
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => {
                    tracing::info!("shutting down");
                    return;
                }
                _ = ticker.tick() => {
                    if let Err(e) = self.cycle(Timestamp::now()).await {
                        tracing::warn!(error = %e, "cycle failed; retrying at the next poll");
                    }
                }
            }
        }
    }

    /// One poll at `now`: observe, judge, publish, enforce.
    pub async fn cycle(&mut self, now: Timestamp) -> Result<CycleReport, AgentError> {
        let mut report = CycleReport::default();
        let node = self.cfg.node_name.clone();
        let (obs, readiness) = match self.inventory.observe(now) {
            Ok(obs) => {
                let n = obs.inventory.gpus.len();
                let r = Readiness {
                    ready: true,
                    reason: "InventoryCurrent".into(),
                    message: format!(
                        "{n} GPU{} seen by {}",
                        if n == 1 { "" } else { "s" },
                        self.inventory.describe()
                    ),
                };
                (obs, r)
            }
            Err(e) => {
                tracing::warn!(error = %e, "inventory poll failed");
                let obs = Observation {
                    inventory: self.last_inventory.clone().unwrap_or_default(),
                    ..Default::default()
                };
                (
                    obs,
                    Readiness {
                        ready: false,
                        reason: "InventoryFailed".into(),
                        message: e.to_string(),
                    },
                )
            }
        };

        if self.gpunode_uid.is_none() {
            let g = kube_io::apply_gpunode(&self.client, &node)
                .await
                .map_err(|e| {
                    let hint = match &e {
                        kube::Error::Api(s) if s.is_not_found() => {
                            " (is the gpunodes.muster.dev CRD installed?)"
                        }
                        _ => "",
                    };
                    kube_err(format!("applying GpuNode {node}{hint}"))(e)
                })?;
            self.gpunode_uid = g.metadata.uid;
        }

        // Health is judged only on a successful poll: without NVML there is nothing to judge
        // (and a quiet period is not evidence of recovery).
        if readiness.ready {
            report.health_changes =
                self.health
                    .update(&obs.inventory, &obs.events, now, &self.cfg.health);
        }
        for change in &report.health_changes {
            self.report_health(change, now).await;
        }

        let eval = self.evaluate(&obs, now).await?;
        report.host_processes = eval.host_processes.clone();
        self.log_host_processes(&eval.host_processes);
        for (p, r) in &eval.unknown_pod {
            tracing::debug!(pid = p.pid, gpu = p.gpu, pod_uid = %r.pod_uid, "GPU process of a pod not (yet) listed on this node; judged next poll");
        }
        self.enforce(&eval, now, &mut report).await;

        let status = publish::desired_status(
            &obs.inventory,
            &self.health,
            eval.usage.clone(),
            self.ledger.total(),
            &readiness,
            now,
            self.gate.last(),
        );
        if self.gate.due(&status, now, self.cfg.heartbeat) {
            if let Err(e) = kube_io::apply_status(&self.client, &node, &status).await {
                if matches!(&e, kube::Error::Api(s) if s.is_not_found()) {
                    // Someone deleted the GpuNode: create it again next poll.
                    self.gpunode_uid = None;
                }
                return Err(kube_err(format!("applying GpuNode {node} status"))(e));
            }
            self.gate.published(status.clone(), now);
            report.published = true;
        }

        if readiness.ready {
            let labels = publish::node_labels(&obs.inventory);
            if self.last_labels.as_ref() != Some(&labels) {
                let applied = kube_io::apply_node_labels(&self.client, &node, &labels)
                    .await
                    .map_err(kube_err(format!("labelling Node {node}")))?;
                if applied.is_some() {
                    tracing::info!(?labels, "Node labels applied");
                    self.last_labels = Some(labels);
                    report.labels_applied = true;
                } else {
                    tracing::warn!(
                        "Node {node} does not exist: labels not applied (retrying next poll)"
                    );
                }
            }
            self.last_inventory = Some(obs.inventory);
        }
        report.status = status;
        Ok(report)
    }

    async fn report_health(&self, change: &HealthChange, now: Timestamp) {
        let unhealthy = change.to == GpuHealthState::Unhealthy;
        if unhealthy {
            tracing::warn!(gpu = change.gpu, uuid = %change.uuid, reason = %change.reason, "GPU unhealthy");
        } else {
            tracing::info!(gpu = change.gpu, uuid = %change.uuid, reason = %change.reason, "GPU healthy again");
        }
        let ev = EventSpec {
            regarding: kube_io::gpunode_ref(&self.cfg.node_name, self.gpunode_uid.clone()),
            type_: if unhealthy { "Warning" } else { "Normal" },
            reason: if unhealthy {
                UNHEALTHY_REASON
            } else {
                RECOVERED_REASON
            },
            action: if unhealthy {
                "MarkUnhealthy"
            } else {
                "MarkHealthy"
            },
            note: format!("GPU {} ({}): {}", change.gpu, change.uuid, change.reason),
        };
        if let Err(e) = kube_io::create_event(&self.client, &self.cfg.node_name, &ev, now).await {
            tracing::warn!(error = %e, "could not record the health Event");
        }
    }

    /// Attributes processes to pods and judges them.
    async fn evaluate(
        &mut self,
        obs: &Observation,
        now: Timestamp,
    ) -> Result<Evaluation, AgentError> {
        if obs.processes.is_empty() {
            return Ok(Evaluation::default());
        }
        let mut homes = HashMap::new();
        for pid in obs.processes.iter().map(|p| p.pid).collect::<BTreeSet<_>>() {
            match self.procfs.home(pid) {
                Ok(h) => {
                    if h == ProcessHome::Gone {
                        tracing::debug!(
                            pid,
                            "GPU process not in {} (exited?)",
                            self.procfs.root().display()
                        );
                    }
                    homes.insert(pid, h);
                }
                Err(e) => tracing::warn!(pid, error = %e, "cannot read the process's cgroup"),
            }
        }
        if !homes.is_empty()
            && homes.values().all(|h| *h == ProcessHome::Gone)
            && !self.warned_invisible
        {
            // Every GPU process invisible: almost surely the wrong PID namespace.
            tracing::warn!(
                "none of the {} GPU processes NVML reports is in {}: run the agent with hostPID: true (or point --proc-root at the host's /proc); nothing is enforced until then",
                homes.len(),
                self.procfs.root().display()
            );
            self.warned_invisible = true;
        }
        let busy: HashSet<String> = homes
            .values()
            .filter_map(|h| match h {
                ProcessHome::Pod(r) => Some(r.pod_uid.clone()),
                _ => None,
            })
            .collect();
        if busy.is_empty() {
            return Ok(binding::evaluate(
                &self.cfg.node_name,
                &obs.inventory,
                &obs.processes,
                &homes,
                &[],
                &HashMap::new(),
            ));
        }
        let pods = self.pods_for(&busy).await?;
        let busy_pods: Vec<&Pod> = pods
            .iter()
            .filter(|p| pod_keys(p).any(|k| busy.contains(&k)))
            .collect();

        // BatchJobs from a short-lived cache: a task's allocation does not change while its pod
        // lives (a requeue makes new pods of a new attempt), so it is refetched only when
        // stale or when it no longer describes the pod.
        let mut fetched_now = BTreeSet::new();
        for pod in &busy_pods {
            let Some(key) = binding::batchjob_of(pod) else {
                continue;
            };
            let fresh = self.bj_cache.get(&key).is_some_and(|(bj, at)| {
                now.duration_since(*at) < BATCHJOB_CACHE_TTL
                    && !binding::tasks_of(pod, bj, &self.cfg.node_name).is_empty()
            });
            if !fresh && !fetched_now.contains(&key) {
                self.fetch_batchjob(&key, now).await?;
                fetched_now.insert(key);
            }
        }
        let mut eval = self.judge(obs, &homes, &pods);
        // Never act on a cached allocation: refetch the BatchJobs behind violations, judge again.
        let stale: BTreeSet<(String, String)> = eval
            .violations
            .iter()
            .filter_map(Violation::batchjob)
            .filter(|k| !fetched_now.contains(k))
            .collect();
        if !stale.is_empty() {
            for key in &stale {
                self.fetch_batchjob(key, now).await?;
            }
            eval = self.judge(obs, &homes, &pods);
        }
        Ok(eval)
    }

    fn judge(
        &self,
        obs: &Observation,
        homes: &HashMap<u32, ProcessHome>,
        pods: &[Pod],
    ) -> Evaluation {
        let batchjobs: HashMap<(String, String), BatchJob> = self
            .bj_cache
            .iter()
            .map(|(k, (bj, _))| (k.clone(), bj.clone()))
            .collect();
        binding::evaluate(
            &self.cfg.node_name,
            &obs.inventory,
            &obs.processes,
            homes,
            pods,
            &batchjobs,
        )
    }

    async fn fetch_batchjob(
        &mut self,
        key: &(String, String),
        now: Timestamp,
    ) -> Result<(), AgentError> {
        let (ns, name) = key;
        match kube_io::get_batchjob(&self.client, ns, name)
            .await
            .map_err(kube_err(format!("reading BatchJob {ns}/{name}")))?
        {
            Some(bj) => {
                self.bj_cache.insert(key.clone(), (bj, now));
            }
            None => {
                self.bj_cache.remove(key);
            }
        }
        Ok(())
    }

    /// The node's pods from the watch cache; a fresh list when the cache has not synced yet
    /// or lacks a pod whose process we see (a pod that just started).
    async fn pods_for(&self, busy: &HashSet<String>) -> Result<Vec<Pod>, AgentError> {
        if let Some(pods) = self
            .pods
            .as_ref()
            .and_then(|w| w.snapshot(&self.cfg.node_name))
        {
            let known: HashSet<String> = pods.iter().flat_map(pod_keys).collect();
            if busy.iter().all(|u| known.contains(u)) {
                return Ok(pods);
            }
        }
        kube_io::list_node_pods(&self.client, &self.cfg.node_name)
            .await
            .map_err(kube_err("listing the node's pods"))
    }

    fn log_host_processes(&mut self, host: &[GpuProcess]) {
        let now: HashSet<(u32, u32)> = host.iter().map(|p| (p.pid, p.gpu)).collect();
        self.seen_host.retain(|k| now.contains(k));
        for p in host {
            if self.seen_host.insert((p.pid, p.gpu)) {
                tracing::info!(
                    pid = p.pid,
                    gpu = p.gpu,
                    comm = self.procfs.comm(p.pid).unwrap_or_default(),
                    used_mib = p.used_memory_mib,
                    "GPU process outside any pod (host process): not enforced"
                );
            }
        }
    }

    async fn enforce(&mut self, eval: &Evaluation, now: Timestamp, report: &mut CycleReport) {
        let new: HashSet<usize> = self.ledger.record(&eval.violations).into_iter().collect();
        for (i, v) in eval.violations.iter().enumerate() {
            // Under `kill`, every poll kills what is still there (a kill can fail or race).
            let outcome = match self.cfg.policy {
                Policy::Report => None,
                Policy::Kill => {
                    let r = enforce::verify_and_kill(&self.procfs, self.killer.as_ref(), v);
                    match &r {
                        Ok(()) => {
                            tracing::warn!(pid = v.process.pid, pod = %v.pod, gpu = v.process.gpu, "killed a process on a GPU its pod was not given");
                            report.killed.push(v.process.pid);
                        }
                        Err(e) => tracing::warn!(pid = v.process.pid, error = %e, "kill failed"),
                    }
                    Some(r)
                }
            };
            if !new.contains(&i) {
                continue;
            }
            let mut note = v.message(self.procfs.comm(v.process.pid).as_deref());
            match &outcome {
                None => note.push_str("; policy report: not killed"),
                Some(Ok(())) => note.push_str("; policy kill: process killed"),
                Some(Err(e)) => note.push_str(&format!("; policy kill: {e}")),
            }
            tracing::warn!(namespace = %v.namespace, pod = %v.pod, "binding violation: {note}");
            let regarding = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(v.pod.clone()),
                namespace: Some(v.namespace.clone()),
                uid: v.pod_api_uid.clone(),
                ..Default::default()
            };
            let ev = EventSpec {
                regarding,
                type_: "Warning",
                reason: VIOLATION_REASON,
                action: if self.cfg.policy == Policy::Kill {
                    "Kill"
                } else {
                    "Report"
                },
                note,
            };
            if let Err(e) = kube_io::create_event(&self.client, &self.cfg.node_name, &ev, now).await
            {
                tracing::warn!(error = %e, "could not record the violation Event");
            }
            report.new_violations.push(v.clone());
        }
    }
}
