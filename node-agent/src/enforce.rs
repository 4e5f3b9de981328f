//! What to do about a binding violation, and the process killing behind a trait.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::binding::Violation;
use crate::procfs::{ProcFs, ProcessHome};

/// What the agent does about a process on a GPU its pod was not given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    /// Event on the pod, counter in the GpuNode, log line.
    #[default]
    Report,
    /// As `report`, and the process is killed (SIGKILL).
    Kill,
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Policy::Report => "report",
            Policy::Kill => "kill",
        })
    }
}

/// Why a kill failed.
#[derive(Debug, thiserror::Error)]
pub enum KillError {
    /// The process is already gone.
    #[error("process {0} no longer exists")]
    NoSuchProcess(u32),
    /// Not allowed (the agent needs to run as root with hostPID).
    #[error("not permitted to kill process {0} (the agent must run as root with hostPID: true)")]
    NotPermitted(u32),
    /// A PID that must never be signalled (0, 1, or out of range).
    #[error("refusing to kill PID {0}")]
    Refused(u32),
    /// Anything else.
    #[error("killing process {pid} failed: {source}")]
    Other {
        /// The process.
        pid: u32,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Kills processes; tests substitute one that only records.
pub trait ProcessKiller: Send + Sync {
    /// Kills `pid` at once.
    fn kill(&self, pid: u32) -> Result<(), KillError>;
}

/// The real killer: SIGKILL, because a process that grabbed a GPU it was not given must not
/// get to catch SIGTERM and carry on.
#[derive(Clone, Copy, Debug, Default)]
pub struct SignalKiller;

impl ProcessKiller for SignalKiller {
    fn kill(&self, pid: u32) -> Result<(), KillError> {
        use nix::errno::Errno;
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let raw = i32::try_from(pid).map_err(|_| KillError::Refused(pid))?;
        if raw <= 1 {
            return Err(KillError::Refused(pid));
        }
        match kill(Pid::from_raw(raw), Signal::SIGKILL) {
            Ok(()) => Ok(()),
            Err(Errno::ESRCH) => Err(KillError::NoSuchProcess(pid)),
            Err(Errno::EPERM) => Err(KillError::NotPermitted(pid)),
            Err(e) => Err(KillError::Other {
                pid,
                source: std::io::Error::from(e),
            }),
        }
    }
}

/// A killer that records the PIDs it was asked to kill and kills nothing (for tests).
#[derive(Clone, Debug, Default)]
pub struct RecordingKiller {
    killed: Arc<Mutex<Vec<u32>>>,
}

impl RecordingKiller {
    /// The PIDs killed so far, in order.
    pub fn killed(&self) -> Vec<u32> {
        self.killed.lock().map(|k| k.clone()).unwrap_or_default()
    }
}

impl ProcessKiller for RecordingKiller {
    fn kill(&self, pid: u32) -> Result<(), KillError> {
        if let Ok(mut k) = self.killed.lock() {
            k.push(pid);
        }
        Ok(())
    }
}

/// Kills a violating process after re-reading its cgroup: PIDs are reused, and a kill must
/// never hit a newcomer that took the PID since the violation was seen.
pub fn verify_and_kill(
    procfs: &ProcFs,
    killer: &dyn ProcessKiller,
    v: &Violation,
) -> Result<(), KillError> {
    let pid = v.process.pid;
    match procfs.home(pid) {
        Ok(ProcessHome::Pod(r)) if r.pod_uid == v.pod_uid => killer.kill(pid),
        Ok(ProcessHome::Gone) => Err(KillError::NoSuchProcess(pid)),
        Ok(_) => Err(KillError::Refused(pid)),
        Err(source) => Err(KillError::Other { pid, source }),
    }
}

/// Counts violations once per (process, GPU, pod) while they last.
#[derive(Clone, Debug, Default)]
pub struct ViolationLedger {
    seen: HashSet<(u32, u32, String)>,
    total: u64,
}

impl ViolationLedger {
    /// A ledger continuing from a published count.
    pub fn starting_at(total: u64) -> Self {
        ViolationLedger {
            seen: HashSet::new(),
            total,
        }
    }

    /// Records this poll's violations; returns which of them (by position) are new. Ones no
    /// longer present are forgotten (a PID reused later is a new violation).
    pub fn record(&mut self, violations: &[Violation]) -> Vec<usize> {
        let key = |v: &Violation| (v.process.pid, v.process.gpu, v.pod_uid.clone());
        let current: HashSet<_> = violations.iter().map(key).collect();
        self.seen.retain(|k| current.contains(k));
        let mut new = Vec::new();
        for (i, v) in violations.iter().enumerate() {
            if self.seen.insert(key(v)) {
                self.total += 1;
                new.push(i);
            }
        }
        new
    }

    /// Violations counted so far.
    pub fn total(&self) -> u64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::{Assignment, Source};
    use crate::model::GpuProcess;
    use crate::procfs::fake;

    const UID: &str = "8f3e2a14-5b6c-4d7e-9f80-a1b2c3d4e5f6";

    fn violation(pid: u32, gpu: u32) -> Violation {
        Violation {
            process: GpuProcess {
                gpu,
                pid,
                used_memory_mib: Some(1),
            },
            gpu_uuid: format!("GPU-{gpu}"),
            namespace: "ml".into(),
            pod: "p".into(),
            pod_uid: UID.into(),
            pod_api_uid: Some(UID.into()),
            container: None,
            assignment: Assignment::Gpus {
                gpus: Default::default(),
                source: Source::Nothing,
            },
        }
    }

    #[test]
    fn ledger_counts_each_violation_once_while_it_lasts() {
        let mut l = ViolationLedger::starting_at(5);
        assert_eq!(l.record(&[violation(1, 0), violation(2, 0)]), vec![0, 1]);
        assert_eq!(l.total(), 7);
        // Still there: not new. A second GPU for pid 1: new.
        assert_eq!(
            l.record(&[violation(1, 0), violation(2, 0), violation(1, 3)]),
            vec![2]
        );
        assert_eq!(l.total(), 8);
        // Gone, then back (PID reuse): counted again.
        assert_eq!(l.record(&[]), Vec::<usize>::new());
        assert_eq!(l.record(&[violation(1, 0)]), vec![0]);
        assert_eq!(l.total(), 9);
    }

    #[test]
    fn kills_only_the_process_still_in_the_violating_pod() {
        let dir = tempfile::tempdir().unwrap();
        let procfs = ProcFs::new(dir.path());
        let killer = RecordingKiller::default();
        fake::pod_process(dir.path(), 10, "python", UID, &"c".repeat(64)).unwrap();
        verify_and_kill(&procfs, &killer, &violation(10, 0)).unwrap();
        // PID 11 now belongs to another pod; PID 12 to the host; PID 13 is gone.
        fake::pod_process(
            dir.path(),
            11,
            "python",
            "1f0e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b",
            &"c".repeat(64),
        )
        .unwrap();
        fake::host_process(dir.path(), 12, "sshd").unwrap();
        assert!(matches!(
            verify_and_kill(&procfs, &killer, &violation(11, 0)),
            Err(KillError::Refused(11))
        ));
        assert!(matches!(
            verify_and_kill(&procfs, &killer, &violation(12, 0)),
            Err(KillError::Refused(12))
        ));
        assert!(matches!(
            verify_and_kill(&procfs, &killer, &violation(13, 0)),
            Err(KillError::NoSuchProcess(13))
        ));
        assert_eq!(killer.killed(), vec![10]);
    }

    #[test]
    fn signal_killer_refuses_init_and_reports_missing_processes() {
        assert!(matches!(SignalKiller.kill(1), Err(KillError::Refused(1))));
        assert!(matches!(SignalKiller.kill(0), Err(KillError::Refused(0))));
        assert!(matches!(
            SignalKiller.kill(u32::MAX),
            Err(KillError::Refused(_))
        ));
        // PIDs above the kernel's pid_max cannot exist.
        assert!(matches!(
            SignalKiller.kill(i32::MAX as u32),
            Err(KillError::NoSuchProcess(_))
        ));
    }

    #[test]
    fn signal_killer_kills_a_real_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        SignalKiller.kill(child.id()).unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9));
    }
}
