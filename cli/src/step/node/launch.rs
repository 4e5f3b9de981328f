//! Step tasks on this node: their environment, starting them, forwarding their output and
//! signals, and reporting how they end.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

use crate::step::binding;
use crate::step::layout::compress_counts;
use crate::step::proto::{Channel, Frame, LaunchReq, Msg, TaskStatus};

use super::{Daemon, StepTasks};

pub(super) fn signal_group(pgid: i32, sig: Signal) {
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

    pub(super) async fn launch(self: Arc<Self>, req: LaunchReq, ch: Channel<TcpStream>) {
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
            let mut c = crate::step::task::command(program.as_os_str(), req.argv[0].as_ref());
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
