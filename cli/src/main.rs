//! `muster`: Slurm's commands for Muster.

use muster_operator::bench::CountingAllocator;

// Counting costs one relaxed atomic per allocation; it gives `muster bench` its memory figure.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

fn live_bytes() -> usize {
    ALLOC.live()
}

fn main() -> std::process::ExitCode {
    let _ = muster_cli::bench::MEMORY_PROBE.set(live_bytes);
    muster_cli::run()
}
