//! The commands' Kubernetes side against a small in-process API server with a stand-in
//! operator (assigns job ids, starts and cancels jobs). The full end-to-end suite runs against
//! the test control plane in `e2e/`; this checks what the CLI itself sends and reads.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

#[derive(Default)]
struct World {
    jobs: BTreeMap<(String, String), Value>,
    next_id: u64,
    next_name: u64,
    partitions: BTreeMap<String, Value>,
    patches: Vec<Value>,
}

type Shared = Arc<Mutex<World>>;

fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("{what} not found"), "reason": "NotFound", "code": 404
        })),
    )
        .into_response()
}

fn list(kind: &str, items: Vec<Value>) -> Response {
    axum::Json(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": kind, "metadata": {"resourceVersion": "1"},
        "items": items
    }))
    .into_response()
}

async fn list_ns(State(w): State<Shared>, Path(ns): Path<String>) -> Response {
    let w = w.lock().unwrap();
    list(
        "BatchJobList",
        w.jobs
            .iter()
            .filter(|((n, _), _)| *n == ns)
            .map(|(_, v)| v.clone())
            .collect(),
    )
}

async fn list_all(State(w): State<Shared>) -> Response {
    let w = w.lock().unwrap();
    list("BatchJobList", w.jobs.values().cloned().collect())
}

async fn create(
    State(w): State<Shared>,
    Path(ns): Path<String>,
    axum::Json(mut body): axum::Json<Value>,
) -> Response {
    let mut g = w.lock().unwrap();
    g.next_name += 1;
    let prefix = body["metadata"]["generateName"]
        .as_str()
        .unwrap_or("job-")
        .to_string();
    let name = format!("{prefix}x{:04}", g.next_name);
    body["metadata"]["name"] = json!(name);
    body["metadata"]["namespace"] = json!(ns);
    body["metadata"]["creationTimestamp"] = json!("2024-05-01T10:00:00Z");
    g.jobs.insert((ns.clone(), name.clone()), body.clone());
    drop(g);
    // The stand-in operator: a job id a little later, as the real one would.
    let w2 = w.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        let mut g = w2.lock().unwrap();
        g.next_id += 1;
        let id = 1000 + g.next_id;
        if let Some(j) = g.jobs.get_mut(&(ns, name)) {
            j["status"] = json!({
                "jobId": id, "state": "PENDING", "reason": "Priority", "partition": "gpu",
                "submitTime": "2024-05-01T10:00:00Z"
            });
        }
    });
    (StatusCode::CREATED, axum::Json(body)).into_response()
}

async fn get_job(State(w): State<Shared>, Path((ns, name)): Path<(String, String)>) -> Response {
    match w.lock().unwrap().jobs.get(&(ns, name.clone())) {
        Some(j) => axum::Json(j.clone()).into_response(),
        None => not_found(&name),
    }
}

async fn patch_job(
    State(w): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    axum::Json(patch): axum::Json<Value>,
) -> Response {
    let mut g = w.lock().unwrap();
    g.patches.push(patch.clone());
    let Some(j) = g.jobs.get_mut(&(ns, name.clone())) else {
        return not_found(&name);
    };
    json_patch::merge(j, &patch);
    if j["spec"]["cancel"] == json!(true) {
        j["status"]["state"] = json!("CANCELLED");
        j["status"]["reason"] = json!("None");
        j["status"]["endTime"] = json!("2024-05-01T10:00:30Z");
    }
    axum::Json(j.clone()).into_response()
}

async fn get_partition(State(w): State<Shared>, Path(name): Path<String>) -> Response {
    match w.lock().unwrap().partitions.get(&name) {
        Some(p) => axum::Json(p.clone()).into_response(),
        None => not_found(&name),
    }
}

async fn list_partitions(State(w): State<Shared>) -> Response {
    list(
        "PartitionList",
        w.lock().unwrap().partitions.values().cloned().collect(),
    )
}

#[derive(serde::Deserialize)]
struct LogQuery {
    container: Option<String>,
}

async fn pod_log(
    Path((_ns, pod)): Path<(String, String)>,
    axum::extract::Query(q): axum::extract::Query<LogQuery>,
) -> Response {
    // Pods of rank 1 name their container differently: the CLI must fall back.
    if pod.ends_with("-1") && q.container.as_deref() == Some("task") {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "container task is not valid", "reason": "BadRequest", "code": 400
            })),
        )
            .into_response();
    }
    format!("hello from {pod}\nbye from {pod}\n").into_response()
}

async fn serve() -> (Shared, kube::Client) {
    let world: Shared = Arc::default();
    world.lock().unwrap().partitions.insert(
        "gpu".into(),
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Partition",
               "metadata": {"name": "gpu"}, "spec": {"default": true}}),
    );
    let base = "/apis/muster.dev/v1alpha1";
    let app = Router::new()
        .route(
            &format!("{base}/namespaces/{{ns}}/batchjobs"),
            get(list_ns).post(create),
        )
        .route(
            &format!("{base}/namespaces/{{ns}}/batchjobs/{{name}}"),
            get(get_job).patch(patch_job),
        )
        .route(&format!("{base}/batchjobs"), get(list_all))
        .route(&format!("{base}/partitions"), get(list_partitions))
        .route(&format!("{base}/partitions/{{name}}"), get(get_partition))
        .route("/api/v1/namespaces/{ns}/pods/{pod}/log", get(pod_log))
        .with_state(world.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    (world, kube::Client::try_from(config).unwrap())
}

async fn run(client: &kube::Client, argv: &[&str]) -> (bool, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let mut stdin: &[u8] = b"#!/bin/bash\n#SBATCH -J from-stdin\nhostname\n";
    let env = |k: &str| (k == "USER").then(|| "dana".to_string());
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

#[tokio::test]
async fn submit_queue_cancel_account() {
    let (world, client) = serve().await;

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
    {
        let w = world.lock().unwrap();
        let j = w
            .jobs
            .values()
            .find(|j| j["spec"]["jobName"] == "from-stdin")
            .unwrap();
        assert_eq!(j["metadata"]["annotations"]["muster.dev/user"], "dana");
        assert_eq!(j["metadata"]["namespace"], "team-a");
        assert!(
            j["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("from-stdin-")
        );
    }

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
    assert_eq!(world.lock().unwrap().jobs.len(), 3);

    let (ok, out, _) = run(&client, &["muster", "squeue", "-o", "%i %j %u %T %r"]).await;
    assert!(ok);
    assert_eq!(
        out,
        "JOBID NAME USER STATE REASON\n1001 wrap dana PENDING Priority\n\
         1002 from-stdin dana PENDING Priority\n1003 wrap dana PENDING Priority\n"
    );

    // scancel is a merge patch of spec.cancel; the record stays.
    let (ok, _, err) = run(&client, &["muster", "scancel", "1001"]).await;
    assert!(ok, "{err}");
    assert_eq!(
        world.lock().unwrap().patches,
        [json!({"spec": {"cancel": true}})]
    );
    let (ok, _, err) = run(&client, &["muster", "scancel", "1001"]).await;
    assert!(!ok);
    assert_eq!(
        err,
        "scancel: error: Kill job error on job id 1001: Job/step already completing or completed\n"
    );
    let (ok, out, _) = run(&client, &["muster", "squeue", "-h", "-o", "%i"]).await;
    assert!(ok);
    assert_eq!(out, "1002\n1003\n");

    // hold/release patch spec.hold.
    let (ok, _, err) = run(&client, &["muster", "scontrol", "hold", "1002"]).await;
    assert!(ok, "{err}");
    let (ok, _, err) = run(&client, &["muster", "scontrol", "release", "1002"]).await;
    assert!(ok, "{err}");
    assert_eq!(
        world.lock().unwrap().patches[1..],
        [
            json!({"spec": {"hold": true}}),
            json!({"spec": {"hold": false}})
        ]
    );

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
        out.starts_with("JobId=1002 JobName=from-stdin UserId=dana Account=team-a "),
        "{out}"
    );
    let (ok, _, err) = run(&client, &["muster", "scontrol", "show", "job", "4242"]).await;
    assert!(!ok);
    assert_eq!(
        err,
        "scontrol: error: slurm_load_jobs error: Invalid job id specified\n"
    );
}

#[tokio::test]
async fn sbatch_gives_up_when_no_operator_answers() {
    let (world, client) = serve().await;
    // No operator: make ids never come by removing jobs' statuses as they appear.
    let w = world.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            for j in w.lock().unwrap().jobs.values_mut() {
                j.as_object_mut().unwrap().remove("status");
            }
        }
    });
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
    let (world, client) = serve().await;
    let (ok, _, err) = run(
        &client,
        &["muster", "sbatch", "-N", "2", "--wrap", "hostname"],
    )
    .await;
    assert!(ok, "{err}");
    {
        let mut w = world.lock().unwrap();
        let j = w.jobs.values_mut().next().unwrap();
        j["status"]["state"] = json!("RUNNING");
        j["status"]["startTime"] = json!("2024-05-01T10:00:05Z");
        j["status"]["numTasks"] = json!(2);
        j["status"]["tasks"] = json!([
            {"rank": 0, "node": "gpu001", "nodeRank": 0, "localRank": 0, "pod": "wrap-0"},
            {"rank": 1, "node": "gpu002", "nodeRank": 1, "localRank": 0, "pod": "wrap-1"},
        ]);
    }
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
