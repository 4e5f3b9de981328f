//! Every example runs: each file of `examples/batchjobs/` is applied, and each script of
//! `examples/sbatch/` submitted with `muster sbatch`, on the sandbox's cluster
//! (`examples/clusters/sandbox.yaml`, the sandbox's default partition) with the real operator,
//! and reaches the state its comment promises (`On muster sandbox: …`). Simulated tasks run
//! for `MUSTER_SIM_RUN_SECONDS`, as `muster sbatch --export=ALL,MUSTER_SIM_RUN_SECONDS=…` sets it.

mod conformance;

use std::path::PathBuf;

use conformance::{Seen, World};
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use muster_operator::core::cluster_spec::ClusterSpec;
use serde_json::{Value, json};

/// Seconds a simulated task runs.
const RUN: &str = "2";

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// The sandbox's cluster and its default partition, as `muster sandbox` creates them.
async fn sandbox(cluster: &str) -> World {
    let yaml = std::fs::read_to_string(examples().join("clusters").join(cluster)).unwrap();
    let spec = ClusterSpec::from_yaml(&yaml).unwrap();
    World::start_with(
        &yaml,
        vec![(
            "gpu".into(),
            json!({"default": true, "topology": spec.topology(),
                   "defaultImage": muster_cli::sandbox::SANDBOX_IMAGE}),
        )],
    )
    .await
}

/// Why the sandbox refuses the typed-GPU example (no node has an A100).
const A100_REFUSAL: &str = "GPU type a100: no node of partition gpu has one";

/// What a file's comment promises, and how the test sees it happen.
#[derive(Clone, Copy, Debug)]
enum Promise {
    /// COMPLETED after the simulated run.
    Completes,
    /// Refused at submission (`sbatch`, and `kubectl apply` through the operator's admission
    /// webhook) with these words. The test's operator runs without webhooks, so an applied
    /// file is seen, as a job admitted before its partition shrank would be, waiting
    /// BadConstraints with the same words (the submission check's text).
    Refused(&'static str),
    /// Pending (Resources) for the switch wait, then COMPLETED.
    WaitsThenCompletes(i64),
    /// RUNNING until scancel, then CANCELLED.
    RunsUntilCancelled,
}

/// (file, cluster, the words of its promise, the promise, BatchJob names in the file in order)
const BATCHJOBS: &[(&str, &str, &str, Promise)] = &[
    (
        "single-gpu.yaml",
        "sandbox.yaml",
        "On `muster sandbox`: COMPLETED",
        Promise::Completes,
    ),
    (
        "mpirun-2x2.yaml",
        "sandbox.yaml",
        "On `muster sandbox`: COMPLETED",
        Promise::Completes,
    ),
    (
        "typed-gpu-constraint.yaml",
        "sandbox.yaml",
        "On `muster sandbox` (H100 nodes only): refused at submission",
        Promise::Refused(A100_REFUSAL),
    ),
    (
        "typed-gpu-constraint.yaml",
        "mixed.yaml",
        "examples/clusters/mixed.yaml`, whose gpu017-gpu024 are\n# A100 80GB nodes with feature a100_80gb: runs there and is COMPLETED",
        Promise::Completes,
    ),
    (
        "torchrun-8-nodes.yaml",
        "sandbox.yaml",
        "PENDING with reason Resources\n# for the 30-minute switch wait, then runs over two leaves and is COMPLETED",
        Promise::WaitsThenCompletes(30 * 60),
    ),
    (
        "array-sweep.yaml",
        "sandbox.yaml",
        "the array COMPLETED with the last",
        Promise::Completes,
    ),
    (
        "train-eval-chain.yaml",
        "sandbox.yaml",
        "On `muster sandbox`: train COMPLETED, eval PENDING with reason Dependency until then, and\n# COMPLETED after",
        Promise::Completes,
    ),
    (
        "ray-cluster.yaml",
        "sandbox.yaml",
        "On `muster sandbox`: COMPLETED",
        Promise::Completes,
    ),
    (
        "interactive.yaml",
        "sandbox.yaml",
        "On `muster sandbox`: RUNNING until scancel (CANCELLED)",
        Promise::RunsUntilCancelled,
    ),
];

/// Adds the simulated run time to a BatchJob's first container (as `sbatch --export` does).
fn with_run_time(mut obj: Value) -> Value {
    let spec = &mut obj["spec"];
    if spec.get("template").is_none() {
        spec["template"] = json!({"spec": {"containers": [{"name": "task"}]}});
    }
    let c = &mut spec["template"]["spec"]["containers"][0];
    let mut env = c
        .get("env")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    env.push(json!({"name": "MUSTER_SIM_RUN_SECONDS", "value": RUN}));
    c["env"] = Value::Array(env);
    obj
}

async fn apply(w: &World, obj: &Value) {
    let kind = obj["kind"].as_str().unwrap();
    let (group, version) = match obj["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            obj["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let plural = format!("{}s", kind.to_lowercase());
    let ar = kube::api::ApiResource {
        group: group.clone(),
        version: version.clone(),
        api_version: obj["apiVersion"].as_str().unwrap().to_string(),
        kind: kind.to_string(),
        plural: if kind == "PersistentVolumeClaim" {
            "persistentvolumeclaims".into()
        } else {
            plural
        },
    };
    let api: Api<DynamicObject> = Api::namespaced_with(w.cluster.client(), "default", &ar);
    let o: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    api.create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("applying {kind}: {e}"));
}

async fn until_state(w: &World, name: &str, state: &str) {
    w.until(name, state, |s| match s {
        Seen::Ended(x) => x == state,
        Seen::Running { .. } => state == "RUNNING",
        _ => false,
    })
    .await;
}

/// Sees `names` (in order) keep `promise`.
async fn keeps(w: &World, names: &[String], promise: Promise, what: &str) {
    match promise {
        Promise::Completes => {
            for n in names {
                until_state(w, n, "COMPLETED").await;
            }
        }
        Promise::Refused(words) => {
            for n in names {
                let s = w
                    .until(
                        n,
                        "BadConstraints",
                        |s| matches!(s, Seen::Pending { reason, message, .. } if reason == "BadConstraints" && message.contains(words)),
                    )
                    .await;
                tokio::time::sleep(std::time::Duration::from_millis(600)).await;
                assert_eq!(w.observe(n).await, Some(s), "{what}: {n} changed");
            }
        }
        Promise::WaitsThenCompletes(secs) => {
            for n in names {
                w.until(
                    n,
                    "Resources",
                    |s| matches!(s, Seen::Pending { reason, .. } if reason == "Resources"),
                )
                .await;
                tokio::time::sleep(std::time::Duration::from_millis(600)).await;
                assert!(
                    matches!(w.observe(n).await, Some(Seen::Pending { .. })),
                    "{what}: {n} started before its wait was over"
                );
                w.shift(secs + 1);
                until_state(w, n, "COMPLETED").await;
            }
        }
        Promise::RunsUntilCancelled => {
            for n in names {
                until_state(w, n, "RUNNING").await;
                let id = w
                    .job(n)
                    .await
                    .and_then(|j| j.status)
                    .and_then(|s| s.job_id)
                    .expect("a job id")
                    .to_string();
                let (ok, _, err) = w.muster("dana", &["scancel", &id]).await;
                assert!(ok, "{what}: scancel: {err}");
                until_state(w, n, "CANCELLED").await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_batchjob_example_reaches_its_promised_state() {
    let dir = examples().join("batchjobs");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    for f in &files {
        assert!(
            BATCHJOBS.iter().any(|b| b.0 == f),
            "examples/batchjobs/{f} has no promise in this test"
        );
    }
    for &(file, cluster, words, promise) in BATCHJOBS {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(
            text.contains(words),
            "examples/batchjobs/{file} does not promise {words:?}"
        );
        let w = sandbox(cluster).await;
        let mut names = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = <Value as serde::Deserialize>::deserialize(doc).unwrap();
            if v.is_null() {
                continue;
            }
            let v = if v["kind"] == "BatchJob" {
                names.push(v["metadata"]["name"].as_str().unwrap().to_string());
                let v = if matches!(promise, Promise::RunsUntilCancelled) {
                    v
                } else {
                    with_run_time(v)
                };
                let mut v = v;
                v["metadata"]["annotations"]["muster.dev/user"] = json!("dana");
                v
            } else {
                v
            };
            apply(&w, &v).await;
        }
        keeps(&w, &names, promise, &format!("{file} on {cluster}")).await;
        eprintln!("ok {file} on {cluster}");
        w.stop().await;
    }
}

/// (script, cluster, the BatchJob example it mirrors, its promise) — a script keeps the promise
/// of the BatchJob it mirrors.
const SCRIPTS: &[(&str, &str, Promise)] = &[
    ("single-gpu.sh", "sandbox.yaml", Promise::Completes),
    ("mpirun-2x2.sh", "sandbox.yaml", Promise::Completes),
    (
        "typed-gpu-constraint.sh",
        "sandbox.yaml",
        Promise::Refused(A100_REFUSAL),
    ),
    ("typed-gpu-constraint.sh", "mixed.yaml", Promise::Completes),
    (
        "torchrun-8-nodes.sh",
        "sandbox.yaml",
        Promise::WaitsThenCompletes(30 * 60),
    ),
    ("array-sweep.sh", "sandbox.yaml", Promise::Completes),
    ("ray-cluster.sh", "sandbox.yaml", Promise::Completes),
    (
        "interactive.sh",
        "sandbox.yaml",
        Promise::RunsUntilCancelled,
    ),
];

/// `muster sbatch --parsable [ARGS] SCRIPT`: the new job's BatchJob name.
async fn sbatch(w: &World, script: &str, args: &[&str], run: bool) -> String {
    let path = format!("../examples/sbatch/{script}");
    let export = format!("--export=ALL,MUSTER_SIM_RUN_SECONDS={RUN}");
    let mut a = vec!["sbatch", "--parsable"];
    if run {
        a.push(&export);
    }
    a.extend_from_slice(args);
    a.push(&path);
    let (ok, out, err) = w.muster("dana", &a).await;
    assert!(ok, "sbatch {script}: {err}");
    let id: u64 = out.trim().parse().unwrap_or_else(|_| panic!("{out:?}"));
    let jobs: Api<muster_crds::v1alpha1::BatchJob> = Api::namespaced(w.cluster.client(), "default");
    jobs.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|j| j.status.as_ref().and_then(|s| s.job_id) == Some(id))
        .and_then(|j| j.metadata.name)
        .expect("the submitted job")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sbatch_example_reaches_its_promised_state() {
    let mut scripts: Vec<String> = std::fs::read_dir(examples().join("sbatch"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    scripts.sort();
    for s in &scripts {
        assert!(
            SCRIPTS.iter().any(|x| x.0 == s) || s == "train.sh" || s == "eval.sh",
            "examples/sbatch/{s} has no promise in this test"
        );
    }
    for &(script, cluster, promise) in SCRIPTS {
        let w = sandbox(cluster).await;
        if let Promise::Refused(words) = promise {
            let path = format!("../examples/sbatch/{script}");
            let (ok, _, err) = w.muster("dana", &["sbatch", &path]).await;
            assert!(
                !ok && err.contains(
                    "Batch job submission failed: Requested node configuration is not available"
                ) && err.contains(words),
                "sbatch {script} on {cluster}: {err}"
            );
            eprintln!("ok {script} on {cluster}");
            w.stop().await;
            continue;
        }
        let run = !matches!(promise, Promise::RunsUntilCancelled);
        let name = sbatch(&w, script, &[], run).await;
        keeps(&w, &[name], promise, &format!("{script} on {cluster}")).await;
        eprintln!("ok {script} on {cluster}");
        w.stop().await;
    }
    // train.sh, then eval.sh depending on train's job id (the README's two commands).
    let w = sandbox("sandbox.yaml").await;
    let (ok, out, err) = w
        .muster(
            "dana",
            &[
                "sbatch",
                "--parsable",
                &format!("--export=ALL,MUSTER_SIM_RUN_SECONDS={RUN}"),
                "../examples/sbatch/train.sh",
            ],
        )
        .await;
    assert!(ok, "{err}");
    let train = out.trim().to_string();
    let eval = sbatch(
        &w,
        "eval.sh",
        &[&format!("--dependency=afterok:{train}")],
        true,
    )
    .await;
    w.until(&eval, "Dependency", |s| {
        matches!(s, Seen::Pending { reason, .. } if reason == "Dependency")
            || matches!(s, Seen::Running { .. })
            || *s == Seen::Ended("COMPLETED".into())
    })
    .await;
    until_state(&w, &eval, "COMPLETED").await;
    w.stop().await;
}
