//! [`ClusterApi`] over a kube [`Client`]: the operator's writes as real API calls.
//!
//! - Status: server-side apply on the status subresource, field manager
//!   [`FIELD_MANAGER`], forced (the operator owns the whole status), with
//!   `metadata.resourceVersion` in the applied object as an optimistic-concurrency
//!   precondition when the planner gives one.
//! - Finalizers: a merge patch carrying the resourceVersion (add), a JSON patch that tests the
//!   entry before removing it (remove), so neither can clobber another controller's finalizer.
//! - Events: [`events::Recorder`](super::events::Recorder) (core/v1 with `eventTime`,
//!   `lastTimestamp` and series aggregation).

use futures::future::{BoxFuture, FutureExt};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret, Service};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, Resource};
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, Partition, PartitionStatus};

use super::dra::ResourceClaim;
use super::events::{Occurrence, Recorder};
use super::exec::{ApiError, ClusterApi};
use super::gang::{self, GangApi, GangRef};

/// A written BatchJob as the cycle keeps it (until the watch delivers it): managed fields
/// (a field list per manager, as large as the status for a 32-task gang) are never read.
fn without_managed_fields(mut j: BatchJob) -> BatchJob {
    j.metadata.managed_fields = None;
    j
}
use super::plan::{JobEvent, StatusWrite};

/// The applied configuration of a status write, serialized straight from the planned status:
/// no `serde_json::Value` of it built and dropped per write (that was ~2% of the operator's CPU
/// when it starts a burst of one-node jobs).
#[derive(Debug, serde::Serialize)]
struct StatusApply<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'a str,
    metadata: ApplyMeta<'a>,
    status: &'a muster_crds::v1alpha1::BatchJobStatus,
}

#[derive(Debug, serde::Serialize)]
struct ApplyMeta<'a> {
    name: &'a str,
    namespace: &'a str,
    /// The precondition, when the planner gives one.
    #[serde(rename = "resourceVersion", skip_serializing_if = "Option::is_none")]
    resource_version: Option<&'a str>,
}

impl<'a> StatusApply<'a> {
    fn new(
        api_version: &'a str,
        kind: &'a str,
        ns: &'a str,
        name: &'a str,
        w: &'a StatusWrite,
    ) -> Self {
        StatusApply {
            api_version,
            kind,
            metadata: ApplyMeta {
                name,
                namespace: ns,
                resource_version: w.resource_version.as_deref(),
            },
            status: &w.status,
        }
    }
}

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "muster-operator";

/// A write whose object is gone (deleted meanwhile) has nothing left to do.
fn gone_is_done<T>(r: Result<T, kube::Error>) -> Result<(), ApiError> {
    match r.map_err(api_error) {
        Ok(_) | Err(ApiError::NotFound(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Maps a kube error.
pub fn api_error(e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(s) => match s.code {
            409 => ApiError::Conflict(s.message),
            404 => ApiError::NotFound(s.message),
            code => ApiError::Status {
                code,
                message: s.message,
            },
        },
        other => ApiError::Transport(other.to_string()),
    }
}

/// The Workload or PodGroup resource of namespace `ns`. Untyped: the kinds are alpha and
/// Muster writes them whole and never reads them back.
fn group_api(client: &Client, ns: &str, api: GangApi) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(gang::GROUP, api.version(), api.kind());
    let ar = ApiResource::from_gvk_with_plural(&gvk, api.plural());
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// The operator's writes through kube.
#[derive(Clone)]
pub struct KubeApi {
    client: Client,
    recorder: Recorder,
}

impl KubeApi {
    /// Writes through `client`; events are reported as `muster-operator` from `instance`.
    pub fn new(client: Client, instance: &str) -> Self {
        let recorder = Recorder::new(client.clone(), FIELD_MANAGER, instance);
        KubeApi { client, recorder }
    }

    fn jobs(&self, ns: &str) -> Api<BatchJob> {
        Api::namespaced(self.client.clone(), ns)
    }
}

impl ClusterApi for KubeApi {
    fn add_finalizer<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        resource_version: Option<&'a str>,
        existing: &'a [String],
    ) -> BoxFuture<'a, Result<BatchJob, ApiError>> {
        async move {
            let mut f: Vec<String> = existing.to_vec();
            if !f.iter().any(|x| x == labels::FINALIZER) {
                f.push(labels::FINALIZER.into());
            }
            let mut meta = serde_json::json!({ "finalizers": f });
            if let Some(rv) = resource_version {
                meta["resourceVersion"] = rv.into();
            }
            self.jobs(ns)
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({ "metadata": meta })),
                )
                .await
                .map(without_managed_fields)
                .map_err(api_error)
        }
        .boxed()
    }

    fn remove_finalizer<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        existing: &'a [String],
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let Some(i) = existing.iter().position(|x| x == labels::FINALIZER) else {
                return Ok(());
            };
            let path = format!("/metadata/finalizers/{i}");
            let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
                { "op": "test", "path": path, "value": labels::FINALIZER },
                { "op": "remove", "path": path },
            ]))
            .map_err(|e| ApiError::Transport(e.to_string()))?;
            gone_is_done(
                self.jobs(ns)
                    .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
                    .await,
            )
        }
        .boxed()
    }

    fn apply_status<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        w: &'a StatusWrite,
    ) -> BoxFuture<'a, Result<BatchJob, ApiError>> {
        async move {
            let api_version = BatchJob::api_version(&());
            let kind = BatchJob::kind(&());
            let body = StatusApply::new(&api_version, &kind, ns, name, w);
            self.jobs(ns)
                .patch_status(
                    name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await
                .map(without_managed_fields)
                .map_err(api_error)
        }
        .boxed()
    }

    fn create_pod<'a>(
        &'a self,
        pod: &'a Pod,
        gang: Option<&'a GangRef>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            // `Api::create` would decode the created pod (several KB each, thousands in a
            // big cycle) only to drop it: the answer is decoded into nothing instead.
            #[derive(serde::Deserialize)]
            struct Unread {}
            let body = match gang {
                // The gang reference is no field of k8s-openapi's v1_32 Pod: added as JSON.
                Some(g) => gang::pod_json(pod, Some(g)).and_then(|v| serde_json::to_vec(&v)),
                None => serde_json::to_vec(pod),
            }
            .map_err(|e| ApiError::Transport(e.to_string()))?;
            let mut req = kube::core::Request::new(Pod::url_path(&(), Some(ns)))
                .create(&PostParams::default(), body)
                .map_err(|e| ApiError::Transport(e.to_string()))?;
            req.extensions_mut().insert("create");
            match self.client.request::<Unread>(req).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => Ok(()),
                Err(e) => Err(api_error(e)),
            }
        }
        .boxed()
    }

    fn delete_pod<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            gone_is_done(api.delete(name, &DeleteParams::default()).await)
        }
        .boxed()
    }

    fn annotate_pod<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        annotations: &'a std::collections::BTreeMap<String, Option<String>>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            let patch = serde_json::json!({ "metadata": { "annotations": annotations } });
            gone_is_done(
                api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
            )
        }
        .boxed()
    }

    fn create_claim<'a>(&'a self, claim: &'a ResourceClaim) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let ns = claim.metadata.namespace.as_deref().unwrap_or("default");
            let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), ns);
            match api.create(&PostParams::default(), claim).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => Ok(()),
                Err(e) => Err(api_error(e)),
            }
        }
        .boxed()
    }

    fn delete_claim<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), ns);
            gone_is_done(api.delete(name, &DeleteParams::default()).await)
        }
        .boxed()
    }

    fn create_group<'a>(
        &'a self,
        api: GangApi,
        group: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let ns = group["metadata"]["namespace"].as_str().unwrap_or("default");
            let obj: DynamicObject = serde_json::from_value(group.clone())
                .map_err(|e| ApiError::Transport(e.to_string()))?;
            match group_api(&self.client, ns, api)
                .create(&PostParams::default(), &obj)
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => Ok(()),
                Err(e) => Err(api_error(e)),
            }
        }
        .boxed()
    }

    fn delete_group<'a>(
        &'a self,
        ns: &'a str,
        api: GangApi,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            gone_is_done(
                group_api(&self.client, ns, api)
                    .delete(name, &DeleteParams::default())
                    .await,
            )
        }
        .boxed()
    }

    fn create_secret<'a>(&'a self, secret: &'a Secret) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let ns = secret.metadata.namespace.as_deref().unwrap_or("default");
            let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
            create_owned(&api, secret).await
        }
        .boxed()
    }

    fn create_service<'a>(&'a self, svc: &'a Service) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
            let api: Api<Service> = Api::namespaced(self.client.clone(), ns);
            create_owned(&api, svc).await
        }
        .boxed()
    }

    fn create_batchjob<'a>(&'a self, job: &'a BatchJob) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let ns = job.metadata.namespace.as_deref().unwrap_or("default");
            match self.jobs(ns).create(&PostParams::default(), job).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(api_error(e)),
            }
        }
        .boxed()
    }

    fn patch_batchjob<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        patch: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            self.jobs(ns)
                .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map(|_| ())
                .map_err(api_error)
        }
        .boxed()
    }

    fn apply_partition_status<'a>(
        &'a self,
        name: &'a str,
        status: &'a PartitionStatus,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let api: Api<Partition> = Api::all(self.client.clone());
            let body = serde_json::json!({
                "apiVersion": Partition::api_version(&()),
                "kind": Partition::kind(&()),
                "metadata": { "name": name },
                "status": status,
            });
            api.patch_status(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map(|_| ())
            .map_err(api_error)
        }
        .boxed()
    }

    fn publish_event<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        uid: &'a str,
        ev: &'a JobEvent,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        async move {
            let reference = ObjectReference {
                api_version: Some(BatchJob::api_version(&()).to_string()),
                kind: Some(BatchJob::kind(&()).to_string()),
                name: Some(name.to_string()),
                namespace: Some(ns.to_string()),
                uid: Some(uid.to_string()),
                ..Default::default()
            };
            self.recorder
                .publish(&Occurrence {
                    regarding: &reference,
                    warning: ev.warning,
                    reason: &ev.reason,
                    note: &ev.note,
                    action: "Schedule",
                })
                .await
                .map_err(api_error)
        }
        .boxed()
    }
}

/// Creates `obj`, a job's own object (Secret, Service); one already there is kept when it is
/// the same job's (a crash after the create), and refused when another owner's: an earlier job
/// of the same name whose Service or Secret the garbage collector has not removed yet would
/// otherwise stand in for this job's and then vanish under its pods. The job's next cycle
/// tries again.
async fn create_owned<K>(api: &Api<K>, obj: &K) -> Result<(), ApiError>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let name = obj.meta().name.clone().unwrap_or_default();
            let existing = api.get(&name).await.map_err(api_error)?;
            if same_owner(existing.meta(), obj.meta()) {
                Ok(())
            } else {
                Err(ApiError::Conflict(format!(
                    "{} {name} exists and is not this job's (an earlier job's, not yet \
                     removed?): waiting for it to go",
                    K::kind(&())
                )))
            }
        }
        Err(e) => Err(api_error(e)),
    }
}

/// Whether `existing` is owned by the owner `want` names (its first owner reference's uid).
fn same_owner(
    existing: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    want: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    let Some(uid) = want
        .owner_references
        .as_ref()
        .and_then(|o| o.first())
        .map(|o| o.uid.as_str())
    else {
        return true;
    };
    existing
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_keeps_only_its_own_service_or_secret() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
        let owned = |uid: &str| ObjectMeta {
            name: Some("train".into()),
            owner_references: Some(vec![OwnerReference {
                uid: uid.into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert!(
            same_owner(&owned("a"), &owned("a")),
            "a crash after the create"
        );
        assert!(!same_owner(&owned("old"), &owned("a")), "an earlier job's");
        assert!(
            !same_owner(&ObjectMeta::default(), &owned("a")),
            "someone else's"
        );
    }

    /// The status write's body is the object the operator applied before it was serialized
    /// straight from the status: apiVersion, kind, name, namespace, the precondition when
    /// given, the whole status.
    #[test]
    fn status_apply_body_is_the_applied_object() {
        let status: muster_crds::v1alpha1::BatchJobStatus = serde_json::from_value(json!({
            "jobId": 7, "state": "RUNNING", "numNodes": 1, "nodeList": "gpu0001",
            "tasks": [{"rank": 0, "node": "gpu0001", "gpus": [3], "gpuUuids": ["GPU-3"],
                "cpuMillis": 1000, "memoryMib": 512, "localRank": 0, "nodeRank": 0}],
            "submitTime": "2026-11-28T00:00:00Z"
        }))
        .unwrap();
        for rv in [Some("42".to_string()), None] {
            let w = StatusWrite {
                status: status.clone(),
                resource_version: rv.clone(),
            };
            let (av, kind) = (BatchJob::api_version(&()), BatchJob::kind(&()));
            let got = serde_json::to_value(StatusApply::new(&av, &kind, "ns", "job", &w)).unwrap();
            let mut meta = json!({"name": "job", "namespace": "ns"});
            if let Some(rv) = &rv {
                meta["resourceVersion"] = rv.clone().into();
            }
            let want = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
                "metadata": meta, "status": w.status});
            assert_eq!(got, want);
        }
    }
}
