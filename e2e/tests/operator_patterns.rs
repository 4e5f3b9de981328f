//! Each sbatch pattern of `../shared/sbatch/` as a BatchJob (what `muster sbatch` makes of
//! it), run by the operator on the API server double.

mod operator_support;

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::JobState;
use operator_support::{Env, NodeDef, batchjob, cluster};
use serde_json::json;

async fn env_with(
    nodes: usize,
    gpus: u32,
    per_leaf: usize,
) -> (Env, muster_operator::controller::Handle) {
    let env = Env::start().await;
    env.add_cluster(&cluster(nodes, per_leaf), gpus).await;
    env.default_partition().await;
    let op = env.start_operator(env.settings());
    (env, op)
}

/// gpus_per_task.sh: 2 nodes x 2 tasks x 1 GPU — every task its own GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_two_tasks_one_gpu_each() {
    let (env, op) = env_with(4, 8, 4).await;
    env.submit(batchjob(
        "gpus-per-task",
        json!({"jobName": "gpus_per_task_test", "nodes": 2, "ntasksPerNode": 2, "gpusPerTask": 1, "time": "00:10:00"}),
        2,
    ))
    .await;
    env.until_state("gpus-per-task", JobState::Running, 20)
        .await;
    let st = env.job("gpus-per-task").await.status.unwrap();
    assert_eq!(st.num_nodes, Some(2));
    assert_eq!(st.num_tasks, Some(4));
    assert_eq!(st.time_limit.as_deref(), Some("10:00"));
    // The allocation is recorded before the pods are created: wait for the gang's pods, one
    // per node, each holding its node's two tasks' GPUs (srun gives each task one).
    env.until(20, "the gang's 2 node pods", || async {
        env.pods_of("gpus-per-task").await.len() == 2
    })
    .await;
    let pods = env.pods_of("gpus-per-task").await;
    assert_eq!(pods.len(), 2);
    let mut gpus = BTreeSet::new();
    let mut per_node: BTreeMap<String, u32> = BTreeMap::new();
    for p in &pods {
        let e = Env::env(p);
        let visible = env.visible_gpus(p).await;
        assert_eq!(visible.len(), 2, "{visible:?}");
        for v in &visible {
            assert!(gpus.insert(v.clone()), "GPU shared: {e:?}");
        }
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0,1");
        assert_eq!(e["SLURM_JOB_NAME"], "gpus_per_task_test");
        assert_eq!(e["SLURM_NTASKS"], "4");
        assert_eq!(e["SLURM_NNODES"], "2");
        assert_eq!(e["SLURM_TASKS_PER_NODE"], "2(x2)");
        assert_eq!(e["SLURM_GPUS_PER_TASK"], "1");
        assert_eq!(e["WORLD_SIZE"], "4");
        assert_eq!(e["LOCAL_WORLD_SIZE"], "2");
        *per_node.entry(Env::node_of(p)).or_default() +=
            e["LOCAL_WORLD_SIZE"].parse::<u32>().unwrap();
        let res = p.spec.as_ref().unwrap().containers[0]
            .resources
            .clone()
            .unwrap_or_default();
        assert!(
            res.limits
                .unwrap_or_default()
                .keys()
                .all(|k| !k.starts_with("nvidia.com"))
        );
        // Placement by affinity, never nodeName: only a scheduler binds (the stand-in runs in
        // DRA mode, and binds to the node the affinity names).
        let bound = p.spec.as_ref().unwrap().node_name.clone();
        assert!(
            bound.is_none() || (env.scheduler.is_some() && bound == Some(Env::node_of(p))),
            "placement by affinity, never nodeName"
        );
    }
    assert_eq!(per_node.values().copied().collect::<Vec<_>>(), vec![2, 2]);
    env.until_state("gpus-per-task", JobState::Completed, 30)
        .await;
    op.shutdown().await.unwrap();
}

/// gres_mpirun.sh: 2 nodes x 2 tasks with gres gpu:4 — two GPUs per task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gres_per_node_split_between_tasks() {
    let (env, op) = env_with(2, 8, 2).await;
    env.submit(batchjob(
        "mpirun",
        json!({"jobName": "mpirun_test", "nodes": 2, "ntasksPerNode": 2, "gres": "gpu:4"}),
        1,
    ))
    .await;
    env.until_state("mpirun", JobState::Running, 20).await;
    let pods = env.until_pods("mpirun", 2, 20).await;
    assert_eq!(pods.len(), 2, "one pod per node");
    let mut seen = BTreeSet::new();
    for p in &pods {
        let e = Env::env(p);
        let devs = env.visible_gpus(p).await;
        assert_eq!(devs.len(), 4);
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0,1,2,3");
        assert_eq!(e["SLURM_GPUS_ON_NODE"], "4");
        assert_eq!(e["SLURM_GPUS_PER_NODE"], "4");
        for d in devs {
            assert!(seen.insert(d.to_string()));
        }
    }
    env.until_state("mpirun", JobState::Completed, 30).await;
    op.shutdown().await.unwrap();
}

/// typed_gpu_constraint.sh: a V100 with a feature constraint lands on a V100 node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_gpu_with_constraint() {
    let env = Env::start().await;
    env.add_nodes(&[
        NodeDef::new("h100a", 8, "leaf1"),
        NodeDef {
            name: "v100a",
            gpus: 4,
            leaf: "leaf1",
            model: Some("Tesla V100-SXM2-32GB"),
            labels: &[("muster.dev/feature.tesla_v100", "true")],
        },
    ])
    .await;
    env.default_partition().await;
    let op = env.start_operator(env.settings());
    env.submit(batchjob(
        "typed",
        json!({"jobName": "specific_gpu_task", "gres": "gpu:v100:1", "nodes": 1, "ntasksPerNode": 1,
               "constraint": "tesla_v100"}),
        1,
    ))
    .await;
    env.until_state("typed", JobState::Running, 20).await;
    let st = env.job("typed").await.status.unwrap();
    assert_eq!(st.tasks[0].node, "v100a");
    assert_eq!(st.num_gpus, Some(1));
    env.until_state("typed", JobState::Completed, 30).await;
    op.shutdown().await.unwrap();
}

/// torchrun_multinode.sh: an exclusive 8-node gang under one leaf of a 4-leaf cluster, with the
/// rendezvous environment torchrun needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_torchrun_gang_under_one_leaf() {
    let env = Env::start().await;
    env.add_cluster(&cluster(32, 8), 8).await;
    env.add_partition(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "blackwell"},
        "spec": {"default": true, "defaultImage": "nvcr.io/nvidia/pytorch:24.01-py3",
                 "topology": ["muster.dev/leaf", "kubernetes.io/hostname"]}}))
        .await;
    let op = env.start_operator(env.settings());
    // Something small already runs on leaf1 and leaf3.
    env.submit(batchjob("small-a", json!({"gpus": 1}), 60))
        .await;
    env.until_state("small-a", JobState::Running, 20).await;
    let script = "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\nsrun torchrun --nnodes=\"$SLURM_NNODES\" --nproc_per_node=8 train.py";
    env.submit(batchjob(
        "train",
        json!({"jobName": "train", "partition": "blackwell", "nodes": 8, "ntasksPerNode": 1,
               "gpusPerNode": 8, "cpusPerTask": 96, "exclusive": true, "script": script}),
        2,
    ))
    .await;
    env.until_state("train", JobState::Running, 20).await;
    let st = env.job("train").await.status.unwrap();
    assert_eq!(st.num_nodes, Some(8));
    assert_eq!(st.num_gpus, Some(64));
    let leaves: BTreeSet<String> = st
        .tasks
        .iter()
        .map(|t| {
            let i: usize = t.node.trim_start_matches("gpu").parse().unwrap();
            format!("leaf{}", (i - 1) / 8 + 1)
        })
        .collect();
    assert_eq!(leaves.len(), 1, "one leaf: {leaves:?}");
    let small = env.job("small-a").await.status.unwrap().tasks[0]
        .node
        .clone();
    assert!(st.tasks.iter().all(|t| t.node != small), "exclusive");
    let pods = env.until_pods("train", 8, 20).await;
    assert_eq!(pods.len(), 8);
    let mut node_ranks = BTreeSet::new();
    for p in &pods {
        let e = Env::env(p);
        assert_eq!(e["MASTER_ADDR"], "train-0");
        assert_eq!(e["SLURM_NNODES"], "8");
        assert_eq!(e["WORLD_SIZE"], "8");
        assert_eq!(e["SLURM_GPUS_ON_NODE"], "8");
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "0,1,2,3,4,5,6,7");
        assert_eq!(e["SLURM_JOB_NODELIST"], "train-[0-7]");
        let first =
            muster_crds::slurm::hostlist::expand(&e["SLURM_JOB_NODELIST"]).unwrap()[0].clone();
        assert_eq!(first, "train-0", "the rendezvous idiom names node 0");
        assert_eq!(e["SLURM_JOB_PARTITION"], "blackwell");
        node_ranks.insert(e["NODE_RANK"].clone());
        let s = p.spec.as_ref().unwrap();
        assert_eq!(s.subdomain.as_deref(), Some("train"));
        assert_eq!(
            s.hostname.as_deref(),
            Some(format!("train-{}", e["NODE_RANK"]).as_str())
        );
        assert_eq!(
            s.containers[0]
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "96"
        );
        assert_eq!(p.labels()[labels::JOB_ID], st.job_id.unwrap().to_string());
    }
    assert_eq!(node_ranks.len(), 8);
    let svc: k8s_openapi::api::core::v1::Service =
        kube::Api::namespaced(env.client.clone(), "default")
            .get("train")
            .await
            .unwrap();
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    env.until_state("train", JobState::Completed, 30).await;
    op.shutdown().await.unwrap();
}

/// `sbatch --array=0-15%4`: sixteen gangs, at most four at once, summarised on the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn array_sweep_with_throttle() {
    let (env, op) = env_with(4, 8, 4).await;
    env.submit(batchjob(
        "sweep",
        json!({"array": "0-15%4", "gres": "gpu:1"}),
        1,
    ))
    .await;
    let max_running = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    env.until(90, "sweep COMPLETED", || {
        let max_running = max_running.clone();
        let env = &env;
        async move {
            let list = env.jobs().list(&Default::default()).await.unwrap();
            let running = list
                .items
                .iter()
                .filter(|j| {
                    j.labels().get(labels::ARRAY_PARENT).map(String::as_str) == Some("sweep")
                })
                .filter(|j| j.status.as_ref().and_then(|s| s.state) == Some(JobState::Running))
                .count();
            max_running.fetch_max(running, std::sync::atomic::Ordering::SeqCst);
            env.state("sweep").await == Some(JobState::Completed)
        }
    })
    .await;
    let max_running = max_running.load(std::sync::atomic::Ordering::SeqCst);
    assert!(max_running <= 4, "throttle: {max_running}");
    let p = env.job("sweep").await.status.unwrap();
    let sum = p.array_tasks.unwrap();
    assert_eq!((sum.total, sum.completed), (16, 16));
    let e = env.job("sweep-7").await;
    let es = e.status.unwrap();
    assert_eq!(es.array_job_id, p.job_id);
    assert_eq!(es.array_task_id, Some(7));
    op.shutdown().await.unwrap();
}

/// `jid=$(sbatch --parsable train.sh); sbatch --dependency=afterok:$jid eval.sh`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn train_then_eval_afterok() {
    let (env, op) = env_with(1, 8, 1).await;
    env.submit(batchjob("train", json!({"gpus": 8}), 2)).await;
    env.until_state("train", JobState::Running, 20).await;
    let id = env.job("train").await.status.unwrap().job_id.unwrap();
    env.submit(batchjob(
        "eval",
        json!({"gpus": 1, "dependency": format!("afterok:{id}")}),
        1,
    ))
    .await;
    env.until(20, "eval waits on its dependency", || async {
        env.job("eval")
            .await
            .status
            .and_then(|s| s.reason)
            .as_deref()
            == Some("Dependency")
    })
    .await;
    env.until_state("train", JobState::Completed, 30).await;
    env.until_state("eval", JobState::Completed, 30).await;
    let ev = env.job("eval").await.status.unwrap();
    let tr = env.job("train").await.status.unwrap();
    assert!(ev.start_time.unwrap().0 >= tr.end_time.unwrap().0);
    op.shutdown().await.unwrap();
}
