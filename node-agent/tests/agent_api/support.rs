//! Shared pieces: the API server double, a Node as the kubelet registers it, an agent on a
//! fixture, and reads of what the agent wrote.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use muster_crds::v1alpha1::{GpuNode, GpuNodeStatus};
use muster_e2e::apiserver::{ApiServer, ApiServerOptions};
use muster_node_agent::inventory::{Fixture, FixtureInventory, GpuInventory};
use muster_node_agent::{Agent, AgentConfig, HealthConfig, Policy, ProcessKiller};
use serde_json::json;

/// The node every test's agent serves.
pub const NODE: &str = "gpu-a";

/// The double with the muster CRDs installed.
pub async fn api() -> (ApiServer, Client) {
    if let Ok(f) = std::env::var("MUSTER_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(f))
            .with_writer(std::io::stderr)
            .try_init();
    }
    let server = ApiServer::start(ApiServerOptions::default().with_muster_crds())
        .await
        .expect("the API server double starts");
    let client = server.client();
    (server, client)
}

/// Registers the Node as a kubelet would (with a label the agent must leave alone).
pub async fn register_node(client: &Client, name: &str) {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }))
    .unwrap();
    let api = Api::<Node>::all(client.clone());
    api.create(&PostParams::default(), &node).await.unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
    )
    .await
    .unwrap();
}

/// A fixture of `node-agent/fixtures/`.
pub fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.yaml"))
}

/// The parsed fixture (what the tests compare the API's objects with).
pub fn fixture(name: &str) -> Fixture {
    Fixture::load(&fixture_path(name)).unwrap()
}

/// A whole second near now: the agent's clock in these tests (status times have second
/// precision, so comparisons stay exact).
pub fn t0() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap()
}

/// `t + secs`.
pub fn at(t: Timestamp, secs: i64) -> Timestamp {
    t + SignedDuration::from_secs(secs)
}

/// The agent's configuration for `NODE`.
pub fn config(policy: Policy, quiet_secs: i64, proc_root: &Path) -> AgentConfig {
    AgentConfig {
        node_name: NODE.into(),
        policy,
        heartbeat: SignedDuration::from_secs(30),
        poll_interval: SignedDuration::from_secs(5),
        health: HealthConfig {
            quiet_period: SignedDuration::from_secs(quiet_secs),
            ..HealthConfig::default()
        },
        proc_root: proc_root.to_path_buf(),
    }
}

/// An agent on `inventory` (its real kube client code against the double).
pub async fn agent(
    client: &Client,
    cfg: AgentConfig,
    inventory: impl GpuInventory + 'static,
    killer: Arc<dyn ProcessKiller>,
    now: Timestamp,
) -> Agent {
    Agent::new(client.clone(), cfg, Box::new(inventory), killer, now)
        .await
        .expect("the agent starts")
}

/// A fixture backend whose script starts at `t0`.
pub fn fixture_inventory(name: &str, t0: Timestamp) -> FixtureInventory {
    FixtureInventory::load(&fixture_path(name))
        .unwrap()
        .starting_at(t0)
}

/// The GpuNode as stored.
pub async fn gpunode(client: &Client) -> GpuNode {
    Api::<GpuNode>::all(client.clone()).get(NODE).await.unwrap()
}

/// Its status.
pub async fn status(client: &Client) -> GpuNodeStatus {
    gpunode(client)
        .await
        .status
        .expect("the agent wrote a status")
}

/// The Node as stored.
pub async fn node(client: &Client) -> Node {
    Api::<Node>::all(client.clone()).get(NODE).await.unwrap()
}

/// `events.k8s.io/v1` Events in `namespace` about the object named `name`, oldest first.
pub async fn events_about(client: &Client, namespace: &str, name: &str) -> Vec<Event> {
    let mut evs: Vec<Event> = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    evs.sort_by_key(|e| (e.event_time.as_ref().map(|t| t.0), e.name_any()));
    evs
}

/// The reasons of `events`.
pub fn reasons(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| e.reason.clone().unwrap_or_default())
        .collect()
}
