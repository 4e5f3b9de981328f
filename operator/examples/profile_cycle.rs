//! Runs one benchmark scenario in a loop, for profilers:
//! `cargo run --release -p muster-operator --example profile_cycle -- [cycle|gang|many|big] [N]
//! [RESERVATIONS]` (`big`: the 16,384-node cycle of the scaling series; `PREPARED=1`: with the
//! trees kept, as the operator runs).

use muster_operator::bench::{NOW, cycle_scenario, gang_scenario, many_scenario, thread_cpu_secs};
use muster_operator::core::{Config, Decisions, Prepared, Snapshot, schedule, schedule_prepared};

/// The measured call (a separate symbol so profilers can select it).
#[inline(never)]
fn measured(s: &Snapshot, prep: Option<&Prepared>, cfg: &Config) -> Decisions {
    match prep {
        Some(p) => schedule_prepared(p, s, NOW, cfg),
        None => schedule(s, NOW, cfg),
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
    let prep = std::env::var_os("PREPARED").map(|_| Prepared::new(&s.nodes, &s.partitions));
    let mut started = 0;
    for _ in 0..n {
        let (t, c) = (std::time::Instant::now(), thread_cpu_secs());
        let d = measured(&s, prep.as_ref(), &cfg);
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
