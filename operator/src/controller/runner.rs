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

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, GpuNode, Partition};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::discovery::{self, Capabilities};
use super::dra::inventory::SliceObs;
use super::dra::{ClaimObs, DeviceClass, DraSupport, ResourceClaim, ResourceSlice};
use super::early;
use super::exec::{self, Faults, NoFaults};
use super::jobids::JobIds;
use super::jobobs::{self, JobObs};
use super::kube_api::KubeApi;
use super::leader::{LeaderElector, LeaseTimings};
use super::metrics::Metrics;
use super::nodeobs::{self, GpuObs, NodeCache, NodeEvents, NodeObs};
use super::plan::{self, Inputs, PlanMemory, PlanSettings, PodObs};
use super::taskpod::{self, TaskPod};
use super::translate::NodeTable;
use super::usage::Usage;

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

/// The reflector caches.
#[derive(Clone)]
pub struct Stores {
    /// Partitions.
    pub partitions: Store<Partition>,
    /// BatchJobs, task records compact.
    pub jobs: Store<JobObs>,
    /// The versions of BatchJobs we wrote, shared with `jobs` (see [`jobobs::Versions`]).
    pub job_versions: jobobs::Versions,
    /// Task pods, as the planner reads them.
    pub pods: Store<PodObs>,
    /// Nodes, as the node table reads them.
    pub nodes: Store<NodeObs>,
    /// GpuNodes, as the node table reads them.
    pub gpunodes: Store<GpuObs>,
    /// Node, GpuNode and ResourceSlice events applied so far.
    pub node_events: NodeEvents,
    /// The node table built from `nodes`, `gpunodes` and `slices` (shared by the leader and
    /// the webhook).
    node_table: Arc<std::sync::Mutex<NodeCache>>,
    /// ResourceClaims of every namespace, as the planner reads them (empty where
    /// `resource.k8s.io/v1` is not served).
    pub claims: Store<ClaimObs>,
    /// The NVIDIA DRA driver's ResourceSlices, slimmed.
    pub slices: Store<SliceObs>,
    /// DeviceClasses.
    pub classes: Store<DeviceClass>,
    /// What discovery found (`None` until it first answers).
    pub caps: watch::Receiver<Option<Capabilities>>,
    /// PersistentVolumeClaims of every namespace, trimmed to what submission reads (their
    /// access modes). Not waited for: an operator without the right to list them judges no
    /// claim rather than none at all.
    pub volume_claims: Store<PersistentVolumeClaim>,
}

impl Stores {
    /// Whether every cache has its first full list.
    pub async fn wait_ready(&self) {
        let _ = self.partitions.wait_until_ready().await;
        let _ = self.jobs.wait_until_ready().await;
        let _ = self.pods.wait_until_ready().await;
        let _ = self.nodes.wait_until_ready().await;
        let _ = self.gpunodes.wait_until_ready().await;
        let mut caps = self.caps.clone();
        let Ok(c) = caps.wait_for(Option::is_some).await.map(|c| *c) else {
            return;
        };
        if c.is_some_and(|c| c.resource_v1) {
            let _ = self.claims.wait_until_ready().await;
            let _ = self.slices.wait_until_ready().await;
            let _ = self.classes.wait_until_ready().await;
        }
    }

    /// What discovery found so far (nothing served before it answers).
    pub fn capabilities(&self) -> Capabilities {
        self.caps.borrow().unwrap_or_default()
    }

    /// The node table: every Node with its GpuNode and, where `resource.k8s.io/v1` is served
    /// and the NVIDIA DRA driver publishes a node's GPUs, those. Built again only after a
    /// Node, GpuNode or ResourceSlice event (the same table otherwise).
    pub fn node_table(&self) -> Arc<NodeTable> {
        let use_slices = self.capabilities().resource_v1;
        let mut cache = self.node_table.lock().unwrap_or_else(|e| e.into_inner());
        cache.table(
            &self.node_events,
            || self.nodes.state(),
            || self.gpunodes.state(),
            || self.slices.state(),
            use_slices,
        )
    }

    /// What the cluster offers for DRA binding now.
    pub fn dra_support(&self) -> DraSupport {
        let served = self.capabilities().resource_v1;
        DraSupport {
            served,
            classes: if served {
                self.classes.state().iter().map(|c| c.name_any()).collect()
            } else {
                Default::default()
            },
        }
    }
}

/// A claim as submission reads it: name, namespace and access modes.
fn trim_volume_claim(c: &mut PersistentVolumeClaim) {
    c.metadata.managed_fields = None;
    c.metadata.annotations = None;
    c.metadata.labels = None;
    c.status = None;
    if let Some(s) = c.spec.as_mut() {
        *s = k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
            access_modes: s.access_modes.take(),
            ..Default::default()
        };
    }
}

fn trim_meta<K: Resource>(k: &mut K) {
    k.meta_mut().managed_fields = None;
}

/// A reflector over `K` objects, each decoded and then cached as `S` (`K` trimmed, or read
/// into a smaller type); `slim` may drop an event. `counter` (if any) is bumped after each
/// event the cache applied.
fn reflect<K, S, F>(
    api: Api<K>,
    cfg: watcher::Config,
    slim: F,
    notify: Arc<Notify>,
    counter: Option<NodeEvents>,
    metrics: Metrics,
) -> (Store<S>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: reflector::Lookup + Clone + Send + Sync + 'static,
    S::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    F: Fn(watcher::Event<K>) -> Option<watcher::Event<S>> + Send + 'static,
{
    let (reader, writer) = reflector::store();
    (
        reader,
        reflect_into(writer, api, cfg, slim, notify, counter, metrics),
    )
}

/// [`reflect`] into a store made beforehand.
fn reflect_into<K, S, F>(
    writer: reflector::store::Writer<S>,
    api: Api<K>,
    cfg: watcher::Config,
    slim: F,
    notify: Arc<Notify>,
    counter: Option<NodeEvents>,
    metrics: Metrics,
) -> JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: reflector::Lookup + Clone + Send + Sync + 'static,
    S::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    F: Fn(watcher::Event<K>) -> Option<watcher::Event<S>> + Send + 'static,
{
    let stream = reflector::reflector(
        writer,
        watcher(api, cfg)
            .default_backoff()
            .filter_map(move |ev| std::future::ready(ev.map(&slim).transpose())),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(_) => {
                    if let Some(c) = &counter {
                        c.bump();
                    }
                    notify.notify_one()
                }
                Err(e) => {
                    metrics.error("watch");
                    tracing::warn!(error = %e, kind = %<K as Resource>::kind(&Default::default()), "watch error");
                }
            }
        }
    })
}

fn slim_claim(ev: watcher::Event<ResourceClaim>) -> Option<watcher::Event<ClaimObs>> {
    use watcher::Event as E;
    Some(match ev {
        E::Apply(c) => E::Apply(ClaimObs::from_claim(&c)),
        E::Delete(c) => E::Delete(ClaimObs::from_claim(&c)),
        E::InitApply(c) => E::InitApply(ClaimObs::from_claim(&c)),
        E::Init => E::Init,
        E::InitDone => E::InitDone,
    })
}

fn slim_slice(ev: watcher::Event<ResourceSlice>) -> Option<watcher::Event<SliceObs>> {
    use watcher::Event as E;
    Some(match ev {
        E::Apply(s) => E::Apply(SliceObs::from_slice(&s)?),
        E::Delete(s) => E::Delete(SliceObs::from_slice(&s)?),
        E::InitApply(s) => E::InitApply(SliceObs::from_slice(&s)?),
        E::Init => E::Init,
        E::InitDone => E::InitDone,
    })
}

/// Aborts the tasks it holds when dropped (the DRA reflectors, started by the discovery task,
/// stop with it).
struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Discovery, again every [`discovery::INTERVAL`]; starts the DRA reflectors (into `writers`)
/// once `resource.k8s.io/v1` is served.
async fn discover_loop(
    client: Client,
    caps: watch::Sender<Option<Capabilities>>,
    writers: (
        reflector::store::Writer<ClaimObs>,
        reflector::store::Writer<SliceObs>,
        reflector::store::Writer<DeviceClass>,
    ),
    notify: Arc<Notify>,
    node_events: NodeEvents,
    metrics: Metrics,
) {
    let mut writers = Some(writers);
    let mut started = AbortOnDrop(Vec::new());
    let mut delay = Duration::from_millis(200);
    loop {
        match discovery::discover(&client).await {
            Ok(c) => {
                if c.resource_v1
                    && let Some((wc, ws, wd)) = writers.take()
                {
                    tracing::info!(
                        "resource.k8s.io/v1 is served: watching ResourceClaims, ResourceSlices and DeviceClasses"
                    );
                    let wcfg = watcher::Config::default;
                    started.0.push(reflect_into(
                        wc,
                        Api::<ResourceClaim>::all(client.clone()),
                        wcfg(),
                        slim_claim,
                        notify.clone(),
                        None,
                        metrics.clone(),
                    ));
                    started.0.push(reflect_into(
                        ws,
                        Api::<ResourceSlice>::all(client.clone()),
                        wcfg().fields(&format!("spec.driver={}", super::dra::NVIDIA_DRIVER)),
                        slim_slice,
                        notify.clone(),
                        Some(node_events.clone()),
                        metrics.clone(),
                    ));
                    started.0.push(reflect_into(
                        wd,
                        Api::<DeviceClass>::all(client.clone()),
                        wcfg(),
                        |e| Some(e.modify(trim_meta)),
                        notify.clone(),
                        None,
                        metrics.clone(),
                    ));
                }
                if *caps.borrow() != Some(c) {
                    tracing::info!(dra = c.resource_v1, gang = ?c.gang, "API discovery");
                    caps.send_replace(Some(c));
                    notify.notify_one();
                }
                delay = discovery::INTERVAL;
            }
            Err(e) => {
                metrics.error("discovery");
                tracing::warn!(error = %e, "API discovery failed; retrying");
                delay = (delay * 2).min(discovery::INTERVAL);
            }
        }
        tokio::time::sleep(delay).await;
    }
}

/// Starts the reflectors.
pub fn start_reflectors(
    client: &Client,
    notify: Arc<Notify>,
    metrics: &Metrics,
) -> (Stores, Vec<JoinHandle<()>>) {
    let wc = watcher::Config::default;
    let node_events = NodeEvents::default();
    let (partitions, t1) = reflect(
        Api::<Partition>::all(client.clone()),
        wc(),
        |e| Some(e.modify(trim_meta)),
        notify.clone(),
        None,
        metrics.clone(),
    );
    let (jobs, jobs_writer) = reflector::store();
    let job_versions = jobobs::Versions::new(jobs.clone());
    let t2 = {
        let v = job_versions.clone();
        reflect_into(
            jobs_writer,
            Api::<BatchJob>::all(client.clone()),
            wc(),
            move |e| v.slim_event(e),
            notify.clone(),
            None,
            metrics.clone(),
        )
    };
    let (pods, t3) = reflect(
        Api::<TaskPod>::all(client.clone()),
        wc().labels(labels::BATCHJOB),
        taskpod::slim_event,
        notify.clone(),
        None,
        metrics.clone(),
    );
    let (nodes, t4) = reflect(
        Api::<Node>::all(client.clone()),
        wc(),
        nodeobs::slim_node,
        notify.clone(),
        Some(node_events.clone()),
        metrics.clone(),
    );
    let (gpunodes, t5) = reflect(
        Api::<GpuNode>::all(client.clone()),
        wc(),
        nodeobs::slim_gpunode,
        notify.clone(),
        Some(node_events.clone()),
        metrics.clone(),
    );
    // Claims change nothing the scheduling cycle reads: no wake-up on their events.
    let (volume_claims, t7) = reflect(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        wc(),
        |e| Some(e.modify(trim_volume_claim)),
        Arc::new(Notify::new()),
        None,
        metrics.clone(),
    );
    let (claims, wc1) = reflector::store();
    let (slices, ws) = reflector::store();
    let (classes, wd) = reflector::store();
    let (caps_tx, caps) = watch::channel(None);
    let t6 = tokio::spawn(discover_loop(
        client.clone(),
        caps_tx,
        (wc1, ws, wd),
        notify,
        node_events.clone(),
        metrics.clone(),
    ));
    (
        Stores {
            partitions,
            jobs,
            job_versions,
            pods,
            nodes,
            gpunodes,
            node_events,
            node_table: Default::default(),
            claims,
            slices,
            classes,
            caps,
            volume_claims,
        },
        vec![t1, t2, t3, t4, t5, t6, t7],
    )
}

/// `a` is a newer resourceVersion than `b`: compared as integers when both are (as etcd's
/// are); otherwise only equality is known and `None` is returned.
pub fn rv_newer(a: &str, b: &str) -> Option<bool> {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => Some(x > y),
        _ => (a == b).then_some(false),
    }
}

/// The operator's own recent writes, folded into what the caches show.
#[derive(Default)]
pub struct Recent {
    /// BatchJobs as returned by our status/finalizer writes (as cached), by uid, with the
    /// cycles they have been kept.
    jobs: HashMap<String, (Arc<JobObs>, u32)>,
    /// Pods we created, not yet in the cache.
    created: HashMap<(String, String), (Arc<PodObs>, Instant)>,
    /// Pods we deleted, not yet shown deleting.
    deleted: HashMap<(String, String), Instant>,
    /// Array elements we created, not yet in the cache.
    created_jobs: HashMap<(String, String), Instant>,
    /// ResourceClaims we deleted, not yet shown deleting.
    deleted_claims: HashMap<(String, String), Instant>,
}

/// How long an unconfirmed write is assumed; after that the cache is trusted again.
const EXPECT_TTL: Duration = Duration::from_secs(30);

impl Recent {
    /// Forgets everything (a new term as leader).
    pub fn clear(&mut self) {
        *self = Recent::default();
    }

    /// The jobs to plan with: the cache, with our newer writes in place of stale entries.
    pub fn merge_jobs(&mut self, cached: Vec<Arc<JobObs>>) -> Vec<Arc<JobObs>> {
        let mut out = Vec::with_capacity(cached.len());
        let mut seen = HashSet::with_capacity(self.jobs.len());
        for j in cached {
            let uid = j.uid();
            if let Some((mine, age)) = self.jobs.get_mut(&uid) {
                seen.insert(uid.clone());
                let crv = j.job().resource_version().unwrap_or_default();
                let mrv = mine.job().resource_version().unwrap_or_default();
                let cache_caught_up = match rv_newer(&mrv, &crv) {
                    Some(newer) => !newer,
                    None => *age > 20,
                };
                if cache_caught_up {
                    self.jobs.remove(&uid);
                    out.push(j);
                } else {
                    *age += 1;
                    out.push(mine.clone());
                }
            } else {
                out.push(j);
            }
        }
        // Deleted meanwhile: drop.
        self.jobs.retain(|k, _| seen.contains(k));
        let present: HashSet<(String, String)> = out
            .iter()
            .map(|j| (j.job().namespace().unwrap_or_default(), j.job().name_any()))
            .collect();
        self.created_jobs
            .retain(|k, t| !present.contains(k) && t.elapsed() < EXPECT_TTL);
        out
    }

    /// The pods to plan with: the cache, plus pods we created that it lacks, with pods we
    /// deleted marked as deleting.
    pub fn merge_pods(&mut self, mut cached: Vec<Arc<PodObs>>) -> Vec<Arc<PodObs>> {
        {
            // Borrowed keys: 50,000 pods would otherwise mean 100,000 string copies a cycle.
            let present: HashSet<(&str, &str)> =
                cached.iter().map(|p| (p.namespace(), p.name())).collect();
            let has = |k: &(String, String)| present.contains(&(k.0.as_str(), k.1.as_str()));
            self.created
                .retain(|k, (_, t)| !has(k) && t.elapsed() < EXPECT_TTL);
            self.deleted
                .retain(|k, t| has(k) && t.elapsed() < EXPECT_TTL);
        }
        if !self.deleted.is_empty() {
            for p in &mut cached {
                if !p.deleting
                    && self
                        .deleted
                        .contains_key(&(p.namespace().to_string(), p.name().to_string()))
                {
                    let mut q = (**p).clone();
                    q.deleting = true;
                    *p = Arc::new(q);
                }
            }
        }
        cached.extend(self.created.values().map(|(p, _)| p.clone()));
        cached
    }

    /// The claims to plan with: the cache, with claims we deleted marked as deleting.
    pub fn merge_claims(&mut self, mut cached: Vec<Arc<ClaimObs>>) -> Vec<Arc<ClaimObs>> {
        if self.deleted_claims.is_empty() {
            return cached;
        }
        let present: HashSet<(&str, &str)> = cached
            .iter()
            .filter(|c| !c.deleting)
            .map(|c| (c.namespace(), c.name()))
            .collect();
        self.deleted_claims.retain(|k, t| {
            present.contains(&(k.0.as_str(), k.1.as_str())) && t.elapsed() < EXPECT_TTL
        });
        for c in &mut cached {
            if !c.deleting
                && self
                    .deleted_claims
                    .contains_key(&(c.namespace().to_string(), c.name().to_string()))
            {
                let mut d = (**c).clone();
                d.deleting = true;
                *c = Arc::new(d);
            }
        }
        cached
    }

    /// Array elements created but not yet seen.
    pub fn expected_jobs(&self) -> HashSet<(String, String)> {
        self.created_jobs.keys().cloned().collect()
    }

    /// Records a cycle's writes, taking the written jobs and created pods out of the report
    /// (moved, not copied: after a big cycle they are thousands of objects).
    pub fn record(&mut self, r: &mut exec::ExecReport) {
        let now = Instant::now();
        for w in std::mem::take(&mut r.written) {
            let uid = w.job.uid();
            if !uid.is_empty() {
                self.jobs.insert(uid, (w.job, 0));
            }
        }
        for p in std::mem::take(&mut r.created_pods) {
            self.created.insert(
                (p.namespace().to_string(), p.name().to_string()),
                (Arc::new(p), now),
            );
        }
        for k in &r.deleted_pods {
            self.deleted.insert(k.clone(), now);
        }
        for k in &r.created_jobs {
            self.created_jobs.insert(k.clone(), now);
        }
        for k in &r.deleted_claims {
            self.deleted_claims.insert(k.clone(), now);
        }
    }
}

/// The leader's state.
struct Leader {
    api: KubeApi,
    ids: JobIds,
    usage: Usage,
    mem: PlanMemory,
    recent: Recent,
    last_running: Vec<crate::core::priority::UsageSpan>,
    /// When freed memory was last returned to the system.
    trimmed: Instant,
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

#[allow(clippy::too_many_arguments)]
async fn main_loop(
    mut leader: Leader,
    stores: Stores,
    settings: Settings,
    metrics: Metrics,
    notify: Arc<Notify>,
    mut leading: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
    ready: Arc<AtomicBool>,
) -> Result<(), RunError> {
    let mut term_started = false;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let is_leader = *leading.borrow();
        if !is_leader || !ready.load(Ordering::SeqCst) {
            if term_started && !is_leader {
                term_started = false;
                metrics.clear_gauges();
                tracing::info!("not leading: scheduling stopped");
            }
            tokio::select! {
                _ = leading.changed() => {}
                _ = shutdown.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            continue;
        }
        if !term_started {
            // A new term: nothing remembered from an earlier one is trusted.
            term_started = true;
            leader.mem = PlanMemory::default();
            leader.recent.clear();
            leader.ids.forget();
            if let Err(e) = leader.usage.load(settings.clock.now()).await {
                metrics.error(e.metric_label());
                tracing::warn!(error = %e, "could not load fair-share usage; starting empty");
            }
            tracing::info!("leading: scheduling");
        }
        let cycle = run_cycle(&mut leader, &stores, &settings, &metrics);
        let crashed = tokio::select! {
            r = cycle => r,
            _ = wait_lost(&mut leading) => {
                tracing::warn!("leadership lost during a cycle: stopped");
                false
            }
        };
        if crashed {
            return Err(RunError::Crashed);
        }
        tokio::select! {
            _ = notify.notified() => {
                tokio::time::sleep(settings.debounce).await;
            }
            _ = tokio::time::sleep(settings.cycle_interval) => {}
            _ = shutdown.changed() => {}
            _ = leading.changed() => {}
        }
    }
}

async fn wait_lost(leading: &mut watch::Receiver<bool>) {
    loop {
        if !*leading.borrow() {
            return;
        }
        if leading.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A cycle that wrote this much built and dropped that many objects (pods, request and
/// response bodies): worth handing the freed memory back to the system afterwards.
const TRIM_AFTER_WRITES: u64 = 1_000;

/// Otherwise the heap is trimmed at most this often (the reflectors' bursts of decoded
/// objects leave freed memory too).
const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Returns freed heap pages to the system where the allocator is glibc's (this library's
/// users, tests included; the `muster-operator` binary runs on mimalloc, which hands freed
/// pages back itself, and there this trims an almost empty glibc heap). glibc keeps what a
/// burst freed (per-thread arenas, fragmented heaps) mapped, so after admitting 1,000 gangs
/// in one cycle the resident size would stay at that cycle's peak for good; `malloc_trim`
/// releases it (a few ms on a large heap, only after big cycles).
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A spawned task aborted when its handle is dropped (a cycle dropped at leadership loss
/// must not go on writing).
struct AbortTask<T>(JoinHandle<T>);

impl<T> Drop for AbortTask<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One cycle; returns whether an injected crash stopped it.
async fn run_cycle(
    leader: &mut Leader,
    stores: &Stores,
    settings: &Settings,
    metrics: &Metrics,
) -> bool {
    let t0 = Instant::now();
    let now = settings.clock.now();
    let partitions = stores.partitions.state();
    let caps = stores.capabilities();
    let table = stores.node_table();
    let jobs = leader.recent.merge_jobs(stores.jobs.state());
    let pods = leader.recent.merge_pods(stores.pods.state());
    let claims = if caps.resource_v1 {
        leader.recent.merge_claims(stores.claims.state())
    } else {
        Vec::new()
    };
    let dra = stores.dra_support();
    let expected = leader.recent.expected_jobs();

    let need = plan::new_job_count(&jobs);
    if need > 0
        && let Err(e) = leader.ids.reserve(need).await
    {
        metrics.error(e.metric_label());
        tracing::warn!(error = %e, "could not reserve job ids");
    }
    leader.usage.accrue(&leader.last_running, now);
    let usage = leader.usage.record.usage.clone();
    let inp = Inputs {
        now,
        partitions: &partitions,
        nodes: &table,
        jobs: &jobs,
        pods: &pods,
        expected_jobs: &expected,
        usage: &usage,
        claims: &claims,
        dra: &dra,
        gang: caps.gang,
    };
    // New jobs get the finalizer while the plan runs (`early`): the writes wait on the API
    // server, the plan on this thread's CPU. Yielding once lets the writes' task send its
    // first requests before the plan takes this thread; their answers wake it on the other
    // worker. (Not `block_in_place`: under glibc's malloc the thread it adds got an arena of
    // its own, +10 MiB resident at 4,096 nodes.)
    let early_jobs = early::select(&jobs);
    let early_task = (!early_jobs.is_empty()).then(|| {
        let (api, faults) = (leader.api.clone(), settings.faults.clone());
        let conc = settings.write_concurrency;
        AbortTask(tokio::spawn(async move {
            exec::add_finalizers(early_jobs, &api, faults.as_ref(), conc).await
        }))
    });
    if early_task.is_some() {
        tokio::task::yield_now().await;
    }
    let ids = &mut leader.ids;
    let mut cp = plan::plan(&inp, &settings.plan, &mut leader.mem, &mut || ids.take());
    let early = match early_task {
        Some(mut t) => (&mut t.0).await.unwrap_or_default(),
        None => Default::default(),
    };
    leader.last_running = std::mem::take(&mut cp.running);
    metrics.set_gauges(&cp.gauges);
    let (starts, queued) = (cp.starts, cp.queued);
    let (n_jobs, n_pods) = (jobs.len(), pods.len());
    let mut report = early::execute_after(
        cp,
        early,
        jobs,
        &leader.api,
        settings.faults.as_ref(),
        settings.write_concurrency,
        &stores.job_versions,
    )
    .await;
    metrics.record(&report);
    for w in &report.written {
        leader.mem.wrote_status(&w.job.uid(), now);
    }
    leader.recent.record(&mut report);
    stores.job_versions.prune();
    if !report.events.is_empty() {
        // Events are best effort and must not hold up the next cycle: published in the
        // background, at most a bounded number at once (older batches still in flight are
        // not waited for).
        let api = leader.api.clone();
        let events = std::mem::take(&mut report.events);
        let m = metrics.clone();
        let conc = settings.write_concurrency;
        tokio::spawn(async move {
            let (n, errors) = exec::publish_events(&api, events, conc).await;
            m.write(exec::WriteKind::Event, n);
            for (k, v) in errors {
                m.errors
                    .get_or_create(&[("kind", format!("event_{k}"))])
                    .inc_by(v);
            }
        });
    }
    for n in &report.partitions_written {
        leader.mem.wrote_partition(n, now);
    }
    if report.crashed {
        return true;
    }
    let written: u64 = report.writes.values().sum();
    drop(report);
    if written >= TRIM_AFTER_WRITES || leader.trimmed.elapsed() >= TRIM_INTERVAL {
        release_free_memory();
        leader.trimmed = Instant::now();
    }
    if let Err(e) = leader.usage.maybe_persist(now).await {
        metrics.error(e.metric_label());
        tracing::warn!(error = %e, "could not persist fair-share usage");
    }
    let dt = t0.elapsed();
    metrics.cycle.observe(dt.as_secs_f64());
    tracing::debug!(
        elapsed_ms = dt.as_millis() as u64,
        jobs = n_jobs,
        pods = n_pods,
        queued,
        starts,
        writes = written,
        "cycle"
    );
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::pods::TASK_ANNOTATION;
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn resource_versions_compare_as_integers() {
        assert_eq!(rv_newer("10", "9"), Some(true));
        assert_eq!(rv_newer("9", "10"), Some(false));
        assert_eq!(rv_newer("abc", "abc"), Some(false));
        assert_eq!(rv_newer("abc", "abd"), None);
    }

    fn job(uid: &str, rv: &str) -> Arc<JobObs> {
        let mut j = BatchJob::new("j", Default::default());
        j.metadata.uid = Some(uid.into());
        j.metadata.resource_version = Some(rv.into());
        Arc::new(JobObs::new(j))
    }

    #[test]
    fn own_writes_win_until_the_cache_catches_up() {
        let mut r = Recent::default();
        let mut rep = exec::ExecReport::default();
        rep.written.push(exec::Written {
            job: job("u1", "5"),
            effects: vec![],
        });
        r.record(&mut rep.clone());
        let v = r.merge_jobs(vec![job("u1", "3"), job("u2", "1")]);
        assert_eq!(v[0].job().resource_version().as_deref(), Some("5"));
        assert_eq!(v[1].job().resource_version().as_deref(), Some("1"));
        let v = r.merge_jobs(vec![job("u1", "6")]);
        assert_eq!(v[0].job().resource_version().as_deref(), Some("6"));
        assert!(r.jobs.is_empty());
        // Deleted objects are not resurrected.
        r.record(&mut rep.clone());
        assert!(r.merge_jobs(vec![]).is_empty());
    }

    #[test]
    fn created_and_deleted_pods_are_seen_before_the_watch_says_so() {
        let mut r = Recent::default();
        let obs = |name: &str| {
            let mut o = PodObs::new("ns", name, "j", None, None);
            o.attempt = Some(1);
            o.node = Some(0);
            o.phase = plan::Phase::Running;
            o
        };
        let mut rep = exec::ExecReport::default();
        rep.created_pods.push(obs("new"));
        rep.deleted_pods.push(("ns".into(), "old".into()));
        r.record(&mut rep.clone());
        let v = r.merge_pods(vec![Arc::new(obs("old"))]);
        assert_eq!(v.len(), 2);
        assert!(v.iter().find(|p| p.name() == "old").unwrap().deleting);
        assert!(v.iter().any(|p| p.name() == "new"));
        // Once the cache has the new pod, it is not added twice.
        let v = r.merge_pods(vec![Arc::new(obs("new"))]);
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn caches_keep_what_the_planner_reads() {
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.labels = Some([(labels::BATCHJOB.to_string(), "j".to_string())].into());
        p.metadata.annotations = Some(
            [
                (
                    TASK_ANNOTATION.to_string(),
                    concat!(
                        r#"{"rank":0,"node":"n","nodeRank":0,"localRank":0,"cpuMillis":500,"#,
                        r#""memoryMib":64,"gpus":[3,1],"gpuUuids":["GPU-3","GPU-1"],"pod":"p"}"#
                    )
                    .to_string(),
                ),
                ("big".to_string(), "x".repeat(1000)),
            ]
            .into(),
        );
        p.spec = Some(PodSpec {
            containers: vec![
                Container {
                    name: "task".into(),
                    image: Some("img".into()),
                    ..Default::default()
                },
                Container {
                    name: "side".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        p.status = Some(PodStatus {
            phase: Some("Failed".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "task".into(),
                image: "img".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p.metadata.owner_references = Some(vec![OwnerReference {
            controller: Some(true),
            uid: "u1".into(),
            ..Default::default()
        }]);
        let before = PodObs::from_pod(&p).unwrap();
        let alloc = before.alloc.as_ref().unwrap();
        assert_eq!((&*alloc.node, &*alloc.gpus), ("n", &[3, 1][..]));
        assert_eq!((alloc.cpu_millis, alloc.memory_mib), (500, 64));
        assert_eq!(
            (before.namespace(), before.name(), before.job()),
            ("ns", "p", "j")
        );
        assert_eq!(before.owner_uid(), Some("u1"));
        assert_eq!(before.failure(), Some("pod failed"));
        // The watch decodes a TaskPod; the store keeps it as read by the planner, keyed by
        // namespace and name.
        let tp: TaskPod = serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
        let (store, mut writer) = reflector::store::<PodObs>();
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(tp.clone()),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&taskpod::slim_event(ev).unwrap());
        }
        assert_eq!(store.state().len(), 1);
        assert_eq!(*store.state()[0], before);
        // A pod without the job label is not kept (the watch selects on it anyway).
        let mut other = tp.clone();
        other.metadata.labels = None;
        assert!(taskpod::slim_event(watcher::Event::Apply(other)).is_none());
        writer.apply_watcher_event(&taskpod::slim_event(watcher::Event::Delete(tp)).unwrap());
        assert!(store.state().is_empty());
    }
}
