//! How a task process starts: through `muster-step exec-task PROGRAM ARGV0 ARGS...`, which
//! sets `SLURM_TASK_PID` to its own pid and then execs the program, so the variable names
//! the task's own process, as slurmstepd's does (checked with Slurm 22.05: `echo $$
//! $SLURM_TASK_PID` prints the same number twice, in the batch script and in every `srun`
//! task). The pid cannot be known before the fork, and the child of a fork may not change
//! the environment `execve` is given; re-executing ourselves costs one more `execve` per
//! task.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;

/// The subcommand (internal: the node daemon runs it, users do not).
pub const EXEC_TASK: &str = "exec-task";

/// The command that starts `program` as a task, with `argv0` as its `argv[0]`; the caller
/// adds the arguments, environment, directory and stdio. Without a path to our own
/// executable (never expected on Linux) the program is started directly, without
/// `SLURM_TASK_PID`.
pub fn command(program: &OsStr, argv0: &OsStr) -> tokio::process::Command {
    match std::env::current_exe() {
        Ok(me) => {
            let mut c = tokio::process::Command::new(me);
            c.arg(EXEC_TASK).arg(program).arg(argv0);
            c
        }
        Err(_) => {
            let mut c = tokio::process::Command::new(program);
            c.arg0(argv0);
            c
        }
    }
}

/// `muster-step exec-task PROGRAM ARGV0 ARGS...`: execs PROGRAM (looked up in `PATH` when
/// it has no `/`) with `SLURM_TASK_PID` set to this process's pid, which the program keeps.
/// Returns only if the exec failed: 127 if there is no such program, 126 if it cannot be run
/// (a shell's codes; the daemon looks a task's program up itself first and reports a missing
/// one as Slurm does).
pub fn exec(args: &[OsString]) -> i32 {
    let [program, argv0, rest @ ..] = args else {
        eprintln!("muster-step: usage: muster-step {EXEC_TASK} PROGRAM ARGV0 [ARGS...]");
        return 2;
    };
    let err = std::process::Command::new(program)
        .arg0(argv0)
        .args(rest)
        .env("SLURM_TASK_PID", std::process::id().to_string())
        .exec();
    eprintln!("execve(): {}: {err}", argv0.to_string_lossy());
    if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_that_cannot_start_is_a_failed_task() {
        let args: Vec<OsString> = ["/nonexistent/x", "x"].iter().map(OsString::from).collect();
        assert_eq!(exec(&args), 127);
        let dir = std::env::temp_dir();
        let args: Vec<OsString> = vec![dir.clone().into_os_string(), "d".into()];
        assert_eq!(exec(&args), 126, "a directory cannot be run");
        assert_eq!(exec(&[]), 2);
    }
}
