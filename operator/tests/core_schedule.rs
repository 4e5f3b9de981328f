//! Known-answer tests: each Slurm behaviour the core implements, on small hand-built
//! clusters where the right answer is obvious.

use muster_operator::core::*;

mod support;
use support::*;

fn pending(d: &Decisions, job: JobId) -> &PendingInfo {
    d.pending
        .iter()
        .find(|p| p.job == job)
        .unwrap_or_else(|| panic!("job {job} is not pending"))
}

#[test]
fn single_gpu_job_takes_one_gpu_on_the_first_node() {
    let mut s = sandbox();
    s.pending.push(PendingJob::new(1, NOW, JobRequest::gpus(1)));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert_eq!(names(&s, &st.nodes), ["gpu001"]);
    assert_eq!(st.tasks.len(), 1);
    assert_eq!(st.tasks[0].gpus, [0]);
    assert_eq!(st.tasks[0].rank, 0);
    assert_eq!(st.leaves, 1);
    assert_eq!(st.node_names(&s), ["gpu001"]);
    assert_eq!(
        st.tasks[0].gpu_uuids(&s),
        [cluster_spec::gpu_uuid("gpu001", 0)]
    );
}

#[test]
fn gang_that_fits_one_leaf_is_never_spread() {
    // 4 leaves x 4 nodes. Leaf 1 has 2 free nodes, leaf 2 has 4: greedy first fit in node
    // order would take gpu003, gpu004 (leaf 1) and gpu005, gpu006 (leaf 2).
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001", "gpu002"], 8, None);
    busy(
        &mut s,
        101,
        &["gpu009", "gpu010", "gpu011", "gpu012"],
        8,
        None,
    );
    busy(&mut s, 102, &["gpu013", "gpu014", "gpu015"], 8, None);
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::nodes(4, 8).exclusive()));
    // A later 2-node job then finds leaf 1's two nodes whole.
    s.pending
        .push(PendingJob::new(2, NOW + 1, JobRequest::nodes(2, 8)));
    let d = schedule(&s, NOW, &Config::default());
    let a = started(&d, 1);
    assert_eq!(
        names(&s, &a.nodes),
        ["gpu005", "gpu006", "gpu007", "gpu008"]
    );
    assert_eq!(a.leaves, 1);
    let b = started(&d, 2);
    assert_eq!(names(&s, &b.nodes), ["gpu003", "gpu004"]);
    assert_eq!(b.leaves, 1);
}

#[test]
fn best_fit_leaf_keeps_empty_leaves_whole() {
    // Leaf 1: 1 free node; leaf 2: 3 free nodes; leaves 3, 4: empty. A 3-node job takes
    // leaf 2 (no room left over), not the first empty leaf.
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001", "gpu002", "gpu003"], 8, None);
    busy(&mut s, 101, &["gpu005"], 8, None);
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::nodes(3, 8)));
    s.pending
        .push(PendingJob::new(2, NOW + 1, JobRequest::nodes(1, 8)));
    s.pending
        .push(PendingJob::new(3, NOW + 2, JobRequest::nodes(8, 8)));
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(
        names(&s, &started(&d, 1).nodes),
        ["gpu006", "gpu007", "gpu008"]
    );
    assert_eq!(names(&s, &started(&d, 2).nodes), ["gpu004"]);
    // Two whole leaves remain for the 8-node gang: it spans exactly 2 leaves.
    let big = started(&d, 3);
    assert_eq!(big.leaves, 2);
    assert_eq!(names(&s, &big.nodes)[0], "gpu009");
}

#[test]
fn gang_larger_than_a_leaf_uses_fewest_leaves() {
    let mut s = sandbox();
    // Leaf 1 has 1 free node, leaf 2 has 2, leaves 3 and 4 have 4 each.
    busy(&mut s, 100, &["gpu001", "gpu002", "gpu003"], 8, None);
    busy(&mut s, 101, &["gpu005", "gpu006"], 8, None);
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::nodes(6, 8)));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    // One whole leaf (4) plus the best-fitting remainder: leaf 2's two nodes.
    assert_eq!(st.leaves, 2);
    assert_eq!(
        names(&s, &st.nodes),
        ["gpu007", "gpu008", "gpu009", "gpu010", "gpu011", "gpu012"]
    );
}

#[test]
fn tasks_get_distinct_close_gpus_and_ranks_follow_the_node_list() {
    let mut s = sandbox();
    // --nodes=2 --ntasks-per-node=2 --gpus-per-task=4
    let req = JobRequest {
        min_nodes: Some(2),
        ntasks_per_node: Some(2),
        gpus_per_task: Some(4),
        ..Default::default()
    };
    s.pending.push(PendingJob::new(1, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert_eq!(names(&s, &st.nodes), ["gpu001", "gpu002"]);
    let t: Vec<(u32, u32, u32, Vec<u32>)> = st
        .tasks
        .iter()
        .map(|t| (t.rank, t.node_rank, t.local_rank, t.gpus.clone()))
        .collect();
    assert_eq!(
        t,
        [
            (0, 0, 0, vec![0, 1, 2, 3]),
            (1, 0, 1, vec![4, 5, 6, 7]),
            (2, 1, 0, vec![0, 1, 2, 3]),
            (3, 1, 1, vec![4, 5, 6, 7]),
        ]
    );
}

#[test]
fn gres_per_node_is_split_between_tasks() {
    // gres_mpirun.sh: --nodes=2 --ntasks-per-node=2 --gres=gpu:4
    let mut s = sandbox();
    let req = JobRequest {
        min_nodes: Some(2),
        ntasks_per_node: Some(2),
        gpus_per_node: Some(4),
        ..Default::default()
    };
    s.pending.push(PendingJob::new(1, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert_eq!(st.tasks.len(), 4);
    for t in &st.tasks {
        assert_eq!(t.gpus.len(), 2);
    }
    // The two tasks of a node share nothing and stay in one NUMA half.
    assert_eq!(st.tasks[0].gpus, [0, 1]);
    assert_eq!(st.tasks[1].gpus, [2, 3]);
}

#[test]
fn small_jobs_pack_onto_partly_used_nodes() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu007"], 6, None);
    s.pending.push(PendingJob::new(1, NOW, JobRequest::gpus(2)));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert_eq!(names(&s, &st.nodes), ["gpu007"]);
    assert_eq!(st.tasks[0].gpus, [6, 7]);
}

#[test]
fn exclusive_jobs_neither_share_nor_are_shared() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001"], 1, None);
    s.pending
        .push(PendingJob::new(1, NOW, JobRequest::gpus(1).exclusive()));
    s.pending
        .push(PendingJob::new(2, NOW + 1, JobRequest::gpus(7)));
    let d = schedule(&s, NOW, &Config::default());
    let ex = started(&d, 1);
    // Not gpu001 (it has a job); the exclusive job gets a whole idle node.
    assert_eq!(names(&s, &ex.nodes), ["gpu002"]);
    // The 7-GPU job goes beside the running job on gpu001, not on gpu002's 7 idle GPUs.
    assert_eq!(names(&s, &started(&d, 2).nodes), ["gpu001"]);
    let mut s2 = s.clone();
    s2.apply(&d, NOW);
    s2.pending
        .push(PendingJob::new(3, NOW + 2, JobRequest::gpus(1)));
    let d2 = schedule(&s2, NOW, &Config::default());
    assert_ne!(names(&s2, &started(&d2, 3).nodes), ["gpu002"]);
}

#[test]
fn gpu_type_is_a_case_insensitive_substring_of_the_model() {
    let spec = ClusterSpec::from_yaml(
        r#"
levels: [{key: muster.dev/leaf, count: 2}]
nodesPerLeaf: 2
node: {cpus: 64, memory: 512Gi, gpus: 8, gpuModel: NVIDIA H100 80GB HBM3, layout: dgx}
overrides:
  - nodes: gpu[003-004]
    gpuModel: NVIDIA A100-SXM4-80GB
"#,
    )
    .unwrap();
    let mut s = Snapshot::with_nodes(spec.nodes().unwrap(), spec.topology());
    let mut req = JobRequest::gpus(2);
    req.gpu_type = Some("a100".into());
    s.pending.push(PendingJob::new(1, NOW, req));
    let mut req = JobRequest::gpus(1);
    req.gpu_type = Some("V100".into());
    s.pending.push(PendingJob::new(2, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(names(&s, &started(&d, 1).nodes), ["gpu003"]);
    let p = pending(&d, 2);
    assert_eq!(p.reason, Reason::BadConstraints);
    assert!(p.message.contains("V100"), "{}", p.message);
}

#[test]
fn unhealthy_gpus_and_down_nodes_are_avoided() {
    let mut s = sandbox();
    let nodes = std::sync::Arc::make_mut(&mut s.nodes);
    nodes[0].gpus[0].healthy = false;
    nodes[1].ready = false;
    s.pending.push(PendingJob::new(1, NOW, JobRequest::gpus(8)));
    s.pending
        .push(PendingJob::new(2, NOW + 1, JobRequest::gpus(7)));
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(names(&s, &started(&d, 1).nodes), ["gpu003"]);
    let t = &started(&d, 2).tasks[0];
    assert_eq!(s.nodes[t.node as usize].name, "gpu001");
    assert!(!t.gpus.contains(&0));
}

#[test]
fn backfill_starts_short_jobs_that_end_before_the_reservation() {
    // Every node busy until NOW+1000 except leaf 4 (4 nodes) which is free. A 16-node gang
    // waits for everything; a 1-hour job can't backfill on leaf 4 (it would delay the
    // gang), a 10-minute job can.
    let mut s = sandbox();
    let all: Vec<String> = (1..=12).map(|i| format!("gpu{i:03}")).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    busy(&mut s, 100, &all, 8, Some(NOW + 1000));
    s.pending.push(PendingJob::new(
        1,
        NOW - 10,
        JobRequest::nodes(16, 8).time(3600),
    ));
    s.pending.push(PendingJob::new(
        2,
        NOW - 5,
        JobRequest::nodes(1, 8).time(3600),
    ));
    s.pending.push(PendingJob::new(
        3,
        NOW - 1,
        JobRequest::nodes(1, 8).time(600),
    ));
    let d = schedule(&s, NOW, &Config::default());
    let r = &d.reservations[0];
    assert_eq!(r.job, 1);
    assert_eq!(r.start_time, NOW + 1000);
    assert_eq!(r.nodes.len(), 16);
    assert_eq!(pending(&d, 1).start_estimate, Some(NOW + 1000));
    assert_eq!(pending(&d, 1).reason, Reason::Resources);
    assert_eq!(pending(&d, 2).reason, Reason::Priority);
    started(&d, 3);
    // The 1-hour job gets a reservation after the gang.
    assert_eq!(pending(&d, 2).start_estimate, Some(NOW + 1000 + 3600));
}

#[test]
fn backfill_may_use_nodes_the_reservation_does_not_need() {
    // Leaves 1-3 busy until NOW+1000; leaf 4 free. The top job needs 8 nodes: it will take
    // two whole leaves at NOW+1000, leaving leaf 4's nodes to anyone: a long job starts now.
    let mut s = sandbox();
    let all: Vec<String> = (1..=12).map(|i| format!("gpu{i:03}")).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    busy(&mut s, 100, &all, 8, Some(NOW + 1000));
    s.pending.push(PendingJob::new(
        1,
        NOW - 10,
        JobRequest::nodes(12, 8).time(3600),
    ));
    s.pending.push(PendingJob::new(
        2,
        NOW - 5,
        JobRequest::nodes(4, 8).time(7200),
    ));
    let d = schedule(&s, NOW, &Config::default());
    // 12 nodes at NOW+1000 can be leaves 1-3 only if job 2 takes leaf 4 now.
    let st = started(&d, 2);
    assert_eq!(
        names(&s, &st.nodes),
        ["gpu013", "gpu014", "gpu015", "gpu016"]
    );
    assert_eq!(d.reservations[0].start_time, NOW + 1000);
}

#[test]
fn without_backfill_later_jobs_wait_behind_the_first() {
    let mut s = sandbox();
    let all: Vec<String> = (1..=12).map(|i| format!("gpu{i:03}")).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    busy(&mut s, 100, &all, 8, Some(NOW + 1000));
    s.pending.push(PendingJob::new(
        1,
        NOW - 10,
        JobRequest::nodes(16, 8).time(3600),
    ));
    s.pending.push(PendingJob::new(
        2,
        NOW - 1,
        JobRequest::nodes(1, 8).time(60),
    ));
    let cfg = Config {
        backfill: false,
        ..Config::default()
    };
    let d = schedule(&s, NOW, &cfg);
    assert!(d.starts.is_empty());
    assert_eq!(pending(&d, 2).reason, Reason::Priority);
}

#[test]
fn tiers_then_priority_then_submit_time_then_id() {
    let mut s = sandbox();
    s.partitions.push(Partition {
        priority_tier: 10,
        ..Partition::new("high", ClusterSpec::sandbox().topology())
    });
    // Room for exactly one 16-node job.
    let mut low = PendingJob::new(1, NOW - 1000, JobRequest::nodes(16, 8));
    low.priority = Some(1_000_000);
    let mut high = PendingJob::new(2, NOW, JobRequest::nodes(16, 8));
    high.partition = Some(1);
    s.pending.push(low);
    s.pending.push(high);
    let d = schedule(&s, NOW, &Config::default());
    started(&d, 2);
    // Same tier: the older job first; same time: the lower id.
    let mut s = sandbox();
    s.pending
        .push(PendingJob::new(5, NOW, JobRequest::nodes(16, 8)));
    s.pending
        .push(PendingJob::new(4, NOW, JobRequest::nodes(16, 8)));
    s.pending
        .push(PendingJob::new(6, NOW - 1, JobRequest::nodes(16, 8)));
    let d = schedule(&s, NOW, &Config::default());
    started(&d, 6);
    let order: Vec<JobId> = d.pending.iter().map(|p| p.job).collect();
    assert_eq!(order, [4, 5]);
}

/// The queue order of `s`'s pending jobs (all held, so each is listed as the cycle reaches
/// it) under `cfg`.
fn queue_order(s: &Snapshot, cfg: &Config) -> Vec<JobId> {
    let mut s = s.clone();
    for j in &mut s.pending {
        j.hold = true;
    }
    let d = schedule(&s, NOW, cfg);
    d.pending.iter().map(|p| p.job).collect()
}

#[test]
fn short_limits_go_first_within_the_credit_and_gangs_keep_their_place() {
    const H: i64 = 3600;
    const DAY: i64 = 86_400;
    let mut s = sandbox();
    let one = |id, submit, limit: Option<u64>| {
        let r = JobRequest::nodes(1, 8);
        PendingJob::new(
            id,
            submit,
            match limit {
                Some(l) => r.time(l),
                None => r,
            },
        )
    };
    // Credits: 30 min 6.4 days, 7 days 1.3 days, unlimited none.
    s.pending = vec![
        one(1, NOW - H, Some(7 * DAY as u64)),
        one(2, NOW, Some(1800)),
        one(3, NOW - 2 * H, None),
        one(4, NOW - 60, Some(1800)),
    ];
    let cfg = Config::default();
    assert_eq!(queue_order(&s, &cfg), [4, 2, 1, 3]);
    // Priorities show the credit: fair share 10,000 plus 1000 x (age + credit) / 7 days.
    let mut held = s.clone();
    for j in &mut held.pending {
        j.hold = true;
    }
    let d = schedule(&held, NOW, &cfg);
    let credit = (7 * DAY) as f64 * priority::short_limit_factor(Some(7 * DAY as u64));
    let want = 10_000 + (1000.0 * (H as f64 + credit.round()) / (7 * DAY) as f64).round() as u32;
    assert_eq!(pending(&d, 1).priority, want);
    assert_eq!(pending(&d, 3).priority, 10_000 + 12);
    // The credit is bounded: a 30-minute job submitted 5.2 days after a 7-day one (a credit
    // 5.1 days larger) comes after it.
    s.pending = vec![
        one(1, NOW - 6 * DAY, Some(7 * DAY as u64)),
        one(2, NOW - 6 * DAY + 5 * DAY + 5 * H, Some(1800)),
        one(3, NOW - 6 * DAY + 5 * DAY, Some(1800)),
    ];
    assert_eq!(queue_order(&s, &cfg), [3, 1, 2]);
    // No credit: submit order.
    let plain = Config {
        short_limit_age_secs: 0,
        ..Config::default()
    };
    assert_eq!(queue_order(&s, &plain), [1, 3, 2]);
    // No one-node job passes a gang that waited longer: the 15-minute job 11 (a 7-day credit)
    // comes after the gangs 10 and 14 submitted a minute and 30 s before it, though it
    // passes the 7-day job 12 without them. A gang gets its own limit's credit: 10 (7 days)
    // does not pass the 7-day job 12 submitted 3 days before it.
    s.pending = vec![
        PendingJob::new(10, NOW - 60, JobRequest::nodes(2, 8).time(7 * DAY as u64)),
        one(11, NOW, Some(900)),
        one(12, NOW - 3 * DAY, Some(7 * DAY as u64)),
        one(13, NOW - 8 * DAY, None),
        PendingJob::new(14, NOW - 30, JobRequest::gpus(12)),
    ];
    assert_eq!(queue_order(&s, &cfg), [13, 12, 10, 14, 11]);
    let no_gangs: Vec<PendingJob> = s
        .pending
        .iter()
        .filter(|j| ![10, 14].contains(&j.id))
        .cloned()
        .collect();
    let alone = Snapshot {
        pending: no_gangs,
        ..s.clone()
    };
    assert_eq!(queue_order(&alone, &cfg), [13, 11, 12]);
    assert_eq!(queue_order(&s, &plain), [13, 12, 10, 14, 11]);
}

#[test]
fn a_short_job_takes_the_freed_node_before_an_older_long_one() {
    // One free node; a 7-day job waited an hour, a 1-hour job just came: the short one starts,
    // the long one gets the reservation behind it.
    let mut s = sandbox();
    let others: Vec<String> = (2..=16).map(|i| format!("gpu{i:03}")).collect();
    fill(&mut s, 100, &others, NOW + 50_000);
    s.pending = vec![
        PendingJob::new(1, NOW - 3600, JobRequest::nodes(1, 8).time(7 * 86_400)),
        PendingJob::new(2, NOW, JobRequest::nodes(1, 8).time(3600)),
    ];
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(names(&s, &started(&d, 2).nodes), ["gpu001"]);
    assert_eq!(pending(&d, 1).start_estimate, Some(NOW + 3600));
    // In submit order the long one takes it.
    let plain = Config {
        short_limit_age_secs: 0,
        ..Config::default()
    };
    let d = schedule(&s, NOW, &plain);
    started(&d, 1);
}

#[test]
fn fair_share_favours_the_namespace_that_used_less() {
    let mut s = sandbox();
    s.usage.insert("heavy".into(), 1e9);
    s.usage.insert("light".into(), 1e3);
    let mut a = PendingJob::new(1, NOW - 100, JobRequest::nodes(16, 8));
    a.namespace = "heavy".into();
    let mut b = PendingJob::new(2, NOW, JobRequest::nodes(16, 8));
    b.namespace = "light".into();
    s.pending = vec![a, b];
    let d = schedule(&s, NOW, &Config::default());
    started(&d, 2);
    assert!(pending(&d, 1).priority < 10_000);
}

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
fn higher_tier_preempts_the_cheapest_lower_tier_gangs() {
    let mut s = sandbox();
    s.partitions[0].preempt_mode = PreemptMode::Requeue;
    s.partitions[0].grace_time_secs = 60;
    s.partitions.push(Partition {
        priority_tier: 10,
        ..Partition::new("urgent", ClusterSpec::sandbox().topology())
    });
    // Leaf 1: one job on all 4 nodes, started long ago (expensive).
    // Leaf 2: two 2-node jobs started recently (cheap).
    // Leaves 3-4: a long-running 8-node job.
    let mut add = |id: JobId, nodes: &[&str], started: i64| {
        busy(&mut s, id, nodes, 8, None);
        s.running.last_mut().unwrap().start_time = started;
    };
    add(
        100,
        &["gpu001", "gpu002", "gpu003", "gpu004"],
        NOW - 100_000,
    );
    add(101, &["gpu005", "gpu006"], NOW - 100);
    add(102, &["gpu007", "gpu008"], NOW - 200);
    let rest: Vec<String> = (9..=16).map(|i| format!("gpu{i:03}")).collect();
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    add(103, &rest, NOW - 50_000);
    let mut urgent = PendingJob::new(1, NOW, JobRequest::nodes(4, 8).time(3600));
    urgent.partition = Some(1);
    s.pending.push(urgent);
    let d = schedule(&s, NOW, &Config::default());
    assert!(d.starts.is_empty());
    assert_eq!(d.preemptions.len(), 1);
    let p = &d.preemptions[0];
    assert_eq!(p.for_job, 1);
    let victims: Vec<JobId> = p.victims.iter().map(|v| v.job).collect();
    assert_eq!(victims, [101, 102]);
    assert!(p.victims.iter().all(|v| v.requeue));
    let r = &d.reservations[0];
    assert_eq!(r.start_time, NOW + 60);
    assert_eq!(
        names(&s, &r.nodes),
        ["gpu005", "gpu006", "gpu007", "gpu008"]
    );
    // Next cycle the victims are stopping: no further preemption, the reservation stays.
    let mut s2 = s.clone();
    s2.apply(&d, NOW);
    let d2 = schedule(&s2, NOW + 10, &Config::default());
    assert!(d2.preemptions.is_empty());
    assert_eq!(d2.reservations[0].start_time, NOW + 60);
    // Once they are gone the job starts there.
    s2.running.retain(|r| r.id != 101 && r.id != 102);
    let d3 = schedule(&s2, NOW + 61, &Config::default());
    assert_eq!(
        names(&s2, &started(&d3, 1).nodes),
        ["gpu005", "gpu006", "gpu007", "gpu008"]
    );
}

#[test]
fn preemption_respects_preempt_mode_off() {
    let mut s = sandbox();
    s.partitions.push(Partition {
        priority_tier: 10,
        ..Partition::new("urgent", ClusterSpec::sandbox().topology())
    });
    let all: Vec<String> = (1..=16).map(|i| format!("gpu{i:03}")).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    busy(&mut s, 100, &all, 8, Some(NOW + 500));
    let mut urgent = PendingJob::new(1, NOW, JobRequest::nodes(1, 8));
    urgent.partition = Some(1);
    s.pending.push(urgent);
    let d = schedule(&s, NOW, &Config::default());
    assert!(d.preemptions.is_empty());
    assert_eq!(pending(&d, 1).start_estimate, Some(NOW + 500));
}

#[test]
fn decisions_do_not_depend_on_input_order() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001", "gpu002"], 4, Some(NOW + 300));
    busy(&mut s, 101, &["gpu009"], 8, Some(NOW + 900));
    for i in 0..20u64 {
        let req = match i % 4 {
            0 => JobRequest::gpus(1 + (i as u32 % 3)),
            1 => JobRequest::nodes(2, 8),
            2 => JobRequest::tasks(4, 2),
            _ => JobRequest::nodes(5, 8).time(600),
        };
        s.pending
            .push(PendingJob::new(i + 1, NOW - (i as i64 % 5), req.time(1200)));
    }
    let d = schedule(&s, NOW, &Config::default());
    let mut r = s.clone();
    r.pending.reverse();
    r.running.reverse();
    assert_eq!(schedule(&r, NOW, &Config::default()), d);
    assert_eq!(schedule(&s, NOW, &Config::default()), d);
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

fn featured() -> Snapshot {
    // Leaves 1-2 have feature `ib`; nodes 1-4 and 9-12 are `rack` a / b by label value.
    let mut s = sandbox();
    for (i, n) in std::sync::Arc::make_mut(&mut s.nodes)
        .iter_mut()
        .enumerate()
    {
        if i < 8 {
            n.labels
                .insert("muster.dev/feature.ib".into(), "true".into());
        }
        let rack = if i < 4 || (8..12).contains(&i) {
            "rack-a"
        } else {
            "rack-b"
        };
        n.labels.insert("example.com/rack".into(), rack.into());
    }
    s
}

#[test]
fn constraints_select_nodes_by_feature_and_label_value() {
    let mut s = featured();
    let mut ib = JobRequest::nodes(6, 8);
    ib.constraint = Some(Constraint::parse("ib").unwrap());
    s.pending.push(PendingJob::new(1, NOW, ib));
    let mut not_enough = JobRequest::nodes(9, 8);
    not_enough.constraint = Some(Constraint::parse("ib").unwrap());
    s.pending.push(PendingJob::new(2, NOW, not_enough));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert!(
        st.nodes.iter().all(|&n| n < 8),
        "{:?}",
        names(&s, &st.nodes)
    );
    let p = pending(&d, 2);
    assert_eq!(p.reason, Reason::BadConstraints);
    assert!(p.message.contains("constraint ib"), "{}", p.message);
}

#[test]
fn matching_or_puts_every_node_on_one_alternative() {
    let mut s = featured();
    // 4 nodes all on rack-a or all on rack-b; rack-a's first leaf is busy, so rack-a has
    // only 4 free nodes (gpu009-gpu012) and the job takes exactly those.
    busy(&mut s, 100, &["gpu001", "gpu002"], 8, None);
    let mut req = JobRequest::nodes(4, 8);
    req.constraint = Some(Constraint::parse("[rack-a|rack-b]").unwrap());
    s.pending.push(PendingJob::new(1, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    let got = names(&s, &started(&d, 1).nodes);
    assert_eq!(got, ["gpu009", "gpu010", "gpu011", "gpu012"]);
}

#[test]
fn feature_counts_take_distinct_nodes_of_each_kind() {
    let mut s = featured();
    let mut req = JobRequest::nodes(4, 8);
    req.constraint = Some(Constraint::parse("[rack-a*1&rack-b*3]").unwrap());
    s.pending.push(PendingJob::new(1, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    let racks: Vec<&str> = st
        .nodes
        .iter()
        .map(|&n| s.nodes[n as usize].labels["example.com/rack"].as_str())
        .collect();
    assert_eq!(racks.iter().filter(|r| **r == "rack-a").count(), 1);
    assert_eq!(racks.iter().filter(|r| **r == "rack-b").count(), 3);
}

#[test]
fn switches_wait_for_few_leaves_then_take_any() {
    // Two nodes free on each of leaves 1 and 2; a 4-node job wants 1 leaf and waits up to
    // 10 minutes from its eligible time.
    let mut s = sandbox();
    busy(
        &mut s,
        100,
        &["gpu001", "gpu002", "gpu007", "gpu008"],
        8,
        Some(NOW + 3600),
    );
    let rest: Vec<String> = (9..=16).map(|i| format!("gpu{i:03}")).collect();
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    busy(&mut s, 101, &rest, 8, Some(NOW + 7200));
    let mut req = JobRequest::nodes(4, 8).time(600);
    req.switches = Some(Switches::parse("1@10:00").unwrap());
    let mut job = PendingJob::new(1, NOW - 60, req);
    job.eligible_time = Some(NOW - 60);
    s.pending.push(job.clone());
    let d = schedule(&s, NOW, &Config::default());
    assert!(d.starts.is_empty());
    // It would get one leaf when job 100 ends; the wait ends first (NOW+540).
    assert_eq!(pending(&d, 1).start_estimate, Some(NOW + 540));
    // After the wait it takes the two half-free leaves.
    let d = schedule(&s, NOW + 600, &Config::default());
    assert_eq!(started(&d, 1).leaves, 2);
    // Without a wait limit (the default 300 s has passed too) it starts at once.
    let mut s2 = s.clone();
    s2.pending[0].request.switches = Some(Switches::parse("1").unwrap());
    let d = schedule(&s2, NOW + 300, &Config::default());
    assert_eq!(started(&d, 1).leaves, 2);
}

#[test]
fn gpu_bind_map_gpu_is_honoured_and_sharing_is_refused() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001"], 1, None);
    let mut req = JobRequest {
        min_nodes: Some(1),
        ntasks_per_node: Some(2),
        gpus_per_task: Some(1),
        ..Default::default()
    };
    req.gpu_bind = Some(GpuBind::parse("map_gpu:6,3").unwrap());
    s.pending.push(PendingJob::new(1, NOW, req.clone()));
    let mut shared = req.clone();
    shared.gpu_bind = Some(GpuBind::parse("single:2").unwrap());
    s.pending.push(PendingJob::new(2, NOW, shared));
    let mut wrong = req;
    wrong.gpu_bind = Some(GpuBind::parse("map_gpu:0*2").unwrap());
    s.pending.push(PendingJob::new(3, NOW, wrong));
    let d = schedule(&s, NOW, &Config::default());
    let st = started(&d, 1);
    assert_eq!(st.tasks[0].gpus, [6]);
    assert_eq!(st.tasks[1].gpus, [3]);
    assert_eq!(pending(&d, 2).reason, Reason::BadConstraints);
    // map_gpu:0,0 would put both tasks on GPU 0: no node can do that.
    assert_eq!(pending(&d, 3).reason, Reason::BadConstraints);
}

#[test]
fn prepared_trees_give_the_same_decisions_and_are_checked() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001", "gpu002"], 4, Some(NOW + 300));
    for i in 0..12u64 {
        s.pending.push(PendingJob::new(
            i + 1,
            NOW - i as i64,
            JobRequest::nodes(1 + (i as u32 % 5), 8).time(900),
        ));
    }
    let prep = Prepared::new(&s.nodes, &s.partitions);
    let cfg = Config::default();
    assert_eq!(
        schedule_prepared(&prep, &s, NOW, &cfg),
        schedule(&s, NOW, &cfg)
    );
    // A snapshot of other nodes: the stale trees are not used.
    let mut other = s.clone();
    std::sync::Arc::make_mut(&mut other.nodes).truncate(12);
    other.running.clear();
    assert_eq!(
        schedule_prepared(&prep, &other, NOW, &cfg),
        schedule(&other, NOW, &cfg)
    );
}

#[test]
fn node_and_task_counts_spread_tasks_evenly() {
    let mut s = sandbox();
    // -N 2 -n 6 --gpus-per-task=1: 3 tasks on each of 2 nodes.
    let req = JobRequest {
        min_nodes: Some(2),
        ntasks: Some(6),
        gpus_per_task: Some(1),
        ..Default::default()
    };
    s.pending.push(PendingJob::new(1, NOW, req));
    // -n 6 alone packs onto one node.
    s.pending
        .push(PendingJob::new(2, NOW + 1, JobRequest::tasks(6, 1)));
    let d = schedule(&s, NOW, &Config::default());
    let a = started(&d, 1);
    assert_eq!(a.nodes.len(), 2);
    let per_node: Vec<usize> = a
        .nodes
        .iter()
        .map(|&n| a.tasks.iter().filter(|t| t.node == n).count())
        .collect();
    assert_eq!(per_node, [3, 3]);
    assert_eq!(started(&d, 2).nodes.len(), 1);
}

#[test]
fn node_ranges_take_as_many_nodes_as_are_free_under_one_switch() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001"], 8, None);
    // --nodes=2-8 --gpus-per-node=8: leaf 1 has 3 free nodes, leaves 2-4 have 4 each; the
    // lowest switch holding 2 nodes is a leaf: best fit leaf 1, all 3 of its free nodes.
    let req = JobRequest {
        min_nodes: Some(2),
        max_nodes: Some(8),
        gpus_per_node: Some(8),
        ..Default::default()
    };
    s.pending.push(PendingJob::new(1, NOW, req));
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(
        names(&s, &started(&d, 1).nodes),
        ["gpu002", "gpu003", "gpu004"]
    );
}

#[test]
fn cpu_and_memory_limit_what_a_node_takes() {
    let mut s = sandbox();
    // gpu001 has its GPUs free but almost no CPU left.
    s.running.push(RunningJob {
        id: 100,
        namespace: "default".into(),
        partition: Some(0),
        start_time: NOW - 10,
        tasks: vec![TaskAlloc {
            node: 0,
            gpus: vec![],
            cpu_millis: 220_000,
            memory_mib: 1024,
        }],
        ..Default::default()
    });
    let mut req = JobRequest::gpus(1);
    req.cpus_per_task = Some(8);
    req.memory = Some(MemoryRequest::PerNode(1024));
    s.pending.push(PendingJob::new(1, NOW, req));
    // --mem=0: the whole node's memory, so only a node whose memory is all free.
    let mut whole = JobRequest::gpus(1);
    whole.memory = Some(MemoryRequest::WholeNode);
    s.pending.push(PendingJob::new(2, NOW + 1, whole));
    let d = schedule(&s, NOW, &Config::default());
    let a = started(&d, 1);
    assert_eq!(names(&s, &a.nodes), ["gpu002"]);
    assert_eq!(a.tasks[0].cpu_millis, 8000);
    assert_eq!(a.tasks[0].memory_mib, 1024);
    let b = started(&d, 2);
    assert_eq!(names(&s, &b.nodes), ["gpu003"]);
    assert_eq!(b.tasks[0].memory_mib, 2 << 20);
}

#[test]
fn reservations_chain_for_every_waiting_job_up_to_the_limit() {
    // All 16 nodes busy until NOW+3600; 20 jobs of 4 whole nodes for 600 s each. With 20
    // reservations allowed every job gets one: four at a time (one per leaf), every 600 s.
    let mut s = sandbox();
    fill(&mut s, 100, &range(1, 16), NOW + 3600);
    for id in 1..=20 {
        s.pending.push(PendingJob::new(
            id,
            NOW - 100 + id as i64,
            JobRequest::nodes(4, 8).time(600),
        ));
    }
    let cfg = Config {
        max_reservations: 20,
        ..Config::default()
    };
    let d = schedule(&s, NOW, &cfg);
    assert!(d.starts.is_empty());
    assert_eq!(d.reservations.len(), 20, "{:?}", d.pending);
    for id in 1..=20u64 {
        let wave = (id as i64 - 1) / 4;
        assert_eq!(
            pending(&d, id).start_estimate,
            Some(NOW + 3600 + 600 * wave),
            "job {id}"
        );
    }
    // Each wave takes the four leaves whole.
    for r in &d.reservations {
        let n = names(&s, &r.nodes);
        let leaf = |name: &String| (name[3..].parse::<u32>().unwrap() - 1) / 4;
        assert!(n.iter().all(|x| leaf(x) == leaf(&n[0])), "{n:?}");
    }
    // The cap holds: with 6 allowed, the first 6 jobs get one, the rest none.
    let d = schedule(
        &s,
        NOW,
        &Config {
            max_reservations: 6,
            ..Config::default()
        },
    );
    assert_eq!(d.reservations.len(), 6);
    assert_eq!(pending(&d, 6).start_estimate, Some(NOW + 3600 + 600));
    assert_eq!(pending(&d, 7).start_estimate, None);
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
