//! The conformance table: one row per BatchJob spec field and per request shape, each with
//! the outcome a user can observe. Node names are the suite's cluster's ([`super::SPEC`]):
//! leaf 1 = gpu001, gpu002 (bigmem); leaf 2 = gpu003, gpu004 (A100). The rows' jobs run as
//! user `dana` unless they say otherwise.

use serde_json::{Value, json};

/// A job of a row.
#[derive(Clone, Debug)]
pub struct Job {
    /// BatchJob name (and trace id).
    pub name: &'static str,
    /// Submitting user.
    pub user: &'static str,
    /// The same request as `sbatch` options, when sbatch can express it (then `sbatch
    /// --dry-run` must give `spec`, and `sbatch --test-only` is asked).
    pub sbatch: Option<Vec<&'static str>>,
    /// The BatchJob spec.
    pub spec: Value,
    /// Seconds its tasks run (`None`: until the row ends).
    pub runtime: Option<u64>,
    /// Submitted without waiting for it to start (a job that queues behind others).
    pub queued: bool,
}

/// What the row's job does, seen the same way through every path.
#[derive(Clone, Debug)]
pub enum Expect {
    /// Starts at once on `nodes`; `ranks` (node, GPUs) when given; `env` (rank, variable,
    /// value) on the operator's pods (`(command)` is the task's command line).
    Runs {
        /// Hostlist.
        nodes: &'static str,
        /// By rank.
        ranks: Option<Vec<(&'static str, Vec<u32>)>>,
        /// Pod environment.
        env: Vec<(u32, &'static str, &'static str)>,
    },
    /// Does not start: Slurm's reason and words of its message (the three messages must be
    /// the same text where each way gives one).
    Waits {
        /// Reason code.
        reason: &'static str,
        /// In the message.
        words: &'static str,
    },
    /// Waits (reason `Resources`) until `secs` have passed, then starts on `nodes`.
    RunsAfterWait {
        /// Seconds.
        secs: i64,
        /// Hostlist.
        nodes: &'static str,
    },
    /// Waits behind the background jobs, then starts on `nodes` before `rival` (a queued
    /// background job) does.
    RunsFirstWhenFreed {
        /// Hostlist.
        nodes: &'static str,
        /// The job it must beat.
        rival: &'static str,
    },
    /// Held (reason `JobHeldUser`, never started by the simulator); `sbatch --test-only`, as
    /// Slurm's, answers when it would start on `nodes` once released.
    Held {
        /// Hostlist.
        nodes: &'static str,
    },
    /// Waits (reason `Dependency`) until the background job it depends on completes, then
    /// starts on `nodes`; `sbatch --test-only`, as Slurm's, gives an estimate regardless of
    /// the dependency.
    RunsAfterDependency {
        /// Hostlist.
        nodes: &'static str,
    },
    /// Ends in `state` (after the operator's clock moves `shift` seconds); `sim` is the
    /// simulator's word for it.
    Ends {
        /// Seconds.
        shift: i64,
        /// Job state.
        state: &'static str,
        /// Simulator outcome.
        sim: &'static str,
    },
    /// Preempted by the row's `later` job: requeued (pending again) or ended PREEMPTED.
    Preempted {
        /// Requeued.
        requeued: bool,
    },
    /// An array: this many elements run at once, the others wait (JobArrayTaskLimit).
    Array {
        /// Elements.
        total: u32,
        /// At once.
        running: u32,
    },
    /// Can never run where it is sent: `sbatch`, `--test-only` and the admission webhook refuse
    /// it ("Requested node configuration is not available", [`validate::submission`]); a job
    /// already admitted (an operator without webhooks, the simulator) waits `BadConstraints`
    /// — all with the same text, which contains `words`.
    ///
    /// [`validate::submission`]: muster_operator::controller::validate::submission
    Infeasible {
        /// In the message.
        words: &'static str,
    },
    /// Refused as written, by the API server, the operator, the trace reader and sbatch:
    /// every message names `field` and says `words`.
    Refused {
        /// Field name (in the messages).
        field: &'static str,
        /// In the messages.
        words: &'static str,
    },
}

/// One row.
#[derive(Clone, Debug)]
pub struct Row {
    /// Name.
    pub name: &'static str,
    /// The spec fields the row exercises.
    pub covers: &'static [&'static str],
    /// The job under test.
    pub job: Job,
    /// Jobs running (or queued) before it is submitted.
    pub background: Vec<Job>,
    /// Jobs submitted once it runs (preemption).
    pub later: Vec<Job>,
    /// The outcome.
    pub expect: Expect,
}

fn job(sbatch: &[&'static str], spec: Value) -> Job {
    Job {
        name: "row",
        user: "dana",
        sbatch: Some(sbatch.to_vec()),
        spec,
        runtime: None,
        queued: false,
    }
}

fn spec_only(spec: Value) -> Job {
    Job {
        sbatch: None,
        ..job(&[], spec)
    }
}

/// A background job pinned to `nodes` holding `gpus` GPUs on each, as `user`.
fn pinned(name: &'static str, user: &'static str, nodes: &'static str, n: u32, gpus: u32) -> Job {
    Job {
        name,
        user,
        sbatch: None,
        spec: json!({"nodes": n, "gpusPerNode": gpus, "nodelist": nodes}),
        runtime: None,
        queued: false,
    }
}

fn runs(nodes: &'static str, ranks: &[(&'static str, &[u32])]) -> Expect {
    Expect::Runs {
        nodes,
        ranks: Some(ranks.iter().map(|(n, g)| (*n, g.to_vec())).collect()),
        env: Vec::new(),
    }
}

fn runs_on(nodes: &'static str) -> Expect {
    Expect::Runs {
        nodes,
        ranks: None,
        env: Vec::new(),
    }
}

fn row(name: &'static str, covers: &'static [&'static str], job: Job, expect: Expect) -> Row {
    Row {
        name,
        covers,
        job,
        background: Vec::new(),
        later: Vec::new(),
        expect,
    }
}

/// Every row.
pub fn rows() -> Vec<Row> {
    let mut v = vec![
        // ---- Slurm's request shapes (ARCHITECTURE.md "Request shapes") ----
        row(
            "-n 1 --gres=gpu:1: one node, one GPU",
            &["ntasks", "gres"],
            job(
                &["-n", "1", "--gres=gpu:1"],
                json!({"ntasks": 1, "gres": "gpu:1"}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: Some(vec![("gpu001", vec![0])]),
                env: vec![
                    (0, "SLURM_GPUS_ON_NODE", "1"),
                    (0, "CUDA_VISIBLE_DEVICES", "0"),
                    (0, "SLURM_GPUS_PER_NODE", "1"),
                ],
            },
        ),
        row(
            "-n 4 --gres=gpu:4: one node, a GPU per task",
            &["ntasks", "gres"],
            job(
                &["-n", "4", "--gres=gpu:4"],
                json!({"ntasks": 4, "gres": "gpu:4"}),
            ),
            runs(
                "gpu001",
                &[
                    ("gpu001", &[0]),
                    ("gpu001", &[1]),
                    ("gpu001", &[2]),
                    ("gpu001", &[3]),
                ],
            ),
        ),
        row(
            "-N 1-2 -n 4 --gres=gpu:2: the fewest nodes, tasks share the node's GPUs",
            &["nodes", "ntasks", "gres"],
            job(
                &["-N", "1-2", "-n", "4", "--gres=gpu:2"],
                json!({"nodes": "1-2", "ntasks": 4, "gres": "gpu:2"}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: Some(vec![
                    ("gpu001", vec![0, 1]),
                    ("gpu001", vec![0, 1]),
                    ("gpu001", vec![0, 1]),
                    ("gpu001", vec![0, 1]),
                ]),
                env: vec![
                    (0, "SLURM_GPUS_ON_NODE", "2"),
                    (0, "CUDA_VISIBLE_DEVICES", "0,1"),
                    (0, "SLURM_TASKS_PER_NODE", "4"),
                ],
            },
        ),
        row(
            "-n 2 --gpus-per-node=2",
            &["ntasks", "gpusPerNode"],
            job(
                &["-n", "2", "--gpus-per-node=2"],
                json!({"ntasks": 2, "gpusPerNode": 2}),
            ),
            runs("gpu001", &[("gpu001", &[0]), ("gpu001", &[1])]),
        ),
        row(
            "-n 3 --ntasks-per-node=2 --gres=gpu:2: at most two tasks a node",
            &["ntasks", "ntasksPerNode", "gres"],
            job(
                &["-n", "3", "--ntasks-per-node=2", "--gres=gpu:2"],
                json!({"ntasks": 3, "ntasksPerNode": 2, "gres": "gpu:2"}),
            ),
            Expect::Runs {
                nodes: "gpu[001-002]",
                ranks: Some(vec![
                    ("gpu001", vec![0]),
                    ("gpu001", vec![1]),
                    ("gpu002", vec![0, 1]),
                ]),
                env: vec![
                    (0, "SLURM_TASKS_PER_NODE", "2,1"),
                    (1, "SLURM_NODEID", "1"),
                    (1, "LOCAL_WORLD_SIZE", "1"),
                ],
            },
        ),
        row(
            "--gpus=3 -n 2: three GPUs for two tasks",
            &["gpus", "ntasks"],
            job(&["--gpus=3", "-n", "2"], json!({"gpus": 3, "ntasks": 2})),
            runs("gpu001", &[("gpu001", &[0, 1]), ("gpu001", &[2])]),
        ),
        row(
            "--gpus=2 -n 4: four tasks share two GPUs",
            &["gpus", "ntasks"],
            job(&["--gpus=2", "-n", "4"], json!({"gpus": 2, "ntasks": 4})),
            runs(
                "gpu001",
                &[
                    ("gpu001", &[0, 1]),
                    ("gpu001", &[0, 1]),
                    ("gpu001", &[0, 1]),
                    ("gpu001", &[0, 1]),
                ],
            ),
        ),
        row(
            "-n 3 --gpus-per-task=2 without -N",
            &["ntasks", "gpusPerTask"],
            job(
                &["-n", "3", "--gpus-per-task=2"],
                json!({"ntasks": 3, "gpusPerTask": 2}),
            ),
            // Each pair shares an NVLink group and NUMA node.
            runs(
                "gpu001",
                &[
                    ("gpu001", &[4, 5]),
                    ("gpu001", &[0, 1]),
                    ("gpu001", &[2, 3]),
                ],
            ),
        ),
        row(
            "-N 2 -n 4 --gpus-per-task=1: two tasks a node",
            &["nodes", "ntasks", "gpusPerTask"],
            job(
                &["-N", "2", "-n", "4", "--gpus-per-task=1"],
                json!({"nodes": 2, "ntasks": 4, "gpusPerTask": 1}),
            ),
            Expect::Runs {
                nodes: "gpu[001-002]",
                ranks: Some(vec![
                    ("gpu001", vec![0]),
                    ("gpu001", vec![1]),
                    ("gpu002", vec![0]),
                    ("gpu002", vec![1]),
                ]),
                env: vec![
                    (0, "SLURM_TASKS_PER_NODE", "2(x2)"),
                    (1, "LOCAL_WORLD_SIZE", "2"),
                ],
            },
        ),
        row(
            "-n 2 -c 40 --gres=gpu:1: CPUs put the tasks on two nodes",
            &["ntasks", "cpusPerTask", "gres"],
            job(
                &["-n", "2", "-c", "40", "--gres=gpu:1"],
                json!({"ntasks": 2, "cpusPerTask": 40, "gres": "gpu:1"}),
            ),
            Expect::Runs {
                nodes: "gpu[001-002]",
                ranks: Some(vec![("gpu001", vec![0]), ("gpu002", vec![0])]),
                env: vec![(1, "SLURM_CPUS_PER_TASK", "40")],
            },
        ),
        // ---- memory ----
        row(
            "--mem fits a node",
            &["mem"],
            job(
                &["-N", "1", "--mem=400G", "--gres=gpu:1"],
                json!({"nodes": 1, "mem": "400G", "gres": "gpu:1"}),
            ),
            runs_on("gpu001"),
        ),
        row(
            "--mem larger than any node is refused",
            &["mem"],
            job(
                &["-N", "1", "--mem=600G", "--gres=gpu:1"],
                json!({"nodes": 1, "mem": "600G", "gres": "gpu:1"}),
            ),
            Expect::Infeasible {
                words: "memory: 600G per node requested",
            },
        ),
        row(
            "--mem-per-cpu",
            &["memPerCpu", "ntasks", "gres"],
            job(
                &["-n", "4", "--mem-per-cpu=100G", "--gres=gpu:1"],
                json!({"ntasks": 4, "memPerCpu": "100G", "gres": "gpu:1"}),
            ),
            runs_on("gpu001"),
        ),
        row(
            "--mem-per-gpu: memory spreads the GPUs",
            &["memPerGpu", "gpus"],
            job(
                &["--gpus=4", "--mem-per-gpu=200G"],
                json!({"gpus": 4, "memPerGpu": "200G"}),
            ),
            runs_on("gpu[001-002]"),
        ),
        // ---- GPU types ----
        row(
            "typed gres goes to the A100 node",
            &["gres"],
            job(
                &["-n", "1", "--gres=gpu:a100:1"],
                json!({"ntasks": 1, "gres": "gpu:a100:1"}),
            ),
            runs("gpu004", &[("gpu004", &[0])]),
        ),
        row(
            "gpuType",
            &["gpuType", "gpus"],
            spec_only(json!({"gpuType": "a100", "gpus": 2})),
            runs_on("gpu004"),
        ),
        row(
            "a GPU type no node has is refused",
            &["gpuType", "gpus"],
            spec_only(json!({"gpuType": "v100", "gpus": 1})),
            Expect::Infeasible {
                words: "GPU type v100: no node of partition gpu has one",
            },
        ),
        // ---- constraints ----
        row(
            "constraint: a feature label",
            &["constraint"],
            job(
                &["-n", "1", "-C", "bigmem", "--gres=gpu:1"],
                json!({"ntasks": 1, "constraint": "bigmem", "gres": "gpu:1"}),
            ),
            runs_on("gpu002"),
        ),
        row(
            "constraint: a host name",
            &["constraint"],
            job(
                &["-n", "1", "-C", "gpu003"],
                json!({"ntasks": 1, "constraint": "gpu003"}),
            ),
            runs_on("gpu003"),
        ),
        row(
            "constraint: a|b",
            &["constraint"],
            job(
                &["-N", "2", "-C", "a100|bigmem", "--gpus-per-node=8"],
                json!({"nodes": 2, "constraint": "a100|bigmem", "gpusPerNode": 8}),
            ),
            runs_on("gpu[002,004]"),
        ),
        row(
            "constraint: [a|b], every node on one alternative",
            &["constraint"],
            job(
                &["-N", "2", "-C", "[leaf2|leaf1]", "--gpus-per-node=8"],
                json!({"nodes": 2, "constraint": "[leaf2|leaf1]", "gpusPerNode": 8}),
            ),
            runs_on("gpu[003-004]"),
        ),
        row(
            "constraint: a*1&b*1 counts",
            &["constraint"],
            job(
                &["-N", "2", "-C", "[bigmem*1&a100*1]", "--gpus-per-node=1"],
                json!({"nodes": 2, "constraint": "[bigmem*1&a100*1]", "gpusPerNode": 1}),
            ),
            runs_on("gpu[002,004]"),
        ),
        row(
            "constraint: a feature no node has is refused and says why",
            &["constraint"],
            job(
                &["-n", "1", "-C", "nosuchfeature"],
                json!({"ntasks": 1, "constraint": "nosuchfeature"}),
            ),
            Expect::Infeasible {
                words: "no node of partition gpu matches constraint nosuchfeature",
            },
        ),
        // ---- GPU binding ----
        row(
            "gpuBind closest",
            &["gpuBind", "nodes", "ntasksPerNode", "gpusPerTask"],
            job(
                &[
                    "-N",
                    "1",
                    "--ntasks-per-node=2",
                    "--gpus-per-task=2",
                    "--gpu-bind=closest",
                ],
                json!({"nodes": 1, "ntasksPerNode": 2, "gpusPerTask": 2, "gpuBind": "closest"}),
            ),
            runs("gpu001", &[("gpu001", &[0, 1]), ("gpu001", &[2, 3])]),
        ),
        row(
            "gpuBind map_gpu:7,6 gives GPUs 7 and 6",
            &["gpuBind"],
            job(
                &[
                    "-N",
                    "1",
                    "--ntasks-per-node=2",
                    "--gpus-per-task=1",
                    "--gpu-bind=map_gpu:7,6",
                ],
                json!({"nodes": 1, "ntasksPerNode": 2, "gpusPerTask": 1, "gpuBind": "map_gpu:7,6"}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: Some(vec![("gpu001", vec![7]), ("gpu001", vec![6])]),
                env: vec![
                    (0, "SLURM_JOB_GPUS", "6,7"),
                    (0, "CUDA_VISIBLE_DEVICES", "0,1"),
                    (0, "SLURM_GPU_BIND", "map_gpu:7,6"),
                ],
            },
        ),
        row(
            "gpuBind map_gpu naming a GPU the nodes lack never starts",
            &["gpuBind"],
            job(
                &[
                    "-N",
                    "1",
                    "--ntasks-per-node=1",
                    "--gpus-per-task=1",
                    "--gpu-bind=map_gpu:9",
                ],
                json!({"nodes": 1, "ntasksPerNode": 1, "gpusPerTask": 1, "gpuBind": "map_gpu:9"}),
            ),
            Expect::Waits {
                reason: "BadConstraints",
                words: "with gpu-bind map_gpu:9",
            },
        ),
        row(
            "gpuBind mask_gpu",
            &["gpuBind"],
            job(
                &[
                    "-N",
                    "1",
                    "--ntasks-per-node=2",
                    "--gpus-per-task=1",
                    "--gpu-bind=mask_gpu:0x10,0x20",
                ],
                json!({"nodes": 1, "ntasksPerNode": 2, "gpusPerTask": 1, "gpuBind": "mask_gpu:0x10,0x20"}),
            ),
            runs("gpu001", &[("gpu001", &[4]), ("gpu001", &[5])]),
        ),
        row(
            "gpuBind per_task",
            &["gpuBind"],
            job(
                &["-n", "2", "--gpus-per-task=2", "--gpu-bind=per_task:2"],
                json!({"ntasks": 2, "gpusPerTask": 2, "gpuBind": "per_task:2"}),
            ),
            runs("gpu001", &[("gpu001", &[0, 1]), ("gpu001", &[2, 3])]),
        ),
        row(
            "gpuBind single:1",
            &["gpuBind"],
            job(
                &["-n", "2", "--gpus-per-task=1", "--gpu-bind=single:1"],
                json!({"ntasks": 2, "gpusPerTask": 1, "gpuBind": "single:1"}),
            ),
            runs("gpu001", &[("gpu001", &[0]), ("gpu001", &[1])]),
        ),
        row(
            "gpuBind single:2 would share a GPU",
            &["gpuBind"],
            job(
                &["-n", "2", "--gpus-per-task=1", "--gpu-bind=single:2"],
                json!({"ntasks": 2, "gpusPerTask": 1, "gpuBind": "single:2"}),
            ),
            Expect::Waits {
                reason: "BadConstraints",
                words: "single:2 puts 2 tasks on one GPU",
            },
        ),
        row(
            "gpuBind verbose,none",
            &["gpuBind"],
            job(
                &["-n", "1", "--gpus-per-task=1", "--gpu-bind=verbose,none"],
                json!({"ntasks": 1, "gpusPerTask": 1, "gpuBind": "verbose,none"}),
            ),
            runs("gpu001", &[("gpu001", &[0])]),
        ),
        // ---- nodes by name ----
        row(
            "nodelist: the named node",
            &["nodelist", "ntasks", "gres"],
            job(
                &["-w", "gpu003", "-n", "1", "--gres=gpu:1"],
                json!({"nodelist": "gpu003", "ntasks": 1, "gres": "gpu:1"}),
            ),
            runs("gpu003", &[("gpu003", &[0])]),
        ),
        row(
            "nodelist: at least the named nodes",
            &["nodelist"],
            job(&["-w", "gpu[002,004]"], json!({"nodelist": "gpu[002,004]"})),
            Expect::Runs {
                nodes: "gpu[002,004]",
                ranks: None,
                env: vec![(0, "SLURM_NNODES", "2")],
            },
        ),
        row(
            "nodelist: a node not in the partition is refused",
            &["nodelist"],
            job(
                &["-w", "gpu009", "-n", "1"],
                json!({"nodelist": "gpu009", "ntasks": 1}),
            ),
            Expect::Infeasible {
                words: "nodelist: node gpu009 is not a node of partition gpu",
            },
        ),
        row(
            "exclude",
            &["exclude", "ntasks"],
            job(
                &["-x", "gpu[001-002]", "-n", "1"],
                json!({"exclude": "gpu[001-002]", "ntasks": 1}),
            ),
            runs_on("gpu003"),
        ),
        // ---- exclusive ----
        Row {
            background: vec![pinned("bob", "bob", "gpu001", 1, 1)],
            ..row(
                "exclusive: an idle node",
                &["exclusive"],
                job(
                    &["-n", "1", "--exclusive", "--gres=gpu:1"],
                    json!({"ntasks": 1, "exclusive": true, "gres": "gpu:1"}),
                ),
                runs_on("gpu002"),
            )
        },
        Row {
            background: vec![
                pinned("bob", "bob", "gpu001", 1, 1),
                pinned("mine", "dana", "gpu002", 1, 1),
            ],
            ..row(
                "exclusive=user: beside the user's own job, not another user's",
                &["exclusive"],
                job(
                    &["-n", "1", "--exclusive=user", "--gres=gpu:1"],
                    json!({"ntasks": 1, "exclusive": "user", "gres": "gpu:1"}),
                ),
                runs("gpu002", &[("gpu002", &[1])]),
            )
        },
        Row {
            background: vec![Job {
                spec: json!({"nodes": 1, "gpusPerNode": 1, "nodelist": "gpu001",
                             "exclusive": "user"}),
                ..pinned("dana", "dana", "gpu001", 1, 1)
            }],
            ..Row {
                job: Job {
                    user: "bob",
                    ..job(
                        &["-n", "1", "--gres=gpu:1"],
                        json!({"ntasks": 1, "gres": "gpu:1"}),
                    )
                },
                ..row(
                    "exclusive=user: another user's job stays off the node",
                    &["exclusive"],
                    job(&[], json!({})),
                    runs_on("gpu002"),
                )
            }
        },
        row(
            "exclusive: a value other than true, false or user is refused",
            &["exclusive"],
            job(
                &["-n", "1", "--exclusive=users"],
                json!({"ntasks": 1, "exclusive": "users"}),
            ),
            Expect::Refused {
                field: "exclusive",
                words: "user",
            },
        ),
        // ---- switches ----
        Row {
            background: vec![
                pinned("leaf1", "bob", "gpu001", 1, 8),
                pinned("leaf2", "bob", "gpu003", 1, 8),
            ],
            ..row(
                "switches: waits for one leaf, then starts spread",
                &["switches", "nodes", "gpusPerNode"],
                job(
                    &["-N", "2", "--gpus-per-node=8", "--switches=1@1:00"],
                    json!({"nodes": 2, "gpusPerNode": 8, "switches": "1@1:00"}),
                ),
                Expect::RunsAfterWait {
                    secs: 60,
                    nodes: "gpu[002,004]",
                },
            )
        },
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
        // ---- what the tasks run ----
        row(
            "jobName",
            &["jobName"],
            job(
                &["-J", "renamed", "-n", "1"],
                json!({"jobName": "renamed", "ntasks": 1}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![(0, "SLURM_JOB_NAME", "renamed")],
            },
        ),
        row(
            "script",
            &["script"],
            spec_only(json!({"ntasks": 1, "script": "echo from-the-script"})),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![(
                    0,
                    "(command)",
                    "/muster/bin/muster-step node --batch -- /bin/bash -c echo from-the-script bash",
                )],
            },
        ),
        row(
            "template",
            &["template"],
            spec_only(json!({"ntasks": 1, "template": {"spec": {"containers": [
                {"name": "task", "command": ["true"],
                 "env": [{"name": "FROM_TEMPLATE", "value": "yes"}]}]}}})),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![(0, "FROM_TEMPLATE", "yes")],
            },
        ),
        // ---- directives of other sites' scripts, output files ----
        row(
            "account",
            &["account"],
            job(
                &["-A", "proj-a", "-n", "1"],
                json!({"account": "proj-a", "ntasks": 1}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![(0, "SLURM_JOB_ACCOUNT", "proj-a")],
            },
        ),
        row(
            "begin: not started before its time",
            &["begin"],
            // sbatch resolves --begin in the submitter's time zone; the spec is absolute.
            spec_only(json!({"begin": "2099-01-01T00:00:00Z", "ntasks": 1})),
            Expect::Waits {
                reason: "BeginTime",
                words: "--begin time has not come",
            },
        ),
        row(
            "chdir: the batch host is told the script's directory",
            &["chdir"],
            job(
                &["--chdir=/shared/run", "-n", "1"],
                json!({"chdir": "/shared/run", "ntasks": 1}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![(0, "MUSTER_STEP_CHDIR", "/shared/run")],
            },
        ),
        row(
            "signal: the warning reaches the node pods",
            &["signal"],
            job(
                &["--signal=B:USR1@90", "-n", "1"],
                json!({"signal": "B:USR1@90", "ntasks": 1}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![(0, "MUSTER_STEP_SIGNAL", "B:USR1@90")],
            },
        ),
        row(
            "output, error and openMode reach the batch host",
            &["output", "error", "openMode"],
            job(
                &[
                    "-o",
                    "/shared/%x-%j.out",
                    "-e",
                    "/shared/err.txt",
                    "--open-mode=append",
                    "-n",
                    "1",
                ],
                json!({"output": "/shared/%x-%j.out", "error": "/shared/err.txt",
                       "openMode": "append", "ntasks": 1}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![
                    (0, "MUSTER_STEP_STDERR", "/shared/err.txt"),
                    (0, "MUSTER_STEP_OPEN_MODE", "append"),
                ],
            },
        ),
        // ---- pyxis's container options ----
        row(
            "containerImage",
            &["containerImage"],
            job(
                &[
                    "--container-image=nvcr.io#nvidia/pytorch:24.01-py3",
                    "-n",
                    "1",
                ],
                json!({"containerImage": "nvcr.io#nvidia/pytorch:24.01-py3", "ntasks": 1}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![(0, "(image)", "nvcr.io/nvidia/pytorch:24.01-py3")],
            },
        ),
        row(
            "containerWorkdir",
            &["containerWorkdir"],
            job(
                &["--container-workdir=/workspace", "-n", "1"],
                json!({"containerWorkdir": "/workspace", "ntasks": 1}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![
                    (0, "(workingDir)", "/workspace"),
                    (0, "SLURM_SUBMIT_DIR", "/workspace"),
                ],
            },
        ),
        row(
            "containerMounts",
            &["containerMounts"],
            job(
                &["--container-mounts=tmpfs:/fast", "-n", "1"],
                json!({"containerMounts": "tmpfs:/fast", "ntasks": 1}),
            ),
            Expect::Runs {
                nodes: "gpu001",
                ranks: None,
                env: vec![(0, "(mount /fast)", "muster-tmpfs-0")],
            },
        ),
        // ---- refusals ----
        row(
            "nodelist and exclude naming one node",
            &["nodelist", "exclude"],
            job(
                &["-w", "gpu001", "-x", "gpu001", "-n", "1"],
                json!({"nodelist": "gpu001", "exclude": "gpu001", "ntasks": 1}),
            ),
            Expect::Refused {
                field: "exclude",
                words: "both nodelist and exclude",
            },
        ),
    ];
    // Rows without sbatch options (template, gpuType, cancel, script) are asked of the
    // test-only estimate directly.
    for r in &mut v {
        if r.job.name.is_empty() {
            r.job.name = "row";
        }
    }
    v
}
