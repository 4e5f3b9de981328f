//! How fast `sbatch` reads scripts: prints the time to read and check scripts of 1,000 and
//! 4,000 `#SBATCH` lines and of 1 MB (the whole submission path up to the manifest, no
//! cluster). Figures, not assertions (speed is never checked by a timed test):
//!
//! `cargo test -p muster-cli --test sbatch_bench -- --ignored --nocapture`
//!
//! The README ("sbatch reads scripts in linear time") records the figures.

mod common;

use std::time::Instant;

use common::sbatch_args;
use muster_cli::sbatch::manifest::Submitter;
use muster_cli::sbatch::{ScriptInput, prepare};

/// A script of `lines` directive lines cycling through common options (every one valid, and
/// implemented before issue 16 too, so the figures compare), the last values winning.
fn script(lines: usize) -> String {
    const OPTS: &[&str] = &[
        "--job-name=train-{i}",
        "-N 2",
        "--ntasks-per-node=8",
        "--gpus-per-node=8",
        "--time=04:00:00",
        "--partition=gpu",
        "--cpus-per-task=12 --mem=0",
        "-o logs/%x-%j.out",
        "--nice=10 --requeue",
        "--dependency=afterok:{i}",
        "--exclusive",
        "--constraint=h100&ib # a comment",
    ];
    let mut s = String::from("#!/bin/bash\n");
    for i in 0..lines {
        let o = OPTS[i % OPTS.len()].replace("{i}", &i.to_string());
        s.push_str("#SBATCH ");
        s.push_str(&o);
        s.push('\n');
    }
    s.push_str("srun python train.py\n");
    s
}

/// A script of directive lines of about `bytes` bytes.
fn script_of_size(bytes: usize) -> (String, usize) {
    let mut lines = 0;
    let mut s = script(0);
    let one = script(1).len() - s.len();
    while s.len() + 2 * one < bytes {
        lines += 1000;
        s = script(lines);
    }
    (s, lines)
}

fn time_prepare(text: &str) -> f64 {
    let args = sbatch_args(&["--dry-run", "bench.sh"]);
    let env = |_: &str| None;
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let p = prepare(
            &args,
            Some(ScriptInput {
                name: "bench.sh".into(),
                default_job_name: "bench.sh".into(),
                text: text.to_string(),
            }),
            &env,
            &Submitter::default(),
        )
        .expect("the benchmark script is valid");
        assert!(p.job.spec.script.is_some());
        best = best.min(start.elapsed().as_secs_f64());
        // A slow reader is measured once.
        if best > 2.0 {
            break;
        }
    }
    best
}

#[test]
#[ignore = "prints figures; run with --ignored --nocapture"]
fn sbatch_read_figures() {
    println!(
        "sbatch reading (best of 3 under 2 s, {} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    for lines in [1_000, 4_000] {
        let text = script(lines);
        let t = time_prepare(&text);
        println!(
            "  {lines:>6} #SBATCH lines ({:>7} bytes): {:>8.1} ms",
            text.len(),
            t * 1e3
        );
    }
    let (text, lines) = script_of_size(1_000_000);
    let t = time_prepare(&text);
    println!(
        "  1 MB script ({lines} #SBATCH lines, {} bytes): {:>8.1} ms",
        text.len(),
        t * 1e3
    );
}
