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

mod failures;
mod faults;
mod queue;

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

/// `scancel --signal`: the job's signal requests reach every node pod of the running job
/// (the kubelet then hands them to the step runtime), new pods start with them, and the
/// operator writes nothing more once the pods agree.
#[test]
fn a_running_jobs_pods_carry_its_signal_requests() {
    const KEY: &str = muster_crds::signals::ANNOTATION;
    let mut h = harness(4, 8);
    h.cluster.submit(job("g", gang(2, 8, 1), 3600, None));
    h.cycle();
    h.step(5);
    assert_eq!(h.cluster.state("g"), JobState::Running);
    let signals = |h: &Harness| -> Vec<Option<String>> {
        h.cluster
            .pods_of("g")
            .iter()
            .map(|p| p.annotations().get(KEY).cloned())
            .collect()
    };
    assert_eq!(signals(&h), vec![None, None]);
    let req = "2026-12-02T10:00:00Z USR1 batch\n";
    h.cluster.edit("g", |j| {
        j.annotations_mut().insert(KEY.into(), req.into());
    });
    let r = h.step(1);
    assert_eq!(
        r.writes.get(&WriteKind::PodAnnotate),
        Some(&2),
        "{:?}",
        r.writes
    );
    assert_eq!(signals(&h), vec![Some(req.to_string()); 2]);
    let r = h.step(1);
    assert_eq!(
        r.writes.get(&WriteKind::PodAnnotate),
        None,
        "{:?}",
        r.writes
    );
    assert_eq!(
        h.cluster.state("g"),
        JobState::Running,
        "a signal changes no state"
    );
}

/// `--signal`'s warning follows the limit: the pods of a job with `--signal` carry when its
/// time limit ends, and a limit lowered while it runs reaches them.
#[test]
fn the_pods_of_a_job_with_a_warning_signal_know_when_its_limit_ends() {
    const KEY: &str = muster_crds::step::END_TIME_ANNOTATION;
    let mut h = harness(1, 8);
    let spec = BatchJobSpec {
        time: Some(IntOrString::String("10".into())),
        signal: Some("B:USR1@90".into()),
        ..gpus(8)
    };
    h.cluster.submit(job("w", spec, 3600, None));
    h.cycle();
    h.step(5);
    assert_eq!(h.cluster.state("w"), JobState::Running);
    let start = h
        .cluster
        .job("w")
        .status
        .unwrap()
        .start_time
        .unwrap()
        .0
        .as_second();
    let ends = |h: &Harness| -> Vec<Option<String>> {
        h.cluster
            .pods_of("w")
            .iter()
            .map(|p| p.annotations().get(KEY).cloned())
            .collect()
    };
    assert_eq!(ends(&h), vec![Some((start + 600).to_string())]);
    h.cluster.edit("w", |j| {
        j.spec.time = Some(IntOrString::String("5".into()));
    });
    h.step(1);
    h.step(1);
    assert_eq!(ends(&h), vec![Some((start + 300).to_string())]);
    // No --signal: nothing to follow.
    h.cluster.submit(job("plain", gpus(8), 3600, None));
    for _ in 0..60 {
        h.step(10);
    }
    assert_eq!(h.cluster.state("w"), JobState::Timeout);
    assert_eq!(h.cluster.state("plain"), JobState::Running);
    assert!(
        h.cluster.pods_of("plain")[0]
            .annotations()
            .get(KEY)
            .is_none()
    );
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
