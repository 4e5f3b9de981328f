//! `muster bench`: the scheduling core's speed, memory and placement-quality figures, with a
//! naive topology-unaware first-fit baseline on the same input (placement quality against
//! the Slurm-like baseline too; see [`muster_operator::bench`]). Figures are thread CPU time
//! of one core, so a loaded machine skews them less than wall time would.

use std::sync::OnceLock;

use anyhow::Context;
use muster_operator::bench::{BenchOptions, CountingAllocator, run as run_bench};
use muster_operator::controller::scheduler_config;

use crate::Io;

/// The process's global allocator, when the binary installed a counting one (`muster`
/// does; the memory figure is left out otherwise).
pub static ALLOCATOR: OnceLock<&'static CountingAllocator> = OnceLock::new();

/// Options of `muster bench`.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct BenchArgs {
    /// A shorter run (smaller scaling series and job counts), for a first look.
    #[arg(long)]
    pub quick: bool,
    /// Nodes of the main cluster (8 GPUs each, 32 per leaf).
    #[arg(long, default_value_t = 4096)]
    pub nodes: u32,
    /// Pending jobs in the main cycle.
    #[arg(long, default_value_t = 10_000)]
    pub jobs: usize,
    /// Timed repetitions per case (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub runs: u32,
    /// Seed of every synthetic input.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Cluster sizes (nodes) of the scaling series, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [512, 4096, 16_384])]
    pub scales: Vec<u32>,
    /// Nodes of the big gang placed on a half-fragmented cluster.
    #[arg(long, default_value_t = 512)]
    pub gang_nodes: u32,
    /// One-GPU jobs placed in one cycle on an empty cluster.
    #[arg(long, default_value_t = 100_000)]
    pub many_jobs: usize,
    /// Jobs of the placement-quality simulation (Muster, the Slurm-like baseline and first fit).
    #[arg(long, default_value_t = 1_500)]
    pub quality_jobs: usize,
    /// Run the placement-quality benchmark instead: Muster, the Slurm-like backfill
    /// baseline, FIFO and first fit on the bundled trace, the ITP trace with --gang gpus and
    /// synthetic loads 0.7 / 0.9 / 1.1 on three seeds each (see `crate::quality`).
    #[arg(long)]
    pub quality: bool,
    /// Jobs per synthetic trace of --quality.
    #[arg(long, default_value_t = 2_000, requires = "quality")]
    pub synthetic_jobs: usize,
    /// Muster's scheduler configuration (the chart's `scheduler:` keys in a YAML file, as
    /// `muster simulate --scheduler-config`), to measure a policy change against the same
    /// baselines: in --quality's replays, or in the cycle times and the simulated workload.
    /// Default: the operator's defaults.
    #[arg(long, value_name = "FILE")]
    pub scheduler_config: Option<std::path::PathBuf>,
    /// Seeds of --quality's synthetic traces, comma-separated. The defaults (1, 2, 3; 1 with
    /// --quick) are the workloads the targets and the policy were measured on; other seeds
    /// replay unseen workloads of the same shape, to check that a policy change generalises.
    #[arg(long, value_delimiter = ',', num_args = 1.., requires = "quality")]
    pub seeds: Vec<u64>,
    /// Offered loads of --quality's synthetic traces, comma-separated (default: 0.7, 0.9,
    /// 1.1; 0.9 with --quick).
    #[arg(long, value_delimiter = ',', num_args = 1.., requires = "quality")]
    pub loads: Vec<crate::simulate::Factor>,
}

/// Build the options and print the report.
pub fn run(args: &BenchArgs, io: &mut Io<'_>) -> anyhow::Result<()> {
    // Relative to the caller's directory, as every other path argument.
    let config = args.scheduler_config.as_ref().map(|p| io.cwd.join(p));
    // The operator's parser (its --scheduler-config): one rule for every reader.
    let loaded = config
        .as_deref()
        .map(|p| scheduler_config::load(p).with_context(|| format!("{}", p.display())))
        .transpose()?;
    if let Some(p) = &config {
        // Figures under other settings must not pass for the defaults' figures.
        writeln!(io.out, "Muster's scheduler configuration: {}", p.display())?;
    }
    if args.quality {
        let given: Vec<f64> = args.loads.iter().map(|f| f.0).collect();
        let loads: &[f64] = match (&given[..], args.quick) {
            ([], true) => &[0.9],
            ([], false) => &[0.7, 0.9, 1.1],
            (given, _) => given,
        };
        let seeds: &[u64] = match (&args.seeds[..], args.quick) {
            ([], true) => &[1],
            ([], false) => &[1, 2, 3],
            (given, _) => given,
        };
        let err = &mut *io.err;
        let ws = crate::quality::run(
            args.synthetic_jobs,
            loads,
            seeds,
            config.as_deref(),
            &mut |name| {
                let _ = writeln!(err, "replaying {name}");
            },
        )?;
        write!(io.out, "{}", crate::quality::render(&ws))?;
        return Ok(());
    }
    let mut opts = BenchOptions {
        nodes: args.nodes,
        jobs: args.jobs,
        runs: args.runs,
        seed: args.seed,
        scales: args.scales.clone(),
        gang_nodes: args.gang_nodes,
        many_jobs: args.many_jobs,
        quality_jobs: args.quality_jobs,
        memory: ALLOCATOR.get().copied(),
        ..BenchOptions::default()
    };
    if let Some(c) = loaded {
        opts.config = c;
    }
    if args.quick {
        opts.runs = opts.runs.min(1);
        opts.scales = vec![512, 4096];
        opts.many_jobs = 20_000;
        opts.many_nodes = 4096;
        opts.quality_jobs = 400;
    }
    if cfg!(debug_assertions) {
        writeln!(
            io.err,
            "note: this is a debug build; figures are only meaningful from `cargo run --release -p muster-cli -- bench`"
        )?;
    }
    writeln!(io.out, "{}", run_bench(&opts))?;
    Ok(())
}
