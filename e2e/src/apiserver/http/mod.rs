//! The HTTP face: Kubernetes REST paths, content negotiation (objects, Tables,
//! PartialObjectMetadata, aggregated discovery), and the verbs mapped onto [`super::ops`].

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body as HttpBody;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

mod format;
mod list;
mod resource;
mod watch;
use super::discovery;
use super::error::ApiError;
use super::openapi;
use super::ops::Shared;
use super::resources::{Catalog, ResourceType};
use resource::resource;

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
