//! Preemption: higher tiers taking the room of lower-tier gangs, and `PreemptMode::Off`.

use super::*;

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
