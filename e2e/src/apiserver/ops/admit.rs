//! What a write goes through before it is stored: the namespace and type checked, the object
//! decoded, pruned, defaulted and validated, and each kind's defaults on create.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::{CRD_FINALIZER, FieldValidation, Shared, WriteOpts, now, str_at};
use crate::apiserver::builtin;
use crate::apiserver::error::{ApiError, FieldError, FieldErrorKind};
use crate::apiserver::resources;
use crate::apiserver::resources::{Builtin, ResourceType};
use crate::apiserver::schema::{self, obj_mut};
use crate::apiserver::store::Key;

impl Shared {
    pub(super) fn check_namespace(&self, ns: &str) -> Result<(), ApiError> {
        let nss = self
            .store
            .collection(&resources::GroupResource::new("", "namespaces"));
        match nss.get(&Key::new("", ns)) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(s) if s.meta.deleting => Err(ApiError::forbidden(format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ))),
            Some(_) => Ok(()),
        }
    }

    pub(super) fn check_type_meta(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        let Some(m) = obj.as_object_mut() else {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        };
        let av = rt.api_version();
        match m.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("apiVersion".into(), json!(av));
            }
            Some(v) if v != av => {
                let (g, _) = resources::split_api_version(v);
                if g != rt.group {
                    return Err(ApiError::bad_request(format!(
                        "the API version in the data ({v}) does not match the expected API version ({av})"
                    )));
                }
                m.insert("apiVersion".into(), json!(av));
            }
            _ => {}
        }
        match m.get("kind").and_then(Value::as_str) {
            None | Some("") => {
                m.insert("kind".into(), json!(rt.kind));
            }
            Some(k) if k != rt.kind => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    rt.kind
                )));
            }
            _ => {}
        }
        if !m.get("metadata").is_some_and(Value::is_object) {
            m.insert("metadata".into(), json!({}));
        }
        Ok(())
    }

    /// Prune and default a custom resource (what decoding does before admission).
    pub(super) fn default_only(&self, rt: &ResourceType, obj: &mut Value) {
        if let Some(s) = rt.crd.as_ref().and_then(|c| c.schema.as_ref()) {
            schema::prune_and_default(s, obj);
        }
    }

    /// Decode, prune, default and validate an object about to be written.
    pub(super) fn admit(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
        old: Option<&Value>,
        opts: &WriteOpts,
    ) -> Result<Vec<String>, ApiError> {
        let mut warnings = Vec::new();
        let handle_unknown = |unknown: Vec<String>,
                              warnings: &mut Vec<String>|
         -> Result<(), ApiError> {
            if unknown.is_empty() {
                return Ok(());
            }
            match opts.validation {
                FieldValidation::Ignore => Ok(()),
                FieldValidation::Warn => {
                    warnings.extend(unknown.iter().map(|u| format!("unknown field \"{u}\"")));
                    Ok(())
                }
                FieldValidation::Strict => {
                    let list: Vec<String> = unknown
                        .iter()
                        .map(|u| format!("unknown field \"{u}\""))
                        .collect();
                    Err(ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                        rt.kind,
                        rt.version,
                        rt.kind,
                        list.join(", ")
                    )))
                }
            }
        };
        let mut errs: Vec<FieldError> = Vec::new();
        if let Some(crd) = &rt.crd {
            if let Some(s) = &crd.schema {
                let pruned = schema::prune_and_default(s, obj);
                handle_unknown(pruned, &mut warnings)?;
                // Ratcheting at top-level-field granularity: unchanged fields are not re-checked
                // (not walked, and errors found through root-level rules on them dropped).
                let mut all = Vec::new();
                match old {
                    None => schema::validate(s, obj, "", &mut all),
                    Some(o) => {
                        let unchanged = |k: &str| o.get(k) == obj.get(k);
                        schema::validate_changed(s, obj, &mut all, &unchanged);
                    }
                }
                errs.extend(all.into_iter().filter(|e| {
                    let top = e.field.split(['.', '[']).next().unwrap_or("");
                    old.is_none_or(|o| top.is_empty() || o.get(top) != obj.get(top))
                }));
            } else {
                let m = obj_mut(obj, "metadata");
                m.retain(|k, _| schema::OBJECT_META_FIELDS.contains(&k.as_str()));
            }
            if let Some(v) = &crd.validation {
                // As kube-apiserver: values of the wrong type keep the rules from running.
                if errs.iter().any(|e| e.kind == FieldErrorKind::TypeInvalid) {
                    errs.push(FieldError::invalid(
                        "<nil>",
                        Value::Null,
                        "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                    ));
                } else {
                    errs.extend(v.validate(obj, old));
                }
            }
        } else if rt.builtin == Builtin::Pod
            && old.is_some_and(|o| builtin::same_but_status(o, obj))
        {
            // A status write (kubelet, scheduler conditions): only the status is new.
            let unknown = builtin::normalize_pod_status(obj).map_err(|e| {
                ApiError::bad_request(format!(
                    "{} in version \"{}\" cannot be handled as a {}: {e}",
                    rt.kind, rt.version, rt.kind
                ))
            })?;
            handle_unknown(unknown, &mut warnings)?;
        } else {
            let mut taken = std::mem::take(obj);
            // Pod fields of optional APIs that k8s-openapi's v1_32 Pod does not know: kept
            // where the API is served (dropped otherwise, as a server without it drops them).
            let kept = if rt.builtin == Builtin::Pod {
                builtin::take_feature_pod_fields(&mut taken, self.features)
            } else {
                Vec::new()
            };
            let (mut norm, unknown) = builtin::normalize(rt, taken).map_err(|e| {
                ApiError::bad_request(format!(
                    "{} in version \"{}\" cannot be handled as a {}: {e}",
                    rt.kind, rt.version, rt.kind
                ))
            })?;
            if rt.builtin == Builtin::Pod {
                builtin::restore_feature_pod_fields(&mut norm, kept, self.features);
            }
            *obj = norm;
            handle_unknown(unknown, &mut warnings)?;
            if rt.builtin == Builtin::Crd
                && let Err(e) = builtin::crd_types(obj)
            {
                errs.extend(e);
            }
        }
        errs.extend(builtin::validate(rt, obj, old));
        if !errs.is_empty() {
            return Err(ApiError::invalid(rt, str_at(obj, "name"), &errs));
        }
        Ok(warnings)
    }

    pub(super) fn prepare_create(
        &self,
        rt: &ResourceType,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        let name = str_at(obj, "name").to_string();
        match rt.builtin {
            Builtin::Pod => {
                let priority = match obj["spec"]["priorityClassName"].as_str() {
                    None | Some("") => None,
                    Some(pc) => {
                        let pcs = self.store.collection(&resources::GroupResource::new(
                            "scheduling.k8s.io",
                            "priorityclasses",
                        ));
                        match pcs.get(&Key::new("", pc)) {
                            Some(s) => s.value()["value"].as_i64(),
                            None => {
                                return Err(ApiError::forbidden(format!(
                                    "pods \"{name}\" is forbidden: no PriorityClass with name {pc} was found"
                                )));
                            }
                        }
                    }
                };
                builtin::default_pod(obj, priority);
            }
            Builtin::Namespace => {
                obj["spec"] = json!({ "finalizers": ["kubernetes"] });
                obj["status"] = json!({ "phase": "Active" });
                obj_mut(obj_mut_v(obj, "metadata"), "labels")
                    .insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            Builtin::Service => {
                let spec = obj_mut(obj, "spec");
                let typ = spec
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("ClusterIP")
                    .to_string();
                spec.insert("type".into(), json!(typ));
                if typ != "ExternalName" {
                    let ip = match spec.get("clusterIP").and_then(Value::as_str) {
                        Some(ip) if !ip.is_empty() => ip.to_string(),
                        _ => {
                            let n = self.next_ip.fetch_add(1, Ordering::Relaxed);
                            format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)
                        }
                    };
                    spec.insert("clusterIP".into(), json!(ip));
                    spec.insert("clusterIPs".into(), json!([ip]));
                    spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
                    spec.entry("ipFamilyPolicy")
                        .or_insert_with(|| json!("SingleStack"));
                    spec.entry("internalTrafficPolicy")
                        .or_insert_with(|| json!("Cluster"));
                }
                spec.entry("sessionAffinity")
                    .or_insert_with(|| json!("None"));
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        let port = p["port"].clone();
                        if let Some(p) = p.as_object_mut() {
                            p.entry("protocol").or_insert_with(|| json!("TCP"));
                            p.entry("targetPort").or_insert(port);
                        }
                    }
                }
                obj["status"] = json!({ "loadBalancer": {} });
            }
            Builtin::Secret => {
                obj.as_object_mut()
                    .expect("object")
                    .entry("type")
                    .or_insert_with(|| json!("Opaque"));
            }
            Builtin::Crd => {
                let m = obj_mut(obj, "metadata");
                let f = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = f.as_array_mut()
                    && !a.iter().any(|x| x == CRD_FINALIZER)
                {
                    a.push(json!(CRD_FINALIZER));
                }
                let status = builtin::crd_status(obj, &Value::Null, &now());
                obj["status"] = status;
            }
            Builtin::Node => {}
            _ => {
                if rt.status
                    && let Some(m) = obj.as_object_mut()
                {
                    m.remove("status");
                }
            }
        }
        Ok(())
    }
}

fn obj_mut_v<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    obj_mut(v, key);
    &mut v[key]
}
