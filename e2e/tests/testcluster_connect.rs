//! The real-cluster path of `TestCluster` (`MUSTER_E2E_KUBECONFIG`), exercised against the API
//! server double standing in for a real cluster: CRDs installed when missing, nodes and GPUs
//! read from the cluster, simulation-only handles refused, node commands run.

use std::path::Path;

use muster_e2e::apiserver::{ApiServer, ApiServerOptions};
use muster_e2e::cluster::{ClusterError, NodeCommands};
use muster_e2e::{TestCluster, nodes};
use muster_operator::core::cluster_spec::ClusterSpec;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_reads_a_clusters_nodes_and_refuses_simulation_handles() {
    // A "real" cluster: no muster CRDs yet, nodes registered by someone else.
    let server = ApiServer::start(ApiServerOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    let spec = ClusterSpec::from_yaml(include_str!("../../examples/clusters/mixed.yaml")).unwrap();
    let infos = spec.build().unwrap();
    // Register the nodes without GpuNodes first: the CRD is not there yet.
    nodes::register(&server.client(), &infos, jiff::Timestamp::now(), false, 8)
        .await
        .unwrap();
    let mut c = TestCluster::connect(&path).await.unwrap();
    assert!(!c.is_simulated());
    assert!(c.faults().is_none() && c.api_server().is_none() && c.kubelet_stats().is_none());
    assert_eq!(c.kubeconfig(), path.as_path());
    // The CRDs were installed: GpuNodes can now be written, and a second connect sees them.
    nodes::register(&c.client(), &infos, jiff::Timestamp::now(), true, 8)
        .await
        .unwrap();
    let c2 = TestCluster::connect(&path).await.unwrap();
    let got = c2.nodes();
    assert_eq!(got.len(), 32);
    for (g, want) in got.iter().zip(&infos) {
        assert_eq!(g.name, want.name);
        assert_eq!(g.cpu_millis, want.cpu_millis);
        assert_eq!(g.memory_mib, want.memory_mib);
        assert_eq!(g.taints, want.taints);
        assert_eq!(g.gpus, want.gpus);
        assert_eq!(g.topology, want.topology);
        for (k, v) in &want.labels {
            assert_eq!(g.labels.get(k), Some(v), "{} label {k}", g.name);
        }
    }
    // What needs the simulation says so.
    let e = c.finish_pod("default", "p", 0).await.unwrap_err();
    assert!(
        matches!(e, ClusterError::Unsupported(_))
            && e.to_string().contains("MUSTER_E2E_KUBECONFIG"),
        "{e}"
    );
    let e = c
        .set_gpu_health("gpu001", 0, false, None, "")
        .await
        .unwrap_err();
    assert!(matches!(e, ClusterError::Unsupported(_)), "{e}");
    c.set_node_commands(NodeCommands::default());
    let e = c.fail_node("gpu001").await.unwrap_err();
    assert!(e.to_string().contains("MUSTER_E2E_FAIL_NODE_CMD"), "{e}");
    // Node commands run with the node name.
    let log = dir.path().join("log");
    c.set_node_commands(NodeCommands {
        fail: Some(format!("echo down {{node}} >> {}", log.display())),
        recover: Some("exit 3".into()),
    });
    c.fail_node("gpu007").await.unwrap();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "down gpu007\n");
    let e = c.recover_node("gpu007").await.unwrap_err();
    assert!(e.to_string().contains("`exit 3` failed"), "{e}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_bad_kubeconfig_is_named() {
    let e = TestCluster::connect(Path::new("/nonexistent/kubeconfig"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/kubeconfig"), "{e}");
}
