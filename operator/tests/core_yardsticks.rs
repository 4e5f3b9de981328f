//! The yardsticks Muster is measured against (`core::baseline`): first fit keeps every
//! placement rule but topology; the Slurm-like backfill places as Slurm's topology/tree does
//! and reserves for every waiting job.

use muster_operator::core::baseline::{Yardstick, first_fit};
use muster_operator::core::*;

mod support;
use support::*;

#[test]
fn first_fit_honours_constraints() {
    // Before: the constraint was ignored and the job took gpu001.
    let mut s = sandbox();
    for n in std::sync::Arc::make_mut(&mut s.nodes).iter_mut().skip(8) {
        n.labels
            .insert("muster.dev/feature.ib".into(), "true".into());
    }
    let mut r = JobRequest::nodes(1, 8).time(600);
    r.constraint = Some(Constraint::parse("ib").unwrap());
    s.pending = vec![PendingJob::new(1, NOW - 5, r)];
    let d = first_fit(&s, NOW);
    assert_eq!(names(&s, &started(&d, 1).nodes), ["gpu009"]);
}

#[test]
fn first_fit_puts_a_one_node_task_count_on_the_first_node_that_holds_it() {
    // gpu001 has 4 GPUs taken: `nodes: 1, ntasks: 8` cannot use it and takes gpu002 — the
    // old baseline took what gpu001 had, ran out of nodes and wrote the shape off for the
    // whole cycle.
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001"], 4, Some(NOW + 600));
    s.pending = (1..=3)
        .map(|i| {
            let mut r = JobRequest::tasks(8, 1).time(600);
            r.min_nodes = Some(1);
            r.max_nodes = Some(1);
            PendingJob::new(i, NOW - 10 + i as i64, r)
        })
        .collect();
    let d = first_fit(&s, NOW);
    assert_eq!(d.starts.len(), 3, "{:?}", d.pending);
    assert_eq!(names(&s, &started(&d, 1).nodes), ["gpu002"]);
    assert_eq!(names(&s, &started(&d, 3).nodes), ["gpu004"]);
    assert!(started(&d, 1).tasks.iter().all(|t| t.gpus.len() == 1));
}

#[test]
fn first_fit_ignores_topology_and_passes_over_what_does_not_fit() {
    let mut s = sandbox();
    busy(&mut s, 100, &["gpu001"], 8, Some(NOW + 600));
    s.pending = vec![
        PendingJob::new(1, NOW - 3, JobRequest::nodes(4, 8).time(600)),
        PendingJob::new(2, NOW - 2, JobRequest::nodes(16, 8).time(600)),
        PendingJob::new(3, NOW - 1, JobRequest::nodes(1, 8).time(600)),
    ];
    let d = first_fit(&s, NOW);
    // The next free nodes in list order, across leaves 1 and 2.
    assert_eq!(
        names(&s, &started(&d, 1).nodes),
        ["gpu002", "gpu003", "gpu004", "gpu005"]
    );
    assert_eq!(started(&d, 1).leaves, 2);
    // The 16-node job is passed over (no reservation) and job 3 starts.
    assert!(d.reservations.is_empty());
    assert_eq!(names(&s, &started(&d, 3).nodes), ["gpu006"]);
}

#[test]
fn slurm_tree_takes_the_tightest_leaf_then_spills_largest_first() {
    // Free whole nodes per leaf: 4, 3, 2, 1.
    let mut s = sandbox();
    fill(&mut s, 100, &range(8, 8), NOW + 600);
    fill(&mut s, 101, &range(11, 12), NOW + 600);
    fill(&mut s, 102, &range(14, 16), NOW + 600);
    s.pending = vec![
        PendingJob::new(1, NOW - 3, JobRequest::nodes(2, 8).time(600)),
        PendingJob::new(2, NOW - 2, JobRequest::nodes(6, 8).time(600)),
    ];
    let d = Yardstick::SlurmBackfill.schedule(&s, NOW, &Config::default());
    // The 2-node job: the leaf with the fewest available nodes that holds it (leaf 3).
    assert_eq!(names(&s, &started(&d, 1).nodes), ["gpu009", "gpu010"]);
    // The 6-node job: leaf 1 whole (the most nodes), then the tightest leaf for the other
    // two: leaf 2 (3 free) — leaf 4 has one.
    assert_eq!(
        names(&s, &started(&d, 2).nodes),
        ["gpu001", "gpu002", "gpu003", "gpu004", "gpu005", "gpu006"]
    );
}

#[test]
fn slurm_backfill_reserves_for_every_waiting_job() {
    let mut s = sandbox();
    fill(&mut s, 100, &range(1, 16), NOW + 3600);
    s.pending = (1..=6)
        .map(|i| PendingJob::new(i, NOW - 10 + i as i64, JobRequest::nodes(4, 8).time(600)))
        .collect();
    let d = Yardstick::SlurmBackfill.schedule(&s, NOW, &Config::default());
    assert_eq!(d.reservations.len(), 6);
    // In submit order: the first four share the first release, the next two follow them.
    assert!(
        d.reservations[..4]
            .iter()
            .all(|r| r.start_time == NOW + 3600)
    );
    assert!(
        d.reservations[4..]
            .iter()
            .all(|r| r.start_time == NOW + 4200)
    );
    // Muster holds room for `max_reservations` jobs only.
    let cfg = Config {
        max_reservations: 4,
        ..Config::default()
    };
    let m = schedule(&s, NOW, &cfg);
    assert_eq!(m.reservations.len(), 4);
}
