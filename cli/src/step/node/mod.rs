//! The node daemon (`muster-step node`): what `slurmd`/`slurmstepd` do for one node of one
//! job — start step tasks for `srun`, forward their output and signals, report how they end —
//! and, on the batch host, run the batch script.

mod launch;
mod lifecycle;
mod serve;
mod signals;

pub use serve::connect;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::job::{Env, Job, Node, ProcessEnv, hostname};
use super::proto::Credential;
use serve::accept_loop;

/// How long the batch host waits for every node daemon before running the script, when
/// `MUSTER_STEP_NODE_WAIT` is unset (seconds).
pub const DEFAULT_NODE_WAIT: u64 = 600;
/// Seconds between SIGTERM and SIGKILL when a step or the job is ended
/// (`MUSTER_STEP_KILL_WAIT`; Slurm's `KillWait` defaults to 30).
pub const DEFAULT_KILL_WAIT: u64 = 30;

/// The batch step's key among the steps (no `srun` step has this id).
const BATCH_KEY: (u32, u64) = (u32::MAX, 0);

/// `muster-step node` arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeArgs {
    /// Run the batch step (this is the batch host).
    pub batch: Option<Vec<String>>,
    /// Listen here instead of `MUSTER_POD_IP` (or all addresses).
    pub listen: Option<IpAddr>,
}

/// Parses `node [--listen ADDR] [--batch -- CMD ARGS...]`.
pub fn parse_args(args: &[String]) -> Result<NodeArgs, String> {
    let mut out = NodeArgs::default();
    let mut it = args.iter();
    let mut batch = false;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--batch" => batch = true,
            "--listen" => {
                let v = it.next().ok_or("--listen needs an address")?;
                out.listen = Some(
                    v.parse()
                        .map_err(|_| format!("--listen {v}: not an IP address"))?,
                );
            }
            "--" => {
                let cmd: Vec<String> = it.by_ref().cloned().collect();
                if !batch {
                    return Err("a command after -- is the batch step: give --batch".into());
                }
                if cmd.is_empty() {
                    return Err("--batch -- needs a command".into());
                }
                out.batch = Some(cmd);
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; usage: muster-step node [--listen ADDR] [--batch -- COMMAND ARGS...]"
                ));
            }
        }
    }
    if batch && out.batch.is_none() {
        return Err("--batch needs the batch command after --".into());
    }
    Ok(out)
}

fn secs_env(k: &str, default: u64) -> Duration {
    Duration::from_secs_f64(
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
            .unwrap_or(default as f64),
    )
}

/// A step's tasks on this node, for signals.
#[derive(Default)]
struct StepTasks {
    pgids: Vec<i32>,
}

struct State {
    steps: HashMap<(u32, u64), StepTasks>,
    next_step: u32,
    terminating: bool,
}

/// The daemon.
pub struct Daemon {
    job: Job,
    node: Node,
    cred: Credential,
    state: Mutex<State>,
    kill_wait: Duration,
    bin_dir: Option<PathBuf>,
    shutdown: watch::Sender<Option<i32>>,
    conn_seq: std::sync::atomic::AtomicU64,
}

/// Runs the daemon until the job ends; returns the exit code (the batch script's on the
/// batch host).
pub fn main(args: &[String]) -> i32 {
    let args = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("muster-step node: {e}");
            return 2;
        }
    };
    if std::process::id() == 1 {
        // As a container's first process we must reap orphans; a child does the work.
        super::reaper::become_child();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("muster-step node: starting the runtime: {e}");
            return 1;
        }
    };
    let code = rt.block_on(run(args));
    rt.shutdown_background();
    code
}

fn fail(msg: &str) -> i32 {
    eprintln!("muster-step node: {msg}");
    1
}

async fn run(args: NodeArgs) -> i32 {
    let env = ProcessEnv;
    let job = match Job::from_env(&env) {
        Ok(j) => j,
        Err(e) => return fail(&e),
    };
    let node = match Node::from_env(&env, &job, &hostname()) {
        Ok(n) => n,
        Err(e) => return fail(&e),
    };
    if env.get(muster_crds::step::ENV_LOCAL_KEY).as_deref() == Some("1") {
        if job.nodes.len() != 1 {
            return fail(&format!(
                "{} is set but the job has {} nodes: a key made in this pod cannot reach the others",
                muster_crds::step::ENV_LOCAL_KEY,
                job.nodes.len()
            ));
        }
        if let Err(e) = ensure_local_key(&job.key_file) {
            return fail(&e);
        }
    }
    let cred = match Credential::from_file(&job.key_file) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let listen = args
        .listen
        .or_else(|| {
            env.get(muster_crds::step::ENV_POD_IP)
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let listener = match TcpListener::bind(SocketAddr::new(listen, job.port)).await {
        Ok(l) => l,
        Err(e) => return fail(&format!("listening on {listen}:{}: {e}", job.port)),
    };
    let bin_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let (shutdown, mut shutdown_rx) = watch::channel(None);
    let d = Arc::new(Daemon {
        job,
        node,
        cred,
        state: Mutex::new(State {
            steps: HashMap::new(),
            next_step: 0,
            terminating: false,
        }),
        kill_wait: secs_env(muster_crds::step::ENV_KILL_WAIT, DEFAULT_KILL_WAIT),
        bin_dir,
        shutdown,
        conn_seq: Default::default(),
    });
    tokio::spawn(accept_loop(d.clone(), listener));
    if let Some(w) = super::warn::from_env(|k| std::env::var(k).ok()) {
        tokio::spawn(d.clone().warn_before_limit(w));
    }
    tokio::spawn(d.clone().watch_signals(signals::file_from_env()));
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => return fail(&format!("installing the SIGTERM handler: {e}")),
    };
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    let batch = args.batch.clone();
    let has_batch = batch.is_some();
    let batch_fut = async {
        match batch {
            Some(cmd) => Some(d.clone().run_batch(cmd).await),
            None => std::future::pending().await,
        }
    };
    tokio::pin!(batch_fut);
    let mut terminated = false;
    loop {
        tokio::select! {
            code = &mut batch_fut => {
                let code = code.unwrap_or(0);
                d.end_job().await;
                return code;
            }
            _ = term.recv() => {
                if !terminated {
                    terminated = true;
                    d.terminate_all(Signal::SIGTERM);
                    // With a batch step, its end decides; without, the daemon goes once its
                    // tasks are gone.
                    if !has_batch {
                        let d2 = d.clone();
                        tokio::spawn(async move {
                            d2.wait_idle().await;
                            let _ = d2.shutdown.send(Some(128 + 15));
                        });
                    }
                }
            }
            Some(()) = async { match int.as_mut() { Some(s) => s.recv().await, None => std::future::pending().await } } => {
                d.terminate_all(Signal::SIGINT);
            }
            r = shutdown_rx.changed() => {
                if r.is_err() {
                    return 1;
                }
                if let Some(code) = *shutdown_rx.borrow() {
                    // Where a batch step runs, it decides the exit code.
                    if !has_batch {
                        return code;
                    }
                }
            }
        }
    }
}

/// A one-node job's credential, made in its pod ([`muster_crds::step::ENV_LOCAL_KEY`]): fresh
/// random bytes written to `path` (mode 0400, through a temporary file and a rename so a
/// reader never sees half a key), unless a key is already there (the daemon started again in
/// the same pod: the job's processes may hold it).
pub fn ensure_local_key(path: &Path) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".key.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(Credential::generate().as_bytes())?;
        f.sync_all()?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o400))?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("making the step credential {}: {e}", path.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn a_one_node_job_makes_its_key_once_readable_by_its_user_only() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let key = d.path().join("key");
        ensure_local_key(&key).unwrap();
        let first = std::fs::read(&key).unwrap();
        assert!(Credential::from_bytes(&first).is_ok());
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o400
        );
        // Started again in the same pod: the key the job's processes hold is kept.
        ensure_local_key(&key).unwrap();
        assert_eq!(std::fs::read(&key).unwrap(), first);
        // Another pod makes another key.
        let other = d.path().join("other");
        ensure_local_key(&other).unwrap();
        assert_ne!(std::fs::read(&other).unwrap(), first);
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn node_arguments() {
        assert_eq!(parse_args(&[]).unwrap(), NodeArgs::default());
        let a = parse_args(&s(&["--batch", "--", "/bin/bash", "-c", "echo hi"])).unwrap();
        assert_eq!(a.batch.unwrap(), ["/bin/bash", "-c", "echo hi"]);
        assert!(parse_args(&s(&["--batch"])).is_err());
        assert!(
            parse_args(&s(&["--", "x"]))
                .unwrap_err()
                .contains("--batch")
        );
        assert!(parse_args(&s(&["--listen", "nope"])).is_err());
        assert!(parse_args(&s(&["--frob"])).unwrap_err().contains("usage"));
    }
}
