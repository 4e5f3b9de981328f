//! Validation of built-in kinds and of every object's metadata: names, labels, Events,
//! ResourceClaims, pods (and what a pod update may change).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use crate::apiserver::error::{FieldError, FieldErrorKind};
use crate::apiserver::resources::{Builtin, ResourceType};

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
