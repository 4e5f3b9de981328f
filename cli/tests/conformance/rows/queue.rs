//! Rows on when a job runs and how it ends: time limits, arrays, dependencies, holds,
//! priorities, partitions, requeue and cancel.

use super::*;

/// Rows: time, arrays, dependencies, holds, priorities, partitions, requeue, cancel.
pub(super) fn rows() -> Vec<Row> {
    vec![
        // ---- time ----
        row(
            "time beyond the partition's maximum",
            &["time"],
            job(
                &["-n", "1", "-t", "2-00:00:00"],
                json!({"ntasks": 1, "time": "2-00:00:00"}),
            ),
            Expect::Waits {
                reason: "PartitionTimeLimit",
                words: "exceeds partition gpu's maximum",
            },
        ),
        row(
            "time: the job ends at its limit",
            &["time"],
            job(&["-n", "1", "-t", "1"], json!({"ntasks": 1, "time": 1})),
            Expect::Ends {
                shift: 61,
                state: "TIMEOUT",
                sim: "TIMEOUT",
            },
        ),
        // ---- arrays, dependencies, holds, priorities ----
        row(
            "array with a throttle",
            &["array"],
            job(
                &["--array=0-3%2", "-n", "1", "--gres=gpu:1"],
                json!({"array": "0-3%2", "ntasks": 1, "gres": "gpu:1"}),
            ),
            Expect::Array {
                total: 4,
                running: 2,
            },
        ),
        Row {
            background: vec![Job {
                runtime: Some(2),
                ..pinned("first", "dana", "gpu001", 1, 8)
            }],
            ..row(
                "dependency: afterok on a job by name",
                &["dependency"],
                job(
                    &["--dependency=afterok:first", "-n", "1", "--gres=gpu:8"],
                    json!({"dependency": "afterok:first", "ntasks": 1, "gres": "gpu:8"}),
                ),
                Expect::RunsAfterDependency { nodes: "gpu001" },
            )
        },
        row(
            "hold",
            &["hold"],
            job(&["-H", "-n", "1"], json!({"hold": true, "ntasks": 1})),
            Expect::Held { nodes: "gpu001" },
        ),
        Row {
            background: vec![
                Job {
                    runtime: Some(3),
                    spec: json!({"nodes": 4, "exclusive": true, "time": 1}),
                    ..pinned("filler", "bob", "", 4, 0)
                },
                Job {
                    queued: true,
                    spec: json!({"nodes": 4, "exclusive": true}),
                    ..pinned("rival", "bob", "", 4, 0)
                },
            ],
            ..row(
                "nice: a lower value goes first",
                &["nice", "nodes", "exclusive"],
                job(
                    &["-N", "4", "--exclusive", "--nice=-100"],
                    json!({"nodes": 4, "exclusive": true, "nice": -100}),
                ),
                Expect::RunsFirstWhenFreed {
                    nodes: "gpu[001-004]",
                    rival: "rival",
                },
            )
        },
        Row {
            background: vec![
                Job {
                    runtime: Some(3),
                    spec: json!({"nodes": 4, "exclusive": true, "time": 1}),
                    ..pinned("filler", "bob", "", 4, 0)
                },
                Job {
                    queued: true,
                    spec: json!({"nodes": 4, "exclusive": true}),
                    ..pinned("rival", "bob", "", 4, 0)
                },
            ],
            ..row(
                "priority: a fixed priority goes first",
                &["priority", "nodes", "exclusive"],
                job(
                    &["-N", "4", "--exclusive", "--priority=4000000"],
                    json!({"nodes": 4, "exclusive": true, "priority": 4_000_000}),
                ),
                Expect::RunsFirstWhenFreed {
                    nodes: "gpu[001-004]",
                    rival: "rival",
                },
            )
        },
        // ---- partitions, requeue, cancel ----
        row(
            "partition",
            &["partition"],
            job(
                &["-p", "urgent", "-n", "1"],
                json!({"partition": "urgent", "ntasks": 1}),
            ),
            runs_on("gpu001"),
        ),
        Row {
            later: vec![Job {
                spec: json!({"partition": "urgent", "nodes": 4, "exclusive": true}),
                ..pinned("urgent", "bob", "", 4, 0)
            }],
            ..row(
                "requeue: false ends a preempted job",
                &["requeue"],
                job(
                    &["--no-requeue", "-n", "1"],
                    json!({"requeue": false, "ntasks": 1}),
                ),
                Expect::Preempted { requeued: false },
            )
        },
        Row {
            later: vec![Job {
                spec: json!({"partition": "urgent", "nodes": 4, "exclusive": true}),
                ..pinned("urgent", "bob", "", 4, 0)
            }],
            ..row(
                "requeue: true requeues a preempted job",
                &["requeue"],
                job(
                    &["--requeue", "-n", "1"],
                    json!({"requeue": true, "ntasks": 1}),
                ),
                Expect::Preempted { requeued: true },
            )
        },
        // A new job's count is where it starts: only a raise after it has run requeues it
        // (`scontrol requeue`, tested end to end in e2e_operator), so one applied with a
        // count runs once, as any job.
        row(
            "requeueRequests on a new job: it runs once",
            &["requeueRequests"],
            spec_only(json!({"requeueRequests": 2, "ntasks": 1, "gres": "gpu:1"})),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![],
            },
        ),
        row(
            "cancel: never runs",
            &["cancel"],
            spec_only(json!({"cancel": true, "ntasks": 1})),
            Expect::Ends {
                shift: 0,
                state: "CANCELLED",
                sim: "REJECTED",
            },
        ),
    ]
}
