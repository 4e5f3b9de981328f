//! Kubernetes' gang scheduling in the stand-in (the `GangScheduling` plugin of the
//! `GenericWorkload` feature): pods that name a group with a `gang` policy bind all at once or
//! not at all.
//!
//! - 1.35 (`scheduling.k8s.io/v1alpha1`): a pod's `spec.workloadRef {name, podGroup}` names a
//!   pod group of a Workload, whose `policy.gang.minCount` applies.
//! - 1.36 (`v1alpha2`): a pod's `spec.schedulingGroup.podGroupName` names a PodGroup, whose
//!   `spec.schedulingPolicy.gang.minCount` applies.
//!
//! As there: a pod whose group does not exist waits (PreEnqueue: `waiting for pods's workload
//! "x" to appear in scheduling queue`); a gang waits until at least `minCount` of its pods
//! exist (`waiting for minCount pods from a gang to appear in scheduling queue`); then its
//! pending pods are placed together, and bound only if every one of them found a node (the
//! Permit stage); otherwise none is, and each is reported unschedulable with the message of
//! the pod that did not fit. (kube-scheduler lets the pods that fit wait at Permit up to a
//! timeout; the stand-in retries the whole gang instead.)

use std::borrow::Cow;
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A pod as the stand-in watches it: the typed pod plus the gang reference k8s-openapi's
/// `v1_32` Pod does not know.
#[derive(Clone, Debug)]
pub struct SchedPod {
    /// The pod.
    pub pod: Pod,
    /// The group it belongs to: `workload/podGroup` (v1alpha1) or the PodGroup's name
    /// (v1alpha2).
    pub group: Option<String>,
}

/// The group a pod's JSON names.
pub fn group_of(v: &Value) -> Option<String> {
    let spec = v.get("spec")?;
    if let Some(n) = spec
        .get("schedulingGroup")
        .and_then(|s| s.get("podGroupName"))
        .and_then(Value::as_str)
    {
        return Some(n.to_string());
    }
    let w = spec.get("workloadRef")?;
    Some(format!(
        "{}/{}",
        w.get("name")?.as_str()?,
        w.get("podGroup")?.as_str()?
    ))
}

impl<'de> Deserialize<'de> for SchedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        let group = group_of(&v);
        let pod = Pod::deserialize(v).map_err(serde::de::Error::custom)?;
        Ok(SchedPod { pod, group })
    }
}

impl Resource for SchedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        Pod::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        Pod::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        Pod::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Pod::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.pod.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.pod.metadata
    }
}

/// Gang policies by (namespace, group as pods name it): `minCount`, or `None` for a group
/// with the `basic` policy.
#[derive(Clone, Debug, Default)]
pub struct Groups {
    by_key: HashMap<(String, String), Option<u32>>,
}

impl Groups {
    /// A Workload (v1alpha1: each pod group) or PodGroup (v1alpha2) was added or changed.
    pub fn apply(&mut self, o: &DynamicObject) {
        let ns = o.namespace().unwrap_or_default();
        let name = o.name_any();
        let min = |policy: &Value| {
            policy
                .get("gang")
                .map(|g| g.get("minCount").and_then(Value::as_u64).unwrap_or(1) as u32)
        };
        if let Some(pgs) = o.data["spec"]["podGroups"].as_array() {
            for g in pgs {
                if let Some(pg) = g["name"].as_str() {
                    self.by_key
                        .insert((ns.clone(), format!("{name}/{pg}")), min(&g["policy"]));
                }
            }
        } else {
            self.by_key
                .insert((ns, name), min(&o.data["spec"]["schedulingPolicy"]));
        }
    }

    /// A Workload or PodGroup was deleted.
    pub fn delete(&mut self, o: &DynamicObject) {
        let ns = o.namespace().unwrap_or_default();
        let name = o.name_any();
        let prefix = format!("{name}/");
        self.by_key
            .retain(|(n, k), _| !(n == &ns && (k == &name || k.starts_with(&prefix))));
    }

    /// Forgets everything (before a relist).
    pub fn clear(&mut self) {
        self.by_key.clear();
    }

    /// The group's policy: `None` if it does not exist, `Some(None)` for `basic`,
    /// `Some(Some(n))` for a gang of at least `n`.
    pub fn policy(&self, ns: &str, group: &str) -> Option<Option<u32>> {
        self.by_key
            .get(&(ns.to_string(), group.to_string()))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_shapes_are_read_from_pods_and_groups() {
        let p: SchedPod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "workloadRef": {"name": "w", "podGroup": "gang"}}}))
        .unwrap();
        assert_eq!(p.group.as_deref(), Some("w/gang"));
        let p: SchedPod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "schedulingGroup": {"podGroupName": "pg"}}}))
        .unwrap();
        assert_eq!(p.group.as_deref(), Some("pg"));
        let mut g = Groups::default();
        let w: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "scheduling.k8s.io/v1alpha1",
            "kind": "Workload", "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"podGroups": [{"name": "gang", "policy": {"gang": {"minCount": 3}}},
                                   {"name": "b", "policy": {"basic": {}}}]}}))
            .unwrap();
        g.apply(&w);
        assert_eq!(g.policy("ns", "w/gang"), Some(Some(3)));
        assert_eq!(g.policy("ns", "w/b"), Some(None));
        let pg: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup", "metadata": {"name": "pg", "namespace": "ns"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}))
            .unwrap();
        g.apply(&pg);
        assert_eq!(g.policy("ns", "pg"), Some(Some(2)));
        g.delete(&w);
        assert_eq!(g.policy("ns", "w/gang"), None);
        assert_eq!(g.policy("other", "pg"), None);
    }
}
