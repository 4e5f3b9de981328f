//! The running operator: reflectors, leader election, and the leader's scheduling loop.
//!
//! Every replica runs reflectors (kube-runtime `watcher` + `reflector`, with the default
//! backoff) over Partitions, BatchJobs (all namespaces), task Pods (label
//! `muster.dev/batchjob`), Nodes and GpuNodes — and, where the API server serves
//! `resource.k8s.io/v1` ([`discovery`](super::discovery)), ResourceClaims (all of them:
//! anyone's allocated GPU is taken), the NVIDIA driver's ResourceSlices and DeviceClasses —
//! so a replica that does not lead keeps warm caches and takes over within one lease
//! duration. Objects are trimmed before they are
//! cached (managed fields, node images, ...) and task pods are cached as the planner's
//! [`PodObs`](super::plan::PodObs), read once per watch event, to keep memory flat at
//! 50,000 pods.
//!
//! Only the leader schedules: on any watch event (debounced) and every `cycle_interval` it
//! builds the world from the caches, runs [`plan`](super::plan::plan) and carries the plan
//! out ([`execute`](super::exec::execute)). Its own writes are folded into the next cycle's
//! view before the watch delivers them (statuses it wrote, pods and elements it created,
//! pods it deleted), so a lagging cache never makes it decide twice. When leadership is lost
//! the cycle in flight is dropped at once.

mod cycle;
mod recent;
mod reflectors;

pub use recent::{Recent, rv_newer};
pub use reflectors::{Stores, start_reflectors};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use kube::Client;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::exec::{Faults, NoFaults};
use super::jobids::JobIds;
use super::kube_api::KubeApi;
use super::leader::{LeaderElector, LeaseTimings};
use super::metrics::Metrics;
use super::plan::{PlanMemory, PlanSettings};
use super::usage::Usage;
use cycle::{Leader, main_loop};

/// Seconds since the epoch, possibly shifted (tests fast-forward time limits with it).
#[derive(Clone, Debug, Default)]
pub struct Clock {
    offset: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Clock { offset: None }
    }

    /// The system clock plus `offset` seconds (changeable while running).
    pub fn shifted(offset: Arc<AtomicI64>) -> Self {
        Clock {
            offset: Some(offset),
        }
    }

    /// Now.
    pub fn now(&self) -> i64 {
        jiff::Timestamp::now().as_second()
            + self
                .offset
                .as_ref()
                .map(|o| o.load(Ordering::SeqCst))
                .unwrap_or(0)
    }
}

/// How the operator runs.
#[derive(Clone)]
pub struct Settings {
    /// Namespace of the Lease and the counter ConfigMaps.
    pub namespace: String,
    /// Lease name.
    pub lease_name: String,
    /// Elect a leader (false: this replica always leads).
    pub leader_election: bool,
    /// This replica's identity (pod name).
    pub identity: String,
    /// Longest time between two cycles.
    pub cycle_interval: Duration,
    /// Wait after a watch event before a cycle, to batch a burst of events.
    pub debounce: Duration,
    /// Jobs written concurrently.
    pub write_concurrency: usize,
    /// The planner's settings (gang start timeout, scheduler configuration).
    pub plan: PlanSettings,
    /// Lease timings.
    pub lease: LeaseTimings,
    /// Fault injection (tests).
    pub faults: Arc<dyn Faults>,
    /// The clock.
    pub clock: Clock,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: "muster-system".into(),
            lease_name: "muster-operator".into(),
            leader_election: true,
            identity: "muster-operator".into(),
            cycle_interval: Duration::from_secs(5),
            debounce: Duration::from_millis(50),
            write_concurrency: 64,
            plan: PlanSettings::default(),
            lease: LeaseTimings::default(),
            faults: Arc::new(NoFaults),
            clock: Clock::system(),
        }
    }
}

/// Why the operator stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// An injected crash (tests).
    #[error("crashed at an injected fault")]
    Crashed,
}

/// A running operator. Dropping it stops every task at once (like [`Handle::kill`]).
pub struct Handle {
    shutdown: watch::Sender<bool>,
    main: Option<JoinHandle<Result<(), RunError>>>,
    elector: Option<JoinHandle<()>>,
    tasks: Vec<JoinHandle<()>>,
    /// Set once every cache has synced.
    pub ready: Arc<AtomicBool>,
    /// The metrics.
    pub metrics: Metrics,
    /// Whether this replica leads.
    pub leading: watch::Receiver<bool>,
    /// The caches.
    pub stores: Stores,
}

impl Handle {
    /// Stops cleanly: the cycle in flight finishes, the lease is released.
    pub async fn shutdown(mut self) -> Result<(), RunError> {
        let _ = self.shutdown.send(true);
        let r = match self.main.take() {
            Some(m) => m.await.unwrap_or(Ok(())),
            None => Ok(()),
        };
        // Let the elector release the lease; the reflectors just stop.
        if let Some(e) = self.elector.take()
            && tokio::time::timeout(Duration::from_secs(5), e)
                .await
                .is_err()
        {
            tracing::warn!("leader elector did not stop within 5s");
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
        r
    }

    /// Stops at once, as a killed process would: no cleanup, the lease is not released.
    pub fn kill(self) {
        drop(self);
    }

    /// Waits until the operator stops by itself (an injected crash); its other tasks are
    /// then stopped too, as when a process dies.
    pub async fn wait(&mut self) -> Result<(), RunError> {
        let r = match self.main.as_mut() {
            Some(m) => m.await.unwrap_or(Ok(())),
            None => Ok(()),
        };
        self.main = None;
        if let Some(e) = self.elector.take() {
            e.abort();
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
        r
    }

    /// Whether the main loop has ended.
    pub fn is_finished(&self) -> bool {
        self.main.as_ref().is_none_or(|m| m.is_finished())
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(m) = self.main.take() {
            m.abort();
        }
        if let Some(e) = self.elector.take() {
            e.abort();
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

/// Starts the operator: reflectors, leader election (unless disabled) and the loop.
pub fn start(client: Client, settings: Settings, metrics: Metrics) -> Handle {
    let notify = Arc::new(Notify::new());
    let (stores, mut tasks) = start_reflectors(&client, notify.clone(), &metrics);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (lead_tx, lead_rx) = watch::channel(!settings.leader_election);
    let ready = Arc::new(AtomicBool::new(false));
    let mut elector = None;
    if settings.leader_election {
        let el = LeaderElector::new(
            client.clone(),
            &settings.namespace,
            &settings.lease_name,
            &settings.identity,
            settings.lease,
            metrics.clone(),
        );
        elector = Some(tokio::spawn(el.run(lead_tx, shutdown_rx.clone())));
    } else {
        metrics.leader.set(1);
        // Keep the sender alive for the receiver's lifetime.
        tasks.push(tokio::spawn(async move {
            let tx = lead_tx;
            tx.closed().await;
        }));
    }
    {
        let stores = stores.clone();
        let ready = ready.clone();
        tasks.push(tokio::spawn(async move {
            stores.wait_ready().await;
            ready.store(true, Ordering::SeqCst);
            tracing::info!("caches synced");
        }));
    }
    let leader = Leader {
        api: KubeApi::new(client.clone(), &settings.identity),
        ids: JobIds::new(client.clone(), &settings.namespace, metrics.clone()),
        usage: Usage::new(
            client,
            &settings.namespace,
            settings.plan.scheduler.fair_share_half_life_secs,
            metrics.clone(),
        ),
        mem: PlanMemory::default(),
        recent: Recent::default(),
        last_running: Vec::new(),
        trimmed: Instant::now(),
    };
    let main = tokio::spawn(main_loop(
        leader,
        stores.clone(),
        settings,
        metrics.clone(),
        notify,
        lead_rx.clone(),
        shutdown_rx,
        ready.clone(),
    ));
    Handle {
        shutdown: shutdown_tx,
        main: Some(main),
        elector,
        tasks,
        ready,
        metrics,
        leading: lead_rx,
        stores,
    }
}
