//! `sbatch --test-only` on the test control plane (the operator's scheduling core on the live
//! cluster, nothing created), and `sbatch --dry-run -o yaml` read back by the real kubectl.
//!
//! Cluster: 2 leaves x 4 nodes x 8 GPUs (`gpu[001-008]`), default partition `blackwell`.

mod e2e_support;

use std::io::Write as _;
use std::process::{Command, Stdio};

use e2e_support::Sim;
use kube::Api;
use muster_crds::v1alpha1::BatchJob;

async fn batchjob_count(sim: &Sim) -> usize {
    Api::<BatchJob>::all(sim.cluster.client())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len()
}

/// The `Job 0 to start at T using P processors on nodes N in partition X` line, parsed.
fn parse_line(err: &str) -> (jiff::Timestamp, String, String, String) {
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("sbatch: Job 0 to start at "))
        .unwrap_or_else(|| panic!("no estimate in {err:?}"));
    let (at, rest) = line.split_once(" using ").unwrap();
    let (procs, rest) = rest.split_once(" processors on nodes ").unwrap();
    let (nodes, part) = rest.split_once(" in partition ").unwrap();
    let at: jiff::civil::DateTime = at.parse().unwrap();
    let at = at
        .to_zoned(jiff::tz::TimeZone::system())
        .unwrap()
        .timestamp();
    (at, procs.to_string(), nodes.to_string(), part.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_only_estimates_with_the_scheduling_core() {
    let sim = Sim::start().await;

    // An empty cluster: now, on the first two nodes of the first leaf.
    let before = jiff::Timestamp::now();
    let (ok, out, err) = sim
        .run(&[
            "sbatch",
            "--test-only",
            "-N",
            "2",
            "--gpus-per-node=8",
            "--wrap",
            "hostname",
        ])
        .await;
    assert!(ok, "{err}");
    assert_eq!(out, "", "Slurm prints the estimate on standard error");
    let (at, procs, nodes, part) = parse_line(&err);
    assert!(
        (at.as_second() - before.as_second()).abs() <= 2,
        "starts now: {at} vs {before}"
    );
    assert_eq!(
        (procs.as_str(), nodes.as_str(), part.as_str()),
        ("2", "gpu[001-002]", "blackwell")
    );
    assert_eq!(batchjob_count(&sim).await, 0, "--test-only creates nothing");

    // Fill the cluster with a job limited to 10 minutes: the estimate is its end.
    let (ok, out, err) = sim
        .run(&[
            "sbatch",
            "--parsable",
            "-t",
            "10",
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
    let (ok, out, _) = sim
        .run(&["squeue", "-h", "-j", &filler.to_string(), "-o", "%S"])
        .await;
    assert!(ok);
    let started: jiff::civil::DateTime = out.trim().parse().unwrap();
    let started = started
        .to_zoned(jiff::tz::TimeZone::system())
        .unwrap()
        .timestamp();
    let (ok, _, err) = sim
        .run(&[
            "sbatch",
            "--test-only",
            "-n",
            "4",
            "--gpus-per-task=4",
            "--wrap",
            "hostname",
        ])
        .await;
    assert!(ok, "{err}");
    let (at, procs, nodes, _) = parse_line(&err);
    assert_eq!(
        at.as_second(),
        started.as_second() + 600,
        "starts when the filler's 10 minutes end"
    );
    assert_eq!((procs.as_str(), nodes.as_str()), ("4", "gpu[001-002]"));
    assert_eq!(batchjob_count(&sim).await, 1, "still only the filler");

    // --begin: never before it. An hour from now the filler is long gone: the begin time.
    let before = jiff::Timestamp::now();
    let (ok, _, err) = sim
        .run(&[
            "sbatch",
            "--test-only",
            "--begin=now+1hour",
            "-n",
            "4",
            "--gpus-per-task=4",
            "--wrap",
            "hostname",
        ])
        .await;
    let after = jiff::Timestamp::now();
    assert!(ok, "{err}");
    let (at, _, nodes, _) = parse_line(&err);
    assert!(
        at.as_second() >= before.as_second() + 3600 && at.as_second() <= after.as_second() + 3600,
        "starts at its begin time: {at} vs {before}"
    );
    assert_eq!(nodes, "gpu[001-002]");
    // Five minutes from now the filler still runs: when its 10 minutes end.
    let (ok, _, err) = sim
        .run(&[
            "sbatch",
            "--test-only",
            "--begin=now+5minutes",
            "-n",
            "4",
            "--gpus-per-task=4",
            "--wrap",
            "hostname",
        ])
        .await;
    assert!(ok, "{err}");
    let (at, _, _, _) = parse_line(&err);
    assert_eq!(at.as_second(), started.as_second() + 600);

    // A request no node set can ever satisfy is refused as Slurm refuses it, naming the
    // resource and the largest that exists (the check sbatch and admission make).
    let (ok, _, err) = sim
        .run(&[
            "sbatch",
            "--test-only",
            "-N",
            "2",
            "--gpus-per-node=9",
            "--wrap",
            "hostname",
        ])
        .await;
    assert!(!ok);
    assert_eq!(
        err.trim_end(),
        "sbatch: error: Job submit/allocate failed: Requested node configuration is not available (GPUs: 9 per node requested, the most on one node of partition blackwell is 8)"
    );
    // An unknown partition is refused as a submission would be.
    let (ok, _, err) = sim
        .run(&["sbatch", "--test-only", "-p", "cpu", "--wrap", "hostname"])
        .await;
    assert!(!ok);
    assert!(err.contains("invalid partition specified: cpu"), "{err}");
    sim.stop().await;
}

/// The operator's persisted fair-share usage orders the queue `--test-only` sees: a job of a
/// namespace that used little passes one of a namespace that used much, as in the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_only_weighs_the_operators_fair_share_usage() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::PostParams;
    let sim = Sim::start().await;
    let client = sim.cluster.client();
    let ns: Namespace = serde_json::from_value(
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "heavy"}}),
    )
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let whole = ["-t", "10", "-N", "8", "--exclusive", "--wrap", "sleep 1000"];
    let mut filler = vec!["sbatch", "--parsable"];
    filler.extend(whole);
    let (ok, out, err) = sim.run(&filler).await;
    assert!(ok, "{err}");
    let filler: u64 = out.trim().parse().unwrap();
    sim.until_state(filler, "RUNNING").await;
    let started = Api::<BatchJob>::namespaced(client.clone(), "default")
        .list(&Default::default())
        .await
        .unwrap()
        .items[0]
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .unwrap()
        .0
        .as_second();
    // A whole-cluster job of namespace "heavy" waits behind the filler.
    let mut queued = vec!["-n", "heavy", "sbatch", "--parsable"];
    queued.extend(whole);
    let (ok, _, err) = sim.run(&queued).await;
    assert!(ok, "{err}");
    let mut probe = vec!["sbatch", "--test-only"];
    probe.extend(whole);

    // Equal usage: the earlier "heavy" job goes first, so ours starts after both.
    let (ok, _, err) = sim.run(&probe).await;
    assert!(ok, "{err}");
    assert_eq!(parse_line(&err).0.as_second(), started + 1200, "{err}");

    // The operator recorded that "heavy" used the cluster: ours now goes first.
    let now = jiff::Timestamp::now().as_second();
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "muster-fairshare", "namespace": e2e_support::OPERATOR_NS},
        "data": {"usage.json": format!("{{\"time\":{now},\"usage\":{{\"heavy\":1.0e9}}}}")}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client, e2e_support::OPERATOR_NS)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let (ok, _, err) = sim.run(&probe).await;
    assert!(ok, "{err}");
    assert_eq!(parse_line(&err).0.as_second(), started + 600, "{err}");
    sim.stop().await;
}

/// `kubectl` on PATH, or `None` (the test is skipped with a note, unless
/// `MUSTER_REQUIRE_KUBECTL=1`).
fn kubectl_present() -> bool {
    let present = Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        assert!(
            std::env::var("MUSTER_REQUIRE_KUBECTL").as_deref() != Ok("1"),
            "kubectl is not on PATH and MUSTER_REQUIRE_KUBECTL=1"
        );
        eprintln!("note: kubectl not on PATH; skipping");
    }
    present
}

/// `sbatch --dry-run -o yaml | kubectl create -f -` keeps every value: kubectl's YAML reader
/// sees `time: "10:00"`, not the sexagesimal 600, and the server stores the same spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_yaml_goes_through_kubectl_unchanged() {
    if !kubectl_present() {
        return;
    }
    let sim = Sim::start_with(false).await;
    let (ok, yaml, err) = sim
        .run(&[
            "sbatch",
            "--dry-run",
            "-o",
            "yaml",
            "-J",
            "on",
            "-t",
            "10:00",
            "-N",
            "2",
            "--gpus=8",
            "--switches=1@5:00",
            "--wrap",
            "echo yes: 10:00",
        ])
        .await;
    assert!(ok, "{err}");
    let want: BatchJob = serde_yaml::from_str(&yaml).unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new("kubectl")
        .args(["create", "-f", "-", "-o", "json", "--kubeconfig"])
        .arg(sim.cluster.kubeconfig())
        .env("HOME", home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl create failed:\n{}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: BatchJob = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created.spec, want.spec, "{yaml}");
    let time = serde_json::to_value(&created.spec.time).unwrap();
    assert_eq!(time, "10:00");
    assert_eq!(created.spec.job_name.as_deref(), Some("on"));
    sim.stop().await;
}
