//! A simulated kubelet for every node of a cluster spec, with the parts of the node agent and
//! the node lifecycle controller a test needs: it runs no containers, it writes what a kubelet
//! would write about them.
//!
//! # Pod lifecycle
//! A pod bound to a simulated node becomes `Running` after its start delay (podIP from the
//! node's pod CIDR, `hostIP`, `startTime`, conditions `PodReadyToStartContainers`,
//! `Initialized`, `ContainersReady` and `Ready` True, every container `running` with
//! `startedAt`, init containers `terminated`/`Completed`). Its containers exit after their run
//! time with their exit code: the pod ends `Succeeded` (exit 0) or `Failed` (containers
//! `terminated` with `exitCode`, reason `Completed`/`Error`, `finishedAt`; `Ready` False with
//! reason `PodCompleted`). Under `restartPolicy: Always` (or `OnFailure` after a failure) the
//! container restarts instead, after kubelet's crash-loop back-off (10 s doubling to 5 min,
//! `waiting`/`CrashLoopBackOff` meanwhile, `restartCount` and `lastState` kept).
//!
//! A pod being deleted (`deletionTimestamp`) gets SIGTERM: its containers exit with 143 after
//! their stop time, or are killed with 137 when that exceeds the grace period (capped by
//! [`KubeletOptions::max_grace`]); the pod then ends `Failed` and the kubelet deletes it with
//! `gracePeriodSeconds=0`, as kubelet's final delete does. A pod deleted before it started ends
//! with its containers `ContainerStatusUnknown` (137).
//!
//! # What a pod does, by annotation or environment
//! All durations are simulated seconds (see [`SimClock`]); fractions are allowed.
//!
//! | annotation | env (any container, literal `value`) | meaning | default |
//! |---|---|---|---|
//! | [`RUN_SECONDS`] `sim.muster.dev/run-seconds` | `MUSTER_SIM_RUN_SECONDS` | containers exit this long after starting | run until deleted |
//! | [`EXIT_CODE`] `sim.muster.dev/exit-code` | `MUSTER_SIM_EXIT_CODE` | their exit code (0-255) | 0 |
//! | [`START_SECONDS`] `sim.muster.dev/start-seconds` | | bind to Running | [`KubeletOptions::start_delay`] |
//! | [`STOP_SECONDS`] `sim.muster.dev/stop-seconds` | | SIGTERM to exit (past the grace period: killed, 137) | 0 |
//!
//! The annotation wins over the environment. The environment form exists for jobs whose pods
//! are built by someone else (a BatchJob's template env, `sbatch --export`) and for real
//! clusters: the script `sleep "${MUSTER_SIM_RUN_SECONDS:-0}"; exit "${MUSTER_SIM_EXIT_CODE:-0}"`
//! behaves the same on a real node. A value that does not parse is ignored and reported as a
//! Warning event `InvalidSimulation` on the pod naming the key and what is allowed. Changing
//! `run-seconds` on a running pod moves its end (`0`: now), which is how
//! [`TestCluster::finish_pod`](crate::cluster::TestCluster::finish_pod) works.
//!
//! # Node failure
//! [`Kubelet::fail_node`] does what a real node loss does, not a shortcut: the kubelet stops
//! (its pods freeze in whatever state they are: a Running pod stays `Running`, deletions are
//! not carried out, GpuNode heartbeats stop); the node lifecycle controller's part follows at
//! once (no 40 s grace): every Node condition `Unknown` (`NodeStatusUnknown`, "Kubelet stopped
//! posting node status."), taints `node.kubernetes.io/unreachable` NoSchedule and NoExecute
//! with `timeAdded`, and the pods' `Ready` condition False. The taint manager then evicts the
//! pods that do not tolerate `unreachable:NoExecute` at once and the others after their
//! `tolerationSeconds` (the API server adds 300 s by default): `DisruptionTarget` condition
//! (`DeletionByTaintManager`) and a graceful delete — which, with no kubelet, leaves them
//! Terminating until someone force-deletes them or the node comes back. Pods are not marked
//! `Failed`/`NodeLost` (Kubernetes stopped doing that in 1.5).
//! [`Kubelet::recover_node`] brings the node back Ready, removes the taints and resumes its
//! pods where they were.
//!
//! # GPUs
//! Every heartbeat interval the GpuNode status of each live node is written again (the node
//! agent's heartbeat); [`Kubelet::set_gpu_health`] marks a GPU unhealthy (with an XID) or
//! healthy, at once.
//!
//! Not simulated: kubelet events (Pulling/Pulled/Created/Started), probes, Leases, node status
//! heartbeats, resource usage, image pulls, volumes, ephemeral containers, per-container
//! run times.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use muster_crds::v1alpha1::{GpuHealth, GpuHealthState, GpuNode};
use muster_operator::core::cluster_spec::NodeInfo;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::clock::{SimClock, after};
use crate::exec::{self, ContainerEnd, ExecEvent};
use crate::nodes::{self, TAINT_UNREACHABLE};
use crate::scheduler::filter::Tol;

/// Annotation: simulated seconds from container start to exit.
pub const RUN_SECONDS: &str = "sim.muster.dev/run-seconds";
/// Annotation: the containers' exit code (0-255).
pub const EXIT_CODE: &str = "sim.muster.dev/exit-code";
/// Annotation: simulated seconds from bind to Running.
pub const START_SECONDS: &str = "sim.muster.dev/start-seconds";
/// Annotation: simulated seconds the containers take to exit after SIGTERM.
pub const STOP_SECONDS: &str = "sim.muster.dev/stop-seconds";
/// Environment form of [`RUN_SECONDS`].
pub const ENV_RUN_SECONDS: &str = "MUSTER_SIM_RUN_SECONDS";
/// Environment form of [`EXIT_CODE`].
pub const ENV_EXIT_CODE: &str = "MUSTER_SIM_EXIT_CODE";
/// The component name on events the kubelet writes.
pub const COMPONENT: &str = "kubelet";

/// How the simulated kubelet behaves.
#[derive(Clone, Debug)]
pub struct KubeletOptions {
    /// Bind to Running, for pods without [`START_SECONDS`] (simulated time).
    pub start_delay: Duration,
    /// Longest wait for containers that ignore SIGTERM, whatever the pod's grace period
    /// (simulated time); `None`: the grace period.
    pub max_grace: Option<Duration>,
    /// GpuNode heartbeat (simulated time); `None`: none after the first status.
    pub heartbeat: Option<Duration>,
    /// Publish GpuNodes (off when the real node agent runs in fixture mode).
    pub gpunodes: bool,
    /// Pod writes in flight at once.
    pub max_in_flight: usize,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        Self {
            start_delay: Duration::ZERO,
            max_grace: None,
            heartbeat: Some(Duration::from_secs(30)),
            gpunodes: true,
            max_in_flight: 64,
        }
    }
}

/// Counters, for tests and benchmarks.
#[derive(Debug, Default)]
pub struct KubeletStats {
    /// Pods moved to Running (restarts included).
    pub started: AtomicU64,
    /// Pods moved to Succeeded or Failed.
    pub finished: AtomicU64,
    /// Pods deleted after termination.
    pub deleted: AtomicU64,
}

/// Why a kubelet command failed.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// No simulated node of that name.
    #[error("no simulated node named {0:?}")]
    NoSuchNode(String),
    /// No GPU of that index on the node.
    #[error("node {node} has no GPU {index} (it has {count})")]
    NoSuchGpu {
        /// Node.
        node: String,
        /// Index asked for.
        index: u32,
        /// GPUs on the node.
        count: usize,
    },
    /// Writing to the API server failed.
    #[error("writing {what}: {error}")]
    Write {
        /// What was written.
        what: String,
        /// The error.
        error: String,
    },
    /// The kubelet has stopped.
    #[error("the simulated kubelet has stopped")]
    Stopped,
}

enum Command {
    FailNode(String, oneshot::Sender<Result<(), KubeletError>>),
    RecoverNode(String, oneshot::Sender<Result<(), KubeletError>>),
    GpuHealth(
        String,
        u32,
        GpuHealth,
        oneshot::Sender<Result<(), KubeletError>>,
    ),
}

/// The running simulated kubelets (one task for every node); dropping it stops them.
pub struct Kubelet {
    cmds: mpsc::UnboundedSender<Command>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    stats: Arc<KubeletStats>,
}

impl Kubelet {
    /// Start simulating `nodes` (their Node objects must exist: see
    /// [`nodes::register`]).
    pub fn start(
        client: Client,
        clock: SimClock,
        nodes: Vec<NodeInfo>,
        opts: KubeletOptions,
    ) -> Kubelet {
        let (cmds, rx) = mpsc::unbounded_channel();
        let (stop, stop_rx) = watch::channel(false);
        let stats = Arc::new(KubeletStats::default());
        let task = tokio::spawn(run(client, clock, nodes, opts, stats.clone(), rx, stop_rx));
        Kubelet {
            cmds,
            stop,
            task: Some(task),
            stats,
        }
    }

    /// Start the kubelet in exec mode: pods bound to `nodes` run for real through `rt` (see
    /// [`crate::exec`]); the simulation annotations and env are ignored.
    pub fn start_exec(
        client: Client,
        clock: SimClock,
        nodes: Vec<NodeInfo>,
        opts: KubeletOptions,
        rt: exec::Runtime,
    ) -> Kubelet {
        let (cmds, rx) = mpsc::unbounded_channel();
        let (stop, stop_rx) = watch::channel(false);
        let stats = Arc::new(KubeletStats::default());
        let task = tokio::spawn(run_with(
            client,
            clock,
            nodes,
            opts,
            stats.clone(),
            rx,
            stop_rx,
            Some(rt),
        ));
        Kubelet {
            cmds,
            stop,
            task: Some(task),
            stats,
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> &KubeletStats {
        &self.stats
    }

    async fn ask(
        &self,
        f: impl FnOnce(oneshot::Sender<Result<(), KubeletError>>) -> Command,
    ) -> Result<(), KubeletError> {
        let (tx, rx) = oneshot::channel();
        self.cmds.send(f(tx)).map_err(|_| KubeletError::Stopped)?;
        rx.await.map_err(|_| KubeletError::Stopped)?
    }

    /// Lose a node (see the [module docs](self)); returns once the Node shows it.
    pub async fn fail_node(&self, node: &str) -> Result<(), KubeletError> {
        self.ask(|tx| Command::FailNode(node.to_string(), tx)).await
    }

    /// Bring a failed node back; returns once the Node is Ready again.
    pub async fn recover_node(&self, node: &str) -> Result<(), KubeletError> {
        self.ask(|tx| Command::RecoverNode(node.to_string(), tx))
            .await
    }

    /// Set a GPU's health (as the node agent would after an XID or a recovery); returns once
    /// the GpuNode shows it.
    pub async fn set_gpu_health(
        &self,
        node: &str,
        index: u32,
        health: GpuHealth,
    ) -> Result<(), KubeletError> {
        self.ask(|tx| Command::GpuHealth(node.to_string(), index, health, tx))
            .await
    }

    /// Stop and wait for the loop to end.
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// What a pod's containers do.
#[derive(Clone, Debug, Default, PartialEq)]
struct Plan {
    run: Option<f64>,
    exit: i32,
    start: Option<f64>,
    stop: f64,
}

fn parse_secs(v: &str) -> Option<f64> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
}

fn parse_exit(v: &str) -> Option<i32> {
    v.trim()
        .parse::<i32>()
        .ok()
        .filter(|x| (0..=255).contains(x))
}

/// The plan of a pod, and the problems found in its annotations/env.
fn plan_of(pod: &Pod) -> (Plan, Vec<String>) {
    let ann = pod.metadata.annotations.clone().unwrap_or_default();
    let env = |name: &str| -> Option<String> {
        pod.spec.as_ref()?.containers.iter().find_map(|c| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
        })
    };
    let mut problems = Vec::new();
    let mut secs = |key: &str, env_key: Option<&str>| -> Option<f64> {
        let (src, v) = match ann.get(key) {
            Some(v) => (format!("annotation {key}"), v.clone()),
            None => match env_key.and_then(env) {
                Some(v) => (format!("env {}", env_key.unwrap_or_default()), v),
                None => return None,
            },
        };
        let p = parse_secs(&v);
        if p.is_none() {
            problems.push(format!(
                "{src}: {v:?} is not a duration: give seconds as a non-negative number, e.g. \"30\" or \"0.5\""
            ));
        }
        p
    };
    let run = secs(RUN_SECONDS, Some(ENV_RUN_SECONDS));
    let start = secs(START_SECONDS, None);
    let stop = secs(STOP_SECONDS, None).unwrap_or(0.0);
    let exit = match ann
        .get(EXIT_CODE)
        .map(|v| (format!("annotation {EXIT_CODE}"), v.clone()))
        .or_else(|| env(ENV_EXIT_CODE).map(|v| (format!("env {ENV_EXIT_CODE}"), v)))
    {
        None => 0,
        Some((src, v)) => parse_exit(&v).unwrap_or_else(|| {
            problems.push(format!(
                "{src}: {v:?} is not an exit code: give an integer from 0 to 255"
            ));
            0
        }),
    };
    (
        Plan {
            run,
            exit,
            start,
            stop,
        },
        problems,
    )
}

#[derive(Clone, Debug, PartialEq)]
struct Exited {
    code: i32,
    started: Timestamp,
    finished: Timestamp,
}

#[derive(Clone, Debug, PartialEq)]
enum State {
    /// Bound, containers not started.
    Pending,
    Running {
        started: Timestamp,
    },
    /// Between two runs of a restarting container.
    BackOff {
        until: Timestamp,
    },
    Terminated,
}

#[derive(Clone, Debug, PartialEq)]
enum Action {
    Start,
    Exit(i32),
    /// Terminate for deletion: exit code (143 SIGTERM, 137 killed), or `None` if never
    /// started.
    Kill(Option<i32>),
    FinalDelete,
    Evict,
}

struct SimPod {
    ns: String,
    name: String,
    uid: String,
    node: String,
    containers: Vec<(String, String)>,
    init_containers: Vec<(String, String)>,
    restart_policy: String,
    host_network: bool,
    tolerations: Vec<Tol>,
    plan: Plan,
    reported_problems: bool,
    state: State,
    start_time: Timestamp,
    start_at: Timestamp,
    /// Deletion seen at, and the grace period.
    deleting: Option<(Timestamp, i64)>,
    evicted: bool,
    final_delete_sent: bool,
    ip: Option<String>,
    restarts: u32,
    last: Option<Exited>,
    busy: bool,
    retry_after: Option<Timestamp>,
    seq: u64,
    /// Exec mode: what the pod's supervisor reported.
    exec: Option<ExecPod>,
}

/// An exec-mode pod as the kubelet loop tracks it.
#[derive(Default)]
struct ExecPod {
    /// The pod as last seen (what its supervisor is started with).
    snapshot: Option<Pod>,
    /// A supervisor runs.
    supervisor: bool,
    /// A (re)start was asked for and its `Started` has not been written yet.
    awaiting: bool,
    /// Containers started at (status write pending).
    started_at: Option<Timestamp>,
    /// How the init containers ended.
    inits: Option<Vec<ContainerEnd>>,
    /// How the containers ended (status write pending or done).
    ends: Option<Vec<ContainerEnd>>,
    /// An init container failed: the pod fails, no restart.
    init_failed: bool,
    /// SIGTERM was sent.
    terminating: bool,
}

impl ExecPod {
    /// The pod's exit code as the sim models it: the first non-zero container code.
    fn code(&self) -> i32 {
        if self.init_failed {
            return self
                .inits
                .iter()
                .flatten()
                .map(|e| e.code)
                .find(|c| *c != 0)
                .unwrap_or(1);
        }
        self.ends
            .iter()
            .flatten()
            .map(|e| e.code)
            .find(|c| *c != 0)
            .unwrap_or(0)
    }
}

struct SimNode {
    info: NodeInfo,
    index: usize,
    failed: Option<Timestamp>,
    health: Vec<GpuHealth>,
    next_ip: u32,
}

fn hex64(s: &str) -> String {
    let mut out = String::with_capacity(64);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for round in 0..4u64 {
        for b in s.bytes().chain(round.to_le_bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

fn image_id(image: &str) -> String {
    let base = image.split('@').next().unwrap_or(image);
    let repo = base
        .rsplit_once(':')
        .filter(|(_, t)| !t.contains('/'))
        .map_or(base, |(r, _)| r);
    let full = if repo.contains('/') {
        if repo
            .split('/')
            .next()
            .is_some_and(|h| h.contains('.') || h.contains(':'))
        {
            repo.to_string()
        } else {
            format!("docker.io/{repo}")
        }
    } else {
        format!("docker.io/library/{repo}")
    };
    format!("{full}@sha256:{}", hex64(base))
}

fn cond(
    t: &str,
    status: bool,
    now: Timestamp,
    reason: Option<&str>,
    message: Option<&str>,
) -> Value {
    let mut c = json!({"type": t, "status": if status { "True" } else { "False" },
        "lastProbeTime": null, "lastTransitionTime": Time(now)});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

impl SimPod {
    fn container_id(&self, name: &str, restart: u32) -> String {
        format!(
            "containerd://{}",
            hex64(&format!("{}/{name}/{restart}", self.uid))
        )
    }

    fn init_statuses(&self) -> Value {
        if let Some(inits) = self.exec.as_ref().and_then(|e| e.inits.as_ref()) {
            return json!(self
                .init_containers
                .iter()
                .enumerate()
                .map(|(i, (n, image))| {
                    let id = self.container_id(n, 0);
                    match inits.get(i) {
                        Some(e) => json!({
                            "name": n, "image": image, "imageID": image_id(image),
                            "containerID": id, "ready": e.code == 0, "started": false, "restartCount": 0,
                            "state": {"terminated": end_json(e, &id)}
                        }),
                        None => json!({
                            "name": n, "image": image, "imageID": "", "ready": false, "started": false,
                            "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}
                        }),
                    }
                })
                .collect::<Vec<_>>());
        }
        json!(self
            .init_containers
            .iter()
            .map(|(n, image)| json!({
                "name": n, "image": image, "imageID": image_id(image),
                "containerID": self.container_id(n, 0), "ready": true, "started": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": Time(self.start_time), "finishedAt": Time(self.start_time),
                    "containerID": self.container_id(n, 0)}}
            }))
            .collect::<Vec<_>>())
    }

    fn last_state(&self) -> Value {
        match &self.last {
            None => json!({}),
            Some(e) => json!({"terminated": {
                "exitCode": e.code, "reason": if e.code == 0 { "Completed" } else { "Error" },
                "startedAt": Time(e.started), "finishedAt": Time(e.finished),
                "containerID": self.container_id(&self.containers.first().map(|c| c.0.clone()).unwrap_or_default(), self.restarts.saturating_sub(1))}}),
        }
    }

    fn ips(&self, host_ip: &str) -> Value {
        let ip = self.ip.clone().unwrap_or_else(|| host_ip.to_string());
        json!({"hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": Time(self.start_time)})
    }

    fn not_ready(&self) -> String {
        let names: Vec<&str> = self.containers.iter().map(|c| c.0.as_str()).collect();
        format!("containers with unready status: [{}]", names.join(" "))
    }

    /// Status patch for containers running since `started`.
    fn running(&self, host_ip: &str, started: Timestamp, now: Timestamp) -> Value {
        let mut st = self.ips(host_ip);
        st["phase"] = json!("Running");
        st["conditions"] = json!([
            cond("PodReadyToStartContainers", true, now, None, None),
            cond("Initialized", true, now, None, None),
            cond("Ready", true, now, None, None),
            cond("ContainersReady", true, now, None, None),
        ]);
        st["containerStatuses"] = json!(
            self.containers
                .iter()
                .map(|(n, image)| json!({
                    "name": n, "image": image, "imageID": image_id(image),
                    "containerID": self.container_id(n, self.restarts),
                    "ready": true, "started": true, "restartCount": self.restarts,
                    "state": {"running": {"startedAt": Time(started)}},
                    "lastState": self.last_state(),
                }))
                .collect::<Vec<_>>()
        );
        if !self.init_containers.is_empty() {
            st["initContainerStatuses"] = self.init_statuses();
        }
        json!({ "status": st })
    }

    /// Status patch for a container waiting to restart after `e`.
    fn backoff(&self, host_ip: &str, backoff: f64, now: Timestamp) -> Value {
        let mut st = self.ips(host_ip);
        st["phase"] = json!("Running");
        let msg = self.not_ready();
        st["conditions"] = json!([
            cond("PodReadyToStartContainers", true, now, None, None),
            cond("Initialized", true, now, None, None),
            cond("Ready", false, now, Some("ContainersNotReady"), Some(&msg)),
            cond(
                "ContainersReady",
                false,
                now,
                Some("ContainersNotReady"),
                Some(&msg)
            ),
        ]);
        st["containerStatuses"] = json!(self
            .containers
            .iter()
            .map(|(n, image)| json!({
                "name": n, "image": image, "imageID": image_id(image),
                "containerID": self.container_id(n, self.restarts),
                "ready": false, "started": false, "restartCount": self.restarts,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off {}s restarting failed container={n} pod={}_{}({})", backoff as u64, self.name, self.ns, self.uid)}},
                "lastState": self.last_state(),
            }))
            .collect::<Vec<_>>());
        json!({ "status": st })
    }

    /// Status patch for a finished pod: containers exited with `code` (`None`: never ran).
    fn terminated(
        &self,
        host_ip: &str,
        code: Option<i32>,
        started: Option<Timestamp>,
        now: Timestamp,
    ) -> Value {
        let mut st = self.ips(host_ip);
        let ok = code == Some(0);
        st["phase"] = json!(if ok { "Succeeded" } else { "Failed" });
        let init_failed = self.exec.as_ref().is_some_and(|e| e.init_failed);
        st["conditions"] = json!([
            cond("PodReadyToStartContainers", false, now, None, None),
            if init_failed {
                cond(
                    "Initialized",
                    false,
                    now,
                    Some("ContainersNotInitialized"),
                    None,
                )
            } else {
                cond("Initialized", true, now, None, None)
            },
            cond("Ready", false, now, Some("PodCompleted"), None),
            cond("ContainersReady", false, now, Some("PodCompleted"), None),
        ]);
        let exec_ends = self.exec.as_ref().and_then(|e| e.ends.as_ref());
        st["containerStatuses"] = json!(self
            .containers
            .iter()
            .enumerate()
            .map(|(i, (n, image))| {
                if let Some(e) = exec_ends.and_then(|ends| ends.get(i)) {
                    let id = self.container_id(n, self.restarts);
                    let state = match &e.waiting {
                        Some(w) => json!({"waiting": {"reason": w}}),
                        None => json!({"terminated": end_json(e, &id)}),
                    };
                    return json!({
                        "name": n, "image": image, "imageID": image_id(image),
                        "containerID": id, "ready": false, "started": false,
                        "restartCount": self.restarts, "state": state,
                        "lastState": self.last_state(),
                    });
                }
                let term = match code {
                    Some(c) => json!({"exitCode": c, "reason": if c == 0 { "Completed" } else { "Error" },
                        "startedAt": Time(started.unwrap_or(now)), "finishedAt": Time(now),
                        "containerID": self.container_id(n, self.restarts)}),
                    None => json!({"exitCode": 137, "reason": "ContainerStatusUnknown",
                        "message": "The container could not be located when the pod was terminated",
                        "startedAt": null, "finishedAt": null}),
                };
                json!({
                    "name": n, "image": image, "imageID": image_id(image),
                    "containerID": self.container_id(n, self.restarts),
                    "ready": false, "started": false, "restartCount": self.restarts,
                    "state": {"terminated": term},
                    "lastState": self.last_state(),
                })
            })
            .collect::<Vec<_>>());
        if !self.init_containers.is_empty() {
            st["initContainerStatuses"] = self.init_statuses();
        }
        json!({ "status": st })
    }

    fn should_restart(&self, code: i32) -> bool {
        match self.restart_policy.as_str() {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => true,
        }
    }

    /// Seconds the taint manager waits before evicting this pod from an unreachable node
    /// (`None`: never).
    fn eviction_delay(&self) -> Option<i64> {
        let t = crate::scheduler::filter::TaintV {
            key: TAINT_UNREACHABLE.into(),
            value: String::new(),
            effect: "NoExecute".into(),
        };
        // The taint manager's getMinTolerationTime: not tolerated -> now; the shortest
        // tolerationSeconds among the tolerations that match; none given -> never.
        let matching: Vec<&Tol> = self
            .tolerations
            .iter()
            .filter(|tol| tol.tolerates(&t))
            .collect();
        if matching.is_empty() {
            return Some(0);
        }
        matching
            .iter()
            .filter_map(|t| t.seconds)
            .map(|s| s.max(0))
            .min()
    }

    /// The next thing to do and when.
    fn next(
        &self,
        node_failed: Option<Timestamp>,
        max_grace: Option<Duration>,
        now: Timestamp,
    ) -> Option<(Timestamp, Action)> {
        if self.busy {
            return None;
        }
        let at = |t: Timestamp| match self.retry_after {
            Some(r) if r > t => r,
            _ => t,
        };
        if let (Some(x), None) = (&self.exec, node_failed) {
            return self.next_exec(x, now, at);
        }
        if let Some(failed) = node_failed {
            if self.deleting.is_some() || self.evicted || self.state == State::Terminated {
                return None;
            }
            let delay = self.eviction_delay()?;
            return Some((at(after(failed, delay as f64)), Action::Evict));
        }
        if let Some((seen, grace)) = self.deleting {
            return match &self.state {
                State::Terminated if self.final_delete_sent => None,
                State::Terminated => Some((at(now), Action::FinalDelete)),
                State::Pending | State::BackOff { .. } => Some((at(now), Action::Kill(None))),
                State::Running { .. } => {
                    let mut g = grace.max(0) as f64;
                    if let Some(cap) = max_grace {
                        g = g.min(cap.as_secs_f64());
                    }
                    if self.plan.stop < g {
                        Some((at(after(seen, self.plan.stop)), Action::Kill(Some(143))))
                    } else {
                        Some((at(after(seen, g)), Action::Kill(Some(137))))
                    }
                }
            };
        }
        match &self.state {
            State::Pending => Some((at(self.start_at), Action::Start)),
            State::Running { started } => self
                .plan
                .run
                .map(|r| (at(after(*started, r)), Action::Exit(self.plan.exit))),
            State::BackOff { until } => Some((at(*until), Action::Start)),
            State::Terminated => None,
        }
    }
}

impl SimPod {
    /// The next action of an exec-mode pod: its supervisor's reports drive it.
    fn next_exec(
        &self,
        x: &ExecPod,
        now: Timestamp,
        at: impl Fn(Timestamp) -> Timestamp,
    ) -> Option<(Timestamp, Action)> {
        if self.deleting.is_some() {
            return match &self.state {
                State::Terminated if self.final_delete_sent => None,
                State::Terminated => Some((at(now), Action::FinalDelete)),
                _ if x.ends.is_some() => Some((at(now), Action::Kill(Some(x.code())))),
                _ if !x.supervisor
                    || !x.awaiting
                        && x.started_at.is_none()
                        && matches!(self.state, State::BackOff { .. }) =>
                {
                    Some((at(now), Action::Kill(None)))
                }
                _ => None,
            };
        }
        match &self.state {
            State::Terminated => None,
            // A start is written before the exit that may have followed it at once.
            _ if x.started_at.is_some() => Some((at(x.started_at.unwrap_or(now)), Action::Start)),
            _ if x.ends.is_some() => Some((at(now), Action::Exit(x.code()))),
            State::Pending if !x.supervisor => Some((at(self.start_at), Action::Start)),
            State::BackOff { until } if !x.awaiting => Some((at(*until), Action::Start)),
            _ => None,
        }
    }
}

/// The `terminated` state of a container that ended in exec mode.
fn end_json(e: &ContainerEnd, id: &str) -> Value {
    let mut t = json!({"exitCode": e.code, "reason": e.reason,
        "startedAt": e.started.map(Time), "finishedAt": e.finished.map(Time)});
    if e.reason != "ContainerStatusUnknown" {
        t["containerID"] = json!(id);
    }
    if let Some(m) = &e.message {
        t["message"] = json!(m);
    }
    t
}

/// kubelet's container restart back-off: 10 s doubling per restart, at most 300 s.
fn restart_backoff(restarts: u32) -> f64 {
    (10.0 * 2f64.powi(restarts.min(10) as i32)).min(300.0)
}

enum PodWrite {
    Status(Value),
    FinalDelete,
    Evict(Value),
}

type PodFut = BoxFuture<'static, (String, u64, Action, Timestamp, Result<(), WriteError>)>;
type MiscFut = BoxFuture<'static, ()>;

#[derive(Debug)]
enum WriteError {
    Gone,
    Failed(String),
}

fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 409 | 429 | 500 | 502 | 503 | 504),
        _ => true,
    }
}

/// Retry `f` on transient errors (a few times, briefly): the simulated components must ride
/// through injected faults as the real ones do.
async fn with_retries<T, F, Fut>(mut f: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(20);
    for _ in 0..8 {
        match f().await {
            Err(e) if transient(&e) => {
                tracing::debug!(error = %e, "retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
    f().await
}

fn pod_write(client: &Client, p: &SimPod, action: Action, at: Timestamp, w: PodWrite) -> PodFut {
    let api: Api<Pod> = Api::namespaced(client.clone(), &p.ns);
    let (name, uid, seq) = (p.name.clone(), p.uid.clone(), p.seq);
    async move {
        let res = with_retries(|| {
            let (api, name, uid) = (api.clone(), name.clone(), uid.clone());
            let w = match &w {
                PodWrite::Status(v) => PodWrite::Status(v.clone()),
                PodWrite::FinalDelete => PodWrite::FinalDelete,
                PodWrite::Evict(v) => PodWrite::Evict(v.clone()),
            };
            async move {
                match w {
                    PodWrite::Status(v) => api
                        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(v))
                        .await
                        .map(|_| ()),
                    PodWrite::FinalDelete => {
                        let dp = DeleteParams {
                            grace_period_seconds: Some(0),
                            preconditions: Some(Preconditions {
                                uid: Some(uid),
                                resource_version: None,
                            }),
                            ..DeleteParams::default()
                        };
                        api.delete(&name, &dp).await.map(|_| ())
                    }
                    PodWrite::Evict(v) => {
                        api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(v))
                            .await?;
                        let dp = DeleteParams {
                            preconditions: Some(Preconditions {
                                uid: Some(uid),
                                resource_version: None,
                            }),
                            ..DeleteParams::default()
                        };
                        api.delete(&name, &dp).await.map(|_| ())
                    }
                }
            }
        })
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) if s.code == 404 => WriteError::Gone,
            // A uid precondition failure: the name now holds another pod.
            kube::Error::Api(s) if s.code == 409 && s.message.contains("UID") => WriteError::Gone,
            e => WriteError::Failed(e.to_string()),
        });
        (uid, seq, action, at, res)
    }
    .boxed()
}

struct Sim {
    client: Client,
    clock: SimClock,
    opts: KubeletOptions,
    stats: Arc<KubeletStats>,
    nodes: HashMap<String, SimNode>,
    pods: HashMap<String, SimPod>,
    timers: BinaryHeap<Reverse<(Timestamp, u64, String)>>,
    ready: VecDeque<(String, u64)>,
    seq: u64,
    relist: Option<HashSet<String>>,
    misc: VecDeque<MiscFut>,
    exec: Option<exec::Runtime>,
}

impl Sim {
    fn schedule(&mut self, uid: &str) {
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

    fn node_names(&self, node: &str) -> Result<(), KubeletError> {
        if self.nodes.contains_key(node) {
            Ok(())
        } else {
            Err(KubeletError::NoSuchNode(node.to_string()))
        }
    }

    fn gpunode_write(&self, node: &str) -> Option<MiscFut> {
        if !self.opts.gpunodes {
            return None;
        }
        let n = self.nodes.get(node)?;
        if n.info.gpus.is_empty() {
            return None;
        }
        let status = nodes::gpunode_status(&n.info, &n.health, self.clock.now());
        let api: Api<GpuNode> = Api::all(self.client.clone());
        let name = node.to_string();
        Some(
            async move {
                if let Err(e) =
                    with_retries(|| nodes::apply_gpunode_status(&api, &name, &status)).await
                {
                    tracing::warn!(node = %name, error = %e, "GpuNode heartbeat failed");
                }
            }
            .boxed(),
        )
    }

    fn heartbeat(&mut self) {
        let live: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.failed.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        for n in live {
            if let Some(f) = self.gpunode_write(&n) {
                self.misc.push_back(f);
            }
        }
    }

    /// Pods on `node` get `Ready` = `ready` (the node lifecycle controller / the kubelet).
    fn mark_pods(&mut self, node: &str, ready: bool) {
        let now = self.clock.now();
        let targets: Vec<(String, String, bool)> = self
            .pods
            .values()
            .filter(|p| p.node == node && matches!(p.state, State::Running { .. }))
            .map(|p| (p.ns.clone(), p.name.clone(), p.busy))
            .collect();
        for (ns, name, _) in targets {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            let mut conds = vec![cond("Ready", ready, now, None, None)];
            if ready {
                conds.push(cond("ContainersReady", true, now, None, None));
            }
            let patch = json!({"status": {"conditions": conds}});
            self.misc.push_back(
                async move {
                    let _ = with_retries(|| {
                        let (api, name, patch) = (api.clone(), name.clone(), patch.clone());
                        async move {
                            api.patch_status(
                                &name,
                                &PatchParams::default(),
                                &Patch::Strategic(patch),
                            )
                            .await
                        }
                    })
                    .await;
                }
                .boxed(),
            );
        }
    }

    fn fail_node(&mut self, node: &str, reply: oneshot::Sender<Result<(), KubeletError>>) {
        if let Err(e) = self.node_names(node) {
            let _ = reply.send(Err(e));
            return;
        }
        let now = self.clock.now();
        let n = self.nodes.get_mut(node).expect("checked");
        if n.failed.is_some() {
            let _ = reply.send(Ok(()));
            return;
        }
        n.failed = Some(now);
        let api: Api<Node> = Api::all(self.client.clone());
        let name = node.to_string();
        self.misc.push_back(
            async move {
                let r = set_node_down(&api, &name, now, true).await;
                let _ = reply.send(r);
            }
            .boxed(),
        );
        self.mark_pods(node, false);
        let uids: Vec<String> = self
            .pods
            .values()
            .filter(|p| p.node == node)
            .map(|p| p.uid.clone())
            .collect();
        for u in uids {
            self.schedule(&u);
        }
    }

    fn recover_node(&mut self, node: &str, reply: oneshot::Sender<Result<(), KubeletError>>) {
        if let Err(e) = self.node_names(node) {
            let _ = reply.send(Err(e));
            return;
        }
        let now = self.clock.now();
        let n = self.nodes.get_mut(node).expect("checked");
        if n.failed.take().is_none() {
            let _ = reply.send(Ok(()));
            return;
        }
        let api: Api<Node> = Api::all(self.client.clone());
        let name = node.to_string();
        let gpu = self.gpunode_write(node);
        self.misc.push_back(
            async move {
                let r = set_node_down(&api, &name, now, false).await;
                if let Some(g) = gpu {
                    g.await;
                }
                let _ = reply.send(r);
            }
            .boxed(),
        );
        self.mark_pods(node, true);
        let uids: Vec<String> = self
            .pods
            .values()
            .filter(|p| p.node == node)
            .map(|p| p.uid.clone())
            .collect();
        for u in uids {
            // Deletions seen while the node was down are carried out from now on.
            if let Some(p) = self.pods.get_mut(&u)
                && let Some((seen, _)) = &mut p.deleting
            {
                *seen = now;
            }
            self.schedule(&u);
        }
    }

    fn gpu_health(
        &mut self,
        node: &str,
        index: u32,
        health: GpuHealth,
        reply: oneshot::Sender<Result<(), KubeletError>>,
    ) {
        let Some(n) = self.nodes.get_mut(node) else {
            let _ = reply.send(Err(KubeletError::NoSuchNode(node.to_string())));
            return;
        };
        let Some(slot) = n.health.get_mut(index as usize) else {
            let _ = reply.send(Err(KubeletError::NoSuchGpu {
                node: node.to_string(),
                index,
                count: n.health.len(),
            }));
            return;
        };
        *slot = health;
        let status = nodes::gpunode_status(&n.info, &n.health, self.clock.now());
        let api: Api<GpuNode> = Api::all(self.client.clone());
        let name = node.to_string();
        self.misc.push_back(
            async move {
                let r = with_retries(|| nodes::apply_gpunode_status(&api, &name, &status))
                    .await
                    .map_err(|e| KubeletError::Write {
                        what: format!("GpuNode {name}"),
                        error: e.to_string(),
                    });
                let _ = reply.send(r);
            }
            .boxed(),
        );
    }
}

/// Write a node's loss (`down`) or return: conditions and the unreachable taints.
async fn set_node_down(
    api: &Api<Node>,
    name: &str,
    now: Timestamp,
    down: bool,
) -> Result<(), KubeletError> {
    let werr = |e: kube::Error| KubeletError::Write {
        what: format!("Node {name}"),
        error: e.to_string(),
    };
    with_retries(|| async {
        let node = api.get(name).await?;
        let mut taints: Vec<Value> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter(|t| t.key != TAINT_UNREACHABLE)
            .map(|t| serde_json::to_value(t).expect("taint"))
            .collect();
        if down {
            for effect in ["NoSchedule", "NoExecute"] {
                taints.push(
                    json!({"key": TAINT_UNREACHABLE, "effect": effect, "timeAdded": Time(now)}),
                );
            }
        }
        let patch = json!({
            "metadata": {"resourceVersion": node.resource_version()},
            "spec": {"taints": if taints.is_empty() { Value::Null } else { json!(taints) }},
        });
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
    })
    .await
    .map_err(werr)?;
    let conditions = if down {
        nodes::unknown_conditions(now)
    } else {
        nodes::ready_conditions(now)
    };
    with_retries(|| {
        let patch = Patch::Merge(json!({"status": {"conditions": conditions.clone()}}));
        async move {
            api.patch_status(name, &PatchParams::default(), &patch)
                .await
        }
    })
    .await
    .map_err(werr)?;
    Ok(())
}

/// A healthy GPU whose health changed at `now`, or an unhealthy one with an XID.
pub fn gpu_health(healthy: bool, xid: Option<u32>, reason: &str, now: Timestamp) -> GpuHealth {
    GpuHealth {
        state: if healthy {
            GpuHealthState::Healthy
        } else {
            GpuHealthState::Unhealthy
        },
        since: Some(Time(now)),
        last_xid: xid,
        reason: (!reason.is_empty()).then(|| reason.to_string()),
    }
}

async fn run(
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
async fn run_with(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ann: Value, env: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "annotations": ann},
            "spec": {"containers": [{"name": "c", "image": "busybox", "env": env}]}
        }))
        .unwrap()
    }

    #[test]
    fn plans_come_from_annotations_then_env() {
        let (p, errs) = plan_of(&pod(json!({RUN_SECONDS: "2.5", EXIT_CODE: "3"}), json!([])));
        assert_eq!((p.run, p.exit), (Some(2.5), 3));
        assert!(errs.is_empty());
        let (p, _) = plan_of(&pod(
            json!({}),
            json!([{"name": ENV_RUN_SECONDS, "value": "7"}, {"name": ENV_EXIT_CODE, "value": "1"}]),
        ));
        assert_eq!((p.run, p.exit), (Some(7.0), 1));
        let (p, _) = plan_of(&pod(
            json!({RUN_SECONDS: "1"}),
            json!([{"name": ENV_RUN_SECONDS, "value": "7"}]),
        ));
        assert_eq!(p.run, Some(1.0), "the annotation wins");
        let (p, _) = plan_of(&pod(json!({}), json!([])));
        assert_eq!(p.run, None);
    }

    #[test]
    fn bad_values_are_named() {
        let (p, errs) = plan_of(&pod(
            json!({RUN_SECONDS: "soon", EXIT_CODE: "300"}),
            json!([]),
        ));
        assert_eq!((p.run, p.exit), (None, 0));
        assert_eq!(errs.len(), 2);
        assert!(
            errs[0].contains(RUN_SECONDS) && errs[0].contains("non-negative"),
            "{}",
            errs[0]
        );
        assert!(
            errs[1].contains(EXIT_CODE) && errs[1].contains("0 to 255"),
            "{}",
            errs[1]
        );
    }

    #[test]
    fn image_ids_look_like_containerd() {
        assert!(image_id("busybox:1.36").starts_with("docker.io/library/busybox@sha256:"));
        assert!(
            image_id("nvcr.io/nvidia/pytorch:24.01").starts_with("nvcr.io/nvidia/pytorch@sha256:")
        );
        assert!(image_id("team/app").starts_with("docker.io/team/app@sha256:"));
        assert_eq!(hex64("x").len(), 64);
    }

    #[test]
    fn restart_backoff_doubles_to_five_minutes() {
        assert_eq!(restart_backoff(0), 10.0);
        assert_eq!(restart_backoff(1), 20.0);
        assert_eq!(restart_backoff(9), 300.0);
    }
}
