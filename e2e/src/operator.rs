//! The real Muster operator run in-process against the [API server double](crate::apiserver),
//! deployed as the chart deploys it: its own service account identity
//! (`system:serviceaccount:NAMESPACE:muster-operator`) and, with admission, its webhooks
//! behind a Service, with the webhook configurations the chart installs (built by
//! [`admission::mutating_configuration`] and [`admission::validating_configuration`]) and the
//! `caBundle` the operator writes into them itself.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Endpoints, Namespace, Service};
use kube::Client;
use kube::api::{Api, PostParams};
use muster_operator::controller::admission::{self, Admins, WebhookConfig};
use muster_operator::controller::metrics::Metrics;
use muster_operator::controller::webhook::{self, Webhook, WebhookSettings};
use muster_operator::controller::{self, Handle, Settings};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::apiserver::ApiServer;
use crate::apiserver::auth::UserInfo;

/// The service account the chart gives the operator.
pub const SERVICE_ACCOUNT: &str = "muster-operator";
/// The webhook Service the chart creates.
pub const WEBHOOK_SERVICE: &str = "muster-operator-webhook";
/// The webhook configurations' name.
pub const WEBHOOK_CONFIGURATION: &str = "muster";

/// A running in-process operator.
pub struct InProcessOperator {
    /// The controllers.
    pub handle: Handle,
    /// The webhook server, with admission.
    webhook: Option<(JoinHandle<()>, tokio::sync::oneshot::Sender<()>)>,
    /// Where the webhooks listen.
    pub webhook_addr: Option<SocketAddr>,
    /// The operator's client (its own identity).
    pub client: Client,
}

impl InProcessOperator {
    /// Stops cleanly.
    pub async fn shutdown(mut self) -> Result<(), controller::runner::RunError> {
        if let Some((task, stop)) = self.webhook.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
        self.handle.shutdown().await
    }

    /// Stops at once, as a killed process would.
    pub fn kill(mut self) {
        if let Some((task, _)) = self.webhook.take() {
            task.abort();
        }
        self.handle.kill();
    }
}

async fn create_or_keep<K>(api: &Api<K>, obj: &K) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Starts the operator with `settings` against `server` (its namespace is created if
/// missing). With `admission`, its webhooks are served on 127.0.0.1, reached through the
/// Service [`WEBHOOK_SERVICE`] and its Endpoints, and registered with `failurePolicy: Fail`;
/// this returns once they answer.
pub async fn start(
    server: &ApiServer,
    settings: Settings,
    admission: bool,
) -> anyhow::Result<InProcessOperator> {
    start_with_admins(server, settings, admission, Admins::default()).await
}

/// [`start`] with the administrators the webhook lets raise a priority (the chart's
/// `operator.admins`, the operator's `--admin-group`/`--admin-user`).
pub async fn start_with_admins(
    server: &ApiServer,
    settings: Settings,
    admission: bool,
    admins: Admins,
) -> anyhow::Result<InProcessOperator> {
    let admin = server.client();
    let ns = settings.namespace.clone();
    let nso: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )?;
    create_or_keep(&Api::all(admin.clone()), &nso).await?;
    let client = server.client_as(UserInfo::service_account(&ns, SERVICE_ACCOUNT));
    let handle = controller::start(client.clone(), settings, Metrics::new());
    if !admission {
        return Ok(InProcessOperator {
            handle,
            webhook: None,
            webhook_addr: None,
            client,
        });
    }
    let ws = WebhookSettings {
        addr: "127.0.0.1:0".parse()?,
        namespace: ns.clone(),
        service: WEBHOOK_SERVICE.into(),
        secret: "muster-webhook-tls".into(),
        configuration: WEBHOOK_CONFIGURATION.into(),
        refresh: Duration::from_secs(300),
        admins,
    };
    let hook = Webhook::bind(
        client.clone(),
        ws.clone(),
        handle.stores.clone(),
        handle.ready.clone(),
    )
    .await?;
    let addr = hook
        .local_addr()
        .ok_or_else(|| anyhow::anyhow!("the webhook server has no address"))?;
    // What the chart renders: the Service (port 443 to the pods' 9443) and the
    // configurations without a caBundle; the Endpoints stand for the operator's pods.
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": WEBHOOK_SERVICE, "namespace": ns},
        "spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": 9443}]}
    }))?;
    create_or_keep(&Api::namespaced(admin.clone(), &ns), &svc).await?;
    let ep: Endpoints = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": WEBHOOK_SERVICE, "namespace": ns},
        "subsets": [{"addresses": [{"ip": addr.ip().to_string()}],
                     "ports": [{"name": "webhook", "port": addr.port()}]}]
    }))?;
    create_or_keep(&Api::namespaced(admin.clone(), &ns), &ep).await?;
    let cfg = WebhookConfig {
        name: WEBHOOK_CONFIGURATION.into(),
        namespace: ns.clone(),
        service: WEBHOOK_SERVICE.into(),
        port: 443,
        failure_policy: "Fail".into(),
        timeout_seconds: 10,
    };
    create_or_keep::<MutatingWebhookConfiguration>(
        &Api::all(admin.clone()),
        &admission::mutating_configuration(&cfg),
    )
    .await?;
    create_or_keep::<ValidatingWebhookConfiguration>(
        &Api::all(admin.clone()),
        &admission::validating_configuration(&cfg),
    )
    .await?;
    webhook::inject_ca(&client, &ws, hook.ca()).await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(hook.serve(async {
        let _ = stop_rx.await;
    }));
    // Answering: a dry-run create goes through both webhooks once the caches synced.
    let probe: muster_crds::v1alpha1::BatchJob = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
        "metadata": {"name": "admission-probe"}, "spec": {"script": "true", "partition": "admission-probe"}
    }))?;
    let api: Api<muster_crds::v1alpha1::BatchJob> = Api::namespaced(admin, &ns);
    let mut last = None;
    for _ in 0..200 {
        match api
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &probe,
            )
            .await
        {
            Ok(_) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(e) = last {
        anyhow::bail!("the admission webhooks do not answer: {e}");
    }
    Ok(InProcessOperator {
        handle,
        webhook: Some((task, stop_tx)),
        webhook_addr: Some(addr),
        client,
    })
}
