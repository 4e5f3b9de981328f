//! `muster`: Slurm's commands for Muster.

use muster_operator::bench::CountingAllocator;

// It counts only while `muster bench` measures its memory figure; otherwise an allocation
// costs one relaxed load more.
#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

fn main() -> std::process::ExitCode {
    let _ = muster_cli::bench::ALLOCATOR.set(&ALLOC);
    muster_cli::run()
}
