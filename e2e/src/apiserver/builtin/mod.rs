//! Behaviour specific to built-in kinds: decoding through the k8s-openapi types (which prunes
//! unknown fields and refuses wrongly typed ones, as decoding into Go structs does), defaults and
//! status on create, validation, selectable fields, the events.k8s.io view of core Events, and
//! CustomResourceDefinitions becoming served types.

mod crd;
mod defaults;
mod event;
mod fields;
mod validate;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

use super::resources::{Features, ResourceType, WorkloadApi};

pub use crd::{crd_status, crd_types};
pub use defaults::default_pod;
pub use event::{event_from_v1, event_to_v1, event_v1_field};
pub use fields::{fields_fn, selectable_fields};
pub use validate::{validate, validate_event_v1_create, validate_name};

/// An operation generic over a built-in kind's typed representation, dispatched by
/// [`with_type`].
pub trait TypedOp {
    /// Result.
    type Out;
    /// Run with the type.
    fn run<T: DeserializeOwned + Serialize + schemars::JsonSchema>(self) -> Self::Out;
}

/// Run `op` with the k8s-openapi type of a built-in (storage group, kind).
pub fn with_type<O: TypedOp>(group: &str, kind: &str, op: O) -> Option<O::Out> {
    use k8s_openapi::api as a;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    Some(match (group, kind) {
        ("", "Pod") => op.run::<a::core::v1::Pod>(),
        ("", "Node") => op.run::<a::core::v1::Node>(),
        ("", "Namespace") => op.run::<a::core::v1::Namespace>(),
        ("", "Service") => op.run::<a::core::v1::Service>(),
        ("", "ConfigMap") => op.run::<a::core::v1::ConfigMap>(),
        ("", "Secret") => op.run::<a::core::v1::Secret>(),
        ("", "ServiceAccount") => op.run::<a::core::v1::ServiceAccount>(),
        ("", "Event") => op.run::<a::core::v1::Event>(),
        ("", "Endpoints") => op.run::<a::core::v1::Endpoints>(),
        ("", "ResourceQuota") => op.run::<a::core::v1::ResourceQuota>(),
        ("", "LimitRange") => op.run::<a::core::v1::LimitRange>(),
        ("", "PersistentVolumeClaim") => op.run::<a::core::v1::PersistentVolumeClaim>(),
        ("", "PersistentVolume") => op.run::<a::core::v1::PersistentVolume>(),
        ("apps", "Deployment") => op.run::<a::apps::v1::Deployment>(),
        ("apps", "DaemonSet") => op.run::<a::apps::v1::DaemonSet>(),
        ("apps", "ReplicaSet") => op.run::<a::apps::v1::ReplicaSet>(),
        ("apps", "StatefulSet") => op.run::<a::apps::v1::StatefulSet>(),
        ("apps", "ControllerRevision") => op.run::<a::apps::v1::ControllerRevision>(),
        ("batch", "Job") => op.run::<a::batch::v1::Job>(),
        ("batch", "CronJob") => op.run::<a::batch::v1::CronJob>(),
        ("coordination.k8s.io", "Lease") => op.run::<a::coordination::v1::Lease>(),
        ("events.k8s.io", "Event") => op.run::<a::events::v1::Event>(),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            op.run::<ext::CustomResourceDefinition>()
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            op.run::<a::admissionregistration::v1::ValidatingAdmissionPolicy>()
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            op.run::<a::admissionregistration::v1::ValidatingAdmissionPolicyBinding>()
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            op.run::<a::admissionregistration::v1::ValidatingWebhookConfiguration>()
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            op.run::<a::admissionregistration::v1::MutatingWebhookConfiguration>()
        }
        ("rbac.authorization.k8s.io", "Role") => op.run::<a::rbac::v1::Role>(),
        ("rbac.authorization.k8s.io", "RoleBinding") => op.run::<a::rbac::v1::RoleBinding>(),
        ("rbac.authorization.k8s.io", "ClusterRole") => op.run::<a::rbac::v1::ClusterRole>(),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            op.run::<a::rbac::v1::ClusterRoleBinding>()
        }
        ("scheduling.k8s.io", "PriorityClass") => op.run::<a::scheduling::v1::PriorityClass>(),
        ("policy", "PodDisruptionBudget") => op.run::<a::policy::v1::PodDisruptionBudget>(),
        ("discovery.k8s.io", "EndpointSlice") => op.run::<a::discovery::v1::EndpointSlice>(),
        ("node.k8s.io", "RuntimeClass") => op.run::<a::node::v1::RuntimeClass>(),
        ("storage.k8s.io", "StorageClass") => op.run::<a::storage::v1::StorageClass>(),
        ("networking.k8s.io", "NetworkPolicy") => op.run::<a::networking::v1::NetworkPolicy>(),
        ("networking.k8s.io", "Ingress") => op.run::<a::networking::v1::Ingress>(),
        _ => return None,
    })
}

struct Roundtrip<'a>(&'a Value);

impl TypedOp for Roundtrip<'_> {
    type Out = Result<Value, String>;
    fn run<T: DeserializeOwned + Serialize + schemars::JsonSchema>(self) -> Self::Out {
        let t = T::deserialize(self.0).map_err(|e| e.to_string())?;
        serde_json::to_value(t).map_err(|e| e.to_string())
    }
}

/// Decode a built-in object through its typed representation: unknown fields are dropped and
/// reported, wrongly typed values refused. Custom resources and kinds without a typed
/// representation pass through.
pub fn normalize(rt: &ResourceType, v: Value) -> Result<(Value, Vec<String>), String> {
    if rt.crd.is_some() {
        return Ok((v, Vec::new()));
    }
    let Some(out) = with_type(&rt.storage.group, &rt.kind, Roundtrip(&v)) else {
        return Ok((v, Vec::new()));
    };
    let out = out?;
    let mut unknown = Vec::new();
    diff_unknown(&v, &out, &mut String::new(), &mut unknown);
    Ok((out, unknown))
}

/// Decode the status of a pod whose other fields are those of the stored object (a status
/// write: the rest was decoded when it was written, and decoding is idempotent), through
/// `PodStatus` only: the same result as [`normalize`] without decoding the spec again.
/// Returns the unknown fields.
pub fn normalize_pod_status(pod: &mut Value) -> Result<Vec<String>, String> {
    let Some(m) = pod.as_object_mut() else {
        return Ok(Vec::new());
    };
    let Some(input) = m.remove("status") else {
        return Ok(Vec::new());
    };
    if input.is_null() {
        return Ok(Vec::new());
    }
    let typed = <k8s_openapi::api::core::v1::PodStatus as serde::Deserialize>::deserialize(&input)
        .map_err(|e| e.to_string())?;
    let out = serde_json::to_value(typed).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    diff_unknown(&input, &out, &mut "status".to_string(), &mut unknown);
    m.insert("status".into(), out);
    Ok(unknown)
}

/// Whether two objects differ at most in `status`.
pub fn same_but_status(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return false;
    };
    let rest = |m: &Map<String, Value>| m.len() - usize::from(m.contains_key("status"));
    rest(a) == rest(b) && a.iter().all(|(k, v)| k == "status" || b.get(k) == Some(v))
}

/// The fields of `input` the typed decode dropped (`output` lacks them), by path. `path` is a
/// buffer the walk extends and truncates: a path string is made only for a dropped field.
fn diff_unknown(input: &Value, output: &Value, path: &mut String, out: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, v) in i {
                if v.is_null() {
                    continue;
                }
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                match o.get(k) {
                    None => out.push(path.clone()),
                    Some(ov) => diff_unknown(v, ov, path, out),
                }
                path.truncate(len);
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (n, (a, b)) in i.iter().zip(o).enumerate() {
                let len = path.len();
                use std::fmt::Write;
                let _ = write!(path, "[{n}]");
                diff_unknown(a, b, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Pod spec fields of optional APIs newer than k8s-openapi's `v1_32` Pod: taken out of `pod`
/// before it is decoded when the API is served (they are put back after), left in otherwise
/// (then dropped with an "unknown field" warning, as by a server without the API).
pub fn take_feature_pod_fields(pod: &mut Value, features: Features) -> Vec<(&'static str, Value)> {
    let mut kept = Vec::new();
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return kept;
    };
    let field = match features.workload {
        Some(WorkloadApi::V1alpha1) => Some("workloadRef"),
        Some(WorkloadApi::V1alpha2) => Some("schedulingGroup"),
        None => None,
    };
    if let Some(f) = field
        && let Some(v) = spec.remove(f)
    {
        kept.push((f, v));
    }
    kept
}

/// Puts back what [`take_feature_pod_fields`] took, and drops the DRA fields (`resourceClaims`,
/// containers' `resources.claims`) when DRA is off, as kube-apiserver drops the fields of a
/// disabled feature gate.
pub fn restore_feature_pod_fields(
    pod: &mut Value,
    kept: Vec<(&'static str, Value)>,
    features: Features,
) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in kept {
        spec.insert(k.to_string(), v);
    }
    if !features.dra {
        spec.remove("resourceClaims");
        for list in ["containers", "initContainers"] {
            for c in spec
                .get_mut(list)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(r) = c.get_mut("resources").and_then(Value::as_object_mut) {
                    r.remove("claims");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_status_writes_decode_as_whole_pods_do() {
        let pod = super::super::resources::Registry::default()
            .catalog()
            .get("", "v1", "pods")
            .expect("pods are served");
        let stored = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "d", "uid": "u", "resourceVersion": "5"},
            "spec": {"containers": [{"name": "a", "image": "x"}], "nodeName": "n1"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": null}]}});
        let (stored, _) = normalize(&pod, stored).unwrap();
        let mut new = stored.clone();
        new["status"] = json!({"phase": "Running", "bogus": 1, "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null}]});
        assert!(same_but_status(&stored, &new));
        let (whole, whole_unknown) = normalize(&pod, new.clone()).unwrap();
        let mut part = new;
        let part_unknown = normalize_pod_status(&mut part).unwrap();
        assert_eq!(part, whole);
        assert_eq!(part_unknown, whole_unknown);
        assert_eq!(part_unknown, ["status.bogus"]);
        let mut bad = stored.clone();
        bad["status"]["phase"] = json!(3);
        assert!(normalize_pod_status(&mut bad).is_err());
        let mut spec_changed = stored.clone();
        spec_changed["spec"]["nodeName"] = json!("n2");
        assert!(!same_but_status(&stored, &spec_changed));
    }
}
