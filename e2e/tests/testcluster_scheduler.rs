//! The kube-scheduler stand-in: binds by required node affinity, refuses untolerated taints
//! and resources that do not fit (PodScheduled=False + FailedScheduling event, as
//! kube-scheduler words them), retries when the cluster changes, and binds many pods quickly.

mod testcluster_common;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use muster_crds::labels;
use serde_json::json;
use testcluster_common::*;

fn affinity(host: &str) -> serde_json::Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": labels::HOSTNAME, "operator": "In", "values": [host]}]}]}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_affinity_binds_to_exactly_that_node() {
    let c = start().await;
    let ns = namespace(&c, "affinity").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    let names: Vec<String> = c.nodes().iter().map(|n| n.name.clone()).collect();
    // Each pod pinned to one node, by hostname label and by metadata.name field.
    for (i, n) in names.iter().enumerate() {
        let host = c.nodes()[i].labels[labels::HOSTNAME].clone();
        pods.create(
            &PostParams::default(),
            &pod(&format!("by-label-{i}"), &[], affinity(&host)),
        )
        .await
        .unwrap();
        let fields = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}]}}}});
        pods.create(
            &PostParams::default(),
            &pod(&format!("by-name-{i}"), &[], fields),
        )
        .await
        .unwrap();
    }
    for (i, n) in names.iter().enumerate() {
        for p in [format!("by-label-{i}"), format!("by-name-{i}")] {
            let got = wait(&pods, &p, "bound", timeout(&c, 10), |p| {
                p.and_then(node_of).is_some()
            })
            .await
            .unwrap();
            assert_eq!(node_of(&got), Some(n.as_str()), "{p}");
            let sched = condition(&got, "PodScheduled").expect("PodScheduled");
            assert_eq!(sched.status, "True");
        }
    }
    if c.is_simulated() {
        let ev = wait_events(&c, &ns, "by-name-0", "Scheduled").await;
        assert_eq!(
            ev[0].message.as_deref(),
            Some(format!("Successfully assigned {ns}/by-name-0 to {}", names[0]).as_str())
        );
    }
    cleanup(&c, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untolerated_taint_blocks_until_removed() {
    let c = start().await;
    let ns = namespace(&c, "taints").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    let nodes: Api<Node> = Api::all(c.client());
    let target = c.nodes().last().unwrap().clone();
    let total = c.nodes().len();
    let taint =
        json!([{"key": "muster.dev/e2e-maintenance", "value": "yes", "effect": "NoSchedule"}]);
    let mut taints: Vec<serde_json::Value> = target
        .taints
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    let original = json!({"spec": {"taints": if taints.is_empty() { serde_json::Value::Null } else { json!(taints) }}});
    taints.extend(taint.as_array().unwrap().iter().cloned());
    nodes
        .patch(
            &target.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await
        .unwrap();
    let host = target.labels[labels::HOSTNAME].clone();
    let blocked = create_until_refused(&c, &pods, |k| {
        pod(&format!("blocked-{k}"), &[], affinity(&host))
    })
    .await;
    let blocked_name = name_of(&blocked);
    // A pod tolerating the taint goes there meanwhile.
    let mut tolerant = affinity(&host);
    tolerant["tolerations"] = json!([{"key": "muster.dev/e2e-maintenance", "operator": "Exists"}]);
    pods.create(&PostParams::default(), &pod("tolerant", &[], tolerant))
        .await
        .unwrap();
    let cond = condition(&blocked, "PodScheduled").unwrap();
    assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
    let msg = cond.message.clone().unwrap();
    assert!(
        msg.starts_with(&format!(
            "0/{total} nodes are available: 1 node(s) had untolerated taint {{muster.dev/e2e-maintenance: yes}}, {} node(s) didn't match Pod's node affinity/selector.",
            total - 1
        )),
        "{msg}"
    );
    assert!(node_of(&blocked).is_none());
    let tolerant = wait(&pods, "tolerant", "bound", timeout(&c, 10), |p| {
        p.and_then(node_of).is_some()
    })
    .await
    .unwrap();
    assert_eq!(node_of(&tolerant), Some(target.name.as_str()));
    let ev = wait_events(&c, &ns, &blocked_name, "FailedScheduling").await;
    assert!(!ev.is_empty(), "a FailedScheduling event");
    assert_eq!(ev[0].type_.as_deref(), Some("Warning"));
    assert!(
        ev[0]
            .message
            .as_deref()
            .unwrap()
            .starts_with(&format!("0/{total} nodes are available"))
    );
    // Removing the taint is a cluster change: the pod is retried and bound.
    nodes
        .patch(
            &target.name,
            &PatchParams::default(),
            &Patch::Merge(original),
        )
        .await
        .unwrap();
    let bound = wait(
        &pods,
        &blocked_name,
        "bound after the taint went",
        timeout(&c, 15),
        |p| p.and_then(node_of).is_some(),
    )
    .await
    .unwrap();
    assert_eq!(node_of(&bound), Some(target.name.as_str()));
    cleanup(&c, &ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_that_do_not_fit_are_refused() {
    let c = start().await;
    let ns = namespace(&c, "fit").await;
    let pods: Api<Pod> = Api::namespaced(c.client(), &ns);
    let total = c.nodes().len();
    let biggest = c.nodes().iter().map(|n| n.cpu_millis).max().unwrap();
    let mut huge = pod("huge", &[], json!({}));
    huge.spec.as_mut().unwrap().containers[0].resources = Some(
        serde_json::from_value(
            json!({"requests": {"cpu": format!("{}m", biggest + 1000), "memory": "1Mi"}}),
        )
        .unwrap(),
    );
    pods.create(&PostParams::default(), &huge).await.unwrap();
    let p = wait(
        &pods,
        "huge",
        "reported unschedulable",
        timeout(&c, 10),
        |p| {
            p.and_then(|p| condition(p, "PodScheduled"))
                .is_some_and(|c| c.status == "False")
        },
    )
    .await
    .unwrap();
    let msg = condition(&p, "PodScheduled")
        .unwrap()
        .message
        .clone()
        .unwrap();
    assert!(
        msg.contains(&format!("0/{total} nodes are available")),
        "{msg}"
    );
    assert!(msg.contains("Insufficient cpu"), "{msg}");
    assert!(!msg.contains("Insufficient memory"), "{msg}");
    if real_cluster_skips(&c, "exact packing needs the simulated nodes' sizes") {
        cleanup(&c, &ns).await;
        return;
    }
    // Two 5-CPU pods pinned to one 8-CPU node: one binds, the other waits for the first.
    let mut first = None;
    for name in ["half-a", "half-b"] {
        let mut p = pod(name, &[("MUSTER_SIM_RUN_SECONDS", "1")], affinity("gpu001"));
        p.spec.as_mut().unwrap().containers[0].resources =
            Some(serde_json::from_value(json!({"requests": {"cpu": "5"}})).unwrap());
        pods.create(&PostParams::default(), &p).await.unwrap();
        if first.is_none() {
            first = Some(
                wait(&pods, name, "bound", timeout(&c, 10), |p| {
                    p.and_then(node_of).is_some()
                })
                .await
                .unwrap(),
            );
        }
    }
    let b = wait(&pods, "half-b", "unschedulable", timeout(&c, 10), |p| {
        p.and_then(|p| condition(p, "PodScheduled"))
            .is_some_and(|c| c.status == "False")
    })
    .await
    .unwrap();
    assert_eq!(
        condition(&b, "PodScheduled").unwrap().message.as_deref(),
        Some(
            "0/4 nodes are available: 1 Insufficient cpu, 3 node(s) didn't match Pod's node affinity/selector."
        )
    );
    // half-a finishes after 1 s; its CPUs free up and half-b is bound.
    wait(
        &pods,
        "half-b",
        "bound once half-a finished",
        timeout(&c, 15),
        |p| p.and_then(node_of).is_some(),
    )
    .await;
    let a = pods.get("half-a").await.unwrap();
    assert_eq!(phase(&a), "Succeeded");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordoned_and_lost_nodes_are_skipped() {
    let c = start().await;
    if real_cluster_skips(&c, "fails a node") {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(c.client(), "default");
    let nodes: Api<Node> = Api::all(c.client());
    nodes
        .patch(
            "gpu001",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    c.fail_node("gpu002").await.unwrap();
    let sel = json!({"nodeSelector": {"muster.dev/leaf": "leaf1"}});
    let p = create_until_refused(&c, &pods, |k| pod(&format!("leaf1-{k}"), &[], sel.clone())).await;
    let leaf1 = name_of(&p);
    assert_eq!(
        condition(&p, "PodScheduled").unwrap().message.as_deref(),
        Some(
            "0/4 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."
        )
    );
    nodes
        .patch(
            "gpu001",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": false}})),
        )
        .await
        .unwrap();
    let p = wait(
        &pods,
        &leaf1,
        "bound after uncordon",
        timeout(&c, 15),
        |p| p.and_then(node_of).is_some(),
    )
    .await
    .unwrap();
    assert_eq!(node_of(&p), Some("gpu001"));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_pods_are_bound_quickly() {
    let c = start().await;
    if real_cluster_skips(&c, "500 pods would overrun a small real cluster") {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(c.client(), "default");
    let n = 400;
    let t0 = Instant::now();
    futures::future::join_all((0..n).map(|i| {
        let pods = pods.clone();
        async move {
            let mut p = pod(&format!("many-{i}"), &[], json!({}));
            p.spec.as_mut().unwrap().containers[0].resources = Some(
                serde_json::from_value(json!({"requests": {"cpu": "10m", "memory": "16Mi"}}))
                    .unwrap(),
            );
            pods.create(&PostParams::default(), &p).await.unwrap();
        }
    }))
    .await;
    loop {
        let list = pods.list(&ListParams::default()).await.unwrap();
        let bound = list.items.iter().filter(|p| node_of(p).is_some()).count();
        if bound == n {
            // Spread over every node (LeastAllocated), within the 110-pod limit.
            let mut per: std::collections::BTreeMap<&str, usize> = Default::default();
            for p in &list.items {
                *per.entry(node_of(p).unwrap()).or_default() += 1;
            }
            assert_eq!(per.len(), 4, "{per:?}");
            assert!(per.values().all(|&k| (80..=110).contains(&k)), "{per:?}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "only {bound}/{n} bound"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        c.scheduler_stats()
            .unwrap()
            .bound
            .load(std::sync::atomic::Ordering::Relaxed),
        n as u64
    );
    c.shutdown().await;
}
