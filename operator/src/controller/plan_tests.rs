//! The planner and executor together over the in-memory cluster: job lifecycles, arrays,
//! dependencies, preemption, crash injection and API errors.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use muster_crds::labels;
use muster_crds::v1alpha1::{
    BatchJob, BatchJobSpec, BatchJobStatus, JobState, Partition, PartitionSpec, PreemptMode,
};

use super::exec::{CrashAfter, Fault, Faults, WriteKind};
use super::fake::Harness;
use super::plan::PodObs;
use super::status::LAUNCH_FAILURE;

pub(super) fn partition(name: &str, default: bool) -> Partition {
    Partition::new(
        name,
        PartitionSpec {
            default: Some(default),
            topology: vec!["muster.dev/leaf".into(), "kubernetes.io/hostname".into()],
            default_image: Some("busybox".into()),
            ..Default::default()
        },
    )
}

/// `nodes` nodes of `gpus` GPUs under 2 leaves, one default partition `gpu`.
pub(super) fn harness(nodes: usize, gpus: u32) -> Harness {
    let h = Harness::new();
    h.cluster.add_nodes(nodes, gpus, 2);
    h.cluster.add_partition(partition("gpu", true));
    h
}

pub(super) fn int(i: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(i))
}

/// A job whose pods run `runtime` seconds; `fail` makes one node's pod (`(node index, code)`;
/// node 0 is the batch script) exit with a code.
pub(super) fn job(
    name: &str,
    mut spec: BatchJobSpec,
    runtime: i64,
    fail: Option<(u32, i32)>,
) -> BatchJob {
    let mut ann = BTreeMap::new();
    ann.insert("sim/runtime".to_string(), runtime.to_string());
    if let Some((rank, code)) = fail {
        ann.insert("sim/fail-rank".to_string(), rank.to_string());
        ann.insert("sim/exit".to_string(), code.to_string());
    }
    spec.script.get_or_insert_with(|| "python train.py".into());
    spec.template = Some(Box::new(PodTemplateSpec {
        metadata: Some(ObjectMeta {
            annotations: Some(ann),
            ..Default::default()
        }),
        spec: None,
    }));
    BatchJob::new(name, spec)
}

pub(super) fn gpus(n: i32) -> BatchJobSpec {
    BatchJobSpec {
        gpus: int(n),
        ..Default::default()
    }
}

pub(super) fn gang(nodes: i32, per_node: u32, gpus_per_task: i32) -> BatchJobSpec {
    BatchJobSpec {
        nodes: int(nodes),
        ntasks_per_node: Some(per_node),
        gpus_per_task: int(gpus_per_task),
        ..Default::default()
    }
}

/// Runs the cluster and the operator for `secs` seconds in 5-second steps.
pub(super) fn run_for(h: &mut Harness, secs: i64) {
    for _ in 0..(secs + 4) / 5 {
        h.step(5);
    }
}

pub(super) fn writes_excluding_events(h: &Harness) -> u64 {
    h.writes
        .iter()
        .filter(|(k, _)| !matches!(k, WriteKind::Event | WriteKind::PartitionStatus))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn single_gpu_job_runs_to_completion_within_the_write_budget() {
    let mut h = harness(2, 8);
    h.cluster.submit(job("one", gpus(1), 60, None));
    h.cycle();
    let j = h.cluster.job("one");
    let st = j.status.clone().unwrap();
    assert_eq!(st.state, Some(JobState::Running));
    assert_eq!(st.job_id, Some(1));
    assert_eq!(st.partition.as_deref(), Some("gpu"));
    assert_eq!(st.attempt, Some(1));
    assert!(st.submit_time.is_some() && st.start_time.is_some());
    assert_eq!(st.tasks.len(), 1);
    assert_eq!(st.tasks[0].gpu_uuids.len(), 1);
    assert_eq!(st.tasks[0].pod.as_deref(), Some("one-0"));
    let admitted = st.tasks.clone();
    assert!(j.finalizers().contains(&labels::FINALIZER.to_string()));
    let pods = h.cluster.pods_of("one");
    assert_eq!(pods.len(), 1);
    // First write carried the id and the allocation: finalizer + status + the pod. A
    // one-node job has no step credential Secret: its pod makes its own key.
    assert_eq!(writes_excluding_events(&h), 3);
    assert!(h.cluster.lock().secrets.is_empty());
    assert_eq!(h.writes.get(&WriteKind::Secret), None);
    h.step(10);
    assert_eq!(h.cluster.state("one"), JobState::Running);
    h.step(60);
    let st = h.cluster.job("one").status.unwrap();
    assert_eq!(st.state, Some(JobState::Completed));
    assert_eq!(st.exit_code, Some(0));
    assert!(st.end_time.is_some());
    // The planner borrows the stored records while deciding; the final status carries them
    // back unchanged.
    assert_eq!(st.tasks, admitted, "the record is kept");
    // pods + 3 writes (finalizer, status, final status) for a job that started without
    // waiting.
    assert_eq!(writes_excluding_events(&h), 1 + 3);
    // Quiet afterwards: nothing more to write.
    let before = writes_excluding_events(&h);
    h.step(10);
    h.step(10);
    assert_eq!(writes_excluding_events(&h), before);
    let kinds: Vec<String> = h
        .cluster
        .lock()
        .events
        .iter()
        .map(|e| e.1.reason.clone())
        .collect();
    assert_eq!(kinds, ["Started", "Completed"]);
}

#[test]
fn gang_gets_distinct_gpus_node_pods_a_secret_and_a_service() {
    let mut h = harness(4, 4);
    h.cluster.submit(job("mpi", gang(2, 2, 1), 60, None));
    h.cycle();
    let st = h.cluster.job("mpi").status.unwrap();
    assert_eq!(st.state, Some(JobState::Running));
    assert_eq!(st.tasks.len(), 4);
    assert_eq!(st.num_nodes, Some(2));
    let mut seen = std::collections::BTreeSet::new();
    for t in &st.tasks {
        assert_eq!(t.gpus.len(), 1);
        assert!(seen.insert((t.node.clone(), t.gpus[0])), "GPU given twice");
    }
    assert!(
        h.cluster
            .lock()
            .services
            .contains(&("default".into(), "mpi".into()))
    );
    assert!(
        h.cluster
            .lock()
            .secrets
            .contains_key(&("default".into(), "mpi-step".into()))
    );
    // One pod per node, holding its two tasks' GPUs.
    let pods = h.cluster.pods_of("mpi");
    assert_eq!(pods.len(), 2);
    for p in &pods {
        let env: BTreeMap<String, String> = p.spec.as_ref().unwrap().containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        assert_eq!(env["WORLD_SIZE"], "4");
        assert_eq!(env["SLURM_JOB_NODELIST"], "mpi-[0-1]");
        assert_eq!(env["MASTER_ADDR"], "mpi-0");
        let node: u32 = env["NODE_RANK"].parse().unwrap();
        let t = crate::controller::pods::node_share(&st.tasks, node).unwrap();
        assert_eq!(t.gpus.len(), 2);
        assert_eq!(env["NVIDIA_VISIBLE_DEVICES"], t.gpu_uuids.join(","));
    }
    // 2 pods + secret + service + finalizer + status.
    assert_eq!(writes_excluding_events(&h), 2 + 1 + 1 + 2);
    run_for(&mut h, 70);
    assert_eq!(h.cluster.state("mpi"), JobState::Completed);
}

#[test]
fn waiting_job_gets_a_reason_and_does_not_churn() {
    let mut h = harness(1, 8);
    let mut big = gpus(8);
    big.time = int(20);
    h.cluster.submit(job("big", big, 600, None));
    h.cycle();
    h.now += 1;
    h.cluster.submit(job("next", gpus(8), 600, None));
    h.cycle();
    let st = h.cluster.job("next").status.unwrap();
    assert_eq!(st.state, Some(JobState::Pending));
    assert_eq!(st.reason.as_deref(), Some("Resources"));
    assert_eq!(st.job_id, Some(2));
    assert!(
        st.start_time.is_some(),
        "estimated start from the reservation"
    );
    let cond = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Reconciling")
        .unwrap();
    assert_eq!(cond.status, "True");
    let before = writes_excluding_events(&h);
    for _ in 0..5 {
        h.step(1);
    }
    assert_eq!(
        writes_excluding_events(&h),
        before,
        "no writes while nothing changes"
    );
    run_for(&mut h, 620);
    assert_eq!(h.cluster.state("big"), JobState::Completed);
    assert_eq!(h.cluster.state("next"), JobState::Running);
}

#[test]
fn time_limit_ends_in_timeout_and_stops_pods() {
    let mut h = harness(1, 8);
    let mut spec = gpus(2);
    spec.time = int(1);
    h.cluster.submit(job("slow", spec, 3600, None));
    h.cycle();
    h.step(30);
    assert_eq!(h.cluster.state("slow"), JobState::Running);
    h.step(31);
    let st = h.cluster.job("slow").status.unwrap();
    assert_eq!(st.state, Some(JobState::Timeout));
    assert_eq!(st.reason.as_deref(), Some("TimeLimit"));
    assert!(
        h.cluster
            .pods_of("slow")
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some())
    );
    run_for(&mut h, 30);
    assert!(h.cluster.pods_of("slow").is_empty());
}

#[test]
fn cancel_keeps_the_record() {
    let mut h = harness(1, 8);
    h.cluster.submit(job("c", gpus(1), 3600, None));
    h.cycle();
    h.step(5);
    h.cluster.edit("c", |j| j.spec.cancel = Some(true));
    h.step(1);
    let j = h.cluster.job("c");
    let st = j.status.unwrap();
    assert_eq!(st.state, Some(JobState::Cancelled));
    assert_eq!(st.observed_generation, j.metadata.generation);
    assert_eq!(st.tasks.len(), 1);
    run_for(&mut h, 30);
    assert!(h.cluster.pods_of("c").is_empty());
    // A pending job cancelled never starts.
    h.cluster.submit(job("later", gpus(1), 10, None));
    h.cluster.edit("later", |j| {
        j.spec.cancel = Some(true);
        j.spec.hold = Some(true);
    });
    h.step(1);
    assert_eq!(h.cluster.state("later"), JobState::Cancelled);
    assert!(h.cluster.pods_of("later").is_empty());
}

#[test]
fn failed_task_fails_the_job_with_its_exit_code() {
    let mut h = harness(2, 4);
    h.cluster.submit(job("f", gang(2, 2, 1), 30, Some((0, 3))));
    h.cycle();
    run_for(&mut h, 40);
    let st = h.cluster.job("f").status.unwrap();
    assert_eq!(st.state, Some(JobState::Failed));
    assert_eq!(st.exit_code, Some(3));
    assert_eq!(st.reason.as_deref(), Some("NonZeroExitCode"));
    assert!(st.message.unwrap().contains("the batch script"));
    let stalled = st.conditions.iter().find(|c| c.type_ == "Stalled").unwrap();
    assert_eq!(stalled.status, "True");
}

#[test]
fn node_failure_requeues_on_other_nodes() {
    let mut h = harness(2, 8);
    h.cluster.submit(job("nf", gpus(8), 100, None));
    h.cycle();
    let node = h.cluster.job("nf").status.unwrap().tasks[0].node.clone();
    h.step(10);
    h.cluster.set_node_ready(&node, false);
    h.step(1);
    let st = h.cluster.job("nf").status.unwrap();
    // Requeued and, with the other node free, started again in the same cycle.
    assert_eq!(st.restarts, Some(1));
    assert_eq!(st.attempt, Some(2));
    assert_eq!(st.state, Some(JobState::Running));
    assert_ne!(st.tasks[0].node, node);
    let names: Vec<String> = h
        .cluster
        .pods_of("nf")
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert!(names.contains(&"nf-0-a2".to_string()), "{names:?}");
    let reasons: Vec<String> = h
        .cluster
        .lock()
        .events
        .iter()
        .map(|e| e.1.reason.clone())
        .collect();
    assert!(reasons.contains(&"NodeFail".to_string()) && reasons.contains(&"Requeued".to_string()));
    run_for(&mut h, 150);
    assert_eq!(h.cluster.state("nf"), JobState::Completed);
}

#[test]
fn node_failure_without_requeue_ends_the_job() {
    let mut h = harness(2, 8);
    let mut spec = gpus(8);
    spec.requeue = Some(false);
    h.cluster.submit(job("nr", spec, 100, None));
    h.cycle();
    let node = h.cluster.job("nr").status.unwrap().tasks[0].node.clone();
    h.cluster.set_node_ready(&node, false);
    h.step(1);
    assert_eq!(h.cluster.state("nr"), JobState::NodeFail);
}

#[test]
fn unhealthy_gpu_under_a_task_is_a_node_failure() {
    let mut h = harness(1, 8);
    h.cluster.submit(job("g", gpus(2), 100, None));
    h.cycle();
    let t = h.cluster.job("g").status.unwrap().tasks[0].clone();
    h.cluster.set_gpu_health(&t.node, t.gpus[0], false);
    h.step(1);
    let st = h.cluster.job("g").status.unwrap();
    assert_eq!(st.restarts, Some(1));
    // Old pod still terminating: its GPUs stay held, the new allocation avoids them and the
    // unhealthy GPU.
    if st.state == Some(JobState::Running) {
        assert!(!st.tasks[0].gpus.contains(&t.gpus[0]));
    }
    h.step(1);
    h.step(1);
    let st = h.cluster.job("g").status.unwrap();
    assert_eq!(st.state, Some(JobState::Running));
    assert!(!st.tasks[0].gpus.contains(&t.gpus[0]));
}

/// A pod failing without an exit (the kubelet refusing it) is a node failure: requeued at
/// once the first time, with a growing backoff when it happens again, never in a tight loop.
#[test]
fn repeated_node_failures_requeue_with_backoff() {
    let mut h = harness(1, 4);
    h.cluster.submit(job("nf2", gpus(4), 100, None));
    let refuse = |h: &mut Harness| {
        let mut s = h.cluster.lock();
        let p = s
            .pods
            .values_mut()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        let p = p.expect("a running pod");
        p.status = Some(
            serde_json::from_value(serde_json::json!({"phase": "Failed",
                "reason": "UnexpectedAdmissionError",
                "message": "Allocate failed due to no healthy devices present"}))
            .unwrap(),
        );
    };
    h.cycle();
    h.step(1);
    assert_eq!(h.cluster.state("nf2"), JobState::Running);
    refuse(&mut h);
    h.step(1);
    let st = h.cluster.job("nf2").status.unwrap();
    assert_eq!(
        (st.restarts, st.reason.as_deref()),
        (Some(1), Some("NodeFail"))
    );
    assert!(!st.message.unwrap().contains("eligible again"));
    // At once: running again within the next cycles (the old pod gone).
    h.step(1);
    h.step(1);
    assert_eq!(h.cluster.state("nf2"), JobState::Running);
    refuse(&mut h);
    h.step(1);
    let st = h.cluster.job("nf2").status.unwrap();
    assert_eq!(st.restarts, Some(2));
    let m = st.message.unwrap();
    assert!(m.ends_with("; eligible again in 30s"), "{m}");
    h.step(20);
    assert_eq!(h.cluster.state("nf2"), JobState::Pending);
    h.step(15);
    assert_eq!(h.cluster.state("nf2"), JobState::Running);
}

/// An init container (the step binary's install) that fails is a launch failure, as a failed
/// Slurm prolog is: requeued with a backoff and a message naming it, not retried at once
/// (a step binary that cannot run on the node would fail again at once, forever).
#[test]
fn a_failed_init_container_requeues_the_job_with_backoff() {
    let mut h = harness(2, 4);
    h.cluster.submit(job("init", gang(2, 1, 4), 30, None));
    h.cycle();
    h.step(1);
    assert_eq!(h.cluster.state("init"), JobState::Running);
    {
        let mut s = h.cluster.lock();
        let p = s
            .pods
            .values_mut()
            .find(|p| p.labels().get(labels::NODE_RANK).map(String::as_str) == Some("0"))
            .unwrap();
        p.status = Some(
            serde_json::from_value(serde_json::json!({"phase": "Failed",
                "initContainerStatuses": [{"name": "muster-step-install", "image": "x",
                    "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 128, "reason": "StartError",
                        "message": "exec format error"}}}],
                "containerStatuses": [{"name": "task", "image": "x", "imageID": "",
                    "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}}}]}))
            .unwrap(),
        );
    }
    h.step(1);
    let st = h.cluster.job("init").status.unwrap();
    assert_eq!(st.state, Some(JobState::Pending));
    assert_eq!(st.reason.as_deref(), Some(LAUNCH_FAILURE));
    assert_eq!(st.restarts, Some(1));
    let m = st.message.unwrap();
    assert!(
        m.contains("could not start: init container muster-step-install exited with code 128 (StartError: exec format error)")
            && m.ends_with("requeued, eligible again in 30s"),
        "{m}"
    );
    h.step(20);
    assert_eq!(h.cluster.state("init"), JobState::Pending);
    h.step(15);
    assert_eq!(h.cluster.state("init"), JobState::Running);
}

#[test]
fn gang_that_cannot_start_is_rolled_back_with_backoff() {
    let mut h = harness(2, 4);
    h.cfg.gang_start_timeout_secs = 60;
    h.cluster.lock().stuck.insert("node1".into());
    h.cluster.submit(job("stuck", gang(2, 1, 4), 30, None));
    h.cycle();
    h.step(30);
    assert_eq!(h.cluster.state("stuck"), JobState::Running);
    h.step(31);
    let st = h.cluster.job("stuck").status.unwrap();
    assert_eq!(st.state, Some(JobState::Pending));
    assert_eq!(st.reason.as_deref(), Some(LAUNCH_FAILURE));
    assert!(st.tasks.is_empty());
    assert_eq!(st.attempt, Some(2));
    assert!(st.message.unwrap().contains("not running"));
    let reasons: Vec<String> = h
        .cluster
        .lock()
        .events
        .iter()
        .map(|e| e.1.reason.clone())
        .collect();
    assert!(reasons.contains(&"GangStartTimeout".to_string()));
    // Backing off: not started again before 30 s.
    h.cluster.lock().stuck.clear();
    h.step(10);
    assert_eq!(h.cluster.state("stuck"), JobState::Pending);
    let left: Vec<_> = h
        .cluster
        .pods_of("stuck")
        .iter()
        .map(|p| {
            (
                p.name_any(),
                p.status.clone(),
                p.metadata.deletion_timestamp.clone(),
            )
        })
        .collect();
    // Ended pods stay for their logs; none is left running.
    assert!(
        h.cluster
            .pods_of("stuck")
            .iter()
            .filter_map(PodObs::from_pod)
            .all(|p| !p.live() || p.deleting),
        "no half gang left behind: {left:?}"
    );
    h.step(25);
    assert_eq!(h.cluster.state("stuck"), JobState::Running);
    run_for(&mut h, 60);
    assert_eq!(h.cluster.state("stuck"), JobState::Completed);
}

#[test]
fn invalid_specs_end_failed_and_missing_partitions_stall() {
    let mut h = harness(1, 8);
    let mut bad = job("bad", gpus(1), 10, None);
    bad.spec.time = Some(IntOrString::String("1h".into()));
    h.cluster.submit(bad);
    h.cycle();
    let st = h.cluster.job("bad").status.unwrap();
    assert_eq!(
        st.state,
        Some(JobState::Failed),
        "terminal, not pending forever"
    );
    assert_eq!(st.reason.as_deref(), Some("InvalidSpec"));
    assert!(st.message.as_deref().unwrap().starts_with("spec.time:"));
    let cond = |st: &BatchJobStatus, t: &str| {
        st.conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    assert_eq!(
        cond(&st, "Failed"),
        Some(("True".into(), "InvalidSpec".into()))
    );
    assert_eq!(cond(&st, "Complete"), None);
    // Ended: an edit does not bring it back (as a batch/v1 Job that failed).
    h.cluster.edit("bad", |j| j.spec.time = int(5));
    h.step(1);
    assert_eq!(h.cluster.state("bad"), JobState::Failed);
    // Nothing to run: FAILED too.
    let mut empty = job("empty", gpus(1), 10, None);
    empty.spec.script = None;
    h.cluster.submit(empty);
    h.step(1);
    let st = h.cluster.job("empty").status.unwrap();
    assert_eq!(st.state, Some(JobState::Failed));
    assert!(st.message.unwrap().contains("give a script"));
    // Unknown partition: pending, Stalled with the reason, until it exists.
    let mut p = job("nopart", gpus(1), 10, None);
    p.spec.partition = Some("nope".into());
    h.cluster.submit(p);
    h.step(1);
    let st = h.cluster.job("nopart").status.unwrap();
    assert_eq!(st.state, Some(JobState::Pending));
    assert_eq!(st.reason.as_deref(), Some("PartitionConfig"));
    assert_eq!(st.message.as_deref(), Some("partition nope does not exist"));
    assert_eq!(st.partition.as_deref(), Some("nope"));
    assert_eq!(
        cond(&st, "Stalled"),
        Some(("True".into(), "PartitionNotFound".into()))
    );
    assert_eq!(cond(&st, "Reconciling").unwrap().0, "False");
}

#[test]
fn a_dependency_on_a_missing_job_stalls_until_it_appears() {
    let mut h = harness(1, 8);
    let mut j = job("eval", gpus(1), 10, None);
    j.spec.dependency = Some("afterok:train".into());
    h.cluster.submit(j);
    h.cycle();
    let st = h.cluster.job("eval").status.unwrap();
    assert_eq!(st.reason.as_deref(), Some("Dependency"));
    let stalled = st.conditions.iter().find(|c| c.type_ == "Stalled").unwrap();
    assert_eq!(stalled.status, "True");
    assert_eq!(stalled.reason, "DependencyNotFound");
    assert!(
        stalled.message.contains("no such job"),
        "{}",
        stalled.message
    );
    // `train` appears: the dependency now waits on a job that exists, and the job is no
    // longer stalled.
    h.cluster.submit(job("train", gpus(1), 10, None));
    h.step(1);
    let st = h.cluster.job("eval").status.unwrap();
    let c = |t: &str| {
        st.conditions
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| (c.status.clone(), c.reason.clone()))
            .unwrap()
    };
    assert_eq!(c("Stalled").0, "False");
    assert_eq!(
        c("Reconciling"),
        ("True".into(), "WaitingForDependency".into())
    );
    run_for(&mut h, 40);
    assert_eq!(h.cluster.state("eval"), JobState::Completed);
}

#[test]
fn pending_jobs_keep_the_default_partition_they_were_given() {
    let mut h = harness(1, 8);
    let mut blocker = job("blocker", gpus(8), 600, None);
    blocker.spec.time = int(20);
    h.cluster.submit(blocker);
    h.cycle();
    h.cluster.submit(job("waiting", gpus(8), 10, None));
    h.step(1);
    let part = h.cluster.job("waiting").status.unwrap().partition;
    assert!(part.is_some());
    // A second partition claims the default (first by name): the pending job stays put.
    h.cluster.add_partition(partition("aaa", true));
    h.step(1);
    assert_eq!(h.cluster.job("waiting").status.unwrap().partition, part);
    // A new job without a partition goes to the (first) default.
    h.cluster.submit(job("new", gpus(1), 10, None));
    h.step(1);
    assert_eq!(
        h.cluster.job("new").status.unwrap().partition.as_deref(),
        Some("aaa")
    );
}

#[test]
fn deleting_a_running_job_releases_its_allocation_first() {
    let mut h = harness(1, 8);
    h.cluster.submit(job("d", gpus(8), 3600, None));
    h.cycle();
    h.step(5);
    h.cluster.delete_job("d");
    assert!(h.cluster.has_job("d"), "held by the finalizer");
    h.step(1);
    // Pods deleted; the finalizer stays while they terminate (30 s grace).
    assert!(!h.cluster.pods_of("d").is_empty());
    assert!(
        h.cluster
            .pods_of("d")
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some())
    );
    h.cluster.submit(job("next", gpus(8), 10, None));
    h.step(10);
    assert!(h.cluster.has_job("d"));
    assert_ne!(
        h.cluster.state("next"),
        JobState::Running,
        "GPUs still held by the old pod"
    );
    h.step(25);
    h.step(1);
    assert!(!h.cluster.has_job("d"));
    assert_eq!(h.cluster.state("next"), JobState::Running);
}

#[test]
fn a_new_job_gets_the_finalizer_at_first_sight_and_loses_it_when_deleted_pending() {
    let mut h = harness(1, 8);
    h.cluster.submit(job("big", gpus(8), 3600, None));
    h.cycle();
    // Waits: every GPU is taken. It got the finalizer all the same (written while the cycle
    // planned), and its pending status went over the version that write returned.
    h.cluster.submit(job("waits", gpus(8), 3600, None));
    let r = h.cycle();
    assert_eq!(r.errors.get("conflict"), None, "{:?}", r.errors);
    let w = h.cluster.job("waits");
    assert_eq!(w.finalizers(), [labels::FINALIZER.to_string()]);
    assert_eq!(
        w.status.as_ref().and_then(|s| s.state),
        Some(JobState::Pending)
    );
    // No writes for it the next cycle: nothing changed.
    let r = h.step(1);
    assert_eq!(r.writes.get(&WriteKind::Finalizer), None);
    // Deleted while pending: no pod is live, so the finalizer goes in the next cycle.
    h.cluster.delete_job("waits");
    assert!(h.cluster.has_job("waits"), "held by the finalizer");
    h.step(1);
    assert!(!h.cluster.has_job("waits"));
    assert_eq!(h.cluster.state("big"), JobState::Running);
}

#[test]
fn no_node_pod_starts_before_the_service_that_names_the_nodes() {
    let mut h = harness(2, 8);
    let mut spec = gpus(8);
    spec.nodes = Some(IntOrString::Int(2));
    h.cluster.lock().refuse_services = 1;
    h.cluster.submit(job("pair", spec, 3600, None));
    let r = h.cycle();
    assert_eq!(r.errors.get("server"), Some(&1), "{:?}", r.errors);
    assert!(
        h.cluster.pods_of("pair").is_empty(),
        "no pod without the Service"
    );
    // The next cycle makes the admission's writes again, the Service first.
    h.step(1);
    assert_eq!(
        h.cluster
            .lock()
            .services
            .iter()
            .map(|s| s.1.as_str())
            .collect::<Vec<_>>(),
        ["pair"]
    );
    assert_eq!(h.cluster.pods_of("pair").len(), 2);
    assert_eq!(h.cluster.state("pair"), JobState::Running);
}

#[test]
fn arrays_run_each_index_as_its_own_gang_under_the_throttle() {
    let mut h = harness(4, 8);
    let mut spec = gpus(1);
    spec.array = Some(IntOrString::String("0-5%2".into()));
    h.cluster.submit(job("sweep", spec, 30, None));
    h.cycle();
    let st = h.cluster.job("sweep").status.unwrap();
    assert_eq!(st.job_id, Some(1));
    assert_eq!(st.array_tasks.as_ref().unwrap().total, 6);
    let mut max_active = 0;
    for _ in 0..40 {
        h.step(5);
        let s = h.cluster.lock();
        let active = s
            .jobs
            .values()
            .filter(|j| j.labels().contains_key(labels::ARRAY_PARENT))
            .filter(|j| j.status.as_ref().and_then(|s| s.state) == Some(JobState::Running))
            .count();
        max_active = max_active.max(active);
    }
    assert_eq!(max_active, 2, "%2 throttle");
    let p = h.cluster.job("sweep").status.unwrap();
    assert_eq!(p.state, Some(JobState::Completed));
    assert_eq!(p.array_tasks.unwrap().completed, 6);
    let e = h.cluster.job("sweep-3");
    let es = e.status.clone().unwrap();
    assert_eq!(es.array_job_id, Some(1));
    assert_eq!(es.array_task_id, Some(3));
    assert_eq!(e.spec.job_name.as_deref(), Some("sweep"));
    assert!(e.spec.array.is_none());
    let o = &e.owner_references()[0];
    assert_eq!(o.name, "sweep");
}

#[test]
fn afterok_chain_and_never_satisfied() {
    let mut h = harness(1, 8);
    h.cluster.submit(job("train", gpus(8), 60, None));
    h.now += 1;
    let mut eval = job("eval", gpus(1), 10, None);
    eval.spec.dependency = Some("afterok:train".into());
    h.cluster.submit(eval);
    h.cycle();
    let st = h.cluster.job("eval").status.unwrap();
    assert_eq!(st.reason.as_deref(), Some("Dependency"));
    run_for(&mut h, 70);
    assert_eq!(h.cluster.state("train"), JobState::Completed);
    h.step(1);
    assert_eq!(h.cluster.state("eval"), JobState::Running);

    h.cluster.submit(job("bad", gpus(8), 10, Some((0, 1))));
    let mut after = job("after-bad", gpus(1), 10, None);
    after.spec.dependency = Some("afterok:bad".into());
    h.cluster.submit(after);
    run_for(&mut h, 40);
    assert_eq!(h.cluster.state("bad"), JobState::Failed);
    let st = h.cluster.job("after-bad").status.unwrap();
    assert_eq!(st.state, Some(JobState::Pending));
    assert_eq!(st.reason.as_deref(), Some("DependencyNeverSatisfied"));
}

#[test]
fn higher_tier_preempts_and_victims_requeue() {
    let mut h = harness(2, 8);
    let mut low = partition("low", true);
    low.spec.preempt_mode = Some(PreemptMode::Requeue);
    h.cluster.add_partition(low);
    let mut high = partition("high", false);
    high.spec.priority_tier = Some(10);
    h.cluster.add_partition(high);
    {
        // Only these two partitions.
        h.cluster.lock().partitions.remove("gpu");
    }
    for i in 0..2 {
        h.cluster
            .submit(job(&format!("low{i}"), gpus(8), 3600, None));
    }
    h.cycle();
    assert_eq!(h.cluster.state("low0"), JobState::Running);
    assert_eq!(h.cluster.state("low1"), JobState::Running);
    let mut urgent = job("urgent", gpus(8), 60, None);
    urgent.spec.partition = Some("high".into());
    h.cluster.submit(urgent);
    h.step(1);
    let states: Vec<JobState> = ["low0", "low1"]
        .iter()
        .map(|n| h.cluster.state(n))
        .collect();
    assert_eq!(
        states.iter().filter(|s| **s == JobState::Pending).count(),
        1,
        "exactly one victim requeued: {states:?}"
    );
    // The victim's pods get their grace period (30 s) before the GPUs are reused.
    h.step(10);
    assert_eq!(h.cluster.state("urgent"), JobState::Pending);
    run_for(&mut h, 25);
    assert_eq!(h.cluster.state("urgent"), JobState::Running);
    let victim = ["low0", "low1"]
        .into_iter()
        .find(|n| h.cluster.job(n).status.unwrap().restarts == Some(1))
        .unwrap();
    let reasons: Vec<(String, String)> = h
        .cluster
        .lock()
        .events
        .iter()
        .map(|e| (e.0.clone(), e.1.reason.clone()))
        .collect();
    assert!(reasons.contains(&(victim.to_string(), "Preempted".to_string())));
}

#[test]
fn partition_status_counts_nodes_gpus_and_jobs() {
    let mut h = harness(2, 8);
    h.cluster.submit(job("a", gpus(4), 600, None));
    h.cluster.submit(job("b", gpus(16), 600, None));
    h.cycle();
    let p = h.cluster.lock().partitions["gpu"].status.clone().unwrap();
    assert_eq!(p.nodes, 2);
    assert_eq!(p.node_list.as_deref(), Some("node[1-2]"));
    assert_eq!(p.gpus_total, 16);
    // The earlier job goes first (no job-size factor by default); the bigger one waits.
    let held: u32 = ["a", "b"]
        .iter()
        .filter_map(|n| h.cluster.job(n).status)
        .filter(|s| s.state == Some(JobState::Running))
        .map(|s| s.num_gpus.unwrap_or(0))
        .sum();
    assert_eq!(held, 4);
    assert_eq!(p.gpus_allocated, held);
    assert_eq!(p.running_jobs, 1);
    assert_eq!(p.pending_jobs, 1);
    let mut other = partition("other", true);
    other.spec.node_selector = None;
    h.cluster.add_partition(other);
    h.step(1);
    let p = h.cluster.lock().partitions["gpu"].status.clone().unwrap();
    assert!(
        p.conditions
            .iter()
            .any(|c| c.type_ == "DefaultConflict" && c.status == "True")
    );
}

/// Fails one write in ten, deterministically spread.
struct EveryTenth(std::sync::atomic::AtomicU64);
impl Faults for EveryTenth {
    fn at(&self, _: WriteKind, _: &str) -> Fault {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if (n * 7919) % 10 == 3 {
            Fault::Error
        } else {
            Fault::None
        }
    }
}

#[test]
fn ten_percent_api_errors_still_end_every_job_right() {
    let mut h = harness(4, 8);
    for i in 0..6 {
        h.cluster
            .submit(job(&format!("ok{i}"), gang(2, 1, 2), 20, None));
    }
    h.cluster.submit(job("fails", gpus(1), 20, Some((0, 7))));
    let mut t = job("tl", gpus(1), 3600, None);
    t.spec.time = int(1);
    h.cluster.submit(t);
    let faults = EveryTenth(Default::default());
    for _ in 0..60 {
        h.now += 5;
        h.cluster.tick(h.now);
        h.cycle_with(&faults);
        h.cluster.check_no_double_gpu().unwrap();
    }
    for i in 0..6 {
        assert_eq!(h.cluster.state(&format!("ok{i}")), JobState::Completed);
    }
    assert_eq!(h.cluster.state("fails"), JobState::Failed);
    assert_eq!(h.cluster.job("fails").status.unwrap().exit_code, Some(7));
    assert_eq!(h.cluster.state("tl"), JobState::Timeout);
    h.cluster.check_gangs().unwrap();
}

/// The operator dies after the n-th write of a cycle, for every n that falls inside the
/// admissions of three gangs and a single job (on an idle cluster, and on one where an earlier
/// wave is running); a fresh operator (no memory) takes over, right away or after the gang
/// start timeout, with jobs written one at a time or interleaved. No GPU is ever held twice,
/// no gang is left partial, every job completes.
#[test]
fn killed_at_every_admission_write_leaves_no_partial_gang() {
    let mut iterations = 0;
    for (wave, conc) in [(false, 1), (false, 8), (true, 1), (true, 8)] {
        for n in 0..=30u64 {
            for gap in [0i64, 400] {
                let mut h = harness(6, 4);
                h.concurrency = conc;
                h.cfg.gang_start_timeout_secs = 300;
                let mut names: Vec<String> = Vec::new();
                if wave {
                    for i in 0..2 {
                        h.cluster
                            .submit(job(&format!("w{i}"), gang(2, 1, 2), 300, None));
                        names.push(format!("w{i}"));
                    }
                    h.cycle();
                    h.step(1);
                }
                for i in 0..3 {
                    h.cluster
                        .submit(job(&format!("g{i}"), gang(2, 2, 1), 30, None));
                    names.push(format!("g{i}"));
                }
                h.cluster.submit(job("solo", gpus(2), 30, None));
                names.push("solo".into());
                let r = h.cycle_with(&CrashAfter::new(n));
                h.cluster.check_no_double_gpu().unwrap();
                if !r.crashed {
                    continue;
                }
                iterations += 1;
                // A new leader: fresh memory, possibly after the gang start timeout.
                h.mem = Default::default();
                h.now += gap;
                for _ in 0..200 {
                    h.step(5);
                    h.cluster.check_no_double_gpu().unwrap();
                    if names
                        .iter()
                        .all(|n| h.cluster.state(n) == JobState::Completed)
                    {
                        break;
                    }
                }
                h.cluster.check_gangs().unwrap();
                for name in &names {
                    assert_eq!(
                        h.cluster.state(name),
                        JobState::Completed,
                        "wave={wave} conc={conc} n={n} gap={gap} {name}"
                    );
                }
                // No live pod of a superseded attempt is left.
                let s = h.cluster.lock();
                for p in s.pods.values() {
                    let o = PodObs::from_pod(p).unwrap();
                    let j = s
                        .jobs
                        .values()
                        .find(|j| j.uid().as_deref() == o.owner_uid())
                        .unwrap();
                    assert!(
                        !o.live() || o.attempt == j.status.as_ref().unwrap().attempt,
                        "stray pod {}",
                        o.name()
                    );
                }
            }
        }
    }
    assert!(iterations >= 100, "{iterations} crash points exercised");
}

/// An array whose spec cannot run ends FAILED (it never had elements); cancelled, it ends
/// CANCELLED — never pending forever.
#[test]
fn an_invalid_array_ends_and_a_cancelled_one_is_cancelled() {
    let mut h = harness(2, 8);
    let mut spec = gpus(1);
    spec.array = Some(IntOrString::String("0-3".into()));
    spec.constraint = Some("a&(b".into());
    h.cluster.submit(job("bad-sweep", spec.clone(), 10, None));
    spec.cancel = Some(true);
    h.cluster.submit(job("gone-sweep", spec, 10, None));
    h.cycle();
    let st = h.cluster.job("bad-sweep").status.unwrap();
    assert_eq!(st.state, Some(JobState::Failed));
    assert_eq!(st.reason.as_deref(), Some("InvalidSpec"));
    assert!(st.message.unwrap().starts_with("spec.constraint"));
    assert_eq!(h.cluster.state("gone-sweep"), JobState::Cancelled);
    h.step(5);
    let s = h.cluster.lock();
    assert!(
        !s.jobs
            .values()
            .any(|j| j.labels().contains_key(labels::ARRAY_PARENT)),
        "no elements were created"
    );
}

#[test]
fn reservations_reach_every_waiting_gang_through_the_planner() {
    // The core's guard (`core_schedule::queue::reservations_chain_for_every_waiting_job_up_to_the_
    // limit`) through the operator: a full 16-node cluster, 20 waiting 4-node jobs, the
    // default reservation budget (16). Each of the first 16 gets an estimated start in
    // `status.startTime`, four at a time (one per leaf) 10 minutes apart.
    let mut h = Harness::new();
    h.cluster.add_nodes(16, 8, 4);
    h.cluster.add_partition(partition("gpu", true));
    for i in 0..16 {
        let mut s = gpus(8);
        s.time = int(60);
        h.cluster.submit(job(&format!("fill{i:02}"), s, 3600, None));
    }
    h.cycle();
    let t0 = h.now;
    for i in 0..16 {
        assert_eq!(h.cluster.state(&format!("fill{i:02}")), JobState::Running);
    }
    h.now += 1;
    for i in 0..20 {
        let mut s = gang(4, 1, 8);
        s.time = int(10);
        h.cluster.submit(job(&format!("wait{i:02}"), s, 600, None));
        h.now += 1;
    }
    h.cycle();
    h.step(1);
    let start = |i: usize| {
        let st = h.cluster.job(&format!("wait{i:02}")).status.unwrap();
        assert_eq!(st.state, Some(JobState::Pending), "wait{i:02}");
        st.start_time.map(|t| t.0.as_second())
    };
    for i in 0..20 {
        let want = (i < 16).then(|| t0 + 3600 + 600 * (i as i64 / 4));
        assert_eq!(start(i), want, "wait{i:02}");
    }
}

#[test]
fn waiting_gangs_without_a_time_limit_hold_their_leaf_for_good() {
    // `muster sandbox`'s partition sets no time limits, so `sbatch` without `--time` is
    // unlimited: a reservation then holds its room for ever, and jobs needing the same
    // room get no estimated start (Slurm's backfill does the same with an INFINITE
    // MaxTime). What looks like "reservations stop" in the sandbox is this, not a cap.
    let mut h = Harness::new();
    h.cluster.add_nodes(16, 8, 4);
    h.cluster.add_partition(partition("gpu", true));
    for i in 0..16 {
        let mut s = gpus(8);
        s.time = int(60);
        h.cluster.submit(job(&format!("fill{i:02}"), s, 3600, None));
    }
    h.cycle();
    let t0 = h.now;
    h.now += 1;
    for i in 0..8 {
        h.cluster
            .submit(job(&format!("wait{i}"), gang(4, 1, 8), 600, None));
        h.now += 1;
    }
    h.cycle();
    for i in 0..8 {
        let st = h.cluster.job(&format!("wait{i}")).status.unwrap();
        assert_eq!(st.state, Some(JobState::Pending), "wait{i}");
        let want = (i < 4).then_some(t0 + 3600);
        assert_eq!(st.start_time.map(|t| t.0.as_second()), want, "wait{i}");
    }
}
