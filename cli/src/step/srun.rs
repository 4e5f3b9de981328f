//! `srun` inside a Muster job: lays the step out ([`super::layout`]), asks the batch host for
//! a step id, has every node daemon of the step start its tasks, then forwards output (with
//! `-l` labels), stdin and signals, and exits as Slurm's srun does — the highest task exit
//! code, or 128 + the highest signal when a task was killed — printing Slurm's messages
//! (`srun: error: n002: tasks 2-3: Exited with exit code 1`).
//!
//! Signals to srun do what they do to Slurm's: SIGTERM, SIGHUP and SIGQUIT end the step
//! (SIGKILL to every task: "srun: forcing job termination"), a first SIGINT prints the
//! tasks' state and a second within a second forwards it, SIGCONT is noted, and SIGUSR1,
//! SIGUSR2 and the others are forwarded to every task. SIGKILL cannot be caught: the daemons
//! see srun's connection drop and kill its tasks.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::job::{Job, ProcessEnv};
use super::layout;
use super::node::connect;
use super::opts::{self, Input, Opts, Parsed};
use super::proto::{Credential, Frame, LaunchReq, Msg, Sender, StepInfo, TaskStatus};

/// Runs `srun ARGS`; returns the exit code.
pub fn main(args: &[String]) -> i32 {
    let o = match opts::parse(args, &ProcessEnv) {
        Parsed::Run(o) => o,
        Parsed::Exit(text, code) => {
            if code == 0 {
                print!("{text}");
            } else {
                eprint!("{text}");
            }
            return code;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("srun: error: starting the runtime: {e}");
            return 1;
        }
    };
    let code = rt.block_on(run(*o));
    // The stdin reader may still be blocked in read(2) on a terminal or an open pipe: do not
    // wait for it.
    rt.shutdown_background();
    code
}

fn err(msg: impl std::fmt::Display) -> i32 {
    eprintln!("srun: error: {msg}");
    1
}

/// glibc's `strsignal` for the signals tasks die of.
pub fn signal_name(sig: i32) -> String {
    match sig {
        1 => "Hangup".into(),
        2 => "Interrupt".into(),
        3 => "Quit".into(),
        4 => "Illegal instruction".into(),
        5 => "Trace/breakpoint trap".into(),
        6 => "Aborted".into(),
        7 => "Bus error".into(),
        8 => "Floating point exception".into(),
        9 => "Killed".into(),
        10 => "User defined signal 1".into(),
        11 => "Segmentation fault".into(),
        12 => "User defined signal 2".into(),
        13 => "Broken pipe".into(),
        14 => "Alarm clock".into(),
        15 => "Terminated".into(),
        n => format!("Signal {n}"),
    }
}

/// Slurm's `bit_fmt` of task ids: `0-1,3`.
pub fn ranges(ids: &[u32]) -> String {
    let mut v = ids.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Slurm's line for tasks of one node that ended alike (`None`: nothing is printed).
pub fn exit_line(node: &str, ranks: &[u32], status: TaskStatus) -> Option<String> {
    let what = if ranks.len() == 1 { "task" } else { "tasks" };
    let which = ranges(ranks);
    match status {
        TaskStatus::Exited(0) => None,
        TaskStatus::Exited(c) => Some(format!("{node}: {what} {which}: Exited with exit code {c}")),
        TaskStatus::Signaled(s, core) => Some(format!(
            "{node}: {what} {which}: {}{}",
            signal_name(s),
            if core { " (core dumped)" } else { "" }
        )),
    }
}

/// srun's exit code from every task's status (Slurm's `global_rc` rules).
pub fn exit_code(statuses: &[TaskStatus]) -> i32 {
    let sig = statuses
        .iter()
        .filter_map(|s| match s {
            TaskStatus::Signaled(n, _) => Some(*n),
            _ => None,
        })
        .max();
    match sig {
        Some(s) => 128 + s,
        None => statuses
            .iter()
            .map(|s| match s {
                TaskStatus::Exited(c) => *c,
                TaskStatus::Signaled(..) => 0,
            })
            .max()
            .unwrap_or(0),
    }
}

/// Splits task output into lines for printing (`-l` labels; whole lines unless unbuffered).
pub struct Printer {
    label_width: usize,
    label: bool,
    unbuffered: bool,
    partial: HashMap<(u32, u8), Vec<u8>>,
}

impl Printer {
    /// A printer for `ntasks` tasks.
    pub fn new(ntasks: u32, label: bool, unbuffered: bool) -> Printer {
        // Slurm's _wid: digits of the highest task id.
        let label_width = ntasks.saturating_sub(1).to_string().len();
        Printer {
            label_width,
            label,
            unbuffered,
            partial: HashMap::new(),
        }
    }

    fn prefix(&self, rank: u32) -> String {
        if self.label {
            format!("{:>w$}: ", rank, w = self.label_width)
        } else {
            String::new()
        }
    }

    /// The bytes to write for a chunk of output.
    pub fn feed(&mut self, rank: u32, stream: u8, bytes: &[u8]) -> Vec<u8> {
        if self.unbuffered && !self.label {
            return bytes.to_vec();
        }
        let buf = self.partial.entry((rank, stream)).or_default();
        buf.extend_from_slice(bytes);
        let Some(last_nl) = buf.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let rest = buf.split_off(last_nl + 1);
        let whole = std::mem::replace(buf, rest);
        self.lines(rank, &whole)
    }

    fn lines(&self, rank: u32, whole: &[u8]) -> Vec<u8> {
        if !self.label {
            return whole.to_vec();
        }
        let p = self.prefix(rank);
        let mut out = Vec::with_capacity(whole.len() + p.len() * 4);
        for line in whole.split_inclusive(|&b| b == b'\n') {
            out.extend_from_slice(p.as_bytes());
            out.extend_from_slice(line);
        }
        out
    }

    /// What is left of a task's stream when it ended (with `-l`, a partial line gets its
    /// newline, as Slurm's labelled writer adds it).
    pub fn flush(&mut self, rank: u32, stream: u8) -> Vec<u8> {
        let Some(rest) = self.partial.remove(&(rank, stream)) else {
            return Vec::new();
        };
        if rest.is_empty() {
            return rest;
        }
        let mut out = self.lines(rank, &rest);
        if self.label {
            out.push(b'\n');
        }
        out
    }
}

fn write_out(stream: u8, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    if stream == 2 {
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(bytes);
        let _ = e.flush();
    } else {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(bytes);
        let _ = o.flush();
    }
}

enum Incoming {
    Frame(usize, Frame),
    Lost(usize, String),
}

async fn run(o: Opts) -> i32 {
    let job = match Job::from_env(&ProcessEnv) {
        Ok(j) => j,
        Err(e) => return err(e),
    };
    let cred = match Credential::from_file(&job.key_file) {
        Ok(c) => c,
        Err(e) => return err(e),
    };
    let (layout, warnings) = match layout::resolve(&job.allocation(), &o.request) {
        Ok(l) => {
            let w = l.warnings.clone();
            (Ok(l), w)
        }
        Err((e, w)) => (Err(e), w),
    };
    if !o.quiet {
        for w in &warnings {
            eprintln!("srun: Warning: {w}");
        }
    }
    let layout = match layout {
        Ok(l) => l,
        Err(e) => return err(e),
    };
    let step_id = match alloc_step(&job, &cred).await {
        Ok(id) => id,
        Err(e) => return err(format!("Unable to create step for job {}: {e}", job.id)),
    };
    let env: Vec<(String, String)> = std::env::vars().collect();
    let env = opts::exported(&env, &o.export);
    let cwd = match &o.chdir {
        Some(d) => d.clone(),
        None => std::env::current_dir()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "/".into()),
    };
    let step = StepInfo {
        job_id: job.id.clone(),
        step_id,
        num_tasks: layout.total(),
        nodes: layout.nodes.clone(),
        tasks_per_node: layout.tasks.clone(),
        cpus_per_task: o.request.cpus_per_task,
        ntasks_per_node: layout.ntasks_per_node,
        gpus_per_task: o.gpus_per_task.as_ref().map(|g| g.count),
        gpus_per_node: o.gres_gpus.as_ref().map(|g| g.count),
        gpu_bind: o.gpu_bind.as_ref().map(|(s, _)| s.clone()),
        mpi: o.mpi.clone(),
        label: o.label,
        launch_addr: std::env::var(muster_crds::step::ENV_POD_IP).unwrap_or_default(),
    };
    if o.verbose > 0 {
        eprintln!(
            "srun: StepId={}.{step_id}: {} task(s) on {} ({})",
            job.id,
            layout.total(),
            muster_crds::slurm::hostlist::compress(&layout.nodes),
            layout::compress_counts(&layout.tasks)
        );
    }
    let launches = layout.nodes.iter().enumerate().map(|(i, node)| {
        let req = LaunchReq {
            step: step.clone(),
            node_index: i as u32,
            ranks: layout.ranks(i).collect(),
            argv: o.command.clone(),
            cwd: cwd.clone(),
            env: env.clone(),
            stdin: o.input != Input::None,
            stdin_rank: match o.input {
                Input::Task(n) => Some(n),
                _ => None,
            },
        };
        let (job, cred) = (&job, &cred);
        async move { (i, launch_one(node, job.port, cred, req).await) }
    });
    let results = futures::future::join_all(launches).await;
    let mut senders: Vec<Option<Sender<tokio::io::WriteHalf<TcpStream>>>> = Vec::new();
    let (tx, mut rx) = mpsc::unbounded_channel::<Incoming>();
    let mut failures = Vec::new();
    for (i, r) in results {
        match r {
            Ok(ch) => {
                let (s, mut r) = ch.split();
                senders.push(Some(s));
                let tx = tx.clone();
                tokio::spawn(async move {
                    loop {
                        match r.recv().await {
                            Ok(f) => {
                                let done = matches!(f, Frame::Msg(Msg::Done));
                                if tx.send(Incoming::Frame(i, f)).is_err() || done {
                                    return;
                                }
                            }
                            Err(e) => {
                                let _ = tx.send(Incoming::Lost(i, e.to_string()));
                                return;
                            }
                        }
                    }
                });
            }
            Err(e) => {
                senders.push(None);
                failures.push(e);
            }
        }
    }
    drop(tx);
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("srun: error: {f}");
        }
        for s in senders.iter_mut().flatten() {
            let _ = s.send(&Msg::Signal { sig: libc::SIGKILL }).await;
        }
        return 1;
    }
    // Stdin, read once and sent to the nodes whose tasks read it.
    let (stdin_tx, mut stdin_rx) = mpsc::channel::<Vec<u8>>(16);
    if o.input != Input::None {
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut inp = tokio::io::stdin();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match inp.read(&mut buf).await {
                    Ok(0) | Err(_) => {
                        let _ = stdin_tx.send(Vec::new()).await;
                        return;
                    }
                    Ok(n) => {
                        if stdin_tx.send(buf[..n].to_vec()).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    } else {
        drop(stdin_tx);
    }
    let stdin_node = match o.input {
        Input::Task(n) => (0..layout.nodes.len()).find(|&i| layout.ranks(i).contains(&n)),
        _ => None,
    };
    let mut sigs = Signals::new();
    let mut printer = Printer::new(layout.total(), o.label, o.unbuffered);
    let mut statuses: BTreeMap<u32, TaskStatus> = BTreeMap::new();
    let mut done = vec![false; layout.nodes.len()];
    let mut terminating = false;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut stdin_open = o.input != Input::None;
    let mut last_intr: Option<tokio::time::Instant> = None;
    let kill_wait = Duration::from_secs_f64(
        std::env::var(muster_crds::step::ENV_KILL_WAIT)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
            .unwrap_or(super::node::DEFAULT_KILL_WAIT as f64),
    );
    while done.iter().any(|d| !d) {
        let sleep_until =
            kill_at.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            m = rx.recv() => match m {
                Some(Incoming::Frame(i, f)) => match f {
                    Frame::Output(rank, stream, bytes) => write_out(stream, &printer.feed(rank, stream, &bytes)),
                    Frame::Msg(Msg::Exit { ranks, status }) => {
                        for r in &ranks {
                            write_out(1, &printer.flush(*r, 1));
                            write_out(2, &printer.flush(*r, 2));
                            statuses.insert(*r, status);
                        }
                        if let Some(line) = exit_line(&layout.nodes[i], &ranks, status) {
                            eprintln!("srun: error: {line}");
                        }
                        let bad = !matches!(status, TaskStatus::Exited(0));
                        if bad && o.kill_on_bad_exit && !terminating {
                            terminating = true;
                            eprintln!("srun: launch/slurm: _step_signal: Terminating StepId={}.{step_id}", job.id);
                            for s in senders.iter_mut().flatten() {
                                let _ = s.send(&Msg::Signal { sig: libc::SIGTERM }).await;
                            }
                            kill_at = Some(tokio::time::Instant::now() + kill_wait);
                        }
                    }
                    Frame::Msg(Msg::Notice { text }) => eprintln!("{text}"),
                    Frame::Msg(Msg::Done) => done[i] = true,
                    _ => {}
                },
                Some(Incoming::Lost(i, e)) => {
                    if !done[i] {
                        done[i] = true;
                        eprintln!("srun: error: Lost connection to {} ({e}): its tasks are gone", layout.nodes[i]);
                        for r in layout.ranks(i) {
                            statuses.entry(r).or_insert(TaskStatus::Signaled(libc::SIGKILL, false));
                        }
                    }
                }
                None => break,
            },
            b = stdin_rx.recv(), if stdin_open => {
                let b = b.unwrap_or_default();
                if b.is_empty() {
                    stdin_open = false;
                }
                for (i, s) in senders.iter_mut().enumerate() {
                    if stdin_node.is_some_and(|n| n != i) || done[i] {
                        continue;
                    }
                    if let Some(s) = s {
                        let _ = s.stdin(&b).await;
                    }
                }
            }
            sig = sigs.next() => {
                // What srun's signal thread does (srun_job.c `_srun_signal_mgr`).
                let fwd = match sig {
                    libc::SIGINT => {
                        let now = tokio::time::Instant::now();
                        if last_intr.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
                            eprintln!("srun: sending Ctrl-C to StepId={}.{step_id}", job.id);
                            Some(libc::SIGINT)
                        } else {
                            last_intr = Some(now);
                            eprintln!("srun: interrupt (one more within 1 sec to abort)");
                            let running: Vec<u32> = (0..layout.total()).filter(|r| !statuses.contains_key(r)).collect();
                            if !running.is_empty() {
                                eprintln!("srun: StepId={}.{step_id} {} {}: running", job.id,
                                    if running.len() == 1 { "task" } else { "tasks" }, ranges(&running));
                            }
                            None
                        }
                    }
                    libc::SIGTERM | libc::SIGHUP | libc::SIGQUIT => {
                        if sig == libc::SIGQUIT {
                            eprintln!("srun: Quit");
                        }
                        eprintln!("srun: forcing job termination");
                        Some(libc::SIGKILL)
                    }
                    libc::SIGCONT => {
                        eprintln!("srun: got SIGCONT");
                        None
                    }
                    other => Some(other),
                };
                if let Some(f) = fwd {
                    for (i, s) in senders.iter_mut().enumerate() {
                        if !done[i] && let Some(s) = s {
                            let _ = s.send(&Msg::Signal { sig: f }).await;
                        }
                    }
                }
            }
            _ = tokio::time::sleep_until(sleep_until), if kill_at.is_some() => {
                kill_at = None;
                for (i, s) in senders.iter_mut().enumerate() {
                    if !done[i] && let Some(s) = s {
                        let _ = s.send(&Msg::Signal { sig: libc::SIGKILL }).await;
                    }
                }
            }
        }
    }
    // Output of tasks whose exit never arrived (a lost node).
    for r in 0..layout.total() {
        write_out(1, &printer.flush(r, 1));
        write_out(2, &printer.flush(r, 2));
    }
    let all: Vec<TaskStatus> = statuses.values().copied().collect();
    if all
        .iter()
        .any(|s| matches!(s, TaskStatus::Signaled(9 | 15, _)))
    {
        eprintln!("srun: Force Terminated StepId={}.{step_id}", job.id);
    }
    exit_code(&all)
}

async fn alloc_step(job: &Job, cred: &Credential) -> Result<u32, String> {
    let host = job.batch_host();
    let mut ch = connect_retry(host, job.port, cred).await?;
    ch.send(&Msg::AllocStep).await.map_err(|e| e.to_string())?;
    match ch.recv().await.map_err(|e| format!("{host}: {e}"))? {
        Frame::Msg(Msg::StepId { id }) => Ok(id),
        Frame::Msg(Msg::Refused { error }) => Err(error),
        other => Err(format!("{host} answered {other:?}")),
    }
}

/// Connects, retrying briefly while a node's daemon is still starting.
async fn connect_retry(
    node: &str,
    port: u16,
    cred: &Credential,
) -> Result<super::proto::Channel<TcpStream>, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match connect(node, port, cred).await {
            Ok(c) => return Ok(c),
            // Authentication failures are final.
            Err(e) if e.contains("authentication") => return Err(e),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn launch_one(
    node: &str,
    port: u16,
    cred: &Credential,
    req: LaunchReq,
) -> Result<super::proto::Channel<TcpStream>, String> {
    let mut ch = connect_retry(node, port, cred).await?;
    ch.send(&Msg::Launch(Box::new(req)))
        .await
        .map_err(|e| format!("{node}: {e}"))?;
    match ch.recv().await.map_err(|e| format!("{node}: {e}"))? {
        Frame::Msg(Msg::Launched) => Ok(ch),
        Frame::Msg(Msg::Refused { error }) => Err(error),
        other => Err(format!("{node} answered {other:?}")),
    }
}

/// The signals srun forwards to its tasks.
struct Signals {
    streams: Vec<(i32, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn new() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let mut streams = Vec::new();
        for n in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGCONT,
            libc::SIGALRM,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGWINCH,
        ] {
            if let Ok(s) = signal(SignalKind::from_raw(n)) {
                streams.push((n, s));
            }
        }
        Signals { streams }
    }

    async fn next(&mut self) -> i32 {
        let futs = self.streams.iter_mut().map(|(n, s)| {
            let n = *n;
            Box::pin(async move {
                s.recv().await;
                n
            })
        });
        futures::future::select_all(futs).await.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_lines_read_like_slurms() {
        assert_eq!(
            exit_line("n002", &[3, 2], TaskStatus::Exited(1)).unwrap(),
            "n002: tasks 2-3: Exited with exit code 1"
        );
        assert_eq!(
            exit_line("n001", &[1], TaskStatus::Signaled(9, false)).unwrap(),
            "n001: task 1: Killed"
        );
        assert_eq!(exit_line("n001", &[0, 1], TaskStatus::Exited(0)), None);
        assert_eq!(ranges(&[0, 1, 3, 5, 6, 7]), "0-1,3,5-7");
    }

    #[test]
    fn the_exit_code_is_the_highest_or_the_signal() {
        use TaskStatus::*;
        assert_eq!(exit_code(&[Exited(0), Exited(3), Exited(2)]), 3);
        assert_eq!(exit_code(&[Exited(5), Signaled(15, false), Exited(5)]), 143);
        assert_eq!(exit_code(&[Signaled(9, false), Signaled(15, false)]), 143);
        assert_eq!(exit_code(&[]), 0);
    }

    #[test]
    fn labels_are_padded_and_partial_lines_completed() {
        let mut p = Printer::new(12, true, false);
        assert_eq!(p.feed(3, 1, b"a\nb"), b" 3: a\n");
        assert_eq!(p.feed(3, 1, b"c\n"), b" 3: bc\n");
        assert_eq!(p.feed(10, 1, b"x"), b"");
        assert_eq!(p.flush(10, 1), b"10: x\n");
        let mut p = Printer::new(4, false, false);
        assert_eq!(p.feed(0, 1, b"par"), b"");
        assert_eq!(
            p.flush(0, 1),
            b"par",
            "no label: the partial line stays partial"
        );
        let mut p = Printer::new(4, false, true);
        assert_eq!(p.feed(0, 1, b"par"), b"par");
    }
}
