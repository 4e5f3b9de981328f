//! A trace small enough to schedule by hand, replayed under every policy: the simulator must
//! give exactly the hand-computed schedule (start times, nodes, leaves, waits, estimates).

use muster_cli::simulate::engine::{Cluster, JobOutcome, Policy, SimOptions, SimRun, simulate};
use muster_cli::simulate::shape::LimitRule;
use muster_cli::simulate::trace::{self, Format};
use muster_cli::simulate::workload::{self, Rules};
use muster_operator::core::ClusterSpec;

/// Cluster: one spine, leaf1 = {gpu001, gpu002}, leaf2 = {gpu003, gpu004}, 8 GPUs each.
/// Gangs by the default rule (8 GPUs: one node; 16: two whole nodes); limits `exact` (the
/// run time rounded up to the minute: A 600, B 1200, C 600, D 300, E 1020); a cycle after
/// every event (interval 0).
const TRACE: &str = "\
job_id,submission_time,duration,num_gpu
A,0,600,8
B,1,1200,16
C,60,600,16
D,120,300,4
E,130,1000,4
";

fn replay(policy: Policy) -> (Cluster, Vec<JobOutcome>, SimRun) {
    let spec = ClusterSpec::tree("hand", 1, 2, 2, 8);
    let cl = Cluster::from_spec(&spec).unwrap();
    let t = trace::parse("hand.csv", TRACE, Format::Itp, false).unwrap();
    let rules = Rules {
        limit: LimitRule::Exact,
        ..Rules::default()
    };
    let w = workload::build(&t, &cl, &rules);
    let opts = SimOptions {
        interval: 0,
        ..SimOptions::default()
    };
    let run = simulate(&cl, &w, policy, &opts, None);
    (cl, run.jobs.clone(), run)
}

/// (start, node names, leaves, wait, first estimate)
fn view(cl: &Cluster, o: &JobOutcome, submit: i64) -> (i64, Vec<String>, u32, i64, Option<i64>) {
    let start = o.start.expect("started");
    (
        start,
        o.node_ids
            .iter()
            .map(|&n| cl.nodes[n as usize].name.clone())
            .collect(),
        o.leaves,
        start - submit,
        o.first_estimate,
    )
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const SUBMIT: [i64; 5] = [0, 1, 60, 120, 130];

#[test]
fn muster_schedule_matches_the_hand_computation() {
    // t=0    A (1 node) on the empty cluster: all leaves tie, tree order -> leaf1, gpu001.
    // t=1    B (2 nodes): leaf1 has one free node, leaf2 two -> leaf2, gpu003+gpu004.
    // t=60   C (2 nodes): only gpu002 is free. Reservation: A's limit ends at 600, then
    //        leaf1 is whole -> C reserved at 600 on gpu001+gpu002 (estimate 600).
    // t=120  D (4 GPUs, limit 300): on gpu002 it ends by 420 <= 600, so it cannot delay C's
    //        reservation -> backfilled now on gpu002.
    // t=130  E (4 GPUs, limit 1020): gpu002 has 4 GPUs free, but E would run past 600 into
    //        C's hold -> waits. Earliest room: C's hold on leaf1 ends at 600 + 600 = 1200
    //        (B frees leaf2 only at 1 + 1200 = 1201) -> estimate 1200.
    // t=420  D ends: C still needs gpu001 (A), E still collides with C's hold.
    // t=600  A ends: C starts on gpu001+gpu002 (leaf1), wait 540.
    // t=1200 C ends: E starts; leaf1 is whole, leaf2 still busy -> gpu001, wait 1070.
    let (cl, j, run) = replay(Policy::Muster);
    let got: Vec<_> = j.iter().zip(SUBMIT).map(|(o, s)| view(&cl, o, s)).collect();
    assert_eq!(
        got,
        vec![
            (0, names(&["gpu001"]), 1, 0, None),
            (1, names(&["gpu003", "gpu004"]), 1, 0, None),
            (600, names(&["gpu001", "gpu002"]), 1, 540, Some(600)),
            (120, names(&["gpu002"]), 1, 0, None),
            (1200, names(&["gpu001"]), 1, 1070, Some(1200)),
        ]
    );
    let ends: Vec<i64> = j.iter().map(|o| o.end.unwrap()).collect();
    assert_eq!(ends, vec![600, 1201, 1200, 420, 2200]);
    assert_eq!(run.preemptions, 0);
}

#[test]
fn fifo_schedule_matches_the_hand_computation() {
    // As Muster until t=60; then C blocks the partition: D and E wait (no backfill).
    // t=600  A ends: C starts on leaf1 (gpu001+gpu002).
    // t=1200 C ends: D, then E (submit order). D: leaf1 is whole, leaf2 busy -> gpu001.
    //        E: best fit packs it on the fullest node with room: gpu001 (4 GPUs left).
    let (cl, j, _) = replay(Policy::Fifo);
    let got: Vec<_> = j
        .iter()
        .zip(SUBMIT)
        .map(|(o, s)| {
            let v = view(&cl, o, s);
            (v.0, v.1, v.2, v.3)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, names(&["gpu001"]), 1, 0),
            (1, names(&["gpu003", "gpu004"]), 1, 0),
            (600, names(&["gpu001", "gpu002"]), 1, 540),
            (1200, names(&["gpu001"]), 1, 1080),
            (1200, names(&["gpu001"]), 1, 1070),
        ]
    );
}

#[test]
fn first_fit_schedule_matches_the_hand_computation() {
    // t=0    A on the first node, gpu001.
    // t=1    B takes the first two whole nodes, gpu002 and gpu003: two leaves.
    // t=60   C needs two whole nodes, only gpu004 is -> passed over.
    // t=120  D: first node with 4 GPUs free is gpu004.  t=130  E: gpu004 again.
    // t=600  A ends; C still finds one whole node (gpu001).
    // t=1130 E ends (130 + 1000): gpu001 and gpu004 are whole -> C starts, two leaves.
    let (cl, j, _) = replay(Policy::FirstFit);
    let got: Vec<_> = j
        .iter()
        .zip(SUBMIT)
        .map(|(o, s)| {
            let v = view(&cl, o, s);
            (v.0, v.1, v.2, v.3)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, names(&["gpu001"]), 1, 0),
            (1, names(&["gpu002", "gpu003"]), 2, 0),
            (1130, names(&["gpu001", "gpu004"]), 2, 1070),
            (120, names(&["gpu004"]), 1, 0),
            (130, names(&["gpu004"]), 1, 0),
        ]
    );
}
