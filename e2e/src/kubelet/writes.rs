//! The kubelet's pod writes (status, final delete, eviction), and the retries that carry every
//! kubelet write through the transient faults a test injects.

use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::Value;

use super::pod::{Action, SimPod};

pub(super) enum PodWrite {
    Status(Value),
    FinalDelete,
    Evict(Value),
}

pub(super) type PodFut =
    BoxFuture<'static, (String, u64, Action, Timestamp, Result<(), WriteError>)>;
pub(super) type MiscFut = BoxFuture<'static, ()>;

#[derive(Debug)]
pub(super) enum WriteError {
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
pub(super) async fn with_retries<T, F, Fut>(mut f: F) -> Result<T, kube::Error>
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

pub(super) fn pod_write(
    client: &Client,
    p: &SimPod,
    action: Action,
    at: Timestamp,
    w: PodWrite,
) -> PodFut {
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
