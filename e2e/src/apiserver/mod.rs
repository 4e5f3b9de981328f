//! An in-process stand-in for kube-apiserver.
//!
//! [`ApiServer::start`] serves the Kubernetes REST protocol over plain HTTP on
//! `127.0.0.1:<random port>`, so the operator, the node agent, the CLI and the real `kubectl`
//! talk to it exactly as to a cluster: discovery, CRUD, watch, patch (merge, JSON, strategic,
//! server-side apply), dry run, CRD schema and CEL validation, Tables for `kubectl get`,
//! finalizers, owner garbage collection and fault injection. `e2e/README.md` lists what is
//! served and every simplification.
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

mod apply;
mod builtin;
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

use ops::{Shared, WriteOpts};

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
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
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        Self {
            crds: Vec::new(),
            watch_window: 10_000,
            bookmark_interval: Duration::from_secs(30),
            graceful_pod_deletion: true,
            seed: 0,
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
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (gc_tx, gc_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            registry: resources::Registry::default(),
            store: store::Store::new(opts.watch_window),
            faults: Arc::new(faults::FaultState::new(opts.seed)),
            gc: gc_tx,
            shutdown: shutdown_rx.clone(),
            graceful_pods: AtomicBool::new(opts.graceful_pod_deletion),
            bookmark_interval: opts.bookmark_interval,
            next_ip: AtomicU32::new(10),
            addr: addr.to_string(),
            logs: Default::default(),
        });
        let cat = shared.registry.catalog();
        let wo = WriteOpts::default();
        if let Some(rt) = cat.get("", "v1", "namespaces") {
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let obj =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
                shared
                    .create(&rt, None, obj, &wo, false)
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
                    .map_err(|error| StartError::Crd { name, error })?;
            }
        }
        let gc = tokio::spawn(gc::run(shared.clone(), gc_rx));
        let app = http::router(shared.clone());
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
            shared,
            shutdown: shutdown_tx,
            server: Some(server),
            gc: Some(gc),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kube-rs configuration for this server (no TLS, no authentication, namespace
    /// `default`), to adjust before building a client (e.g. `default_retry = false`).
    pub fn config(&self) -> kube::Config {
        let uri: axum::http::Uri = self
            .url()
            .parse()
            .expect("a socket address makes a valid URI");
        kube::Config::new(uri)
    }

    /// A kube-rs client for this server. Like every kube-rs client it retries 429, 503 and 504
    /// answers; build one from [`ApiServer::config`] to see them.
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("a plain-HTTP kube client always builds")
    }

    /// A kubeconfig pointing at this server, accepted by kube-rs and kubectl.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: muster-test\n  cluster:\n    server: {}\ncontexts:\n- name: muster-test\n  context:\n    cluster: muster-test\n    user: muster-test\n    namespace: default\ncurrent-context: muster-test\nusers:\n- name: muster-test\n  user: {{}}\npreferences: {{}}\n",
            self.url()
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
    }
}
