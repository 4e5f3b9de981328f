//! `muster bench` runs the core benchmark and prints every figure the issue asks for, with the
//! first-fit baseline beside it (a tiny configuration: this checks the wiring and the report,
//! not speed — speed is what the printed figures are for).

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

/// Runs `muster ARGV...` in-process from directory `cwd`: exit code, stdout, stderr.
async fn muster(argv: &[&str], cwd: &Path) -> (ExitCode, String, String) {
    let argv: Vec<OsString> = std::iter::once("muster")
        .chain(argv.iter().copied())
        .map(OsString::from)
        .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut stdin = std::io::empty();
    let env = |_: &str| None;
    let mut io = muster_cli::Io {
        out: &mut out,
        err: &mut err,
        stdin: &mut stdin,
        env: &env,
        cwd: cwd.to_path_buf(),
    };
    let code = muster_cli::run_with(argv, &mut io).await;
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// The test's own directory.
fn here() -> std::path::PathBuf {
    std::env::current_dir().unwrap()
}

#[tokio::test]
async fn bench_prints_cases_scaling_and_quality_against_the_baselines() {
    let (code, out, err) = tiny_bench(&["--scales", "32,64"], &here()).await;
    assert_eq!(code, ExitCode::SUCCESS, "{err}");
    assert!(
        out.contains("baseline = topology-unaware first fit"),
        "{out}"
    );
    assert!(out.contains("full cycle with backfill: 64 nodes"), "{out}");
    assert!(out.contains("cycle time by cluster size"), "{out}");
    assert!(
        out.contains("32 nodes") && out.contains("64 nodes"),
        "{out}"
    );
    assert!(
        out.to_lowercase().contains("leaf"),
        "quality figures missing: {out}"
    );
    assert!(out.contains("idle GPU-hours while a job waited"), "{out}");
    // The overloaded workload is replayed under the Slurm-like baseline too.
    let head = out
        .lines()
        .find(|l| l.starts_with("placement quality"))
        .unwrap_or_else(|| panic!("no quality table: {out}"));
    for col in ["muster", "slurm-like", "first-fit"] {
        assert!(head.contains(col), "{col} missing: {head}");
    }
}

/// `muster bench` on a tiny configuration (give it `--scales`), with `extra` arguments, from
/// directory `cwd`.
async fn tiny_bench(extra: &[&str], cwd: &Path) -> (ExitCode, String, String) {
    let mut argv = vec!["bench", "--nodes", "64", "--jobs", "200"];
    argv.extend_from_slice(TINY);
    argv.extend_from_slice(extra);
    muster(&argv, cwd).await
}

/// A tiny run's cases: one timing each, a small gang, few small jobs, a short workload.
const TINY: &[&str] = &[
    "--runs",
    "1",
    "--gang-nodes",
    "16",
    "--many-jobs",
    "500",
    "--quality-jobs",
    "60",
];

/// One row of the simulated workload's table: its Muster, Slurm-like and first-fit cells.
fn workload_row(out: &str, row: &str) -> Vec<String> {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("  {row}")))
        .unwrap_or_else(|| panic!("no {row} row: {out}"));
    line[2 + row.len()..]
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn bench_replays_the_simulated_workload_under_a_scheduler_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fifo.yaml"),
        "backfill: false\nshortLimitAgeSecs: 0\nmaxReservations: 0\n",
    )
    .unwrap();
    let (code, default, err) = tiny_bench(&["--scales", "32"], dir.path()).await;
    assert_eq!(code, ExitCode::SUCCESS, "{err}");
    assert!(!default.contains("scheduler configuration"), "{default}");
    let (code, tuned, err) = tiny_bench(
        &["--scales", "32", "--scheduler-config", "fifo.yaml"],
        dir.path(),
    )
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{err}");
    // The figures say whose settings they are.
    let named = dir.path().join("fifo.yaml");
    assert!(
        tuned.contains(&format!(
            "Muster's scheduler configuration: {}",
            named.display()
        )),
        "{tuned}"
    );
    let (before, after) = (
        workload_row(&default, "mean wait (s)"),
        workload_row(&tuned, "mean wait (s)"),
    );
    assert_eq!(before[1..], after[1..], "the baselines must not move");
    assert_ne!(before[0], after[0], "the config was not applied:\n{tuned}");

    std::fs::write(dir.path().join("bad.yaml"), "topologyWait: 60\n").unwrap();
    let (code, out, err) = tiny_bench(
        &["--scales", "32", "--scheduler-config", "bad.yaml"],
        dir.path(),
    )
    .await;
    assert_ne!(code, ExitCode::SUCCESS);
    assert!(
        err.contains("bad.yaml") && err.contains("topologyWait"),
        "the error must name the file and the key: {err}"
    );
    assert!(
        out.is_empty(),
        "nothing is measured under a bad file: {out}"
    );
}

#[tokio::test]
async fn bench_quality_prints_every_policy_and_the_targets() {
    let (code, out, err) = quality(&[], &here()).await;
    assert_eq!(code, ExitCode::SUCCESS, "{err}");
    for w in [
        "bundled ITP trace",
        "itp-cluster06.csv --gang gpus",
        "synthetic 150 jobs, load 0.9, seed 1",
    ] {
        assert!(out.contains(w), "{w} missing: {out}");
    }
    let head = out
        .lines()
        .find(|l| l.trim_start().starts_with("Muster"))
        .expect("a table heading");
    for p in ["Slurm-like backfill", "FIFO, no backfill", "First fit"] {
        assert!(head.contains(p), "{head}");
    }
    for r in [
        "wait: mean",
        "wait: p95",
        "makespan",
        "longest wait, gang of 8+ nodes",
        "leaf span / lower bound",
        "leaf span by GPU-hours / bound",
        "multi-node jobs at the bound",
    ] {
        let rows = out
            .lines()
            .filter(|l| l.starts_with(&format!("  {r}  ")))
            .count();
        assert_eq!(rows, 3, "{r}: {out}");
    }
    assert!(out.contains("targets met over 3 workloads"), "{out}");
}

/// Runs `muster bench --quality --quick` on 150-job traces with `extra` arguments, from
/// directory `cwd`.
async fn quality(extra: &[&str], cwd: &Path) -> (ExitCode, String, String) {
    let mut argv = vec!["bench", "--quality", "--quick", "--synthetic-jobs", "150"];
    argv.extend_from_slice(extra);
    muster(&argv, cwd).await
}

/// The "wait: mean" cells of every workload, split into Muster's and the others'.
fn mean_cells(out: &str) -> (Vec<String>, Vec<String>) {
    let rows: Vec<Vec<String>> = out
        .lines()
        .filter(|l| l.starts_with("  wait: mean  "))
        .map(|l| {
            l["  wait: mean".len()..]
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    (
        rows.iter().map(|r| r[0].clone()).collect(),
        rows.iter().flat_map(|r| r[1..].to_vec()).collect(),
    )
}

#[tokio::test]
async fn bench_quality_measures_muster_under_a_scheduler_config() {
    let dir = tempfile::tempdir().unwrap();
    // Strict FIFO without backfill or reservations: Muster's waits change, the baselines' not.
    let fifo = dir.path().join("fifo.yaml");
    std::fs::write(
        &fifo,
        "backfill: false\nshortLimitAgeSecs: 0\nmaxReservations: 0\n",
    )
    .unwrap();
    let (code, default, err) = quality(&[], dir.path()).await;
    assert_eq!(code, ExitCode::SUCCESS, "{err}");
    // A relative path is the caller's directory's.
    let (code, tuned, err) = quality(&["--scheduler-config", "fifo.yaml"], dir.path()).await;
    assert_eq!(code, ExitCode::SUCCESS, "{err}");
    let (m0, others0) = mean_cells(&default);
    let (m1, others1) = mean_cells(&tuned);
    assert_eq!(
        others0, others1,
        "the baselines must not depend on Muster's config"
    );
    assert_ne!(m0, m1, "the config was not applied:\n{default}\n{tuned}");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "maxReservation: 4\n").unwrap();
    let (code, _, err) = quality(&["--scheduler-config", bad.to_str().unwrap()], dir.path()).await;
    assert_ne!(code, ExitCode::SUCCESS);
    assert!(
        err.contains("bad.yaml") && err.contains("maxReservation"),
        "the error must name the file and the key: {err}"
    );
}

#[tokio::test]
async fn bench_quality_replays_the_seeds_and_loads_it_is_given() {
    let (code, out, err) = quality(&["--seeds", "4,5", "--loads", "0.7"], &here()).await;
    assert_eq!(code, ExitCode::SUCCESS, "{err}");
    for w in [
        "synthetic 150 jobs, load 0.7, seed 4",
        "synthetic 150 jobs, load 0.7, seed 5",
    ] {
        assert!(out.contains(w), "{w} missing: {out}");
    }
    assert!(!out.contains("load 0.9"), "{out}");
    assert!(!out.contains("seed 1\n"), "{out}");
    // The two traces and the two synthetic workloads.
    assert!(out.contains("targets met over 4 workloads"), "{out}");

    let (code, _, err) = quality(&["--loads", "0"], &here()).await;
    assert_ne!(code, ExitCode::SUCCESS);
    assert!(
        err.contains("--loads") && err.contains("not a positive number"),
        "the error must name the option and what is allowed: {err}"
    );
}

/// The memory figure comes from the `muster` binary's counting allocator (an in-process run
/// has none and leaves it out), so this runs the binary: the snapshot and queue of 512 nodes
/// and 1,250 jobs hold about 2 MiB (16 MiB at 4,096 / 10,000), counted while they are built
/// and not before or after.
#[test]
fn the_binary_prints_the_snapshot_memory_figure() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_muster"))
        .args([
            "bench", "--nodes", "512", "--jobs", "1250", "--scales", "32",
        ])
        .args(TINY)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("snapshot + queue at 512 nodes / 1250 jobs: "))
        .unwrap_or_else(|| panic!("no memory figure: {stdout}"));
    let mib: f64 = line
        .split(": ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("unreadable: {line}"));
    assert!((1.5..=3.0).contains(&mib), "{line}");
}
