//! Criterion benchmarks of the scheduling core on the `muster bench` scenarios:
//! `cargo bench -p muster-operator`. The same scenarios print a one-shot report with
//! `cargo run --release -p muster-operator --example bench`.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use muster_operator::bench::{NOW, cycle_scenario, gang_scenario, many_scenario};
use muster_operator::core::baseline::first_fit;
use muster_operator::core::{Config, schedule};
use std::hint::black_box;

fn cycle(c: &mut Criterion) {
    let cfg = Config::default();
    let mut g = c.benchmark_group("cycle");
    g.sample_size(10);
    for nodes in [512u32, 4096] {
        let jobs = 10_000 * nodes as usize / 4096;
        let s = cycle_scenario(nodes, jobs, 42);
        g.bench_function(format!("muster/{nodes}n-{jobs}j"), |b| {
            b.iter(|| schedule(black_box(&s), NOW, &cfg))
        });
        g.bench_function(format!("first-fit/{nodes}n-{jobs}j"), |b| {
            b.iter(|| first_fit(black_box(&s), NOW))
        });
    }
    g.finish();
}

fn gang(c: &mut Criterion) {
    let cfg = Config::default();
    let s = gang_scenario(4096, 512);
    let mut g = c.benchmark_group("gang");
    g.sample_size(20);
    g.bench_function("muster/512-node gang on 4096 half-fragmented nodes", |b| {
        b.iter(|| schedule(black_box(&s), NOW, &cfg))
    });
    g.finish();
}

fn many(c: &mut Criterion) {
    let cfg = Config::default();
    let s = many_scenario(16_384, 100_000);
    let mut g = c.benchmark_group("many");
    g.sample_size(10);
    g.bench_function("muster/100k one-GPU jobs on 16384 nodes", |b| {
        b.iter_batched(
            || (),
            |_| schedule(black_box(&s), NOW, &cfg),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, cycle, gang, many);
criterion_main!(benches);
