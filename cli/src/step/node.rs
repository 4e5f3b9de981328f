//! The node daemon (`muster-step node`): what `slurmd`/`slurmstepd` do for one node of one
//! job — start step tasks for `srun`, forward their output and signals, report how they end —
//! and, on the batch host, run the batch script.

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, watch};

use super::binding;
use super::job::{Env, Job, Node, ProcessEnv, hostname};
use super::layout::compress_counts;
use super::proto::{Channel, Credential, Frame, LaunchReq, Msg, ProtoError, TaskStatus};

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

impl Daemon {
    fn is_batch_host(&self) -> bool {
        self.node.index == 0
    }

    /// Sends `sig` (and SIGCONT) to the batch step and every task, then SIGKILL after the kill
    /// wait to whatever is left.
    fn terminate_all(self: &Arc<Self>, sig: Signal) {
        let groups: Vec<i32> = {
            let mut st = self.state.lock().expect("state");
            st.terminating = true;
            st.steps
                .values()
                .flat_map(|s| s.pgids.iter().copied())
                .collect()
        };
        for g in &groups {
            signal_group(*g, sig);
        }
        if sig == Signal::SIGTERM {
            let d = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(d.kill_wait).await;
                let groups: Vec<i32> = {
                    let st = d.state.lock().expect("state");
                    st.steps
                        .values()
                        .flat_map(|s| s.pgids.iter().copied())
                        .collect()
                };
                for g in groups {
                    signal_group(g, Signal::SIGKILL);
                }
            });
        }
    }

    /// `--signal`: at the warning time, `B:` signals the batch shell alone; otherwise every
    /// step task on this node (their process groups), not the batch shell — as Slurm does.
    async fn warn_before_limit(self: Arc<Self>, w: super::warn::Warning) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let wait = (w.at as f64 - now).max(0.0);
        tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        let Ok(sig) = Signal::try_from(w.signal) else {
            eprintln!("muster-step: --signal: {} is no signal here", w.signal);
            return;
        };
        // The job's clock starts at admission, its pods somewhat later: when nothing is there
        // to warn yet (the batch script or a step still starting), the first to appear gets
        // the warning, so a late start still hears that the limit is near.
        loop {
            let targets: Vec<i32> = {
                let st = self.state.lock().expect("state");
                if st.terminating {
                    return;
                }
                st.steps
                    .iter()
                    .filter(|(k, _)| (**k == BATCH_KEY) == w.batch_only)
                    .flat_map(|(_, t)| t.pgids.iter().copied())
                    .collect()
            };
            if !targets.is_empty() {
                for pid in targets {
                    if w.batch_only {
                        // The batch shell only: its pid (the group leader), not its group.
                        let _ = kill(Pid::from_raw(pid), sig);
                    } else {
                        signal_group(pid, sig);
                    }
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn wait_idle(&self) {
        loop {
            if self.state.lock().expect("state").steps.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The batch script ended: stop the other nodes' daemons and every local step.
    async fn end_job(self: &Arc<Self>) {
        let others: Vec<String> = self
            .job
            .nodes
            .iter()
            .filter(|n| **n != self.node.name)
            .cloned()
            .collect();
        let sends = others.iter().map(|n| {
            let d = self.clone();
            let n = n.clone();
            async move {
                let r = tokio::time::timeout(Duration::from_secs(5), async {
                    let mut ch = connect(&n, d.job.port, &d.cred).await?;
                    ch.send(&Msg::JobEnd).await.map_err(|e| e.to_string())?;
                    // Wait for the daemon to hang up: it is then stopping its steps.
                    let _ = ch.recv().await;
                    Ok::<_, String>(())
                })
                .await;
                if let Ok(Err(e)) = r {
                    tracing::debug!(node = %n, error = %e, "telling a node the job ended");
                }
            }
        });
        futures::future::join_all(sends).await;
        if !self.state.lock().expect("state").steps.is_empty() {
            self.terminate_all(Signal::SIGTERM);
            let _ = tokio::time::timeout(self.kill_wait + Duration::from_secs(1), self.wait_idle())
                .await;
        }
    }

    /// Waits for every node's daemon, then runs the batch step; returns its exit code.
    async fn run_batch(self: Arc<Self>, cmd: Vec<String>) -> i32 {
        let wait = secs_env(muster_crds::step::ENV_NODE_WAIT, DEFAULT_NODE_WAIT);
        if let Err(e) = self.wait_for_nodes(wait).await {
            eprintln!("muster-step: {e}");
            return 1;
        }
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        self.add_bin_dir(&mut env);
        // --chdir: the script's directory, where relative output files are too.
        let (cwd, chdir_notice) = super::stdio::batch_dir(
            &std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            std::env::var(muster_crds::step::ENV_CHDIR).ok().as_deref(),
        );
        if let Some(n) = chdir_notice {
            eprintln!("muster-step: {n}");
        }
        env.retain(|(k, _)| k != "PWD");
        env.push(("PWD".into(), cwd.clone().into_os_string()));
        // The output files (--output/--error) beside the pod log.
        let mut files = super::stdio::plan(|k| std::env::var(k).ok(), &cwd);
        let wiring = match super::stdio::wire(&mut files) {
            Ok(w) => Some(w),
            Err(e) => {
                files.notices.push(format!("cannot tee the output: {e}"));
                None
            }
        };
        for n in &files.notices {
            eprintln!("muster-step: {n}");
        }
        let spawned = {
            // The command holds the pipes' write ends until dropped: dropped right after the
            // spawn, so the copiers see the end of the output when the batch step's
            // processes are gone.
            let mut c = super::task::command(cmd[0].as_ref(), cmd[0].as_ref());
            c.args(&cmd[1..])
                .env_clear()
                .envs(env)
                .current_dir(&cwd)
                .stdin(Stdio::null())
                .process_group(0);
            let wiring = wiring.map(|mut w| {
                c.stdout(std::mem::replace(&mut w.stdout, Stdio::inherit()));
                c.stderr(std::mem::replace(&mut w.stderr, Stdio::inherit()));
                w
            });
            (c.spawn(), wiring)
        };
        let (spawned, wiring) = spawned;
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                eprintln!("muster-step: starting the batch step {:?}: {e}", cmd[0]);
                return 127;
            }
        };
        let key = BATCH_KEY;
        if let Some(pid) = child.id() {
            self.state
                .lock()
                .expect("state")
                .steps
                .entry(key)
                .or_default()
                .pgids
                .push(pid as i32);
        }
        let status = child.wait().await;
        self.state.lock().expect("state").steps.remove(&key);
        if let Some(w) = wiring {
            w.finish(self.kill_wait.max(Duration::from_secs(1))).await;
        }
        match status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(c), _) => c,
                (None, Some(sig)) => 128 + sig,
                _ => 1,
            },
            Err(e) => {
                eprintln!("muster-step: waiting for the batch step: {e}");
                1
            }
        }
    }

    fn add_bin_dir(&self, env: &mut Vec<(OsString, OsString)>) {
        let Some(dir) = &self.bin_dir else { return };
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| {
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
            });
        if std::env::split_paths(&path).any(|p| p == *dir) {
            return;
        }
        let mut parts = vec![dir.clone()];
        parts.extend(std::env::split_paths(&path));
        let joined = std::env::join_paths(parts).unwrap_or(path);
        env.retain(|(k, _)| k != "PATH");
        env.push(("PATH".into(), joined));
    }

    async fn wait_for_nodes(&self, limit: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + limit;
        let others: Vec<&String> = self
            .job
            .nodes
            .iter()
            .filter(|n| **n != self.node.name)
            .collect();
        let checks = others.iter().map(|n| async move {
            // Said once, so a job stuck on a node that never comes up is not silent.
            let mut told = false;
            let tell_at = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let r = tokio::time::timeout(Duration::from_secs(5), async {
                    let mut ch = connect(n, self.job.port, &self.cred).await?;
                    ch.send(&Msg::Ping).await.map_err(|e| e.to_string())?;
                    match ch.recv().await.map_err(|e| e.to_string())? {
                        Frame::Msg(Msg::Pong { node }) if node == **n => Ok(()),
                        Frame::Msg(Msg::Pong { node }) => Err(format!(
                            "{n} answered as {node}: two pods claim one node name"
                        )),
                        other => Err(format!("unexpected answer {other:?}")),
                    }
                })
                .await;
                let last = match r {
                    Ok(Ok(())) => return Ok(()),
                    Ok(Err(e)) => e,
                    Err(_) => "no answer within 5 s".to_string(),
                };
                let now = tokio::time::Instant::now();
                if now >= deadline {
                    return Err(format!(
                        "node {n} of the job did not answer within {} s ({last}); the batch step cannot start",
                        limit.as_secs()
                    ));
                }
                if !told && now >= tell_at {
                    told = true;
                    eprintln!(
                        "muster-step: waiting for node {n} of the job ({last}); the batch step starts when every node answers, or fails after {} s",
                        limit.as_secs()
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        for r in futures::future::join_all(checks).await {
            r?;
        }
        Ok(())
    }
}

/// Connects and authenticates to `node`'s daemon.
pub async fn connect(
    node: &str,
    port: u16,
    cred: &Credential,
) -> Result<Channel<TcpStream>, String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((node, port))
        .await
        .map_err(|e| format!("resolving {node}: {e}"))?
        .collect();
    let mut last = format!("{node} has no address");
    for a in addrs {
        match TcpStream::connect(a).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Channel::connect(s, cred)
                    .await
                    .map_err(|e| format!("{node} ({a}): {e}"));
            }
            Err(e) => last = format!("connecting to {node} ({a}): {e}"),
        }
    }
    Err(last)
}

async fn accept_loop(d: Arc<Daemon>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((s, peer)) => {
                let _ = s.set_nodelay(true);
                let d = d.clone();
                tokio::spawn(async move {
                    let ch = match tokio::time::timeout(
                        Duration::from_secs(10),
                        Channel::accept(s, &d.cred),
                    )
                    .await
                    {
                        Ok(Ok(ch)) => ch,
                        Ok(Err(ProtoError::Auth)) => {
                            eprintln!(
                                "muster-step: refused a connection from {peer}: it does not hold this job's step credential"
                            );
                            return;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    d.serve(ch).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn signal_group(pgid: i32, sig: Signal) {
    if pgid > 1 {
        if sig == Signal::SIGTERM {
            let _ = kill(Pid::from_raw(-pgid), Signal::SIGCONT);
        }
        let _ = kill(Pid::from_raw(-pgid), sig);
    }
}

/// Finds `prog` the way execvp would with `path` (`None`: not found).
fn find_program(prog: &str, path: Option<&str>, cwd: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let exec = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if prog.contains('/') {
        let p = cwd.join(prog);
        return exec(&p).then_some(p);
    }
    for dir in std::env::split_paths(path?) {
        let dir = if dir.as_os_str().is_empty() {
            cwd.to_path_buf()
        } else {
            cwd.join(dir)
        };
        let p = dir.join(prog);
        if exec(&p) {
            return Some(p);
        }
    }
    None
}

enum Event {
    Output(u32, u8, Vec<u8>),
    Exit(u32, TaskStatus),
}

impl Daemon {
    async fn serve(self: Arc<Self>, mut ch: Channel<TcpStream>) {
        let first = match ch.recv().await {
            Ok(Frame::Msg(m)) => m,
            _ => return,
        };
        match first {
            Msg::Ping => {
                let _ = ch
                    .send(&Msg::Pong {
                        node: self.node.name.clone(),
                    })
                    .await;
            }
            Msg::AllocStep => {
                let reply = if self.is_batch_host() {
                    let mut st = self.state.lock().expect("state");
                    let id = st.next_step;
                    st.next_step += 1;
                    Msg::StepId { id }
                } else {
                    Msg::Refused {
                        error: format!(
                            "step ids are numbered by the batch host {}",
                            self.job.batch_host()
                        ),
                    }
                };
                let _ = ch.send(&reply).await;
            }
            Msg::JobEnd => {
                self.terminate_all(Signal::SIGTERM);
                let d = self.clone();
                tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(d.kill_wait + Duration::from_secs(1), d.wait_idle())
                            .await;
                    let _ = d.shutdown.send(Some(0));
                });
                drop(ch);
            }
            Msg::Launch(req) => self.launch(*req, ch).await,
            other => {
                let _ = ch
                    .send(&Msg::Refused {
                        error: format!("unexpected request {other:?}"),
                    })
                    .await;
            }
        }
    }

    fn notice(&self, text: String) -> Msg {
        Msg::Notice {
            text: format!("slurmstepd-{}: error: {text}", self.node.name),
        }
    }

    /// The environment of the task with global rank `rank`, local id `local`.
    fn task_env(
        &self,
        req: &LaunchReq,
        rank: u32,
        local: usize,
        gpus: Option<&binding::TaskGpus>,
        step_gpus: &str,
    ) -> Vec<(String, String)> {
        let s = &req.step;
        let mut env: Vec<(String, String)> = req.env.clone();
        let mut set = |k: &str, v: String| {
            env.retain(|(n, _)| n != k);
            env.push((k.to_string(), v));
        };
        for (k, v) in &self.node.vars {
            set(k, v.clone());
        }
        let tpn = compress_counts(&s.tasks_per_node);
        let nodelist = muster_crds::slurm::hostlist::compress(&s.nodes);
        let gtids = req
            .ranks
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        set("SLURM_STEP_ID", s.step_id.to_string());
        set("SLURM_STEPID", s.step_id.to_string());
        set("SLURM_PROCID", rank.to_string());
        set("SLURM_LOCALID", local.to_string());
        set("SLURM_NODEID", req.node_index.to_string());
        set("SLURM_GTIDS", gtids);
        set("SLURM_STEP_NODELIST", nodelist);
        set("SLURM_STEP_NUM_NODES", s.nodes.len().to_string());
        set("SLURM_STEP_NUM_TASKS", s.num_tasks.to_string());
        set("SLURM_STEP_TASKS_PER_NODE", tpn.clone());
        set("SLURM_NTASKS", s.num_tasks.to_string());
        set("SLURM_NPROCS", s.num_tasks.to_string());
        set("SLURM_NNODES", s.nodes.len().to_string());
        set("SLURM_TASKS_PER_NODE", tpn);
        set("SLURM_DISTRIBUTION", "block".into());
        set("SLURM_LAUNCH_NODE_IPADDR", s.launch_addr.clone());
        set("SLURM_SRUN_COMM_HOST", s.launch_addr.clone());
        set("SLURM_UMASK", format!("{:04o}", current_umask()));
        if s.label {
            set("SLURM_LABELIO", "1".into());
        }
        if let Some(c) = s.cpus_per_task {
            set("SLURM_CPUS_PER_TASK", c.to_string());
        }
        if let Some(t) = s.ntasks_per_node {
            set("SLURM_NTASKS_PER_NODE", t.to_string());
        }
        if let Some(m) = &s.mpi {
            set("SLURM_MPI_TYPE", m.clone());
        }
        if let Some(g) = gpus {
            set("CUDA_VISIBLE_DEVICES", g.cuda.clone());
            set("GPU_DEVICE_ORDINAL", g.cuda.clone());
            set("SLURM_STEP_GPUS", step_gpus.to_string());
        }
        env
    }

    async fn launch(self: Arc<Self>, req: LaunchReq, ch: Channel<TcpStream>) {
        let (mut tx, mut rx) = ch.split();
        if self.state.lock().expect("state").terminating {
            let _ = tx
                .send(&Msg::Refused {
                    error: "the job is ending".into(),
                })
                .await;
            return;
        }
        let s = &req.step;
        // GPU binding, per local task.
        let bind = match &s.gpu_bind {
            Some(b) => match muster_crds::slurm::GpuBind::parse(b) {
                Ok(b) => Some(b),
                Err(e) => {
                    let _ = tx
                        .send(&Msg::Refused {
                            error: format!("--gpu-bind: {e}"),
                        })
                        .await;
                    return;
                }
            },
            None => None,
        };
        let gpus = if self.node.gpus.gpus.is_empty() {
            None
        } else {
            match binding::bind(
                &self.node.gpus,
                req.ranks.len(),
                s.gpus_per_task,
                s.gpus_per_node,
                bind.as_ref(),
            ) {
                Ok(g) => Some(g),
                Err(e) => {
                    let _ = tx
                        .send(&Msg::Refused {
                            error: format!(
                                "Unable to create step for job {}: {e} (node {})",
                                s.job_id, self.node.name
                            ),
                        })
                        .await;
                    return;
                }
            }
        };
        if let (Some(g), Some(b)) = (&gpus, &bind)
            && b.verbose
        {
            for (i, t) in g.iter().enumerate() {
                eprintln!(
                    "gpu-bind: task {} on {}: CUDA_VISIBLE_DEVICES={} (GPUs {:?})",
                    req.ranks[i], self.node.name, t.cuda, t.indices
                );
            }
        }
        let step_gpus = gpus
            .as_ref()
            .map(|g| {
                let mut all: Vec<u32> = g.iter().flat_map(|t| t.indices.iter().copied()).collect();
                all.sort_unstable();
                all.dedup();
                all.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            })
            .unwrap_or_default();
        // Working directory, as slurmstepd: fall back to /tmp.
        let mut notices = Vec::new();
        let mut cwd = PathBuf::from(&req.cwd);
        if !cwd.is_dir() {
            notices.push(self.notice(format!(
                "couldn't chdir to `{}': No such file or directory: going to /tmp instead",
                req.cwd
            )));
            cwd = PathBuf::from("/tmp");
        }
        let path = req
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        let program = find_program(&req.argv[0], path, &cwd);
        let conn = self
            .conn_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = (s.step_id, conn);
        self.state
            .lock()
            .expect("state")
            .steps
            .insert(key, StepTasks::default());
        let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();
        let mut stdins: Vec<(u32, ChildStdin)> = Vec::new();
        let mut live = 0usize;
        let mut immediate: Vec<(u32, TaskStatus)> = Vec::new();
        for (local, &rank) in req.ranks.iter().enumerate() {
            let env = self.task_env(
                &req,
                rank,
                local,
                gpus.as_ref().map(|g| &g[local]),
                &step_gpus,
            );
            let Some(program) = &program else {
                notices.push(self.notice(format!(
                    "execve(): {}: No such file or directory",
                    req.argv[0]
                )));
                immediate.push((rank, TaskStatus::Exited(2)));
                continue;
            };
            let wants_stdin = req.stdin && req.stdin_rank.is_none_or(|r| r == rank);
            let mut c = super::task::command(program.as_os_str(), req.argv[0].as_ref());
            c.args(&req.argv[1..])
                .env_clear()
                .envs(env)
                .current_dir(&cwd)
                .stdin(if wants_stdin {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0);
            match c.spawn() {
                Ok(mut child) => {
                    if let Some(pid) = child.id()
                        && let Some(st) = self.state.lock().expect("state").steps.get_mut(&key)
                    {
                        st.pgids.push(pid as i32);
                    }
                    if let Some(i) = child.stdin.take() {
                        stdins.push((rank, i));
                    }
                    live += 1;
                    tokio::spawn(watch_task(rank, child, ev_tx.clone()));
                }
                Err(e) => {
                    notices.push(self.notice(format!("execve(): {}: {e}", req.argv[0])));
                    immediate.push((rank, TaskStatus::Exited(2)));
                }
            }
        }
        drop(ev_tx);
        if tx.send(&Msg::Launched).await.is_err() {
            self.kill_step(key, Signal::SIGKILL);
        }
        for n in notices {
            let _ = tx.send(&n).await;
        }
        for (rank, st) in immediate {
            let _ = tx
                .send(&Msg::Exit {
                    ranks: vec![rank],
                    status: st,
                })
                .await;
        }
        // Stdin goes to the tasks through their own writers, so one slow reader blocks no one.
        let mut writers: Vec<mpsc::UnboundedSender<Vec<u8>>> = Vec::new();
        for (_, mut w) in stdins {
            let (wtx, mut wrx) = mpsc::unbounded_channel::<Vec<u8>>();
            writers.push(wtx);
            tokio::spawn(async move {
                while let Some(b) = wrx.recv().await {
                    if b.is_empty() || w.write_all(&b).await.is_err() {
                        break;
                    }
                }
            });
        }
        let mut client_open = true;
        let mut sent_ok = true;
        while live > 0 {
            tokio::select! {
                ev = ev_rx.recv() => match ev {
                    Some(Event::Output(rank, stream, bytes)) => {
                        if sent_ok && tx.output(rank, stream, &bytes).await.is_err() {
                            sent_ok = false;
                        }
                    }
                    Some(Event::Exit(rank, status)) => {
                        live -= 1;
                        let mut ranks = vec![rank];
                        // Tasks that end together are reported together, as slurmstepd does
                        // with the tasks one waitpid loop reaps: gather what ends within 50 ms.
                        let mut later = Vec::new();
                        let until = tokio::time::Instant::now() + Duration::from_millis(50);
                        while live > 0 {
                            match tokio::time::timeout_at(until, ev_rx.recv()).await {
                                Ok(Some(Event::Exit(r, s2))) if s2 == status => {
                                    live -= 1;
                                    ranks.push(r);
                                }
                                Ok(Some(other)) => later.push(other),
                                Ok(None) | Err(_) => break,
                            }
                        }
                        for e in later {
                            match e {
                                Event::Output(r, st, b) => {
                                    if sent_ok && tx.output(r, st, &b).await.is_err() { sent_ok = false; }
                                }
                                Event::Exit(r, s2) => {
                                    live -= 1;
                                    if sent_ok && tx.send(&Msg::Exit { ranks: vec![r], status: s2 }).await.is_err() { sent_ok = false; }
                                }
                            }
                        }
                        ranks.sort_unstable();
                        if sent_ok && tx.send(&Msg::Exit { ranks, status }).await.is_err() {
                            sent_ok = false;
                        }
                    }
                    None => break,
                },
                f = rx.recv(), if client_open => match f {
                    Ok(Frame::Msg(Msg::Signal { sig })) => {
                        if let Ok(sig) = Signal::try_from(sig) {
                            self.kill_step(key, sig);
                        }
                    }
                    Ok(Frame::Stdin(b)) => {
                        let eof = b.is_empty();
                        for w in &writers {
                            let _ = w.send(b.clone());
                        }
                        if eof {
                            writers.clear();
                        }
                    }
                    Ok(_) => {}
                    Err(_) => {
                        // srun is gone (killed, or its node lost): the step goes with it.
                        client_open = false;
                        sent_ok = false;
                        self.kill_step(key, Signal::SIGKILL);
                    }
                },
            }
            if !sent_ok && client_open {
                client_open = false;
                self.kill_step(key, Signal::SIGKILL);
            }
        }
        // Leftover processes of the step's tasks go with the step, as under Slurm's proctrack.
        self.kill_step(key, Signal::SIGKILL);
        self.state.lock().expect("state").steps.remove(&key);
        if sent_ok {
            let _ = tx.send(&Msg::Done).await;
        }
    }

    fn kill_step(&self, key: (u32, u64), sig: Signal) {
        let groups: Vec<i32> = self
            .state
            .lock()
            .expect("state")
            .steps
            .get(&key)
            .map(|s| s.pgids.clone())
            .unwrap_or_default();
        for g in groups {
            signal_group(g, sig);
        }
    }
}

fn current_umask() -> u32 {
    // umask can only be read by setting it; put it straight back.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    nix::sys::stat::umask(old);
    old.bits()
}

async fn pump<R: tokio::io::AsyncRead + Unpin>(
    mut r: R,
    rank: u32,
    stream: u8,
    tx: mpsc::UnboundedSender<Event>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx
                    .send(Event::Output(rank, stream, buf[..n].to_vec()))
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

async fn watch_task(rank: u32, mut child: Child, tx: mpsc::UnboundedSender<Event>) {
    let out = child
        .stdout
        .take()
        .map(|o| tokio::spawn(pump(o, rank, 1, tx.clone())));
    let err = child
        .stderr
        .take()
        .map(|e| tokio::spawn(pump(e, rank, 2, tx.clone())));
    let status = match child.wait().await {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => TaskStatus::Exited(c),
            (None, Some(sig)) => TaskStatus::Signaled(sig, s.core_dumped()),
            _ => TaskStatus::Exited(1),
        },
        Err(_) => TaskStatus::Exited(1),
    };
    // Output first (a background process holding the pipe does not hold the report long).
    for h in [out, err].into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_millis(500), h).await;
    }
    let _ = tx.send(Event::Exit(rank, status));
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

    #[test]
    fn programs_are_found_like_execvp() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("tool");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("/nonexistent:{}", d.path().display());
        assert_eq!(
            find_program("tool", Some(&path), Path::new("/")),
            Some(f.clone())
        );
        assert_eq!(
            find_program("tool", None, Path::new("/")),
            None,
            "no PATH, no search"
        );
        assert_eq!(
            find_program("./tool", None, d.path()),
            Some(d.path().join("./tool"))
        );
        assert_eq!(find_program("nosuch", Some(&path), Path::new("/")), None);
    }
}
