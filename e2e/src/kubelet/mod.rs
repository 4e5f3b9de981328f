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

mod node;
mod plan;
mod pod;
mod sim;
mod status;
mod writes;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use muster_crds::v1alpha1::{GpuHealth, GpuHealthState};
use muster_operator::core::cluster_spec::NodeInfo;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::clock::SimClock;
use crate::exec;
use sim::{run, run_with};

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
    /// [`nodes::register`](crate::nodes::register)).
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
