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

/// The credential Secret of a job: `<job>-step`.
pub fn secret_name(job: &str) -> String {
    format!("{job}-step")
}
