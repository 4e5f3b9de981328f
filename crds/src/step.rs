//! The contract between the operator, which builds a job's node pods, and the in-pod step
//! runtime `muster-step` (`srun`, `scontrol show hostnames`, the node daemon), spelled once
//! for both (and for the e2e suites that build such pods by hand). The full contract — what
//! each node pod holds and every variable it sets — is documented with the runtime
//! (`muster_cli::step`).

/// Where the init container installs `muster-step`, `srun` and `scontrol` (an `emptyDir`
/// mounted at the same path in the main container).
pub const BIN_DIR: &str = "/muster/bin";
/// The step binary's path in the operator image (what the init container runs).
pub const IMAGE_BINARY: &str = "/usr/local/bin/muster-step";
/// The daemon's path inside a node pod.
pub const POD_BINARY: &str = "/muster/bin/muster-step";
/// `srun` inside a node pod.
pub const POD_SRUN: &str = "/muster/bin/srun";
/// Where the credential Secret is mounted.
pub const KEY_DIR: &str = "/var/run/muster/step";
/// The credential file (`KEY_DIR/SECRET_KEY`): the default of `MUSTER_STEP_KEY_FILE`.
pub const KEY_FILE: &str = "/var/run/muster/step/key";
/// The credential Secret's data key (32 random bytes, hex).
pub const SECRET_KEY: &str = "key";
/// The daemons' TCP port when `MUSTER_STEP_PORT` is unset.
pub const DEFAULT_PORT: u16 = 6829;
/// The init container's name.
pub const INSTALL_CONTAINER: &str = "muster-step-install";
/// The `emptyDir` volume holding the step binary.
pub const BIN_VOLUME: &str = "muster-bin";
/// The Secret volume holding the credential.
pub const KEY_VOLUME: &str = "muster-step-key";

/// Environment variable: the daemons' port.
pub const ENV_PORT: &str = "MUSTER_STEP_PORT";
/// Environment variable: the credential file.
pub const ENV_KEY_FILE: &str = "MUSTER_STEP_KEY_FILE";
/// Environment variable: this node's GPUs of the job, JSON (`{"gpus":[{"index":0,...}]}`).
pub const ENV_NODE_GPUS: &str = "MUSTER_NODE_GPUS";
/// Environment variable: the pod's IP (`fieldRef: status.podIP`).
pub const ENV_POD_IP: &str = "MUSTER_POD_IP";
/// Environment variable: seconds between SIGTERM and SIGKILL of steps.
pub const ENV_KILL_WAIT: &str = "MUSTER_STEP_KILL_WAIT";
/// Environment variable: seconds the batch host waits for every node's daemon.
pub const ENV_NODE_WAIT: &str = "MUSTER_STEP_NODE_WAIT";
/// Environment variable: `1` in the pod of a one-node job. Its steps never leave the pod, so
/// no credential is shared between pods and no Secret exists: the daemon makes the key
/// itself at start (32 random bytes into the key file, unless one is there), on an in-memory
/// `emptyDir` mounted at [`KEY_DIR`] in the main container only. Nothing outside the pod
/// ever holds it.
pub const ENV_LOCAL_KEY: &str = "MUSTER_STEP_LOCAL_KEY";

/// Whether a job on `nodes` nodes makes its step credential in its pod ([`ENV_LOCAL_KEY`])
/// rather than in a Secret: the one rule for the operator's Secret, volume and environment.
pub fn key_in_pod(nodes: usize) -> bool {
    nodes == 1
}

/// The credential Secret of a job: `<job>-step`.
pub fn secret_name(job: &str) -> String {
    format!("{job}-step")
}

/// Environment variable (batch host): the batch step's standard output file, its Slurm
/// pattern already expanded (`--output`, or `slurm-%j.out`); relative to the working
/// directory.
pub const ENV_STDOUT: &str = "MUSTER_STEP_STDOUT";
/// Environment variable (batch host): the batch step's standard error file (`--error`);
/// unset: standard error goes with standard output.
pub const ENV_STDERR: &str = "MUSTER_STEP_STDERR";
/// Environment variable (batch host): `1` when [`ENV_STDOUT`] is sbatch's default rather than
/// asked for (then a path off the shared filesystems is skipped without a notice).
pub const ENV_STDOUT_DEFAULT: &str = "MUSTER_STEP_STDOUT_DEFAULT";
/// Environment variable (batch host): the batch script's working directory (`--chdir`),
/// relative to the container's; unset: the container's.
pub const ENV_CHDIR: &str = "MUSTER_STEP_CHDIR";
/// Environment variable (batch host): `append` or `truncate` (`--open-mode`).
pub const ENV_OPEN_MODE: &str = "MUSTER_STEP_OPEN_MODE";
/// Environment variable (batch host): the mount paths of the partition's writable shared
/// filesystems, `:`-joined: output files are written only under one of them.
pub const ENV_SHARED_DIRS: &str = "MUSTER_STEP_SHARED_DIRS";
/// The volume (a downward-API view of the pod's [`crate::signals::ANNOTATION`]) through
/// which the step runtime hears of `scancel --signal` requests.
pub const SIGNALS_VOLUME: &str = "muster-signals";
/// Where [`SIGNALS_VOLUME`] is mounted in the task container.
pub const SIGNALS_DIR: &str = "/var/run/muster/signals";
/// The requests' file (`SIGNALS_DIR/requests`), which the kubelet rewrites as the pod's
/// annotation changes: the default of [`ENV_SIGNALS_FILE`].
pub const SIGNALS_FILE: &str = "/var/run/muster/signals/requests";
/// Environment variable (every node): the file of signal requests to watch.
pub const ENV_SIGNALS_FILE: &str = "MUSTER_STEP_SIGNALS_FILE";
/// Pod annotation (a job with `--signal`): when its time limit ends now, in seconds since the
/// epoch; the operator keeps it current as the limit changes (`scontrol update TimeLimit=`).
pub const END_TIME_ANNOTATION: &str = "muster.dev/end-time";
/// [`END_TIME_ANNOTATION`] as a file in [`SIGNALS_DIR`]: `--signal`'s warning follows it.
pub const END_TIME_FILE: &str = "/var/run/muster/signals/end-time";
/// Environment variable (every node): `--signal` as `[B:]NUMBER@SECONDS`.
pub const ENV_SIGNAL: &str = "MUSTER_STEP_SIGNAL";
/// Environment variable (every node): when the job's time limit ends, in seconds since the
/// epoch (unset: no limit).
pub const ENV_END_TIME: &str = "MUSTER_STEP_END_TIME";

/// The shared directory of `dirs` that holds `path` (absolute; `.` and `..` are resolved
/// lexically first), if any: where output files may be written. One rule for sbatch's
/// warning, the operator and the batch step.
pub fn shared_dir_of<'a>(path: &str, dirs: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let norm = normalize(path)?;
    dirs.into_iter().find(|d| {
        normalize(d).is_some_and(|d| {
            norm.len() > d.len()
                && norm.starts_with(&d)
                && (d == "/" || norm[d.len()..].starts_with('/'))
        })
    })
}

/// `/a/./b/../c` → `/a/c`; `None` for a relative path.
fn normalize(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_files_go_only_under_a_shared_directory() {
        let dirs = ["/scratch", "/home/"];
        assert_eq!(shared_dir_of("/scratch/logs/a.out", dirs), Some("/scratch"));
        assert_eq!(shared_dir_of("/home/u/x", dirs), Some("/home/"));
        assert_eq!(shared_dir_of("/scratchy/a.out", dirs), None);
        assert_eq!(
            shared_dir_of("/scratch", dirs),
            None,
            "the mount point itself is no file"
        );
        assert_eq!(shared_dir_of("/scratch/../etc/passwd", dirs), None);
        assert_eq!(shared_dir_of("/tmp/./../scratch/a", dirs), Some("/scratch"));
        assert_eq!(
            shared_dir_of("logs/a.out", dirs),
            None,
            "relative: resolve first"
        );
    }
}
