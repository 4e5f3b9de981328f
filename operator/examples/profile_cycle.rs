//! Runs one benchmark scenario in a loop, for profilers:
//! `cargo run --release -p muster-operator --example profile_cycle -- [cycle|gang|many|big] [N]
//! [RESERVATIONS]` (`big`: the 16,384-node cycle of the scaling series; `PREPARED=1`: with the
//! trees kept; `KEPT=1`: with the trees and the running jobs' layout kept, as the operator
//! runs every cycle). For instruction counts on a busy machine:
//! `valgrind --tool=callgrind --toggle-collect='*profile_cycle*measured*' target/release/examples/profile_cycle big 3`.

use muster_operator::bench::{NOW, cycle_scenario, gang_scenario, many_scenario, thread_cpu_secs};
use muster_operator::core::{
    Config, Decisions, KeptOccupancy, Prepared, Snapshot, schedule, schedule_prepared,
};

/// The measured call (a separate symbol so profilers can select it).
#[inline(never)]
fn measured(
    s: &Snapshot,
    prep: Option<&Prepared>,
    kept: Option<&mut KeptOccupancy>,
    cfg: &Config,
) -> Decisions {
    match (prep, kept) {
        (Some(p), Some(k)) => k.schedule(p, s, NOW, cfg),
        (Some(p), None) => schedule_prepared(p, s, NOW, cfg),
        _ => schedule(s, NOW, cfg),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let which = args.get(1).map(String::as_str).unwrap_or("cycle");
    let n: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(10);
    let s = match which {
        "gang" => gang_scenario(4096, 512),
        "many" => many_scenario(16_384, 100_000),
        "big" => cycle_scenario(16_384, 40_000, 42),
        _ => cycle_scenario(4096, 10_000, 42),
    };
    let mut cfg = Config::default();
    if let Some(r) = args.get(3).and_then(|a| a.parse().ok()) {
        cfg.max_reservations = r;
    }
    let keep = std::env::var_os("KEPT").is_some();
    let prep = (keep || std::env::var_os("PREPARED").is_some())
        .then(|| Prepared::new(&s.nodes, &s.partitions));
    let mut kept = keep.then(KeptOccupancy::new);
    if let (Some(p), Some(k)) = (prep.as_ref(), kept.as_mut()) {
        // The cycle before, which laid the running jobs out (not measured).
        k.schedule(p, &s, NOW, &cfg);
    }
    let mut started = 0;
    for _ in 0..n {
        let (t, c) = (std::time::Instant::now(), thread_cpu_secs());
        let d = measured(&s, prep.as_ref(), kept.as_mut(), &cfg);
        started = d.starts.len();
        // Thread CPU time as well: on a loaded machine the wall clock counts others' work.
        let cpu = match (c, thread_cpu_secs()) {
            (Some(a), Some(b)) => (b - a) * 1e3,
            _ => f64::NAN,
        };
        eprintln!(
            "{which}: {:.2} ms ({cpu:.2} ms CPU), {} started, {} reserved",
            t.elapsed().as_secs_f64() * 1e3,
            started,
            d.reservations.len()
        );
    }
    println!("{started}");
}
