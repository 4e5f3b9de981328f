//! What to do about a binding violation, and the process killing behind a trait.

use std::sync::{Arc, Mutex};

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

#[cfg(test)]
mod tests {
    use super::*;

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
