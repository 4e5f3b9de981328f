//! Time limits, cancel, task failure, node failure with requeue, preemption and backfill, end
//! to end on the API server double.

mod operator_support;

use std::sync::atomic::Ordering;

use kube::api::{Patch, PatchParams};
use muster_crds::v1alpha1::JobState;
use operator_support::{Env, NodeDef, batchjob, cluster};
use serde_json::json;

async fn setup(nodes: usize) -> (Env, muster_operator::controller::Handle) {
    let env = Env::start().await;
    env.add_cluster(&cluster(nodes, nodes), 8).await;
    env.default_partition().await;
    let op = env.start_operator(env.settings());
    (env, op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_limit_ends_in_timeout() {
    let (env, op) = setup(1).await;
    env.submit(batchjob("slow", json!({"gpus": 2, "time": 1}), 3600))
        .await;
    env.until_state("slow", JobState::Running, 20).await;
    // A minute passes (the operator's clock jumps).
    env.offset.store(61, Ordering::SeqCst);
    env.until_state("slow", JobState::Timeout, 20).await;
    let st = env.job("slow").await.status.unwrap();
    assert_eq!(st.reason.as_deref(), Some("TimeLimit"));
    env.until(20, "pods stopped", || async {
        env.pods_of("slow").await.is_empty()
    })
    .await;
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scancel_stops_pods_and_keeps_the_record() {
    let (env, op) = setup(1).await;
    env.submit(batchjob("c", json!({"gpus": 1}), 3600)).await;
    env.until_state("c", JobState::Running, 20).await;
    env.jobs()
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cancel": true}})),
        )
        .await
        .unwrap();
    env.until_state("c", JobState::Cancelled, 20).await;
    env.until(20, "pods stopped", || async {
        env.pods_of("c").await.is_empty()
    })
    .await;
    let j = env.job("c").await;
    let st = j.status.unwrap();
    assert_eq!(st.tasks.len(), 1, "record kept");
    assert_eq!(st.observed_generation, j.metadata.generation);
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_task_fails_the_gang_with_its_exit_code() {
    let (env, op) = setup(2).await;
    let mut j = batchjob(
        "f",
        json!({"nodes": 2, "ntasksPerNode": 1, "gpusPerNode": 1}),
        1,
    );
    // Node 0's pod runs the batch script: its exit code is the job's (as in Slurm).
    j["spec"]["template"]["metadata"]["annotations"]["sim/fail-rank"] = json!("0");
    j["spec"]["template"]["metadata"]["annotations"]["sim/exit"] = json!("3");
    env.submit(j).await;
    env.until_state("f", JobState::Failed, 30).await;
    let st = env.job("f").await.status.unwrap();
    assert_eq!(st.exit_code, Some(3));
    assert!(st.message.unwrap().contains("the batch script"));
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_failure_requeues_elsewhere() {
    let (env, op) = setup(2).await;
    env.submit(batchjob("nf", json!({"gpus": 8}), 3)).await;
    env.until_state("nf", JobState::Running, 20).await;
    let first = env.job("nf").await.status.unwrap().tasks[0].node.clone();
    env.set_node_ready(&first, false).await;
    env.until(30, "requeued onto the other node", || async {
        let st = env.job("nf").await.status.unwrap();
        st.state == Some(JobState::Running) && st.attempt == Some(2)
    })
    .await;
    let st = env.job("nf").await.status.unwrap();
    assert_eq!(st.restarts, Some(1));
    assert_ne!(st.tasks[0].node, first);
    env.until_state("nf", JobState::Completed, 30).await;
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_tier_preempts_a_lower_gang() {
    let env = Env::start().await;
    env.add_nodes(&[
        NodeDef::new("gpu001", 8, "leaf1"),
        NodeDef::new("gpu002", 8, "leaf1"),
    ])
    .await;
    for (name, tier, default, mode) in [("low", 0, true, "Requeue"), ("high", 10, false, "None")] {
        env.add_partition(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "Partition", "metadata": {"name": name},
            "spec": {"default": default, "priorityTier": tier, "preemptMode": mode,
                     "defaultImage": "busybox:1.36", "graceTimeSeconds": 0}}))
            .await;
    }
    let op = env.start_operator(env.settings());
    env.submit(batchjob(
        "low1",
        json!({"nodes": 2, "gpusPerNode": 8}),
        3600,
    ))
    .await;
    env.until_state("low1", JobState::Running, 20).await;
    env.submit(batchjob(
        "urgent",
        json!({"partition": "high", "gpus": 8}),
        1,
    ))
    .await;
    env.until_state("urgent", JobState::Running, 30).await;
    let low = env.job("low1").await.status.unwrap();
    assert_eq!(low.state, Some(JobState::Pending));
    assert_eq!(low.restarts, Some(1));
    assert!(
        op.metrics
            .render()
            .contains("muster_preemptions_total{partition=\"low\"} 1")
    );
    op.shutdown().await.unwrap();
}

/// A small job starts ahead of a waiting big gang only when it ends before the gang's
/// reservation; one that would delay it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_never_delays_the_reservation() {
    let (env, op) = setup(2).await;
    env.submit(batchjob("running", json!({"gpus": 8, "time": 10}), 3600))
        .await;
    env.until_state("running", JobState::Running, 20).await;
    env.submit(batchjob(
        "big",
        json!({"nodes": 2, "gpusPerNode": 8, "time": 30}),
        3600,
    ))
    .await;
    env.until(20, "big has a reservation", || async {
        env.job("big")
            .await
            .status
            .and_then(|s| s.start_time)
            .is_some()
    })
    .await;
    let reserved = env.job("big").await.status.unwrap().start_time.unwrap();
    env.submit(batchjob("short", json!({"gpus": 4, "time": 5}), 3600))
        .await;
    env.submit(batchjob("long", json!({"gpus": 4, "time": 20}), 3600))
        .await;
    env.until_state("short", JobState::Running, 20).await;
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let long = env.job("long").await.status.unwrap();
    assert_eq!(
        long.state,
        Some(JobState::Pending),
        "would delay the reservation"
    );
    let big = env.job("big").await.status.unwrap();
    assert_eq!(big.state, Some(JobState::Pending));
    assert_eq!(big.start_time.unwrap(), reserved, "reservation unchanged");
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_of_the_same_name_owned_elsewhere_holds_the_pods_until_it_goes() {
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    use kube::Api;
    use kube::api::{DeleteParams, PostParams};
    let (env, op) = setup(2).await;
    // An earlier object's Service under the name the job's will take (as an earlier job's is
    // until the garbage collector removes it), owned by a ConfigMap that still exists.
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let cm = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "old"}})).unwrap(),
        )
        .await
        .unwrap();
    let svcs: Api<Service> = Api::namespaced(env.client.clone(), "default");
    svcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "pair", "ownerReferences": [{"apiVersion": "v1",
                "kind": "ConfigMap", "name": "old", "uid": cm.metadata.uid.unwrap()}]},
            "spec": {"clusterIP": "None", "selector": {"app": "old"}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    env.submit(batchjob("pair", json!({"nodes": 2, "gpusPerNode": 1}), 3))
        .await;
    env.until_state("pair", JobState::Running, 20).await;
    // Cycles go by (300 ms apart here): no pod while the name is another's.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(
        env.pods_of("pair").await.is_empty(),
        "no pod without its own Service"
    );
    // The owner goes, the collector takes its Service, and the job's own comes with its pods.
    cms.delete("old", &DeleteParams::default()).await.unwrap();
    env.until_pods("pair", 2, 20).await;
    let svc = svcs.get("pair").await.unwrap();
    let job = env.job("pair").await;
    assert_eq!(
        svc.metadata.owner_references.unwrap()[0].uid,
        job.metadata.uid.unwrap()
    );
    env.until_state("pair", JobState::Completed, 30).await;
    op.shutdown().await.unwrap();
}
