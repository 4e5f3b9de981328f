//! Serving the [admission webhooks](super::admission) over HTTPS, with the certificate the
//! operator manages itself.
//!
//! - **Certificate.** A self-signed CA and a serving certificate for
//!   `SERVICE.NAMESPACE.svc` live in a Secret (`ca.crt`, `ca.key`, `tls.crt`, `tls.key`) that
//!   every replica shares: the first to start creates it (a create conflict means another
//!   replica won, whose Secret is then used). The serving certificate is issued again, under
//!   the same CA, when it has less than 30 days left or names other hosts; the CA (10 years)
//!   only when it has less than a year left. Replicas reload the Secret every
//!   [`WebhookSettings::refresh`] and serve the new certificate without a restart.
//! - **caBundle.** The operator writes its CA into the `caBundle` of the webhooks of the
//!   configurations it is given that point at its Service, at start and on every refresh, so
//!   the API server trusts it (the chart leaves `caBundle` empty; with Argo CD, ignore that
//!   field's difference).
//! - **Who the operator is.** A `SelfSubjectReview` at start gives the operator's own user
//!   name: array elements it creates keep their array's submitter and are not judged again.
//! - Until the caches have synced, the validating webhooks answer 503 (the API server then
//!   applies the failure policy); the mutating one needs no cache.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::{Client, ResourceExt};
use muster_crds::v1alpha1::Partition;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::admission;
use super::runner::Stores;
use super::translate;
use super::validate::{ClaimModes, World};

/// Where and how the webhooks are served.
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// Address to listen on (HTTPS).
    pub addr: SocketAddr,
    /// Namespace of the webhook Service and the certificate Secret.
    pub namespace: String,
    /// The webhook Service (the certificate is for `SERVICE.NAMESPACE.svc`).
    pub service: String,
    /// The Secret holding the CA and the serving certificate.
    pub secret: String,
    /// MutatingWebhookConfiguration and ValidatingWebhookConfiguration whose webhooks get the
    /// CA (both are named alike).
    pub configuration: String,
    /// How often the Secret is read again and the `caBundle`s checked.
    pub refresh: Duration,
    /// Who may raise a job's priority (`--priority`, a negative `--nice`).
    pub admins: admission::Admins,
}

/// Why the webhook server could not run.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Binding the address failed.
    #[error("binding {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// The certificate could not be made or stored.
    #[error("webhook certificate: {0}")]
    Certificate(String),
    /// A request to the API server failed.
    #[error("{what}: {error}")]
    Kube {
        /// What was being done.
        what: String,
        /// The error.
        error: Box<kube::Error>,
    },
}

fn kube_err(what: &str) -> impl FnOnce(kube::Error) -> WebhookError + '_ {
    move |error| WebhookError::Kube {
        what: what.to_string(),
        error: Box::new(error),
    }
}

/// The certificate material kept in the Secret (PEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certs {
    /// The CA certificate (the `caBundle`).
    pub ca_crt: String,
    /// The CA key.
    pub ca_key: String,
    /// The serving certificate.
    pub tls_crt: String,
    /// The serving key.
    pub tls_key: String,
    /// When the serving certificate expires (seconds since the epoch).
    pub not_after: i64,
    /// When the CA expires.
    pub ca_not_after: i64,
    /// The names the serving certificate is for.
    pub dns_names: Vec<String>,
}

const NOT_AFTER: &str = "muster.dev/not-after";
const CA_NOT_AFTER: &str = "muster.dev/ca-not-after";
const DNS_NAMES: &str = "muster.dev/dns-names";
const DAY: i64 = 86_400;

fn rcgen_err(e: rcgen::Error) -> WebhookError {
    WebhookError::Certificate(e.to_string())
}

/// The UTC date of `secs` as (year, month, day), what rcgen's validity dates take.
fn ymd(secs: i64) -> Result<(i32, u8, u8), WebhookError> {
    let d = jiff::Timestamp::from_second(secs)
        .map_err(|e| WebhookError::Certificate(e.to_string()))?
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    Ok((i32::from(d.year()), d.month() as u8, d.day() as u8))
}

macro_rules! date {
    ($secs:expr) => {{
        let (y, m, d) = ymd($secs)?;
        rcgen::date_time_ymd(y, m, d)
    }};
}

fn ca_params(not_before: i64, not_after: i64) -> Result<rcgen::CertificateParams, WebhookError> {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(rcgen_err)?;
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "muster-webhook-ca");
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    p.not_before = date!(not_before);
    p.not_after = date!(not_after);
    Ok(p)
}

/// Issues the serving certificate for `dns_names` at `now` (a year), under the CA of `prev`
/// when it has more than a year left, else under a new CA (ten years).
pub fn issue(prev: Option<&Certs>, dns_names: &[String], now: i64) -> Result<Certs, WebhookError> {
    let reuse = prev.filter(|c| c.ca_not_after - now > 365 * DAY);
    let (ca_key, ca_not_before, ca_not_after, ca_crt) = match reuse {
        Some(c) => {
            let key = rcgen::KeyPair::from_pem(&c.ca_key).map_err(rcgen_err)?;
            // rcgen signs with the issuer's name and key; the CA certificate users trust is
            // the one already in the Secret.
            (key, now, c.ca_not_after, Some(c.ca_crt.clone()))
        }
        None => (
            rcgen::KeyPair::generate().map_err(rcgen_err)?,
            now,
            now + 3650 * DAY,
            None,
        ),
    };
    let ca = ca_params(ca_not_before - DAY, ca_not_after)?
        .self_signed(&ca_key)
        .map_err(rcgen_err)?;
    let mut leaf = rcgen::CertificateParams::new(dns_names.to_vec()).map_err(rcgen_err)?;
    leaf.distinguished_name = rcgen::DistinguishedName::new();
    leaf.distinguished_name.push(
        rcgen::DnType::CommonName,
        dns_names.first().cloned().unwrap_or_default(),
    );
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    let not_after = (now + 365 * DAY).min(ca_not_after);
    leaf.not_before = date!(now - DAY);
    leaf.not_after = date!(not_after);
    let leaf_key = rcgen::KeyPair::generate().map_err(rcgen_err)?;
    let cert = leaf.signed_by(&leaf_key, &ca, &ca_key).map_err(rcgen_err)?;
    Ok(Certs {
        ca_crt: ca_crt.unwrap_or_else(|| ca.pem()),
        ca_key: ca_key.serialize_pem(),
        tls_crt: cert.pem(),
        tls_key: leaf_key.serialize_pem(),
        not_after,
        ca_not_after,
        dns_names: dns_names.to_vec(),
    })
}

/// Whether `c` may still be served for `dns_names` at `now`.
pub fn usable(c: &Certs, dns_names: &[String], now: i64) -> bool {
    c.dns_names == dns_names && c.not_after - now > 30 * DAY && c.ca_not_after - now > 30 * DAY
}

fn from_secret(s: &Secret) -> Option<Certs> {
    let data = s.data.as_ref()?;
    let get = |k: &str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .filter(|v| !v.is_empty())
    };
    let ann = s.metadata.annotations.as_ref()?;
    Some(Certs {
        ca_crt: get("ca.crt")?,
        ca_key: get("ca.key")?,
        tls_crt: get("tls.crt")?,
        tls_key: get("tls.key")?,
        not_after: ann.get(NOT_AFTER)?.parse().ok()?,
        ca_not_after: ann.get(CA_NOT_AFTER)?.parse().ok()?,
        dns_names: ann.get(DNS_NAMES)?.split(',').map(str::to_string).collect(),
    })
}

fn to_secret(name: &str, c: &Certs, rv: Option<String>) -> Secret {
    let mut s = Secret {
        type_: Some("kubernetes.io/tls".into()),
        ..Default::default()
    };
    s.metadata.name = Some(name.into());
    s.metadata.resource_version = rv;
    s.metadata.annotations = Some(
        [
            (NOT_AFTER.to_string(), c.not_after.to_string()),
            (CA_NOT_AFTER.to_string(), c.ca_not_after.to_string()),
            (DNS_NAMES.to_string(), c.dns_names.join(",")),
        ]
        .into(),
    );
    s.data = Some(
        [
            ("ca.crt", &c.ca_crt),
            ("ca.key", &c.ca_key),
            ("tls.crt", &c.tls_crt),
            ("tls.key", &c.tls_key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect(),
    );
    s
}

/// The certificate to serve: the Secret's when usable, else one issued now and stored (a
/// replica that loses the race to store it uses the winner's).
pub async fn ensure_certs(client: &Client, s: &WebhookSettings) -> Result<Certs, WebhookError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &s.namespace);
    let names = dns_names(s);
    for _ in 0..5 {
        let now = jiff::Timestamp::now().as_second();
        let cur = api
            .get_opt(&s.secret)
            .await
            .map_err(kube_err("reading the webhook certificate Secret"))?;
        let prev = cur.as_ref().and_then(from_secret);
        if let Some(c) = &prev
            && usable(c, &names, now)
        {
            return Ok(c.clone());
        }
        let certs = issue(prev.as_ref(), &names, now)?;
        let written = match &cur {
            None => api
                .create(&PostParams::default(), &to_secret(&s.secret, &certs, None))
                .await
                .map(drop),
            Some(old) => api
                .replace(
                    &s.secret,
                    &PostParams::default(),
                    &to_secret(&s.secret, &certs, old.resource_version()),
                )
                .await
                .map(drop),
        };
        match written {
            Ok(()) => {
                tracing::info!(secret = %s.secret, "issued the webhook serving certificate");
                return Ok(certs);
            }
            // Another replica wrote it first: use theirs.
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(kube_err("storing the webhook certificate Secret")(e)),
        }
    }
    Err(WebhookError::Certificate(
        "the certificate Secret kept changing while being written".into(),
    ))
}

/// The names the serving certificate is for.
pub fn dns_names(s: &WebhookSettings) -> Vec<String> {
    vec![
        format!("{}.{}.svc", s.service, s.namespace),
        format!("{}.{}.svc.cluster.local", s.service, s.namespace),
    ]
}

/// The serving certificate, swappable while serving.
#[derive(Debug)]
struct Resolver(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok().map(|k| k.clone())
    }
}

fn certified(c: &Certs) -> Result<Arc<CertifiedKey>, WebhookError> {
    let bad = |e: String| WebhookError::Certificate(e);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(c.tls_crt.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    let key =
        PrivateKeyDer::from_pem_slice(c.tls_key.as_bytes()).map_err(|e| bad(e.to_string()))?;
    let signer =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| bad(e.to_string()))?;
    Ok(Arc::new(CertifiedKey::new(chain, signer)))
}

/// Writes `ca` into the `caBundle` of the webhooks of the configurations named in `s` that
/// point at the operator's Service; missing configurations are skipped.
pub async fn inject_ca(client: &Client, s: &WebhookSettings, ca: &str) -> Result<(), WebhookError> {
    let want = ByteString(ca.as_bytes().to_vec());
    let ours = |svc: Option<&k8s_openapi::api::admissionregistration::v1::ServiceReference>| {
        svc.is_some_and(|r| r.name == s.service && r.namespace == s.namespace)
    };
    let patch_for =
        |bundles: Vec<(String, Option<ByteString>, bool)>| -> Option<serde_json::Value> {
            let ops: Vec<serde_json::Value> = bundles
            .iter()
            .enumerate()
            .filter(|(_, (_, have, mine))| *mine && have.as_ref() != Some(&want))
            .flat_map(|(i, (name, _, _))| {
                [
                    serde_json::json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": name}),
                    serde_json::json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"),
                                       "value": ca_b64(ca)}),
                ]
            })
            .collect();
            (!ops.is_empty()).then_some(serde_json::Value::Array(ops))
        };
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let bundles = |hooks: Option<Vec<(String, WebhookClientConfig)>>| {
        hooks
            .unwrap_or_default()
            .into_iter()
            .map(|(name, c)| {
                let mine = ours(c.service.as_ref());
                (name, c.ca_bundle, mine)
            })
            .collect()
    };
    patch_ca_bundles(
        &mutating,
        &s.configuration,
        "MutatingWebhookConfiguration",
        |m| {
            bundles(
                m.webhooks
                    .map(|w| w.into_iter().map(|w| (w.name, w.client_config)).collect()),
            )
        },
        &patch_for,
    )
    .await?;
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    patch_ca_bundles(
        &validating,
        &s.configuration,
        "ValidatingWebhookConfiguration",
        |v| {
            bundles(
                v.webhooks
                    .map(|w| w.into_iter().map(|w| (w.name, w.client_config)).collect()),
            )
        },
        &patch_for,
    )
    .await?;
    Ok(())
}

/// Reads one webhook configuration (skipped when missing), lists its webhooks as (name,
/// caBundle, points at us) with `webhooks`, and applies what `patch_for` makes of them. The
/// mutating and validating kinds share everything but their types.
async fn patch_ca_bundles<K>(
    api: &Api<K>,
    name: &str,
    kind: &str,
    webhooks: impl FnOnce(K) -> Vec<(String, Option<ByteString>, bool)>,
    patch_for: &impl Fn(Vec<(String, Option<ByteString>, bool)>) -> Option<serde_json::Value>,
) -> Result<(), WebhookError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let reading = format!("reading the {kind}");
    let Some(config) = api.get_opt(name).await.map_err(kube_err(&reading))? else {
        return Ok(());
    };
    if let Some(p) = patch_for(webhooks(config)) {
        let p: json_patch::Patch =
            serde_json::from_value(p).map_err(|e| WebhookError::Certificate(e.to_string()))?;
        api.patch(name, &PatchParams::default(), &Patch::<()>::Json(p))
            .await
            .map_err(kube_err("writing the caBundle"))?;
    }
    Ok(())
}

fn ca_b64(ca: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(ca.as_bytes())
}

/// Who the operator is, as the API server sees it.
pub async fn whoami(client: &Client) -> Result<String, WebhookError> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let r = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(kube_err(
            "asking the API server who the operator is (SelfSubjectReview)",
        ))?;
    r.status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .ok_or_else(|| WebhookError::Certificate("SelfSubjectReview gave no user name".into()))
}

struct WebhookState {
    stores: Stores,
    ready: Arc<AtomicBool>,
    operator: Option<String>,
    admins: admission::Admins,
}

fn review_response(r: AdmissionResponse) -> Response {
    axum::Json(r.into_review()).into_response()
}

fn decode(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, Box<Response>> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body)
        .map_err(|e| Box::new(review_response(AdmissionResponse::invalid(e.to_string()))))?;
    review
        .try_into()
        .map_err(|e: kube::core::admission::ConvertAdmissionReviewError| {
            Box::new(review_response(AdmissionResponse::invalid(e.to_string())))
        })
}

async fn mutate_batchjobs(
    State(st): State<Arc<WebhookState>>,
    body: axum::body::Bytes,
) -> Response {
    match decode(&body) {
        Ok(req) => review_response(admission::mutate_batchjob(&req, st.operator.as_deref())),
        Err(r) => *r,
    }
}

async fn validate_batchjobs(
    State(st): State<Arc<WebhookState>>,
    body: axum::body::Bytes,
) -> Response {
    if !st.ready.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet").into_response();
    }
    let req = match decode(&body) {
        Ok(r) => r,
        Err(r) => return *r,
    };
    let parts = st.stores.partitions.state();
    let objs: Vec<&Partition> = parts.iter().map(|p| p.as_ref()).collect();
    let table = translate::partitions(objs.iter().copied());
    let nodes = st.stores.node_table();
    let volume_claims: Vec<ClaimModes> = st
        .stores
        .volume_claims
        .state()
        .iter()
        .map(|c| ClaimModes::of(c))
        .collect();
    let world = World {
        partitions: &table,
        partition_objects: &objs,
        nodes: &nodes,
        volume_claims: &volume_claims,
    };
    review_response(admission::validate_batchjob(
        &req,
        st.operator.as_deref(),
        &st.admins,
        world,
    ))
}

async fn validate_partitions(
    State(st): State<Arc<WebhookState>>,
    body: axum::body::Bytes,
) -> Response {
    if !st.ready.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet").into_response();
    }
    let req = match decode(&body) {
        Ok(r) => r,
        Err(r) => return *r,
    };
    let parts = st.stores.partitions.state();
    let objs: Vec<&Partition> = parts.iter().map(|p| p.as_ref()).collect();
    review_response(admission::validate_partition(&req, &objs))
}

/// A bound webhook server, ready to serve.
pub struct Webhook {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    app: Router,
    resolver: Arc<Resolver>,
    client: Client,
    settings: WebhookSettings,
    certs: Certs,
}

impl Webhook {
    /// Makes sure of the certificate, binds the address and writes the `caBundle`s. `stores`
    /// and `ready` are the operator's caches (every replica keeps them).
    pub async fn bind(
        client: Client,
        settings: WebhookSettings,
        stores: Stores,
        ready: Arc<AtomicBool>,
    ) -> Result<Webhook, WebhookError> {
        let certs = ensure_certs(&client, &settings).await?;
        let resolver = Arc::new(Resolver(RwLock::new(certified(&certs)?)));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| WebhookError::Certificate(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let operator = match whoami(&client).await {
            Ok(u) => Some(u),
            Err(e) => {
                tracing::warn!(error = %e, "array elements will be judged as user submissions");
                None
            }
        };
        let state = Arc::new(WebhookState {
            stores,
            ready,
            operator,
            admins: settings.admins.clone(),
        });
        let app = Router::new()
            .route(admission::MUTATE_BATCHJOBS, post(mutate_batchjobs))
            .route(admission::VALIDATE_BATCHJOBS, post(validate_batchjobs))
            .route(admission::VALIDATE_PARTITIONS, post(validate_partitions))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind(settings.addr)
            .await
            .map_err(|error| WebhookError::Bind {
                addr: settings.addr,
                error,
            })?;
        if let Err(e) = inject_ca(&client, &settings, &certs.ca_crt).await {
            tracing::warn!(error = %e, "could not write the webhooks' caBundle yet");
        }
        Ok(Webhook {
            listener,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(cfg)),
            app,
            resolver,
            client,
            settings,
            certs,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// The CA the API server must trust.
    pub fn ca(&self) -> &str {
        &self.certs.ca_crt
    }

    /// Serves until `shutdown` resolves; refreshes the certificate and `caBundle`s meanwhile.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let Webhook {
            listener,
            acceptor,
            app,
            resolver,
            client,
            settings,
            mut certs,
        } = self;
        let mut shutdown = std::pin::pin!(shutdown);
        let mut tick = tokio::time::interval(settings.refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tick.tick() => {
                    match ensure_certs(&client, &settings).await {
                        Ok(c) => {
                            if c != certs {
                                match certified(&c) {
                                    Ok(k) => {
                                        *resolver.0.write().unwrap_or_else(|e| e.into_inner()) = k;
                                        certs = c;
                                        tracing::info!("serving a renewed webhook certificate");
                                    }
                                    Err(e) => tracing::warn!(error = %e, "bad webhook certificate"),
                                }
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "could not check the webhook certificate"),
                    }
                    if let Err(e) = inject_ca(&client, &settings, &certs.ca_crt).await {
                        tracing::warn!(error = %e, "could not write the webhooks' caBundle");
                    }
                }
                accepted = listener.accept() => {
                    let Ok((tcp, _)) = accepted else { continue };
                    let acceptor = acceptor.clone();
                    let app = app.clone();
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else { return };
                        let svc = hyper_util::service::TowerToHyperService::new(app);
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                            .await;
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_are_issued_reused_and_renewed() {
        let names = vec!["w.ns.svc".to_string(), "w.ns.svc.cluster.local".to_string()];
        let now = 1_750_000_000;
        let c = issue(None, &names, now).unwrap();
        assert!(usable(&c, &names, now));
        assert!(c.ca_crt.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(certified(&c).is_ok());
        // Other names, or close to expiry: issued again, under the same CA.
        assert!(!usable(&c, &["x.ns.svc".to_string()], now));
        let late = c.not_after - 10 * DAY;
        assert!(!usable(&c, &names, late));
        let again = issue(Some(&c), &names, late).unwrap();
        assert_eq!(again.ca_crt, c.ca_crt);
        assert_ne!(again.tls_crt, c.tls_crt);
        assert!(usable(&again, &names, late));
        // A CA close to its end is replaced.
        let old = issue(Some(&c), &names, c.ca_not_after - 10 * DAY).unwrap();
        assert_ne!(old.ca_crt, c.ca_crt);
        // Both serving certificates verify against the CA for the service name.
        verify(&c.ca_crt, &c.tls_crt, "w.ns.svc", now);
        verify(&c.ca_crt, &again.tls_crt, "w.ns.svc", late);
        // Through a Secret and back.
        let s = to_secret("tls", &c, None);
        assert_eq!(from_secret(&s), Some(c));
    }

    fn verify(ca: &str, leaf: &str, name: &str, at: i64) {
        use rustls::client::danger::ServerCertVerifier;
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let v =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        let end = CertificateDer::pem_slice_iter(leaf.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let name = rustls_pki_types::ServerName::try_from(name.to_string()).unwrap();
        let at = rustls_pki_types::UnixTime::since_unix_epoch(Duration::from_secs(at as u64));
        v.verify_server_cert(&end, &[], &name, &[], at)
            .expect("the serving certificate verifies against the CA");
    }
}
