//! Speed of `muster simulate`: a synthetic trace shaped like the bundled ITP trace replayed
//! on a large cluster, with the figures printed (a benchmark run, not a timed test).
//!
//! ```text
//! cargo bench -p muster-cli --bench simulate                      # 100,000 jobs, 4,096 nodes
//! cargo bench -p muster-cli --bench simulate -- --jobs 10000 --policy first-fit
//! ```
//!
//! Target (issue 4): 100,000 jobs on 32,768 GPUs (4,096 nodes: 4 spines x 32 leaves x 32
//! nodes x 8 GPUs) in at most 10 s.

use std::time::Instant;

use clap::Parser;
use muster_cli::simulate::engine::{Cluster, Policy, SimOptions, simulate};
use muster_cli::simulate::metrics::summarize;
use muster_cli::simulate::report::{dur, thousands};
use muster_cli::simulate::trace::{self, Format};
use muster_cli::simulate::workload::{self, Rules};
use muster_cli::simulate::{BUILTIN_TRACE, BUILTIN_TRACE_NAME};
use muster_operator::core::ClusterSpec;

#[derive(Parser)]
struct Args {
    /// Jobs in the synthetic trace.
    #[arg(long, default_value_t = 100_000)]
    jobs: usize,
    /// Spines x 32 leaves x 32 nodes x 8 GPUs.
    #[arg(long, default_value_t = 4)]
    spines: u32,
    /// Offered load.
    #[arg(long, default_value_t = 0.9)]
    load: f64,
    /// Seed of the trace.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Policy.
    #[arg(long, value_enum, default_value_t = Policy::Muster)]
    policy: Policy,
    /// Seconds between cycles.
    #[arg(long, default_value_t = 10)]
    interval: u64,
    /// Queue depth per cycle.
    #[arg(long, default_value_t = 1000)]
    max_queue: usize,
    /// Ignored (cargo bench passes --bench).
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let a = Args::parse();
    let spec = ClusterSpec::tree("bench", a.spines, 32, 32, 8);
    let t0 = Instant::now();
    let cl = Cluster::from_spec(&spec).expect("built-in spec");
    let model =
        trace::parse(BUILTIN_TRACE_NAME, BUILTIN_TRACE, Format::Itp, false).expect("bundled trace");
    let tr = trace::synth::generate(a.jobs, a.seed, cl.total_gpus, a.load, &model);
    let w = workload::build(&tr, &cl, &Rules::default());
    let setup = t0.elapsed();
    let opts = SimOptions {
        interval: a.interval,
        max_queue: a.max_queue,
        ..SimOptions::default()
    };
    let cpu0 = cpu_secs();
    let run = simulate(&cl, &w, a.policy, &opts, None);
    let cpu = cpu_secs().zip(cpu0).map(|(b, a)| b - a);
    let s = summarize(&run, &w, &cl);
    println!(
        "simulate: {} jobs (ITP-shaped, load {}, seed {}) on {} nodes / {} GPUs, policy {}",
        thousands(a.jobs as u64),
        a.load,
        a.seed,
        thousands(cl.nodes.len() as u64),
        thousands(cl.total_gpus),
        a.policy.name()
    );
    println!(
        "  setup {:.2}s; replay {:.2}s wall, {} CPU (scheduler {:.2}s, engine {:.2}s); target <= 10 s",
        setup.as_secs_f64(),
        s.wall_secs,
        cpu.map(|c| format!("{c:.2}s"))
            .unwrap_or_else(|| "n/a".into()),
        s.policy_secs,
        s.wall_secs - s.policy_secs
    );
    println!(
        "  {} cycles run ({:.2} ms each), {} skipped, {} cut to the queue depth; {} events; longest queue {}",
        thousands(s.cycles),
        if s.cycles > 0 {
            1e3 * s.policy_secs / s.cycles as f64
        } else {
            0.0
        },
        thousands(s.skipped_cycles),
        thousands(s.truncated_cycles),
        thousands(run.stats.events),
        thousands(run.stats.max_queue as u64)
    );
    println!(
        "  simulated {} ; utilisation {:.1}%; wait mean {} p95 {}; started {} of {}",
        dur(s.makespan_secs as f64),
        100.0 * s.gpu_utilisation,
        dur(s.wait_mean_secs),
        dur(s.wait_p95_secs),
        thousands(s.started as u64),
        thousands(s.jobs as u64)
    );
}

/// CPU seconds this process has used (user + system), from /proc; `None` elsewhere. The
/// machine is shared, so CPU time is the steadier figure next to wall time.
fn cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
