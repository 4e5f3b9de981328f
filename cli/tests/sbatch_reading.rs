//! sbatch reads any script as Slurm does (issue 16, items 4 and 5): other sites' directives
//! are read with one warning each, every problem of a script is reported in one run, `#SLURM`
//! lines are directives, and what Slurm refuses (a NUL byte) or a BatchJob cannot hold (a
//! script over `spec.script`'s limit) is refused with the reason. Driven as a user runs
//! `muster sbatch --dry-run`, and through `prepare` for the details.

mod common;

use std::ffi::OsString;

use common::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use muster_crds::slurm::script::SCRIPT_MAX_CHARS;

/// Run `muster ARGV` in memory from `cli/tests/scripts/edge`: (exit status, stdout, stderr).
fn run(argv: &[&str], stdin: &str) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut input = stdin.as_bytes();
    let lookup = |_: &str| None;
    let mut io = muster_cli::Io {
        out: &mut out,
        err: &mut err,
        stdin: &mut input,
        env: &lookup,
        cwd: script_path("edge", ""),
    };
    let argv: Vec<OsString> = argv.iter().map(Into::into).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let code = rt.block_on(muster_cli::run_with(argv, &mut io));
    let code = if code == std::process::ExitCode::SUCCESS {
        0
    } else {
        1
    };
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn other_sites_directives_are_read_with_one_warning_each() {
    let (code, out, err) = run(&["muster", "sbatch", "--dry-run", "other_sites.sh"], "");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kind: BatchJob"), "{out}");
    let lines: Vec<&str> = err.lines().collect();
    // --account, --signal, --open-mode and --chdir have their Slurm meaning (below): no
    // warning.
    let want = [
        (2, "qos"),
        (3, "mail-type"),
        (3, "mail-user"),
        (6, "licenses"),
    ];
    assert_eq!(lines.len(), want.len(), "{err}");
    for (got, (line, long)) in lines.iter().zip(want) {
        let lead = format!(
            "sbatch: warning: other_sites.sh: line {line}: --{long} has no effect in Muster: "
        );
        assert!(got.starts_with(&lead), "{got:?} is not {lead:?}");
    }
    // What Muster does implement on the same lines is applied.
    let p = ours("edge", "other_sites.sh", &["--dry-run"], &[]).unwrap();
    assert_eq!(p.job.spec.nodes, Some(IntOrString::Int(2)));
    assert_eq!(p.job.spec.requeue, Some(true));
    assert_eq!(p.job.spec.account.as_deref(), Some("myproject"));
    assert_eq!(p.job.spec.chdir.as_deref(), Some("/tmp"));
    assert_eq!(p.job.spec.signal.as_deref(), Some("B:USR1"));
    assert_eq!(
        p.job.spec.open_mode,
        Some(muster_crds::v1alpha1::OpenMode::Append)
    );
    // --comment has its Slurm meaning: kept with the job (scontrol's Comment=, sacct's Comment).
    assert_eq!(
        p.job
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("muster.dev/comment"))
            .map(String::as_str),
        Some("nightly run")
    );
    // --time=-1 is Slurm's "no limit" (sbatch -v shows UNLIMITED): the field gets UNLIMITED,
    // which the CRD accepts, rather than "-1", which it would refuse.
    assert_eq!(
        p.job.spec.time,
        Some(IntOrString::String("UNLIMITED".into()))
    );
}

#[test]
fn an_option_repeated_warns_once() {
    let script = "#!/bin/bash\n#SBATCH --mail-type=END\n#SBATCH --mail-type=FAIL -N 1\necho\n";
    let (code, _, err) = run(&["muster", "sbatch", "--dry-run"], script);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "sbatch: warning: (stdin): line 2: --mail-type has no effect in Muster: Muster sends no \
          mail; watch jobs with squeue or sacct"
        ]
    );
}

#[test]
fn every_problem_of_a_script_in_one_run() {
    let (code, out, err) = run(
        &["muster", "sbatch", "--dry-run", "several_problems.sh"],
        "",
    );
    assert_eq!(code, 1);
    assert!(out.is_empty(), "{out}");
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("sbatch: error: "))
        .collect();
    let want = [
        "several_problems.sh: line 2: unrecognized option '--bogus'",
        "several_problems.sh: line 3: invalid value '1h' for --time: ",
        "several_problems.sh: line 4: invalid value '0' for --nodes: ",
        "several_problems.sh: line 5: invalid generic resource (gres) specification 'gpu:a:b:c'",
        "several_problems.sh: line 6: option '--gpu' is ambiguous; possibilities: '--gpu-bind' ",
    ];
    assert_eq!(errors.len(), want.len(), "{err}");
    for (got, w) in errors.iter().zip(want) {
        assert!(
            got.starts_with(&format!("sbatch: error: {w}")),
            "{got:?} is not {w:?}"
        );
    }
    // Warnings come first, as sbatch prints them while reading.
    assert!(
        err.starts_with(
            "sbatch: warning: several_problems.sh: line 4: --mail-type has no effect in Muster"
        ),
        "{err}"
    );
}

#[test]
fn command_line_and_script_problems_together() {
    let (code, _, err) = run(
        &[
            "muster",
            "sbatch",
            "--dry-run",
            "--mem=1G",
            "several_problems.sh",
        ],
        "",
    );
    assert_eq!(code, 1);
    let errors = err
        .lines()
        .filter(|l| l.starts_with("sbatch: error: "))
        .count();
    assert_eq!(errors, 5, "{err}");
    // A --mem-per-cpu line conflicting with --mem from the command line: both reported.
    let script = "#!/bin/bash\n#SBATCH --mem-per-cpu=1G\n#SBATCH --time=xx\necho\n";
    let (code, _, err) = run(&["muster", "sbatch", "--dry-run", "--mem=4G"], script);
    assert_eq!(code, 1);
    let errors: Vec<&str> = err.lines().collect();
    assert_eq!(errors.len(), 2, "{err}");
    assert!(
        errors[0].starts_with(
            "sbatch: error: (stdin): line 2: --mem and --mem-per-cpu are mutually exclusive"
        ),
        "{err}"
    );
    assert!(
        errors[1].starts_with("sbatch: error: (stdin): line 3: invalid value 'xx' for --time"),
        "{err}"
    );
}

#[test]
fn slurm_prefix_lines_are_directives_with_one_warning() {
    let (code, _, err) = run(
        &["muster", "sbatch", "--dry-run", "-v", "slurm_prefix.sh"],
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.starts_with(
            "sbatch: warning: slurm_prefix.sh: line 2: #SLURM lines are read as #SBATCH \
             directives (as Slurm does); change them to #SBATCH\n"
        ),
        "{err}"
    );
    assert_eq!(err.matches("warning").count(), 1, "{err}");
    assert!(err.contains("sbatch: nodes               : 3"), "{err}");
    assert!(
        err.contains("sbatch: time                : 00:05:00"),
        "{err}"
    );
}

#[test]
fn nul_bytes_and_oversized_scripts_are_refused() {
    let (code, _, err) = run(&["muster", "sbatch", "--dry-run", "nul_byte.sh"], "");
    assert_eq!(code, 1);
    assert!(
        err.starts_with("sbatch: error: nul_byte.sh: line 3: batch script contains a NUL"),
        "{err}"
    );
    let mut big = String::from("#!/bin/bash\n#SBATCH -N 1\n");
    while big.len() <= SCRIPT_MAX_CHARS {
        big.push_str("echo 0123456789012345678901234567890123456789012345678901234567890123\n");
    }
    let (code, _, err) = run(&["muster", "sbatch", "--dry-run"], &big);
    assert_eq!(code, 1);
    assert!(
        err.starts_with(&format!(
            "sbatch: error: (stdin): batch script is {} characters long; a BatchJob's script \
             holds at most 1048576 characters",
            big.len()
        )),
        "{err}"
    );
    // Exactly at the limit is fine.
    big.truncate(SCRIPT_MAX_CHARS);
    let (code, _, err) = run(&["muster", "sbatch", "--dry-run"], &big);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn environment_and_directives_report_together() {
    let p = ours(
        "edge",
        "several_problems.sh",
        &["--dry-run"],
        &[("SBATCH_TIMELIMIT", "soon"), ("SBATCH_QOS", "high")],
    )
    .unwrap_err();
    let text = p.to_string();
    assert_eq!(p.errors.len(), 6, "{text}");
    assert!(
        p.errors[5]
            .to_string()
            .starts_with("environment variable SBATCH_TIMELIMIT: invalid value 'soon' for --time"),
        "{text}"
    );
    assert!(
        p.warnings
            .iter()
            .any(|w| w.starts_with("environment variable SBATCH_QOS: --qos has no effect")),
        "{:?}",
        p.warnings
    );
}

/// `--comment` from a script reaches `scontrol show job` and `sacct -o Comment`.
#[test]
fn comments_are_shown_by_scontrol_and_sacct() {
    let mut job = ours("edge", "other_sites.sh", &["--dry-run"], &[])
        .unwrap()
        .job;
    job.metadata.name = Some("other-sites-abcde".into());
    job.metadata.namespace = Some("team-a".into());
    let rows = muster_cli::rows::job_rows(&[job], common::fixtures::now(), true);
    let shown = muster_cli::scontrol::show_job(&rows[0], &jiff::tz::TimeZone::UTC, false);
    assert!(
        shown.contains("\n   Comment=nightly run\n   StdErr="),
        "{shown}"
    );
    assert_eq!(
        muster_cli::sacct::value("Comment", &rows[0], &jiff::tz::TimeZone::UTC),
        "nightly run"
    );
}
