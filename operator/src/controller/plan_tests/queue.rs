//! Through the planner: invalid specs, dependencies, arrays, preemption and reservations.

use super::*;

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
fn arrays_run_each_index_as_its_own_gang_under_the_throttle() {
    let mut h = harness(4, 8);
    let mut spec = gpus(1);
    spec.array = Some(IntOrString::String("0-5%2".into()));
    h.cluster.submit(job("sweep", spec, 30, None));
    h.cycle();
    let st = h.cluster.job("sweep").status.unwrap();
    assert_eq!(st.job_id, Some(1));
    assert_eq!(st.array_tasks.as_ref().unwrap().total, 6);
    h.cycle();
    // Its elements not yet created are eligible from when the array may create them.
    let eligible = h.cluster.job("sweep").status.unwrap().eligible_time;
    assert!(eligible.is_some());
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

/// An array whose spec cannot run ends FAILED (it never had elements); cancelled, it ends
/// CANCELLED — never pending forever.
#[test]
fn a_held_array_is_not_eligible_until_released() {
    let mut h = harness(4, 8);
    let mut spec = gpus(1);
    spec.array = Some(IntOrString::String("0-3".into()));
    spec.hold = Some(true);
    h.cluster.submit(job("held", spec, 30, None));
    h.cycle();
    h.cycle();
    assert_eq!(h.cluster.job("held").status.unwrap().eligible_time, None);
    h.cluster.edit("held", |j| j.spec.hold = Some(false));
    h.cycle();
    assert!(
        h.cluster
            .job("held")
            .status
            .unwrap()
            .eligible_time
            .is_some()
    );
}

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

#[test]
fn a_gang_no_one_waits_behind_starts_spread_at_once() {
    // Four leaves of four nodes. node3-4 (leaf 1) free in 10 minutes, node7-16 busy for
    // hours: a 4-node gang fits now only over leaves 1 and 2 (node1-2, node5-6), and leaf 1
    // is whole soon. With a job queued behind it the gang waits for leaf 1; alone, waiting
    // would delay no one but itself, so it starts spread at once (`Cycle::spread_at_once`).
    let setup = |behind: bool| {
        let mut h = Harness::new();
        h.cluster.add_nodes(16, 8, 4);
        h.cluster.add_partition(partition("gpu", true));
        for (i, limit, run) in [(3, 10, 600), (4, 10, 600)]
            .into_iter()
            .chain((7..=16).map(|i| (i, 600, 36_000)))
        {
            let mut s = gpus(8);
            s.time = int(limit);
            s.nodelist = Some(format!("node{i}"));
            h.cluster.submit(job(&format!("fill{i:02}"), s, run, None));
        }
        h.cycle();
        h.now += 1;
        let mut g = gang(4, 1, 8);
        g.time = int(10);
        h.cluster.submit(job("gang", g, 600, None));
        if behind {
            h.now += 1;
            let mut b = gang(8, 1, 8);
            b.time = int(10);
            // Named to sort after "gang": jobs seen in one cycle get ids in name order.
            h.cluster.submit(job("later", b, 600, None));
        }
        h.cycle();
        h.cluster.job("gang").status.unwrap()
    };
    let st = setup(false);
    assert_eq!(st.state, Some(JobState::Running), "{st:?}");
    assert_eq!(st.node_list.as_deref(), Some("node[1-2,5-6]"));
    let st = setup(true);
    assert_eq!(st.state, Some(JobState::Pending), "{st:?}");
    assert!(st.node_list.is_none(), "{st:?}");
}

#[test]
fn a_waiting_jobs_priority_is_in_its_status_and_an_edit_shows_at_once() {
    let mut h = harness(1, 8);
    h.cluster.submit(job("filler", gpus(8), 3600, None));
    h.cycle();
    h.cluster.submit(job("small", gpus(1), 60, None));
    let mut niced = gpus(1);
    niced.nice = Some(100);
    h.cluster.submit(job("niced", niced, 60, None));
    h.step(1);
    let prio = |h: &Harness, n: &str| h.cluster.job(n).status.unwrap().priority;
    let (small, niced) = (prio(&h, "small").unwrap(), prio(&h, "niced").unwrap());
    assert_eq!(small - niced, 100, "{small} {niced}");
    // A job that started at once has the priority it started with.
    assert!(prio(&h, "filler").is_some());
    h.cluster
        .edit("small", |j| j.spec.priority = Some(4_000_000));
    h.step(1);
    assert_eq!(prio(&h, "small"), Some(4_000_000));
    // Kept once it runs.
    h.cluster.edit("filler", |j| j.spec.cancel = Some(true));
    run_for(&mut h, 40);
    assert_eq!(h.cluster.state("small"), JobState::Running);
    assert_eq!(prio(&h, "small"), Some(4_000_000));
}
