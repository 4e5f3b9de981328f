//! Reading `/proc/PID/{cgroup,comm}` under a configurable root, so tests can point the agent
//! at a fake tree and a containerised agent at the host's `/proc`.

use std::io;
use std::path::{Path, PathBuf};

use crate::cgroup::{self, PodRef};

/// A `/proc` tree.
#[derive(Clone, Debug)]
pub struct ProcFs {
    root: PathBuf,
}

/// Where a GPU process lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessHome {
    /// In a pod's cgroup.
    Pod(PodRef),
    /// On the host (or in a container the kubelet does not run).
    Host,
    /// No `/proc/PID`: the process exited, or it is in a PID namespace we cannot see (the
    /// agent needs `hostPID: true`).
    Gone,
}

impl ProcFs {
    /// A tree rooted at `root` (normally `/proc`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ProcFs { root: root.into() }
    }

    /// The root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where process `pid` lives.
    pub fn home(&self, pid: u32) -> io::Result<ProcessHome> {
        match std::fs::read_to_string(self.root.join(pid.to_string()).join("cgroup")) {
            Ok(text) => Ok(cgroup::pod_of(&text).map_or(ProcessHome::Host, ProcessHome::Pod)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(ProcessHome::Gone),
            Err(e) => Err(e),
        }
    }

    /// The process's command name, for messages (best effort).
    pub fn comm(&self, pid: u32) -> Option<String> {
        std::fs::read_to_string(self.root.join(pid.to_string()).join("comm"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }
}

/// Builds fake `/proc` trees (for tests of this crate and of its users).
pub mod fake {
    use std::io;
    use std::path::Path;

    /// Writes `/proc/PID/cgroup` (and `comm`) under `root` for a process in a pod's container,
    /// in the cgroup v2 systemd layout the kubelet uses with containerd.
    pub fn pod_process(
        root: &Path,
        pid: u32,
        comm: &str,
        pod_uid: &str,
        container_id: &str,
    ) -> io::Result<()> {
        let line = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{container_id}.scope\n",
            pod_uid.replace('-', "_")
        );
        process(root, pid, comm, &line)
    }

    /// Writes a host process (`/system.slice/<comm>.service`).
    pub fn host_process(root: &Path, pid: u32, comm: &str) -> io::Result<()> {
        process(
            root,
            pid,
            comm,
            &format!("0::/system.slice/{comm}.service\n"),
        )
    }

    /// Writes a process with the given `/proc/PID/cgroup` contents.
    pub fn process(root: &Path, pid: u32, comm: &str, cgroup: &str) -> io::Result<()> {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("cgroup"), cgroup)?;
        std::fs::write(dir.join("comm"), format!("{comm}\n"))
    }

    /// Removes a process (it exited).
    pub fn exit(root: &Path, pid: u32) -> io::Result<()> {
        std::fs::remove_dir_all(root.join(pid.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_fake_tree() {
        let dir = tempfile::tempdir().unwrap();
        let uid = "8f3e2a14-5b6c-4d7e-9f80-a1b2c3d4e5f6";
        let cid = "a".repeat(64);
        fake::pod_process(dir.path(), 100, "python", uid, &cid).unwrap();
        fake::host_process(dir.path(), 200, "nvidia-persistenced").unwrap();
        let proc = ProcFs::new(dir.path());
        assert_eq!(
            proc.home(100).unwrap(),
            ProcessHome::Pod(PodRef {
                pod_uid: uid.into(),
                container_id: Some(cid)
            })
        );
        assert_eq!(proc.home(200).unwrap(), ProcessHome::Host);
        assert_eq!(proc.home(300).unwrap(), ProcessHome::Gone);
        assert_eq!(proc.comm(100).as_deref(), Some("python"));
        fake::exit(dir.path(), 100).unwrap();
        assert_eq!(proc.home(100).unwrap(), ProcessHome::Gone);
    }
}
