//! The operator end to end on the API server double: sbatch patterns, lifecycle, writes.

mod operator_support;

use muster_crds::v1alpha1::JobState;
use operator_support::{Env, NodeDef, batchjob};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_gpu_job_runs_and_completes() {
    let env = Env::start().await;
    env.add_nodes(&[
        NodeDef::new("gpu001", 8, "leaf1"),
        NodeDef::new("gpu002", 8, "leaf1"),
    ])
    .await;
    env.default_partition().await;
    let op = env.start_operator(env.settings());
    env.submit(batchjob(
        "one",
        json!({"gres": "gpu:1", "nodes": 1, "ntasksPerNode": 1}),
        1,
    ))
    .await;
    env.until_state("one", JobState::Running, 20).await;
    let j = env.job("one").await;
    let st = j.status.clone().unwrap();
    assert_eq!(st.job_id, Some(1));
    assert_eq!(st.tasks.len(), 1);
    let pods = env.until_pods("one", 1, 20).await;
    assert_eq!(pods.len(), 1);
    env.until_state("one", JobState::Completed, 20).await;
    // Metrics are recorded once the cycle's writes return.
    env.until(5, "the transition metric", || async {
        op.metrics
            .render()
            .contains("muster_job_transitions_total{state=\"COMPLETED\"} 1")
    })
    .await;
    let text = op.metrics.render();
    assert!(
        text.contains("muster_api_writes_total{kind=\"pod_create\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("muster_gpus{partition=\"gpu\",state=\"total\"} 16"),
        "{text}"
    );
    op.shutdown().await.unwrap();
}
