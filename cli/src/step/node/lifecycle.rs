//! The job's life on this node: the batch script on the batch host, waiting for the other
//! nodes, signals to every task, the time limit's warning and the job's end.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::step::proto::{Frame, Msg};
use muster_crds::signals::Target;

use super::launch::signal_group;
use super::{BATCH_KEY, DEFAULT_NODE_WAIT, Daemon, connect, secs_env};

impl Daemon {
    pub(super) fn is_batch_host(&self) -> bool {
        self.node.index == 0
    }

    /// Sends `sig` (and SIGCONT) to the batch step and every task, then SIGKILL after the kill
    /// wait to whatever is left.
    pub(super) fn terminate_all(self: &Arc<Self>, sig: Signal) {
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
    /// The limit's end is read again every second from the pod's end-time file (the
    /// operator keeps it current when the limit changes), so the warning moves with it.
    pub(super) async fn warn_before_limit(self: Arc<Self>, w: crate::step::warn::Warning) {
        use crate::step::warn::{due, end_from_file};
        let end_file = std::path::Path::new(muster_crds::step::END_TIME_FILE);
        loop {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            let wait = due(&w, end_from_file(end_file)) as f64 - now;
            if wait <= 0.0 {
                break;
            }
            tokio::time::sleep(Duration::from_secs_f64(wait.min(1.0))).await;
        }
        let Ok(sig) = Signal::try_from(w.signal) else {
            eprintln!("muster-step: --signal: {} is no signal here", w.signal);
            return;
        };
        // The job's clock starts at admission, its pods somewhat later: when nothing is there
        // to warn yet (the batch script or a step still starting), the first to appear gets
        // the warning, so a late start still hears that the limit is near.
        let target = if w.batch_only {
            Target::Batch
        } else {
            Target::Steps
        };
        loop {
            if self.state.lock().expect("state").terminating {
                return;
            }
            if self.signal_target(target, sig) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub(super) async fn wait_idle(&self) {
        loop {
            if self.state.lock().expect("state").steps.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The batch script ended: stop the other nodes' daemons and every local step.
    pub(super) async fn end_job(self: &Arc<Self>) {
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
    pub(super) async fn run_batch(self: Arc<Self>, cmd: Vec<String>) -> i32 {
        let wait = secs_env(muster_crds::step::ENV_NODE_WAIT, DEFAULT_NODE_WAIT);
        if let Err(e) = self.wait_for_nodes(wait).await {
            eprintln!("muster-step: {e}");
            return 1;
        }
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        self.add_bin_dir(&mut env);
        // --chdir: the script's directory, where relative output files are too.
        let (cwd, chdir_notice) = crate::step::stdio::batch_dir(
            &std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            std::env::var(muster_crds::step::ENV_CHDIR).ok().as_deref(),
        );
        if let Some(n) = chdir_notice {
            eprintln!("muster-step: {n}");
        }
        env.retain(|(k, _)| k != "PWD");
        env.push(("PWD".into(), cwd.clone().into_os_string()));
        // The output files (--output/--error) beside the pod log.
        let mut files = crate::step::stdio::plan(|k| std::env::var(k).ok(), &cwd);
        let wiring = match crate::step::stdio::wire(&mut files) {
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
            let mut c = crate::step::task::command(cmd[0].as_ref(), cmd[0].as_ref());
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
