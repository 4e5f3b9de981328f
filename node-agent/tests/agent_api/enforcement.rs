//! Binding enforcement through the API: GPU processes traced through a fake /proc to pods in
//! the double, judged against the GPUs the operator assigned (the BatchJob's `status.tasks`,
//! the pods' `NVIDIA_VISIBLE_DEVICES`), reported as Events and a counter, killed under `kill`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, PodGpuUsage, TaskAllocation};
use muster_node_agent::agent::VIOLATION_REASON;
use muster_node_agent::inventory::ScriptHandle;
use muster_node_agent::inventory::fixture::Action;
use muster_node_agent::model::GpuProcess;
use muster_node_agent::procfs::fake;
use muster_node_agent::{Agent, Policy, RecordingKiller};
use serde_json::json;

use crate::support::*;

const NS: &str = "default";

/// The GPUs of the dgx-h100 fixture, by index.
fn uuid(i: usize) -> String {
    fixture("dgx-h100").inventory.gpus[i].uuid.clone()
}

fn container_id(n: u8) -> String {
    format!("{:02x}", n).repeat(32)
}

/// A task pod as the operator makes it (labels, `NVIDIA_VISIBLE_DEVICES` = the task's GPU
/// UUIDs), bound to `NODE` and running, its container with runtime id `cid`.
async fn task_pod(client: &Client, job: &str, rank: u32, gpus: &[usize], cid: &str) -> Pod {
    let visible: Vec<String> = gpus.iter().map(|g| uuid(*g)).collect();
    let name = format!("{job}-{rank}");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {
            labels::BATCHJOB: job, labels::NODE_RANK: rank.to_string(), labels::ATTEMPT: "1"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "task", "image": "busybox:1.36",
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": visible.join(",")}]}]},
    }))
    .unwrap();
    running(client, pod, cid).await
}

/// A pod that is no Muster task: its GPUs come from its env only.
async fn plain_pod(client: &Client, name: &str, visible: &str, cid: &str) -> Pod {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeName": NODE, "containers": [{"name": "notebook", "image": "jupyter",
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": visible}]}]},
    }))
    .unwrap();
    running(client, pod, cid).await
}

async fn running(client: &Client, pod: Pod, cid: &str) -> Pod {
    let api = Api::<Pod>::namespaced(client.clone(), NS);
    let created = api.create(&PostParams::default(), &pod).await.unwrap();
    let container = created.spec.as_ref().unwrap().containers[0].name.clone();
    api.patch_status(
        &created.name_any(),
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"phase": "Running", "containerStatuses": [{
            "name": container, "image": "busybox:1.36", "imageID": "", "ready": true,
            "restartCount": 0, "containerID": format!("containerd://{cid}"),
            "state": {"running": {}}}]}}),
        ),
    )
    .await
    .unwrap()
}

/// The BatchJob `job` with its allocation as the operator records it (attempt 1, RUNNING).
async fn batchjob(client: &Client, job: &str, tasks: &[(u32, &[usize])]) {
    let api = Api::<BatchJob>::namespaced(client.clone(), NS);
    let bj: BatchJob = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "BatchJob",
        "metadata": {"name": job, "namespace": NS},
        "spec": {"script": "python train.py", "nodes": 1, "ntasks": tasks.len()},
    }))
    .unwrap();
    api.create(&PostParams::default(), &bj).await.unwrap();
    let tasks: Vec<TaskAllocation> = tasks
        .iter()
        .map(|(rank, gpus)| TaskAllocation {
            rank: *rank,
            node: NODE.into(),
            node_rank: *rank,
            gpus: gpus.iter().map(|g| *g as u32).collect(),
            gpu_uuids: gpus.iter().map(|g| uuid(*g)).collect(),
            pod: Some(format!("{job}-{rank}")),
            ..Default::default()
        })
        .collect();
    api.patch_status(
        job,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"state": "RUNNING", "attempt": 1, "tasks": tasks}})),
    )
    .await
    .unwrap();
}

fn proc(gpu: u32, pid: u32, mib: u64) -> Action {
    Action::Process(GpuProcess {
        gpu,
        pid,
        used_memory_mib: Some(mib),
    })
}

fn usage(pod: &str, gpu: u32, mib: u64, assigned: bool) -> PodGpuUsage {
    PodGpuUsage {
        namespace: NS.into(),
        pod: pod.into(),
        gpu,
        memory_used_mib: mib,
        assigned,
    }
}

struct Scene {
    _server: muster_e2e::apiserver::ApiServer,
    client: Client,
    dir: tempfile::TempDir,
    script: ScriptHandle,
    killer: RecordingKiller,
    agent: Agent,
    t: jiff::Timestamp,
    train0: Pod,
    train1: Pod,
}

/// Node `gpu-a` (a DGX H100 fixture) running BatchJob `train`: rank 0 was given GPUs 0,1 and
/// runs on GPU 0 (pid 1000, 20 GiB) and GPU 1 (pid 1001); rank 1 was given GPU 2 but its pid
/// 2000 also holds memory on GPU 3. Pod `notebook` (no Muster task) was given GPU 6 by env
/// and uses it (pid 3000). A host daemon (pid 4000) sits on GPU 3 too.
async fn scene(policy: Policy) -> Scene {
    let (server, client) = api().await;
    register_node(&client, NODE).await;
    batchjob(&client, "train", &[(0, &[0, 1]), (1, &[2])]).await;
    let train0 = task_pod(&client, "train", 0, &[0, 1], &container_id(1)).await;
    // Rank 1's pod env disagrees with the BatchJob (it names GPU 3 too): the BatchJob status
    // is what the scheduler counts, so GPU 3 is still a violation.
    let train1 = task_pod(&client, "train", 1, &[2, 3], &container_id(2)).await;
    let notebook = plain_pod(&client, "notebook", &uuid(6), &container_id(3)).await;

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // rank 0: cgroup v2, systemd driver, containerd (the fake's default layout).
    fake::pod_process(
        root,
        1000,
        "python",
        &train0.uid().unwrap(),
        &container_id(1),
    )
    .unwrap();
    fake::pod_process(
        root,
        1001,
        "python",
        &train0.uid().unwrap(),
        &container_id(1),
    )
    .unwrap();
    // rank 1: cgroup v1, cgroupfs driver.
    let v1 = format!(
        "12:devices:/kubepods/burstable/pod{uid}/{cid}\n11:memory:/kubepods/burstable/pod{uid}/{cid}\n0::/\n",
        uid = train1.uid().unwrap(),
        cid = container_id(2)
    );
    fake::process(root, 2000, "torchrun", &v1).unwrap();
    // notebook: cgroup v2, cgroupfs driver.
    fake::process(
        root,
        3000,
        "python3",
        &format!(
            "0::/kubepods/besteffort/pod{}/{}\n",
            notebook.uid().unwrap(),
            container_id(3)
        ),
    )
    .unwrap();
    fake::host_process(root, 4000, "dcgm-exporter").unwrap();

    let t = t0();
    let inv = fixture_inventory("dgx-h100", t);
    let script = inv.handle();
    for p in [
        proc(0, 1000, 20480),
        proc(1, 1001, 1024),
        proc(2, 2000, 30000),
        proc(3, 2000, 512),
        proc(6, 3000, 4096),
        proc(3, 4000, 300),
    ] {
        script.inject(p);
    }
    let killer = RecordingKiller::default();
    let agent = agent(
        &client,
        config(policy, 300, root),
        inv,
        Arc::new(killer.clone()),
        t,
    )
    .await;
    Scene {
        _server: server,
        client,
        dir,
        script,
        killer,
        agent,
        t,
        train0,
        train1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_report_gives_an_event_and_a_counter_and_kills_nothing() {
    let mut s = scene(Policy::Report).await;
    let r = s.agent.cycle(s.t).await.unwrap();
    assert!(r.killed.is_empty());
    let v: Vec<(u32, u32, &str)> = r
        .new_violations
        .iter()
        .map(|v| (v.process.pid, v.process.gpu, v.pod.as_str()))
        .collect();
    assert_eq!(v, [(2000, 3, "train-1")]);
    assert_eq!(
        r.host_processes
            .iter()
            .map(|p| (p.pid, p.gpu))
            .collect::<Vec<_>>(),
        [(4000, 3)]
    );

    // One Warning Event on the violating pod, none on the others.
    let evs = events_about(&s.client, NS, "train-1").await;
    assert_eq!(reasons(&evs), [VIOLATION_REASON]);
    let ev = &evs[0];
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.action.as_deref(), Some("Report"));
    let regarding = ev.regarding.as_ref().unwrap();
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(regarding.uid, s.train1.uid());
    let note = ev.note.as_deref().unwrap();
    assert_eq!(
        note,
        format!(
            "process 2000 (torchrun) in container task uses GPU 3 ({}), 512 MiB; the pod was \
             given GPUs 2 from BatchJob train node 1; policy report: not killed",
            uuid(3)
        )
    );
    for pod in ["train-0", "notebook"] {
        assert!(events_about(&s.client, NS, pod).await.is_empty(), "{pod}");
    }

    // The GpuNode: the counter, and memory per pod and GPU (host processes are no pod's).
    let st = status(&s.client).await;
    assert_eq!(st.binding_violations, 1);
    assert_eq!(
        st.usage,
        [
            usage("notebook", 6, 4096, true),
            usage("train-0", 0, 20480, true),
            usage("train-0", 1, 1024, true),
            usage("train-1", 2, 30000, true),
            usage("train-1", 3, 512, false),
        ]
    );
    assert_eq!(
        st.gpus[3].memory_used_mib,
        Some(512 + 300),
        "host process counted"
    );
    assert_eq!(st.gpus[0].memory_used_mib, Some(20480));

    // Still there at the next polls: not counted again, no new Event, never killed.
    for secs in [5, 10] {
        let r = s.agent.cycle(at(s.t, secs)).await.unwrap();
        assert!(r.new_violations.is_empty() && r.killed.is_empty());
    }
    assert_eq!(status(&s.client).await.binding_violations, 1);
    assert_eq!(events_about(&s.client, NS, "train-1").await.len(), 1);
    assert!(s.killer.killed().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_kill_kills_exactly_the_violating_process() {
    let mut s = scene(Policy::Kill).await;
    let r = s.agent.cycle(s.t).await.unwrap();
    assert_eq!(r.killed, [2000]);
    assert_eq!(s.killer.killed(), [2000]);
    let evs = events_about(&s.client, NS, "train-1").await;
    assert_eq!(reasons(&evs), [VIOLATION_REASON]);
    assert_eq!(evs[0].action.as_deref(), Some("Kill"));
    assert!(
        evs[0]
            .note
            .as_deref()
            .unwrap()
            .ends_with("; policy kill: process killed"),
        "{:?}",
        evs[0].note
    );
    assert_eq!(status(&s.client).await.binding_violations, 1);

    // It survived the signal (the fake killer kills nothing): killed again, not recounted.
    let r = s.agent.cycle(at(s.t, 5)).await.unwrap();
    assert_eq!(r.killed, [2000]);
    assert!(r.new_violations.is_empty());
    assert_eq!(s.killer.killed(), [2000, 2000]);

    // Now it is gone: nothing more to kill, and its usage entry leaves the status at once.
    fake::exit(s.dir.path(), 2000).unwrap();
    let r = s.agent.cycle(at(s.t, 10)).await.unwrap();
    assert!(r.killed.is_empty() && r.published);
    let st = status(&s.client).await;
    assert_eq!(st.binding_violations, 1);
    assert!(
        st.usage.iter().all(|u| u.pod != "train-1"),
        "{:?}",
        st.usage
    );
    assert_eq!(s.killer.killed(), [2000, 2000]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_violation_is_counted_and_reported_on_its_own_pod() {
    let mut s = scene(Policy::Report).await;
    s.agent.cycle(s.t).await.unwrap();
    // Rank 0 starts a process on GPU 7, which it was never given.
    fake::pod_process(
        s.dir.path(),
        1002,
        "python",
        &s.train0.uid().unwrap(),
        &container_id(1),
    )
    .unwrap();
    s.script.inject(proc(7, 1002, 2048));
    let r = s.agent.cycle(at(s.t, 5)).await.unwrap();
    assert!(
        r.published,
        "a violation is written at once, not at the heartbeat"
    );
    let v: Vec<(u32, u32, &str)> = r
        .new_violations
        .iter()
        .map(|v| (v.process.pid, v.process.gpu, v.pod.as_str()))
        .collect();
    assert_eq!(v, [(1002, 7, "train-0")]);
    let st = status(&s.client).await;
    assert_eq!(st.binding_violations, 2);
    assert!(st.usage.contains(&usage("train-0", 7, 2048, false)));
    let evs = events_about(&s.client, NS, "train-0").await;
    assert_eq!(reasons(&evs), [VIOLATION_REASON]);
    let note = evs[0].note.as_deref().unwrap();
    assert!(
        note.starts_with("process 1002 (python) in container task uses GPU 7")
            && note.contains("the pod was given GPUs 0,1 from BatchJob train node 0"),
        "{note}"
    );
    assert_eq!(events_about(&s.client, NS, "train-1").await.len(), 1);
    assert!(s.killer.killed().is_empty());
}
