//! The in-pod step runtime: one small multicall binary, `muster-step`, that gives every node
//! pod of a job what a Slurm node has — `srun`, `scontrol show hostnames|hostlist`, and the
//! node daemon that starts step tasks (Slurm's `slurmd`/`slurmstepd`) and runs the batch
//! script on the first node. No Kubernetes client: everything comes from the pod's
//! environment and a credential file.
//!
//! | invoked as | does |
//! |---|---|
//! | `muster-step node [--listen ADDR] [--batch -- CMD ARGS...]` | the node daemon ([`node`]) |
//! | `srun ...` or `muster-step srun ...` | a job step ([`srun`], options in [`opts`]) |
//! | `scontrol show hostnames\|hostlist\|hostlistsorted LIST` (or `muster-step scontrol ...`) | hostlists, with the Slurm hostlist library of `muster-crds` |
//! | `muster-step install DIR` | copies itself to `DIR/muster-step` and links `srun` and `scontrol` to it (an init container's job) |
//!
//! # The contract with the operator: what each node pod must have
//!
//! One pod per allocated node of the job; node `i` (0-based, in `SLURM_JOB_NODELIST` order)
//! is the pod named in that list at position `i`; node 0 is the batch host.
//!
//! **Names.** Each pod sets `spec.hostname` to its node name `<host_i>` (a DNS label; e.g.
//! `<job>-<i>`) and `spec.subdomain` to the job's headless Service `<svc>` (`clusterIP: None`,
//! a selector matching exactly the job's node pods, `publishNotReadyAddresses: true` so names
//! resolve as soon as pods have addresses), and `spec.dnsConfig.searches:
//! ["<svc>.<namespace>.svc.<cluster domain>"]` (cluster domain: `cluster.local` unless the
//! cluster says otherwise) so that the short node names resolve inside the job. Slurm
//! scripts, Open MPI and hydra use the names of `SLURM_JOB_NODELIST` as host names:
//! `scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1` must be a working
//! `MASTER_ADDR`, and Open MPI compares them with `gethostname()` and `SLURMD_NODENAME`.
//!
//! **The step binary.** An init container from the operator image runs
//! `["/usr/local/bin/muster-step", "install", "/muster/bin"]` with an `emptyDir` volume
//! mounted at `/muster/bin`; the main container mounts the same volume at `/muster/bin`.
//! The binary must be statically linked to run in any user image
//! (`docker/build-muster-step.sh` builds it so).
//!
//! **The credential.** A Secret per job with a key `key` of 32 random bytes (hex is fine:
//! [`proto::Credential::generate`]), mounted read-only in every node pod (default path
//! `/var/run/muster/step/key`, mode 0400), and nowhere else. Every connection between
//! `srun` and the daemons proves possession of it (see [`proto`]); the daemons accept
//! nothing from anyone else. A one-node job's steps never leave its pod, so it needs no
//! Secret: with `MUSTER_STEP_LOCAL_KEY=1` the daemon writes fresh random bytes to the key file
//! itself at start (kept if one is there; [`node::ensure_local_key`]), which is then a
//! writable in-memory `emptyDir` at `/var/run/muster/step` mounted by the main container only.
//!
//! **The main container** (the user's image) runs the daemon:
//! `["/muster/bin/muster-step", "node", "--batch", "--", "/bin/bash", "-c", SCRIPT, "bash",
//! ARGS...]` on the batch host (the batch step is whatever follows `--`; a job without a
//! script runs its command as one step: `... --batch -- /muster/bin/srun CMD ARGS...`), and
//! `["/muster/bin/muster-step", "node"]` on the other nodes. `restartPolicy: Never`. The
//! batch host's container exits with the batch step's exit code (128 + signal when it was
//! killed), which is the job's; when the batch step ends it tells the other daemons, which
//! stop their steps and exit 0. SIGTERM (pod deletion: scancel, time limit) reaches the batch
//! step and every task (their process groups), SIGKILL follows after
//! `MUSTER_STEP_KILL_WAIT` seconds (default 30; set it below the pod's grace period). Before
//! the batch step starts, the batch host waits until every node's daemon answers
//! (`MUSTER_STEP_NODE_WAIT` seconds, default 600; then it fails with a message naming the
//! node).
//!
//! **Environment of the main container** (it is the batch step's environment; the daemon
//! adds `/muster/bin` to `PATH` for the batch step):
//!
//! | variable | value | needed by |
//! |---|---|---|
//! | `SLURM_JOB_ID`, `SLURM_JOBID` | the job id | all |
//! | `SLURM_JOB_NODELIST`, `SLURM_NODELIST` | the node pods' host names as a Slurm hostlist, node order (`train-[0-3]`) | all; Open MPI, hydra |
//! | `SLURM_JOB_NUM_NODES`, `SLURM_NNODES` | node count | srun's `-N` default |
//! | `SLURM_NTASKS`, `SLURM_NPROCS` | task count (when the job has one) | srun's `-n` default |
//! | `SLURM_TASKS_PER_NODE` | tasks per node, `2(x3),1` | layouts; Open MPI, hydra |
//! | `SLURM_JOB_CPUS_PER_NODE` | the job's CPUs per node, same form (default: tasks x `SLURM_CPUS_PER_TASK`) | step layouts |
//! | `SLURM_NTASKS_PER_NODE`, `SLURM_CPUS_PER_TASK`, `SLURM_GPUS_PER_TASK`, `SLURM_GPUS_PER_NODE`, `SLURM_GPU_BIND` | as requested, only when requested | srun defaults (`--gpus-per-task` makes steps bind one set per task) |
//! | `SLURM_NODEID` | this node's index | batch step |
//! | `SLURMD_NODENAME` | this pod's host name (its name in the nodelist, not the Kubernetes node) | the daemon, Open MPI |
//! | `SLURM_CPUS_ON_NODE` | the job's CPUs here | tasks |
//! | `SLURM_GPUS_ON_NODE`, `SLURM_JOB_GPUS` | GPU count and NVML indices here | tasks |
//! | `CUDA_VISIBLE_DEVICES` | `0..n-1` for the node's n GPUs (batch step) | batch step |
//! | `MUSTER_NODE_GPUS` | JSON: this node's GPUs of the job with topology, `{"gpus":[{"index":0,"uuid":"GPU-…","numa":0,"nvlinkPeers":[1,2,3]}],"gpuLinks":[["X","NV18"],…]}` (the core's `Gpu`/`Link`, see [`binding::NodeGpus`]) | per-task binding |
//! | `MUSTER_POD_IP` | `fieldRef: status.podIP` | the daemon's listen address, `SLURM_LAUNCH_NODE_IPADDR` |
//! | `MUSTER_STEP_PORT` | TCP port of the daemons (default 6829); the same on every node | all |
//! | `MUSTER_STEP_KEY_FILE` | credential path (default `/var/run/muster/step/key`) | all |
//! | `MUSTER_STEP_LOCAL_KEY` | `1` in a one-node job's pod: the daemon makes the credential (no Secret) | the daemon |
//! | `SLURM_JOB_NAME`, `SLURM_JOB_PARTITION`, `SLURM_SUBMIT_DIR`, `SLURM_SUBMIT_HOST`, `SLURM_CLUSTER_NAME`, array variables … | what sbatch gives a batch script | scripts |
//! | `MUSTER_STEP_STDOUT`, `MUSTER_STEP_STDERR`, `MUSTER_STEP_STDOUT_DEFAULT`, `MUSTER_STEP_OPEN_MODE`, `MUSTER_STEP_SHARED_DIRS` | batch host: the expanded `--output`/`--error` names, whether the output name is sbatch's default, `append`/`truncate`, the partition's writable shared mount paths (`:`-joined) | the output files ([`stdio`]) |
//! | `MUSTER_STEP_SIGNAL`, `MUSTER_STEP_END_TIME` | `--signal` (`[B:]SIG[@SECS]`) and the time limit's end (epoch seconds), on every node | the warning signal ([`warn`]) |
//!
//! What each step task then gets on top of srun's environment (after `--export`): this
//! node's values of [`job::NODE_VARS`], `SLURM_STEP_ID`/`SLURM_STEPID`, `SLURM_PROCID`,
//! `SLURM_LOCALID`, `SLURM_NODEID` (index in the step), `SLURM_GTIDS`,
//! `SLURM_STEP_NODELIST`, `SLURM_STEP_NUM_NODES`, `SLURM_STEP_NUM_TASKS`,
//! `SLURM_STEP_TASKS_PER_NODE`, `SLURM_NTASKS`/`SLURM_NPROCS`/`SLURM_NNODES`/
//! `SLURM_TASKS_PER_NODE` (the step's, as srun sets them), `SLURM_DISTRIBUTION=block`,
//! `SLURM_LAUNCH_NODE_IPADDR`, `SLURM_SRUN_COMM_HOST`, `SLURM_UMASK`, `SLURM_LABELIO`
//! (with `-l`), `SLURM_CPUS_PER_TASK`, `SLURM_NTASKS_PER_NODE`, `SLURM_MPI_TYPE` (when given)
//! and, on a node with GPUs, `CUDA_VISIBLE_DEVICES`, `GPU_DEVICE_ORDINAL` and
//! `SLURM_STEP_GPUS` from the binding ([`binding`]), and `SLURM_TASK_PID`, the task's own pid
//! ([`task`]; the batch script gets it too). Not set:
//! `SLURM_SRUN_COMM_PORT`, `SLURM_STEP_LAUNCHER_PORT`, `SLURM_TOPOLOGY_ADDR` (unless the pod
//! has it).
//!
//! Steps share the job's resources (as with `srun --overlap`); there is no PMI server
//! (`--mpi=none` only: MPI programs start through `mpirun`, which launches its daemons with
//! `srun`).

pub mod binding;
pub mod job;
pub mod layout;
pub mod node;
pub mod opts;
pub mod proto;
mod reaper;
pub mod srun;
pub mod stdio;
pub mod task;
pub mod warn;

use std::path::Path;

/// The multicall entry point: dispatches on the program name, then on the first argument.
pub fn main() -> i32 {
    pin_name_services();
    // Before anything reads the arguments as UTF-8: a task's arguments need not be.
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if raw.get(1).is_some_and(|a| a == task::EXEC_TASK) {
        return task::exec(&raw[2..]);
    }
    let mut args: Vec<String> = std::env::args().collect();
    let prog = args
        .first()
        .map(|a| {
            Path::new(a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    args.remove(0);
    match prog.as_str() {
        "srun" => return srun::main(&args),
        "scontrol" => return scontrol(&args),
        _ => {}
    }
    let Some(cmd) = args.first().cloned() else {
        eprintln!("{USAGE}");
        return 2;
    };
    let rest = &args[1..];
    match cmd.as_str() {
        "node" => node::main(rest),
        "srun" => srun::main(rest),
        "scontrol" => scontrol(rest),
        "install" => install(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            0
        }
        "-V" | "--version" => {
            println!("muster-step {}", env!("CARGO_PKG_VERSION"));
            0
        }
        other => {
            eprintln!("muster-step: unknown command {other:?}\n{USAGE}");
            2
        }
    }
}

/// Statically linked (the build the operator image ships), host names are looked up with
/// glibc's built-in `files` and `dns` services only (`/etc/hosts`, then the pod's
/// `/etc/resolv.conf`: what a pod's names need), whatever the image's `nsswitch.conf` says:
/// any other service would be a module loaded from the image's own glibc, which a static
/// program cannot safely do, and an image naming none of the built-in ones would leave it
/// resolving nothing.
#[cfg(all(target_os = "linux", target_env = "gnu", target_feature = "crt-static"))]
fn pin_name_services() {
    unsafe extern "C" {
        fn __nss_configure_lookup(
            db: *const std::ffi::c_char,
            service_line: *const std::ffi::c_char,
        ) -> std::ffi::c_int;
    }
    // SAFETY: two NUL-terminated static strings; called first thing, before any thread or
    // lookup exists.
    unsafe {
        __nss_configure_lookup(c"hosts".as_ptr(), c"files dns".as_ptr());
    }
}

/// Dynamically linked (a cargo build), the C library and its modules are the system's own.
#[cfg(not(all(target_os = "linux", target_env = "gnu", target_feature = "crt-static")))]
fn pin_name_services() {}

const USAGE: &str = "usage: muster-step node [--listen ADDR] [--batch -- COMMAND ARGS...]
       muster-step srun [OPTIONS] COMMAND ARGS...   (or as srun)
       muster-step scontrol show hostnames|hostlist|hostlistsorted LIST   (or as scontrol)
       muster-step install DIR";

/// `scontrol` inside a job: the hostlist commands (the cluster commands need the API and are
/// `muster scontrol`).
pub fn scontrol(args: &[String]) -> i32 {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let env_list = || {
        std::env::var("SLURM_JOB_NODELIST")
            .or_else(|_| std::env::var("SLURM_NODELIST"))
            .unwrap_or_default()
    };
    let (what, list) = match a.as_slice() {
        ["show", what] => (*what, env_list()),
        ["show", what, rest @ ..] => (*what, rest.join(",")),
        _ => {
            eprintln!(
                "scontrol: inside a job only `scontrol show hostnames|hostlist|hostlistsorted [LIST]` is available"
            );
            return 1;
        }
    };
    let out = match what {
        "hostnames" => crate::scontrol::hostnames(&list),
        "hostlist" => crate::scontrol::hostlist(&list),
        "hostlistsorted" => muster_crds::slurm::hostlist::expand(&list)
            .map(|v| format!("{}\n", muster_crds::slurm::hostlist::compress_sorted(&v)))
            .map_err(|e| e.to_string()),
        other => Err(format!(
            "`show {other}` needs the cluster (use `muster scontrol`); inside a job: hostnames, hostlist, hostlistsorted"
        )),
    };
    match out {
        Ok(s) => {
            print!("{s}");
            0
        }
        Err(e) => {
            eprintln!("scontrol: error: {e}");
            1
        }
    }
}

/// `muster-step install DIR`: what the init container does.
pub fn install(args: &[String]) -> i32 {
    let [dir] = args else {
        eprintln!("usage: muster-step install DIR");
        return 2;
    };
    match install_into(Path::new(dir)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("muster-step install: {e}");
            1
        }
    }
}

fn install_into(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let me = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let target = dir.join("muster-step");
    // Write beside the target and rename, so a running copy is never half-written.
    let tmp = dir.join(".muster-step.tmp");
    std::fs::copy(&me, &tmp)
        .map_err(|e| format!("copying {} to {}: {e}", me.display(), tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &target).map_err(|e| format!("{}: {e}", target.display()))?;
    for link in ["srun", "scontrol"] {
        let l = dir.join(link);
        let _ = std::fs::remove_file(&l);
        std::os::unix::fs::symlink("muster-step", &l)
            .map_err(|e| format!("linking {}: {e}", l.display()))?;
    }
    Ok(())
}
