//! Rows on where a job runs: Slurm's request shapes, memory, GPU types, constraints, GPU
//! binding, nodes by name, exclusive nodes and switches.

use super::*;

/// Rows: request shapes, memory, GPU types, constraints, GPU binding, nodes by name,
/// exclusive, switches.
pub(super) fn rows() -> Vec<Row> {
    vec![
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
            "-n 2 --gpus-per-node=0: no GPUs, as Slurm takes it",
            &["ntasks", "gpusPerNode"],
            job(
                &["-n", "2", "--gpus-per-node=0"],
                json!({"ntasks": 2, "gpusPerNode": 0}),
            ),
            runs("gpu001", &[("gpu001", &[]), ("gpu001", &[])]),
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
    ]
}
