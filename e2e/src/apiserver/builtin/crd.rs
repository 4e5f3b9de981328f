//! CustomResourceDefinitions becoming served types, and the status the API server gives them.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::apiserver::cel::CrdValidation;
use crate::apiserver::error::{FieldError, FieldErrorKind};
use crate::apiserver::resources::{
    Builtin, CrdVersion, GroupResource, PrinterColumn, ResourceType,
};
use crate::apiserver::schema::Schema;

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
