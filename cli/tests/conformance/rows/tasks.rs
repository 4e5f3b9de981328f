//! Rows on what the tasks run: the command and its environment, other sites' script
//! directives and output files, pyxis's container options.

use super::*;

/// Rows: what the tasks run, other sites' directives, output files, pyxis's options.
pub(super) fn rows() -> Vec<Row> {
    vec![
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
    ]
}
