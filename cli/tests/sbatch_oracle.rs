//! Our reading of batch scripts against real Slurm's (`sbatch -vv` prints its parse under
//! "defined options" before it fails to reach a controller).
//!
//! Both sides are compared as Slurm prints them: our `sbatch -v` shows the same strings
//! (`00:10:00`, `gres:gpu:4`, `16G`, absolute paths). `EXPECTED` records the oracle's answers
//! (paths relative to the script's directory), so the assertions on our parse run
//! everywhere; where sbatch is installed, the recording itself is checked against it.

mod common;

use std::collections::BTreeMap;

use common::*;

/// What Slurm makes of a script.
enum Expect {
    /// Accepted, with these defined options.
    Accepted(&'static [(&'static str, &'static str)]),
    /// Refused; our error names this line (`None`: not a line's fault) and says this.
    Refused(Option<usize>, &'static str),
}
use Expect::*;

const EXPECTED: &[(&str, &str, Expect)] = &[
    (
        "howto",
        "gpus_per_task.sh",
        Accepted(&[
            ("error", "gpus_per_task_test.err"),
            ("gpus-per-task", "1"),
            ("job-name", "gpus_per_task_test"),
            ("nodes", "2"),
            ("ntasks-per-node", "2"),
            ("output", "gpus_per_task_test.out"),
            ("time", "00:10:00"),
        ]),
    ),
    (
        "howto",
        "gres_mpirun.sh",
        Accepted(&[
            ("error", "mpirun_test.err"),
            ("gres", "gres:gpu:4"),
            ("job-name", "mpirun_test"),
            ("nodes", "2"),
            ("ntasks-per-node", "2"),
            ("output", "mpirun_test.out"),
            ("time", "00:10:00"),
        ]),
    ),
    (
        "howto",
        "gres_srun.sh",
        Accepted(&[
            ("error", "gres_test.err"),
            ("gres", "gres:gpu:4"),
            ("job-name", "gres_test"),
            ("nodes", "2"),
            ("output", "gres_test.out"),
            ("time", "00:10:00"),
        ]),
    ),
    (
        "howto",
        "multi_node_mpi.sh",
        Accepted(&[
            ("gres", "gres:gpu:4"),
            ("job-name", "multi_gpu_task"),
            ("nodes", "2"),
            ("ntasks-per-node", "2"),
            ("partition", "gpu_partition"),
        ]),
    ),
    (
        "howto",
        "ray_on_cluster.sh",
        Accepted(&[
            ("exclusive", "exclusive"),
            ("gpus-per-node", "8"),
            ("nodes", "4"),
            ("ntasks-per-node", "1"),
        ]),
    ),
    (
        "howto",
        "single_gpu_task.sh",
        Accepted(&[
            ("gres", "gres:gpu:1"),
            ("job-name", "single_gpu_task"),
            ("nodes", "1"),
            ("ntasks-per-node", "1"),
            ("partition", "gpu_partition"),
        ]),
    ),
    (
        "howto",
        "torchrun_multinode.sh",
        Accepted(&[
            ("cpus-per-task", "96"),
            ("exclusive", "exclusive"),
            ("gpus-per-node", "8"),
            ("job-name", "train"),
            ("nodes", "8"),
            ("ntasks-per-node", "1"),
            ("partition", "blackwell"),
        ]),
    ),
    (
        "howto",
        "typed_gpu_constraint.sh",
        Refused(Some(3), "gpu:tesla:v100:1"),
    ),
    (
        "edge",
        "alias_and_units.sh",
        Accepted(&[
            ("gpus-per-node", "2"),
            ("mem", "16G"),
            ("ntasks-per-node", "3"),
        ]),
    ),
    (
        "edge",
        "ambiguous_prefix.sh",
        Refused(Some(2), "is ambiguous; possibilities: '--gpu-bind'"),
    ),
    (
        "edge",
        "attached_values_and_repeats.sh",
        Accepted(&[
            ("exclusive", "exclusive"),
            ("job-name", "xy"),
            ("nodes", "2"),
            ("time", "00:02:00"),
        ]),
    ),
    (
        "edge",
        "comments_and_quotes.sh",
        Accepted(&[
            ("cpus-per-task", "4"),
            ("error", "x#y.err"),
            ("job-name", "run"),
            ("nodes", "3"),
            ("output", "a b.out"),
            ("partition", "gpu"),
            ("time", "00:05:00"),
        ]),
    ),
    (
        "edge",
        "bad_time_overridden.sh",
        Refused(Some(2), "invalid value '1h' for --time"),
    ),
    ("edge", "crlf.sh", Refused(Some(1), "DOS line breaks")),
    ("edge", "double_dash.sh", Refused(Some(2), "'-N'")),
    (
        "edge",
        "empty_token_ends_line.sh",
        Accepted(&[("job-name", "a"), ("ntasks", "2")]),
    ),
    (
        "edge",
        "fewer_tasks_than_nodes.sh",
        Accepted(&[("nodes", "2"), ("ntasks", "2")]),
    ),
    (
        "edge",
        "flags_and_last_wins.sh",
        Accepted(&[
            ("exclusive", "exclusive"),
            ("no-requeue", "no-requeue"),
            ("nodes", "1"),
        ]),
    ),
    (
        "edge",
        "glued_word.sh",
        Refused(Some(2), "invalid directive 'foo'"),
    ),
    (
        "edge",
        "gres_default_count.sh",
        Accepted(&[
            ("array", "1,3,5-7"),
            ("gres", "gres:gpu"),
            ("mem-per-cpu", "2G"),
            ("time", "00:03:00"),
        ]),
    ),
    (
        "edge",
        "many_options.sh",
        Accepted(&[
            ("array", "0-15:4%2"),
            ("constraint", "[a*2&b*1]"),
            ("dependency", "afterok:1:2,singleton"),
            ("gpu-bind", "map_gpu:0,1"),
            ("gpus-per-task", "a100:1"),
            ("hold", "set"),
            ("mem-per-gpu", "10G"),
            ("nice", "100"),
            ("ntasks", "4"),
            ("priority", "10"),
            ("requeue", "requeue"),
            ("switches", "1"),
            ("time", "UNLIMITED"),
        ]),
    ),
    (
        "edge",
        "missing_value_at_end.sh",
        Refused(Some(2), "option '--job-name' requires an argument"),
    ),
    (
        "edge",
        "more_options.sh",
        Accepted(&[
            ("cpus-per-task", "8"),
            ("dependency", "afterany:7?afterok:8"),
            ("exclusive", "exclusive"),
            ("gpus", "4"),
            ("mem", "64000"),
            ("nice", "-5"),
            ("nodes", "1-3"),
            ("time", "1-00:00:00"),
        ]),
    ),
    ("edge", "no_shebang.sh", Refused(None, "must start with #!")),
    (
        "edge",
        "nodelist_and_exclude.sh",
        Accepted(&[
            ("exclude", "gpu005"),
            ("exclusive", "user"),
            ("nodelist", "gpu[001-002]"),
            ("nodes", "2-4"),
        ]),
    ),
    (
        "edge",
        "nodelist_raises_nodes.sh",
        Accepted(&[("nodelist", "gpu[001-003]"), ("nodes", "3-5")]),
    ),
    (
        "edge",
        "nodelist_file.sh",
        Accepted(&[("exclude", "gpu[001-002,004]"), ("nodelist", "gpu007")]),
    ),
    (
        "edge",
        "nodelist_fewer_tasks.sh",
        Accepted(&[("nodelist", "gpu001"), ("ntasks", "1")]),
    ),
    (
        "edge",
        "nodelist_over_max.sh",
        Refused(Some(3), "invalid number of nodes (-N 3-2)"),
    ),
    (
        "edge",
        "exclusive_topo.sh",
        Refused(
            Some(2),
            "invalid value 'topo' for --exclusive: --exclusive=topo is not supported",
        ),
    ),
    (
        "edge",
        "optional_value_needs_equals.sh",
        Refused(Some(2), "invalid directive 'user'"),
    ),
    (
        "edge",
        "quotes_inside_quotes.sh",
        Accepted(&[("error", "e#1.err"), ("job-name", "a\"b")]),
    ),
    ("edge", "stolen_value.sh", Accepted(&[("job-name", "-N")])),
    (
        "edge",
        "stolen_value_then_stray.sh",
        Refused(Some(3), "invalid directive '2'"),
    ),
    (
        "edge",
        "typed_gres_and_switches.sh",
        Accepted(&[
            ("gpu-bind", "closest"),
            ("gres", "gres:gpu:a100:2"),
            ("nodes", "2"),
            ("switches", "2@01:00:00"),
            ("time", "UNLIMITED"),
        ]),
    ),
    (
        "edge",
        "unknown_option.sh",
        Refused(Some(3), "unrecognized option '--bogus"),
    ),
    (
        "edge",
        "other_sites.sh",
        Accepted(&[
            ("account", "myproject"),
            ("chdir", "/tmp"),
            ("comment", "nightly run"),
            ("nodes", "2"),
            ("open-mode", "a"),
            ("requeue", "requeue"),
            ("signal", "B:USR1"),
            ("time", "UNLIMITED"),
        ]),
    ),
    (
        "edge",
        "slurm_prefix.sh",
        Accepted(&[("job-name", "x"), ("nodes", "3"), ("time", "00:05:00")]),
    ),
    (
        "edge",
        "several_problems.sh",
        Refused(Some(2), "unrecognized option '--bogus'"),
    ),
    ("edge", "nul_byte.sh", Refused(Some(3), "NUL character")),
    (
        "edge",
        "unmatched_quote.sh",
        Refused(Some(2), "unmatched `\"`"),
    ),
];

fn expected_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every script in the test directories has an expectation.
#[test]
fn every_script_is_covered() {
    for sub in ["howto", "edge"] {
        for name in scripts(sub) {
            assert!(
                EXPECTED.iter().any(|(s, n, _)| *s == sub && *n == name),
                "{sub}/{name} has no expectation"
            );
        }
    }
}

/// Our parse matches the recorded oracle answers, and refusals name the line.
#[test]
fn our_parse_matches_slurms() {
    for (sub, name, expect) in EXPECTED {
        let dir = script_path(sub, "");
        let got = ours(sub, name, &[], &[]);
        match (expect, got) {
            (Accepted(pairs), Ok(p)) => {
                assert_eq!(ours_shown(&p, &dir), expected_map(pairs), "{sub}/{name}");
            }
            (Refused(line, text), Err(e)) => {
                let msg = e.to_string();
                assert!(msg.contains(text), "{sub}/{name}: {msg:?} lacks {text:?}");
                match line {
                    Some(l) => assert!(
                        msg.starts_with(&format!("{name}: line {l}:")),
                        "{sub}/{name}: {msg:?} does not name line {l}"
                    ),
                    None => assert!(msg.starts_with(name), "{sub}/{name}: {msg:?}"),
                }
            }
            (Accepted(_), Err(e)) => panic!("{sub}/{name}: refused: {e}"),
            (Refused(..), Ok(p)) => panic!("{sub}/{name}: accepted: {:?}", p.merged.options),
        }
    }
}

/// The recorded answers are what real sbatch says.
#[test]
fn recorded_answers_match_live_sbatch() {
    if !oracle_available("recorded_answers_match_live_sbatch") {
        return;
    }
    for (sub, name, expect) in EXPECTED {
        let dir = script_path(sub, "");
        let o = oracle(sub, name, &[], &[]);
        match expect {
            Accepted(pairs) => {
                assert!(o.accepted, "{sub}/{name}: sbatch refused it:\n{}", o.output);
                assert_eq!(oracle_shown(&o, &dir), expected_map(pairs), "{sub}/{name}");
            }
            Refused(..) => assert!(
                !o.accepted,
                "{sub}/{name}: sbatch accepted it:\n{}",
                o.output
            ),
        }
    }
}

/// The command line may replace a directive value sbatch checks only at the end (--gres),
/// not one it checks as it reads it (--time).
#[test]
fn overriding_refused_directives_matches_slurm() {
    let fixed = ours(
        "howto",
        "typed_gpu_constraint.sh",
        &["--gres=gpu:v100:1"],
        &[],
    );
    assert!(fixed.is_ok(), "{fixed:?}");
    let still_bad = ours("edge", "bad_time_overridden.sh", &["--time=5"], &[]);
    assert!(still_bad.is_err());
    if oracle_available("overriding_refused_directives_matches_slurm") {
        assert!(
            oracle(
                "howto",
                "typed_gpu_constraint.sh",
                &["--gres=gpu:v100:1"],
                &[]
            )
            .accepted
        );
        assert!(!oracle("edge", "bad_time_overridden.sh", &["--time=5"], &[]).accepted);
    }
}

/// Command line over SBATCH_* over #SBATCH, as real sbatch orders them.
#[test]
fn precedence_matches_slurm() {
    /// Command line, environment, expected (normalised) options.
    type Case<'a> = (
        &'a [&'a str],
        &'a [(&'a str, &'a str)],
        &'a [(&'a str, &'a str)],
    );
    let cases: &[Case] = &[
        (
            &[],
            &[("SBATCH_PARTITION", "envp"), ("SBATCH_TIMELIMIT", "20")],
            &[("partition", "envp"), ("time", "00:20:00")],
        ),
        (
            &["-p", "clip"],
            &[("SBATCH_PARTITION", "envp"), ("SBATCH_TIMELIMIT", "20")],
            &[("partition", "clip"), ("time", "00:20:00")],
        ),
        (
            &["--time=7", "--job-name=cli"],
            &[("SBATCH_JOB_NAME", "envname")],
            &[
                ("partition", "gpu"),
                ("time", "00:07:00"),
                ("job-name", "cli"),
            ],
        ),
        (
            &["-N", "5"],
            &[("SBATCH_EXCLUSIVE", "")],
            &[
                ("partition", "gpu"),
                ("time", "00:05:00"),
                ("exclusive", "exclusive"),
            ],
        ),
        (
            &["--test-only", "-W"],
            &[],
            &[("partition", "gpu"), ("test-only", "set"), ("wait", "set")],
        ),
        (
            &[],
            &[("SBATCH_WAIT", "1")],
            &[("partition", "gpu"), ("wait", "set")],
        ),
        (
            &["--export=ALL,NCCL_DEBUG=INFO"],
            &[],
            &[("partition", "gpu"), ("export", "ALL,NCCL_DEBUG=INFO")],
        ),
        (
            &[],
            &[("SBATCH_EXPORT", "NONE,A=1")],
            &[("partition", "gpu"), ("export", "NONE,A=1")],
        ),
    ];
    let live = oracle_available("precedence_matches_slurm");
    let dir = script_path("edge", "");
    for (argv, env, want) in cases {
        let p = ours("edge", "comments_and_quotes.sh", argv, env).expect("accepted");
        let got = ours_shown(&p, &dir);
        for (k, v) in *want {
            assert_eq!(
                got.get(*k).map(String::as_str),
                Some(*v),
                "{argv:?} {env:?}: {k}"
            );
        }
        if live {
            let o = oracle("edge", "comments_and_quotes.sh", argv, env);
            assert!(o.accepted, "{}", o.output);
            let theirs = oracle_shown(&o, &dir);
            assert_eq!(got, theirs, "{argv:?} {env:?}");
        }
    }
}
