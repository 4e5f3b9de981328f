//! GPU binding through Dynamic Resource Allocation (`resource.k8s.io/v1`): pure builders and
//! readers, no client calls.
//!
//! In `dra` mode every pod that holds GPUs references one ResourceClaim, created by the
//! operator before the pod, with **one request per assigned GPU, each pinned by a CEL
//! selector on the device's UUID** — so kube-scheduler can allocate nothing but the GPUs
//! Muster chose, no other claim can take them while they are allocated, and the kubelet (the
//! NVIDIA DRA driver, through CDI) gives the container exactly those devices. No
//! `NVIDIA_VISIBLE_DEVICES` is set by hand.
//!
//! The builders do not care what a pod stands for (a task today, a node of the job with node
//! pods): give them the pod's name, its node and the GPUs it holds.
//!
//! - [`claim_name`], [`build_claim`]: the ResourceClaim of one pod.
//! - [`attach_claim`]: the pod's `spec.resourceClaims` entry and every container's
//!   `resources.claims` reference to it.
//! - [`resolve`]: a partition's `gpuBinding` (`auto`/`dra`/`env`) against what the cluster
//!   serves.
//! - [`ClaimObs`]: what the planner keeps of every ResourceClaim (Muster's and others'), and
//!   [`inventory`]: GPUs as the NVIDIA DRA driver publishes them in ResourceSlices.
//!
//! # Contract (what the node-pod change relies on)
//! - Claim name: `<pod name>-gpus` ([`claim_name`]); the pod's claim entry is named
//!   [`POD_CLAIM`] (`gpus`).
//! - Labels: `muster.dev/batchjob`, `muster.dev/job-id`, `muster.dev/attempt` (as on the pod),
//!   so claims of another attempt are found and deleted like its pods.
//! - Owner: the BatchJob (controller reference; deleting the job deletes its claims).
//! - Order: the claim is created after the allocation is recorded in the job's status and
//!   before its pod; it is deleted with its attempt (Kubernetes keeps it, through the
//!   `resource.kubernetes.io/delete-protection` finalizer, until no pod uses it).

pub mod api;
pub mod inventory;

use std::collections::BTreeMap;

use crate::controller::compact::{StrId, StrTable, StrTableBuilder};
use k8s_openapi::api::core::v1::{Pod, PodResourceClaim, ResourceClaim as ContainerClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, GpuBinding, GpuBindingMode};

pub use api::{
    AllocationResult, CelDeviceSelector, Device, DeviceAllocationResult, DeviceAttribute,
    DeviceCapacity, DeviceClaim, DeviceClass, DeviceClassSpec, DeviceRequest,
    DeviceRequestAllocationResult, DeviceSelector, ExactDeviceRequest, ResourceClaim,
    ResourceClaimConsumerReference, ResourceClaimSpec, ResourceClaimStatus, ResourcePool,
    ResourceSlice, ResourceSliceSpec,
};

/// The NVIDIA DRA driver's name: the driver of its ResourceSlices and the domain of its
/// device attributes (`device.attributes["gpu.nvidia.com"].uuid`).
pub const NVIDIA_DRIVER: &str = "gpu.nvidia.com";
/// The DeviceClass the NVIDIA DRA driver's chart creates for whole GPUs (its selector:
/// `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'`).
pub const DEFAULT_DEVICE_CLASS: &str = "gpu.nvidia.com";
/// The name of the claim entry in a pod's `spec.resourceClaims`, and what containers list in
/// `resources.claims`.
pub const POD_CLAIM: &str = "gpus";
/// Finalizer kube-scheduler puts on a claim it allocates; the resourceclaim controller removes
/// it once no pod uses the claim and the allocation is cleared.
pub const DELETE_PROTECTION: &str = "resource.kubernetes.io/delete-protection";

/// Why a claim cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DraError {
    /// A GPU without a UUID cannot be pinned.
    #[error(
        "GPU {index} on node {node} has no known UUID, so no ResourceClaim can pin it (the node's ResourceSlices or GpuNode must list it)"
    )]
    NoUuid {
        /// Node.
        node: String,
        /// NVML index.
        index: u32,
    },
}

/// One GPU a pod holds: its NVML index on the node and its UUID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldGpu<'a> {
    /// NVML index (names the request: `gpu-<index>`).
    pub index: u32,
    /// `GPU-…` UUID (what the selector pins).
    pub uuid: &'a str,
}

/// What one pod's claim is built from.
#[derive(Clone, Copy, Debug)]
pub struct ClaimFor<'a> {
    /// The owning BatchJob.
    pub job: &'a BatchJob,
    /// Its Slurm job id.
    pub job_id: u64,
    /// The admission attempt.
    pub attempt: u32,
    /// The pod that will use the claim.
    pub pod: &'a str,
    /// The node the pod runs on (for the message of a GPU without UUID).
    pub node: &'a str,
    /// The DeviceClass to request from.
    pub device_class: &'a str,
}

/// The claim of pod `pod`: `<pod>-gpus` (pod names are at most 63 characters here, well within
/// a claim name's 253).
pub fn claim_name(pod: &str) -> String {
    format!("{pod}-{POD_CLAIM}")
}

/// The CEL selector pinning one GPU by UUID. UUIDs are `GPU-` and hex digits; anything else is
/// escaped as a CEL string literal.
pub fn uuid_selector(uuid: &str) -> String {
    let mut lit = String::with_capacity(uuid.len() + 2);
    lit.push('"');
    for c in uuid.chars() {
        match c {
            '"' => lit.push_str("\\\""),
            '\\' => lit.push_str("\\\\"),
            c if c.is_control() => lit.push_str(&format!("\\u{:04x}", c as u32)),
            c => lit.push(c),
        }
    }
    lit.push('"');
    format!("device.attributes[\"{NVIDIA_DRIVER}\"].uuid == {lit}")
}

/// The UUIDs a claim built by [`build_claim`] pins, in request order (what its selectors
/// compare the `uuid` attribute with; other selectors are skipped).
pub fn pinned_uuids(claim: &ResourceClaim) -> Vec<String> {
    let prefix = format!("device.attributes[\"{NVIDIA_DRIVER}\"].uuid == \"");
    claim
        .spec
        .devices
        .requests
        .iter()
        .filter_map(|r| r.exactly.as_ref())
        .flat_map(|e| &e.selectors)
        .filter_map(|s| s.cel.as_ref())
        .filter_map(|c| {
            let lit = c.expression.strip_prefix(&prefix)?.strip_suffix('"')?;
            Some(lit.replace("\\\"", "\"").replace("\\\\", "\\"))
        })
        .collect()
}

/// The labels of a claim (the same keys as its pod's, so it is found by job and attempt).
pub fn claim_labels(job: &BatchJob, job_id: u64, attempt: u32) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(labels::BATCHJOB.to_string(), job.name_any());
    l.insert(labels::JOB_ID.to_string(), job_id.to_string());
    l.insert(labels::ATTEMPT.to_string(), attempt.to_string());
    l
}

/// The ResourceClaim of one pod holding `gpus`: one `ExactCount` request of one device per
/// GPU, named `gpu-<index>`, from `device_class`, pinned by [`uuid_selector`]; owned by the
/// BatchJob. `None` for a pod without GPUs (it gets no claim).
pub fn build_claim(
    c: &ClaimFor<'_>,
    gpus: &[HeldGpu<'_>],
) -> Result<Option<ResourceClaim>, DraError> {
    if gpus.is_empty() {
        return Ok(None);
    }
    let mut requests = Vec::with_capacity(gpus.len());
    for g in gpus {
        if g.uuid.is_empty() {
            return Err(DraError::NoUuid {
                node: c.node.to_string(),
                index: g.index,
            });
        }
        requests.push(DeviceRequest {
            name: format!("gpu-{}", g.index),
            exactly: Some(ExactDeviceRequest {
                device_class_name: c.device_class.to_string(),
                selectors: vec![DeviceSelector {
                    cel: Some(CelDeviceSelector {
                        expression: uuid_selector(g.uuid),
                    }),
                }],
                allocation_mode: Some("ExactCount".into()),
                count: Some(1),
                admin_access: None,
            }),
            first_available: Vec::new(),
        });
    }
    Ok(Some(ResourceClaim {
        api_version: api::API_VERSION.into(),
        kind: "ResourceClaim".into(),
        metadata: ObjectMeta {
            name: Some(claim_name(c.pod)),
            namespace: c.job.namespace(),
            labels: Some(claim_labels(c.job, c.job_id, c.attempt)),
            owner_references: Some(vec![super::pods::owner_ref(c.job)]),
            ..Default::default()
        },
        spec: ResourceClaimSpec {
            devices: DeviceClaim { requests },
        },
        status: None,
    }))
}

/// Makes `pod` use claim `claim`: `spec.resourceClaims` gets the entry [`POD_CLAIM`], and every
/// container and init container lists it in `resources.claims` (a container that does not
/// list a pod claim gets none of its devices). Entries of the same name the template gave
/// are replaced.
pub fn attach_claim(pod: &mut Pod, claim: &str) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let rc = spec.resource_claims.get_or_insert_with(Vec::new);
    rc.retain(|c| c.name != POD_CLAIM);
    rc.push(PodResourceClaim {
        name: POD_CLAIM.into(),
        resource_claim_name: Some(claim.to_string()),
        resource_claim_template_name: None,
    });
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        let claims = c
            .resources
            .get_or_insert_with(Default::default)
            .claims
            .get_or_insert_with(Vec::new);
        claims.retain(|x| x.name != POD_CLAIM);
        claims.push(ContainerClaim {
            name: POD_CLAIM.into(),
            request: None,
        });
    }
}

/// The claim a pod references under [`POD_CLAIM`], if any.
pub fn pod_claim(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .resource_claims
        .as_ref()?
        .iter()
        .find(|c| c.name == POD_CLAIM)?
        .resource_claim_name
        .as_deref()
}

/// What the cluster offers for DRA binding, as discovery and the DeviceClass cache see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DraSupport {
    /// The API server serves `resource.k8s.io/v1`.
    pub served: bool,
    /// DeviceClasses that exist (names).
    pub classes: std::collections::BTreeSet<String>,
}

/// The binding a partition gets: `Ok` with the mode, or `Err` with why its explicit `dra`
/// cannot be had (its jobs then wait, the partition shows why).
pub fn resolve(
    mode: Option<GpuBindingMode>,
    device_class: Option<&str>,
    support: &DraSupport,
) -> Result<GpuBinding, String> {
    let class = device_class.unwrap_or(DEFAULT_DEVICE_CLASS);
    let available = || -> Result<(), String> {
        if !support.served {
            return Err(
                "the API server does not serve resource.k8s.io/v1 (Dynamic Resource Allocation, Kubernetes 1.34 and later)".into(),
            );
        }
        if !support.classes.contains(class) {
            return Err(format!(
                "DeviceClass {class} does not exist: install NVIDIA's DRA driver for GPUs or name the class in spec.deviceClassName"
            ));
        }
        Ok(())
    };
    match mode.unwrap_or_default() {
        GpuBindingMode::Env => Ok(GpuBinding::Env),
        GpuBindingMode::Auto => Ok(match available() {
            Ok(()) => GpuBinding::Dra,
            Err(_) => GpuBinding::Env,
        }),
        GpuBindingMode::Dra => available().map(|()| GpuBinding::Dra),
    }
}

/// What the planner keeps of one ResourceClaim (any claim in the cluster, Muster's or not),
/// compact: its strings in one `StrTable` (with the devices as ids into it) rather than a
/// string each — under DRA binding every node pod has a claim, and an allocated 8-GPU claim
/// was 29 heap allocations (now 3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimObs {
    /// Namespace (0), name (1), job (2) and controller owner's UID (3), by position (empty
    /// when absent, see `has_job`, `has_owner`); then the devices' strings.
    strs: StrTable,
    has_job: bool,
    has_owner: bool,
    /// Admission attempt (label `muster.dev/attempt`).
    pub attempt: Option<u32>,
    /// Deletion requested.
    pub deleting: bool,
    /// Allocated devices, `(driver, pool, device)` as ids in `strs`.
    devices: Box<[[StrId; 3]]>,
}

impl ClaimObs {
    /// A claim from its parts: `job` is the BatchJob it belongs to (label
    /// `muster.dev/batchjob`), `owner_uid` its controller owner's, `devices` its allocation as
    /// `(driver, pool, device)` (empty while unallocated).
    pub fn new<'a>(
        namespace: &str,
        name: &str,
        job: Option<&str>,
        owner_uid: Option<&str>,
        attempt: Option<u32>,
        deleting: bool,
        devices: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> ClaimObs {
        let mut b = StrTableBuilder::default();
        for s in [namespace, name, job.unwrap_or(""), owner_uid.unwrap_or("")] {
            b.id_new(s);
        }
        let devices = devices
            .into_iter()
            .map(|(d, p, n)| [b.id(d), b.id(p), b.id(n)])
            .collect();
        ClaimObs {
            strs: b.finish(),
            has_job: job.is_some(),
            has_owner: owner_uid.is_some(),
            attempt,
            deleting,
            devices,
        }
    }

    /// Reads a claim.
    pub fn from_claim(c: &ResourceClaim) -> ClaimObs {
        let l = c.labels();
        let devices = c
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .map(|d| d.results.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|r| r.admin_access != Some(true))
            .map(|r| (r.driver.as_str(), r.pool.as_str(), r.device.as_str()));
        ClaimObs::new(
            c.metadata.namespace.as_deref().unwrap_or_default(),
            c.metadata.name.as_deref().unwrap_or_default(),
            l.get(labels::BATCHJOB).map(String::as_str),
            c.owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| o.uid.as_str()),
            l.get(labels::ATTEMPT).and_then(|v| v.parse().ok()),
            c.metadata.deletion_timestamp.is_some(),
            devices,
        )
    }

    /// Namespace.
    pub fn namespace(&self) -> &str {
        self.strs.get(0)
    }

    /// Name.
    pub fn name(&self) -> &str {
        self.strs.get(1)
    }

    /// The BatchJob it belongs to (label `muster.dev/batchjob`), for Muster's claims.
    pub fn job(&self) -> Option<&str> {
        self.has_job.then(|| self.strs.get(2))
    }

    /// UID of its controller owner.
    pub fn owner_uid(&self) -> Option<&str> {
        self.has_owner.then(|| self.strs.get(3))
    }

    /// Allocated devices, as `(driver, pool, device)` (none while unallocated).
    pub fn devices(&self) -> impl ExactSizeIterator<Item = (&str, &str, &str)> {
        self.devices
            .iter()
            .map(|&[d, p, n]| (self.strs.get(d), self.strs.get(p), self.strs.get(n)))
    }

    /// Whether it is one of Muster's (labelled with a job and an attempt).
    pub fn is_musters(&self) -> bool {
        self.has_job && self.attempt.is_some()
    }
}

impl kube::runtime::reflector::Lookup for ClaimObs {
    type DynamicType = ();
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "ResourceClaim".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        api::GROUP.into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        api::VERSION.into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "resourceclaims".into()
    }
    fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some(ClaimObs::name(self).into())
    }
    fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some(ClaimObs::namespace(self).into())
    }
    fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
        None
    }
    fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use muster_crds::v1alpha1::BatchJobSpec;

    fn job() -> BatchJob {
        let mut j = BatchJob::new("train", BatchJobSpec::default());
        j.metadata.namespace = Some("ml".into());
        j.metadata.uid = Some("uid-1".into());
        j
    }

    fn claim_for<'a>(j: &'a BatchJob) -> ClaimFor<'a> {
        ClaimFor {
            job: j,
            job_id: 42,
            attempt: 2,
            pod: "train-1-a2",
            node: "gpu002",
            device_class: DEFAULT_DEVICE_CLASS,
        }
    }

    #[test]
    fn one_request_per_gpu_pinned_by_uuid_owned_by_the_job() {
        let j = job();
        let gpus = [
            HeldGpu {
                index: 2,
                uuid: "GPU-aaaa",
            },
            HeldGpu {
                index: 5,
                uuid: "GPU-bbbb",
            },
        ];
        let c = build_claim(&claim_for(&j), &gpus).unwrap().unwrap();
        assert_eq!(c.metadata.name.as_deref(), Some("train-1-a2-gpus"));
        assert_eq!(c.metadata.namespace.as_deref(), Some("ml"));
        let o = &c.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((o.kind.as_str(), o.uid.as_str()), ("BatchJob", "uid-1"));
        assert_eq!(o.controller, Some(true));
        let l = c.metadata.labels.as_ref().unwrap();
        assert_eq!(l[labels::BATCHJOB], "train");
        assert_eq!(l[labels::ATTEMPT], "2");
        assert_eq!(l[labels::JOB_ID], "42");
        let r = &c.spec.devices.requests;
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].name, "gpu-2");
        let ex = r[1].exactly.as_ref().unwrap();
        assert_eq!(ex.device_class_name, "gpu.nvidia.com");
        assert_eq!(ex.count, Some(1));
        assert_eq!(
            ex.selectors[0].cel.as_ref().unwrap().expression,
            "device.attributes[\"gpu.nvidia.com\"].uuid == \"GPU-bbbb\""
        );
        // The wire form is resource.k8s.io/v1's.
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["apiVersion"], "resource.k8s.io/v1");
        assert_eq!(v["kind"], "ResourceClaim");
        assert_eq!(
            v["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"],
            "ExactCount"
        );
    }

    #[test]
    fn no_gpus_no_claim_and_a_gpu_without_uuid_is_an_error() {
        let j = job();
        assert_eq!(build_claim(&claim_for(&j), &[]).unwrap(), None);
        let e = build_claim(&claim_for(&j), &[HeldGpu { index: 3, uuid: "" }]).unwrap_err();
        assert!(e.to_string().contains("GPU 3 on node gpu002"), "{e}");
    }

    #[test]
    fn selectors_escape_what_is_not_a_plain_uuid() {
        assert_eq!(
            uuid_selector("GPU-\"x\\"),
            "device.attributes[\"gpu.nvidia.com\"].uuid == \"GPU-\\\"x\\\\\""
        );
    }

    #[test]
    fn every_container_references_the_pod_claim_once() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                containers: vec![
                    Container {
                        name: "a".into(),
                        ..Default::default()
                    },
                    Container {
                        name: "b".into(),
                        ..Default::default()
                    },
                ],
                init_containers: Some(vec![Container {
                    name: "init".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        attach_claim(&mut pod, "x-gpus");
        attach_claim(&mut pod, "x-gpus");
        let s = pod.spec.as_ref().unwrap();
        assert_eq!(s.resource_claims.as_ref().unwrap().len(), 1);
        assert_eq!(pod_claim(&pod), Some("x-gpus"));
        for c in s
            .containers
            .iter()
            .chain(s.init_containers.iter().flatten())
        {
            let cl = c.resources.as_ref().unwrap().claims.as_ref().unwrap();
            assert_eq!(cl.len(), 1);
            assert_eq!(cl[0].name, "gpus");
        }
    }

    #[test]
    fn auto_is_dra_only_where_the_api_and_class_exist() {
        let none = DraSupport::default();
        let api_only = DraSupport {
            served: true,
            ..Default::default()
        };
        let full = DraSupport {
            served: true,
            classes: [DEFAULT_DEVICE_CLASS.to_string()].into(),
        };
        assert_eq!(resolve(None, None, &none), Ok(GpuBinding::Env));
        assert_eq!(resolve(None, None, &api_only), Ok(GpuBinding::Env));
        assert_eq!(resolve(None, None, &full), Ok(GpuBinding::Dra));
        assert_eq!(
            resolve(Some(GpuBindingMode::Env), None, &full),
            Ok(GpuBinding::Env)
        );
        let e = resolve(Some(GpuBindingMode::Dra), None, &none).unwrap_err();
        assert!(e.contains("resource.k8s.io/v1"), "{e}");
        let e = resolve(Some(GpuBindingMode::Dra), Some("gpu.example.com"), &full).unwrap_err();
        assert!(e.contains("DeviceClass gpu.example.com"), "{e}");
    }

    #[test]
    fn a_claim_keeps_its_names_owner_and_allocation() {
        let c: ResourceClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "train-1-a2-gpus", "namespace": "ml",
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"muster.dev/batchjob": "train", "muster.dev/attempt": "2"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": "other", "uid": "u-0"},
                    {"apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob", "name": "train",
                     "uid": "u-1", "controller": true}]},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu002", "device": "gpu-3"},
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu002", "device": "gpu-1"},
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gpu002", "device": "gpu-0",
                 "adminAccess": true}]}}}
        }))
        .unwrap();
        let o = ClaimObs::from_claim(&c);
        assert_eq!((o.namespace(), o.name()), ("ml", "train-1-a2-gpus"));
        assert_eq!(
            (o.job(), o.owner_uid(), o.attempt),
            (Some("train"), Some("u-1"), Some(2))
        );
        assert!(o.deleting && o.is_musters());
        let devices: Vec<_> = o.devices().collect();
        assert_eq!(
            devices,
            [
                ("gpu.nvidia.com", "gpu002", "gpu-3"),
                ("gpu.nvidia.com", "gpu002", "gpu-1")
            ],
            "admin access holds no device"
        );

        // Someone else's claim: no job, no owner, not allocated.
        let mut c = c;
        c.metadata.labels = None;
        c.metadata.owner_references = None;
        c.status = None;
        let o = ClaimObs::from_claim(&c);
        assert_eq!((o.job(), o.owner_uid(), o.attempt), (None, None, None));
        assert!(!o.is_musters());
        assert_eq!(o.devices().len(), 0);
    }
}
