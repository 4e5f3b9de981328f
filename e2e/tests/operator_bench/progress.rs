//! Progress of a phase: BatchJobs started and their pods, counted through light watches.

use super::*;

/// Counts BatchJobs in RUNNING (or later) and their pods, through watches.
pub(crate) struct Progress {
    pub(crate) started: tokio::sync::watch::Receiver<(usize, usize)>,
    /// The counting task: stopped with the phase's control plane (its watches would retry
    /// against a server that is gone).
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the benchmark's progress watch decodes of an object: its namespace/name and, for a
/// BatchJob, whether it left PENDING. The watch sees every write the operator makes (three
/// BatchJob events and a Pod event per one-node job), and decoding whole objects (spec,
/// status, managedFields) here took CPU from the two cores the measured system shares with
/// this process. serde skips the rest of each object without building it.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(from = "LiteWire")]
pub(crate) struct Lite<K> {
    pub(crate) metadata: kube::api::ObjectMeta,
    pub(crate) started: bool,
    #[serde(skip)]
    pub(crate) kind: std::marker::PhantomData<K>,
}

#[derive(serde::Deserialize)]
pub(crate) struct LiteWire {
    pub(crate) metadata: LiteMeta,
    #[serde(default)]
    pub(crate) status: Option<LiteStatus>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LiteMeta {
    pub(crate) name: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) resource_version: Option<String>,
}

/// A BatchJob's `status.state` (a Pod's `status` has no `state`: always `None`).
#[derive(serde::Deserialize)]
pub(crate) struct LiteStatus {
    #[serde(default)]
    pub(crate) state: Option<serde_json::Value>,
}

impl<K> From<LiteWire> for Lite<K> {
    fn from(w: LiteWire) -> Self {
        let started = w
            .status
            .and_then(|s| s.state)
            .and_then(|v| serde_json::from_value::<JobState>(v).ok())
            .is_some_and(|s| s != JobState::Pending);
        Lite {
            metadata: kube::api::ObjectMeta {
                name: w.metadata.name,
                namespace: w.metadata.namespace,
                resource_version: w.metadata.resource_version,
                ..Default::default()
            },
            started,
            kind: std::marker::PhantomData,
        }
    }
}

impl<K> kube::Resource for Lite<K>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        &mut self.metadata
    }
}

pub(crate) fn progress(client: kube::Client) -> Progress {
    // Counted as events arrive (not by scanning a cache per event: with thousands of jobs
    // that scan would take the operator's CPU and slow what is measured).
    enum Seen {
        Job(String, bool),
        Pod(String),
    }
    let (tx, rx) = tokio::sync::watch::channel((0usize, 0usize));
    let key = |m: &kube::api::ObjectMeta| {
        format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default()
        )
    };
    let jobs = watcher(
        Api::<Lite<BatchJob>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .applied_objects()
    .filter_map(move |r| {
        futures::future::ready(
            r.ok()
                .map(|j: Lite<BatchJob>| Seen::Job(key(&j.metadata), j.started)),
        )
    });
    let pods = watcher(
        Api::<Lite<Pod>>::all(client),
        watcher::Config::default().labels(labels::BATCHJOB),
    )
    .default_backoff()
    .applied_objects()
    .filter_map(move |r| {
        futures::future::ready(r.ok().map(|p: Lite<Pod>| Seen::Pod(key(&p.metadata))))
    });
    let task = tokio::spawn(async move {
        let mut both = futures::stream::select(jobs.boxed(), pods.boxed());
        let mut started: HashMap<String, bool> = HashMap::new();
        let mut pods: std::collections::HashSet<String> = Default::default();
        let mut n = 0usize;
        while let Some(s) = both.next().await {
            match s {
                Seen::Job(k, now) => match (started.insert(k, now).unwrap_or(false), now) {
                    (false, true) => n += 1,
                    (true, false) => n -= 1,
                    _ => {}
                },
                Seen::Pod(k) => {
                    pods.insert(k);
                }
            }
            let _ = tx.send((n, pods.len()));
        }
    });
    Progress { started: rx, task }
}

impl Progress {
    pub(crate) async fn until(&mut self, jobs: usize, pods: usize, limit: Duration) -> Duration {
        let t = Instant::now();
        while t.elapsed() < limit {
            let (j, p) = *self.started.borrow();
            if j >= jobs && p >= pods {
                return t.elapsed();
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), self.started.changed()).await;
        }
        let (j, p) = *self.started.borrow();
        panic!("timed out: {j}/{jobs} jobs, {p}/{pods} pods after {limit:?}");
    }
}
