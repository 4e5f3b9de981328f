//! `muster sandbox --exec`: pods run for real with the cargo-built `muster-step` standing in for
//! the operator image's — a job's batch script runs on its node pod and its exit is the job's.

use std::path::Path;

use kube::Api;
use kube::api::PostParams;
use muster_cli::sandbox::{self, Sandbox, SandboxArgs};
use muster_crds::v1alpha1::{BatchJob, JobState};

fn args(extra: &[&str]) -> SandboxArgs {
    use clap::Parser;
    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: SandboxArgs,
    }
    let mut v = vec!["sandbox"];
    v.extend_from_slice(extra);
    T::try_parse_from(v).unwrap().a
}

/// Starts a sandbox in `dir` with `extra` arguments; returns it and what it printed.
async fn start_in(dir: &Path, extra: &[&str]) -> (anyhow::Result<Sandbox>, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut stdin = std::io::empty();
    let env = |_: &str| None;
    let mut io = muster_cli::Io {
        out: &mut out,
        err: &mut err,
        stdin: &mut stdin,
        env: &env,
        cwd: dir.to_path_buf(),
    };
    let s = sandbox::start(&args(extra), &mut io).await;
    (s, String::from_utf8(out).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_sandbox_runs_a_job_for_real() {
    let dir = tempfile::tempdir().unwrap();
    let step = env!("CARGO_BIN_EXE_muster-step");
    let (s, text) = start_in(dir.path(), &["--exec", "--step-binary", step]).await;
    let s = s.unwrap();
    assert!(text.contains("Pods run for real"), "{text}");
    let jobs: Api<BatchJob> = Api::namespaced(s.cluster.client(), "default");
    let job: BatchJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
        "metadata": {"name": "real", "namespace": "default"},
        "spec": {"nodes": 1, "script": "echo \"hello from $(hostname)\"; exit 3"}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let cond = |j: Option<&BatchJob>| {
        j.and_then(|j| j.status.as_ref())
            .and_then(|s| s.state)
            .is_some_and(|s| s.is_terminal())
    };
    let done = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        kube::runtime::wait::await_condition(jobs.clone(), "real", cond),
    )
    .await;
    let st = jobs.get("real").await.unwrap().status.unwrap_or_default();
    assert!(
        matches!(done, Ok(Ok(Some(_)))),
        "the job did not end: {st:?}"
    );
    assert_eq!(st.state, Some(JobState::Failed), "{st:?}");
    assert_eq!(st.exit_code, Some(3), "the script really ran: {st:?}");
    // Its output is the batch host pod's log.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(s.cluster.client(), "default");
    let pod = st.tasks[0].pod.clone().expect("the node pod");
    let log = pods
        .logs(
            &pod,
            &kube::api::LogParams {
                container: Some("task".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(log.contains(&format!("hello from {pod}")), "{log}");
    s.stop().await;
}
