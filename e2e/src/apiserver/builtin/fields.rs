//! Field selectors: the fields each kind can be selected by, and their values in an object.

use serde_json::Value;

use crate::apiserver::resources::{Builtin, GroupResource, ResourceType};
use crate::apiserver::store;

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
pub fn fields_fn(gr: &GroupResource) -> store::FieldsFn {
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
