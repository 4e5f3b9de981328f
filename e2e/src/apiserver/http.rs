//! The HTTP face: Kubernetes REST paths, content negotiation (objects, Tables,
//! PartialObjectMetadata, aggregated discovery), and the verbs mapped onto [`super::ops`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body as HttpBody;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};

use super::apply::{Apply, Semantics};
use super::builtin;
use super::discovery;
use super::error::ApiError;
use super::openapi;
use super::ops::{
    Body, DeleteOpts, Deleted, FieldValidation, Mutation, Part, Shared, WriteOpts, now,
};
use super::patch;
use super::resources::{Builtin, Catalog, ResourceType};
use super::selectors::{FieldSelector, LabelSelector, Selectors};
use super::store::{EventType, Key, Meta, Since, watch_frame};
use super::table;

/// The router serving everything.
pub fn router(sh: Arc<Shared>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(sh)
}

struct Req {
    /// Who sent it.
    user: super::auth::UserInfo,
    method: Method,
    path: String,
    query: HashMap<String, String>,
    accept: String,
    content_type: String,
    body: Bytes,
}

impl Req {
    fn q(&self, k: &str) -> Option<&str> {
        self.query.get(k).map(String::as_str)
    }
    fn flag(&self, k: &str) -> bool {
        matches!(self.q(k), Some("true" | "1" | "True"))
    }
}

fn response(
    code: u16,
    content_type: &str,
    body: impl Into<HttpBody>,
    warnings: &[String],
) -> Response {
    let mut r = Response::new(body.into());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(ct) = HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    for w in warnings {
        let v = format!("299 - {}", serde_json::to_string(w).unwrap_or_default());
        if let Ok(h) = HeaderValue::from_str(&v) {
            r.headers_mut().append(header::WARNING, h);
        }
    }
    r
}

fn json_resp(code: u16, v: &Value) -> Response {
    response(
        code,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
        &[],
    )
}

fn err_resp(e: &ApiError) -> Response {
    let mut r = json_resp(e.code, &e.status());
    if e.code == 429 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

async fn handle(State(sh): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => {
            return err_resp(&ApiError::bad_request(format!(
                "reading the request body: {e}"
            )));
        }
    };
    let query = parts
        .uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let hdr = |h: header::HeaderName| {
        parts
            .headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let user = match sh.tokens.authenticate(&parts.headers) {
        Ok(u) => u,
        Err(e) => return err_resp(&e),
    };
    let req = Req {
        user,
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
        query,
        accept: hdr(header::ACCEPT),
        content_type: hdr(header::CONTENT_TYPE),
        body,
    };
    let resp = dispatch(&sh, &req).await;
    tracing::debug!(method = %req.method, path = %req.path, query = ?req.query, status = resp.status().as_u16(), "apiserver request");
    resp
}

async fn dispatch(sh: &Arc<Shared>, req: &Req) -> Response {
    let segs: Vec<&str> = req
        .path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let cat = sh.registry.catalog();
    let get = req.method == Method::GET;
    match segs.as_slice() {
        ["version"] if get => return json_resp(200, &discovery::version()),
        [
            "apis",
            "authentication.k8s.io",
            v @ ("v1" | "v1beta1"),
            "selfsubjectreviews",
        ] if req.method == Method::POST => {
            return json_resp(201, &super::auth::self_subject_review(&req.user, v));
        }
        ["healthz" | "readyz" | "livez", ..] if get => {
            return response(200, "text/plain", "ok", &[]);
        }
        ["openapi", "v2"] if get => {
            return if req.accept.contains("protobuf") {
                response(
                    200,
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                    openapi::v2_protobuf(),
                    &[],
                )
            } else {
                json_resp(200, &openapi::v2_json())
            };
        }
        ["openapi", "v3"] if get => return json_resp(200, &openapi::v3_root(&cat)),
        ["openapi", "v3", "api", v] if get => {
            return match openapi::v3_doc(&cat, "", v) {
                Some(d) => json_resp(200, &d),
                None => err_resp(&ApiError::not_found_path()),
            };
        }
        ["openapi", "v3", "apis", g, v] if get => {
            return match openapi::v3_doc(&cat, g, v) {
                Some(d) => json_resp(200, &d),
                None => err_resp(&ApiError::not_found_path()),
            };
        }
        ["api"] if get => {
            return discovery_resp(req, &cat, true, || discovery::api_versions(&sh.addr));
        }
        ["apis"] if get => return discovery_resp(req, &cat, false, || discovery::api_groups(&cat)),
        ["api", v] if get => {
            return match discovery::resource_list(&cat, "", v) {
                Some(d) => json_resp(200, &d),
                None => err_resp(&ApiError::not_found_path()),
            };
        }
        ["apis", g] if get => {
            return match discovery::api_group(&cat, g) {
                Some(d) => json_resp(200, &d),
                None => err_resp(&ApiError::not_found_path()),
            };
        }
        ["apis", g, v] if get => {
            return match discovery::resource_list(&cat, g, v) {
                Some(d) => json_resp(200, &d),
                None => err_resp(&ApiError::not_found_path()),
            };
        }
        _ => {}
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return err_resp(&ApiError::not_found_path()),
    };
    let Some(target) = parse_target(&cat, group, version, rest) else {
        return err_resp(&ApiError::not_found_path());
    };
    let verb = verb_of(req, &target);
    if let Some(e) = sh.faults.gate(verb, &target.rt.plural).await {
        return err_resp(&e);
    }
    match resource(sh, &cat, req, &target, verb).await {
        Ok(r) => r,
        Err(e) => err_resp(&e),
    }
}

fn discovery_resp(
    req: &Req,
    cat: &Catalog,
    core: bool,
    legacy: impl FnOnce() -> Value,
) -> Response {
    // Serve the first media type of the Accept list we can: aggregated v2, v2beta1 or legacy.
    for media in req.accept.split(',') {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        if has("g=apidiscovery.k8s.io") && has("as=APIGroupDiscoveryList") {
            for ver in ["v2", "v2beta1"] {
                if has(&format!("v={ver}")) {
                    let doc =
                        discovery::aggregated(cat, core, &format!("apidiscovery.k8s.io/{ver}"));
                    let ct = format!(
                        "application/json;g=apidiscovery.k8s.io;v={ver};as=APIGroupDiscoveryList"
                    );
                    return response(200, &ct, serde_json::to_vec(&doc).unwrap_or_default(), &[]);
                }
            }
        }
    }
    json_resp(200, &legacy())
}

struct Target {
    rt: Arc<ResourceType>,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    legacy_watch: bool,
}

fn parse_target(cat: &Catalog, group: &str, version: &str, segs: &[&str]) -> Option<Target> {
    let (legacy_watch, segs) = match segs.split_first() {
        Some((&"watch", rest)) => (true, rest),
        _ => (false, segs),
    };
    let (ns, rest) = if segs.len() >= 3
        && segs[0] == "namespaces"
        && cat
            .get(group, version, segs[2])
            .is_some_and(|t| t.namespaced)
    {
        (Some(segs[1].to_string()), &segs[2..])
    } else {
        (None, segs)
    };
    let rt = cat.get(group, version, rest.first()?)?;
    if rest.len() > 3 {
        return None;
    }
    let name = rest.get(1).map(|s| s.to_string());
    let sub = rest.get(2).map(|s| s.to_string());
    if rt.namespaced && ns.is_none() && name.is_some() {
        return None;
    }
    if let Some(s) = &sub
        && !((s == "status" && rt.status) || rt.extra_subresources.contains(&s.as_str()))
    {
        return None;
    }
    Some(Target {
        rt,
        ns,
        name,
        sub,
        legacy_watch,
    })
}

fn verb_of(req: &Req, t: &Target) -> &'static str {
    match (&req.method, t.name.is_some()) {
        (&Method::GET, _) if t.legacy_watch || req.flag("watch") => "watch",
        (&Method::GET, true) => "get",
        (&Method::GET, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "other",
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Format {
    Object,
    Table(String, table::Include),
    Partial,
}

fn negotiate(req: &Req) -> Result<Format, ApiError> {
    let accept = req.accept.as_str();
    // What each Table row carries as `object` (`includeObject`): metadata unless asked.
    let include = match req.q("includeObject") {
        Some("None") => table::Include::None,
        Some("Object") => table::Include::Object,
        _ => table::Include::Metadata,
    };
    for a in accept.split(',') {
        let a = a.trim();
        if a.contains("as=Table") && a.contains("g=meta.k8s.io") {
            let v = if a.contains("v=v1beta1") {
                "meta.k8s.io/v1beta1"
            } else {
                "meta.k8s.io/v1"
            };
            return Ok(Format::Table(v.into(), include));
        }
        if a.contains("as=PartialObjectMetadata") {
            return Ok(Format::Partial);
        }
        if a.is_empty()
            || a.starts_with("application/json")
            || a.starts_with("*/*")
            || a.starts_with("application/yaml")
            || a.starts_with("application/*")
        {
            return Ok(Format::Object);
        }
    }
    if accept.trim().is_empty() {
        return Ok(Format::Object);
    }
    Err(ApiError::new(
        406,
        "NotAcceptable",
        format!(
            "only the following media types are accepted: application/json, application/yaml (asked: {accept})"
        ),
    ))
}

#[derive(Clone, Copy, PartialEq)]
enum View {
    Plain,
    EventV1,
}

impl View {
    fn out(self, v: Value) -> Value {
        match self {
            View::Plain => v,
            View::EventV1 => builtin::event_to_v1(&v),
        }
    }
    fn inp(self, v: Value) -> Value {
        match self {
            View::Plain => v,
            View::EventV1 => builtin::event_from_v1(&v),
        }
    }
}

fn parse_body(req: &Req) -> Result<Value, ApiError> {
    if req.content_type.contains("protobuf") {
        return super::proto::decode(&req.body).map_err(|e| {
            ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})"
            ))
        });
    }
    if req.body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    let v: Value = if req.content_type.contains("yaml") {
        serde_yaml::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(&req.body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    Ok(v)
}

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

/// The response body: a stored object as it is stored (shared, not copied), anything else
/// encoded.
fn render(rt: &ResourceType, view: View, fmt: &Format, body: &Body) -> Bytes {
    match (fmt, view, body) {
        (Format::Object, View::Plain, Body::Stored(s)) => s.bytes.clone(),
        _ => {
            let v = view.out(body.value());
            let out = match fmt {
                Format::Object => v,
                Format::Partial => table::partial(&v),
                Format::Table(av, include) => {
                    let rv = v["metadata"]["resourceVersion"].clone();
                    table::table(
                        rt,
                        std::slice::from_ref(&v),
                        json!({"resourceVersion": rv}),
                        true,
                        av,
                        *include,
                    )
                }
            };
            Bytes::from(serde_json::to_vec(&out).unwrap_or_default())
        }
    }
}

fn obj_resp(
    code: u16,
    rt: &ResourceType,
    view: View,
    fmt: &Format,
    body: &Body,
    warnings: &[String],
) -> Response {
    response(
        code,
        "application/json",
        render(rt, view, fmt, body),
        warnings,
    )
}

async fn resource(
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
                            &[super::error::FieldError::required("target.name", "")],
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

fn selectors(req: &Req, served: &ResourceType) -> Result<Selectors, ApiError> {
    let labels = LabelSelector::parse(req.q("labelSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let raw = req.q("fieldSelector").unwrap_or("");
    let fields = if served.builtin == Builtin::EventV1 {
        FieldSelector::parse(raw, builtin::selectable_fields(served), false)
            .map_err(ApiError::bad_request)?;
        let translated: Vec<String> = raw
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|p| {
                let i = p.find(['=', '!']).unwrap_or(p.len());
                format!("{}{}", builtin::event_v1_field(&p[..i]), &p[i..])
            })
            .collect();
        let core = super::resources::ResourceType {
            builtin: Builtin::Event,
            ..clone_rt(served)
        };
        FieldSelector::parse(
            &translated.join(","),
            builtin::selectable_fields(&core),
            false,
        )
        .map_err(ApiError::bad_request)?
    } else {
        FieldSelector::parse(
            raw,
            builtin::selectable_fields(served),
            served.crd.is_some(),
        )
        .map_err(ApiError::bad_request)?
    };
    Ok(Selectors { labels, fields })
}

fn clone_rt(rt: &ResourceType) -> ResourceType {
    ResourceType {
        group: rt.group.clone(),
        version: rt.version.clone(),
        plural: rt.plural.clone(),
        singular: rt.singular.clone(),
        kind: rt.kind.clone(),
        namespaced: rt.namespaced,
        short_names: rt.short_names.clone(),
        categories: rt.categories.clone(),
        status: rt.status,
        generation: rt.generation,
        unconditional_update: rt.unconditional_update,
        create_on_update: rt.create_on_update,
        extra_subresources: rt.extra_subresources,
        builtin: rt.builtin,
        storage: rt.storage.clone(),
        crd: rt.crd.clone(),
    }
}

fn encode_continue(rv: u64, key: &Key) -> String {
    let start = if key.ns.is_empty() {
        key.name.clone()
    } else {
        format!("{}/{}", key.ns, key.name)
    };
    let doc = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{start}\u{0}")});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(doc.to_string())
}

fn decode_continue(tok: &str) -> Result<(u64, Key), ApiError> {
    let bad =
        || ApiError::bad_request("continue key is not valid: the continue token is malformed");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(tok.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let start = v["start"]
        .as_str()
        .ok_or_else(bad)?
        .trim_end_matches('\u{0}');
    let key = match start.split_once('/') {
        Some((ns, name)) => Key::new(ns, name),
        None => Key::new("", start),
    };
    Ok((rv, key))
}

fn list(
    sh: &Shared,
    rt: &ResourceType,
    served: &ResourceType,
    view: View,
    ns: Option<&str>,
    req: &Req,
) -> Result<Response, ApiError> {
    let fmt = negotiate(req)?;
    let sel = selectors(req, served)?;
    let limit = match req.q("limit") {
        Some(l) if !l.is_empty() => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?,
        )
        .filter(|l| *l > 0),
        _ => None,
    };
    let coll = sh.store.collection(&rt.storage);
    let (after, token_rv) = match req.q("continue") {
        Some(c) if !c.is_empty() => {
            let (rv, k) = decode_continue(c)?;
            (Some(k), Some(rv))
        }
        _ => (None, None),
    };
    let scope_ns = if rt.namespaced { ns } else { None };
    let page = coll.list(
        &sh.store,
        scope_ns,
        after.as_ref(),
        limit,
        sel.is_empty(),
        |m: &Meta| sel.matches(m),
    );
    if req.q("resourceVersionMatch") == Some("Exact")
        && let Some(want) = req.q("resourceVersion").and_then(|r| r.parse::<u64>().ok())
    {
        let changed_since = match coll.since(want, 1) {
            Since::Events(evs, _, _) => !evs.is_empty(),
            Since::Expired(_) => true,
        };
        if changed_since {
            return Err(ApiError::expired(format!(
                "too old resource version: {want} ({})",
                page.rv
            )));
        }
    }
    let rv = token_rv.unwrap_or(page.rv);
    let mut lm = json!({"resourceVersion": rv.to_string()});
    if let Some(k) = &page.next {
        lm["continue"] = json!(encode_continue(rv, k));
        if let Some(r) = page.remaining {
            lm["remainingItemCount"] = json!(r);
        }
    }
    let kind = format!("{}List", served.kind);
    let bytes = match (&fmt, view) {
        (Format::Object, View::Plain) => {
            let head = json!({"kind": kind, "apiVersion": served.api_version(), "metadata": lm})
                .to_string();
            let mut out = Vec::with_capacity(
                head.len() + page.items.iter().map(|s| s.bytes.len() + 1).sum::<usize>() + 16,
            );
            out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
            out.extend_from_slice(b",\"items\":[");
            for (i, s) in page.items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&s.bytes);
            }
            out.extend_from_slice(b"]}");
            out
        }
        _ => {
            let objs: Vec<Value> = page.items.iter().map(|s| view.out(s.value())).collect();
            let v = match &fmt {
                Format::Object => {
                    json!({"kind": kind, "apiVersion": served.api_version(), "metadata": lm, "items": objs})
                }
                Format::Partial => {
                    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": lm,
                    "items": objs.iter().map(table::partial).collect::<Vec<_>>()})
                }
                Format::Table(av, include) => table::table(served, &objs, lm, true, av, *include),
            };
            serde_json::to_vec(&v).unwrap_or_default()
        }
    };
    Ok(response(200, "application/json", bytes, &[]))
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

fn status_frame(e: &ApiError) -> Bytes {
    watch_frame("ERROR", e.status().to_string().as_bytes())
}

struct WatchCtx {
    served: Arc<ResourceType>,
    view: View,
    ns: Option<String>,
    sel: Selectors,
    fmt: Format,
    sent_columns: bool,
}

impl WatchCtx {
    fn in_scope(&self, m: &Meta) -> bool {
        self.ns.as_deref().is_none_or(|n| &*m.ns == n) && self.sel.matches(m)
    }

    fn frame(&mut self, typ: &str, obj: &[u8], natural: Option<&super::store::Event>) -> Bytes {
        if let (Format::Object, View::Plain, Some(ev)) = (&self.fmt, self.view, natural)
            && ev.typ.as_str() == typ
        {
            return ev.frame();
        }
        if let (Format::Object, View::Plain) = (&self.fmt, self.view) {
            return watch_frame(typ, obj);
        }
        let v: Value = serde_json::from_slice(obj).unwrap_or(Value::Null);
        let v = self.view.out(v);
        let out = match &self.fmt {
            Format::Object => v,
            Format::Partial => table::partial(&v),
            Format::Table(av, include) => {
                let with = !self.sent_columns;
                self.sent_columns = true;
                let rv = v["metadata"]["resourceVersion"].clone();
                table::table(
                    &self.served,
                    std::slice::from_ref(&v),
                    json!({"resourceVersion": rv}),
                    with,
                    av,
                    *include,
                )
            }
        };
        watch_frame(typ, out.to_string().as_bytes())
    }

    fn event(&mut self, ev: &super::store::Event) -> Option<Bytes> {
        let cur = ev.typ != EventType::Deleted && self.in_scope(&ev.obj.meta);
        let old = match ev.typ {
            EventType::Added => false,
            EventType::Modified => ev.prev.as_ref().is_some_and(|p| self.in_scope(&p.meta)),
            EventType::Deleted => self.in_scope(&ev.obj.meta),
        };
        match (cur, old) {
            (true, false) => Some(self.frame("ADDED", &ev.obj.bytes, Some(ev))),
            (true, true) => Some(self.frame("MODIFIED", &ev.obj.bytes, Some(ev))),
            (false, true) if ev.typ == EventType::Deleted => {
                Some(self.frame("DELETED", &ev.obj.bytes, Some(ev)))
            }
            (false, true) => {
                // Stopped matching: DELETED with the previous state at this event's version.
                let prev = ev.prev.as_ref()?;
                let mut v: Value = serde_json::from_slice(&prev.bytes).ok()?;
                v["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                let bytes = serde_json::to_vec(&v).ok()?;
                Some(self.frame("DELETED", &bytes, None))
            }
            (false, false) => None,
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let (kind, av) = (self.served.kind.clone(), self.served.api_version());
        let mut md = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        watch_frame(
            "BOOKMARK",
            json!({"kind": kind, "apiVersion": av, "metadata": md})
                .to_string()
                .as_bytes(),
        )
    }
}

/// Most bytes of watch events sent as one chunk.
const CHUNK: usize = 64 * 1024;

struct WatchState {
    sh: Arc<Shared>,
    coll: Arc<super::store::Collection>,
    ctx: WatchCtx,
    notify: tokio::sync::watch::Receiver<u64>,
    drops: tokio::sync::watch::Receiver<u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    tick: tokio::time::Interval,
    last: u64,
    initial: std::collections::VecDeque<super::store::Stored>,
    initial_bookmark: bool,
    bookmarks: bool,
    done: bool,
}

fn join(parts: Vec<Bytes>) -> Bytes {
    if parts.len() == 1 {
        return parts.into_iter().next().expect("one part");
    }
    let mut v = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
    for p in parts {
        v.extend_from_slice(&p);
    }
    Bytes::from(v)
}

impl WatchState {
    /// The next chunk of the stream: every event available now (up to [`CHUNK`] bytes), or
    /// the next one to come; `None` ends the watch.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut parts: Vec<Bytes> = Vec::new();
        let mut size = 0;
        while let Some(s) = self.initial.pop_front() {
            let f = self.ctx.frame("ADDED", &s.bytes, None);
            size += f.len();
            parts.push(f);
            if size >= CHUNK {
                return Some(join(parts));
            }
        }
        if self.initial_bookmark {
            self.initial_bookmark = false;
            parts.push(self.ctx.bookmark(self.last, true));
        }
        loop {
            self.notify.borrow_and_update();
            let (ns, sel) = (&self.ctx.ns, &self.ctx.sel);
            let scope = |m: &Meta| ns.as_deref().is_none_or(|n| &*m.ns == n) && sel.matches(m);
            let relevant = |e: &super::store::Event| {
                scope(&e.obj.meta) || e.prev.as_ref().is_some_and(|p| scope(&p.meta))
            };
            match self.coll.since_matching(self.last, 256, relevant) {
                Since::Expired(oldest) => {
                    let e = ApiError::expired(format!(
                        "too old resource version: {} ({oldest})",
                        self.last
                    ));
                    parts.push(status_frame(&e));
                    self.done = true;
                    return Some(join(parts));
                }
                Since::Events(evs, read_to, more) => {
                    let full = more;
                    for ev in &evs {
                        if let Some(f) = self.ctx.event(ev) {
                            size += f.len();
                            parts.push(f);
                            if self.sh.faults.drop_watch_now() {
                                self.done = true;
                                return Some(join(parts));
                            }
                        }
                    }
                    self.last = read_to;
                    if full && size < CHUNK {
                        continue;
                    }
                }
            }
            if !parts.is_empty() {
                return Some(join(parts));
            }
            tokio::select! {
                r = self.notify.changed() => if r.is_err() { return None },
                _ = &mut self.deadline => return None,
                _ = self.tick.tick() => {
                    if self.bookmarks {
                        return Some(self.ctx.bookmark(self.last, false));
                    }
                }
                _ = self.drops.changed() => return None,
                _ = self.shutdown.changed() => return None,
            }
        }
    }
}

fn watch(
    sh: &Arc<Shared>,
    rt: &ResourceType,
    served: &Arc<ResourceType>,
    view: View,
    ns: Option<&str>,
    name: Option<&str>,
    req: &Req,
) -> Result<Response, ApiError> {
    let fmt = negotiate(req)?;
    let mut sel = selectors(req, served)?;
    if let Some(n) = name {
        let extra = FieldSelector::parse(&format!("metadata.name={n}"), &[], false)
            .map_err(ApiError::bad_request)?;
        sel.fields = if sel.fields.is_empty() {
            extra
        } else {
            let raw = format!("{},metadata.name={n}", req.q("fieldSelector").unwrap_or(""));
            FieldSelector::parse(
                &raw,
                builtin::selectable_fields(served),
                served.crd.is_some(),
            )
            .map_err(ApiError::bad_request)?
        };
    }
    let send_initial = req.flag("sendInitialEvents");
    let bookmarks = req.flag("allowWatchBookmarks");
    if send_initial && req.q("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(ApiError::invalid(
            served,
            "",
            &[super::error::FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )],
        ));
    }
    let rv_param = req.q("resourceVersion").unwrap_or("");
    let timeout = match req.q("timeoutSeconds") {
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t}")))?,
        ),
        None => Duration::from_secs(1800),
    };
    let coll = sh.store.collection(&rt.storage);
    let scope_ns = if rt.namespaced {
        ns.map(str::to_string)
    } else {
        None
    };
    let ctx = WatchCtx {
        served: served.clone(),
        view,
        ns: scope_ns.clone(),
        sel,
        fmt,
        sent_columns: false,
    };
    let (initial, start_rv) = if send_initial || rv_param.is_empty() || rv_param == "0" {
        let page = coll.list(&sh.store, scope_ns.as_deref(), None, None, false, |m| {
            ctx.sel.matches(m)
        });
        (page.items, page.rv)
    } else {
        let rv = rv_param
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv_param}")))?;
        (Vec::new(), rv)
    };
    let mut drops = sh.faults.drops();
    drops.borrow_and_update();
    let notify = match ctx.sel.fields.indexed(super::store::INDEXED_FIELDS) {
        Some((f, v)) => coll.subscribe_keyed(f, v),
        None => coll.subscribe(),
    };
    let st = WatchState {
        sh: sh.clone(),
        notify,
        coll,
        ctx,
        drops,
        shutdown: sh.shutdown.clone(),
        deadline: Box::pin(tokio::time::sleep(timeout)),
        tick: {
            let mut t = tokio::time::interval_at(
                tokio::time::Instant::now() + sh.bookmark_interval,
                sh.bookmark_interval,
            );
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        },
        last: start_rv,
        initial: initial.into(),
        initial_bookmark: send_initial && bookmarks,
        bookmarks,
        done: false,
    };
    // The stream runs in the connection's own task: no hop through a channel per event.
    let stream = futures::stream::unfold(st, |mut st| async move {
        let chunk = st.next_chunk().await?;
        Some((Ok::<Bytes, Infallible>(chunk), st))
    });
    let mut r = Response::new(HttpBody::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}
