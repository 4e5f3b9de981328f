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
        head.contains("Slurm-like backfill")
            && head.contains("FIFO, no backfill")
            && head.contains("First fit"),
        "{head}"
    );
    // The urgent partition preempts a batch job under the core's policies only.
    assert_eq!(
        row(&out, "Preemptions (GPU-hours lost)"),
        ["1 (10.7)", "1 (10.7)", "1 (10.7)", "0 (0.0)"]
    );
    for f in [
        "report.html",
        "summary.csv",
        "summary.json",
        "jobs-muster.csv",
        "jobs-slurm.csv",
        "jobs-fifo.csv",
        "jobs-first-fit.csv",
    ] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(
        html.matches("<svg").count(),
        3 + 4,
        "3 charts + one leaf map per policy"
    );
    assert!(!html.contains("<script"), "self-contained, no scripts");
    let csv = std::fs::read_to_string(dir.path().join("summary.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 5, "{csv}");
    assert!(lines[0].starts_with("policy,jobs,started,"), "{}", lines[0]);
    assert!(lines[1].starts_with("muster,6,6,"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(json["policies"].as_array().unwrap().len(), 4);
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
        let jobs: Vec<String> = ["muster", "slurm", "fifo", "first-fit"]
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
    // The scheduler configuration goes through the operator's parser: a misspelt or
    // Slurm-spelt key, or a bad value, is named (not ignored).
    let dir = tempfile::tempdir().unwrap();
    for (text, want) in [
        ("maxReservation: 4\n", "unknown key \"maxReservation\""),
        (
            "backfill: sometimes\n",
            "backfill: sometimes is not allowed (true or false)",
        ),
    ] {
        let f = dir.path().join("sched.yaml");
        std::fs::write(&f, text).unwrap();
        let o = muster(&["--scheduler-config", f.to_str().unwrap()]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains(want), "{text}: {}", stderr(&o));
    }
}

/// A trace where the policies must differ, on the sandbox (4 leaves x 4 nodes x 8 GPUs),
/// limits equal to run times, a cycle after every event:
/// - `a` (1 node, 1000 s) takes gpu001 on leaf 1 under every policy;
/// - `b` (4 nodes) fits one whole leaf: Muster, Slurm-like backfill and FIFO put it on leaf 2;
///   first fit takes the
///   next free nodes in list order, gpu002-gpu005, across leaves 1 and 2;
/// - `c` (all 16 nodes) must wait for `a` (t=1000) under every policy;
/// - `d`, `e` (1 node, 100 s) end long before `a`: Muster and Slurm-like backfill start them
///   at once; FIFO holds them behind `c` until c ends (t=1100); first fit passes over `c` and
///   starts them.
const COMPARE_TRACE: &str = "\
job_id,submission_time,duration,num_gpu
a,0,1000,8
b,1,100,32
c,2,100,128
d,3,100,8
e,4,100,8
";

#[test]
fn compare_shows_backfill_and_topology_awareness() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("compare.csv");
    std::fs::write(&trace, COMPARE_TRACE).unwrap();
    let o = muster(&[
        "--trace",
        trace.to_str().unwrap(),
        "--cluster",
        "sandbox",
        "--time-limit",
        "exact",
        "--interval",
        "0",
        "--compare",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let head: Vec<&str> = out
        .lines()
        .find(|l| l.contains("FIFO, no backfill"))
        .expect("table heading")
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        head,
        [
            "Muster",
            "Slurm-like backfill",
            "FIFO, no backfill",
            "First fit"
        ],
        "{out}"
    );
    assert_eq!(row(&out, "Jobs started / in trace"), ["5 / 5"; 4], "{out}");
    // Waits: c waits 998 s everywhere; FIFO also holds d and e until c ends at 1100.
    // Muster: 998/5 = 199.6 s; FIFO: (998 + 1097 + 1096)/5 = 638.2 s.
    assert_eq!(
        row(&out, "Wait: mean"),
        ["3m20s", "3m20s", "10m38s", "3m20s"],
        "{out}"
    );
    // c, the only gang of 8+ nodes (16), waits 998 s under every policy.
    assert_eq!(
        row(&out, "Wait: longest, gang of 8+ nodes"),
        ["16m38s"; 4],
        "{out}"
    );
    // b on one leaf (lower bound 1), c on all four (lower bound 4) -- except b under
    // first fit, which spans two leaves.
    assert_eq!(
        row(&out, "Multi-node jobs: leaf span / lower bound"),
        ["2.50 / 2.50", "2.50 / 2.50", "2.50 / 2.50", "3.00 / 2.50"],
        "{out}"
    );
    // Weighted by GPUs x run time: b 32 x 100, c 128 x 100, so c's four leaves count four
    // times b's: (3,200 x 1 + 12,800 x 4) / 16,000 = 3.40, first fit's b on two leaves 3.60.
    assert_eq!(
        row(&out, "Multi-node jobs: leaf span by GPU-hours"),
        ["3.40 / 3.40", "3.40 / 3.40", "3.40 / 3.40", "3.60 / 3.40"],
        "{out}"
    );
    assert_eq!(
        row(&out, "Multi-node jobs at the lower bound"),
        ["100.0% of 2", "100.0% of 2", "100.0% of 2", "50.0% of 2"],
        "{out}"
    );
    assert_eq!(row(&out, "Preemptions (GPU-hours lost)"), ["0 (0.0)"; 4]);
}

#[test]
fn the_html_report_has_every_plot_and_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("compare.csv");
    std::fs::write(&trace, COMPARE_TRACE).unwrap();
    let out_dir = dir.path().join("report");
    let o = muster(&[
        "--trace",
        trace.to_str().unwrap(),
        "--cluster",
        "sandbox",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("report.html"), "{}", stdout(&o));
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    for needle in [
        "<title>GPU utilisation</title>",
        "<title>Queue length</title>",
        "<title>Wait time distribution",
        "<title>Leaf allocation: Muster</title>",
        "<h2>Summary</h2>",
        "Wait: mean",
        "compare.csv",
    ] {
        assert!(html.contains(needle), "{needle:?} missing from report.html");
    }
    // Self-contained: nothing fetched from elsewhere.
    for link in ["<script", "<link", "src=\"http", "href=\"http", "@import"] {
        assert!(!html.contains(link), "{link} in report.html");
    }
    // The per-leaf map has one row per leaf of the sandbox.
    for leaf in ["leaf1", "leaf2", "leaf3", "leaf4"] {
        assert!(html.contains(leaf), "{leaf} missing from the leaf map");
    }
    // One policy: one row in each table, and per-job rows with the schedule.
    let csv = std::fs::read_to_string(out_dir.join("summary.csv")).unwrap();
    assert_eq!(csv.lines().count(), 2, "{csv}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(json["policies"][0]["policy"], "muster");
    assert_eq!(json["policies"][0]["jobs"], 5);
    assert_eq!(json["policies"][0]["multiNodeJobs"], 2);
    // c (16 nodes) waited from 2 to a's end at 1000.
    assert_eq!(json["policies"][0]["bigGangWaitMaxSecs"], 998.0);
    let jobs = std::fs::read_to_string(out_dir.join("jobs-muster.csv")).unwrap();
    let lines: Vec<&str> = jobs.lines().collect();
    assert_eq!(lines.len(), 6, "{jobs}");
    assert!(
        lines[0].starts_with("job,submit,start,end,wait,"),
        "{}",
        lines[0]
    );
    // c ran on every node.
    let c = lines.iter().find(|l| l.starts_with("c,")).unwrap();
    assert!(c.contains("gpu[001-016]"), "{c}");
}

#[test]
fn a_cluster_spec_file_is_read() {
    let o = muster(&[
        "--trace",
        "examples/traces/itp-small.csv",
        "--cluster",
        "examples/clusters/mixed.yaml",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("mixed: 32 nodes x 8 GPUs = 224 GPUs, 4 leaf switches of 8 nodes"),
        "{out}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "name: x\nlevels: []\nnodesPerLeaf: many\n").unwrap();
    let o = muster(&["--cluster", bad.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nodesPerLeaf"), "{}", stderr(&o));
}

#[test]
fn sacct_and_native_bad_rows_name_their_line_unless_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let sacct = dir.path().join("bad-sacct.txt");
    std::fs::write(
        &sacct,
        "JobID|Submit|Start|End|NNodes|AllocTRES|Timelimit|Partition\n\
         1|2024-05-01T08:00:00|2024-05-01T08:00:00|2024-05-01T09:00:00|1|gres/gpu=8|01:00:00|gpu\n\
         2|yesterday|2024-05-01T08:00:00|2024-05-01T09:00:00|1|gres/gpu=8|01:00:00|gpu\n\
         3|2024-05-01T08:00:00|2024-05-01T08:00:00|2024-05-01T09:00:00|1|gres/gpu=8|soon|gpu\n",
    )
    .unwrap();
    let p = sacct.to_str().unwrap();
    let o = muster(&["--trace", p, "--cluster", "sandbox"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("bad-sacct.txt:3: Submit"), "{err}");
    let o = muster(&["--trace", p, "--cluster", "sandbox", "--skip-bad-rows"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("left out   2 bad row(s)"), "{out}");
    assert!(out.contains("bad-sacct.txt:4: Timelimit"), "{out}");
    assert_eq!(row(&out, "Jobs started / in trace"), ["1 / 1"]);

    let native = dir.path().join("bad-native.yaml");
    std::fs::write(
        &native,
        "jobs:\n  - submit: 0\n    runtime: 60\n    spec: {gpus: 2}\n  - submit: 5\n    runtime: soon\n    spec: {gpus: 2}\n",
    )
    .unwrap();
    let p = native.to_str().unwrap();
    let o = muster(&["--trace", p, "--cluster", "sandbox"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("bad-native.yaml:5: jobs[1]: runtime"), "{err}");
    let o = muster(&["--trace", p, "--cluster", "sandbox", "--skip-bad-rows"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("left out   1 bad row(s)"), "{out}");
    assert_eq!(row(&out, "Jobs started / in trace"), ["1 / 1"]);
}

#[test]
fn gang_and_time_limit_rules_change_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    // 12 GPUs: two whole nodes by default, 12 packed GPUs with --gang gpus.
    std::fs::write(
        &trace,
        "job_id,submission_time,duration,num_gpu\nx,0,3600,12\n",
    )
    .unwrap();
    let p = trace.to_str().unwrap();
    let run = |extra: &[&str]| {
        let out_dir = tempfile::tempdir().unwrap();
        let mut args = vec!["--trace", p, "--cluster", "sandbox", "--out"];
        args.push(out_dir.path().to_str().unwrap());
        args.extend_from_slice(extra);
        let o = muster(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let jobs = std::fs::read_to_string(out_dir.path().join("jobs-muster.csv")).unwrap();
        (stdout(&o), jobs.lines().nth(1).unwrap().to_string())
    };
    let (out, job) = run(&[]);
    assert!(
        out.contains("up to 8 GPUs on one node, more on whole nodes"),
        "{out}"
    );
    // job,submit,start,end,wait,runtime,gpus,nodes,...
    let cols: Vec<&str> = job.split(',').collect();
    assert_eq!((cols[6], cols[7]), ("16", "2"), "{job}");
    assert_eq!(cols[3], "3600", "auto limit (2h) lets it complete: {job}");
    let (_, job) = run(&["--gang", "gpus"]);
    let cols: Vec<&str> = job.split(',').collect();
    assert_eq!((cols[6], cols[7]), ("12", "2"), "{job}");
    // A fixed limit shorter than the run time kills it (TIMEOUT).
    let (out, job) = run(&["--time-limit", "30:00"]);
    assert!(job.contains(",TIMEOUT,"), "{job}");
    assert!(job.split(',').nth(3) == Some("1800"), "{job}");
    assert_eq!(
        row(&out, "Completed / timed out / preempted"),
        ["0 / 1 / 0"]
    );
}

#[test]
fn help_documents_the_defaults() {
    let o = muster(&["--help"]);
    assert!(o.status.success());
    let help = stdout(&o);
    for needle in [
        "bundled ITP trace",
        "[default: superpod]",
        "[default: auto]",
        "[default: nodes]",
        "[default: 1.5]",
        "[default: 10]",
        "[default: 1000]",
        "[default: muster]",
        "--skip-bad-rows",
        "--seed",
        "--compare",
        "--out",
        "bounded slowdown",
        "fragmentation",
        "leaf span",
    ] {
        assert!(
            help.contains(needle),
            "{needle:?} missing from --help:\n{help}"
        );
    }
}

#[test]
fn the_header_describes_the_trace_actually_replayed() {
    // A native trace carries its own shapes and limits: no gang or limit rule was applied.
    let o = muster(&[
        "--trace",
        "examples/traces/native-small.yaml",
        "--cluster",
        "sandbox",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("gangs      as each job's spec asks; time limits as recorded;"),
        "{out}"
    );
    assert!(!out.contains("run time x"), "{out}");
    // An ITP trace records GPU counts and no limits: the rules are named.
    let o = muster(&["--trace", "examples/traces/itp-small.csv", "--gang", "gpus"]);
    let out = stdout(&o);
    assert!(
        out.contains(
            "gangs      --gpus=N packed by the scheduler; time limits auto (run time x 1.5, bucketed);"
        ),
        "{out}"
    );
}

#[test]
fn until_reports_the_figures_and_placements_at_that_time() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("compare.csv");
    std::fs::write(&trace, COMPARE_TRACE).unwrap();
    let o = muster(&[
        "--trace",
        trace.to_str().unwrap(),
        "--cluster",
        "sandbox",
        "--time-limit",
        "exact",
        "--interval",
        "0",
        "--until",
        "50s",
        "--policy",
        "first-fit",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("stopped    at 50s after the first submit"),
        "{out}"
    );
    // At 50 s under first fit: a, b, d, e run; c (all 16 nodes) waits.
    assert!(
        out.contains("First fit at 50s: 4 running on 56 of 128 GPUs, 1 waiting"),
        "{out}"
    );
    let line = |job: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(&format!("{job} ")))
            .unwrap_or_else(|| panic!("no line for {job}: {out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(line("a"), ["a", "0s", "8", "1", "1", "gpu001"]);
    assert_eq!(line("b"), ["b", "1s", "32", "4", "2", "gpu[002-005]"]);
    assert_eq!(row(&out, "Jobs started / in trace"), ["4 / 5"]);
    assert_eq!(
        row(&out, "Completed / timed out / preempted"),
        ["0 / 0 / 0"]
    );
    // b, still running, counts (to the stop) in the weighted leaf span too.
    assert_eq!(
        row(&out, "Multi-node jobs: leaf span by GPU-hours"),
        ["2.00 / 1.00"]
    );
    let jobs = std::fs::read_to_string(dir.path().join("jobs-first-fit.csv")).unwrap();
    assert!(
        jobs.lines()
            .any(|l| l.starts_with("b,") && l.contains(",RUNNING,")),
        "{jobs}"
    );
    // A time that is not one is refused with what is allowed.
    let o = muster(&["--until", "soon"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("give seconds"), "{}", stderr(&o));
}
