//! Through the planner: node and GPU failures, failed tasks and init containers, and the
//! requeues and back-off that follow.

use super::*;

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
fn a_requeue_request_runs_a_running_or_ended_job_again_once() {
    // One node: the requeued job can start again only once its old pod has gone.
    let mut h = harness(1, 8);
    h.cluster.submit(job("rq", gpus(8), 100, None));
    h.cycle();
    h.step(10);
    assert_eq!(h.cluster.state("rq"), JobState::Running);
    h.cluster.edit("rq", |j| j.spec.requeue_requests = Some(1));
    h.step(1);
    let st = h.cluster.job("rq").status.unwrap();
    assert_eq!(st.restarts, Some(1));
    assert_eq!(st.requeue_requests, Some(1));
    assert_eq!(st.attempt, Some(2));
    let names = |h: &Harness| -> Vec<String> {
        h.cluster
            .pods_of("rq")
            .iter()
            .map(|p| p.name_any())
            .collect()
    };
    // Its old pod is stopping on the one node: it waits for it.
    assert_eq!(st.state, Some(JobState::Pending));
    assert!(
        !names(&h).contains(&"rq-0-a2".to_string()),
        "{:?}",
        names(&h)
    );
    run_for(&mut h, 60);
    assert_eq!(h.cluster.state("rq"), JobState::Running);
    assert!(
        names(&h).contains(&"rq-0-a2".to_string()),
        "{:?}",
        names(&h)
    );
    assert!(
        !names(&h).contains(&"rq-0-a1".to_string()),
        "{:?}",
        names(&h)
    );
    h.cluster.check_no_double_gpu().unwrap();
    // The request is honoured once: later cycles leave it running.
    run_for(&mut h, 150);
    let st = h.cluster.job("rq").status.unwrap();
    assert_eq!(st.state, Some(JobState::Completed));
    assert_eq!((st.restarts, st.attempt), (Some(1), Some(2)));
    // An ended job runs again, and completes again.
    h.cluster.edit("rq", |j| j.spec.requeue_requests = Some(2));
    h.step(1);
    let st = h.cluster.job("rq").status.unwrap();
    assert_eq!(st.state, Some(JobState::Running));
    assert_eq!((st.restarts, st.attempt), (Some(2), Some(3)));
    assert_eq!(st.end_time, None);
    run_for(&mut h, 150);
    assert_eq!(h.cluster.state("rq"), JobState::Completed);
    // A request the webhook would refuse (a --no-requeue job) is only recorded.
    h.cluster.edit("rq", |j| {
        j.spec.requeue = Some(false);
        j.spec.requeue_requests = Some(3);
    });
    h.step(1);
    let st = h.cluster.job("rq").status.unwrap();
    assert_eq!(st.state, Some(JobState::Completed));
    assert_eq!((st.restarts, st.requeue_requests), (Some(2), Some(3)));
}
