//! The scheduler's API writes: claim writes and the binding (PreBind, Bind), unschedulable
//! reports and events, claim releases.

use std::sync::atomic::{AtomicU64, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use muster_operator::controller::dra::ResourceClaim;
use serde_json::json;

use super::dra::ClaimWrite;
use crate::clock::SimClock;

pub(super) enum Write {
    Bind {
        uid: String,
        ns: String,
        name: String,
        node: String,
        /// Claim writes before the binding (PreBind).
        claims: Vec<ClaimWrite>,
    },
    /// The resourceclaim controller's release of a claim whose pods are gone.
    Release {
        ns: String,
        name: String,
        resource_version: String,
        reserved_for: Vec<muster_operator::controller::dra::ResourceClaimConsumerReference>,
        deallocate: bool,
        finalizers: Option<Vec<String>>,
    },
    Report {
        uid: String,
        ns: String,
        name: String,
        message: String,
    },
    Scheduled {
        uid: String,
        ns: String,
        name: String,
        node: String,
    },
}

pub(super) struct BindDone {
    pub(super) uid: String,
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) node: String,
    pub(super) res: Result<(), kube::Error>,
    /// The claim writes made before the bind (undone in the cache on failure).
    pub(super) claims: Vec<ClaimWrite>,
    /// The failure was a claim write's (the pod is retried), not the bind's.
    pub(super) claim_failed: bool,
}

pub(super) type BindFut = BoxFuture<'static, BindDone>;
pub(super) type ReportFut = BoxFuture<'static, Option<String>>;

/// PreBind's claim writes: the delete-protection finalizer, then the allocation and the
/// reservation in the status, each with the resourceVersion read as a precondition.
async fn write_claim(client: &Client, w: &ClaimWrite) -> Result<(), kube::Error> {
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &w.key.0);
    let mut rv = w.resource_version.clone();
    if let Some(f) = &w.finalizers {
        let c = api
            .patch(
                &w.key.1,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": f, "resourceVersion": rv}})),
            )
            .await?;
        rv = c.metadata.resource_version.unwrap_or_default();
    }
    let mut patch = w.status_patch();
    patch["metadata"]["resourceVersion"] = json!(rv);
    api.patch_status(&w.key.1, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

pub(super) fn bind_future(
    client: &Client,
    uid: String,
    ns: String,
    name: String,
    node: String,
    claims: Vec<ClaimWrite>,
) -> BindFut {
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let client = client.clone();
    async move {
        for w in &claims {
            if let Err(e) = write_claim(&client, w).await {
                return BindDone {
                    uid,
                    ns,
                    name,
                    node,
                    res: Err(e),
                    claims,
                    claim_failed: true,
                };
            }
        }
        let body = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let res = api
            .create_subresource::<serde_json::Value, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &body,
            )
            .await
            .map(|_| ());
        BindDone {
            uid,
            ns,
            name,
            node,
            res,
            claims,
            claim_failed: false,
        }
    }
    .boxed()
}

static EVENT_SEQ: AtomicU64 = AtomicU64::new(0);

/// The pod an event is about.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PodRef<'a> {
    pub ns: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// A core/v1 Event about a pod from `component`; `kind` is `Normal` or `Warning`.
pub(crate) fn pod_event(
    pod: PodRef<'_>,
    kind: &str,
    reason: &str,
    message: &str,
    component: &str,
    now: jiff::Timestamp,
) -> Event {
    let PodRef { ns, name: pod, uid } = pod;
    let n = EVENT_SEQ.fetch_add(1, Ordering::Relaxed);
    let name = format!(
        "{pod}.{:x}",
        (now.as_nanosecond() as u128 as u64).wrapping_add(n)
    );
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": pod, "uid": uid},
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": format!("{component}-muster-sim"),
        "firstTimestamp": Time(now),
        "lastTimestamp": Time(now),
        "count": 1,
    }))
    .expect("a well-formed Event")
}

pub(super) fn report_future(
    client: &Client,
    w: Write,
    clock: &SimClock,
    component: &str,
) -> ReportFut {
    let now = clock.now();
    let client = client.clone();
    let component = component.to_string();
    async move {
        match w {
            Write::Report {
                uid,
                ns,
                name,
                message,
            } => {
                let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let patch = json!({"status": {"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": message, "lastProbeTime": null, "lastTransitionTime": Time(now)}]}});
                let ok = pods
                    .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
                    .await
                    .is_ok();
                let events: Api<Event> = Api::namespaced(client, &ns);
                let ev = pod_event(
                    PodRef {
                        ns: &ns,
                        name: &name,
                        uid: &uid,
                    },
                    "Warning",
                    "FailedScheduling",
                    &message,
                    &component,
                    now,
                );
                let ok = ok && events.create(&PostParams::default(), &ev).await.is_ok();
                (!ok).then_some(uid)
            }
            Write::Scheduled {
                uid,
                ns,
                name,
                node,
            } => {
                let events: Api<Event> = Api::namespaced(client, &ns);
                let ev = pod_event(
                    PodRef {
                        ns: &ns,
                        name: &name,
                        uid: &uid,
                    },
                    "Normal",
                    "Scheduled",
                    &format!("Successfully assigned {ns}/{name} to {node}"),
                    &component,
                    now,
                );
                let _ = events.create(&PostParams::default(), &ev).await;
                None
            }
            Write::Release {
                ns,
                name,
                resource_version,
                reserved_for,
                deallocate,
                finalizers,
            } => {
                let api: Api<ResourceClaim> = Api::namespaced(client, &ns);
                let mut st = json!({
                    "reservedFor": if reserved_for.is_empty() { json!(null) } else { json!(reserved_for) },
                });
                if deallocate {
                    st["allocation"] = json!(null);
                }
                let patch = json!({"metadata": {"resourceVersion": resource_version}, "status": st});
                let res = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await;
                if let (Ok(c), Some(f)) = (res, finalizers) {
                    let rv = c.metadata.resource_version.unwrap_or_default();
                    let _ = api
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(
                                json!({"metadata": {"finalizers": f, "resourceVersion": rv}}),
                            ),
                        )
                        .await;
                }
                None
            }
            Write::Bind { .. } => None,
        }
    }
    .boxed()
}
