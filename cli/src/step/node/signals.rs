//! `scancel --signal`: the node daemon watches the signal requests' file (the kubelet's
//! downward-API view of the pod's [`muster_crds::signals::ANNOTATION`]) and delivers each
//! request it has not seen to this node's processes, as slurmd does for the job's steps on
//! its node.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use muster_crds::signals::{self, SignalRequest, Target};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::launch::signal_group;
use super::{BATCH_KEY, Daemon};

/// How often the file is read. The kubelet rewrites it within seconds of the annotation
/// changing; reading a few hundred bytes twice a second costs nothing.
const POLL: Duration = Duration::from_millis(500);

/// The requests' file: `MUSTER_STEP_SIGNALS_FILE`, else where the operator mounts it.
pub(super) fn file_from_env() -> PathBuf {
    std::env::var_os(muster_crds::step::ENV_SIGNALS_FILE)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(muster_crds::step::SIGNALS_FILE))
}

fn read(path: &Path) -> Vec<SignalRequest> {
    // A missing file (a pod without the volume) or a malformed one delivers nothing; the
    // admission webhook refuses malformed annotations, so the latter is not expected.
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| signals::parse(&t).ok())
        .unwrap_or_default()
}

impl Daemon {
    /// Delivers every request that appears in `path` after the daemon started. Those already
    /// there were sent before this node's processes existed: as in Slurm, a signal reaches
    /// only the processes running when it is sent.
    pub(super) async fn watch_signals(self: Arc<Self>, path: PathBuf) {
        let mut seen: HashSet<String> = read(&path).into_iter().map(|r| r.id).collect();
        loop {
            tokio::time::sleep(POLL).await;
            if self.state.lock().expect("state").terminating {
                return;
            }
            let reqs = read(&path);
            for r in &reqs {
                if seen.insert(r.id.clone()) {
                    self.deliver(r);
                }
            }
            // Ids dropped from the annotation never come back; forget them.
            seen.retain(|id| reqs.iter().any(|r| &r.id == id));
        }
    }

    /// Sends `sig` to this node's processes of `target`: every step's tasks (their process
    /// groups), the batch shell alone (its pid), the batch shell's whole process group and
    /// every step, or one step's tasks. Returns how many it reached. One rule for
    /// `scancel --signal` and `--signal`'s warning.
    pub(super) fn signal_target(&self, target: Target, sig: Signal) -> usize {
        let st = self.state.lock().expect("state");
        let mut reached = 0;
        for (key, tasks) in &st.steps {
            let batch = *key == BATCH_KEY;
            for &pgid in &tasks.pgids {
                match (target, batch) {
                    (Target::Steps, false) | (Target::Full, _) => signal_group(pgid, sig),
                    (Target::Step(n), false) if key.0 == n => signal_group(pgid, sig),
                    (Target::Batch, true) if pgid > 1 => {
                        let _ = kill(Pid::from_raw(pgid), sig);
                    }
                    _ => continue,
                }
                reached += 1;
            }
        }
        reached
    }

    fn deliver(&self, r: &SignalRequest) {
        let Ok(sig) = Signal::try_from(r.number) else {
            eprintln!(
                "muster-step: scancel --signal: {} is no signal here",
                r.number
            );
            return;
        };
        self.signal_target(r.target, sig);
        tracing::debug!(
            signal = r.number,
            target = %r.target,
            "scancel --signal delivered"
        );
    }
}
