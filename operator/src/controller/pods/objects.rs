//! The job's objects beside its pods: the headless Service and the step credential Secret.

use k8s_openapi::api::core::v1::{Secret, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::step;
use muster_crds::v1alpha1::BatchJob;

use super::{owner_ref, service_name};

/// The headless Service giving every node pod a stable DNS name (`<job>-<node>.<service>`, and
/// the short name through the pods' search path), for jobs on more than one node. Not-ready
/// pods are published so that nodes resolve each other while they start.
pub fn build_service(job: &BatchJob) -> Service {
    let name = job.name_any();
    Service {
        metadata: ObjectMeta {
            name: Some(service_name(&name)),
            namespace: job.namespace(),
            labels: Some([(labels::BATCHJOB.to_string(), name.clone())].into()),
            owner_references: Some(vec![owner_ref(job)]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some([(labels::BATCHJOB.to_string(), name)].into()),
            publish_not_ready_addresses: Some(true),
            ..Default::default()
        }),
        status: None,
    }
}

/// The job's step credential Secret ([`step::secret_name`]), owned by the BatchJob, without
/// its key: the writer adds fresh random bytes ([`with_key`]) when it creates it, so the plan
/// stays pure. Only the job's node pods mount it.
pub fn build_secret(job: &BatchJob) -> Secret {
    let name = job.name_any();
    Secret {
        metadata: ObjectMeta {
            name: Some(step::secret_name(&name)),
            namespace: job.namespace(),
            labels: Some([(labels::BATCHJOB.to_string(), name)].into()),
            owner_references: Some(vec![owner_ref(job)]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        immutable: Some(true),
        ..Default::default()
    }
}

/// `secret` with `key` (hex) as its credential.
pub fn with_key(mut secret: Secret, key: &str) -> Secret {
    secret.string_data = Some([(step::SECRET_KEY.to_string(), key.to_string())].into());
    secret
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::job;
    use super::*;
    use muster_crds::v1alpha1::BatchJobSpec;

    #[test]
    fn service_is_headless_and_secret_is_owned_and_keyed_at_write() {
        let j = job("train", BatchJobSpec::default());
        let s = build_service(&j);
        let sp = s.spec.unwrap();
        assert_eq!(sp.cluster_ip.as_deref(), Some("None"));
        assert_eq!(sp.publish_not_ready_addresses, Some(true));
        assert_eq!(sp.selector.unwrap()[labels::BATCHJOB], "train");
        assert_eq!(s.metadata.owner_references.unwrap()[0].name, "train");
        let sec = build_secret(&j);
        assert_eq!(sec.metadata.name.as_deref(), Some("train-step"));
        assert_eq!(
            sec.metadata.owner_references.as_ref().unwrap()[0].uid,
            "uid-1"
        );
        assert!(sec.data.is_none() && sec.string_data.is_none());
        let keyed = with_key(sec, "abcd");
        assert_eq!(keyed.string_data.unwrap()[step::SECRET_KEY], "abcd");
    }
}
