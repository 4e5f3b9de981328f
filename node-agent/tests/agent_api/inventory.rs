//! Inventory publishing: the GpuNode and the Node labels as the fixture says, no write when
//! nothing changed (a heartbeat only when due), and a changed node published at once.

use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::{GpuHealthState, GpuNodeStatus};
use muster_node_agent::inventory::{FixtureInventory, GpuInventory, InventoryError};
use muster_node_agent::model::Observation;
use muster_node_agent::{Policy, RecordingKiller};

use crate::support::*;

/// A backend a test can swap for another while the agent owns it (a node whose GPUs were
/// replaced, as the next poll of NVML would see it).
#[derive(Clone)]
struct Swappable(Arc<Mutex<FixtureInventory>>);

impl GpuInventory for Swappable {
    fn describe(&self) -> String {
        self.0.lock().unwrap().describe()
    }
    fn observe(&mut self, now: Timestamp) -> Result<Observation, InventoryError> {
        self.0.lock().unwrap().observe(now)
    }
}

fn label<'a>(n: &'a Node, key: &str) -> Option<&'a str> {
    n.labels().get(key).map(String::as_str)
}

/// The status without its heartbeat.
fn sans_heartbeat(s: &GpuNodeStatus) -> GpuNodeStatus {
    GpuNodeStatus {
        heartbeat_time: None,
        ..s.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_the_fixture_and_writes_only_on_change_or_heartbeat() {
    let (_server, client) = api().await;
    register_node(&client, NODE).await;
    let dir = tempfile::tempdir().unwrap();
    let t = t0();
    let backend = Swappable(Arc::new(Mutex::new(fixture_inventory("dgx-h100", t))));
    let mut agent = agent(
        &client,
        config(Policy::Report, 300, dir.path()),
        backend.clone(),
        Arc::new(RecordingKiller::default()),
        t,
    )
    .await;

    let r = agent.cycle(t).await.unwrap();
    assert!(r.published && r.labels_applied);

    // The GpuNode: every GPU as the fixture describes it.
    let want = fixture("dgx-h100");
    let g = gpunode(&client).await;
    assert_eq!(g.spec.node_name, NODE);
    let st = g.status.clone().unwrap();
    assert_eq!(st.gpu_count, 8);
    assert_eq!(st.healthy_gpus, 8);
    assert_eq!(st.driver_version.as_deref(), Some("550.90.07"));
    assert_eq!(st.cuda_version.as_deref(), Some("12.4"));
    assert_eq!(st.gpus.len(), want.inventory.gpus.len());
    for (got, fx) in st.gpus.iter().zip(&want.inventory.gpus) {
        assert_eq!(got.index, fx.index);
        assert_eq!(got.uuid, fx.uuid);
        assert_eq!(got.model, "NVIDIA H100 80GB HBM3");
        assert_eq!(got.memory_mib, 81559);
        assert_eq!(got.pci_bus_id, fx.pci_bus_id, "GPU {}", fx.index);
        assert_eq!(got.numa_node, Some(if fx.index < 4 { 0 } else { 1 }));
        assert_eq!(got.cpu_affinity, fx.cpu_affinity);
        assert_eq!(got.mig_enabled, Some(false));
        // NVSwitch all-to-all: every other GPU is an NVLink peer.
        let peers: Vec<u32> = (0..8).filter(|p| *p != fx.index).collect();
        assert_eq!(got.nvlink_peers, peers, "GPU {}", fx.index);
        assert_eq!(got.health.state, GpuHealthState::Healthy);
    }
    assert_eq!(st.topology.len(), 8);
    for (i, row) in st.topology.iter().enumerate() {
        for (j, cell) in row.iter().enumerate() {
            assert_eq!(
                cell,
                if i == j { "X" } else { "NV18" },
                "topology[{i}][{j}]"
            );
        }
    }
    assert_eq!(st.binding_violations, 0);
    assert!(st.usage.is_empty());
    assert_eq!(st.heartbeat_time.as_ref().map(|h| h.0), Some(t));
    let ready = &st.conditions[0];
    assert_eq!(
        (ready.type_.as_str(), ready.status.as_str()),
        ("Ready", "True")
    );
    assert_eq!(ready.reason, "InventoryCurrent");
    assert!(
        g.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some("muster-node-agent")),
        "written by server-side apply under the agent's field manager"
    );

    // The Node: the GPU labels, the kubelet's labels untouched.
    let n = node(&client).await;
    assert_eq!(
        label(&n, labels::NODE_GPU_PRODUCT),
        Some("NVIDIA-H100-80GB-HBM3")
    );
    assert_eq!(label(&n, labels::NODE_GPU_COUNT), Some("8"));
    assert_eq!(label(&n, labels::NODE_GPU_MEMORY), Some("81559"));
    assert_eq!(label(&n, "kubernetes.io/hostname"), Some(NODE));

    // Nothing changed: no write at all (neither the GpuNode nor the Node).
    let (g_rv, n_rv) = (g.resource_version(), n.resource_version());
    for secs in [5, 10, 25] {
        let r = agent.cycle(at(t, secs)).await.unwrap();
        assert!(!r.published && !r.labels_applied, "poll at +{secs}s wrote");
    }
    assert_eq!(gpunode(&client).await.resource_version(), g_rv);
    assert_eq!(node(&client).await.resource_version(), n_rv);

    // The heartbeat is due at +30s: written, and only the heartbeat moved.
    let r = agent.cycle(at(t, 30)).await.unwrap();
    assert!(r.published && !r.labels_applied);
    let hb = gpunode(&client).await;
    assert_ne!(hb.resource_version(), g_rv);
    let hb_st = hb.status.unwrap();
    assert_eq!(hb_st.heartbeat_time.as_ref().map(|h| h.0), Some(at(t, 30)));
    assert_eq!(sans_heartbeat(&hb_st), sans_heartbeat(&st));
    assert_eq!(node(&client).await.resource_version(), n_rv);

    // The node's GPUs change (a 4x L40S box now): published at the next poll, not at the
    // next heartbeat, with the labels following.
    *backend.0.lock().unwrap() = fixture_inventory("pcie-4gpu-2socket", t);
    let r = agent.cycle(at(t, 35)).await.unwrap();
    assert!(r.published && r.labels_applied);
    let want = fixture("pcie-4gpu-2socket");
    let st = status(&client).await;
    assert_eq!(st.gpu_count, 4);
    assert_eq!(st.healthy_gpus, 4);
    let uuids: Vec<&str> = st.gpus.iter().map(|g| g.uuid.as_str()).collect();
    let want_uuids: Vec<&str> = want
        .inventory
        .gpus
        .iter()
        .map(|g| g.uuid.as_str())
        .collect();
    assert_eq!(uuids, want_uuids);
    assert!(
        st.gpus.iter().all(|g| g.nvlink_peers.is_empty()),
        "PCIe only"
    );
    let numa: Vec<Option<i32>> = st.gpus.iter().map(|g| g.numa_node).collect();
    assert_eq!(numa, [Some(0), Some(0), Some(1), Some(1)]);
    assert_eq!(st.topology.len(), 4);
    assert!(
        st.topology[0][2] == "SYS" && st.topology[0][1] != "SYS",
        "cross-socket pairs are SYS, same-socket ones closer: {:?}",
        st.topology
    );
    let n = node(&client).await;
    let product = label(&n, labels::NODE_GPU_PRODUCT).unwrap();
    assert!(product.contains("L40S"), "{product}");
    assert_eq!(label(&n, labels::NODE_GPU_COUNT), Some("4"));
    assert_eq!(label(&n, labels::NODE_GPU_MEMORY), Some("46068"));
    assert_eq!(label(&n, "kubernetes.io/hostname"), Some(NODE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_node_is_labelled_by_its_majority_and_smallest_memory() {
    let (_server, client) = api().await;
    register_node(&client, NODE).await;
    let dir = tempfile::tempdir().unwrap();
    let t = t0();
    let mut agent = agent(
        &client,
        config(Policy::Report, 300, dir.path()),
        fixture_inventory("mixed-a100-l4", t),
        Arc::new(RecordingKiller::default()),
        t,
    )
    .await;
    agent.cycle(t).await.unwrap();
    let want = fixture("mixed-a100-l4");
    let st = status(&client).await;
    assert_eq!(st.gpu_count as usize, want.inventory.gpus.len());
    for (got, fx) in st.gpus.iter().zip(&want.inventory.gpus) {
        assert_eq!(
            (
                &got.uuid,
                &got.model,
                got.memory_mib,
                got.mig_enabled,
                &got.nvlink_peers
            ),
            (
                &fx.uuid,
                &fx.model,
                fx.memory_mib,
                fx.mig_enabled,
                &fx.nvlink_peers
            )
        );
    }
    assert_eq!(st.gpus[0].nvlink_peers, [1], "the A100 pair is bridged");
    assert!(st.gpus[2].nvlink_peers.is_empty());
    // A tie (2 A100, 2 L4) goes to the lowest index's model; memory is the smallest GPU's,
    // so a selector on memory never promises more than every GPU has.
    let n = node(&client).await;
    assert_eq!(
        label(&n, labels::NODE_GPU_PRODUCT),
        Some("NVIDIA-A100-80GB-PCIe")
    );
    assert_eq!(label(&n, labels::NODE_GPU_MEMORY), Some("23034"));
    assert_eq!(label(&n, labels::NODE_GPU_COUNT), Some("4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_node_no_labels_and_the_gpunode_is_still_published() {
    // The agent never creates a Node (only the kubelet registers Nodes).
    let (_server, client) = api().await;
    let dir = tempfile::tempdir().unwrap();
    let t = t0();
    let mut agent = agent(
        &client,
        config(Policy::Report, 300, dir.path()),
        fixture_inventory("pcie-4gpu-2socket", t),
        Arc::new(RecordingKiller::default()),
        t,
    )
    .await;
    let r = agent.cycle(t).await.unwrap();
    assert!(r.published && !r.labels_applied);
    assert_eq!(status(&client).await.gpu_count, 4);
    let nodes = kube::Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    assert!(nodes.items.is_empty(), "no Node was created");
    // The kubelet registers it: the next poll labels it.
    register_node(&client, NODE).await;
    let r = agent.cycle(at(t, 5)).await.unwrap();
    assert!(r.labels_applied);
    assert_eq!(
        label(&node(&client).await, labels::NODE_GPU_COUNT),
        Some("4")
    );
}
