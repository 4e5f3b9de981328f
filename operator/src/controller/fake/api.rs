//! [`ClusterApi`] over the fake cluster, with the API server's semantics the operator relies
//! on (resourceVersion preconditions, finalizers, refusals).

use futures::future::{BoxFuture, FutureExt};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, PartitionStatus};

use super::{FakeClaim, FakeCluster, ts};
use crate::controller::dra::{self, ResourceClaim};
use crate::controller::exec::{ApiError, ClusterApi};
use crate::controller::gang::{GangApi, GangRef};
use crate::controller::plan::{JobEvent, StatusWrite};

fn done<'a, T: Send + 'a>(v: T) -> BoxFuture<'a, T> {
    futures::future::ready(v).boxed()
}

impl ClusterApi for FakeCluster {
    fn add_finalizer<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        resource_version: Option<&'a str>,
        _existing: &'a [String],
    ) -> BoxFuture<'a, Result<BatchJob, ApiError>> {
        let mut s = self.lock();
        let rv = s.bump();
        let r = match s.jobs.get_mut(&(ns.to_string(), name.to_string())) {
            None => Err(ApiError::NotFound(name.into())),
            Some(j)
                if resource_version.is_some()
                    && j.resource_version().as_deref() != resource_version =>
            {
                Err(ApiError::Conflict(name.into()))
            }
            Some(j) => {
                let f = j.metadata.finalizers.get_or_insert_with(Vec::new);
                if !f.iter().any(|x| x == labels::FINALIZER) {
                    f.push(labels::FINALIZER.into());
                }
                j.metadata.resource_version = Some(rv);
                Ok(j.clone())
            }
        };
        done(r)
    }

    fn remove_finalizer<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        _existing: &'a [String],
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let rv = s.bump();
        let key = (ns.to_string(), name.to_string());
        let r = match s.jobs.get_mut(&key) {
            None => Ok(()),
            Some(j) => {
                if let Some(f) = j.metadata.finalizers.as_mut() {
                    f.retain(|x| x != labels::FINALIZER);
                }
                j.metadata.resource_version = Some(rv);
                if j.metadata.deletion_timestamp.is_some() && j.finalizers().is_empty() {
                    s.jobs.remove(&key);
                }
                Ok(())
            }
        };
        done(r)
    }

    fn apply_status<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        w: &'a StatusWrite,
    ) -> BoxFuture<'a, Result<BatchJob, ApiError>> {
        let mut s = self.lock();
        let rv = s.bump();
        let r = match s.jobs.get_mut(&(ns.to_string(), name.to_string())) {
            None => Err(ApiError::NotFound(name.into())),
            Some(j)
                if w.resource_version.is_some() && j.resource_version() != w.resource_version =>
            {
                Err(ApiError::Conflict(name.into()))
            }
            Some(j) => {
                j.status = Some(w.status.clone());
                j.metadata.resource_version = Some(rv);
                Ok(j.clone())
            }
        };
        done(r)
    }

    fn create_pod<'a>(
        &'a self,
        pod: &'a Pod,
        _gang: Option<&'a GangRef>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let key = (pod.namespace().unwrap(), pod.name_any());
        if let Some(c) = dra::pod_claim(pod)
            && !s.claims.contains_key(&(key.0.clone(), c.to_string()))
        {
            // The contract the planner keeps: never a pod before its claim.
            panic!("pod {} created before its claim {c}", key.1);
        }
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            if let Some(sec) = v.secret.as_ref().and_then(|x| x.secret_name.clone())
                && !s.secrets.contains_key(&(key.0.clone(), sec.clone()))
            {
                // The contract the planner keeps: never a pod before its credential.
                panic!("pod {} created before its Secret {sec}", key.1);
            }
        }
        if !s.pods.contains_key(&key) {
            let mut p = pod.clone();
            p.metadata.uid = Some(s.new_uid());
            p.metadata.resource_version = Some(s.bump());
            s.pods.insert(key, p);
        }
        done(Ok(()))
    }

    fn annotate_pod<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        annotations: &'a std::collections::BTreeMap<String, Option<String>>,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let rv = s.bump();
        if let Some(p) = s.pods.get_mut(&(ns.to_string(), name.to_string())) {
            let ann = p.metadata.annotations.get_or_insert_with(Default::default);
            for (key, value) in annotations {
                match value {
                    Some(v) => ann.insert(key.clone(), v.clone()),
                    None => ann.remove(key),
                };
            }
            p.metadata.resource_version = Some(rv);
        }
        done(Ok(()))
    }

    fn delete_pod<'a>(&'a self, ns: &'a str, name: &'a str) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let now = s.now;
        let key = (ns.to_string(), name.to_string());
        if let Some(p) = s.pods.get_mut(&key) {
            let phase = p.status.as_ref().and_then(|x| x.phase.clone());
            if matches!(
                phase.as_deref(),
                None | Some("Pending") | Some("Succeeded") | Some("Failed")
            ) {
                s.pods.remove(&key);
            } else {
                p.metadata.deletion_timestamp = Some(ts(now));
            }
        }
        done(Ok(()))
    }

    fn create_claim<'a>(&'a self, claim: &'a ResourceClaim) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let key = (claim.namespace().unwrap(), claim.name_any());
        s.claims.entry(key).or_insert_with(|| FakeClaim {
            claim: claim.clone(),
            allocated: Vec::new(),
            reserved_for: None,
            deleting: false,
        });
        done(Ok(()))
    }

    fn delete_claim<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        if let Some(c) = s.claims.get_mut(&(ns.to_string(), name.to_string())) {
            c.deleting = true;
        }
        s.release_claims();
        done(Ok(()))
    }

    fn create_group<'a>(
        &'a self,
        _api: GangApi,
        group: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let m = &group["metadata"];
        self.lock().groups.insert((
            m["namespace"].as_str().unwrap_or_default().to_string(),
            m["name"].as_str().unwrap_or_default().to_string(),
        ));
        done(Ok(()))
    }

    fn delete_group<'a>(
        &'a self,
        ns: &'a str,
        _api: GangApi,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        self.lock()
            .groups
            .remove(&(ns.to_string(), name.to_string()));
        done(Ok(()))
    }

    fn create_secret<'a>(&'a self, secret: &'a Secret) -> BoxFuture<'a, Result<(), ApiError>> {
        let key = secret
            .string_data
            .as_ref()
            .and_then(|d| d.get(muster_crds::step::SECRET_KEY))
            .cloned()
            .unwrap_or_default();
        assert_eq!(key.len(), 64, "a step key is 32 random bytes in hex");
        // An existing Secret keeps its key (the job's pods may already hold it).
        self.lock()
            .secrets
            .entry((secret.namespace().unwrap(), secret.name_any()))
            .or_insert(key);
        done(Ok(()))
    }

    fn create_service<'a>(&'a self, svc: &'a Service) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        if s.refuse_services > 0 {
            s.refuse_services -= 1;
            return done(Err(ApiError::Status {
                code: 500,
                message: "etcdserver: request timed out".into(),
            }));
        }
        s.services
            .insert((svc.namespace().unwrap(), svc.name_any()));
        done(Ok(()))
    }

    fn create_batchjob<'a>(&'a self, job: &'a BatchJob) -> BoxFuture<'a, Result<(), ApiError>> {
        let key = (job.namespace().unwrap(), job.name_any());
        if !self.lock().jobs.contains_key(&key) {
            self.submit(job.clone());
        }
        done(Ok(()))
    }

    fn patch_batchjob<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
        patch: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        let rv = s.bump();
        if let Some(j) = s.jobs.get_mut(&(ns.to_string(), name.to_string())) {
            let spec = &patch["spec"];
            if let Some(c) = spec.get("cancel").and_then(|v| v.as_bool()) {
                j.spec.cancel = Some(c);
            }
            if let Some(h) = spec.get("hold").and_then(|v| v.as_bool()) {
                j.spec.hold = Some(h);
            }
            j.metadata.resource_version = Some(rv);
            j.metadata.generation = Some(j.metadata.generation.unwrap_or(1) + 1);
        }
        done(Ok(()))
    }

    fn apply_partition_status<'a>(
        &'a self,
        name: &'a str,
        status: &'a PartitionStatus,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        let mut s = self.lock();
        if let Some(p) = s.partitions.get_mut(name) {
            p.status = Some(status.clone());
        }
        done(Ok(()))
    }

    fn publish_event<'a>(
        &'a self,
        _ns: &'a str,
        name: &'a str,
        _uid: &'a str,
        ev: &'a JobEvent,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        self.lock().events.push((name.to_string(), ev.clone()));
        done(Ok(()))
    }
}
