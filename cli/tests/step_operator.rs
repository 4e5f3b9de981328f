//! The real operator runs Slurm scripts the Slurm way on the test control plane in exec mode:
//! one node pod per allocated node (not one per task), the batch script once on the first,
//! `srun` steps across the allocation with Slurm's GPU visibility, the job's state and exit
//! code the script's.

mod step_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, LogParams, PostParams};
use kube::runtime::wait::await_condition;
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, JobState, Partition, PartitionSpec};
use muster_operator::controller::Settings;
use muster_operator::core::cluster_spec::ClusterSpec;
use serde_json::json;

async fn setup() -> (step_support::Env, muster_e2e::operator::InProcessOperator) {
    setup_on(step_support::start().await).await
}

async fn setup_on(
    env: step_support::Env,
) -> (step_support::Env, muster_e2e::operator::InProcessOperator) {
    let server = env.cluster.api_server().expect("the API server double");
    let settings = Settings {
        namespace: "muster-system".into(),
        leader_election: false,
        identity: "step-operator-test".into(),
        ..Settings::default()
    };
    let op = muster_e2e::operator::start(server, settings, false)
        .await
        .expect("the operator starts");
    let p = Partition::new(
        "gpu",
        PartitionSpec {
            topology: ClusterSpec::from_yaml(step_support::SPEC)
                .unwrap()
                .topology(),
            default: Some(true),
            default_image: Some("debian:bookworm".into()),
            grace_time_seconds: Some(10),
            ..PartitionSpec::default()
        },
    );
    Api::<Partition>::all(env.cluster.client())
        .create(&PostParams::default(), &p)
        .await
        .unwrap();
    (env, op)
}

async fn submit(env: &step_support::Env, ns: &str, name: &str, spec: serde_json::Value) {
    let bj: BatchJob = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .unwrap();
    Api::<BatchJob>::namespaced(env.cluster.client(), ns)
        .create(&PostParams::default(), &bj)
        .await
        .unwrap();
}

/// Waits until the job ends; returns it.
async fn ended(env: &step_support::Env, ns: &str, name: &str, secs: u64) -> BatchJob {
    let api: Api<BatchJob> = Api::namespaced(env.cluster.client(), ns);
    let cond = |j: Option<&BatchJob>| {
        j.and_then(|j| j.status.as_ref())
            .and_then(|s| s.state)
            .is_some_and(|s| s.is_terminal())
    };
    match tokio::time::timeout(
        Duration::from_secs(secs),
        await_condition(api.clone(), name, cond),
    )
    .await
    {
        Ok(Ok(Some(j))) => j,
        other => {
            let logs = logs(env, ns, name).await;
            let j = api.get(name).await.ok().and_then(|j| j.status);
            panic!("{name} did not end in {secs} s ({other:?}); status {j:?}; logs:\n{logs}")
        }
    }
}

/// Every pod of the namespace's jobs, by job name, as a watch started before the submissions
/// saw them: once a job ends the operator deletes its node pods still waiting for steps, so a
/// list taken after the end may no longer hold them.
struct PodsSeen {
    names: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>,
    watch: tokio::task::AbortHandle,
}

impl Drop for PodsSeen {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl PodsSeen {
    /// Starts watching; returns once the watch has listed (so no later pod is missed).
    async fn start(env: &step_support::Env, ns: &str) -> PodsSeen {
        use kube::runtime::WatchStreamExt;
        use kube::runtime::watcher::{self, Event};
        let names = Arc::new(Mutex::new(BTreeMap::new()));
        let api = Api::<Pod>::namespaced(env.cluster.client(), ns);
        // With a backoff: once the test's server is gone the watch must sleep between retries,
        // not spin (a task that never yields keeps the test's runtime from shutting down).
        let mut events = Box::pin(
            watcher::watcher(api, watcher::Config::default().labels(labels::BATCHJOB))
                .default_backoff(),
        );
        let (listed, ready) = tokio::sync::oneshot::channel();
        let mut listed = Some(listed);
        let seen = names.clone();
        let watch = tokio::spawn(async move {
            while let Some(e) = events.next().await {
                match e {
                    Ok(Event::Apply(p) | Event::InitApply(p)) => PodsSeen::add(&seen, &p),
                    Ok(Event::InitDone) => {
                        if let Some(l) = listed.take() {
                            let _ = l.send(());
                        }
                    }
                    _ => {}
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(20), ready)
            .await
            .expect("the pod watch lists within 20 s")
            .expect("the pod watch runs");
        PodsSeen {
            names,
            watch: watch.abort_handle(),
        }
    }

    fn add(names: &Mutex<BTreeMap<String, BTreeSet<String>>>, p: &Pod) {
        let job = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::BATCHJOB));
        if let (Some(job), Some(name)) = (job, &p.metadata.name) {
            let mut m = names.lock().unwrap();
            m.entry(job.clone()).or_default().insert(name.clone());
        }
    }

    /// The names of the job's pods seen so far.
    fn of(&self, job: &str) -> Vec<String> {
        let m = self.names.lock().unwrap();
        m.get(job).into_iter().flatten().cloned().collect()
    }
}

async fn pods(env: &step_support::Env, ns: &str, name: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(env.cluster.client(), ns)
        .list(&ListParams::default().labels(&format!("{}={name}", labels::BATCHJOB)))
        .await
        .unwrap()
        .items
}

async fn log(env: &step_support::Env, ns: &str, pod: &str, container: &str) -> String {
    Api::<Pod>::namespaced(env.cluster.client(), ns)
        .logs(
            pod,
            &LogParams {
                container: Some(container.into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_default()
}

async fn logs(env: &step_support::Env, ns: &str, name: &str) -> String {
    let mut out = String::new();
    for p in pods(env, ns, name).await {
        let pn = p.metadata.name.clone().unwrap_or_default();
        for c in ["muster-step-install", "task"] {
            out.push_str(&format!("--- {pn} {c}\n{}", log(env, ns, &pn, c).await));
        }
    }
    out
}

/// `srun -l printenv SLURM_PROCID CUDA_VISIBLE_DEVICES` output: task → its
/// `CUDA_VISIBLE_DEVICES` (each task prints its rank, then its GPUs).
fn visibility(out: &str) -> BTreeMap<u32, String> {
    let mut lines: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for l in out.lines() {
        if let Some((t, v)) = l.split_once(": ")
            && let Ok(t) = t.trim().parse::<u32>()
        {
            lines.entry(t).or_default().push(v.to_string());
        }
    }
    lines
        .into_iter()
        .map(|(t, v)| {
            assert_eq!(v.len(), 2, "task {t}: {v:?} in\n{out}");
            assert_eq!(v[0], t.to_string(), "SLURM_PROCID of task {t} in\n{out}");
            (t, v[1].clone())
        })
        .collect()
}

const SCRIPT: &str = "#!/bin/bash\n\
srun -l printenv SLURM_PROCID CUDA_VISIBLE_DEVICES\n\
echo \"master=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\"\n\
echo \"nodes=$SLURM_JOB_NODELIST ntasks=$SLURM_NTASKS host=$(hostname)\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_script_runs_once_on_node_pods_with_srun_steps() {
    let (env, op) = setup().await;
    let ns = env.namespace("steps").await;
    let seen = PodsSeen::start(&env, &ns).await;

    // --gpus-per-task=1: two nodes x two tasks, each task its own GPU.
    submit(
        &env,
        &ns,
        "pertask",
        json!({"nodes": 2, "ntasksPerNode": 2, "gpusPerTask": 1, "script": SCRIPT}),
    )
    .await;
    // --gres=gpu:2: every task on a node sees the node's two GPUs.
    submit(
        &env,
        &ns,
        "gres",
        json!({"nodes": 2, "ntasksPerNode": 2, "gres": "gpu:2", "script": SCRIPT}),
    )
    .await;
    // One node: srun steps with a credential the pod made itself (no Secret).
    submit(
        &env,
        &ns,
        "solo",
        json!({"nodes": 1, "ntasks": 2, "gpusPerTask": 1, "script": SCRIPT}),
    )
    .await;
    // A failing script: the job FAILED with its exit code.
    submit(
        &env,
        &ns,
        "fails",
        json!({"nodes": 2, "ntasksPerNode": 1, "script": "srun true\nexit 7\n"}),
    )
    .await;

    let j = ended(&env, &ns, "pertask", 120).await;
    let st = j.status.clone().unwrap();
    let out = log(&env, &ns, "pertask-0", "task").await;
    assert_eq!(
        st.state,
        Some(JobState::Completed),
        "{st:?}\n{}",
        logs(&env, &ns, "pertask").await
    );
    assert_eq!(st.exit_code, Some(0));
    // Pods = nodes; the status keeps every task (rank -> node, GPUs).
    assert_eq!(
        seen.of("pertask"),
        ["pertask-0", "pertask-1"],
        "one pod per node"
    );
    assert_eq!(st.tasks.len(), 4);
    for t in &st.tasks {
        assert_eq!(t.gpus.len(), 1);
        assert_eq!(
            t.pod.as_deref(),
            Some(format!("pertask-{}", t.node_rank).as_str())
        );
    }
    let vis = visibility(&out);
    assert_eq!(
        vis.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "{out}"
    );
    for node in [[0, 1], [2, 3]] {
        // Each task of a node one GPU of its own, numbered inside the node pod.
        let mine: BTreeSet<&str> = node.iter().map(|t| vis[t].as_str()).collect();
        assert_eq!(mine, BTreeSet::from(["0", "1"]), "{out}");
    }
    assert!(out.contains("master=pertask-0\n"), "{out}");
    assert!(
        out.contains("nodes=pertask-[0-1] ntasks=4 host=pertask-0\n"),
        "{out}"
    );
    // The script ran once: one batch output, on node 0 only. (Node 1's pod, still waiting for
    // steps when the job ended, may already be deleted with its log; a pod that had run the
    // script would have ended by itself and stayed.)
    assert_eq!(out.matches("master=").count(), 1, "{out}");
    assert!(
        !log(&env, &ns, "pertask-1", "task")
            .await
            .contains("master=")
    );
    // Its credential: owned by the job, only its pods mount it.
    let sec = Api::<Secret>::namespaced(env.cluster.client(), &ns)
        .get("pertask-step")
        .await
        .unwrap();
    assert_eq!(
        sec.metadata.owner_references.as_ref().unwrap()[0].uid,
        j.metadata.uid.clone().unwrap()
    );

    let g = ended(&env, &ns, "gres", 120).await;
    let out = log(&env, &ns, "gres-0", "task").await;
    assert_eq!(
        g.status.as_ref().unwrap().state,
        Some(JobState::Completed),
        "{out}"
    );
    assert_eq!(seen.of("gres"), ["gres-0", "gres-1"]);
    let vis = visibility(&out);
    assert_eq!(vis.len(), 4, "{out}");
    assert!(vis.values().all(|v| v == "0,1"), "{out}");

    let solo = ended(&env, &ns, "solo", 120).await;
    let out = log(&env, &ns, "solo-0", "task").await;
    assert_eq!(
        solo.status.as_ref().unwrap().state,
        Some(JobState::Completed),
        "{out}"
    );
    assert_eq!(seen.of("solo"), ["solo-0"]);
    let vis = visibility(&out);
    assert_eq!(vis.keys().copied().collect::<Vec<_>>(), [0, 1], "{out}");
    let mine: BTreeSet<&str> = vis.values().map(String::as_str).collect();
    assert_eq!(mine, BTreeSet::from(["0", "1"]), "{out}");
    assert!(out.contains("master=solo-0\n"), "{out}");
    // No Secret: the key never left the pod.
    let none = Api::<Secret>::namespaced(env.cluster.client(), &ns)
        .get_opt("solo-step")
        .await
        .unwrap();
    assert!(
        none.is_none(),
        "a one-node job has no step credential Secret"
    );

    let f = ended(&env, &ns, "fails", 120).await;
    let fs = f.status.unwrap();
    assert_eq!(fs.state, Some(JobState::Failed), "{fs:?}");
    assert_eq!(fs.exit_code, Some(7));
    assert_eq!(fs.reason.as_deref(), Some("NonZeroExitCode"));
    op.shutdown().await.unwrap();
    env.cluster.shutdown().await;
}

/// examples/sbatch/mpirun-2x2.sh's plain form: `mpirun -np 4` under the operator starts its
/// daemons through srun on both node pods (Open MPI from Debian; the program is `hostname`
/// here, the example's own needs CUDA).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpirun_runs_unmodified_through_the_operators_node_pods() {
    let (env, op) = setup().await;
    let ns = env.namespace("mpi").await;
    let seen = PodsSeen::start(&env, &ns).await;
    submit(
        &env,
        &ns,
        "mpirun",
        json!({"jobName": "mpirun_test", "nodes": 2, "ntasksPerNode": 2, "gpusPerTask": 1,
               "script": "#!/bin/bash\nmpirun -np 4 hostname\n",
               "template": {"spec": {"containers": [{"name": "task", "env": [
                   {"name": "OMPI_ALLOW_RUN_AS_ROOT", "value": "1"},
                   {"name": "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "value": "1"}]}]}}}),
    )
    .await;
    let j = ended(&env, &ns, "mpirun", 180).await;
    let out = log(&env, &ns, "mpirun-0", "task").await;
    let st = j.status.unwrap();
    assert_eq!(
        st.state,
        Some(JobState::Completed),
        "{st:?}\n{}",
        logs(&env, &ns, "mpirun").await
    );
    assert_eq!(seen.of("mpirun"), ["mpirun-0", "mpirun-1"]);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        ["mpirun-0", "mpirun-0", "mpirun-1", "mpirun-1"],
        "{out}"
    );
    op.shutdown().await.unwrap();
    env.cluster.shutdown().await;
}

/// An image with no program and no library in it (see [`step_support::start_with`]).
const EMPTY_IMAGE: &str = "scratch.muster.test/empty";

/// A job without a script in [`EMPTY_IMAGE`]: its command, one step of 4 tasks over 2 nodes,
/// is `scontrol show hostnames` from the installed `muster-step`.
async fn submit_bare(env: &step_support::Env, ns: &str, name: &str) {
    submit(
        env,
        ns,
        name,
        json!({"nodes": 2, "ntasksPerNode": 2,
               "template": {"spec": {"containers": [{"name": "task", "image": EMPTY_IMAGE,
                   "command": ["/muster/bin/scontrol", "show", "hostnames"]}]}}}),
    )
    .await;
}

/// The control for [`the_static_step_binary_runs_jobs_in_an_empty_image`]: a dynamically
/// linked `muster-step` (the cargo-built one) cannot even install itself from an operator
/// image that holds nothing else, so these images really lack what a dynamic program needs.
/// The user sees why: the job is requeued with a backoff (not retried at once, forever), its
/// message naming the init container and how it failed; `scancel` then ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_step_binary_cannot_run_in_an_empty_image() {
    let step = std::path::Path::new(env!("CARGO_BIN_EXE_muster-step"));
    let (env, op) = setup_on(step_support::start_with(step, &[EMPTY_IMAGE]).await).await;
    let ns = env.namespace("dynamic").await;
    submit_bare(&env, &ns, "bare").await;
    let api: Api<BatchJob> = Api::namespaced(env.cluster.client(), &ns);
    let requeued = |j: Option<&BatchJob>| {
        j.and_then(|j| j.status.as_ref())
            .is_some_and(|s| s.reason.as_deref() == Some("JobLaunchFailure"))
    };
    let j = tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(api.clone(), "bare", requeued),
    )
    .await
    .expect("requeued after the launch failure")
    .unwrap()
    .unwrap();
    let st = j.status.unwrap();
    let m = st.message.clone().unwrap_or_default();
    assert_eq!(st.state, Some(JobState::Pending), "{st:?}");
    assert_eq!(st.restarts, Some(1), "{st:?}");
    assert!(
        m.contains("init container muster-step-install exited with code 128 (StartError")
            && m.ends_with("requeued, eligible again in 30s"),
        "{m}"
    );
    api.patch(
        "bare",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"cancel": true}})),
    )
    .await
    .unwrap();
    let j = ended(&env, &ns, "bare", 60).await;
    let st = j.status.unwrap();
    assert_eq!(st.state, Some(JobState::Cancelled), "{st:?}");
    assert_eq!(st.restarts, Some(1), "launched once: {st:?}");
    op.shutdown().await.unwrap();
    env.cluster.shutdown().await;
}

/// The `muster-step` the operator image ships (static: `docker/build-muster-step.sh`) runs a
/// two-node job whose image and operator image hold nothing but it: no shell, no C library,
/// no name service modules. `srun` reaches the other node by its name (the cluster DNS of
/// the pod's `/etc/resolv.conf`), every task runs, the job completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the static muster-step in MUSTER_STATIC_STEP (.ci/test builds it with docker/build-muster-step.sh)"]
async fn the_static_step_binary_runs_jobs_in_an_empty_image() {
    let step = std::env::var_os("MUSTER_STATIC_STEP")
        .expect("MUSTER_STATIC_STEP: the static muster-step (docker/build-muster-step.sh)");
    let step = std::path::Path::new(&step);
    let (env, op) = setup_on(step_support::start_with(step, &[EMPTY_IMAGE]).await).await;
    let ns = env.namespace("static").await;
    let seen = PodsSeen::start(&env, &ns).await;
    submit_bare(&env, &ns, "bare").await;
    let j = ended(&env, &ns, "bare", 120).await;
    let st = j.status.unwrap();
    let all = logs(&env, &ns, "bare").await;
    assert_eq!(st.state, Some(JobState::Completed), "{st:?}\n{all}");
    assert_eq!(seen.of("bare"), ["bare-0", "bare-1"], "{all}");
    // Four tasks, two on each node, each printing the job's two node names.
    let out = log(&env, &ns, "bare-0", "task").await;
    assert_eq!(
        step_support::sorted(&out),
        [["bare-0"; 4], ["bare-1"; 4]].concat(),
        "{all}"
    );
    op.shutdown().await.unwrap();
    env.cluster.shutdown().await;
}
