//! GPU health as the node agent publishes it, seen by the operator: an unhealthy GPU gets no
//! new work (a job needing it waits with `ReqNodeNotAvail` or goes elsewhere), a recovered one
//! is used again, and a job on a GPU that turns unhealthy ends NODE_FAIL — requeued unless
//! `requeue: false`.

mod operator_support;

use std::collections::BTreeSet;

use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use muster_crds::v1alpha1::{BatchJobStatus, GpuHealthState, GpuNode, JobState};
use operator_support::{Env, NodeDef, batchjob};
use serde_json::json;

/// Writes GPU `gpu`'s health into `node`'s GpuNode status as the node agent does: server-side
/// apply of the whole status under the agent's field manager, `healthyGpus` recounted.
async fn agent_sets_health(env: &Env, node: &str, gpu: u32, unhealthy: Option<u32>) {
    let api: Api<GpuNode> = Api::all(env.client.clone());
    let mut st = api.get(node).await.unwrap().status.unwrap();
    let now = jiff::Timestamp::now();
    let g = st.gpus.iter_mut().find(|g| g.index == gpu).unwrap();
    g.health.since = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    match unhealthy {
        Some(xid) => {
            g.health.state = GpuHealthState::Unhealthy;
            g.health.last_xid = Some(xid);
            g.health.reason = Some(format!("XID {xid}: GPU has fallen off the bus"));
        }
        None => {
            g.health.state = GpuHealthState::Healthy;
            g.health.reason = Some("reset detected: fixture reset event".into());
        }
    }
    st.healthy_gpus = st
        .gpus
        .iter()
        .filter(|g| g.health.state == GpuHealthState::Healthy)
        .count() as u32;
    api.patch_status(
        node,
        &PatchParams::apply("muster-node-agent").force(),
        &Patch::Apply(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "GpuNode",
            "metadata": {"name": node}, "status": st})),
    )
    .await
    .unwrap();
}

async fn status(env: &Env, job: &str) -> BatchJobStatus {
    env.job(job).await.status.unwrap_or_default()
}

fn gpus_of(st: &BatchJobStatus) -> BTreeSet<(String, u32)> {
    st.tasks
        .iter()
        .flat_map(|t| t.gpus.iter().map(|g| (t.node.clone(), *g)))
        .collect()
}

/// (reason, note) of the Events about BatchJob `job`.
async fn job_events(env: &Env, job: &str) -> Vec<(String, String)> {
    Api::<Event>::namespaced(env.client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(job))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_gpu_gets_no_new_work_until_it_recovers() {
    let env = Env::start().await;
    env.add_nodes(&[NodeDef::new("gpu001", 8, "leaf1")]).await;
    env.default_partition().await;
    agent_sets_health(&env, "gpu001", 3, Some(79)).await;
    let op = env.start_operator(env.settings());

    // 7 GPUs: placed on the 7 healthy ones.
    env.submit(batchjob("seven", json!({"gpus": 7}), 3600))
        .await;
    env.until_state("seven", JobState::Running, 20).await;
    let st = status(&env, "seven").await;
    let got: Vec<u32> = gpus_of(&st).into_iter().map(|(_, g)| g).collect();
    assert_eq!(got, [0, 1, 2, 4, 5, 6, 7]);
    env.until(20, "the task pod", || async {
        !env.pods_of("seven").await.is_empty()
    })
    .await;
    let pod = &env.pods_of("seven").await[0];
    let visible = env.visible_gpus(pod).await;
    assert_eq!(visible.len(), 7, "{visible:?}");
    assert!(
        !visible.contains(&"GPU-gpu001-3".to_string()),
        "{visible:?}"
    );

    // All 8 GPUs of one node: it could only run with the unhealthy GPU, so it waits, and
    // says why.
    env.submit(batchjob(
        "eight",
        json!({"nodes": 1, "gpusPerNode": 8}),
        3600,
    ))
    .await;
    env.until(20, "eight pending with a reason", || async {
        status(&env, "eight").await.reason.as_deref() == Some("ReqNodeNotAvail")
    })
    .await;
    assert_eq!(status(&env, "eight").await.state, Some(JobState::Pending));

    // A healthy node joins: the 8-GPU job goes there.
    env.add_nodes(&[NodeDef::new("gpu002", 8, "leaf1")]).await;
    env.until_state("eight", JobState::Running, 20).await;
    let st = status(&env, "eight").await;
    assert!(
        st.tasks.iter().all(|t| t.node == "gpu002"),
        "{:?}",
        st.tasks
    );
    assert_eq!(gpus_of(&st).len(), 8);

    // Everything healthy is taken: a 1-GPU job waits...
    env.submit(batchjob("one", json!({"gpus": 1}), 3600)).await;
    env.until(20, "one pending", || async {
        let st = status(&env, "one").await;
        st.state == Some(JobState::Pending) && st.reason.is_some()
    })
    .await;
    // ... until the agent reports GPU 3 healthy again; then it gets exactly that GPU.
    agent_sets_health(&env, "gpu001", 3, None).await;
    env.until_state("one", JobState::Running, 20).await;
    let got = gpus_of(&status(&env, "one").await);
    assert_eq!(got, BTreeSet::from([("gpu001".to_string(), 3)]));
    env.check_no_double_gpu().await.unwrap();
    op.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_failing_under_a_job_ends_it_node_fail_requeued_unless_told_not_to() {
    let env = Env::start().await;
    env.add_nodes(&[
        NodeDef::new("gpu001", 8, "leaf1"),
        NodeDef::new("gpu002", 8, "leaf1"),
    ])
    .await;
    env.default_partition().await;
    let op = env.start_operator(env.settings());

    // Whole-node jobs (one node, its 8 GPUs): a job of 8 GPUs anywhere could run on 7 + 1.
    env.submit(batchjob("req", json!({"nodes": 1, "gpusPerNode": 8}), 3600))
        .await;
    env.submit(batchjob(
        "noreq",
        json!({"nodes": 1, "gpusPerNode": 8, "requeue": false}),
        3600,
    ))
    .await;
    env.until_state("req", JobState::Running, 20).await;
    env.until_state("noreq", JobState::Running, 20).await;
    let req_node = status(&env, "req").await.tasks[0].node.clone();
    let noreq_node = status(&env, "noreq").await.tasks[0].node.clone();
    assert_ne!(req_node, noreq_node);

    // GPU 5 under `req` fails: NODE_FAIL, requeued (attempt 2), and it cannot run anywhere
    // now (its node has a bad GPU, the other is busy).
    agent_sets_health(&env, &req_node, 5, Some(79)).await;
    env.until(20, "req requeued", || async {
        let st = status(&env, "req").await;
        st.attempt == Some(2) && st.state == Some(JobState::Pending)
    })
    .await;
    let st = status(&env, "req").await;
    assert_eq!(st.restarts, Some(1));
    // The NODE_FAIL is on record in the job's Events, naming the GPU and the node.
    env.until(20, "NodeFail and Requeued events", || async {
        let evs = job_events(&env, "req").await;
        evs.iter().any(|(r, _)| r == "Requeued")
            && evs.iter().any(|(r, n)| {
                r == "NodeFail"
                    && n.contains(&format!(
                        "GPU 5 (GPU-{req_node}-5) of node {req_node} is unhealthy"
                    ))
            })
    })
    .await;
    env.until(20, "the failed attempt's pods gone", || async {
        env.pods_of("req").await.is_empty()
    })
    .await;

    // GPU 0 under `noreq` fails: NODE_FAIL for good.
    agent_sets_health(&env, &noreq_node, 0, Some(79)).await;
    env.until_state("noreq", JobState::NodeFail, 20).await;
    let st = status(&env, "noreq").await;
    assert_eq!(st.attempt, Some(1), "not requeued");
    assert!(
        st.message.unwrap_or_default().contains("unhealthy"),
        "the message says why"
    );
    env.until(20, "noreq's pods gone", || async {
        env.pods_of("noreq").await.is_empty()
    })
    .await;

    // Both nodes have a bad GPU: `req` waits, and says it is for lack of healthy nodes.
    env.until(20, "req waits with ReqNodeNotAvail", || async {
        status(&env, "req").await.reason.as_deref() == Some("ReqNodeNotAvail")
    })
    .await;
    // The first GPU recovers: `req` runs again, attempt 2, on that node.
    agent_sets_health(&env, &req_node, 5, None).await;
    env.until_state("req", JobState::Running, 20).await;
    let st = status(&env, "req").await;
    assert_eq!(st.attempt, Some(2));
    assert!(st.tasks.iter().all(|t| t.node == req_node));
    env.until(20, "attempt 2 pods", || async {
        let pods = env.pods_of("req").await;
        !pods.is_empty()
            && pods
                .iter()
                .all(|p| p.labels().get("muster.dev/attempt").map(String::as_str) == Some("2"))
    })
    .await;
    env.check_no_double_gpu().await.unwrap();
    op.shutdown().await.unwrap();
}
