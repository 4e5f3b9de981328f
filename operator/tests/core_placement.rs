//! Muster's placement looks at the whole cycle: a gang does not take the only leaf a later
//! gang of the same cycle fits; a gang that must span takes the leaves that leave the most
//! room whole; a gang waits for its fewest leaves while they come soon; and the default
//! priority holds no room for a bigger gang ahead of earlier smaller jobs.

use muster_operator::core::*;

mod support;
use support::*;

#[test]
fn a_small_gang_leaves_a_later_gang_the_only_leaf_that_holds_it() {
    // Leaf 1: gpu001-002 idle, gpu003-004 full. Leaf 2: four nodes with 5 GPUs free each.
    // Leaves 3-4 full. Job 1 (2 nodes x 1 GPU) fits both leaves; by best fit alone it takes
    // leaf 1 (least free room) and breaks the two idle nodes job 2 (2 nodes x 8 GPUs) needs.
    let mut s = sandbox();
    fill(&mut s, 100, &range(3, 4), NOW + 3600);
    busy(
        &mut s,
        101,
        &["gpu005", "gpu006", "gpu007", "gpu008"],
        3,
        Some(NOW + 3600),
    );
    fill(&mut s, 102, &range(9, 16), NOW + 3600);
    s.pending = vec![
        PendingJob::new(1, NOW - 2, JobRequest::nodes(2, 1).time(600)),
        PendingJob::new(2, NOW - 1, JobRequest::nodes(2, 8).time(600)),
    ];
    let d = schedule(&s, NOW, &Config::default());
    let small = started(&d, 1);
    assert!(
        names(&s, &small.nodes)
            .iter()
            .all(|n| range(5, 8).contains(n)),
        "{:?}",
        names(&s, &small.nodes)
    );
    assert_eq!(names(&s, &started(&d, 2).nodes), ["gpu001", "gpu002"]);
}

#[test]
fn a_spanning_gang_takes_the_leaves_that_leave_the_most_room_whole() {
    // Free whole nodes per leaf: 4, 3, 3, 0. A 6-node gang fits no leaf; the largest leaf
    // first would use leaves 1 and 2 and leave 1 + 3 nodes in pieces; leaves 2 and 3 hold it
    // exactly and keep leaf 1's four nodes whole for the next 4-node gang.
    let mut s = sandbox();
    fill(&mut s, 100, &range(8, 8), NOW + 3600);
    fill(&mut s, 101, &range(12, 16), NOW + 3600);
    s.pending = vec![
        PendingJob::new(1, NOW - 2, JobRequest::nodes(6, 8).time(600)),
        PendingJob::new(2, NOW - 1, JobRequest::nodes(4, 8).time(600)),
    ];
    let cfg = Config {
        topology_wait_secs: 0,
        ..Config::default()
    };
    let d = schedule(&s, NOW, &cfg);
    let mut gang = names(&s, &started(&d, 1).nodes);
    gang.sort();
    let mut want = range(5, 7);
    want.extend(range(9, 11));
    assert_eq!(gang, want);
    assert_eq!(names(&s, &started(&d, 2).nodes), range(1, 4));
    assert_eq!(started(&d, 2).leaves, 1);
}

#[test]
fn a_gang_waits_for_one_leaf_only_while_it_comes_soon() {
    // Two free nodes on each of leaves 1 and 2, the rest busy. A 4-node gang could start now
    // over two leaves. A later 8-node gang waits behind it.
    let setup = |end: i64| {
        let mut s = sandbox();
        fill(&mut s, 100, &range(3, 4), end);
        fill(&mut s, 101, &range(7, 16), NOW + 30 * 86_400);
        s.pending = vec![
            PendingJob::new(1, NOW - 2, JobRequest::nodes(4, 8).time(600)),
            PendingJob::new(2, NOW - 1, JobRequest::nodes(8, 8).time(600)),
        ];
        s
    };
    let cfg = Config::default();
    // Leaf 1 is whole in 10 minutes: the gang waits for it, with a reservation there.
    let s = setup(NOW + 600);
    let d = schedule(&s, NOW, &cfg);
    assert!(d.starts.is_empty(), "{:?}", d.starts);
    let r = &d.reservations[0];
    assert_eq!(
        (r.start_time, names(&s, &r.nodes)),
        (NOW + 600, range(1, 4))
    );
    // Leaf 1 is whole only in two days: beyond topologyWaitSecs, so it starts now, spread.
    let s = setup(NOW + 2 * 86_400);
    let d = schedule(&s, NOW, &cfg);
    assert_eq!(started(&d, 1).leaves, 2);
    // With the wait off, it never waits.
    let s = setup(NOW + 600);
    let off = Config {
        topology_wait_secs: 0,
        ..cfg
    };
    assert_eq!(started(&schedule(&s, NOW, &off), 1).leaves, 2);
}

#[test]
fn a_gang_no_job_waits_behind_spreads_at_once_unless_a_spread_gang_runs() {
    // As above, leaf 1 is whole in 10 minutes, but no other job of the partition waits:
    // waiting would delay only the gang, so it starts now over two leaves.
    let setup = |spread_running: bool| {
        let mut s = sandbox();
        fill(&mut s, 100, &range(3, 4), NOW + 600);
        fill(&mut s, 101, &range(7, 11), NOW + 30 * 86_400);
        fill(&mut s, 103, &range(14, 16), NOW + 30 * 86_400);
        // gpu012 (leaf 3) and gpu013 (leaf 4): one 2-node job spread over two leaves, or
        // two one-node jobs.
        if spread_running {
            fill(&mut s, 102, &range(12, 13), NOW + 30 * 86_400);
        } else {
            fill(&mut s, 102, &range(12, 12), NOW + 30 * 86_400);
            fill(&mut s, 104, &range(13, 13), NOW + 30 * 86_400);
        }
        s.pending = vec![PendingJob::new(
            1,
            NOW - 1,
            JobRequest::nodes(4, 8).time(600),
        )];
        s
    };
    let cfg = Config::default();
    let s = setup(false);
    let d = schedule(&s, NOW, &cfg);
    assert_eq!(started(&d, 1).leaves, 2);
    // A held job and one before its --begin time are not waiting for room.
    let mut later = s.clone();
    let mut held = PendingJob::new(2, NOW, JobRequest::nodes(1, 1).time(600));
    held.hold = true;
    let mut begins = PendingJob::new(3, NOW, JobRequest::nodes(1, 1).time(600));
    begins.begin_time = Some(NOW + 3600);
    later.pending.extend([held, begins]);
    assert_eq!(started(&schedule(&later, NOW, &cfg), 1).leaves, 2);
    // An earlier job of the partition waiting for room (here for gpu012, busy for 30 days):
    // the queue has not drained, so the gang waits for leaf 1 as any gang does.
    let mut earlier = s.clone();
    let mut pinned = JobRequest::nodes(1, 8).time(600);
    pinned.nodelist = vec!["gpu012".into()];
    earlier
        .pending
        .insert(0, PendingJob::new(2, NOW - 2, pinned));
    let d = schedule(&earlier, NOW, &cfg);
    assert!(d.starts.is_empty(), "{:?}", d.starts);
    let gang = d.reservations.iter().find(|r| r.job == 1).unwrap();
    assert_eq!(names(&s, &gang.nodes), range(1, 4), "{:?}", d.reservations);
    // A site that keeps long gangs off spread placements: the 10-minute gang is over a
    // 5-minute bound, so it waits for leaf 1 (whole in 10 minutes); at its limit it spreads.
    let long = |max| Config {
        spread_at_once_max_limit_secs: max,
        ..cfg.clone()
    };
    let d = schedule(&s, NOW, &long(300));
    assert!(d.starts.is_empty(), "{:?}", d.starts);
    assert_eq!(names(&s, &d.reservations[0].nodes), range(1, 4));
    assert_eq!(started(&schedule(&s, NOW, &long(600)), 1).leaves, 2);
    // Spreading at once is never the habit: while a gang one leaf could hold runs spread,
    // the next one waits for its leaf.
    let s = setup(true);
    let d = schedule(&s, NOW, &cfg);
    assert!(d.starts.is_empty(), "{:?}", d.starts);
    assert_eq!(
        names(&s, &d.reservations[0].nodes),
        range(1, 4),
        "{:?}",
        d.reservations
    );
}

#[test]
fn no_room_is_held_for_a_bigger_gang_ahead_of_earlier_jobs_by_default() {
    // Room for one of them: the earlier 1-node job goes first under the default weights;
    // a job-size weight, if configured, puts the 4-node gang first.
    let mut s = sandbox();
    fill(&mut s, 100, &range(5, 16), NOW + 3600);
    s.pending = vec![
        PendingJob::new(1, NOW - 60, JobRequest::nodes(1, 8).time(600)),
        PendingJob::new(2, NOW - 30, JobRequest::nodes(4, 8).time(600)),
    ];
    let d = schedule(&s, NOW, &Config::default());
    started(&d, 1);
    assert!(d.starts.iter().all(|x| x.job != 2));
    let sized = Config {
        weight_job_size: 1000.0,
        ..Config::default()
    };
    let d = schedule(&s, NOW, &sized);
    assert_eq!(names(&s, &started(&d, 2).nodes), range(1, 4));
}
