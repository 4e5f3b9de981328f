//! The events.k8s.io/v1 view of core/v1 Events: conversion both ways, and field selector
//! names.

use serde_json::{Map, Value, json};

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

#[cfg(test)]
mod tests {
    use super::*;

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
