//! Behaviour specific to built-in kinds: decoding through the k8s-openapi types (which prunes
//! unknown fields and refuses wrongly typed ones, as decoding into Go structs does), defaults and
//! status on create, validation, selectable fields, the events.k8s.io view of core Events, and
//! CustomResourceDefinitions becoming served types.

use std::sync::{Arc, LazyLock};

use regex::Regex;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value, json};

use super::cel::CrdValidation;
use super::error::{FieldError, FieldErrorKind};
use super::resources::{
    Builtin, CrdVersion, Features, GroupResource, PrinterColumn, ResourceType, WorkloadApi,
};
use super::schema::Schema;

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

/// Field selectors a kind supports, besides metadata.name and metadata.namespace.
pub fn selectable_fields(rt: &ResourceType) -> &'static [&'static str] {
    match rt.builtin {
        Builtin::ResourceSlice => &["spec.nodeName", "spec.driver", "spec.pool.name"],
        Builtin::Pod => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        Builtin::Node => &["spec.unschedulable"],
        Builtin::Namespace => &["status.phase"],
        Builtin::Secret => &["type"],
        Builtin::Event => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        Builtin::EventV1 => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "deprecatedSource",
            "type",
        ],
        _ => &[],
    }
}

/// Translate an events.k8s.io field selector name to the stored core Event field.
pub fn event_v1_field(f: &str) -> String {
    if let Some(r) = f.strip_prefix("regarding.") {
        format!("involvedObject.{r}")
    } else {
        match f {
            "reportingController" => "reportingComponent".into(),
            "deprecatedSource" => "source".into(),
            other => other.into(),
        }
    }
}

fn s(v: &Value) -> Box<str> {
    match v {
        Value::String(s) => s.as_str().into(),
        Value::Bool(b) => b.to_string().into(),
        Value::Null => "".into(),
        other => other.to_string().into(),
    }
}

fn pod_fields(v: &Value) -> Vec<(&'static str, Box<str>)> {
    let sp = &v["spec"];
    let st = &v["status"];
    vec![
        ("spec.nodeName", s(&sp["nodeName"])),
        ("spec.restartPolicy", s(&sp["restartPolicy"])),
        ("spec.schedulerName", s(&sp["schedulerName"])),
        ("spec.serviceAccountName", s(&sp["serviceAccountName"])),
        (
            "spec.hostNetwork",
            if sp["hostNetwork"].as_bool() == Some(true) {
                "true".into()
            } else {
                "false".into()
            },
        ),
        ("status.phase", s(&st["phase"])),
        ("status.podIP", s(&st["podIP"])),
        ("status.nominatedNodeName", s(&st["nominatedNodeName"])),
    ]
}

fn node_fields(v: &Value) -> Vec<(&'static str, Box<str>)> {
    let u = v["spec"]["unschedulable"].as_bool().unwrap_or(false);
    vec![("spec.unschedulable", u.to_string().into())]
}

fn namespace_fields(v: &Value) -> Vec<(&'static str, Box<str>)> {
    vec![("status.phase", s(&v["status"]["phase"]))]
}

fn secret_fields(v: &Value) -> Vec<(&'static str, Box<str>)> {
    vec![("type", s(&v["type"]))]
}

fn event_fields(v: &Value) -> Vec<(&'static str, Box<str>)> {
    let io = &v["involvedObject"];
    vec![
        ("involvedObject.kind", s(&io["kind"])),
        ("involvedObject.namespace", s(&io["namespace"])),
        ("involvedObject.name", s(&io["name"])),
        ("involvedObject.uid", s(&io["uid"])),
        ("involvedObject.apiVersion", s(&io["apiVersion"])),
        ("involvedObject.resourceVersion", s(&io["resourceVersion"])),
        ("involvedObject.fieldPath", s(&io["fieldPath"])),
        ("reason", s(&v["reason"])),
        ("reportingComponent", s(&v["reportingComponent"])),
        ("source", s(&v["source"]["component"])),
        ("type", s(&v["type"])),
    ]
}

fn no_fields(_: &Value) -> Vec<(&'static str, Box<str>)> {
    Vec::new()
}

fn slice_fields(v: &Value) -> Vec<(&'static str, Box<str>)> {
    let sp = &v["spec"];
    vec![
        ("spec.nodeName", s(&sp["nodeName"])),
        ("spec.driver", s(&sp["driver"])),
        ("spec.pool.name", s(&sp["pool"]["name"])),
    ]
}

/// The field extractor of the objects in a storage collection.
pub fn fields_fn(gr: &GroupResource) -> super::store::FieldsFn {
    if gr.group == "resource.k8s.io" && gr.resource == "resourceslices" {
        return slice_fields;
    }
    if !gr.group.is_empty() {
        return no_fields;
    }
    match gr.resource.as_str() {
        "pods" => pod_fields,
        "nodes" => node_fields,
        "namespaces" => namespace_fields,
        "secrets" => secret_fields,
        "events" => event_fields,
        _ => no_fields,
    }
}

static DNS_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").expect("regex")
});
static DNS_LABEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").expect("regex"));
static LABEL_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").expect("regex"));

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// Validate an object name for a kind.
pub fn validate_name(rt: &ResourceType, name: &str) -> Option<FieldError> {
    let label = matches!(rt.builtin, Builtin::Namespace | Builtin::Service);
    let bad = if label {
        (!DNS_LABEL.is_match(name) || name.len() > 63).then_some(LABEL_MSG)
    } else if rt.builtin == Builtin::Event || rt.builtin == Builtin::EventV1 {
        None
    } else {
        (!DNS_SUBDOMAIN.is_match(name) || name.len() > 253).then_some(SUBDOMAIN_MSG)
    };
    bad.map(|msg| FieldError::invalid("metadata.name", json!(name), msg))
}

fn validate_labels(labels: &Value, errs: &mut Vec<FieldError>) {
    let Some(m) = labels.as_object() else { return };
    for (k, v) in m {
        let (prefix, name) = match k.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        let key_ok = name.len() <= 63
            && LABEL_NAME.is_match(name)
            && prefix.is_none_or(|p| DNS_SUBDOMAIN.is_match(p) && p.len() <= 253);
        if !key_ok {
            errs.push(FieldError::invalid(
                "metadata.labels",
                json!(k),
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ));
        }
        let val = v.as_str().unwrap_or("");
        if !(val.is_empty() || (val.len() <= 63 && LABEL_NAME.is_match(val))) {
            errs.push(FieldError::invalid(
                format!("metadata.labels[{k}]"),
                json!(val),
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ));
        }
    }
}

/// What kube-apiserver checks of every Event, whichever API wrote it (`legacyValidateEvent`):
/// an Event with `eventTime` (a "new" event) names its reporting controller, instance and
/// action; an old one's involved object is in the Event's namespace.
fn validate_event(ev: &Value, errs: &mut Vec<FieldError>) {
    let has = |k: &str| ev[k].as_str().is_some_and(|s| !s.is_empty());
    let ns = ev["metadata"]["namespace"].as_str().unwrap_or("");
    let obj_ns = ev["involvedObject"]["namespace"].as_str().unwrap_or("");
    if has("eventTime") {
        if obj_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(FieldError::invalid(
                "involvedObject.namespace",
                json!(obj_ns),
                "does not match event.namespace",
            ));
        }
        for k in ["reportingComponent", "reportingInstance", "action"] {
            if !has(k) {
                errs.push(FieldError::required(k, ""));
            }
        }
    } else if !obj_ns.is_empty() && obj_ns != ns {
        errs.push(FieldError::invalid(
            "involvedObject.namespace",
            json!(obj_ns),
            "does not match event.namespace",
        ));
    }
}

/// What kube-apiserver checks of an Event created through events.k8s.io/v1 on top of
/// [`validate_event`] (`ValidateEventCreate`): `eventTime` and a type are required and the
/// deprecated core/v1 fields must be unset — so such an Event never has a `lastTimestamp` in
/// the core/v1 view.
pub fn validate_event_v1_create(v1: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if v1["eventTime"].as_str().is_none_or(str::is_empty) {
        errs.push(FieldError::required("eventTime", ""));
    }
    match v1["type"].as_str() {
        Some("Normal" | "Warning") => {}
        other => errs.push(FieldError::invalid(
            "type",
            json!(""),
            format!("has invalid value: {}", other.unwrap_or("")),
        )),
    }
    for k in [
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
    ] {
        if !v1[k].is_null() && v1[k] != json!(0) {
            errs.push(FieldError::invalid(k, json!(""), "needs to be unset"));
        }
    }
    if v1["deprecatedSource"].as_object().is_some_and(|s| {
        s.values()
            .any(|v| v.as_str().is_some_and(|x| !x.is_empty()))
    }) {
        errs.push(FieldError::invalid(
            "deprecatedSource",
            json!(""),
            "needs to be unset",
        ));
    }
    errs
}

/// Validation of built-in kinds (and object metadata of every kind).
pub fn validate(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_labels(&obj["metadata"]["labels"], &mut errs);
    if rt.builtin == Builtin::Event {
        validate_event(obj, &mut errs);
    }
    if rt.builtin == Builtin::Pod {
        validate_pod(obj, &mut errs);
        if let Some(old) = old {
            validate_pod_update(obj, old, &mut errs);
        }
    }
    if rt.builtin == Builtin::ResourceClaim {
        validate_claim(obj, old, &mut errs);
    }
    errs
}

/// A ResourceClaim: every request has a name and (for `exactly`) a device class; the spec
/// never changes.
fn validate_claim(claim: &Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    if let Some(old) = old {
        if old["spec"] != claim["spec"] {
            errs.push(FieldError::invalid(
                "spec",
                claim["spec"].clone(),
                "field is immutable",
            ));
        }
        return;
    }
    let reqs = claim["spec"]["devices"]["requests"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, r) in reqs.iter().enumerate() {
        let f = format!("spec.devices.requests[{i}]");
        if r["name"].as_str().is_none_or(|n| !DNS_LABEL.is_match(n)) {
            errs.push(FieldError::invalid(
                format!("{f}.name"),
                r["name"].clone(),
                LABEL_MSG,
            ));
        }
        match (r.get("exactly"), r.get("firstAvailable")) {
            (Some(e), None) => {
                if e["deviceClassName"].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        format!("{f}.exactly.deviceClassName"),
                        "",
                    ));
                }
            }
            (None, Some(_)) => {}
            _ => errs.push(FieldError::invalid(
                f.clone(),
                r.clone(),
                "exactly one of `exactly` or `firstAvailable` is required",
            )),
        }
    }
}

fn validate_containers(list: &Value, field: &str, required: bool, errs: &mut Vec<FieldError>) {
    let items = list.as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        if required {
            errs.push(FieldError::required(field, ""));
        }
        return;
    }
    let mut seen = Vec::new();
    for (i, c) in items.iter().enumerate() {
        let name = c["name"].as_str().unwrap_or("");
        if name.is_empty() {
            errs.push(FieldError::required(format!("{field}[{i}].name"), ""));
        } else if !DNS_LABEL.is_match(name) {
            errs.push(FieldError::invalid(
                format!("{field}[{i}].name"),
                json!(name),
                LABEL_MSG,
            ));
        } else if seen.contains(&name) {
            errs.push(FieldError::new(
                FieldErrorKind::Duplicate,
                format!("{field}[{i}].name"),
                Some(json!(name)),
                "",
            ));
        }
        seen.push(name);
        if c["image"].as_str().unwrap_or("").is_empty() {
            errs.push(FieldError::required(format!("{field}[{i}].image"), ""));
        }
    }
}

fn validate_pod(pod: &Value, errs: &mut Vec<FieldError>) {
    validate_containers(&pod["spec"]["containers"], "spec.containers", true, errs);
    validate_containers(
        &pod["spec"]["initContainers"],
        "spec.initContainers",
        false,
        errs,
    );
    if let Some(rp) = pod["spec"]["restartPolicy"].as_str()
        && !matches!(rp, "Always" | "OnFailure" | "Never")
    {
        errs.push(FieldError::new(
            FieldErrorKind::NotSupported,
            "spec.restartPolicy",
            Some(json!(rp)),
            "supported values: \"Always\", \"OnFailure\", \"Never\"",
        ));
    }
}

fn mutable_pod_spec_masked(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Some(m) = s.as_object_mut() {
        for k in [
            "activeDeadlineSeconds",
            "tolerations",
            "schedulingGates",
            "terminationGracePeriodSeconds",
        ] {
            m.remove(k);
        }
        for list in ["containers", "initContainers"] {
            if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
                for c in cs {
                    if let Some(c) = c.as_object_mut() {
                        c.remove("image");
                    }
                }
            }
        }
    }
    s
}

fn validate_pod_update(new: &Value, old: &Value, errs: &mut Vec<FieldError>) {
    if mutable_pod_spec_masked(&new["spec"]) != mutable_pod_spec_masked(&old["spec"]) {
        errs.push(FieldError::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
}

fn image_pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    let tag = if last.contains('@') {
        return "IfNotPresent";
    } else {
        last.split_once(':').map(|(_, t)| t)
    };
    match tag {
        None | Some("latest") => "Always",
        _ => "IfNotPresent",
    }
}

fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    m.entry("imagePullPolicy")
        .or_insert_with(|| json!(image_pull_policy(&image)));
    m.entry("terminationMessagePath")
        .or_insert_with(|| json!("/dev/termination-log"));
    m.entry("terminationMessagePolicy")
        .or_insert_with(|| json!("File"));
    let res = m.entry("resources").or_insert_with(|| json!({}));
    if let Some(r) = res.as_object_mut()
        && let Some(limits) = r.get("limits").and_then(Value::as_object).cloned()
    {
        let req = r.entry("requests").or_insert_with(|| json!({}));
        if let Some(req) = req.as_object_mut() {
            for (k, v) in limits {
                req.entry(k).or_insert(v);
            }
        }
    }
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            if let Some(p) = p.as_object_mut() {
                p.entry("protocol").or_insert_with(|| json!("TCP"));
            }
        }
    }
}

/// The QoS class of a (defaulted) pod spec.
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec[*k].as_array())
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let req = &c["resources"]["requests"];
        let lim = &c["resources"]["limits"];
        for r in ["cpu", "memory"] {
            if !req[r].is_null() || !lim[r].is_null() {
                any = true;
            }
            if lim[r].is_null() || (req[r] != lim[r] && !req[r].is_null()) {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Pod defaults applied at creation (the defaulting and admission plugins of a real cluster:
/// defaults, DefaultTolerationSeconds, ServiceAccount, Priority), and its initial status.
pub fn default_pod(pod: &mut Value, priority: Option<i64>) {
    let spec = super::schema::obj_mut(pod, "spec");
    spec.entry("restartPolicy")
        .or_insert_with(|| json!("Always"));
    spec.entry("dnsPolicy")
        .or_insert_with(|| json!("ClusterFirst"));
    spec.entry("schedulerName")
        .or_insert_with(|| json!("default-scheduler"));
    spec.entry("terminationGracePeriodSeconds")
        .or_insert_with(|| json!(30));
    spec.entry("securityContext").or_insert_with(|| json!({}));
    spec.entry("enableServiceLinks")
        .or_insert_with(|| json!(true));
    spec.entry("preemptionPolicy")
        .or_insert_with(|| json!("PreemptLowerPriority"));
    spec.insert("priority".into(), json!(priority.unwrap_or(0)));
    let sa = spec
        .get("serviceAccountName")
        .or(spec.get("serviceAccount"))
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(sa));
    spec.insert("serviceAccount".into(), json!(sa));
    let tols = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(t) = tols.as_array_mut() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let has = t.iter().any(|x| {
                (x["key"] == key || x["key"].is_null() && x["operator"] == "Exists")
                    && (x["effect"] == "NoExecute" || x["effect"].is_null())
            });
            if !has {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                default_container(c);
            }
        }
    }
    let qos = qos_class(&pod["spec"]);
    pod["status"] = json!({ "phase": "Pending", "qosClass": qos });
}

/// core/v1 Event → events.k8s.io/v1 Event.
pub fn event_to_v1(core: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    out.insert("kind".into(), json!("Event"));
    for (from, to) in EVENT_FIELDS {
        if let Some(v) = core.get(*from).filter(|v| !v.is_null()) {
            out.insert((*to).into(), v.clone());
        }
    }
    Value::Object(out)
}

/// events.k8s.io/v1 Event → core/v1 Event.
pub fn event_from_v1(v1: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    for (to, from) in EVENT_FIELDS {
        if let Some(v) = v1.get(*from).filter(|v| !v.is_null()) {
            out.insert((*to).into(), v.clone());
        }
    }
    Value::Object(out)
}

const EVENT_FIELDS: &[(&str, &str)] = &[
    ("metadata", "metadata"),
    ("involvedObject", "regarding"),
    ("related", "related"),
    ("message", "note"),
    ("reason", "reason"),
    ("type", "type"),
    ("action", "action"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// The served types of a CRD, or why it is invalid.
pub fn crd_types(crd: &Value) -> Result<Vec<Arc<ResourceType>>, Vec<FieldError>> {
    let mut errs = Vec::new();
    let spec = &crd["spec"];
    let name = crd["metadata"]["name"].as_str().unwrap_or("");
    let group = spec["group"].as_str().unwrap_or("");
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or("");
    let kind = names["kind"].as_str().unwrap_or("");
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    }
    if plural.is_empty() {
        errs.push(FieldError::required("spec.names.plural", ""));
    }
    if kind.is_empty() {
        errs.push(FieldError::required("spec.names.kind", ""));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            "metadata.name",
            json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let scope = spec["scope"].as_str().unwrap_or("");
    if !matches!(scope, "Namespaced" | "Cluster") {
        errs.push(FieldError::new(
            FieldErrorKind::NotSupported,
            "spec.scope",
            Some(json!(scope)),
            "supported values: \"Cluster\", \"Namespaced\"",
        ));
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        errs.push(FieldError::required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
    } else if versions.iter().filter(|v| v["storage"] == true).count() != 1 {
        errs.push(FieldError::invalid(
            "spec.versions",
            Value::String(String::new()),
            "must have exactly one version marked as storage version",
        ));
    }
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut types = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let vname = v["name"].as_str().unwrap_or("");
        let raw = v["schema"]["openAPIV3Schema"].clone();
        let schema = if raw.is_object() {
            match Schema::parse(&raw) {
                Ok(s) => Some(Arc::new(s)),
                Err(e) => {
                    errs.push(FieldError::invalid(
                        format!("spec.versions[{i}].schema.openAPIV3Schema"),
                        Value::String(String::new()),
                        e,
                    ));
                    None
                }
            }
        } else {
            None
        };
        let validation = if raw.is_object() {
            match CrdValidation::compile(&raw) {
                Ok(v) => v.map(Arc::new),
                Err(es) => {
                    for e in es {
                        errs.push(FieldError::invalid(
                            format!("spec.versions[{i}].schema.openAPIV3Schema"),
                            Value::String(String::new()),
                            format!("compilation failed: {e}"),
                        ));
                    }
                    None
                }
            }
        } else {
            None
        };
        if v["served"] == false {
            continue;
        }
        let columns = v["additionalPrinterColumns"]
            .as_array()
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: c["name"].as_str().unwrap_or("").into(),
                        typ: c["type"].as_str().unwrap_or("string").into(),
                        format: c["format"].as_str().unwrap_or("").into(),
                        description: c["description"].as_str().unwrap_or("").into(),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        json_path: c["jsonPath"].as_str().unwrap_or("").into(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        types.push(Arc::new(ResourceType {
            group: group.into(),
            version: vname.into(),
            plural: plural.into(),
            singular: singular.clone(),
            kind: kind.into(),
            namespaced: scope == "Namespaced",
            short_names: strs(&names["shortNames"]),
            categories: strs(&names["categories"]),
            status: v["subresources"]["status"].is_object(),
            generation: true,
            unconditional_update: false,
            create_on_update: false,
            extra_subresources: &[],
            builtin: Builtin::Custom,
            storage: GroupResource::new(group, plural),
            crd: Some(Arc::new(CrdVersion {
                crd_name: name.into(),
                raw_schema: raw.is_object().then_some(raw),
                schema,
                validation,
                columns,
                storage: v["storage"] == true,
            })),
        }));
    }
    if errs.is_empty() {
        Ok(types)
    } else {
        Err(errs)
    }
}

/// The status the API server gives an accepted CRD.
pub fn crd_status(crd: &Value, old_status: &Value, now: &str) -> Value {
    let names = &crd["spec"]["names"];
    let kind = names["kind"].as_str().unwrap_or("");
    let mut accepted = names.clone();
    if accepted["singular"].is_null() {
        accepted["singular"] = json!(kind.to_lowercase());
    }
    if accepted["listKind"].is_null() {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    let since = |t: &str| -> Value {
        old_status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t && c["status"] == "True"))
            .map(|c| c["lastTransitionTime"].clone())
            .unwrap_or_else(|| json!(now))
    };
    let mut stored: Vec<Value> = old_status["storedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(v) = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"] == true))
        && !stored.contains(&v["name"])
    {
        stored.push(v["name"].clone());
    }
    json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": since("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": since("Established")}
        ],
        "storedVersions": stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_defaults_and_qos() {
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "busybox",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        default_pod(&mut pod, None);
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "1"
        );
        assert_eq!(pod["status"]["qosClass"], "Guaranteed");
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "x:1.0"}]}});
        default_pod(&mut pod, Some(7));
        assert_eq!(pod["status"]["qosClass"], "BestEffort");
        assert_eq!(pod["spec"]["priority"], 7);
        assert_eq!(
            pod["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
    }

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

    #[test]
    fn events_convert_both_ways() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "hi", "reason": "R", "count": 2});
        let v1 = event_to_v1(&core);
        assert_eq!(v1["regarding"]["name"], "p");
        assert_eq!(v1["note"], "hi");
        assert_eq!(v1["deprecatedCount"], 2);
        assert_eq!(event_from_v1(&v1), core);
    }
}
