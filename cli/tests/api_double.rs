//! The commands' Kubernetes side against the API server double of `muster-e2e` (real REST
//! semantics: generateName, the status subresource, merge patches, CRD validation, pod logs)
//! with a stand-in operator that only assigns job ids and records cancellations, so the
//! outputs are fixed. The full suite with the real operator and simulated nodes is
//! `e2e_operator.rs`.

use std::ffi::OsString;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use muster_crds::v1alpha1::{BatchJob, JobState, Partition};
use muster_e2e::apiserver::{ApiServer, ApiServerOptions};
use serde_json::json;

/// The double with the muster CRDs, one node and a default Partition `gpu` (sbatch refuses
/// what no node could run, so there is one).
async fn serve() -> (ApiServer, Client) {
    let server = ApiServer::start(ApiServerOptions::default().with_muster_crds())
        .await
        .expect("API server double starts");
    let client = server.client();
    let team: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
    )
    .unwrap();
    Api::all(client.clone())
        .create(&PostParams::default(), &team)
        .await
        .unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for name in ["gpu001", "gpu002"] {
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {
                    "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}]}})),
            )
            .await
            .unwrap();
    }
    let p: Partition = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
        "metadata": {"name": "gpu"}, "spec": {"default": true, "defaultImage": "busybox:1.36"}}))
    .unwrap();
    Api::<Partition>::all(client.clone())
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
    (server, client)
}

/// A stand-in operator: ids from 1001 in creation order, state PENDING (reason Priority);
/// a cancelled job becomes CANCELLED.
fn stand_in_operator(client: Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<BatchJob> = Api::all(client.clone());
        let mut next = 1001u64;
        loop {
            let mut jobs = api.list(&ListParams::default()).await.unwrap().items;
            jobs.sort_by_key(|j| {
                j.metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse::<u64>().ok())
            });
            jobs.sort_by_key(|j| j.status.as_ref().and_then(|s| s.job_id).is_some());
            for j in jobs {
                let ns = j.namespace().unwrap_or_default();
                let name = j.name_any();
                let st = j.status.clone().unwrap_or_default();
                let status = if st.job_id.is_none() {
                    let id = next;
                    next += 1;
                    json!({"jobId": id, "state": "PENDING", "reason": "Priority",
                           "partition": "gpu", "submitTime": "2024-05-01T10:00:00Z"})
                } else if j.spec.cancel == Some(true)
                    && !st.state.is_some_and(JobState::is_terminal)
                {
                    json!({"state": "CANCELLED", "reason": "None",
                           "endTime": "2024-05-01T10:00:30Z"})
                } else {
                    continue;
                };
                Api::<BatchJob>::namespaced(client.clone(), &ns)
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": status })),
                    )
                    .await
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    })
}

async fn run(client: &Client, argv: &[&str]) -> (bool, String, String) {
    run_env(client, argv, &[]).await
}

/// [`run`] with these environment variables set (besides `USER`).
async fn run_env(client: &Client, argv: &[&str], vars: &[(&str, &str)]) -> (bool, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut stdin: &[u8] = b"#!/bin/bash\n#SBATCH -J from-stdin\nhostname\n";
    let env = |k: &str| {
        (k == "USER").then(|| "dana".to_string()).or_else(|| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    };
    let mut io = muster_cli::Io {
        out: &mut out,
        err: &mut err,
        stdin: &mut stdin,
        env: &env,
        cwd: std::env::temp_dir(),
    };
    let cluster = muster_cli::cluster::Cluster {
        client: client.clone(),
        namespace: "team-a".into(),
        user: "dana".into(),
    };
    let argv: Vec<OsString> = argv.iter().map(Into::into).collect();
    let code = muster_cli::run_on(argv, Some(cluster), &mut io).await;
    (
        code == std::process::ExitCode::SUCCESS,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

async fn job_by_id(client: &Client, id: u64) -> BatchJob {
    Api::<BatchJob>::namespaced(client.clone(), "team-a")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|j| j.status.as_ref().and_then(|s| s.job_id) == Some(id))
        .unwrap_or_else(|| panic!("no job {id}"))
}

#[tokio::test]
async fn submit_queue_cancel_account() {
    let (_server, client) = serve().await;
    let _op = stand_in_operator(client.clone());

    // sbatch waits for the operator's job id.
    let (ok, out, err) = run(
        &client,
        &["muster", "sbatch", "-p", "gpu", "--wrap", "hostname"],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "Submitted batch job 1001\n");
    let (ok, out, err) = run(&client, &["muster", "sbatch", "--parsable"]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "1002\n");
    let j = job_by_id(&client, 1002).await;
    assert_eq!(j.spec.job_name.as_deref(), Some("from-stdin"));
    // No admission webhook here: nothing records a submitter (the client never writes one).
    assert_eq!(j.annotations().get("muster.dev/user"), None);
    assert_eq!(j.metadata.namespace.as_deref(), Some("team-a"));
    assert!(j.name_any().starts_with("from-stdin-"), "{}", j.name_any());

    // An unknown partition or dependency is refused before anything is created.
    let (ok, _, err) = run(&client, &["muster", "sbatch", "-p", "cpu", "--wrap", "x"]).await;
    assert!(!ok);
    assert!(err.contains("invalid partition specified: cpu"), "{err}");
    assert!(
        err.contains("hint: partitions in this cluster: gpu"),
        "{err}"
    );
    let (ok, _, err) = run(
        &client,
        &["muster", "sbatch", "-d", "afterok:77", "--wrap", "x"],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("Job dependency problem: job 77 does not exist"),
        "{err}"
    );
    let (ok, out, _) = run(
        &client,
        &[
            "muster",
            "sbatch",
            "-d",
            "afterok:1001",
            "--parsable",
            "--wrap",
            "x",
        ],
    )
    .await;
    assert!(ok);
    assert_eq!(out, "1003\n");
    let all: Api<BatchJob> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        3
    );

    // Without the operator's admission webhook nothing records a submitter
    // (e2e_operator.rs shows the user admission records).
    let (ok, out, _) = run(&client, &["muster", "squeue", "-o", "%i %j %u %T %r"]).await;
    assert!(ok);
    assert_eq!(
        out,
        "JOBID NAME USER STATE REASON\n1001 wrap unknown PENDING Priority\n\
         1002 from-stdin unknown PENDING Priority\n1003 wrap unknown PENDING Priority\n"
    );

    // scancel sets spec.cancel (a merge patch); the record stays.
    let before = job_by_id(&client, 1001).await;
    let (ok, _, err) = run(&client, &["muster", "scancel", "1001"]).await;
    assert!(ok, "{err}");
    let after = job_by_id(&client, 1001).await;
    assert_eq!(after.spec.cancel, Some(true));
    assert_eq!(
        muster_crds::v1alpha1::BatchJobSpec {
            cancel: None,
            ..after.spec.clone()
        },
        before.spec,
        "scancel changes nothing else"
    );
    // Once the operator has recorded it, a second scancel says what Slurm says.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while job_by_id(&client, 1001).await.status.unwrap().state != Some(JobState::Cancelled) {
        assert!(
            std::time::Instant::now() < deadline,
            "the operator never recorded the cancel"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (ok, _, err) = run(&client, &["muster", "scancel", "1001"]).await;
    assert!(!ok);
    assert_eq!(
        err,
        "scancel: error: Kill job error on job id 1001: Job/step already completing or completed\n"
    );
    let (ok, out, _) = run(&client, &["muster", "squeue", "-h", "-o", "%i"]).await;
    assert!(ok);
    assert_eq!(out, "1002\n1003\n");

    // hold/release set spec.hold.
    let (ok, _, err) = run(&client, &["muster", "scontrol", "hold", "1002"]).await;
    assert!(ok, "{err}");
    assert_eq!(job_by_id(&client, 1002).await.spec.hold, Some(true));
    let (ok, _, err) = run(&client, &["muster", "scontrol", "release", "1002"]).await;
    assert!(ok, "{err}");
    assert_eq!(job_by_id(&client, 1002).await.spec.hold, Some(false));

    let (ok, out, _) = run(
        &client,
        &[
            "muster",
            "sacct",
            "-P",
            "-j",
            "1001,1002",
            "-o",
            "JobID,JobName,State,ExitCode",
        ],
    )
    .await;
    assert!(ok);
    assert_eq!(
        out,
        "JobID|JobName|State|ExitCode\n1001|wrap|CANCELLED|0:0\n1002|from-stdin|PENDING|0:0\n"
    );

    let (ok, out, _) = run(
        &client,
        &["muster", "scontrol", "show", "job", "1002", "-o"],
    )
    .await;
    assert!(ok);
    assert!(
        out.starts_with(
            "JobId=1002 JobName=from-stdin UserId=unknown Priority=N/A Nice=0 Account=team-a "
        ),
        "{out}"
    );
    let (ok, _, err) = run(&client, &["muster", "scontrol", "show", "job", "4242"]).await;
    assert!(!ok);
    assert_eq!(err, "slurm_load_jobs error: Invalid job id specified\n");
    // squeue -j of one job that does not exist fails the same way (Slurm 22.05); a list,
    // or an array task, shows nothing.
    let (ok, out, err) = run(&client, &["muster", "squeue", "-j", "4242"]).await;
    assert!(!ok);
    assert_eq!(
        (out.as_str(), err.as_str()),
        ("", "slurm_load_jobs error: Invalid job id specified\n")
    );
    for ids in ["4242,4243", "4242_1"] {
        let (ok, out, err) = run(&client, &["muster", "squeue", "-h", "-j", ids]).await;
        assert!(ok, "{ids}: {err}");
        assert_eq!(out, "", "{ids}");
    }
    let (ok, _, err) = run(
        &client,
        &["muster", "scontrol", "show", "partition", "nope"],
    )
    .await;
    assert!(!ok);
    assert_eq!(err, "Partition nope not found\n");
}

#[tokio::test]
async fn sbatch_gives_up_when_no_operator_answers() {
    let (_server, client) = serve().await;
    let (ok, _, err) = run(
        &client,
        &["muster", "sbatch", "--submit-timeout=1", "--wrap", "x"],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("was created but no job id was assigned within 1s"),
        "{err}"
    );
    assert!(err.contains("is the Muster operator running?"), "{err}");
}

#[tokio::test]
async fn logs_of_a_rank() {
    let (server, client) = serve().await;
    let _op = stand_in_operator(client.clone());
    let (ok, _, err) = run(
        &client,
        &["muster", "sbatch", "-N", "2", "--wrap", "hostname"],
    )
    .await;
    assert!(ok, "{err}");
    // Two task pods; rank 1's template names its container differently, so the CLI must fall
    // back to the pod's only container.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "team-a");
    for (name, container) in [("wrap-0", "task"), ("wrap-1", "main")] {
        let p: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": container, "image": "busybox:1.36"}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &p).await.unwrap();
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
        server.set_pod_log(
            "team-a",
            name,
            container,
            &format!("hello from {name}\nbye from {name}\n"),
        );
    }
    let j = job_by_id(&client, 1001).await;
    Api::<BatchJob>::namespaced(client.clone(), "team-a")
        .patch_status(
            &j.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "state": "RUNNING", "reason": "None", "startTime": "2024-05-01T10:00:05Z",
                "numTasks": 2,
                "tasks": [
                    {"rank": 0, "node": "gpu001", "nodeRank": 0, "localRank": 0,
                     "cpuMillis": 1000, "memoryMib": 0, "gpus": [], "pod": "wrap-0"},
                    {"rank": 1, "node": "gpu002", "nodeRank": 1, "localRank": 0,
                     "cpuMillis": 1000, "memoryMib": 0, "gpus": [], "pod": "wrap-1"}]}})),
        )
        .await
        .unwrap();
    let (ok, out, err) = run(&client, &["muster", "logs", "1001"]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "hello from wrap-0\nbye from wrap-0\n");
    let (ok, out, err) = run(&client, &["muster", "logs", "1001", "--rank", "1"]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "hello from wrap-1\nbye from wrap-1\n");
    let (ok, out, err) = run(&client, &["muster", "logs", "1001", "--all-ranks"]).await;
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "0: hello from wrap-0\n0: bye from wrap-0\n1: hello from wrap-1\n1: bye from wrap-1\n"
    );
    let (ok, _, err) = run(&client, &["muster", "logs", "1002"]).await;
    assert!(!ok);
    assert_eq!(err, "logs: error: Invalid job id specified: 1002\n");
}

/// `squeue -i 1` prints the queue again every second, each time after the date.
#[tokio::test]
async fn squeue_iterates() {
    let (_server, client) = serve().await;
    let _op = stand_in_operator(client.clone());
    let (ok, _, err) = run(&client, &["muster", "sbatch", "--wrap", "hostname"]).await;
    assert!(ok, "{err}");
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut stdin: &[u8] = b"";
    let env = |_: &str| None::<String>;
    let mut io = muster_cli::Io {
        out: &mut out,
        err: &mut err,
        stdin: &mut stdin,
        env: &env,
        cwd: std::env::temp_dir(),
    };
    let cluster = muster_cli::cluster::Cluster {
        client: client.clone(),
        namespace: "team-a".into(),
        user: "dana".into(),
    };
    let argv: Vec<OsString> = ["muster", "squeue", "-i", "1", "-o", "%i %T"]
        .iter()
        .map(Into::into)
        .collect();
    let iterating = muster_cli::run_on(argv, Some(cluster), &mut io);
    assert!(
        tokio::time::timeout(Duration::from_millis(3500), iterating)
            .await
            .is_err(),
        "squeue -i runs until interrupted"
    );
    let text = String::from_utf8(out).unwrap();
    let reports: Vec<&str> = text.split_terminator("\n\n").collect();
    assert!(reports.len() >= 2, "{text}");
    for r in reports {
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines.len(), 3, "{r}");
        // Slurm's ctime: `Mon Jan 05 10:00:00 2026`.
        assert_eq!(lines[0].len(), 24, "{r}");
        assert_eq!(&lines[1..], ["JOBID STATE", "1001 PENDING"], "{r}");
    }

    // -l heads its one report with the date too, in its own format whatever SQUEUE_FORMAT
    // says (which otherwise replaces the default); -h drops both; -o with -l is refused.
    let fmt = [("SQUEUE_FORMAT", "%i %T")];
    let (ok, out, err) = run_env(&client, &["muster", "squeue"], &fmt).await;
    assert!(ok, "{err}");
    assert_eq!(out, "JOBID STATE\n1001 PENDING\n");
    let (ok, out, err) = run_env(&client, &["muster", "squeue", "-l"], &fmt).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0].len(), 24, "{out}");
    assert!(lines[1].ends_with("STATE       TIME TIME_LIMI  NODES NODELIST(REASON)"));
    assert!(lines[2].contains(" PENDING "), "{out}");
    let (ok, out, err) = run(&client, &["muster", "squeue", "-l", "-h"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains(" PENDING "), "{out}");
    let (ok, out, err) = run(&client, &["muster", "squeue", "-l", "-o", "%i %T"]).await;
    assert!(!ok);
    assert_eq!(out, "");
    assert_eq!(
        err,
        "squeue: fatal: Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry.\n"
    );

    // sinfo -l: the date, then the long report; SINFO_FORMAT replaces the format even then.
    let (ok, out, err) = run_env(
        &client,
        &["muster", "sinfo", "-l"],
        &[("SINFO_FORMAT", "%P")],
    )
    .await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0].len(), 24, "{out}");
    assert_eq!(lines[1], "PARTITION", "{out}");
    let (ok, out, err) = run(&client, &["muster", "sinfo", "-l", "-o", "%P"]).await;
    assert!(!ok);
    assert_eq!(out, "");
    assert!(
        err.starts_with("sinfo: fatal: Options -o(--format) and -l"),
        "{err}"
    );
}
