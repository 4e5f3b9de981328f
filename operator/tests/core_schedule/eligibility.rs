//! When a job may start (Slurm's pending reasons: dependencies, holds, arrays, singleton,
//! begin time, down nodes) and when running jobs are stopped.

use super::*;

#[test]
fn eligibility_reasons_follow_slurm() {
    let mut s = sandbox();
    s.partitions[0].max_time = Some(TimeLimit::Minutes(60));
    s.partitions[0].max_nodes = Some(8);
    s.partitions.push(Partition {
        state: PartitionState::Down,
        ..Partition::new("down", vec![])
    });
    s.partitions.push(Partition {
        state: PartitionState::Inactive,
        ..Partition::new("off", vec![])
    });
    s.partitions.push(Partition {
        allowed_namespaces: vec!["team-a".into()],
        ..Partition::new("private", vec![])
    });
    let mut jobs = vec![
        PendingJob::new(1, NOW, JobRequest::gpus(1).time(7200)),
        PendingJob::new(2, NOW, JobRequest::nodes(9, 8)),
        PendingJob::new(3, NOW, JobRequest::gpus(1)),
        PendingJob::new(4, NOW, JobRequest::gpus(1)),
        PendingJob::new(5, NOW, JobRequest::gpus(1)),
        PendingJob::new(6, NOW, JobRequest::gpus(1)),
        PendingJob::new(7, NOW, JobRequest::gpus(1)),
        PendingJob::new(8, NOW, JobRequest::gpus(9).time(60)),
        PendingJob::new(9, NOW, JobRequest::tasks(1, 9)),
        PendingJob::new(10, NOW, JobRequest::gpus(1).time(0)),
    ];
    jobs[2].partition = Some(1);
    jobs[3].partition = Some(2);
    jobs[4].partition = Some(3);
    jobs[5].hold = true;
    jobs[6].partition = Some(42);
    s.pending = jobs;
    let d = schedule(&s, NOW, &Config::default());
    let reason = |j| pending(&d, j).reason;
    assert_eq!(reason(1), Reason::PartitionTimeLimit);
    assert_eq!(reason(2), Reason::PartitionNodeLimit);
    assert_eq!(reason(3), Reason::PartitionDown);
    assert_eq!(reason(4), Reason::PartitionInactive);
    assert_eq!(reason(5), Reason::AccountNotAllowed);
    assert_eq!(reason(6), Reason::JobHeldUser);
    assert_eq!(reason(7), Reason::PartitionConfig);
    // 9 GPUs over several nodes is fine; one task of 9 GPUs can never fit an 8-GPU node.
    started(&d, 8);
    assert_eq!(reason(9), Reason::BadConstraints);
    assert_eq!(reason(10), Reason::PartitionTimeLimit);
    assert!(!pending(&d, 6).eligible);
}

#[test]
fn job_needing_down_nodes_waits_with_req_node_not_avail() {
    let mut s = sandbox();
    for n in &mut std::sync::Arc::make_mut(&mut s.nodes)[..4] {
        n.unschedulable = true;
    }
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::nodes(16, 8)));
    s.pending
        .push(PendingJob::new(2, NOW, JobRequest::nodes(12, 8)));
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(pending(&d, 1).reason, Reason::ReqNodeNotAvail);
    started(&d, 2);
}

#[test]
fn array_throttle_limits_running_elements() {
    let mut s = sandbox();
    for i in 0..6 {
        let mut j = PendingJob::new(10 + i, NOW, JobRequest::gpus(1));
        j.array = Some(ArrayTask {
            array_job_id: 10,
            task_id: i as u32,
            max_running: Some(4),
        });
        s.pending.push(j);
    }
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(d.starts.len(), 4);
    assert_eq!(pending(&d, 14).reason, Reason::JobArrayTaskLimit);
    // With one element already running, only three more start.
    let mut s2 = s.clone();
    s2.pending.remove(0);
    s2.running.push(RunningJob {
        id: 10,
        start_time: NOW,
        array_job_id: Some(10),
        tasks: vec![TaskAlloc {
            node: 0,
            gpus: vec![0],
            ..Default::default()
        }],
        ..Default::default()
    });
    let d = schedule(&s2, NOW, &Config::default());
    assert_eq!(d.starts.len(), 3);
}

#[test]
fn timeouts_and_node_failures_are_stopped_and_their_room_is_not_reused_yet() {
    let mut s = sandbox();
    s.partitions[0].grace_time_secs = 30;
    busy(&mut s, 100, &["gpu001"], 8, Some(NOW - 1));
    busy(&mut s, 101, &["gpu002"], 8, None);
    std::sync::Arc::make_mut(&mut s.nodes)[1].gpus[5].healthy = false;
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::nodes(16, 8)));
    let d = schedule(&s, NOW, &Config::default());
    let stops: Vec<(JobId, JobState)> = d.stops.iter().map(|s| (s.job, s.state)).collect();
    assert_eq!(stops, [(100, JobState::Timeout), (101, JobState::NodeFail)]);
    assert!(d.starts.is_empty());
    // gpu001 comes back after the grace time; gpu002 never fully (an unhealthy GPU), so
    // the 16-node job can only wait for the nodes to be repaired.
    assert_eq!(pending(&d, 1).reason, Reason::ReqNodeNotAvail);
}

#[test]
fn dependencies_gate_eligibility_with_slurm_reasons() {
    let mut s = sandbox();
    s.finished.push(FinishedJob {
        id: 50,
        name: "train".into(),
        namespace: "default".into(),
        state: JobState::Completed,
        start_time: Some(NOW - 500),
        end_time: NOW - 100,
        array_job_id: None,
        array_task_id: None,
    });
    s.finished.push(FinishedJob {
        id: 51,
        name: "broken".into(),
        namespace: "default".into(),
        state: JobState::Failed,
        start_time: Some(NOW - 500),
        end_time: NOW - 100,
        array_job_id: None,
        array_task_id: None,
    });
    let dep = |id, spec: &str| {
        let mut j = PendingJob::new(id, NOW, JobRequest::gpus(1));
        j.dependency = Some(DependencySpec::parse(spec).unwrap());
        j
    };
    s.pending = vec![
        dep(1, "afterok:train"),
        dep(2, "afterok:broken"),
        dep(3, "afterok:not-yet-created"),
        dep(4, "afterany:5"),
        PendingJob::new(5, NOW, JobRequest::gpus(1)),
    ];
    let d = schedule(&s, NOW, &Config::default());
    started(&d, 1);
    started(&d, 5);
    assert_eq!(pending(&d, 2).reason, Reason::DependencyNeverSatisfied);
    assert_eq!(pending(&d, 3).reason, Reason::Dependency);
    // Job 5 starts this cycle but has not ended: 4 still waits.
    assert_eq!(pending(&d, 4).reason, Reason::Dependency);
    assert!(!pending(&d, 4).eligible);
}

#[test]
fn singleton_runs_one_job_of_a_name_at_a_time() {
    let mut s = sandbox();
    for id in 1..=3 {
        let mut j = PendingJob::new(id, NOW + id as i64, JobRequest::gpus(1));
        j.job_name = Some("nightly".into());
        j.dependency = Some(DependencySpec::parse("singleton").unwrap());
        s.pending.push(j);
    }
    let d = schedule(&s, NOW + 10, &Config::default());
    assert_eq!(d.starts.len(), 1);
    started(&d, 1);
    assert_eq!(pending(&d, 2).reason, Reason::Dependency);
}

/// `--begin`: a job is not started before its time (reason `BeginTime`, not eligible), and
/// starts once the time has come; a begin time already past changes nothing.
#[test]
fn a_job_waits_for_its_begin_time() {
    let mut s = sandbox();
    let mut later = PendingJob::new(1, NOW, JobRequest::gpus(1));
    later.begin_time = Some(NOW + 600);
    let mut past = PendingJob::new(2, NOW, JobRequest::gpus(1));
    past.begin_time = Some(NOW - 600);
    s.pending = vec![later, past];
    let d = schedule(&s, NOW, &Config::default());
    let p = pending(&d, 1);
    assert_eq!(p.reason, Reason::BeginTime);
    assert!(p.message.contains("--begin"), "{}", p.message);
    assert!(!p.eligible);
    started(&d, 2);
    let d = schedule(&s, NOW + 600, &Config::default());
    started(&d, 1);
}
