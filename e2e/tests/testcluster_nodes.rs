//! Simulated nodes: a cluster spec becomes Ready Nodes with the right labels, capacity and
//! taints, and GpuNodes with the GPUs, topology and a heartbeat.

mod testcluster_common;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use muster_crds::labels;
use muster_crds::v1alpha1::{GpuHealthState, GpuNode};
use muster_e2e::{TestCluster, TestClusterOptions};
use muster_operator::core::cluster_spec::ClusterSpec;
use testcluster_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_ready_with_labels_capacity_and_gpunodes() {
    let c = start().await;
    let nodes: Api<Node> = Api::all(c.client());
    let gns: Api<GpuNode> = Api::all(c.client());
    assert!(!c.nodes().is_empty());
    for info in c.nodes() {
        let n = nodes.get(&info.name).await.expect("node exists");
        let l = n.metadata.labels.clone().unwrap_or_default();
        assert_eq!(l[labels::HOSTNAME], info.name);
        let st = n.status.as_ref().unwrap();
        let ready = st
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True", "{} is Ready", info.name);
        let alloc = st.allocatable.as_ref().unwrap();
        assert!(
            alloc.contains_key("cpu") && alloc.contains_key("memory") && alloc.contains_key("pods")
        );
        if !info.gpus.is_empty() {
            let g = gns.get(&info.name).await.expect("GpuNode exists");
            assert_eq!(g.spec.node_name, info.name);
            let s = g.status.expect("GpuNode status");
            assert_eq!(s.gpu_count as usize, info.gpus.len());
            assert!(s.heartbeat_time.is_some());
            assert_eq!(l[labels::NODE_GPU_COUNT], info.gpus.len().to_string());
        }
    }
    if real_cluster_skips(&c, "the exact values below are the simulated spec's") {
        return;
    }
    let n = nodes.get("gpu003").await.unwrap();
    let l = n.metadata.labels.unwrap();
    assert_eq!(l["muster.dev/leaf"], "leaf2");
    assert_eq!(l["muster.dev/spine"], "spine1");
    assert_eq!(l[labels::NODE_GPU_PRODUCT], "NVIDIA-H100-80GB-HBM3");
    assert_eq!(l[labels::NODE_GPU_MEMORY], "81559");
    let st = n.status.unwrap();
    assert_eq!(st.capacity.as_ref().unwrap()["cpu"].0, "8");
    assert_eq!(st.allocatable.as_ref().unwrap()["memory"].0, "33554432Ki");
    assert_eq!(st.allocatable.as_ref().unwrap()["pods"].0, "110");
    assert_eq!(st.node_info.unwrap().kubelet_version, "v1.32.0");
    let g = gns.get("gpu003").await.unwrap().status.unwrap();
    assert_eq!(g.healthy_gpus, 4);
    assert_eq!(g.gpus[2].uuid, c.nodes()[2].gpus[2].uuid);
    assert_eq!(g.gpus[3].numa_node, Some(1));
    assert_eq!(g.gpus[0].nvlink_peers, vec![1, 2, 3]);
    assert_eq!(g.topology[1][2], "NV18");
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        4
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_taints_and_overrides_reach_the_nodes() {
    let spec = ClusterSpec::from_yaml(include_str!("../../examples/clusters/mixed.yaml")).unwrap();
    let c = TestCluster::start(spec).await.unwrap();
    if real_cluster_skips(&c, "needs the mixed.yaml nodes") {
        return;
    }
    let nodes: Api<Node> = Api::all(c.client());
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        32
    );
    let l40s = nodes.get("gpu025").await.unwrap();
    let t = l40s.spec.unwrap().taints.unwrap();
    assert_eq!(
        (t[0].key.as_str(), t[0].effect.as_str()),
        ("muster.dev/pcie", "NoSchedule")
    );
    assert_eq!(
        l40s.metadata.labels.unwrap()["muster.dev/feature.l40s"],
        "true"
    );
    let gns: Api<GpuNode> = Api::all(c.client());
    let g = gns.get("gpu025").await.unwrap().status.unwrap();
    assert_eq!(g.gpu_count, 4);
    assert_eq!(g.topology[0][1], "PIX");
    assert_eq!(g.topology[0][3], "SYS");
    let a100 = gns.get("gpu017").await.unwrap().status.unwrap();
    assert_eq!(a100.gpus[0].model, "NVIDIA A100-SXM4-80GB");
    assert_eq!(a100.topology[0][1], "NV12");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_health_and_heartbeats_are_published() {
    let opts = TestClusterOptions::new(spec());
    let c = TestCluster::start_with(opts).await.unwrap();
    if real_cluster_skips(&c, "GPU faults need the simulated node agent") {
        return;
    }
    let gns: Api<GpuNode> = Api::all(c.client());
    let before = gns.get("gpu002").await.unwrap().status.unwrap();
    c.set_gpu_health(
        "gpu002",
        1,
        false,
        Some(79),
        "XID 79: GPU has fallen off the bus",
    )
    .await
    .unwrap();
    let s = gns.get("gpu002").await.unwrap().status.unwrap();
    assert_eq!(s.healthy_gpus, 3);
    assert_eq!(s.gpus[1].health.state, GpuHealthState::Unhealthy);
    assert_eq!(s.gpus[1].health.last_xid, Some(79));
    assert_eq!(s.gpus[0].health.state, GpuHealthState::Healthy);
    // The heartbeat (30 s of simulated time) moves on and keeps the health.
    c.clock().advance(std::time::Duration::from_secs(31));
    let first = before.heartbeat_time.clone().unwrap().0;
    let later = wait(&gns, "gpu002", "heartbeat renewed", timeout(&c, 5), |g| {
        g.and_then(|g| g.status.as_ref())
            .and_then(|s| s.heartbeat_time.as_ref())
            .is_some_and(|t| t.0 > first)
    })
    .await
    .unwrap();
    let ls = later.status.unwrap();
    assert_eq!(ls.healthy_gpus, 3, "the heartbeat keeps the GPU unhealthy");
    let err = c
        .set_gpu_health("gpu002", 9, false, None, "")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("has no GPU 9 (it has 4)"), "{err}");
    let err = c
        .set_gpu_health("nope", 0, false, None, "")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("no simulated node named \"nope\""),
        "{err}"
    );
    c.shutdown().await;
}
