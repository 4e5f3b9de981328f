//! The partition's job environment (`spec.jobEnvironment`) end to end: `muster sbatch` with no
//! YAML against the test control plane with the real operator (and its admission webhooks),
//! checked where the user sees it — the pods, the refusal message, and, in the kubelet's exec
//! mode (pods run as local processes), files one job leaves for the next on the partition's
//! shared filesystem.

mod e2e_support;

use std::path::PathBuf;

use e2e_support::Sim;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn submitted(out: &str) -> u64 {
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("sbatch --parsable printed {out:?}"))
}

/// Every node advertises `n` RDMA HCAs, as an RDMA device plugin would.
async fn advertise_rdma(sim: &Sim, n: u32) {
    let nodes: Api<Node> = Api::all(sim.cluster.client());
    for node in sim.cluster.nodes() {
        let q = json!({"rdma/ib": n.to_string()});
        nodes
            .patch_status(
                &node.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"capacity": q, "allocatable": q}})),
            )
            .await
            .unwrap();
    }
    // The operator's admission judges placement on its own cache of the nodes: wait until it
    // has seen every one of them (a server-side dry run of a job on all nodes is accepted; a
    // one-node probe passed as soon as the first patch arrived, and a job on all nodes was then
    // refused with "2 of partition blackwell's 8 nodes match").
    let all = sim.cluster.nodes().len();
    let job: muster_crds::v1alpha1::BatchJob = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {"nodes": all, "script": "true"}}))
    .unwrap();
    let api = Api::namespaced(sim.cluster.client(), "default");
    let pp = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while let Err(e) = api.create(&pp, &job).await {
        assert!(
            std::time::Instant::now() < deadline,
            "admission never saw rdma/ib: {e}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A Partition with a shared volume, `/dev/shm`, an RDMA resource, `IPC_LOCK`, a Multus
/// network and NCCL's variables: a plain `sbatch` job's pods carry all of it and run (the
/// scheduler places them only on nodes with the RDMA resource); a job that mounts its own
/// volume where the partition mounts the shared one is refused at `kubectl apply` with the
/// reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitions_job_environment_reaches_every_pod() {
    let sim = Sim::start_opts(
        true,
        None,
        json!({"jobEnvironment": {
            "volumes": [{"name": "scratch", "mountPath": "/scratch", "claimName": "scratch"}],
            "shmSize": "32Gi",
            "resources": {"rdma/ib": 1},
            "capabilities": ["IPC_LOCK"],
            "annotations": {"k8s.v1.cni.cncf.io/networks": "ib-compute"},
            "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}]}}),
    )
    .await;
    advertise_rdma(&sim, 8).await;

    let (ok, out, err) = sim
        .run(&[
            "sbatch",
            "--parsable",
            "-N",
            "2",
            "--gpus-per-node=8",
            "--mem=64G",
            "--wrap",
            "sleep 1000",
        ])
        .await;
    assert!(ok, "{err}");
    let id = submitted(&out);
    sim.until_state(id, "RUNNING").await;
    // The job is RUNNING before its pods exist, and they are Pending until bound; waiting for
    // them to run is also the check that they were scheduled on nodes with rdma/ib.
    let running = sim.until_pods_running(id).await;
    assert_eq!(running.len(), 2, "{:?}", sim.pods_of(id).await);
    for pod in &running {
        let name = pod.metadata.name.as_deref().unwrap();
        let spec = pod.spec.as_ref().unwrap();
        let vols = spec.volumes.as_ref().unwrap();
        let scratch = vols.iter().find(|v| v.name == "scratch").expect("scratch");
        assert_eq!(
            scratch.persistent_volume_claim.as_ref().unwrap().claim_name,
            "scratch"
        );
        let c = &spec.containers[0];
        // The volume at /dev/shm (node pods have other emptyDirs: the step binary's).
        let shm_name = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == "/dev/shm")
            .map(|m| m.name.clone())
            .expect("a /dev/shm mount");
        let shm = vols
            .iter()
            .find(|v| v.name == shm_name)
            .expect("the /dev/shm volume");
        let ed = shm.empty_dir.as_ref().expect("an emptyDir at /dev/shm");
        assert_eq!(ed.medium.as_deref(), Some("Memory"));
        assert_eq!(ed.size_limit.as_ref().unwrap().0, "32Gi");
        let mounts: Vec<(&str, &str)> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.name.as_str(), m.mount_path.as_str()))
            .collect();
        assert!(mounts.contains(&("scratch", "/scratch")), "{mounts:?}");
        assert!(
            mounts.contains(&(shm.name.as_str(), "/dev/shm")),
            "{mounts:?}"
        );
        let r = c.resources.as_ref().unwrap();
        // The node pod holds the job's share of its node: `--mem` is per node in Slurm.
        assert_eq!(r.requests.as_ref().unwrap()["memory"].0, "65536Mi");
        assert_eq!(r.requests.as_ref().unwrap()["rdma/ib"].0, "1");
        assert_eq!(r.limits.as_ref().unwrap()["rdma/ib"].0, "1");
        let caps = c.security_context.as_ref().unwrap().capabilities.as_ref();
        assert_eq!(
            caps.unwrap().add.as_deref(),
            Some(&["IPC_LOCK".to_string()][..])
        );
        let env: Vec<_> = c.env.iter().flatten().collect();
        assert!(
            env.iter()
                .any(|e| e.name == "NCCL_IB_HCA" && e.value.as_deref() == Some("mlx5"))
        );
        assert!(
            env.iter().any(|e| e.name == "SLURM_JOB_ID"),
            "Muster's own env stays"
        );
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()["k8s.v1.cni.cncf.io/networks"],
            "ib-compute"
        );
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running"),
            "{name} was scheduled on a node with rdma/ib"
        );
    }
    let (ok, _, err) = sim.run(&["scancel", &id.to_string()]).await;
    assert!(ok, "{err}");

    // A job volume mounted at the partition's /scratch: refused by the operator's admission.
    let job = r#"apiVersion: muster.dev/v1alpha1
kind: BatchJob
metadata: {name: own-scratch, namespace: default}
spec:
  gpus: 1
  template:
    spec:
      containers:
        - name: task
          command: [sh, -c, "ls /scratch"]
          volumeMounts: [{name: mine, mountPath: /scratch}]
      volumes: [{name: mine, emptyDir: {}}]
"#;
    if let Some((ok, out, err)) = sim.kubectl(false, &["apply", "-f", "-"], Some(job)).await {
        assert!(!ok, "applied: {out}");
        assert!(
            err.contains("partition blackwell")
                && err.contains("mounts volume \"mine\" at /scratch")
                && err.contains("shared filesystem \"scratch\""),
            "{err}"
        );
    }
    sim.stop().await;
}

/// Node pods hold the partition's extended resources: with one `rdma/ib` per node, a job on
/// every node leaves none, so a second job waits (reason `Resources`, its message naming
/// `rdma/ib`) instead of getting a node pod kube-scheduler cannot bind beside a started rest;
/// once the first job ends, it starts and its pod is bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waits_for_the_rdma_running_jobs_hold() {
    let sim = Sim::start_opts(
        true,
        None,
        json!({"jobEnvironment": {"resources": {"rdma/ib": 1}}}),
    )
    .await;
    advertise_rdma(&sim, 1).await;
    let sbatch = |nodes: &'static str| {
        let sim = &sim;
        async move {
            let (ok, out, err) = sim
                .run(&[
                    "sbatch",
                    "--parsable",
                    "-N",
                    nodes,
                    "--gpus-per-node=1",
                    "--wrap",
                    "sleep 1000",
                ])
                .await;
            assert!(ok, "{err}");
            submitted(&out)
        }
    };
    let first = sbatch("8").await;
    sim.until_state(first, "RUNNING").await;
    // The job is RUNNING before its pods exist; they are Running a moment later.
    sim.until_pods_running(first).await;
    let second = sbatch("1").await;
    sim.until_squeue(second, "%T %r", |l| l == "PENDING Resources")
        .await;
    let (ok, out, err) = sim
        .run(&["scontrol", "show", "job", &second.to_string()])
        .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("partition blackwell also requests rdma/ib: 1, which running jobs hold on 8 of the 8 node(s)"),
        "{out}"
    );
    // Nothing of the second job was created: no pod left Pending by kube-scheduler.
    assert!(sim.pods_of(second).await.is_empty());
    let pods: Api<Pod> = Api::namespaced(sim.cluster.client(), "default");
    for p in pods.list(&Default::default()).await.unwrap().items {
        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
        assert_ne!(phase.as_deref(), Some("Pending"), "{:?}", p.metadata.name);
    }
    let (ok, _, err) = sim.run(&["scancel", &first.to_string()]).await;
    assert!(ok, "{err}");
    sim.until_state(second, "RUNNING").await;
    sim.until_pods_running(second).await;
    sim.stop().await;
}

/// `examples/sbatch/train.sh` then `eval.sh` with `--dependency=afterok`, sbatch alone: the
/// partition mounts the shared `/checkpoints` (a directory of the nodes) in every pod, the two
/// training nodes write their shards there and the evaluation job reads them and writes its
/// report there. Pods run as local processes (exec mode); `torchrun` and `python` are small
/// stand-ins in the job image that do what the scripts ask of them with the files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn train_and_eval_share_a_checkpoint_through_the_partitions_filesystem() {
    let checkpoints = tempfile::tempdir().unwrap();
    let image = tempfile::tempdir().unwrap();
    let bin = image.path().join("usr/local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let write = |name: &str, body: &str| {
        use std::os::unix::fs::PermissionsExt;
        let p = bin.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    // srun torchrun ... train.py --save DIR: each node's torchrun (one srun task per node)
    // writes its shard of the checkpoint.
    write(
        "torchrun",
        "#!/bin/sh\nset -e\nwhile [ $# -gt 0 ]; do [ \"$1\" = --save ] && dir=$2; shift; done\n\
         mkdir -p \"$dir\"\necho \"node $SLURM_NODEID of $SLURM_NNODES\" > \"$dir/shard-$SLURM_NODEID.pt\"\n",
    );
    // python eval.py --checkpoint DIR --report FILE: reads every shard, writes the report.
    write(
        "python",
        "#!/bin/sh\nset -e\nwhile [ $# -gt 0 ]; do case $1 in --checkpoint) ck=$2;; --report) rep=$2;; esac; shift; done\n\
         n=$(cat \"$ck\"/shard-*.pt | wc -l)\necho \"{\\\"shards\\\": $n}\" > \"$rep\"\n",
    );
    let exec = muster_e2e::exec::ExecOptions {
        images: vec![("busybox".into(), image.path().to_path_buf())],
        ..Default::default()
    };
    let dir = checkpoints.path().to_str().unwrap().to_string();
    let sim = Sim::start_opts(
        true,
        Some(exec),
        json!({"jobEnvironment": {
            "volumes": [{"name": "checkpoints", "mountPath": "/checkpoints", "hostPath": dir}],
            "shmSize": "1Gi"}}),
    )
    .await;
    let train = examples().join("sbatch/train.sh");
    let eval = examples().join("sbatch/eval.sh");
    let (ok, out, err) = sim
        .run(&["sbatch", "--parsable", train.to_str().unwrap()])
        .await;
    assert!(ok, "{err}");
    let tid = submitted(&out);
    let dep = format!("--dependency=afterok:{tid}");
    let (ok, out, err) = sim
        .run(&["sbatch", "--parsable", &dep, eval.to_str().unwrap()])
        .await;
    assert!(ok, "{err}");
    let eid = submitted(&out);
    let ids = format!("{tid},{eid}");
    let done = sim
        .until_sacct(&ids, "JobID,State,ExitCode", |o| {
            let ended = |id: u64| {
                o.lines().any(|l| {
                    l.starts_with(&format!("{id}|"))
                        && !l.contains("|PENDING|")
                        && !l.contains("|RUNNING|")
                })
            };
            ended(tid) && ended(eid)
        })
        .await;
    for id in [tid, eid] {
        assert!(
            done.lines()
                .any(|l| l.starts_with(&format!("{id}|COMPLETED|0:0"))),
            "{done}"
        );
    }
    let run = checkpoints.path().join("run-1");
    for shard in ["shard-0.pt", "shard-1.pt"] {
        assert!(run.join(shard).is_file(), "{shard} in {}", run.display());
    }
    let report = std::fs::read_to_string(run.join("eval.json")).unwrap();
    assert_eq!(report.trim(), "{\"shards\": 2}");
    sim.stop().await;
}
