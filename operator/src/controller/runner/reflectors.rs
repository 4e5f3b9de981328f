//! The reflector caches: every watch the operator keeps, objects trimmed or slimmed to what
//! is read of them, and the DRA watches started once discovery finds `resource.k8s.io/v1`.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

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

use crate::controller::discovery::{self, Capabilities};
use crate::controller::dra::inventory::SliceObs;
use crate::controller::dra::{ClaimObs, DeviceClass, DraSupport, ResourceClaim, ResourceSlice};
use crate::controller::jobobs::{self, JobObs};
use crate::controller::metrics::Metrics;
use crate::controller::nodeobs::{self, GpuObs, NodeCache, NodeEvents, NodeObs};
use crate::controller::plan::PodObs;
use crate::controller::taskpod::{self, TaskPod};
use crate::controller::translate::NodeTable;

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
                        wcfg().fields(&format!(
                            "spec.driver={}",
                            crate::controller::dra::NVIDIA_DRIVER
                        )),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::pods::TASK_ANNOTATION;
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

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
