//! The cycle's decisions are a function of the snapshot: not of input order, nor of
//! whether prepared trees are used.

use super::*;

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
