//! Issue 15's bullets, replayed as a user would on the sandbox's control plane (API server
//! double, simulated nodes, scheduler and kubelet, the real operator with its admission
//! webhooks): `muster sbatch`/`squeue`/`scancel`/`sacct` as `dana`, and the real `kubectl`.
//! Every bullet ends in a refusal with its reason or a state a user can act on.
//!
//! The cluster: 2 leaves x 4 nodes x 8 H100 GPUs (224 CPUs, 2 TiB each), default partition
//! `blackwell`.

mod e2e_support;

use std::time::Duration;

use e2e_support::{Sim, WAIT};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use muster_crds::v1alpha1::{BatchJob, GpuNode, Partition};
use muster_e2e::kstatus::{self, Status};
use muster_e2e::kubelet::{EXIT_CODE, RUN_SECONDS};
use serde_json::{Value, json};

async fn batchjobs(sim: &Sim) -> Vec<BatchJob> {
    Api::<BatchJob>::namespaced(sim.cluster.client(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

async fn get(sim: &Sim, name: &str) -> Value {
    let j = Api::<BatchJob>::namespaced(sim.cluster.client(), "default")
        .get(name)
        .await
        .unwrap();
    serde_json::to_value(j).unwrap()
}

fn condition(job: &Value, t: &str) -> Option<(String, String)> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .map(|c| {
            (
                c["status"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap().to_string(),
            )
        })
}

/// Polls the BatchJob until `done`.
async fn until(sim: &Sim, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let j = get(sim, name).await;
        if done(&j) {
            return j;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: {what} not reached: {}",
            j["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A BatchJob manifest for kubectl, running `secs` seconds and exiting `code`.
fn manifest(name: &str, spec: Value, secs: u32, code: u8) -> String {
    let mut spec = spec;
    if spec.get("script").is_none() && spec.get("template").is_none() {
        spec["script"] = json!("hostname");
    }
    if spec.get("template").is_none() {
        spec["template"] = json!({"metadata": {"annotations": {
            RUN_SECONDS: secs.to_string(), EXIT_CODE: code.to_string()}}});
    }
    serde_yaml::to_string(&json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec}))
    .unwrap()
}

/// sbatch refuses what its own `--test-only` says can never start, as Slurm does, naming the
/// resource and the largest that exists; nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sbatch_refuses_what_can_never_run() {
    let sim = Sim::start().await;
    let noimg: Partition = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "noimg"}, "spec": {}}))
    .unwrap();
    Api::<Partition>::all(sim.cluster.client())
        .create(&PostParams::default(), &noimg)
        .await
        .unwrap();
    let refused = "sbatch: error: Batch job submission failed: ";
    for (args, why) in [
        (
            vec!["-N", "20"],
            "Requested node configuration is not available (nodes: 20 requested, partition blackwell has 8)",
        ),
        (
            vec!["-G", "200"],
            "Requested node configuration is not available (GPUs: 200 requested, the most partition blackwell can give the job is 64)",
        ),
        (
            vec!["--gpus-per-node=9"],
            "Requested node configuration is not available (GPUs: 9 per node requested, the most on one node of partition blackwell is 8)",
        ),
        (
            vec!["--gpus=a100:1"],
            "Requested node configuration is not available (GPU type a100: no node of partition blackwell has one (its GPUs: NVIDIA H100 80GB HBM3))",
        ),
        (
            vec!["-c", "1000"],
            "Requested node configuration is not available (CPUs: 1000 per node requested, the most on one node of partition blackwell is 224)",
        ),
        (
            vec!["--mem=10T"],
            "Requested node configuration is not available (memory: 10T per node requested, the most on one node of partition blackwell is 2T)",
        ),
        (
            vec!["-p", "noimg"],
            "Invalid job specification (image: container \"task\" gives none and partition noimg has no defaultImage)",
        ),
    ] {
        let mut argv = vec!["sbatch"];
        argv.extend(args.iter().copied());
        argv.extend(["--wrap", "hostname"]);
        let (ok, out, err) = sim.run(&argv).await;
        assert!(!ok, "{args:?} was accepted: {out}");
        assert_eq!(err.trim_end(), format!("{refused}{why}"), "{args:?}");
    }
    // --test-only says the same, through the same check.
    let (ok, _, err) = sim
        .run(&["sbatch", "--test-only", "--gpus-per-node=9", "--wrap", "x"])
        .await;
    assert!(!ok);
    assert!(
        err.contains("Requested node configuration is not available (GPUs: 9 per node"),
        "{err}"
    );
    assert!(batchjobs(&sim).await.is_empty(), "nothing was created");
    sim.stop().await;
}

/// kubectl apply refuses at once what the operator would park forever: specs CEL can judge
/// alone, and (the admission webhook) what the partition's nodes can never hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_refuses_invalid_and_impossible_specs() {
    let sim = Sim::start().await;
    let long = "a".repeat(100);
    let cases = [
        (
            "rev",
            json!({"array": "5-1"}),
            "array ranges LO-HI need LO <= HI",
        ),
        (
            "huge",
            json!({"array": "0-1000000"}),
            "array indices must be at most 1000",
        ),
        (
            "eight",
            json!({"gpusPerNode": "eight"}),
            "GPU counts must be COUNT or TYPE:COUNT",
        ),
        (
            long.as_str(),
            json!({}),
            "metadata.name must be at most 63 characters",
        ),
        (
            "empty",
            json!({"template": {"metadata": {"labels": {"a": "b"}}}}),
            "nothing to run",
        ),
        (
            "nine",
            json!({"gpusPerNode": 9}),
            "admission webhook \"batchjobs.validate.muster.dev\" denied the request: Requested node configuration is not available: GPUs: 9 per node requested, the most on one node of partition blackwell is 8",
        ),
    ];
    for (name, spec, why) in cases {
        let mut m: Value = serde_yaml::from_str(&manifest(name, spec.clone(), 1, 0)).unwrap();
        if name == "empty" {
            m["spec"].as_object_mut().unwrap().remove("script");
        }
        let Some((ok, out, err)) = sim
            .kubectl(false, &["apply", "-f", "-"], Some(&m.to_string()))
            .await
        else {
            return;
        };
        assert!(!ok, "{name} was applied: {out}");
        assert!(err.contains(why), "{name}: {err}");
    }
    assert!(batchjobs(&sim).await.is_empty(), "nothing was created");
    sim.stop().await;
}

/// A partition that does not exist, or a dependency on a job that does not exist: admitted
/// (GitOps may create them next) with a warning, shown as Stalled with the reason; scancel
/// ends them, and every other state too — held, waiting, arrays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_jobs_say_why_and_scancel_ends_every_state() {
    let sim = Sim::start().await;
    let Some((ok, _, err)) = sim
        .kubectl(
            false,
            &["apply", "-f", "-"],
            Some(&manifest("lost", json!({"partition": "nosuch"}), 1, 0)),
        )
        .await
    else {
        return;
    };
    assert!(ok, "{err}");
    assert!(
        err.contains("Warning: partition nosuch does not exist"),
        "{err}"
    );
    let lost = until(&sim, "lost", "stalled", |j| {
        condition(j, "Stalled").is_some_and(|c| c.0 == "True")
    })
    .await;
    assert_eq!(lost["status"]["state"], "PENDING");
    assert_eq!(lost["status"]["reason"], "PartitionConfig");
    assert_eq!(condition(&lost, "Stalled").unwrap().1, "PartitionNotFound");
    assert_eq!(kstatus::compute(&lost).status, Status::Failed);

    let (ok, _, err) = sim
        .kubectl(
            false,
            &["apply", "-f", "-"],
            Some(&manifest(
                "orphan",
                json!({"dependency": "afterok:99999"}),
                1,
                0,
            )),
        )
        .await
        .unwrap();
    assert!(ok, "{err}");
    let orphan = until(&sim, "orphan", "stalled", |j| {
        condition(j, "Stalled").is_some_and(|c| c.0 == "True")
    })
    .await;
    assert_eq!(orphan["status"]["reason"], "Dependency");
    assert_eq!(
        condition(&orphan, "Stalled").unwrap().1,
        "DependencyNotFound"
    );
    let (ok, out, _) = sim
        .run(&["squeue", "-h", "-o", "%j %t %r", "-n", "lost,orphan"])
        .await;
    assert!(ok);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["lost PD PartitionConfig", "orphan PD Dependency"]);

    // Fill the cluster, then queue a job, a held job and an array behind it.
    let (ok, out, err) = sim
        .run(&[
            "sbatch",
            "--parsable",
            "-N",
            "8",
            "--exclusive",
            "--wrap",
            "sleep 1000",
        ])
        .await;
    assert!(ok, "{err}");
    let filler: u64 = out.trim().parse().unwrap();
    sim.until_state(filler, "RUNNING").await;
    let mut ids = Vec::new();
    for args in [
        vec!["-N", "2", "--gpus-per-node=8"],
        vec!["-H", "-N", "1"],
        vec!["--array=0-3", "-N", "1", "--gpus-per-node=8"],
    ] {
        let mut argv = vec!["sbatch", "--parsable"];
        argv.extend(args);
        argv.extend(["--wrap", "hostname"]);
        let (ok, out, err) = sim.run(&argv).await;
        assert!(ok, "{err}");
        ids.push(out.trim().to_string());
    }
    let (ok, _, err) = sim.run(&["scancel", "-n", "lost,orphan"]).await;
    assert!(ok || err.is_empty(), "{err}");
    for name in ["lost", "orphan"] {
        let (ok, _, err) = sim.run(&["scancel", "--name", name]).await;
        assert!(ok, "{err}");
    }
    for id in ids.iter().chain(std::iter::once(&filler.to_string())) {
        let (ok, _, err) = sim.run(&["scancel", id]).await;
        assert!(ok, "{id}: {err}");
    }
    for j in ["lost", "orphan"] {
        until(&sim, j, "cancelled", |j| {
            j["status"]["state"] == "CANCELLED"
        })
        .await;
    }
    // Every job of the namespace ends CANCELLED, array elements included, and Failed says so.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let jobs = batchjobs(&sim).await;
        let open: Vec<String> = jobs
            .iter()
            .filter(|j| !j.state().is_terminal())
            .map(|j| format!("{} {:?}", j.metadata.name.clone().unwrap(), j.state()))
            .collect();
        if open.is_empty() {
            for j in &jobs {
                let v = serde_json::to_value(j).unwrap();
                assert_eq!(
                    v["status"]["state"], "CANCELLED",
                    "{}",
                    v["metadata"]["name"]
                );
                assert_eq!(
                    condition(&v, "Failed"),
                    Some(("True".into(), "Cancelled".into()))
                );
            }
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not ended: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sim.stop().await;
}

/// `kubectl wait --for=condition=Complete` waits for success only, `--for=condition=Failed`
/// for a failure, as for a batch/v1 Job; kstatus reads them Current and Failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_wait_reads_complete_and_failed_as_for_a_job() {
    let sim = Sim::start().await;
    let Some((ok, _, err)) = sim
        .kubectl(
            false,
            &["apply", "-f", "-"],
            Some(&format!(
                "{}\n---\n{}",
                manifest("good", json!({"nodes": 1}), 1, 0),
                manifest("bad", json!({"nodes": 1}), 1, 3)
            )),
        )
        .await
    else {
        return;
    };
    assert!(ok, "{err}");
    let (ok, out, err) = sim
        .kubectl(
            false,
            &[
                "wait",
                "--for=condition=Complete",
                "batchjob/good",
                "--timeout=30s",
            ],
            None,
        )
        .await
        .unwrap();
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("batchjob.muster.dev/good condition met"),
        "{out}"
    );
    let (ok, out, err) = sim
        .kubectl(
            false,
            &[
                "wait",
                "--for=condition=Failed",
                "batchjob/bad",
                "--timeout=30s",
            ],
            None,
        )
        .await
        .unwrap();
    assert!(ok, "{out}{err}");
    // A failed job never completes: waiting for Complete times out.
    let (ok, _, err) = sim
        .kubectl(
            false,
            &[
                "wait",
                "--for=condition=Complete",
                "batchjob/bad",
                "--timeout=2s",
            ],
            None,
        )
        .await
        .unwrap();
    assert!(!ok);
    assert!(err.contains("timed out waiting for the condition"), "{err}");

    let good = get(&sim, "good").await;
    let bad = get(&sim, "bad").await;
    assert_eq!(condition(&good, "Complete").unwrap().1, "Completed");
    assert_eq!(condition(&good, "Failed"), None);
    assert_eq!(condition(&good, "Ready"), None, "an ended job is not Ready");
    assert_eq!(
        condition(&bad, "Failed"),
        Some(("True".into(), "NonZeroExitCode".into()))
    );
    assert_eq!(condition(&bad, "Complete"), None);
    assert_eq!(bad["status"]["exitCode"], 3);
    assert_eq!(kstatus::compute(&good).status, Status::Current);
    let k = kstatus::compute(&bad);
    assert_eq!(
        (k.status, k.reason.as_str()),
        (Status::Failed, "NonZeroExitCode")
    );
    sim.stop().await;
}

/// One default partition: a second is refused at apply; printer columns are never empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_default_partition_and_full_columns() {
    let sim = Sim::start().await;
    let second = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "second"}, "spec": {"default": true, "defaultImage": "busybox"}})
    .to_string();
    let Some((ok, _, err)) = sim
        .kubectl(true, &["apply", "-f", "-"], Some(&second))
        .await
    else {
        return;
    };
    assert!(!ok);
    assert!(
        err.contains("partition blackwell is already the default"),
        "{err}"
    );
    let plain = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "plain"}, "spec": {"defaultImage": "busybox"}})
    .to_string();
    let (ok, _, err) = sim
        .kubectl(true, &["apply", "-f", "-"], Some(&plain))
        .await
        .unwrap();
    assert!(ok, "{err}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (ok, out, err) = sim
            .kubectl(true, &["get", "partitions", "--no-headers"], None)
            .await
            .unwrap();
        assert!(ok, "{err}");
        // NAME STATE DEFAULT TIER READY BINDING NODES GPUS ALLOC PENDING RUNNING AGE
        let rows: Vec<Vec<&str>> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let full = rows.len() == 2 && rows.iter().all(|r| r.len() == 12 && !r.contains(&"<none>"));
        if full {
            let plain = rows.iter().find(|r| r[0] == "plain").unwrap();
            assert_eq!(&plain[1..5], ["Up", "false", "0", "Up"]);
            let binding = if muster_e2e::cluster::dra_from_env() {
                "dra"
            } else {
                "env"
            };
            assert_eq!(plain[5], binding, "{out}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{out}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    sim.stop().await;
}

/// Who submitted comes from the API server, whatever the client writes; squeue, `squeue -u`
/// and sacct (without -a: the caller's own) use it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_submitter_is_who_the_api_server_authenticated() {
    let sim = Sim::start().await;
    let mut forged: Value = serde_yaml::from_str(&manifest("mine", json!({}), 1, 0)).unwrap();
    forged["metadata"]["annotations"] = json!({"muster.dev/user": "root"});
    let Some((ok, _, err)) = sim
        .kubectl(false, &["apply", "-f", "-"], Some(&forged.to_string()))
        .await
    else {
        return;
    };
    assert!(ok, "{err}");
    // The cluster admin acting as erin (kubectl --as).
    let (ok, _, err) = sim
        .kubectl(
            true,
            &["--as=erin", "apply", "-f", "-"],
            Some(&manifest("hers", json!({}), 1, 0)),
        )
        .await
        .unwrap();
    assert!(ok, "{err}");
    let (ok, out, _) = sim
        .kubectl(
            false,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
            None,
        )
        .await
        .unwrap();
    assert!(ok);
    assert_eq!(out, "dana");
    for j in ["mine", "hers"] {
        until(&sim, j, "ended", |v| v["status"]["state"] == "COMPLETED").await;
    }
    let (ok, out, _) = sim.run(&["squeue", "-t", "all", "-h", "-o", "%j %u"]).await;
    assert!(ok);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["hers erin", "mine dana"]);
    let (ok, out, _) = sim
        .run(&["squeue", "-t", "all", "-h", "-u", "erin", "-o", "%j"])
        .await;
    assert!(ok);
    assert_eq!(out, "hers\n");
    // sacct without -a: dana's own jobs, as Slurm shows the caller's.
    let (ok, out, _) = sim.run(&["sacct", "-n", "-P", "-o", "JobName,User"]).await;
    assert!(ok);
    assert_eq!(out, "mine|dana\n");
    let (ok, out, _) = sim
        .run(&["sacct", "-a", "-n", "-P", "-o", "JobName,User"])
        .await;
    assert!(ok);
    let mut all: Vec<&str> = out.lines().collect();
    all.sort();
    assert_eq!(all, ["hers|erin", "mine|dana"]);
    // An array's elements, which the operator creates, keep their array's submitter.
    let (ok, _, err) = sim
        .run(&["sbatch", "--array=0-1", "-J", "arr", "--wrap", "hostname"])
        .await;
    assert!(ok, "{err}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let arr: Vec<BatchJob> = batchjobs(&sim)
            .await
            .into_iter()
            .filter(|j| j.job_name() == "arr")
            .collect();
        if arr.len() == 3 {
            for j in &arr {
                assert_eq!(
                    j.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("muster.dev/user"))
                        .map(String::as_str),
                    Some("dana"),
                    "{:?}",
                    j.metadata.name
                );
            }
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", arr.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sim.stop().await;
}

/// The operator's Events carry eventTime, lastTimestamp and a count: `kubectl get events
/// --sort-by=.lastTimestamp` lists them in order, and `kubectl describe` shows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_sort_by_last_timestamp_and_show_in_describe() {
    let sim = Sim::start().await;
    let Some((ok, _, err)) = sim
        .kubectl(
            false,
            &["apply", "-f", "-"],
            Some(&manifest("ev", json!({}), 1, 0)),
        )
        .await
    else {
        return;
    };
    assert!(ok, "{err}");
    until(&sim, "ev", "completed", |v| {
        v["status"]["state"] == "COMPLETED"
    })
    .await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        // What a user types: kubectl asks for a Table with the objects to sort them.
        let (ok, out, err) = sim
            .kubectl(false, &["get", "events", "--sort-by=.lastTimestamp"], None)
            .await
            .unwrap();
        assert!(ok, "{err}");
        assert!(!err.contains("No resources found"), "{err}");
        let ours: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("batchjob/ev"))
            .filter_map(|l| l.split_whitespace().nth(2))
            .collect();
        if ours.contains(&"Completed") {
            assert_eq!(ours, ["Started", "Completed"], "{out}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{out}{err}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each carries eventTime, lastTimestamp and a count.
    let (ok, out, err) = sim
        .kubectl(
            false,
            &[
                "get",
                "events",
                "--field-selector=involvedObject.name=ev",
                "-o",
                "custom-columns=REASON:.reason,LAST:.lastTimestamp,TIME:.eventTime,COUNT:.count",
                "--no-headers",
            ],
            None,
        )
        .await
        .unwrap();
    assert!(ok, "{err}");
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert!(f[1] != "<none>" && f[2] != "<none>" && f[3] == "1", "{l}");
    }
    let (ok, out, err) = sim
        .kubectl(false, &["describe", "batchjob", "ev"], None)
        .await
        .unwrap();
    assert!(ok, "{err}");
    let events = out.split("Events:").nth(1).unwrap_or_default();
    let started = events.find("Started").expect("Started in describe");
    let completed = events.find("Completed").expect("Completed in describe");
    assert!(started < completed, "{events}");
    sim.stop().await;
}

/// `-n` after the command name keeps Slurm's meaning; a value that names a namespace and no
/// job gets a one-line hint on standard error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dash_n_keeps_slurms_meaning_with_a_hint() {
    let sim = Sim::start().await;
    let (ok, out, err) = sim.run(&["squeue", "-n", "default"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 1, "header only: {out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(
            "squeue: hint: -n default after the command name is Slurm's job name (none is named default); for namespace default use `kubectl muster -n default squeue`"
        ),
        "{err}"
    );
    let (ok, _, err) = sim.run(&["scancel", "-n", "default"]).await;
    assert!(ok, "{err}");
    assert!(err.starts_with("scancel: hint: -n default"), "{err}");
    // A job of that name: no hint.
    let (ok, _, err) = sim
        .run(&["sbatch", "-J", "default", "--wrap", "hostname"])
        .await;
    assert!(ok, "{err}");
    let (ok, _, err) = sim.run(&["squeue", "-n", "default"]).await;
    assert!(ok);
    assert!(err.is_empty(), "{err}");
    sim.stop().await;
}

/// A job that becomes impossible later (its nodes removed) is not refused after the fact: it
/// stays pending, Stalled, naming what is missing; new submissions of it are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_impossible_later_stays_pending_and_stalled() {
    let sim = Sim::start().await;
    let (ok, out, err) = sim
        .run(&[
            "sbatch",
            "--parsable",
            "-N",
            "8",
            "--exclusive",
            "--wrap",
            "sleep 1000",
        ])
        .await;
    assert!(ok, "{err}");
    let filler: u64 = out.trim().parse().unwrap();
    sim.until_state(filler, "RUNNING").await;
    let (ok, _, err) = sim
        .run(&[
            "sbatch",
            "-J",
            "wide",
            "-N",
            "8",
            "--exclusive",
            "--wrap",
            "hostname",
        ])
        .await;
    assert!(ok, "{err}");
    let (ok, _, err) = sim.run(&["scancel", &filler.to_string()]).await;
    assert!(ok, "{err}");
    // Two nodes leave the cluster before the job could start.
    let client = sim.cluster.client();
    for n in ["gpu007", "gpu008"] {
        let _ = Api::<Node>::all(client.clone())
            .delete(n, &DeleteParams::default())
            .await;
        let _ = Api::<GpuNode>::all(client.clone())
            .delete(n, &DeleteParams::default())
            .await;
    }
    let name = batchjobs(&sim)
        .await
        .into_iter()
        .find(|j| j.job_name() == "wide")
        .unwrap()
        .metadata
        .name
        .unwrap();
    let wide = until(&sim, &name, "stalled on 6 nodes", |j| {
        j["status"]["reason"] == "BadConstraints"
            && j["status"]["message"] == "nodes: 8 requested, partition blackwell has 6"
    })
    .await;
    assert_eq!(wide["status"]["state"], "PENDING");
    assert_eq!(
        wide["status"]["message"],
        "nodes: 8 requested, partition blackwell has 6"
    );
    assert_eq!(
        condition(&wide, "Stalled"),
        Some(("True".into(), "RequestCannotBeMet".into()))
    );
    let (ok, _, err) = sim
        .run(&["sbatch", "-N", "8", "--exclusive", "--wrap", "hostname"])
        .await;
    assert!(!ok);
    assert!(
        err.contains("nodes: 8 requested, partition blackwell has 6"),
        "{err}"
    );
    sim.stop().await;
}
