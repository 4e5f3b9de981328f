//! The agent's Kubernetes calls, each a thin function over a [`kube::Client`]. Everything they
//! send is computed in [`crate::publish`] and [`crate::binding`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures::StreamExt;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use muster_crds::v1alpha1::{BatchJob, GpuNode, GpuNodeStatus};

use crate::publish;

/// Reporting controller name on Events.
pub const REPORTER: &str = "muster-node-agent";

/// The node's GpuNode, if one exists.
pub async fn get_gpunode(client: &Client, node: &str) -> kube::Result<Option<GpuNode>> {
    Api::<GpuNode>::all(client.clone()).get_opt(node).await
}

/// Creates or takes over the GpuNode's spec (server-side apply).
pub async fn apply_gpunode(client: &Client, node: &str) -> kube::Result<GpuNode> {
    Api::<GpuNode>::all(client.clone())
        .patch(
            node,
            &PatchParams::apply(publish::FIELD_MANAGER).force(),
            &Patch::Apply(publish::gpunode_object(node)),
        )
        .await
}

/// Applies the GpuNode's status subresource.
pub async fn apply_status(
    client: &Client,
    node: &str,
    status: &GpuNodeStatus,
) -> kube::Result<GpuNode> {
    Api::<GpuNode>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::apply(publish::FIELD_MANAGER).force(),
            &Patch::Apply(publish::status_patch(node, status)),
        )
        .await
}

/// Applies the agent's labels on the Node (its own field manager: labels it stops sending are
/// removed, other labels are untouched). `None` when the Node does not exist: an apply would
/// create it, and only the kubelet registers Nodes.
pub async fn apply_node_labels(
    client: &Client,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> kube::Result<Option<Node>> {
    let api = Api::<Node>::all(client.clone());
    if api.get_opt(node).await?.is_none() {
        return Ok(None);
    }
    api.patch(
        node,
        &PatchParams::apply(publish::LABELS_FIELD_MANAGER).force(),
        &Patch::Apply(publish::labels_patch(node, labels)),
    )
    .await
    .map(Some)
}

/// The pods bound to `node` (field selector `spec.nodeName`, re-checked here).
pub async fn list_node_pods(client: &Client, node: &str) -> kube::Result<Vec<Pod>> {
    let list = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .collect())
}

/// A watch of the pods bound to one node (what the kubelet does too), so polls read a local
/// cache instead of listing pods every few seconds from every node.
pub struct NodePods {
    store: Store<Pod>,
    ready: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl NodePods {
    /// Starts watching the pods of `node` (field selector `spec.nodeName`).
    pub fn watch(client: &Client, node: &str) -> Self {
        let (store, writer) = reflector::store();
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let stream = reflector(
            writer,
            watcher(Api::<Pod>::all(client.clone()), config).default_backoff(),
        );
        let ready = Arc::new(AtomicBool::new(false));
        let task = {
            let (ready, store) = (ready.clone(), store.clone());
            tokio::spawn(async move {
                let mark = async {
                    if store.wait_until_ready().await.is_ok() {
                        ready.store(true, Ordering::Release);
                    }
                };
                let drive = stream.for_each(|ev| async move {
                    if let Err(e) = ev {
                        tracing::debug!(error = %e, "pod watch");
                    }
                });
                futures::join!(mark, drive);
            })
        };
        NodePods { store, ready, task }
    }

    /// The cached pods of `node`, once the first list has arrived.
    pub fn snapshot(&self, node: &str) -> Option<Vec<Pod>> {
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        Some(
            self.store
                .state()
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
                .map(|p| Pod::clone(p))
                .collect(),
        )
    }
}

impl Drop for NodePods {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A BatchJob, if it exists.
pub async fn get_batchjob(
    client: &Client,
    namespace: &str,
    name: &str,
) -> kube::Result<Option<BatchJob>> {
    Api::<BatchJob>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
}

/// An `events.k8s.io/v1` Event about an object.
#[derive(Clone, Debug, PartialEq)]
pub struct EventSpec {
    /// The object the event is about.
    pub regarding: ObjectReference,
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// CamelCase reason (`GpuBindingViolation`).
    pub reason: &'static str,
    /// CamelCase action (`Kill`, `Report`, `MarkUnhealthy`).
    pub action: &'static str,
    /// The message.
    pub note: String,
}

/// Records an Event. Cluster-scoped objects' events go to `default`, as kubectl expects.
pub async fn create_event(
    client: &Client,
    node: &str,
    ev: &EventSpec,
    now: Timestamp,
) -> kube::Result<Event> {
    let namespace = ev
        .regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let base = ev
        .regarding
        .name
        .clone()
        .unwrap_or_else(|| REPORTER.to_string());
    let event = Event {
        metadata: ObjectMeta {
            name: Some(event_name(&base, now)),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        regarding: Some(ev.regarding.clone()),
        type_: Some(ev.type_.to_string()),
        reason: Some(ev.reason.to_string()),
        action: Some(ev.action.to_string()),
        note: Some(truncate(&ev.note, 1024)),
        reporting_controller: Some(format!("muster.dev/{REPORTER}")),
        reporting_instance: Some(format!("{REPORTER}-{node}")),
        ..Default::default()
    };
    Api::<Event>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &event)
        .await
}

/// Events of one process told apart: every Event of a poll has the poll's time, and two of
/// them about the same object (two GPUs failing at once, two processes of one pod in
/// violation) would otherwise get the same name and the second would be refused as existing.
static EVENT_SEQ: AtomicU64 = AtomicU64::new(0);

/// `<object>.<time in ns, hex><sequence, hex>`, as the Kubernetes event recorders name events
/// (plus the sequence), cut to the 253 characters a name may have.
fn event_name(base: &str, now: Timestamp) -> String {
    let seq = EVENT_SEQ.fetch_add(1, Ordering::Relaxed) & 0xffff;
    let suffix = format!(".{:x}{seq:04x}", now.as_nanosecond());
    let mut end = base.len().min(253 - suffix.len());
    while !base.is_char_boundary(end) {
        end -= 1;
    }
    let base = base[..end].trim_end_matches(['.', '-']);
    format!("{base}{suffix}")
}

/// Events carry at most 1 kB of note.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max - 3;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// A reference to a pod for Events.
pub fn pod_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name_any()),
        namespace: pod.namespace(),
        uid: pod.metadata.uid.clone(),
        ..Default::default()
    }
}

/// A reference to the GpuNode for Events.
pub fn gpunode_ref(node: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{}/{}", muster_crds::GROUP, muster_crds::VERSION)),
        kind: Some("GpuNode".into()),
        name: Some(node.to_string()),
        uid,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_differ_within_one_poll_and_fit() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let a = event_name("train-1", now);
        let b = event_name("train-1", now);
        assert_ne!(a, b);
        assert!(
            a.starts_with("train-1.") && b.starts_with("train-1."),
            "{a} {b}"
        );
        let long = event_name(&"p".repeat(253), now);
        assert!(long.len() <= 253, "{}", long.len());
    }

    #[test]
    fn notes_are_cut_on_a_char_boundary() {
        assert_eq!(truncate("short", 1024), "short");
        let long = "é".repeat(600);
        let t = truncate(&long, 1024);
        assert!(t.len() <= 1024 && t.ends_with("..."));
    }
}
