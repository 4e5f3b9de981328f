//! The order pending jobs are considered in (tiers, priority, short-limit credit, fair
//! share) and backfill around the reservations of waiting jobs.

use super::*;

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

/// The gang cap reads one clock: a one-node job submitted with a gang but made eligible a
/// second later (the operator records eligible times as it first sees jobs) still comes after
/// the gang, even with the lower id, and so does one that started with it.
#[test]
fn a_one_node_job_eligible_a_second_after_a_gang_does_not_pass_it() {
    let mut s = sandbox();
    let mut late = PendingJob::new(20, NOW - 10, JobRequest::nodes(1, 4).time(1200));
    late.eligible_time = Some(NOW - 9);
    let gang = PendingJob::new(21, NOW - 10, JobRequest::nodes(2, 8).time(1800));
    s.pending = vec![late, gang];
    let cfg = Config::default();
    assert_eq!(queue_order(&s, &cfg), [21, 20]);
    // Eligible with the gang, the lower id does not put it first either.
    s.pending[0].eligible_time = None;
    assert_eq!(queue_order(&s, &cfg), [21, 20]);
    // Without the gang's cap (a one-node "gang"), the shorter limit goes first.
    s.pending[1] = PendingJob::new(21, NOW - 10, JobRequest::nodes(1, 8).time(1800));
    assert_eq!(queue_order(&s, &cfg), [20, 21]);
}

#[test]
fn a_short_job_takes_the_freed_node_before_an_older_long_one() {
    // One free node; a 7-day job waited an hour, a 1-hour job just came, the running jobs end
    // in 8 days: the short one starts, the long one gets the reservation behind it.
    let mut s = sandbox();
    let others: Vec<String> = (2..=16).map(|i| format!("gpu{i:03}")).collect();
    fill(&mut s, 100, &others, NOW + 8 * 86_400);
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
    // The running jobs end within a day: the 7-day job would end after all of them, so it
    // sets when the partition's work ends and the later one-hour job does not pass it
    // (`priority::ends_last`).
    s.running.clear();
    fill(&mut s, 100, &others, NOW + 50_000);
    let d = schedule(&s, NOW, &Config::default());
    assert_eq!(names(&s, &started(&d, 1).nodes), ["gpu001"]);
    assert_eq!(pending(&d, 2).start_estimate, Some(NOW + 50_000));
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

#[test]
fn a_job_pinned_to_a_busy_node_does_not_hold_back_jobs_that_fit_elsewhere() {
    // gpu003-004 run an exclusive job for a day; gpu001-002 half their GPUs. Job 1 needs
    // gpu003 (`--nodelist`) and waits; jobs 2 and 3 have the same shape and limit but no
    // node list: they fit on any other node and start now. (A failed try of job 1 was once
    // remembered for every job of its shape, node list or not.)
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu003", "gpu004"], 0, Some(NOW + 86_400));
    s.running[0].exclusive = true;
    busy(&mut s, 101, &["gpu001", "gpu002"], 4, None);
    for limit in [None, Some(3600)] {
        let mut s = s.clone();
        let req = |nodelist: &[&str]| {
            let mut r = JobRequest::nodes(1, 0);
            if let Some(l) = limit {
                r = r.time(l);
            }
            r.nodelist = nodelist.iter().map(|n| n.to_string()).collect();
            r
        };
        s.pending
            .push(PendingJob::new(1, NOW - 10, req(&["gpu003"])));
        s.pending.push(PendingJob::new(2, NOW - 5, req(&[])));
        s.pending.push(PendingJob::new(3, NOW - 4, req(&[])));
        let d = schedule(&s, NOW, &Config::default());
        assert_eq!(pending(&d, 1).reason, Reason::Resources, "limit {limit:?}");
        assert_eq!(pending(&d, 1).start_estimate, Some(NOW + 86_400));
        for job in [2, 3] {
            let st = started(&d, job);
            assert!(
                !names(&s, &st.nodes)
                    .iter()
                    .any(|n| n == "gpu003" || n == "gpu004"),
                "limit {limit:?}: job {job} on {:?}",
                names(&s, &st.nodes)
            );
        }
    }
}
