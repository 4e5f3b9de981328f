//! pyxis's container options and the partition's per-node resources end to end: `muster
//! sbatch` with `#SBATCH --container-*` lines (no YAML) against the test control plane with the
//! real operator and its admission webhooks, checked where the user sees it — the node pods,
//! the files a job leaves on the partition's shared filesystem (pods run as local processes in
//! the kubelet's exec mode), the refusal texts of `sbatch` and `kubectl apply`, and the reason
//! of a job whose partition's nodes lost the resource its pods need.

mod e2e_support;

use e2e_support::Sim;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use muster_crds::v1alpha1::BatchJob;
use serde_json::json;

fn submitted(out: &str) -> u64 {
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("sbatch --parsable printed {out:?}"))
}

/// `muster ARGS` as user `dana` with `extra` in the submitting environment (what
/// `--container-env` reads): (success, stdout, stderr).
async fn run_env(sim: &Sim, args: &[&str], extra: &[(&str, &str)]) -> (bool, String, String) {
    let (code, out, err) = sim.run_env(args, b"", extra).await;
    (code == std::process::ExitCode::SUCCESS, out, err)
}

/// Sets (or, with `None`, removes) `rdma/ib` in the allocatable of `nodes`, as an RDMA device
/// plugin that starts (or stops) would.
async fn rdma(sim: &Sim, nodes: &[&str], n: Option<u32>) {
    let api: Api<Node> = Api::all(sim.cluster.client());
    for node in nodes {
        let q = json!({"rdma/ib": n.map(|n| n.to_string())});
        api.patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"capacity": q, "allocatable": q}})),
        )
        .await
        .unwrap();
    }
}

/// Waits until the operator's admission accepts (`admit`) or refuses a `nodes`-node job (a
/// server-side dry run): its caches have seen the nodes' new allocatable. Node changes reach
/// the operator through its watch, after the API server has them.
async fn until_admission(sim: &Sim, nodes: u32, admit: bool) {
    let job: BatchJob = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {"nodes": nodes, "script": "true"}}))
    .unwrap();
    let api = Api::<BatchJob>::namespaced(sim.cluster.client(), "default");
    let pp = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = api.create(&pp, &job).await;
        if r.is_ok() == admit {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "admission of a {nodes}-node job: still {r:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A script with pyxis's directives, run for real over two nodes: the image is the node pods'
/// (the enroot URI as an image reference), the mounts are the partition's filesystems (a path
/// inside one as a `subPath`, one by name read-only, a tmpfs), the script starts in the
/// working directory (which is `SLURM_SUBMIT_DIR`), `--container-env` takes the submitting
/// shell's value and leaves an unset name alone, and `srun` on both nodes writes through the
/// same shared directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyxis_directives_shape_the_node_pods_and_run() {
    let root = tempfile::tempdir().unwrap();
    let lustre = root.path().join("lustre");
    let datasets = root.path().join("datasets");
    std::fs::create_dir_all(&lustre).unwrap();
    std::fs::create_dir_all(&datasets).unwrap();
    std::fs::write(datasets.join("input.txt"), "imagenet\n").unwrap();
    let exec = muster_e2e::exec::ExecOptions::default();
    let sim = Sim::start_opts(
        true,
        Some(exec),
        json!({"jobEnvironment": {
            "volumes": [
                {"name": "scratch", "mountPath": "/scratch", "hostPath": lustre.to_str().unwrap()},
                {"name": "datasets", "mountPath": "/datasets", "hostPath": datasets.to_str().unwrap(),
                 "readOnly": true}],
            "shmSize": "1Gi"}}),
    )
    .await;
    let script = root.path().join("pyxis.sh");
    std::fs::write(
        &script,
        r#"#!/bin/bash
#SBATCH -N 2
#SBATCH --ntasks-per-node=1
#SBATCH --container-image=nvcr.io\#nvidia/pytorch:24.01-py3
#SBATCH --container-mounts=/scratch/run1:/ckpt
#SBATCH --container-mounts=datasets:/data:ro,tmpfs:/fast
#SBATCH --container-workdir=/ckpt
#SBATCH --container-env=MY_TOKEN,UNSET_ONE
set -e
pwd > where.txt
echo "$SLURM_SUBMIT_DIR" >> where.txt
echo "token=$MY_TOKEN unset=${UNSET_ONE-none}" > env.txt
cat /data/input.txt > copied.txt
srun bash -c 'echo "node $SLURM_NODEID" > /ckpt/node-$SLURM_NODEID.txt'
# Hold the pods until the test has looked at them.
while [ ! -e /ckpt/go ]; do sleep 0.2; done
"#,
    )
    .unwrap();
    let (ok, out, err) = run_env(
        &sim,
        &["sbatch", "--parsable", script.to_str().unwrap()],
        &[("MY_TOKEN", "s3cret")],
    )
    .await;
    assert!(ok, "{err}");
    let id = submitted(&out);
    let run1 = lustre.join("run1");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !run1.join("node-1.txt").exists() || !run1.join("node-0.txt").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the job wrote nothing to {}: {:?}",
            run1.display(),
            sim.run(&["scontrol", "show", "job", &id.to_string()]).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let running = inspect(&sim, id).await;
    std::fs::write(run1.join("go"), "").unwrap();
    let done = sim
        .until_sacct(&id.to_string(), "JobID,State,ExitCode", |o| {
            o.lines().any(|l| {
                l.starts_with(&format!("{id}|"))
                    && !l.contains("|PENDING|")
                    && !l.contains("|RUNNING|")
            })
        })
        .await;
    assert!(
        done.lines()
            .any(|l| l.starts_with(&format!("{id}|COMPLETED|0:0"))),
        "{done}"
    );

    assert_eq!(running, 2);

    // What the job left on the shared filesystem.
    let read =
        |f: &str| std::fs::read_to_string(run1.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    assert_eq!(read("where.txt"), "/ckpt\n/ckpt\n");
    assert_eq!(read("env.txt"), "token=s3cret unset=none\n");
    assert_eq!(read("copied.txt"), "imagenet\n");
    assert_eq!(read("node-0.txt"), "node 0\n");
    assert_eq!(read("node-1.txt"), "node 1\n");
    sim.stop().await;
}

/// The job's spec and its node pods as the user sees them with `kubectl get -o yaml`: the
/// pyxis fields as written, and what they became in each pod. Returns the number of pods.
async fn inspect(sim: &Sim, id: u64) -> usize {
    let job = Api::<BatchJob>::namespaced(sim.cluster.client(), "default")
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|j| j.status.as_ref().and_then(|s| s.job_id) == Some(id))
        .unwrap();
    assert_eq!(
        job.spec.container_mounts.as_deref(),
        Some("/scratch/run1:/ckpt,datasets:/data:ro,tmpfs:/fast")
    );
    assert_eq!(
        job.spec.container_image.as_deref(),
        Some("nvcr.io#nvidia/pytorch:24.01-py3")
    );
    let names = sim.pods_of(id).await;
    let pods: Api<Pod> = Api::namespaced(sim.cluster.client(), "default");
    for name in &names {
        let pod = pods.get(name).await.unwrap();
        let c = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(c.image.as_deref(), Some("nvcr.io/nvidia/pytorch:24.01-py3"));
        assert_eq!(c.working_dir.as_deref(), Some("/ckpt"));
        let m: Vec<(&str, &str, Option<&str>, Option<bool>)> = c
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| {
                !m.mount_path.starts_with("/muster") && !m.mount_path.starts_with("/var/run")
            })
            .map(|m| {
                (
                    m.name.as_str(),
                    m.mount_path.as_str(),
                    m.sub_path.as_deref(),
                    m.read_only,
                )
            })
            .collect();
        for want in [
            ("scratch", "/scratch", None, None),
            ("datasets", "/datasets", None, Some(true)),
            ("scratch", "/ckpt", Some("run1"), None),
            ("datasets", "/data", None, Some(true)),
            ("muster-tmpfs-0", "/fast", None, None),
        ] {
            assert!(m.contains(&want), "{want:?} not in {m:?}");
        }
        let env: Vec<(&str, Option<&str>)> = c
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.as_str(), e.value.as_deref()))
            .collect();
        assert!(env.contains(&("MY_TOKEN", Some("s3cret"))), "{env:?}");
        assert!(
            env.contains(&("SLURM_SUBMIT_DIR", Some("/ckpt"))),
            "{env:?}"
        );
        assert!(!env.iter().any(|(n, _)| *n == "UNSET_ONE"), "{env:?}");
    }
    names.len()
}

/// What the partition cannot give is refused at `sbatch` and at `kubectl apply` with the same
/// words, naming what it does allow; pyxis options a pod cannot honour are refused with the
/// reason. A partition whose pods need `rdma/ib` takes only nodes that have it: refused while
/// no node has any, placed on the nodes that do, and a job whose nodes lose it waits Stalled
/// with the resource named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_partition_cannot_give_is_refused_or_waits_named() {
    let sim = Sim::start_opts(
        true,
        None,
        json!({"jobEnvironment": {
            "volumes": [{"name": "scratch", "mountPath": "/scratch", "claimName": "scratch"}],
            "resources": {"rdma/ib": 1}}}),
    )
    .await;
    let nodes: Vec<String> = sim.cluster.nodes().iter().map(|n| n.name.clone()).collect();
    assert!(nodes.len() >= 3, "{nodes:?}");

    // No node has rdma/ib yet.
    let (ok, _, err) = sim.run(&["sbatch", "-N", "1", "--wrap", "true"]).await;
    assert!(!ok);
    assert!(
        err.contains("Requested node configuration is not available")
            && err.contains(
                "resource rdma/ib: partition blackwell's jobEnvironment gives every node pod 1, no node of partition blackwell has any"
            ),
        "{err}"
    );
    let no_rdma = r#"apiVersion: muster.dev/v1alpha1
kind: BatchJob
metadata: {name: no-rdma, namespace: default}
spec: {nodes: 1, script: "true"}
"#;
    if let Some((ok, out, err)) = sim
        .kubectl(false, &["apply", "-f", "-"], Some(no_rdma))
        .await
    {
        assert!(!ok, "applied: {out}");
        assert!(err.contains("resource rdma/ib"), "{err}");
    }

    // Two nodes get it: a two-node job runs on exactly those; a three-node job is refused.
    let with: Vec<&str> = nodes[..2].iter().map(String::as_str).collect();
    rdma(&sim, &with, Some(4)).await;
    until_admission(&sim, 2, true).await;
    let (ok, out, err) = sim
        .run(&["sbatch", "--parsable", "-N", "2", "--wrap", "sleep 1000"])
        .await;
    assert!(ok, "{err}");
    let id = submitted(&out);
    sim.until_state(id, "RUNNING").await;
    // RUNNING is written before the pods exist, and a pod has its node once it is bound.
    let mut placed = Vec::new();
    for pod in sim.until_pods_running(id).await {
        placed.push(pod.spec.unwrap().node_name.unwrap_or_default());
    }
    placed.sort();
    assert_eq!(placed, with, "placed only where rdma/ib is");
    let (ok, _, _) = sim.run(&["scancel", &id.to_string()]).await;
    assert!(ok);
    let (ok, _, err) = sim.run(&["sbatch", "-N", "3", "--wrap", "true"]).await;
    assert!(!ok);
    assert!(
        err.contains("nodes: 3 requested, 2 of partition blackwell's"),
        "{err}"
    );

    // A held job whose nodes lose rdma/ib: released, it waits Stalled with the resource named.
    let (ok, out, err) = sim
        .run(&["sbatch", "--parsable", "-H", "-N", "1", "--wrap", "true"])
        .await;
    assert!(ok, "{err}");
    let held = submitted(&out);
    rdma(&sim, &with, None).await;
    until_admission(&sim, 1, false).await;
    let (ok, _, err) = sim.run(&["scontrol", "release", &held.to_string()]).await;
    assert!(ok, "{err}");
    let line = sim
        .until_squeue(held, "%T|%r", |l| l.contains("BadConstraints"))
        .await;
    assert_eq!(line.trim(), "PENDING|BadConstraints");
    let job = Api::<BatchJob>::namespaced(sim.cluster.client(), "default")
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|j| j.status.as_ref().and_then(|s| s.job_id) == Some(held))
        .unwrap();
    let st = job.status.unwrap();
    assert!(
        st.message
            .as_deref()
            .unwrap_or("")
            .contains("resource rdma/ib"),
        "{:?}",
        st.message
    );
    let stalled = st.conditions.iter().find(|c| c.type_ == "Stalled").unwrap();
    assert_eq!(stalled.status, "True");
    assert!(stalled.message.contains("rdma/ib"), "{}", stalled.message);
    rdma(&sim, &with, Some(4)).await;
    until_admission(&sim, 1, true).await;

    // --container-mounts naming what the partition lacks: the list of what it has.
    let (ok, _, err) = sim
        .run(&[
            "sbatch",
            "--container-mounts=/home/dana:/home/dana",
            "--wrap",
            "true",
        ])
        .await;
    assert!(!ok);
    assert!(
        err.contains(
            "--container-mounts /home/dana:/home/dana: /home/dana is not on a shared filesystem of the partition: the partition's shared filesystems are scratch (at /scratch)"
        ),
        "{err}"
    );
    let bad_mount = r#"apiVersion: muster.dev/v1alpha1
kind: BatchJob
metadata: {name: bad-mount, namespace: default}
spec: {nodes: 1, script: "true", containerMounts: "home:/home"}
"#;
    if let Some((ok, out, err)) = sim
        .kubectl(false, &["apply", "-f", "-"], Some(bad_mount))
        .await
    {
        assert!(!ok, "applied: {out}");
        assert!(
            err.contains("home is not a shared filesystem of the partition")
                && err.contains("scratch (at /scratch)"),
            "{err}"
        );
    }
    // Grammar the API server checks itself (CEL).
    let bad_grammar = r#"apiVersion: muster.dev/v1alpha1
kind: BatchJob
metadata: {name: bad-grammar, namespace: default}
spec: {nodes: 1, script: "true", containerMounts: "scratch:/a,,tmpfs:/b", containerWorkdir: "rel"}
"#;
    if let Some((ok, out, err)) = sim
        .kubectl(false, &["apply", "-f", "-"], Some(bad_grammar))
        .await
    {
        assert!(!ok, "applied: {out}");
        assert!(
            err.contains("containerMounts must be SRC[:DST[:FLAGS]] entries")
                && err.contains("containerWorkdir must be an absolute path"),
            "{err}"
        );
    }

    // A claim only one node can mount at a time: a two-node job is refused, naming it.
    let pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "scratch", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}}))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        sim.cluster.client(),
        "default",
    )
    .create(&Default::default(), &pvc)
    .await
    .unwrap();
    let (ok, _, err) = sim.run(&["sbatch", "-N", "2", "--wrap", "true"]).await;
    assert!(!ok);
    assert!(
        err.contains(
            "volume scratch: partition blackwell's shared filesystem \"scratch\" is PersistentVolumeClaim scratch of namespace default, which is ReadWriteOnce (one node mounts it at a time); a job on 2 nodes needs it ReadWriteMany"
        ),
        "{err}"
    );
    let (ok, out, err) = sim
        .run(&["sbatch", "--parsable", "-N", "1", "--wrap", "true"])
        .await;
    assert!(ok, "{err}");
    submitted(&out);

    // pyxis options a pod cannot honour: refused, each with its reason (both in one run).
    let (ok, _, err) = sim
        .run(&[
            "sbatch",
            "--container-save=/scratch/img.sqsh",
            "--container-remap-root",
            "--wrap",
            "true",
        ])
        .await;
    assert!(!ok);
    for words in [
        "--container-save (pyxis) is not supported by Muster: Kubernetes cannot save a running container",
        "--container-remap-root (pyxis) is not supported by Muster: the user inside a pod",
    ] {
        assert!(err.contains(words), "{words:?} not in {err}");
    }
    // Values a pod cannot take (the command line stops at its first bad value, as clap does).
    for (arg, words) in [
        (
            "--container-unshare=net",
            "a job's network is its partition's",
        ),
        (
            "--container-image=/lustre/images/pytorch.sqsh",
            "a squashfs file cannot be a pod's image",
        ),
    ] {
        let (ok, _, err) = sim.run(&["sbatch", arg, "--wrap", "true"]).await;
        assert!(!ok);
        assert!(err.contains(words), "{words:?} not in {err}");
    }
    // Those a pod honours anyway are accepted.
    let (ok, out, err) = sim
        .run(&[
            "sbatch",
            "--parsable",
            "--container-writable",
            "--no-container-entrypoint",
            "--no-container-mount-home",
            "--container-unshare=ipc,uts",
            "--container-name=dev:exec",
            "--wrap",
            "true",
        ])
        .await;
    assert!(ok, "{err}");
    submitted(&out);
    assert!(
        err.contains("--container-name=dev:exec: every step of the job runs in its node pods' containers already"),
        "{err}"
    );
    sim.stop().await;
}
