//! The verbs on a resource (get, create, update, patch, delete, deletecollection, and the
//! binding, eviction and log subresources), with their options read from the request.

use std::sync::Arc;

use axum::response::Response;
use serde_json::{Value, json};

use super::format::{Format, View, negotiate, obj_resp, parse_body};
use super::list::{list, selectors};
use super::watch::watch;
use super::{Req, Target, json_resp, response};
use crate::apiserver::apply::{Apply, Semantics};
use crate::apiserver::builtin;
use crate::apiserver::error;
use crate::apiserver::error::ApiError;
use crate::apiserver::ops::{
    Body, DeleteOpts, Deleted, FieldValidation, Mutation, Part, Shared, WriteOpts, now,
};
use crate::apiserver::patch;
use crate::apiserver::resources::{Builtin, Catalog, ResourceType};

fn write_opts(req: &Req) -> Result<WriteOpts, ApiError> {
    let dry_run = match req.q("dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid dryRun value: {other}; supported values: All"
            )));
        }
    };
    let validation = match req.q("fieldValidation") {
        None | Some("") | Some("Warn") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", got {other:?}"
            )));
        }
    };
    Ok(WriteOpts {
        dry_run,
        field_manager: req.q("fieldManager").map(str::to_string),
        validation,
        force: req.flag("force"),
        is_put: false,
        apply: false,
        user: Some(req.user.clone()),
    })
}

pub(super) async fn resource(
    sh: &Arc<Shared>,
    cat: &Catalog,
    req: &Req,
    t: &Target,
    verb: &str,
) -> Result<Response, ApiError> {
    let (rt, view) = if t.rt.builtin == Builtin::EventV1 {
        (
            cat.get("", "v1", "events")
                .ok_or_else(ApiError::not_found_path)?,
            View::EventV1,
        )
    } else {
        (t.rt.clone(), View::Plain)
    };
    let ns = t.ns.as_deref();
    let name = t.name.as_deref();
    let part = if t.sub.as_deref() == Some("status") {
        Part::Status
    } else {
        Part::Main
    };
    match verb {
        "get" => {
            let name = name.expect("get has a name");
            if t.sub.as_deref() == Some("log") {
                return pod_log(sh, &rt, ns, name, req);
            }
            let fmt = negotiate(req)?;
            let s = sh.get(&rt, ns, name)?;
            Ok(obj_resp(200, &t.rt, view, &fmt, &Body::Stored(s), &[]))
        }
        "list" => list(sh, &rt, &t.rt, view, ns, req),
        "watch" => watch(sh, &rt, &t.rt, view, ns, name, req),
        "create" => {
            let opts = write_opts(req)?;
            match (name, t.sub.as_deref()) {
                (None, None) => {
                    if rt.namespaced && ns.is_none() {
                        return Err(ApiError::not_found_path());
                    }
                    let fmt = negotiate(req)?;
                    let raw = parse_body(req)?;
                    if view == View::EventV1 {
                        let errs = builtin::validate_event_v1_create(&raw);
                        if !errs.is_empty() {
                            let name = raw["metadata"]["name"].as_str().unwrap_or("");
                            return Err(ApiError::invalid(&t.rt, name, &errs));
                        }
                    }
                    let body = view.inp(raw);
                    let w = sh.create(&rt, ns, body, &opts, false).await?;
                    Ok(obj_resp(201, &t.rt, view, &fmt, &w.body, &w.warnings))
                }
                (Some(name), Some("binding")) => {
                    let b = parse_body(req)?;
                    let node = b["target"]["name"].as_str().unwrap_or("");
                    if node.is_empty() {
                        return Err(ApiError::invalid(
                            &rt,
                            name,
                            &[error::FieldError::required("target.name", "")],
                        ));
                    }
                    if !opts.dry_run {
                        sh.bind(&rt, ns, name, node)?;
                    }
                    Ok(json_resp(
                        201,
                        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                    ))
                }
                (Some(name), Some("eviction")) => {
                    let b = parse_body(req)?;
                    let mut d = delete_opts(req, Some(&b["deleteOptions"]))?;
                    d.dry_run |= opts.dry_run;
                    sh.delete(&rt, ns, name, &d).await?;
                    Ok(json_resp(
                        201,
                        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                    ))
                }
                _ => Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                )),
            }
        }
        "update" => {
            let name = name.ok_or_else(|| {
                ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                )
            })?;
            let fmt = negotiate(req)?;
            let mut opts = write_opts(req)?;
            opts.is_put = true;
            let body = view.inp(parse_body(req)?);
            let create_ok = rt.create_on_update && part == Part::Main;
            let w = sh
                .update(&rt, ns, name, part, &opts, &mut |cur| match cur {
                    Some(_) => Ok(Mutation::Update(body.clone())),
                    None if create_ok => Ok(Mutation::Create(body.clone())),
                    None => Err(ApiError::not_found(&rt, name)),
                })
                .await?;
            Ok(obj_resp(
                if w.created { 201 } else { 200 },
                &t.rt,
                view,
                &fmt,
                &w.body,
                &w.warnings,
            ))
        }
        "patch" => {
            let name = name.ok_or_else(|| {
                ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                )
            })?;
            let fmt = negotiate(req)?;
            patch_object(sh, &rt, &t.rt, view, ns, name, part, req, &fmt).await
        }
        "delete" => {
            let name = name.expect("delete has a name");
            let fmt = negotiate(req)?;
            let body: Option<Value> = if req.body.is_empty() {
                None
            } else {
                serde_json::from_slice(&req.body).ok()
            };
            let d = delete_opts(req, body.as_ref())?;
            match sh.delete(&rt, ns, name, &d).await? {
                Deleted::Pending(b) => Ok(obj_resp(200, &t.rt, view, &fmt, &b, &[])),
                Deleted::Gone(b) => {
                    if rt.crd.is_some() || rt.builtin == Builtin::Pod {
                        Ok(obj_resp(200, &t.rt, view, &fmt, &b, &[]))
                    } else {
                        let v = b.value();
                        let mut details =
                            json!({"name": name, "kind": t.rt.plural, "uid": v["metadata"]["uid"]});
                        if !rt.group.is_empty() {
                            details["group"] = json!(t.rt.group);
                        }
                        Ok(json_resp(
                            200,
                            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
                        ))
                    }
                }
            }
        }
        "deletecollection" => {
            let body: Option<Value> = if req.body.is_empty() {
                None
            } else {
                serde_json::from_slice(&req.body).ok()
            };
            let d = delete_opts(req, body.as_ref())?;
            let sel = selectors(req, &t.rt)?;
            let coll = sh.store.collection(&rt.storage);
            let page = coll.list(&sh.store, ns, None, None, false, |m| sel.matches(m));
            let mut items = Vec::new();
            for s in page.items {
                let ins = (!s.meta.ns.is_empty()).then_some(&*s.meta.ns);
                match sh.delete(&rt, ins, &s.meta.name, &d).await {
                    Ok(Deleted::Gone(b) | Deleted::Pending(b)) => items.push(view.out(b.value())),
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(json_resp(
                200,
                &json!({
                    "kind": format!("{}List", t.rt.kind),
                    "apiVersion": t.rt.api_version(),
                    "metadata": {"resourceVersion": sh.store.current_rv().to_string()},
                    "items": items,
                }),
            ))
        }
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    }
}

fn delete_opts(req: &Req, body: Option<&Value>) -> Result<DeleteOpts, ApiError> {
    let user = Some(req.user.clone());
    let empty = Value::Null;
    let b = body.unwrap_or(&empty);
    let grace = match req.q("gracePeriodSeconds") {
        Some(g) => Some(
            g.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: {g}")))?,
        ),
        None => b["gracePeriodSeconds"].as_i64(),
    };
    let mut propagation = req
        .q("propagationPolicy")
        .map(str::to_string)
        .or_else(|| b["propagationPolicy"].as_str().map(str::to_string));
    let orphan = req
        .q("orphanDependents")
        .map(|o| o == "true")
        .or_else(|| b["orphanDependents"].as_bool());
    if propagation.is_none() && orphan == Some(true) {
        propagation = Some("Orphan".into());
    }
    if let Some(p) = &propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::bad_request(format!(
            "propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
        )));
    }
    let dry = req.q("dryRun") == Some("All")
        || b["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "All"));
    Ok(DeleteOpts {
        grace,
        propagation,
        precondition_uid: b["preconditions"]["uid"].as_str().map(str::to_string),
        precondition_rv: b["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
        dry_run: dry,
        user,
    })
}

#[allow(clippy::too_many_arguments)]
async fn patch_object(
    sh: &Shared,
    rt: &ResourceType,
    served: &ResourceType,
    view: View,
    ns: Option<&str>,
    name: &str,
    part: Part,
    req: &Req,
    fmt: &Format,
) -> Result<Response, ApiError> {
    let mut opts = write_opts(req)?;
    let ct = req
        .content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let raw_patch: Value = if ct == "application/apply-patch+yaml" {
        // JSON is YAML: clients (kube-rs, client-go) send apply configurations as JSON, which
        // the JSON parser reads many times faster; anything else goes to the YAML parser.
        let json = req
            .body
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'{');
        match json
            .then(|| serde_json::from_slice::<Value>(&req.body).ok())
            .flatten()
        {
            Some(v) => v,
            None => serde_yaml::from_slice(&req.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?,
        }
    } else {
        serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
    };
    let missing = || ApiError::not_found(rt, name);
    let w = match ct.as_str() {
        "application/merge-patch+json"
        | "application/json-patch+json"
        | "application/strategic-merge-patch+json" => {
            if ct == "application/strategic-merge-patch+json" && !served.accepts_strategic_merge() {
                return Err(ApiError::unsupported_media_type(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                ));
            }
            sh.update(rt, ns, name, part, &opts, &mut |cur| {
                let mut doc = view.out(cur.cloned().ok_or_else(missing)?);
                let res = match ct.as_str() {
                    "application/merge-patch+json" => {
                        if !raw_patch.is_object() {
                            return Err(ApiError::bad_request("merge patch must be a JSON object"));
                        }
                        patch::merge_patch(&mut doc, &raw_patch);
                        Ok(())
                    }
                    "application/json-patch+json" => patch::json_patch(&mut doc, &raw_patch),
                    _ => patch::strategic_merge_patch(&mut doc, &raw_patch, &rt.kind),
                };
                res.map_err(|e| ApiError::new(422, "Invalid", e))?;
                Ok(Mutation::Update(view.inp(doc)))
            })
            .await?
        }
        "application/apply-patch+yaml" => {
            let manager = opts
                .field_manager
                .clone()
                .filter(|m| !m.is_empty())
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "PATCH /apply: fieldManager is required for apply requests",
                    )
                })?;
            opts.apply = true;
            let mut cfg = view.inp(raw_patch);
            if cfg["apiVersion"].as_str().unwrap_or("").is_empty()
                || cfg["kind"].as_str().unwrap_or("").is_empty()
            {
                return Err(ApiError::bad_request(
                    "apiVersion and kind must be set in the applied configuration",
                ));
            }
            let cfg_name = cfg["metadata"]["name"].as_str().unwrap_or("");
            if cfg_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({cfg_name}) does not match the name on the URL ({name})"
                )));
            }
            if rt.status
                && let Some(m) = cfg.as_object_mut()
            {
                match part {
                    Part::Main => {
                        m.remove("status");
                    }
                    Part::Status => m.retain(|k, _| {
                        matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")
                    }),
                }
            }
            let schema = rt.crd.as_ref().and_then(|c| c.schema.clone());
            let api_version = rt.api_version();
            let now = now();
            let force = opts.force;
            sh.update(rt, ns, name, part, &opts, &mut |cur| {
                if let Some(rv) = cfg["metadata"]["resourceVersion"]
                    .as_str()
                    .filter(|r| !r.is_empty())
                    && cur.is_some_and(|c| c["metadata"]["resourceVersion"].as_str() != Some(rv))
                {
                    return Err(ApiError::conflict(rt, name));
                }
                if cur.is_none() && part == Part::Status {
                    return Err(missing());
                }
                let a = Apply {
                    manager: &manager,
                    force,
                    subresource: (part == Part::Status).then_some("status"),
                    api_version: &api_version,
                    now: &now,
                    sem: Semantics {
                        kind: &rt.kind,
                        schema: schema.as_deref(),
                    },
                };
                let out = a.run(cur, &cfg).map_err(|c| {
                    let mut e = ApiError::conflict(rt, name);
                    e.message = c.message(&api_version);
                    e
                })?;
                Ok(match cur {
                    None => Mutation::Create(out),
                    Some(_) => Mutation::Update(out),
                })
            })
            .await?
        }
        _ => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{}",
                if served.accepts_strategic_merge() {
                    ", application/strategic-merge-patch+json"
                } else {
                    ""
                }
            )));
        }
    };
    Ok(obj_resp(
        if w.created { 201 } else { 200 },
        served,
        view,
        fmt,
        &w.body,
        &w.warnings,
    ))
}

fn pod_log(
    sh: &Shared,
    rt: &ResourceType,
    ns: Option<&str>,
    name: &str,
    req: &Req,
) -> Result<Response, ApiError> {
    let pod = sh.get(rt, ns, name)?.value();
    let names = |key: &str| -> Vec<String> {
        pod["spec"][key]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let containers = names("containers");
    let init_containers = names("initContainers");
    let container = match req.q("container") {
        Some(c) => c.to_string(),
        None if containers.len() == 1 => containers[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            )));
        }
    };
    if !containers.contains(&container) && !init_containers.contains(&container) {
        return Err(ApiError::bad_request(format!(
            "container {container} is not valid for pod {name}"
        )));
    }
    let text = sh.logs.read(ns.unwrap_or(""), name, &container);
    let text = match text {
        Some(t) => t,
        None => match pod["status"]["phase"].as_str() {
            Some("Running" | "Succeeded" | "Failed") => String::new(),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
                )));
            }
        },
    };
    let text = match req.q("tailLines").and_then(|t| t.parse::<usize>().ok()) {
        Some(n) => {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            let mut s = lines[start..].join("\n");
            if !s.is_empty() {
                s.push('\n');
            }
            s
        }
        None => text,
    };
    Ok(response(200, "text/plain", text, &[]))
}
