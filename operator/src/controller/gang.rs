//! Kubernetes' own gang scheduling as a safety net under Muster's (pure builders).
//!
//! Muster places a gang whole and pins every pod to its node, so kube-scheduler only confirms
//! the placement. Where the API server serves the Workload/PodGroup API (`scheduling.k8s.io`,
//! alpha behind the `GenericWorkload` gate), Muster also tells kube-scheduler that the pods are
//! one gang: then none of them binds unless all can — a pod a node refuses at the last
//! moment (a device plugin's GPU, a taint, a hand-made claim) holds the whole gang back
//! instead of leaving the others running idle. Without the API nothing changes.
//!
//! Two shapes exist, chosen by discovery ([`GangApi`]):
//! - Kubernetes 1.35, `scheduling.k8s.io/v1alpha1`: a `Workload` with one pod group
//!   (`spec.podGroups[{name, policy: {gang: {minCount}}}]`, `spec.controllerRef`); pods name it
//!   in `spec.workloadRef: {name, podGroup}`.
//! - Kubernetes 1.36, `scheduling.k8s.io/v1alpha2`: a standalone `PodGroup`
//!   (`spec.schedulingPolicy.gang.minCount`); pods name it in
//!   `spec.schedulingGroup.podGroupName`. (The v1alpha2 Workload holds templates only; a
//!   controller may create PodGroups without one.)
//!
//! One group per admission attempt (`minCount` is immutable and a requeued job may get another
//! shape), named [`group_name`], owned by the BatchJob and created after the allocation is
//! recorded and before the pods. `minCount` is the number of pods of the admission (task pods
//! today; node pods once each node holds one). Neither pod field exists in k8s-openapi's
//! `v1_32` Pod, so the field is added to the pod's JSON ([`pod_json`]).

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use muster_crds::v1alpha1::BatchJob;
use serde_json::{Value, json};

use super::pods;

/// The API group of the Workload and PodGroup kinds.
pub const GROUP: &str = "scheduling.k8s.io";
/// The pod group's name inside a v1alpha1 Workload.
pub const POD_GROUP: &str = "gang";

/// Which shape of Kubernetes' gang API the server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GangApi {
    /// Kubernetes 1.35: `scheduling.k8s.io/v1alpha1` Workload; pods set `spec.workloadRef`.
    WorkloadV1alpha1,
    /// Kubernetes 1.36: `scheduling.k8s.io/v1alpha2` PodGroup; pods set
    /// `spec.schedulingGroup`.
    PodGroupV1alpha2,
}

impl GangApi {
    /// `apiVersion` of the group object.
    pub fn api_version(self) -> &'static str {
        match self {
            GangApi::WorkloadV1alpha1 => "scheduling.k8s.io/v1alpha1",
            GangApi::PodGroupV1alpha2 => "scheduling.k8s.io/v1alpha2",
        }
    }
    /// The version alone.
    pub fn version(self) -> &'static str {
        match self {
            GangApi::WorkloadV1alpha1 => "v1alpha1",
            GangApi::PodGroupV1alpha2 => "v1alpha2",
        }
    }
    /// Kind of the group object.
    pub fn kind(self) -> &'static str {
        match self {
            GangApi::WorkloadV1alpha1 => "Workload",
            GangApi::PodGroupV1alpha2 => "PodGroup",
        }
    }
    /// Resource (plural) of the group object.
    pub fn plural(self) -> &'static str {
        match self {
            GangApi::WorkloadV1alpha1 => "workloads",
            GangApi::PodGroupV1alpha2 => "podgroups",
        }
    }

    /// The shape to use given what `scheduling.k8s.io` serves: `(version, resources)` pairs
    /// from discovery. The newer PodGroup wins where both are served.
    pub fn choose<'a>(served: impl IntoIterator<Item = (&'a str, &'a [String])>) -> Option<Self> {
        let mut best = None;
        for (version, resources) in served {
            let has = |r: &str| resources.iter().any(|x| x == r);
            match version {
                "v1alpha2" if has("podgroups") => return Some(GangApi::PodGroupV1alpha2),
                "v1alpha1" if has("workloads") => best = Some(GangApi::WorkloadV1alpha1),
                _ => {}
            }
        }
        best
    }
}

/// The group object an admission's pods belong to, and how a pod names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangRef {
    /// The API shape.
    pub api: GangApi,
    /// The group object's name.
    pub name: String,
}

/// The name of the group of attempt `attempt` of job `job`: `<job>-a<attempt>` (a DNS label
/// for names of at most 63 characters, shortened with a hash past that).
pub fn group_name(job: &str, attempt: u32) -> String {
    pods::fit_label(job, &format!("-a{attempt}"))
}

/// The group object for an admission of `min_count` pods.
pub fn build_group(
    g: &GangRef,
    job: &BatchJob,
    job_id: u64,
    attempt: u32,
    min_count: u32,
) -> Value {
    let mut meta = json!({
        "name": g.name,
        "namespace": job.namespace(),
        "labels": super::dra::claim_labels(job, job_id, attempt),
        "ownerReferences": [pods::owner_ref(job)],
    });
    if meta["namespace"].is_null() {
        meta.as_object_mut().map(|m| m.remove("namespace"));
    }
    let gang = json!({"gang": {"minCount": min_count.max(1)}});
    let spec = match g.api {
        GangApi::WorkloadV1alpha1 => json!({
            "controllerRef": {"apiGroup": "muster.dev", "kind": "BatchJob", "name": job.name_any()},
            "podGroups": [{"name": POD_GROUP, "policy": gang}],
        }),
        GangApi::PodGroupV1alpha2 => json!({"schedulingPolicy": gang}),
    };
    json!({
        "apiVersion": g.api.api_version(),
        "kind": g.api.kind(),
        "metadata": meta,
        "spec": spec,
    })
}

/// The pod spec field naming the group: `(field, value)`.
pub fn pod_reference(g: &GangRef) -> (&'static str, Value) {
    match g.api {
        GangApi::WorkloadV1alpha1 => (
            "workloadRef",
            json!({"name": g.name, "podGroup": POD_GROUP}),
        ),
        GangApi::PodGroupV1alpha2 => ("schedulingGroup", json!({"podGroupName": g.name})),
    }
}

/// The pod as JSON, with the group reference added to its spec when there is one.
pub fn pod_json(pod: &Pod, gang: Option<&GangRef>) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(pod)?;
    if let Some(g) = gang
        && let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut)
    {
        let (k, r) = pod_reference(g);
        spec.insert(k.to_string(), r);
    }
    Ok(v)
}

/// The group a pod's JSON names, if any (both shapes).
pub fn pod_group_of(pod: &Value) -> Option<String> {
    let spec = pod.get("spec")?;
    spec.get("schedulingGroup")
        .and_then(|s| s.get("podGroupName"))
        .or_else(|| spec.get("workloadRef").and_then(|w| w.get("name")))
        .and_then(Value::as_str)
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_crds::v1alpha1::BatchJobSpec;

    fn job() -> BatchJob {
        let mut j = BatchJob::new("train", BatchJobSpec::default());
        j.metadata.namespace = Some("ml".into());
        j.metadata.uid = Some("u1".into());
        j
    }

    #[test]
    fn the_newest_served_shape_is_chosen() {
        let a = vec!["workloads".to_string()];
        let b = vec!["workloads".to_string(), "podgroups".to_string()];
        assert_eq!(
            GangApi::choose([("v1alpha1", a.as_slice())]),
            Some(GangApi::WorkloadV1alpha1)
        );
        assert_eq!(
            GangApi::choose([("v1alpha1", a.as_slice()), ("v1alpha2", b.as_slice())]),
            Some(GangApi::PodGroupV1alpha2)
        );
        let pc = vec!["priorityclasses".to_string()];
        assert_eq!(GangApi::choose([("v1", pc.as_slice())]), None);
    }

    #[test]
    fn workload_v1alpha1_and_pod_workload_ref() {
        let g = GangRef {
            api: GangApi::WorkloadV1alpha1,
            name: group_name("train", 2),
        };
        let w = build_group(&g, &job(), 7, 2, 4);
        assert_eq!(w["apiVersion"], "scheduling.k8s.io/v1alpha1");
        assert_eq!(w["kind"], "Workload");
        assert_eq!(w["metadata"]["name"], "train-a2");
        assert_eq!(w["metadata"]["namespace"], "ml");
        assert_eq!(w["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(w["spec"]["podGroups"][0]["name"], "gang");
        assert_eq!(w["spec"]["podGroups"][0]["policy"]["gang"]["minCount"], 4);
        assert_eq!(w["spec"]["controllerRef"]["kind"], "BatchJob");
        let pod = Pod {
            spec: Some(Default::default()),
            ..Default::default()
        };
        let v = pod_json(&pod, Some(&g)).unwrap();
        assert_eq!(v["spec"]["workloadRef"]["name"], "train-a2");
        assert_eq!(v["spec"]["workloadRef"]["podGroup"], "gang");
        assert_eq!(pod_group_of(&v).as_deref(), Some("train-a2"));
    }

    #[test]
    fn podgroup_v1alpha2_and_pod_scheduling_group() {
        let g = GangRef {
            api: GangApi::PodGroupV1alpha2,
            name: group_name("train", 1),
        };
        let p = build_group(&g, &job(), 7, 1, 3);
        assert_eq!(p["apiVersion"], "scheduling.k8s.io/v1alpha2");
        assert_eq!(p["kind"], "PodGroup");
        assert_eq!(p["spec"]["schedulingPolicy"]["gang"]["minCount"], 3);
        let pod = Pod {
            spec: Some(Default::default()),
            ..Default::default()
        };
        let v = pod_json(&pod, Some(&g)).unwrap();
        assert_eq!(v["spec"]["schedulingGroup"]["podGroupName"], "train-a1");
        assert!(
            pod_json(&pod, None).unwrap()["spec"]
                .get("workloadRef")
                .is_none()
        );
        let long = "x".repeat(63);
        assert!(group_name(&long, 12).len() <= 63);
    }
}
