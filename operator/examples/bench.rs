//! Prints the scheduling-core benchmark figures (`muster bench` runs the same code):
//! `cargo run --release -p muster-operator --example bench [-- --quick]`.

use muster_operator::bench::{BenchOptions, CountingAllocator, run};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator::new();

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let mut opts = BenchOptions {
        memory: Some(&ALLOC),
        ..BenchOptions::default()
    };
    if quick {
        opts.runs = 1;
        opts.scales = vec![512, 4096];
        opts.many_jobs = 20_000;
        opts.many_nodes = 4096;
        opts.quality_jobs = 400;
    }
    println!("{}", run(&opts));
}
