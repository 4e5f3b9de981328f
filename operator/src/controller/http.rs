//! `/metrics`, `/healthz` and `/readyz`, served by axum on every replica.
//!
//! `/healthz` answers 200 while the process runs; `/readyz` answers 200 once every reflector
//! cache has its first full list (a replica that does not lead is ready too: it serves
//! metrics and is ready to take over).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::metrics::Metrics;

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    ready: Arc<AtomicBool>,
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.render(),
    )
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, &'static str) {
    if s.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

/// The router.
pub fn router(metrics: Metrics, ready: Arc<AtomicBool>) -> Router {
    Router::new()
        .route("/metrics", get(self::metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, ready })
}

/// Serves the router on `addr` until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    ready: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    axum::serve(listener, router(metrics, ready))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn endpoints_answer() {
        let ready = Arc::new(AtomicBool::new(false));
        let m = Metrics::new();
        m.leader.set(1);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(m, ready.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let get = |path: &'static str| async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            s.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
        ready.store(true, Ordering::SeqCst);
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
        let m = get("/metrics").await;
        assert!(m.contains("muster_leader 1"), "{m}");
    }
}
