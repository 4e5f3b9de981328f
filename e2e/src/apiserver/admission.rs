//! Dynamic admission: the MutatingWebhookConfigurations and ValidatingWebhookConfigurations
//! stored in the double are called as kube-apiserver calls them (the `webhook/mutating` and
//! `webhook/validating` admission plugins).
//!
//! - **When.** On CREATE, UPDATE (every attempt of a retried update) and DELETE made through the
//!   REST API (the double's own garbage collector, like kube-controller-manager's, is not
//!   checked). Mutating webhooks run first, in the order of their configurations' names and
//!   then as listed, each seeing the previous one's patch; then schema validation and CEL; then
//!   validating webhooks. The configuration objects themselves are never sent to webhooks.
//! - **Matching.** `rules` (operations, apiGroups, apiVersions, `resources` with `*`, `res/sub`,
//!   `*/sub`, `*/*`, and `scope`), `namespaceSelector` (the namespace's labels; a Namespace's
//!   own labels; cluster-scoped objects always match) and `objectSelector` (the new or the old
//!   object's labels). `matchPolicy` is moot (one version per resource). `matchConditions` are
//!   not evaluated: a webhook with any is called as if they held.
//! - **Calling.** An `admission.k8s.io/v1` AdmissionReview (`admissionReviewVersions` must
//!   include `v1`) with the request's `userInfo`, kinds, resources, operation, objects,
//!   `dryRun` and options, POSTed over HTTPS with `?timeout=Ns`. `clientConfig.url` is used as
//!   given; a `service` is resolved through its Endpoints (as kube-apiserver with
//!   `--enable-aggregator-routing`: the Service's port → its target port → an address of the
//!   Endpoints) and the certificate is verified against `caBundle` for the name
//!   `NAME.NAMESPACE.svc`.
//! - **Answers.** `allowed: false` refuses with `admission webhook "NAME" denied the request:
//!   MESSAGE` and the status code given (at least 400). A mutating webhook's JSONPatch is
//!   applied. `warnings` become `Warning` headers. A webhook that cannot be called, times out
//!   (`timeoutSeconds`, default 10) or answers badly is skipped under `failurePolicy: Ignore`
//!   and refuses the request under `Fail` (the default) with a 500 `failed calling webhook`.
//!   A dry-run request is refused by webhooks whose `sideEffects` is not `None` or
//!   `NoneOnDryRun`. `reinvocationPolicy` is not honoured (no webhook is called twice).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use super::auth::UserInfo;
use super::error::ApiError;
use super::ops::Shared;
use super::resources::{GroupResource, ResourceType};
use super::store::Key;

/// An admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// CREATE.
    Create,
    /// UPDATE.
    Update,
    /// DELETE.
    Delete,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
    fn options_kind(self) -> &'static str {
        match self {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
            Operation::Delete => "DeleteOptions",
        }
    }
}

/// One request to admit.
pub struct Attributes<'a> {
    /// The resource.
    pub rt: &'a ResourceType,
    /// Subresource (`status`), if any.
    pub sub: Option<&'a str>,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: &'a str,
    /// Object name.
    pub name: &'a str,
    /// The operation.
    pub op: Operation,
    /// Who asks.
    pub user: &'a UserInfo,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The old object (UPDATE, DELETE).
    pub old: Option<&'a Value>,
}

const MUTATING: (&str, &str) = (
    "admissionregistration.k8s.io",
    "mutatingwebhookconfigurations",
);
const VALIDATING: (&str, &str) = (
    "admissionregistration.k8s.io",
    "validatingwebhookconfigurations",
);

/// Whether requests on `rt` may be sent to webhooks at all (never the admission
/// configuration objects themselves, as in kube-apiserver).
fn admissible(rt: &ResourceType) -> bool {
    rt.group != "admissionregistration.k8s.io"
}

/// The webhooks of every configuration of one kind, in call order.
fn webhooks(sh: &Shared, which: (&str, &str)) -> Vec<Value> {
    let coll = sh.store.collection(&GroupResource::new(which.0, which.1));
    if coll.len() == 0 {
        return Vec::new();
    }
    let page = coll.list(&sh.store, None, None, None, false, |_| true);
    page.items
        .iter()
        .flat_map(|s| {
            s.value()["webhooks"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// Whether any webhook is configured (cheap: lets writes skip admission entirely).
pub fn any(sh: &Shared) -> bool {
    [MUTATING, VALIDATING]
        .iter()
        .any(|w| sh.store.collection(&GroupResource::new(w.0, w.1)).len() > 0)
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn rule_matches(rule: &Value, a: &Attributes<'_>) -> bool {
    let has = |list: &Value, want: &str| strs(list).iter().any(|x| *x == "*" || *x == want);
    if !has(&rule["operations"], a.op.as_str())
        || !has(&rule["apiGroups"], &a.rt.group)
        || !has(&rule["apiVersions"], &a.rt.version)
    {
        return false;
    }
    let sub = a.sub.unwrap_or("");
    let resource = strs(&rule["resources"]).iter().any(|r| {
        let (res, s) = r.split_once('/').unwrap_or((r, ""));
        (res == "*" || res == a.rt.plural) && (s == "*" || s == sub)
    });
    let scope = match rule["scope"].as_str().unwrap_or("*") {
        "Cluster" => !a.rt.namespaced,
        "Namespaced" => a.rt.namespaced,
        _ => true,
    };
    resource && scope
}

/// A `metav1.LabelSelector` against labels.
fn selector_matches(sel: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let ml = sel["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    let me = sel["matchExpressions"].as_array().is_none_or(|es| {
        es.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let values = strs(&e["values"]);
            match e["operator"].as_str().unwrap_or("") {
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                _ => false,
            }
        })
    });
    ml && me
}

fn selector_empty(sel: &Value) -> bool {
    sel["matchLabels"].as_object().is_none_or(|m| m.is_empty())
        && sel["matchExpressions"]
            .as_array()
            .is_none_or(|a| a.is_empty())
}

/// Whether webhook `w` is called for `a` with object `obj`.
fn webhook_matches(
    sh: &Shared,
    w: &Value,
    a: &Attributes<'_>,
    obj: Option<&Value>,
) -> Result<bool, ApiError> {
    let rules = w["rules"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if !rules.iter().any(|r| rule_matches(r, a)) {
        return Ok(false);
    }
    let ns_sel = &w["namespaceSelector"];
    if !selector_empty(ns_sel) {
        if a.rt.group.is_empty() && a.rt.plural == "namespaces" {
            let labels = obj.or(a.old).map(|o| &o["metadata"]["labels"]);
            if !labels.is_some_and(|l| selector_matches(ns_sel, l)) {
                return Ok(false);
            }
        } else if !a.namespace.is_empty() {
            let nss = sh.store.collection(&GroupResource::new("", "namespaces"));
            let Some(ns) = nss.get(&Key::new("", a.namespace)) else {
                return Err(ApiError::namespace_not_found(a.namespace));
            };
            if !selector_matches(ns_sel, &ns.value()["metadata"]["labels"]) {
                return Ok(false);
            }
        }
    }
    let obj_sel = &w["objectSelector"];
    if !selector_empty(obj_sel) {
        let m = |o: Option<&Value>| {
            o.is_some_and(|o| selector_matches(obj_sel, &o["metadata"]["labels"]))
        };
        if !(m(obj) || m(a.old)) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The AdmissionReview sent for `a`.
fn review(uid: &str, a: &Attributes<'_>, obj: Option<&Value>) -> Value {
    let rt = a.rt;
    let kind = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let resource = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let mut req = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": a.name,
        "operation": a.op.as_str(),
        "userInfo": a.user.to_json(),
        "object": obj.cloned().unwrap_or(Value::Null),
        "oldObject": a.old.cloned().unwrap_or(Value::Null),
        "dryRun": a.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": a.op.options_kind()},
    });
    if let Some(s) = a.sub {
        req["subResource"] = json!(s);
        req["requestSubResource"] = json!(s);
    }
    if !a.namespace.is_empty() {
        req["namespace"] = json!(a.namespace);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// Where to send a webhook's reviews: the address to connect to, the name its certificate
/// must carry, and the URL.
struct Target {
    addr: SocketAddr,
    server_name: String,
    url: String,
    path: String,
}

fn resolve(sh: &Shared, cc: &Value, timeout: u64) -> Result<Target, String> {
    if let Some(url) = cc["url"].as_str() {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| format!("webhook URL {url:?} is not https"))?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h, p.parse::<u16>().map_err(|e| e.to_string())?),
            None => (hostport, 443),
        };
        let ip = if host == "localhost" {
            "127.0.0.1"
        } else {
            host
        };
        let addr: SocketAddr = format!("{ip}:{port}")
            .parse()
            .map_err(|_| format!("dial tcp: lookup {host}: no such host"))?;
        return Ok(Target {
            addr,
            server_name: host.to_string(),
            url: format!("{url}?timeout={timeout}s"),
            path: format!("{path}?timeout={timeout}s"),
        });
    }
    let svc = &cc["service"];
    let ns = svc["namespace"].as_str().unwrap_or("");
    let name = svc["name"].as_str().unwrap_or("");
    let port = svc["port"].as_u64().unwrap_or(443);
    let path = svc["path"].as_str().unwrap_or("/");
    let url = format!("https://{name}.{ns}.svc:{port}{path}?timeout={timeout}s");
    let services = sh.store.collection(&GroupResource::new("", "services"));
    let Some(s) = services.get(&Key::new(ns, name)) else {
        return Err(format!("service \"{name}\" not found"));
    };
    let s = s.value();
    let sp = s["spec"]["ports"]
        .as_array()
        .and_then(|ps| {
            ps.iter()
                .find(|p| p["port"].as_u64() == Some(port))
                .cloned()
        })
        .ok_or_else(|| format!("no service port {port} found for service \"{name}\""))?;
    let port_name = sp["name"].as_str().unwrap_or("");
    let endpoints = sh.store.collection(&GroupResource::new("", "endpoints"));
    let ep = endpoints
        .get(&Key::new(ns, name))
        .map(|e| e.value())
        .ok_or_else(|| format!("endpoints \"{name}\" not found"))?;
    for subset in ep["subsets"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let Some(p) = subset["ports"].as_array().and_then(|ps| {
            ps.iter()
                .find(|p| p["name"].as_str().unwrap_or("") == port_name)
                .and_then(|p| p["port"].as_u64())
        }) else {
            continue;
        };
        if let Some(ip) = subset["addresses"]
            .as_array()
            .and_then(|a| a.first())
            .and_then(|a| a["ip"].as_str())
        {
            let addr = format!("{ip}:{p}")
                .parse()
                .map_err(|_| format!("bad endpoint address {ip}:{p}"))?;
            return Ok(Target {
                addr,
                server_name: format!("{name}.{ns}.svc"),
                url,
                path: format!("{path}?timeout={timeout}s"),
            });
        }
    }
    Err(format!("no endpoints available for service \"{name}\""))
}

fn tls_config(ca_bundle: &str) -> Result<Arc<rustls::ClientConfig>, String> {
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca_bundle.trim())
        .map_err(|e| format!("caBundle is not base64: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c = c.map_err(|e| format!("caBundle: {e}"))?;
        roots.add(c).map_err(|e| format!("caBundle: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// POSTs `body` to the webhook and returns its answer.
async fn call(t: &Target, ca_bundle: &str, body: Vec<u8>) -> Result<Vec<u8>, String> {
    let cfg = tls_config(ca_bundle)?;
    let server_name = ServerName::try_from(t.server_name.clone())
        .map_err(|e| format!("invalid server name {}: {e}", t.server_name))?;
    let tcp = tokio::net::TcpStream::connect(t.addr)
        .await
        .map_err(|e| format!("dial tcp {}: {e}", t.addr))?;
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("tls: failed to verify certificate: {e}"))?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = hyper::Request::post(&t.path)
        .header("host", t.server_name.as_str())
        .header("content-type", "application/json")
        .header("accept", "application/json, */*")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "the server responded with the status code {} but did not return more information",
            status.as_u16()
        ));
    }
    Ok(bytes.to_vec())
}

/// What one webhook said.
struct Answer {
    allowed: bool,
    status: Value,
    patch: Option<Value>,
    warnings: Vec<String>,
}

async fn ask(sh: &Shared, w: &Value, review: &Value, uid: &str) -> Result<Answer, String> {
    let versions = strs(&w["admissionReviewVersions"]);
    if !versions.contains(&"v1") {
        return Err(format!(
            "webhook does not accept v1 AdmissionReview (admissionReviewVersions: {versions:?})"
        ));
    }
    let timeout = w["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30);
    let cc = &w["clientConfig"];
    let target = resolve(sh, cc, timeout)?;
    let ca = cc["caBundle"].as_str().unwrap_or("");
    let body = serde_json::to_vec(review).map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(Duration::from_secs(timeout), call(&target, ca, body))
        .await
        .map_err(|_| format!("Post \"{}\": context deadline exceeded", target.url))?
        .map_err(|e| format!("Post \"{}\": {e}", target.url))?;
    let v: Value = serde_json::from_slice(&answer)
        .map_err(|e| format!("received invalid webhook response: {e}"))?;
    if v["apiVersion"] != "admission.k8s.io/v1" || v["kind"] != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            v["apiVersion"].as_str().unwrap_or(""),
            v["kind"].as_str().unwrap_or("")
        ));
    }
    let r = &v["response"];
    if r["uid"].as_str() != Some(uid) {
        return Err(format!(
            "expected response.uid=\"{uid}\", got \"{}\"",
            r["uid"].as_str().unwrap_or("")
        ));
    }
    // `patch` is a Go []byte: a base64 string, or (as Go's JSON decoder also takes it, and
    // kube-rs writes it) an array of byte values.
    let raw: Option<Vec<u8>> = match &r["patch"] {
        Value::Null => None,
        Value::String(p) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| format!("invalid patch: {e}"))?,
        ),
        Value::Array(a) => Some(
            a.iter()
                .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect::<Option<Vec<u8>>>()
                .ok_or("invalid patch: not bytes")?,
        ),
        other => return Err(format!("invalid patch: {other}")),
    };
    let patch = match (raw, r["patchType"].as_str()) {
        (None, _) => None,
        (Some(raw), Some("JSONPatch")) => {
            Some(serde_json::from_slice(&raw).map_err(|e| format!("invalid patch: {e}"))?)
        }
        (Some(_), t) => {
            return Err(format!(
                "expected patchType \"JSONPatch\", got {:?}",
                t.unwrap_or("")
            ));
        }
    };
    Ok(Answer {
        allowed: r["allowed"].as_bool().unwrap_or(false),
        status: r["status"].clone(),
        patch,
        warnings: strs(&r["warnings"])
            .into_iter()
            .map(str::to_string)
            .collect(),
    })
}

/// The reasons a webhook's Status may give, as the double reports them.
fn reason(r: &str) -> &'static str {
    match r {
        "Forbidden" => "Forbidden",
        "Invalid" => "Invalid",
        "BadRequest" => "BadRequest",
        "Conflict" => "Conflict",
        "NotFound" => "NotFound",
        "AlreadyExists" => "AlreadyExists",
        _ => "",
    }
}

/// kube-apiserver's `ToStatusErr`: the refusal a client sees.
fn denied(name: &str, status: &Value) -> ApiError {
    let by = format!("admission webhook \"{name}\" denied the request");
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let message = match (status["message"].as_str(), status["reason"].as_str()) {
        (Some(m), _) if !m.is_empty() => format!("{by}: {m}"),
        (_, Some(r)) if !r.is_empty() => format!("{by}: {r}"),
        _ => format!("{by} without explanation"),
    };
    let mut e = ApiError::new(
        code,
        reason(status["reason"].as_str().unwrap_or("")),
        message,
    );
    if let Some(d) = status.get("details").filter(|d| d.is_object()) {
        e.details = Some(d.clone());
    }
    e
}

fn call_failed(name: &str, why: &str) -> ApiError {
    ApiError::internal(format!(
        "Internal error occurred: failed calling webhook \"{name}\": failed to call webhook: {why}"
    ))
}

fn dry_run_ok(w: &Value) -> bool {
    matches!(w["sideEffects"].as_str(), Some("None" | "NoneOnDryRun"))
}

/// Runs the mutating webhooks on `obj` (CREATE, UPDATE); returns it patched, with warnings.
pub async fn mutate(
    sh: &Shared,
    a: &Attributes<'_>,
    mut obj: Value,
) -> Result<(Value, Vec<String>), ApiError> {
    let mut warnings = Vec::new();
    if !admissible(a.rt) {
        return Ok((obj, warnings));
    }
    for w in webhooks(sh, MUTATING) {
        if !webhook_matches(sh, &w, a, Some(&obj))? {
            continue;
        }
        let name = w["name"].as_str().unwrap_or("");
        if a.dry_run && !dry_run_ok(&w) {
            return Err(ApiError::bad_request(format!(
                "admission webhook \"{name}\" does not support dry run"
            )));
        }
        let uid = uuid::Uuid::new_v4().to_string();
        let rv = review(&uid, a, Some(&obj));
        match ask(sh, &w, &rv, &uid).await {
            Ok(ans) => {
                warnings.extend(ans.warnings);
                if !ans.allowed {
                    return Err(denied(name, &ans.status));
                }
                if let Some(p) = ans.patch {
                    let patch: json_patch::Patch = serde_json::from_value(p)
                        .map_err(|e| call_failed(name, &format!("invalid JSON patch: {e}")))?;
                    json_patch::patch(&mut obj, &patch)
                        .map_err(|e| call_failed(name, &format!("JSON patch failed: {e}")))?;
                }
            }
            Err(why) if w["failurePolicy"].as_str() == Some("Ignore") => {
                tracing::warn!(webhook = name, error = %why, "failed calling webhook, failing open");
            }
            Err(why) => return Err(call_failed(name, &why)),
        }
    }
    Ok((obj, warnings))
}

/// Runs the validating webhooks (`obj` is `None` for DELETE); returns their warnings.
pub async fn validate(
    sh: &Shared,
    a: &Attributes<'_>,
    obj: Option<&Value>,
) -> Result<Vec<String>, ApiError> {
    let mut warnings = Vec::new();
    if !admissible(a.rt) {
        return Ok(warnings);
    }
    for w in webhooks(sh, VALIDATING) {
        if !webhook_matches(sh, &w, a, obj)? {
            continue;
        }
        let name = w["name"].as_str().unwrap_or("");
        if a.dry_run && !dry_run_ok(&w) {
            return Err(ApiError::bad_request(format!(
                "admission webhook \"{name}\" does not support dry run"
            )));
        }
        let uid = uuid::Uuid::new_v4().to_string();
        let rv = review(&uid, a, obj);
        match ask(sh, &w, &rv, &uid).await {
            Ok(ans) => {
                warnings.extend(ans.warnings);
                if !ans.allowed {
                    return Err(denied(name, &ans.status));
                }
            }
            Err(why) if w["failurePolicy"].as_str() == Some("Ignore") => {
                tracing::warn!(webhook = name, error = %why, "failed calling webhook, failing open");
            }
            Err(why) => return Err(call_failed(name, &why)),
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_match_as_kube_apiserver_splits_them() {
        let rt = ResourceType {
            group: "muster.dev".into(),
            version: "v1alpha1".into(),
            plural: "batchjobs".into(),
            singular: "batchjob".into(),
            kind: "BatchJob".into(),
            namespaced: true,
            short_names: vec![],
            categories: vec![],
            status: true,
            generation: true,
            unconditional_update: false,
            create_on_update: false,
            extra_subresources: &[],
            builtin: super::super::resources::Builtin::Custom,
            storage: GroupResource::new("muster.dev", "batchjobs"),
            crd: None,
        };
        let user = UserInfo::anonymous();
        let at = |sub: Option<&'static str>, op| Attributes {
            rt: &rt,
            sub,
            namespace: "ml",
            name: "j",
            op,
            user: &user,
            dry_run: false,
            old: None,
        };
        let rule = |res: &[&str], ops: &[&str], scope: &str| {
            json!({"apiGroups": ["muster.dev"], "apiVersions": ["*"], "operations": ops,
                   "resources": res, "scope": scope})
        };
        let main = at(None, Operation::Create);
        let status = at(Some("status"), Operation::Update);
        assert!(rule_matches(&rule(&["batchjobs"], &["CREATE"], "*"), &main));
        assert!(!rule_matches(
            &rule(&["batchjobs"], &["UPDATE"], "*"),
            &main
        ));
        assert!(!rule_matches(&rule(&["batchjobs"], &["*"], "*"), &status));
        assert!(!rule_matches(&rule(&["*"], &["*"], "*"), &status));
        assert!(rule_matches(&rule(&["*/*"], &["*"], "*"), &status));
        assert!(rule_matches(
            &rule(&["batchjobs/status"], &["*"], "*"),
            &status
        ));
        assert!(rule_matches(&rule(&["*/status"], &["*"], "*"), &status));
        assert!(!rule_matches(
            &rule(&["batchjobs"], &["*"], "Cluster"),
            &main
        ));
        assert!(rule_matches(
            &rule(&["batchjobs"], &["*"], "Namespaced"),
            &main
        ));
    }

    #[test]
    fn label_selectors_follow_kubernetes() {
        let labels = json!({"team": "ml", "tier": "gold"});
        assert!(selector_matches(
            &json!({"matchLabels": {"team": "ml"}}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchLabels": {"team": "hpc"}}),
            &labels
        ));
        assert!(selector_matches(
            &json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]},
                                         {"key": "x", "operator": "DoesNotExist"}]}),
            &labels
        ));
        assert!(!selector_matches(
            &json!({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["ml"]}]}),
            &labels
        ));
        assert!(selector_empty(&json!({})));
    }

    #[test]
    fn refusals_read_as_kube_apiserver_writes_them() {
        let e = denied("v.muster.dev", &json!({"message": "no", "code": 403}));
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "admission webhook \"v.muster.dev\" denied the request: no"
        );
        let e = denied("v.muster.dev", &json!({"code": 200}));
        assert_eq!(e.code, 400);
        assert!(e.message.ends_with("without explanation"));
    }
}
