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

mod cycle;
pub mod dra;
pub mod filter;
pub mod gang;
mod state;
mod writes;

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use muster_operator::controller::dra::{DeviceClass, ResourceClaim, ResourceSlice};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::SimClock;
use dra::Dra;
use gang::{Groups, SchedPod};
use state::State;
use writes::{BindFut, ReportFut, Write, bind_future, report_future};
pub(crate) use writes::{PodRef, pod_event};

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
