//! An in-process stand-in for kube-apiserver.
//!
//! [`ApiServer::start`] serves the Kubernetes REST protocol over plain HTTP on
//! `127.0.0.1:<random port>`, so the operator, the node agent, the CLI and the real `kubectl`
//! talk to it exactly as to a cluster: discovery, CRUD, watch, patch (merge, JSON, strategic,
//! server-side apply), dry run, CRD schema and CEL validation, Tables for `kubectl get`,
//! finalizers, owner garbage collection, authentication (bearer tokens, impersonation,
//! anonymous; [`auth`]), admission webhooks ([`admission`](self#admission-webhooks)) and
//! fault injection. `e2e/README.md` lists what is served and every simplification.
//!
//! # Admission webhooks
//! Mutating and validating webhook configurations are called on every create, update and
//! delete as kube-apiserver calls them (matching rules and selectors, AdmissionReview v1 with
//! the request's userInfo, TLS verified against `caBundle`, services resolved through their
//! Endpoints, failure policy, timeouts, JSON patches, warnings); see the `admission` module.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use muster_e2e::apiserver::{ApiServer, ApiServerOptions};
//! let server = ApiServer::start(ApiServerOptions::default().with_muster_crds()).await?;
//! let client = server.client();
//! server.write_kubeconfig("/tmp/kubeconfig")?;
//! // ... kube::Api::<BatchJob>::namespaced(client, "default") ...
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod admission;
mod apply;
pub mod auth;
mod builtin;
mod cel;
mod discovery;
mod error;
mod faults;
mod gc;
mod http;
mod logs;
mod openapi;
mod ops;
mod patch;
mod proto;
mod resources;
mod schema;
mod selectors;
mod store;
mod table;
mod tls;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use error::{ApiError, FieldError, FieldErrorKind};
pub use faults::{FaultRule, Faults, Verbs};
pub use logs::PodLogs;
pub use resources::{Features, WorkloadApi};

use ops::{Shared, WriteOpts};

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The serving certificate could not be made.
    #[error("TLS: {0}")]
    Tls(String),
    /// Binding the listener failed.
    #[error("binding 127.0.0.1:0: {0}")]
    Bind(#[from] std::io::Error),
    /// A CRD given in the options was refused.
    #[error("installing CRD {name}: {error}")]
    Crd {
        /// CRD name.
        name: String,
        /// Why.
        error: ApiError,
    },
}

/// How to start the server.
#[derive(Clone, Debug)]
pub struct ApiServerOptions {
    /// CRDs created (and established) before `start` returns.
    pub crds: Vec<CustomResourceDefinition>,
    /// Watch events kept per resource for watches resuming from a resourceVersion; older
    /// resourceVersions get `410 Gone`.
    pub watch_window: usize,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// Pods bound to a node get a grace period on deletion (deletionTimestamp set, object kept
    /// until deleted again with `gracePeriodSeconds=0`, as a kubelet does). Unbound pods and
    /// finished pods are always deleted at once, as by kube-apiserver.
    pub graceful_pod_deletion: bool,
    /// Seed of fault injection.
    pub seed: u64,
    /// Optional API groups (Dynamic Resource Allocation, the Workload/PodGroup API).
    pub features: Features,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        Self {
            crds: Vec::new(),
            watch_window: 10_000,
            bookmark_interval: Duration::from_secs(30),
            graceful_pod_deletion: true,
            seed: 0,
            features: Features::default(),
        }
    }
}

impl ApiServerOptions {
    /// Install the muster.dev CRDs (Partition, BatchJob, GpuNode) at start.
    pub fn with_muster_crds(mut self) -> Self {
        self.crds.extend(muster_crds::crds());
        self
    }
}

/// A running API server double. Dropping it stops it.
pub struct ApiServer {
    addr: SocketAddr,
    tls_addr: SocketAddr,
    ca_pem: String,
    tls: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
    gc: Option<JoinHandle<()>>,
}

impl ApiServer {
    /// Start serving on 127.0.0.1 at a free port. Namespaces `default`, `kube-system`,
    /// `kube-public` and `kube-node-lease` exist, as do the `system-*-critical`
    /// PriorityClasses and the CRDs of `opts`.
    pub async fn start(opts: ApiServerOptions) -> Result<ApiServer, StartError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let tls_listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let tls_addr = tls_listener.local_addr()?;
        let cert = tls::ServingCert::issue().map_err(StartError::Tls)?;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (gc_tx, mut gc_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            registry: resources::Registry::new(opts.features),
            features: opts.features,
            store: store::Store::new(opts.watch_window),
            faults: Arc::new(faults::FaultState::new(opts.seed)),
            gc: gc_tx,
            shutdown: shutdown_rx.clone(),
            graceful_pods: AtomicBool::new(opts.graceful_pod_deletion),
            bookmark_interval: opts.bookmark_interval,
            next_ip: AtomicU32::new(10),
            addr: addr.to_string(),
            logs: Default::default(),
            tokens: auth::Tokens::with_admin(),
        });
        let cat = shared.registry.catalog();
        let wo = WriteOpts::default();
        if let Some(rt) = cat.get("", "v1", "namespaces") {
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let obj =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
                shared
                    .create(&rt, None, obj, &wo, false)
                    .await
                    .map_err(|e| StartError::Crd {
                        name: ns.into(),
                        error: e,
                    })?;
            }
        }
        if let Some(rt) = cat.get("scheduling.k8s.io", "v1", "priorityclasses") {
            for (name, value) in [
                ("system-cluster-critical", 2_000_000_000i64),
                ("system-node-critical", 2_000_001_000),
            ] {
                let obj = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": name}, "value": value, "preemptionPolicy": "PreemptLowerPriority",
                    "description": "Used for system critical pods that must not be moved from their current node."});
                shared
                    .create(&rt, None, obj, &wo, false)
                    .await
                    .map_err(|e| StartError::Crd {
                        name: name.into(),
                        error: e,
                    })?;
            }
        }
        if let Some(rt) = cat.get("apiextensions.k8s.io", "v1", "customresourcedefinitions") {
            for crd in &opts.crds {
                let name = crd.metadata.name.clone().unwrap_or_default();
                let obj = serde_json::to_value(crd).map_err(|e| StartError::Crd {
                    name: name.clone(),
                    error: ApiError::bad_request(e.to_string()),
                })?;
                shared
                    .create(&rt, None, obj, &wo, false)
                    .await
                    .map_err(|error| StartError::Crd { name, error })?;
            }
        }
        gc::settle(&shared, &mut gc_rx).await;
        let gc = tokio::spawn(gc::run(shared.clone(), gc_rx));
        let app = http::router(shared.clone());
        let tls_app = app.clone();
        let tls_stop = shutdown_rx.clone();
        let ca_pem = cert.ca_pem.clone();
        let tls = tokio::spawn(async move {
            if let Err(e) = tls::serve(tls_listener, &cert, tls_app, tls_stop).await {
                tracing::error!(error = %e, "API server double's HTTPS listener stopped");
            }
        });
        let mut stop = shutdown_rx;
        let server = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "API server double stopped");
            }
        });
        Ok(ApiServer {
            addr,
            tls_addr,
            ca_pem,
            tls: Some(tls),
            shared,
            shutdown: shutdown_tx,
            server: Some(server),
            gc: Some(gc),
        })
    }

    /// `http://127.0.0.1:PORT`: the plain-HTTP listener, for in-process clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `https://127.0.0.1:PORT`: the HTTPS listener (what kubeconfig files point at; its
    /// certificate is signed by [`ApiServer::ca_pem`]).
    pub fn https_url(&self) -> String {
        format!("https://{}", self.tls_addr)
    }

    /// The CA of the HTTPS listener's certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kube-rs configuration for this server (no TLS, namespace `default`, the default user
    /// `kubernetes-admin` through its bearer token), to adjust before building a client (e.g.
    /// `default_retry = false`).
    pub fn config(&self) -> kube::Config {
        self.config_with_token(Some(auth::ADMIN_TOKEN))
    }

    /// [`ApiServer::config`] authenticating with `token` (`None`: anonymous).
    pub fn config_with_token(&self, token: Option<&str>) -> kube::Config {
        let uri: axum::http::Uri = self
            .url()
            .parse()
            .expect("a socket address makes a valid URI");
        let mut c = kube::Config::new(uri);
        c.auth_info.token = token.map(|t| t.to_string().into());
        c
    }

    /// Accept `token` as `user` from now on (what a token file line does).
    pub fn add_token(&self, token: &str, user: auth::UserInfo) {
        self.shared.tokens.add(token, user);
    }

    /// A client authenticated as `user` (a token is made for it).
    pub fn client_as(&self, user: auth::UserInfo) -> kube::Client {
        let token = format!("token-{}", uuid::Uuid::new_v4());
        self.add_token(&token, user);
        kube::Client::try_from(self.config_with_token(Some(&token)))
            .expect("a plain-HTTP kube client always builds")
    }

    /// A kube-rs client for this server. Like every kube-rs client it retries 429, 503 and 504
    /// answers; build one from [`ApiServer::config`] to see them.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("a plain-HTTP kube client always builds")
    }

    /// A kubeconfig pointing at this server, accepted by kube-rs and kubectl, for the default
    /// user `kubernetes-admin`.
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_with_token(auth::ADMIN_USER, auth::ADMIN_TOKEN)
    }

    /// A kubeconfig (the HTTPS listener, its CA) whose user `user_name` authenticates with
    /// `token`.
    pub fn kubeconfig_with_token(&self, user_name: &str, token: &str) -> String {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: muster-test\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\ncontexts:\n- name: muster-test\n  context:\n    cluster: muster-test\n    user: {user_name}\n    namespace: default\ncurrent-context: muster-test\nusers:\n- name: {user_name}\n  user:\n    token: {token}\npreferences: {{}}\n",
            self.https_url()
        )
    }

    /// Write [`ApiServer::kubeconfig`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig())
    }

    /// Fault injection.
    pub fn faults(&self) -> Faults {
        Faults(self.shared.faults.clone())
    }

    /// Change how many watch events are kept per resource.
    pub fn set_watch_window(&self, events: usize) {
        self.shared.store.set_window(events);
    }

    /// Forget every past watch event, as an etcd compaction does: watches resuming from any
    /// resourceVersion before now get `410 Gone`.
    pub fn compact(&self) {
        for c in self.shared.store.collections() {
            c.compact(&self.shared.store);
        }
    }

    /// Switch graceful deletion of bound pods (see [`ApiServerOptions::graceful_pod_deletion`]).
    pub fn set_graceful_pod_deletion(&self, on: bool) {
        self.shared.graceful_pods.store(on, Ordering::Relaxed);
    }

    /// Set what `kubectl logs` (`pods/log`) returns for a container.
    pub fn set_pod_log(&self, namespace: &str, pod: &str, container: &str, text: &str) {
        self.shared.logs.set_text(namespace, pod, container, text);
    }

    /// The pod log registry (a kubelet in exec mode points it at its containers' log files).
    pub fn pod_logs(&self) -> PodLogs {
        self.shared.logs.clone()
    }

    /// Number of stored objects of every kind.
    pub fn object_count(&self) -> usize {
        self.shared
            .store
            .collections()
            .iter()
            .map(|c| c.len())
            .sum()
    }

    /// The latest resourceVersion handed out.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.current_rv()
    }

    /// Stop serving: open watches end, the listener closes.
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        if let Some(s) = self.server.take() {
            let abort = s.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), s)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        if let Some(g) = self.gc.take() {
            g.abort();
        }
        if let Some(t) = self.tls.take() {
            t.abort();
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        if let Some(s) = self.server.take() {
            s.abort();
        }
        if let Some(g) = self.gc.take() {
            g.abort();
        }
        if let Some(t) = self.tls.take() {
            t.abort();
        }
    }
}
