//! OpenAPI documents, as much as kubectl needs:
//!
//! - `/openapi/v3` and one document per group/version, with every path's operations tagged
//!   with `x-kubernetes-group-version-kind` and PATCH declaring the `fieldValidation` query
//!   parameter — so kubectl leaves validation to the server (`fieldValidation=Strict`) — and
//!   component schemas (built-ins from the k8s-openapi types, custom resources from their CRD)
//!   for `kubectl explain`. PATCH bodies do not list strategic merge patch, so kubectl's
//!   client-side apply computes strategic patches from its compiled-in types, as it does
//!   against servers without OpenAPI.
//! - `/openapi/v2`: an empty document. kubectl (1.32) insists on downloading it, in protobuf,
//!   before it uses v3; with no definitions it validates nothing client-side.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value, json};

use super::builtin::{TypedOp, with_type};
use super::resources::{Catalog, ResourceType};

/// `/openapi/v2` as the gnostic `openapi_v2.Document` protobuf: swagger "2.0", info
/// {title, version}, empty paths. Hand-encoded (three fields) rather than pulling in a protobuf
/// stack for one constant.
pub fn v2_protobuf() -> Vec<u8> {
    let title = b"Kubernetes";
    let version = b"v1.32.0";
    let mut info = vec![0x0a, title.len() as u8];
    info.extend_from_slice(title);
    info.push(0x12);
    info.push(version.len() as u8);
    info.extend_from_slice(version);
    let mut doc = vec![0x0a, 3];
    doc.extend_from_slice(b"2.0");
    doc.push(0x12);
    doc.push(info.len() as u8);
    doc.extend(info);
    doc.extend_from_slice(&[0x42, 0x00]);
    doc
}

/// `/openapi/v2` as JSON.
pub fn v2_json() -> Value {
    json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": {}, "definitions": {}})
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn schema_name(t: &ResourceType) -> String {
    if t.crd.is_some() {
        let rev: Vec<&str> = t.group.split('.').rev().collect();
        format!("{}.{}.{}", rev.join("."), t.version, t.kind)
    } else {
        let g = if t.group.is_empty() {
            "core".to_string()
        } else {
            t.group.trim_end_matches(".k8s.io").to_string()
        };
        format!("io.k8s.api.{g}.{}.{}", t.version, t.kind)
    }
}

struct SchemaOf<'a>(&'a mut schemars::SchemaGenerator);

impl TypedOp for SchemaOf<'_> {
    type Out = Value;
    fn run<T: DeserializeOwned + Serialize + schemars::JsonSchema>(self) -> Value {
        self.0.subschema_for::<T>().to_value()
    }
}

fn gvk(t: &ResourceType) -> Value {
    json!({"group": t.group, "version": t.version, "kind": t.kind})
}

fn op(t: &ResourceType, action: &str, reference: &str, patch: bool) -> Value {
    let mut o = json!({
        "operationId": format!("{action}{}", t.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(t),
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": reference}}}}},
    });
    let mut params = vec![
        json!({"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}}),
    ];
    if patch || matches!(action, "post" | "put") {
        params.push(json!({"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}}));
        params.push(json!({"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}}));
    }
    if patch {
        params.push(json!({"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}));
        let body = json!({"schema": {"type": "object"}});
        o["requestBody"] = json!({"content": {
            "application/json-patch+json": body,
            "application/merge-patch+json": body,
            "application/apply-patch+yaml": body,
        }, "required": true});
    } else if matches!(action, "post" | "put") {
        o["requestBody"] =
            json!({"content": {"*/*": {"schema": {"$ref": reference}}}, "required": true});
    }
    o["parameters"] = Value::Array(params);
    o
}

/// The OpenAPI v3 document of one group/version.
pub fn v3_doc(cat: &Catalog, group: &str, version: &str) -> Option<Value> {
    let types: Vec<_> = cat.in_group_version(group, version).collect();
    if types.is_empty() {
        return None;
    }
    let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
    let mut schemas = Map::new();
    let mut paths = Map::new();
    let mut builtin_kinds: Vec<(String, Value)> = Vec::new();
    for t in &types {
        let (name, schema) = match &t.crd {
            Some(crd) => {
                let mut s = crd.raw_schema.clone().unwrap_or_else(
                    || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
                let props = s
                    .as_object_mut()
                    .map(|m| m.entry("properties").or_insert_with(|| json!({})));
                if let Some(Value::Object(p)) = props {
                    p.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
                    p.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
                    p.insert("metadata".into(), json!({"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "description": "Standard object's metadata."}));
                }
                s["x-kubernetes-group-version-kind"] = json!([gvk(t)]);
                (schema_name(t), Some(s))
            }
            None => {
                let r = with_type(&t.group, &t.kind, SchemaOf(&mut generator))
                    .or_else(|| with_type(&t.storage.group, &t.kind, SchemaOf(&mut generator)));
                let target = r
                    .as_ref()
                    .and_then(|r| r["$ref"].as_str())
                    .and_then(|r| r.rsplit('/').next())
                    .map(str::to_string);
                match target {
                    Some(target) => {
                        builtin_kinds.push((target.clone(), gvk(t)));
                        (target, None)
                    }
                    None => {
                        let mut s = json!({"type": "object"});
                        s["x-kubernetes-group-version-kind"] = json!([gvk(t)]);
                        (schema_name(t), Some(s))
                    }
                }
            }
        };
        let reference = format!("#/components/schemas/{name}");
        if let Some(schema) = schema {
            schemas.insert(name.clone(), schema);
        }
        let base = format!("/{}", gv_path(group, version));
        let coll = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", t.plural)
        } else {
            format!("{base}/{}", t.plural)
        };
        paths.insert(
            coll.clone(),
            json!({"get": op(t, "list", &reference, false), "post": op(t, "post", &reference, false), "delete": op(t, "deletecollection", &reference, false)}),
        );
        paths.insert(
            format!("{coll}/{{name}}"),
            json!({"get": op(t, "get", &reference, false), "put": op(t, "put", &reference, false),
                   "patch": op(t, "patch", &reference, true), "delete": op(t, "delete", &reference, false)}),
        );
        if t.status {
            paths.insert(
                format!("{coll}/{{name}}/status"),
                json!({"get": op(t, "get", &reference, false), "put": op(t, "put", &reference, false), "patch": op(t, "patch", &reference, true)}),
            );
        }
    }
    let mut defs = generator.take_definitions(true);
    if !defs.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta") {
        let mut g = schemars::generate::SchemaSettings::openapi3().into_generator();
        g.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
        defs.extend(g.take_definitions(true));
    }
    for (k, v) in defs {
        schemas.entry(k).or_insert(v);
    }
    for (name, g) in builtin_kinds {
        if let Some(s) = schemas.get_mut(&name) {
            s["x-kubernetes-group-version-kind"] = json!([g]);
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `/openapi/v3`: one entry per group/version, with a hash that changes with its content.
pub fn v3_root(cat: &Catalog) -> Value {
    let mut paths = Map::new();
    for (group, versions) in cat.groups() {
        for v in versions {
            let mut h = DefaultHasher::new();
            for t in cat.in_group_version(&group, &v) {
                t.plural.hash(&mut h);
                t.kind.hash(&mut h);
                if let Some(c) = &t.crd {
                    c.raw_schema.as_ref().map(|s| s.to_string()).hash(&mut h);
                }
            }
            let p = gv_path(&group, &v);
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={:016X}", h.finish())}),
            );
        }
    }
    json!({"paths": paths})
}
