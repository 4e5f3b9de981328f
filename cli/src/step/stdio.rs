//! The batch step's output files (`--output`/`--error`), as `slurmstepd` writes them — and the
//! pod log as well.
//!
//! The operator gives the batch host the expanded file names ([`muster_crds::step::ENV_STDOUT`],
//! [`ENV_STDERR`](muster_crds::step::ENV_STDERR)), the open mode and the partition's shared
//! directories. A file is written only when it lies under one of those (a file in the
//! container's own filesystem would vanish with the pod); relative names are relative to the
//! batch step's working directory, as in Slurm. Otherwise the batch host says so once in the
//! pod log (not for sbatch's default `slurm-%j.out`, which nobody asked for) and the job runs.
//!
//! Everything the script writes also goes to the container's standard output and error, so
//! `muster logs` and `kubectl logs` keep working: Slurm writes the file only, Kubernetes users
//! read the pod log, and a tee serves both. With one file for both streams (no `--error`, or
//! the same name) the script's standard output and error share one pipe, so the file keeps
//! their order exactly as Slurm's would. A file that cannot be opened (a missing directory, no
//! permission) is reported in the pod log and the job runs with the pod log only — Slurm would
//! fail the job; Muster keeps the run, whose output the pod log still has.

use std::fs::{File, OpenOptions};
use std::io::{PipeReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use muster_crds::step as contract;

/// Where the batch step's streams go, beside the pod log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The standard output file.
    pub out: Option<PathBuf>,
    /// The standard error file, when it is another file than `out`.
    pub err: Option<PathBuf>,
    /// Standard error goes to `out` (one file for both).
    pub merged: bool,
    /// Append rather than truncate.
    pub append: bool,
    /// What the pod log should say about files not written.
    pub notices: Vec<String>,
}

/// The batch script's working directory: `chdir` (`--chdir`, relative to the container's
/// `cwd`), else `cwd`. A directory that does not exist gives `/tmp` and the notice Slurm's
/// `slurmstepd` prints.
pub fn batch_dir(cwd: &Path, chdir: Option<&str>) -> (PathBuf, Option<String>) {
    let Some(d) = chdir.filter(|d| !d.is_empty()) else {
        return (cwd.to_path_buf(), None);
    };
    let dir = cwd.join(d);
    if dir.is_dir() {
        return (dir, None);
    }
    (
        PathBuf::from("/tmp"),
        Some(format!(
            "couldn't chdir to `{}': No such file or directory: going to /tmp instead",
            dir.display()
        )),
    )
}

/// Decides the files from the environment `get` and the working directory `cwd`.
pub fn plan(get: impl Fn(&str) -> Option<String>, cwd: &Path) -> Plan {
    let shared = get(contract::ENV_SHARED_DIRS).unwrap_or_default();
    let dirs: Vec<&str> = shared.split(':').filter(|d| !d.is_empty()).collect();
    let quiet_default = get(contract::ENV_STDOUT_DEFAULT).as_deref() == Some("1");
    let mut notices = Vec::new();
    let mut resolve = |name: Option<String>, what: &str, quiet: bool| -> Option<PathBuf> {
        let name = name.filter(|n| !n.is_empty())?;
        let full = if name.starts_with('/') {
            PathBuf::from(&name)
        } else {
            cwd.join(&name)
        };
        let s = full.to_string_lossy();
        if contract::shared_dir_of(&s, dirs.iter().copied()).is_some() {
            return Some(full);
        }
        if !quiet {
            let why = if dirs.is_empty() {
                "the partition has no shared filesystem (jobEnvironment.volumes)".to_string()
            } else {
                format!(
                    "it is on no shared filesystem of the partition ({})",
                    dirs.join(", ")
                )
            };
            notices.push(format!(
                "{what} {s} is not written: {why}; the output is in the pod log (muster logs)"
            ));
        }
        None
    };
    let out_name = get(contract::ENV_STDOUT);
    let err_name = get(contract::ENV_STDERR);
    let same = err_name.is_none() || err_name == out_name;
    let out = resolve(out_name, "--output", quiet_default);
    let err = if same {
        None
    } else {
        resolve(err_name, "--error", false)
    };
    Plan {
        merged: same && out.is_some(),
        out,
        err,
        append: get(contract::ENV_OPEN_MODE).as_deref() == Some("append"),
        notices,
    }
}

/// The batch step's standard output and error, and the copiers that tee them.
pub struct Wiring {
    /// For the child's standard output.
    pub stdout: Stdio,
    /// For the child's standard error.
    pub stderr: Stdio,
    copiers: Vec<std::thread::JoinHandle<()>>,
}

impl Wiring {
    /// Waits until the copiers have written everything the batch step's processes wrote
    /// (they end when the last writer closes its end), at most `limit`: a background
    /// process that keeps the pipe open must not hold the job.
    pub async fn finish(self, limit: std::time::Duration) {
        let joined = tokio::task::spawn_blocking(move || {
            for c in self.copiers {
                let _ = c.join();
            }
        });
        let _ = tokio::time::timeout(limit, joined).await;
    }
}

fn open(path: &Path, append: bool, notices: &mut Vec<String>) -> Option<File> {
    let mut o = OpenOptions::new();
    o.create(true).write(true);
    if append {
        o.append(true);
    } else {
        o.truncate(true);
    }
    match o.open(path) {
        Ok(f) => Some(f),
        Err(e) => {
            notices.push(format!(
                "cannot open {}: {e}; the output is in the pod log (muster logs)",
                path.display()
            ));
            None
        }
    }
}

/// Copies `from` to `log` (the container's stream) and to `file`, chunk by chunk, until the
/// pipe closes. A failing file write stops the file copy, never the pod log's.
fn copier(
    mut from: PipeReader,
    mut log: impl Write + Send + 'static,
    mut file: Option<File>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let _ = log.write_all(&buf[..n]);
            let _ = log.flush();
            if let Some(f) = &mut file
                && let Err(e) = f.write_all(&buf[..n])
            {
                let _ = writeln!(log, "muster-step: writing the output file: {e}");
                file = None;
            }
        }
    })
}

/// Opens the files of `plan` and wires the child's streams: inherited when no file is
/// written (the pod log alone, as before), teed otherwise. Notices about files not opened
/// are added to `plan.notices`.
pub fn wire(plan: &mut Plan) -> std::io::Result<Wiring> {
    let out_file = match &plan.out {
        Some(p) => open(p, plan.append, &mut plan.notices),
        None => None,
    };
    let err_file = match &plan.err {
        Some(p) => open(p, plan.append, &mut plan.notices),
        None => None,
    };
    let mut copiers = Vec::new();
    if out_file.is_none() && err_file.is_none() {
        return Ok(Wiring {
            stdout: Stdio::inherit(),
            stderr: Stdio::inherit(),
            copiers,
        });
    }
    if plan.merged && out_file.is_some() {
        // One pipe for both streams: the file gets them in the order they were written.
        let (r, w) = std::io::pipe()?;
        let w2 = w.try_clone()?;
        copiers.push(copier(r, std::io::stdout(), out_file));
        return Ok(Wiring {
            stdout: Stdio::from(w),
            stderr: Stdio::from(w2),
            copiers,
        });
    }
    let stdout = match out_file {
        Some(f) => {
            let (r, w) = std::io::pipe()?;
            copiers.push(copier(r, std::io::stdout(), Some(f)));
            Stdio::from(w)
        }
        None => Stdio::inherit(),
    };
    let stderr = match err_file {
        Some(f) => {
            let (r, w) = std::io::pipe()?;
            copiers.push(copier(r, std::io::stderr(), Some(f)));
            Stdio::from(w)
        }
        // `--error` off the shared filesystems: standard error goes where standard output
        // goes only when the user gave no --error; here it stays in the pod log.
        None => Stdio::inherit(),
    };
    Ok(Wiring {
        stdout,
        stderr,
        copiers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn chdir_is_relative_to_the_containers_directory_and_missing_ones_go_to_tmp() {
        let tmp = std::env::temp_dir();
        let base = tmp.join(format!("muster-chdir-{}", std::process::id()));
        std::fs::create_dir_all(base.join("run")).unwrap();
        assert_eq!(batch_dir(&base, None), (base.clone(), None));
        assert_eq!(batch_dir(&base, Some("run")), (base.join("run"), None));
        let abs = base.join("run");
        assert_eq!(batch_dir(Path::new("/"), abs.to_str()), (abs.clone(), None));
        let (d, notice) = batch_dir(&base, Some("nowhere"));
        assert_eq!(d, PathBuf::from("/tmp"));
        assert_eq!(
            notice.unwrap(),
            format!(
                "couldn't chdir to `{}': No such file or directory: going to /tmp instead",
                base.join("nowhere").display()
            )
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn files_on_a_shared_filesystem_are_written_relative_to_the_working_directory() {
        let p = plan(
            env(&[
                (contract::ENV_STDOUT, "logs/train-7.out"),
                (contract::ENV_SHARED_DIRS, "/scratch:/home"),
            ]),
            Path::new("/scratch/me"),
        );
        assert_eq!(p.out, Some(PathBuf::from("/scratch/me/logs/train-7.out")));
        assert!(p.merged && p.err.is_none() && !p.append && p.notices.is_empty());
        let p = plan(
            env(&[
                (contract::ENV_STDOUT, "/home/o.out"),
                (contract::ENV_STDERR, "/home/e.err"),
                (contract::ENV_OPEN_MODE, "append"),
                (contract::ENV_SHARED_DIRS, "/scratch:/home"),
            ]),
            Path::new("/"),
        );
        assert_eq!(p.out, Some(PathBuf::from("/home/o.out")));
        assert_eq!(p.err, Some(PathBuf::from("/home/e.err")));
        assert!(!p.merged && p.append);
    }

    #[test]
    fn a_file_off_the_shared_filesystems_is_reported_unless_it_is_the_default() {
        let p = plan(
            env(&[
                (contract::ENV_STDOUT, "/tmp/o.out"),
                (contract::ENV_SHARED_DIRS, "/scratch"),
            ]),
            Path::new("/"),
        );
        assert_eq!(p.out, None);
        assert_eq!(
            p.notices,
            [
                "--output /tmp/o.out is not written: it is on no shared filesystem of the partition (/scratch); the output is in the pod log (muster logs)"
            ]
        );
        let p = plan(
            env(&[
                (contract::ENV_STDOUT, "slurm-5.out"),
                (contract::ENV_STDOUT_DEFAULT, "1"),
            ]),
            Path::new("/workspace"),
        );
        assert_eq!(p, Plan::default());
    }

    #[test]
    fn truncate_and_append_as_slurm() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("o.out");
        std::fs::write(&f, "old run\n").unwrap();
        for (append, want) in [(true, "old run\nnew\n"), (false, "new\n")] {
            std::fs::write(&f, "old run\n").unwrap();
            let mut notices = Vec::new();
            let mut h = open(&f, append, &mut notices).unwrap();
            h.write_all(b"new\n").unwrap();
            drop(h);
            assert_eq!(std::fs::read_to_string(&f).unwrap(), want);
        }
        let mut notices = Vec::new();
        assert!(open(&dir.path().join("missing/o.out"), false, &mut notices).is_none());
        assert!(notices[0].starts_with("cannot open"), "{notices:?}");
    }
}
