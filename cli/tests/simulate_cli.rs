//! `muster simulate` end to end, through the binary: every trace format, bad rows, the
//! compare table, output files, determinism.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn muster(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .arg("simulate")
        .args(args)
        // Relative paths in the arguments are from the repository root.
        .current_dir(repo())
        .output()
        .expect("run muster")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The value cells of a report row.
fn row<'a>(report: &'a str, label: &str) -> Vec<&'a str> {
    let line = report
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no row {label:?} in\n{report}"));
    line[label.len()..]
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

#[test]
fn every_format_replays() {
    for (trace, jobs) in [
        ("examples/traces/itp-small.csv", "8 / 8"),
        ("examples/traces/sacct-small.txt", "7 / 7"),
        ("examples/traces/native-small.yaml", "6 / 6"),
        ("examples/traces/native-small.json", "3 / 3"),
    ] {
        let o = muster(&["--trace", trace, "--cluster", "sandbox"]);
        assert!(o.status.success(), "{trace}: {}", stderr(&o));
        let out = stdout(&o);
        assert_eq!(
            row(&out, "Jobs started / in trace"),
            [jobs],
            "{trace}\n{out}"
        );
    }
}

#[test]
fn sacct_rows_left_out_are_counted() {
    let o = muster(&[
        "--trace",
        "examples/traces/sacct-small.txt",
        "--cluster",
        "sandbox",
    ]);
    let out = stdout(&o);
    assert!(
        out.contains(
            "left out   0 bad row(s), 3 job step(s), 1 job(s) that never ran, 1 without GPUs"
        ),
        "{out}"
    );
}

#[test]
fn a_bad_row_is_an_error_naming_its_line_unless_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(
        &bad,
        "job_id,submission_time,duration,num_gpu\na,0,60,1\nb,0,sixty,1\nc,10,60,two\nd,20,60,2\n",
    )
    .unwrap();
    let p = bad.to_str().unwrap();
    let o = muster(&["--trace", p]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("bad.csv:3: duration \"sixty\" is not a number of seconds >= 0"),
        "{err}"
    );
    let o = muster(&["--trace", p, "--skip-bad-rows"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("left out   2 bad row(s)"), "{out}");
    assert!(out.contains("bad.csv:4: num_gpu \"two\""), "{out}");
    assert_eq!(row(&out, "Jobs started / in trace"), ["2 / 2"]);
}

#[test]
fn compare_runs_every_policy_and_writes_the_report_files() {
    let dir = tempfile::tempdir().unwrap();
    let o = muster(&[
        "--trace",
        "examples/traces/native-small.yaml",
        "--cluster",
        "sandbox",
        "--compare",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let head = out
        .lines()
        .find(|l| l.contains("Muster"))
        .expect("table heading");
    assert!(
        head.contains("FIFO, no backfill") && head.contains("First fit"),
        "{head}"
    );
    // The urgent partition preempts a batch job under the core's policies only.
    assert_eq!(
        row(&out, "Preemptions (GPU-hours lost)"),
        ["1 (10.7)", "1 (10.7)", "0 (0.0)"]
    );
    for f in [
        "report.html",
        "summary.csv",
        "summary.json",
        "jobs-muster.csv",
        "jobs-fifo.csv",
        "jobs-first-fit.csv",
    ] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(
        html.matches("<svg").count(),
        3 + 3,
        "3 charts + one leaf map per policy"
    );
    assert!(!html.contains("<script"), "self-contained, no scripts");
    let csv = std::fs::read_to_string(dir.path().join("summary.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4, "{csv}");
    assert!(lines[0].starts_with("policy,jobs,started,"), "{}", lines[0]);
    assert!(lines[1].starts_with("muster,6,6,"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(json["policies"].as_array().unwrap().len(), 3);
    assert_eq!(json["policies"][0]["preemptions"], 1);
    let jobs = std::fs::read_to_string(dir.path().join("jobs-muster.csv")).unwrap();
    let hotfix = jobs.lines().find(|l| l.starts_with("hotfix,")).unwrap();
    assert!(hotfix.contains(",COMPLETED,"), "{hotfix}");
    // The evicted job was requeued once and still completed.
    assert!(
        jobs.lines()
            .any(|l| l.starts_with("pretrain-") && l.contains(",COMPLETED,1,")),
        "{jobs}"
    );
    // finetune waits for pretrain-a to complete (afterok), whenever that is.
    let field = |name: &str, col: usize| -> i64 {
        let l = jobs
            .lines()
            .find(|l| l.starts_with(&format!("{name},")))
            .unwrap();
        l.split(',').nth(col).unwrap().parse().unwrap()
    };
    let (start, end) = (2, 3);
    assert!(
        field("finetune", start) >= field("pretrain-a", end),
        "{jobs}"
    );
}

/// Summary CSV without the timing columns (wall and scheduler seconds vary).
fn stable_summary(dir: &Path) -> String {
    let csv = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
    csv.lines()
        .map(|l| l.rsplitn(3, ',').nth(2).unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn same_seed_same_report() {
    let run = |seed: &str| {
        let dir = tempfile::tempdir().unwrap();
        let o = muster(&[
            "--synthetic",
            "400",
            "--seed",
            seed,
            "--cluster",
            "sandbox",
            "--compare",
            "--out",
            dir.path().to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let jobs: Vec<String> = ["muster", "fifo", "first-fit"]
            .iter()
            .map(|p| std::fs::read_to_string(dir.path().join(format!("jobs-{p}.csv"))).unwrap())
            .collect();
        (stable_summary(dir.path()), jobs)
    };
    let a = run("7");
    let b = run("7");
    assert_eq!(a, b);
    let c = run("8");
    assert_ne!(a.1, c.1, "another seed, another trace");
}

#[test]
fn no_arguments_replays_the_bundled_trace_on_the_superpod() {
    // From a directory without the examples: the trace is built in.
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_muster"))
        .arg("simulate")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("2,396 jobs from itp-cluster06.csv (bundled ITP trace)"),
        "{out}"
    );
    assert!(
        out.contains("superpod: 128 nodes x 8 GPUs = 1,024 GPUs"),
        "{out}"
    );
    assert_eq!(row(&out, "Jobs started / in trace"), ["2,396 / 2,396"]);
    assert_eq!(row(&out, "Rejected / never started"), ["0 / 0"]);
}

#[test]
fn bad_options_and_files_are_explained() {
    let o = muster(&["--cluster", "nope"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("built-in clusters are 'superpod' and 'sandbox'"));
    let o = muster(&["--time-limit", "soon"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("'auto'"), "{}", stderr(&o));
    let o = muster(&["--trace", "no/such/file.csv"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("no/such/file.csv: cannot read"),
        "{}",
        stderr(&o)
    );
}
