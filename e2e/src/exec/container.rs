//! Starting one container as local processes: its own mount, UTS and PID namespaces, a root
//! built from the host's (see [`MountPlan`]), the container's command as PID 1 of its PID
//! namespace.
//!
//! The process tree, all set up between `fork` and `exec` with raw system calls (nothing that
//! allocates, since the test process has many threads):
//!
//! - the **relay** (the kubelet's child): `unshare`s the namespaces, sets the host name, forks
//!   the container's first process, then only waits for it, forwarding SIGTERM, SIGINT,
//!   SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to its process group and exiting with its status
//!   (128 + signal when it was killed). It dies with the kubelet thread that started it
//!   (`PR_SET_PDEATHSIG`).
//! - the container's **first process** (PID 1 inside): a new session, dies with the relay,
//!   builds the mounts, `pivot_root`s, `chdir`s, and `exec`s the command. When it exits the
//!   kernel kills everything else in the PID namespace, as a container runtime does. SIGKILL
//!   to the relay therefore ends the whole container.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicI32, Ordering};

/// One step of the mount plan, executed by the container's first process.
#[derive(Debug)]
enum Op {
    /// Stop mount propagation to the host (`MS_REC | MS_PRIVATE` on `/`).
    Private,
    Mount {
        src: Option<CString>,
        dst: CString,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
    },
    Mkdir(CString),
    Touch(CString),
    Symlink(CString, CString),
    /// `pivot_root(root, root/.oldroot)`, then detach and remove the old root.
    Pivot(CString, CString),
    Chdir(CString),
}

impl Op {
    fn describe(&self) -> String {
        let s = |c: &CString| c.to_string_lossy().into_owned();
        match self {
            Op::Private => "making / private".into(),
            Op::Mount {
                src,
                dst,
                fstype,
                data,
                ..
            } => format!(
                "mounting {} on {} ({}{})",
                src.as_ref().map(s).unwrap_or_default(),
                s(dst),
                fstype.as_ref().map(s).unwrap_or_else(|| "bind".into()),
                data.as_ref()
                    .map(|d| format!(", {}", s(d)))
                    .unwrap_or_default()
            ),
            Op::Mkdir(p) => format!("creating directory {}", s(p)),
            Op::Touch(p) => format!("creating file {}", s(p)),
            Op::Symlink(t, l) => format!("linking {} to {}", s(l), s(t)),
            Op::Pivot(r, _) => format!("pivot_root to {}", s(r)),
            Op::Chdir(p) => format!("changing to the working directory {}", s(p)),
        }
    }
}

fn cstr(p: impl AsRef<OsStr>) -> CString {
    CString::new(p.as_ref().as_bytes())
        .unwrap_or_else(|_| CString::new("/nonexistent").expect("no NUL"))
}

/// The container's file system: a tmpfs root holding bind mounts of the host's top-level
/// entries (so the container sees the host's files, as if they were its image) or of an
/// image directory's ([`MountPlan::with_image_root`]), a fresh `/proc`, its own `/tmp` and
/// `/dev/shm` (tmpfs), and the pod's mounts on top. Paths that do not exist are created
/// inside the container only: on the tmpfs root, or in a tmpfs overlay over the directory
/// that would hold them. Nothing on the host is modified.
#[derive(Debug)]
pub struct MountPlan {
    root: PathBuf,
    /// Where the container's files come from: `/` (the host) or an image directory. `/dev`
    /// and `/proc` come from the host either way.
    base: PathBuf,
    ops: Vec<Op>,
    /// Container paths we made: top-level entries, created directories and files.
    made: Vec<(PathBuf, Kind)>,
    /// Directories whose content is private storage (tmpfs, created): only what we make
    /// exists in them.
    private: Vec<PathBuf>,
    /// Host directories overlaid: the host's content shows, new entries are private.
    overlays: Vec<PathBuf>,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Dir,
    File,
    Link(PathBuf),
}

/// What a path of the container is when the plan runs.
struct Resolved {
    /// The longest existing prefix, symlinks resolved.
    existing: PathBuf,
    /// Its kind.
    kind: Option<Kind>,
    /// What is missing after it.
    missing: Vec<std::ffi::OsString>,
}

impl MountPlan {
    /// A plan whose root is mounted on `root` (an empty directory on the host), showing the
    /// host's files.
    pub fn new(root: &Path) -> std::io::Result<MountPlan> {
        Self::with_base(root, Path::new("/"))
    }

    /// A plan showing only the files of the host directory `image` (as a container from an
    /// image `FROM scratch` holding them would), with the host's `/dev`, a fresh `/proc` and
    /// a private `/tmp`: nothing else of the host, no shared libraries nor shell unless the
    /// image has them.
    pub fn with_image_root(root: &Path, image: &Path) -> std::io::Result<MountPlan> {
        Self::with_base(root, image)
    }

    fn with_base(root: &Path, base: &Path) -> std::io::Result<MountPlan> {
        std::fs::create_dir_all(root)?;
        let mut p = MountPlan {
            root: root.to_path_buf(),
            base: base.to_path_buf(),
            ops: vec![Op::Private],
            made: Vec::new(),
            private: vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")],
            overlays: Vec::new(),
        };
        p.ops.push(Op::Mount {
            src: Some(cstr("tmpfs")),
            dst: cstr(root),
            fstype: Some(cstr("tmpfs")),
            flags: 0,
            data: Some(cstr("mode=755")),
        });
        let mut names: Vec<_> = std::fs::read_dir(base)?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        if base != Path::new("/") {
            // What a container runtime gives every container, whatever its image.
            names.extend(["dev", "proc", "tmp"].map(std::ffi::OsString::from));
        }
        names.sort();
        names.dedup();
        for name in names {
            let cpath = Path::new("/").join(&name);
            // The runtime's own entries an image lacks come from the host.
            let src = Some(p.source(&cpath))
                .filter(|s| s.symlink_metadata().is_ok())
                .unwrap_or_else(|| cpath.clone());
            let host = root.join(&name);
            let meta = std::fs::symlink_metadata(&src)?;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&src)?;
                p.ops.push(Op::Symlink(cstr(&target), cstr(&host)));
                p.made.push((cpath, Kind::Link(target)));
                continue;
            }
            let nm = name.to_string_lossy();
            let dir = |p: &mut MountPlan,
                       fs_src: Option<&str>,
                       fstype: Option<&str>,
                       flags,
                       data: Option<String>| {
                p.ops.push(Op::Mkdir(cstr(&host)));
                p.ops.push(Op::Mount {
                    src: Some(cstr(
                        fs_src.map(PathBuf::from).unwrap_or_else(|| src.clone()),
                    )),
                    dst: cstr(&host),
                    fstype: fstype.map(cstr),
                    flags,
                    data: data.map(cstr),
                });
            };
            match nm.as_ref() {
                "proc" => dir(
                    &mut p,
                    Some("proc"),
                    Some("proc"),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    None,
                ),
                "tmp" => dir(
                    &mut p,
                    Some("tmpfs"),
                    Some("tmpfs"),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    Some("mode=1777".into()),
                ),
                _ if meta.is_dir() => {
                    dir(&mut p, None, None, libc::MS_BIND | libc::MS_REC, None);
                    if nm == "dev" {
                        let shm = host.join("shm");
                        p.ops.push(Op::Mkdir(cstr(&shm)));
                        p.ops.push(Op::Mount {
                            src: Some(cstr("shm")),
                            dst: cstr(&shm),
                            fstype: Some(cstr("tmpfs")),
                            flags: libc::MS_NOSUID | libc::MS_NODEV,
                            data: Some(cstr("mode=1777,size=64m")),
                        });
                        p.made.push((PathBuf::from("/dev/shm"), Kind::Dir));
                    }
                }
                _ => {
                    p.ops.push(Op::Touch(cstr(&host)));
                    p.ops.push(Op::Mount {
                        src: Some(cstr(&src)),
                        dst: cstr(&host),
                        fstype: None,
                        flags: libc::MS_BIND,
                        data: None,
                    });
                    p.made.push((cpath, Kind::File));
                    continue;
                }
            }
            p.made.push((cpath, Kind::Dir));
        }
        Ok(p)
    }

    /// Where the container path `cpath` of the base file system is on the host.
    fn source(&self, cpath: &Path) -> PathBuf {
        let from_host = ["/dev", "/proc"].iter().any(|d| cpath.starts_with(d));
        match cpath.strip_prefix("/") {
            Ok(rel) if !from_host && self.base != Path::new("/") => self.base.join(rel),
            _ => cpath.to_path_buf(),
        }
    }

    fn host(&self, cpath: &Path) -> PathBuf {
        let rel = cpath.strip_prefix("/").unwrap_or(cpath);
        if rel.as_os_str().is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    /// Whether entries of `dir` come from the host (a bound or overlaid host directory)
    /// rather than only from what we made.
    fn host_backed(&self, dir: &Path) -> bool {
        if dir == Path::new("/") {
            return false;
        }
        for a in dir.ancestors() {
            if self.overlays.iter().any(|o| o == a) {
                return true;
            }
            if self.private.iter().any(|p| p == a) {
                return false;
            }
        }
        true
    }

    /// The kind of the container path `p` (`None`: does not exist).
    fn kind(&self, p: &Path) -> Option<Kind> {
        if p == Path::new("/") {
            return Some(Kind::Dir);
        }
        if let Some((_, k)) = self.made.iter().rev().find(|(m, _)| m == p) {
            return Some(k.clone());
        }
        let parent = p.parent()?;
        if !self.host_backed(parent) {
            return None;
        }
        let src = self.source(p);
        let m = std::fs::symlink_metadata(&src).ok()?;
        Some(if m.file_type().is_symlink() {
            Kind::Link(std::fs::read_link(&src).ok()?)
        } else if m.is_dir() {
            Kind::Dir
        } else {
            Kind::File
        })
    }

    /// Follows `path` through the container's view (symlinks included).
    fn resolve(&self, path: &Path) -> Result<Resolved, String> {
        if !path.is_absolute() {
            return Err(format!("{} is not an absolute path", path.display()));
        }
        let comps = |p: &Path| -> Vec<std::ffi::OsString> {
            p.components()
                .filter_map(|c| match c {
                    Component::Normal(n) => Some(n.to_os_string()),
                    Component::ParentDir => Some("..".into()),
                    _ => None,
                })
                .collect()
        };
        let mut todo = comps(path);
        todo.reverse();
        let mut cur = PathBuf::from("/");
        let mut hops = 0;
        while let Some(c) = todo.pop() {
            if c == ".." {
                cur.pop();
                continue;
            }
            let next = cur.join(&c);
            match self.kind(&next) {
                Some(Kind::Link(target)) => {
                    hops += 1;
                    if hops > 40 {
                        return Err(format!("too many symbolic links in {}", path.display()));
                    }
                    if target.is_absolute() {
                        cur = PathBuf::from("/");
                    }
                    let mut t = comps(&target);
                    t.reverse();
                    todo.extend(t);
                }
                Some(_) => cur = next,
                None => {
                    let mut missing = vec![c];
                    while let Some(m) = todo.pop() {
                        missing.push(m);
                    }
                    if missing.iter().any(|m| m == "..") {
                        return Err(format!(
                            "{} climbs out of a missing directory",
                            path.display()
                        ));
                    }
                    let kind = self.kind(&cur);
                    return Ok(Resolved {
                        existing: cur,
                        kind,
                        missing,
                    });
                }
            }
        }
        let kind = self.kind(&cur);
        Ok(Resolved {
            existing: cur,
            kind,
            missing: Vec::new(),
        })
    }

    /// Makes new entries of the container directory `dir` possible: nothing when its
    /// content is private, else a tmpfs-backed overlay over the host directory.
    fn make_writable(&mut self, dir: &Path) -> Result<(), String> {
        if dir == Path::new("/") || !self.host_backed(dir) || self.overlays.iter().any(|o| o == dir)
        {
            return Ok(());
        }
        for forbidden in ["/proc", "/sys", "/dev"] {
            if dir.starts_with(forbidden) {
                return Err(format!(
                    "exec mode cannot create paths under {forbidden} (wanted inside {})",
                    dir.display()
                ));
            }
        }
        let n = self.overlays.len() + 1;
        let base = self.root.join(format!(".muster-exec/o{n}"));
        let (up, work) = (base.join("upper"), base.join("work"));
        if n == 1 {
            self.ops
                .push(Op::Mkdir(cstr(self.root.join(".muster-exec"))));
        }
        for d in [&base, &up, &work] {
            self.ops.push(Op::Mkdir(cstr(d)));
        }
        let h = self.host(dir);
        let data = format!(
            "lowerdir={},upperdir={},workdir={}",
            h.display(),
            up.display(),
            work.display()
        );
        self.ops.push(Op::Mount {
            src: Some(cstr("overlay")),
            dst: cstr(&h),
            fstype: Some(cstr("overlay")),
            flags: 0,
            data: Some(cstr(data)),
        });
        self.overlays.push(dir.to_path_buf());
        Ok(())
    }

    fn create_missing(&mut self, r: Resolved, last_is_file: bool) -> Result<PathBuf, String> {
        if r.missing.is_empty() {
            return Ok(r.existing);
        }
        if r.kind != Some(Kind::Dir) {
            return Err(format!("{} is not a directory", r.existing.display()));
        }
        self.make_writable(&r.existing)?;
        let mut cur = r.existing;
        let n = r.missing.len();
        for (i, m) in r.missing.iter().enumerate() {
            cur = cur.join(m);
            if i + 1 == n && last_is_file {
                self.ops.push(Op::Touch(cstr(self.host(&cur))));
                self.made.push((cur.clone(), Kind::File));
            } else {
                self.ops.push(Op::Mkdir(cstr(self.host(&cur))));
                self.made.push((cur.clone(), Kind::Dir));
                self.private.push(cur.clone());
            }
        }
        Ok(cur)
    }

    /// Ensures the directory `dir` exists in the container; returns its resolved path.
    pub fn ensure_dir(&mut self, dir: &Path) -> Result<PathBuf, String> {
        let r = self.resolve(dir)?;
        self.create_missing(r, false)
    }

    /// Ensures the file `file` exists in the container (to mount over); returns its path.
    pub fn ensure_file(&mut self, file: &Path) -> Result<PathBuf, String> {
        let r = self.resolve(file)?;
        self.create_missing(r, true)
    }

    /// Bind-mounts the host path `src` at the container path `dst` (created if missing).
    pub fn bind(&mut self, src: &Path, dst: &Path, read_only: bool) -> Result<(), String> {
        let is_dir = std::fs::metadata(src)
            .map_err(|e| format!("{}: {e}", src.display()))?
            .is_dir();
        let at = if is_dir {
            self.ensure_dir(dst)?
        } else {
            self.ensure_file(dst)?
        };
        let h = self.host(&at);
        self.ops.push(Op::Mount {
            src: Some(cstr(src)),
            dst: cstr(&h),
            fstype: None,
            flags: libc::MS_BIND | libc::MS_REC,
            data: None,
        });
        if read_only {
            self.ops.push(Op::Mount {
                src: None,
                dst: cstr(&h),
                fstype: None,
                flags: libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                data: None,
            });
        }
        Ok(())
    }

    /// A tmpfs at the container path `dst`.
    pub fn tmpfs(&mut self, dst: &Path, options: &str) -> Result<(), String> {
        let at = self.ensure_dir(dst)?;
        let h = self.host(&at);
        self.ops.push(Op::Mount {
            src: Some(cstr("tmpfs")),
            dst: cstr(&h),
            fstype: Some(cstr("tmpfs")),
            flags: libc::MS_NOSUID | libc::MS_NODEV,
            data: Some(cstr(options)),
        });
        self.private.push(at);
        Ok(())
    }

    /// Human descriptions of the steps (for error messages).
    pub fn describe(&self) -> Vec<String> {
        self.ops.iter().map(Op::describe).collect()
    }

    fn finish(mut self, cwd: &Path) -> Result<Vec<Op>, String> {
        let cwd = self.ensure_dir(cwd)?;
        let old = self.root.join(".oldroot");
        self.ops.push(Op::Mkdir(cstr(&old)));
        self.ops.push(Op::Pivot(cstr(&self.root), cstr(&old)));
        self.ops.push(Op::Chdir(cstr(&cwd)));
        Ok(self.ops)
    }
}

/// What to run.
#[derive(Debug)]
pub struct Spec {
    /// Program and arguments (the program is looked up in the container's `PATH`).
    pub argv: Vec<String>,
    /// The environment.
    pub env: Vec<(String, String)>,
    /// Working directory inside the container.
    pub cwd: PathBuf,
    /// Host name (UTS namespace).
    pub hostname: String,
    /// Where stdout and stderr go (appended).
    pub log: PathBuf,
}

/// A running container.
pub struct Running {
    child: tokio::process::Child,
    relay: i32,
}

/// How a container ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// Exit code as the runtime reports it (128 + signal when killed).
    pub code: i32,
}

impl Running {
    /// Sends `sig` to the container (the relay forwards it to the container's process group;
    /// SIGKILL ends the relay and with it every process of the container).
    pub fn signal(&self, sig: i32) {
        if self.relay > 0 {
            // SAFETY: plain kill(2) on our own child.
            unsafe {
                libc::kill(self.relay, sig);
            }
        }
    }

    /// Waits for the container to end.
    pub async fn wait(&mut self) -> Ended {
        match self.child.wait().await {
            Ok(s) => Ended {
                code: s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9)),
            },
            Err(_) => Ended { code: 137 },
        }
    }
}

/// Why a container did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The namespaces or mounts could not be set up.
    #[error("setting up the container failed while {step}: {error}")]
    Setup {
        /// The failing step.
        step: String,
        /// The system error.
        error: std::io::Error,
    },
    /// The command could not be executed.
    #[error("exec: \"{program}\": {error}")]
    Exec {
        /// `argv[0]`.
        program: String,
        /// The system error.
        error: std::io::Error,
    },
    /// Preparing the plan failed.
    #[error("{0}")]
    Plan(String),
}

impl StartError {
    /// The message containerd would give (what `kubectl describe` shows as the reason).
    pub fn runtime_message(&self) -> String {
        match self {
            StartError::Exec { program, error } => {
                let what = if error.kind() == std::io::ErrorKind::NotFound {
                    "executable file not found in $PATH".to_string()
                } else {
                    error.to_string()
                };
                format!(
                    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: \"{program}\": {what}: unknown"
                )
            }
            other => format!("failed to create containerd task: {other}"),
        }
    }
}

static FIRST: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let g = FIRST.load(Ordering::Relaxed);
    if g > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(-g, sig);
        }
    }
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Runs the relay part: unshare, host name, fork. Returns in the container's first process.
///
/// # Safety
/// Called between fork and exec: async-signal-safe calls only, no allocation.
unsafe fn relay(hostname: &CString) -> std::io::Result<()> {
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::CLONE_NEWPID) != 0 {
            return Err(errno());
        }
        let h = hostname.as_bytes();
        if libc::sethostname(h.as_ptr().cast(), h.len()) != 0 {
            return Err(errno());
        }
        let g = libc::fork();
        if g < 0 {
            return Err(errno());
        }
        if g == 0 {
            return Ok(());
        }
        // The relay: hold nothing open (std's error pipe above all), forward signals, wait.
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            for fd in 3..1024 {
                libc::close(fd);
            }
        }
        FIRST.store(g, Ordering::Relaxed);
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = forward as extern "C" fn(libc::c_int) as usize;
        act.sa_flags = libc::SA_RESTART;
        for s in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::sigaction(s, &act, std::ptr::null_mut());
        }
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        loop {
            let mut status = 0;
            let r = libc::waitpid(g, &mut status, 0);
            if r == g {
                if libc::WIFEXITED(status) {
                    libc::_exit(libc::WEXITSTATUS(status));
                }
                if libc::WIFSIGNALED(status) {
                    libc::_exit(128 + libc::WTERMSIG(status));
                }
            } else if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(255);
            }
        }
    }
}

/// Runs the plan in the container's first process.
///
/// # Safety
/// Called between fork and exec: async-signal-safe calls only, no allocation.
unsafe fn first(ops: &[Op], report: libc::c_int) -> std::io::Result<()> {
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        libc::setsid();
        for (i, op) in ops.iter().enumerate() {
            let r = match op {
                Op::Private => libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ),
                Op::Mount {
                    src,
                    dst,
                    fstype,
                    flags,
                    data,
                } => libc::mount(
                    src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                    dst.as_ptr(),
                    fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                    *flags,
                    data.as_ref()
                        .map_or(std::ptr::null(), |s| s.as_ptr().cast()),
                ),
                Op::Mkdir(p) => {
                    let r = libc::mkdir(p.as_ptr(), 0o755);
                    if r != 0 && *libc::__errno_location() == libc::EEXIST {
                        0
                    } else {
                        r
                    }
                }
                Op::Touch(p) => {
                    let fd = libc::open(
                        p.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    if fd >= 0 {
                        libc::close(fd);
                        0
                    } else {
                        -1
                    }
                }
                Op::Symlink(t, l) => libc::symlink(t.as_ptr(), l.as_ptr()),
                Op::Pivot(root, old) => {
                    let mut r = libc::syscall(libc::SYS_pivot_root, root.as_ptr(), old.as_ptr())
                        as libc::c_int;
                    if r == 0 {
                        r = libc::chdir(c"/".as_ptr());
                    }
                    if r == 0 {
                        r = libc::umount2(c"/.oldroot".as_ptr(), libc::MNT_DETACH);
                    }
                    if r == 0 {
                        r = libc::rmdir(c"/.oldroot".as_ptr());
                    }
                    r
                }
                Op::Chdir(p) => libc::chdir(p.as_ptr()),
            };
            if r != 0 {
                let e = errno();
                let idx = (i as u32).to_ne_bytes();
                libc::write(report, idx.as_ptr().cast(), idx.len());
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Starts a container. Must run on a thread that outlives it (a runtime worker, not a
/// blocking-pool thread): the relay dies with the thread that forked it.
pub fn start(spec: Spec, plan: MountPlan) -> Result<Running, StartError> {
    let ops = plan.finish(&spec.cwd).map_err(StartError::Plan)?;
    let steps: Vec<String> = ops.iter().map(Op::describe).collect();
    let host = cstr(&spec.hostname);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .map_err(|e| StartError::Plan(format!("opening the log {}: {e}", spec.log.display())))?;
    let log2 = log
        .try_clone()
        .map_err(|e| StartError::Plan(format!("log: {e}")))?;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(StartError::Plan(format!("pipe: {}", errno())));
    }
    // SAFETY: both descriptors are fresh and owned here.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let report = wr.as_raw_fd();
    let mut cmd = tokio::process::Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .kill_on_drop(true);
    // SAFETY: the closure only makes async-signal-safe system calls on data prepared above.
    unsafe {
        cmd.pre_exec(move || {
            relay(&host)?;
            first(&ops, report)
        });
    }
    let res = cmd.spawn();
    drop(wr);
    match res {
        Ok(child) => {
            let relay = child.id().map_or(0, |p| p as i32);
            Ok(Running { child, relay })
        }
        Err(error) => {
            let mut idx = [0u8; 4];
            // SAFETY: reading into a local buffer from our own pipe.
            let n = unsafe { libc::read(rd.as_raw_fd(), idx.as_mut_ptr().cast(), 4) };
            if n == 4 {
                let i = u32::from_ne_bytes(idx) as usize;
                return Err(StartError::Setup {
                    step: steps.get(i).cloned().unwrap_or_else(|| format!("step {i}")),
                    error,
                });
            }
            if matches!(
                error.raw_os_error(),
                Some(libc::EPERM | libc::EINVAL | libc::ENOSPC)
            ) {
                return Err(StartError::Setup {
                    step: "creating the mount, UTS and PID namespaces (exec mode needs root)"
                        .into(),
                    error,
                });
            }
            Err(StartError::Exec {
                program: spec.argv[0].clone(),
                error,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(p: &MountPlan) -> Vec<String> {
        p.describe()
    }

    #[test]
    fn missing_paths_are_made_inside_the_container_only() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        let mut p = MountPlan::new(&root).unwrap();
        let before = ops(&p).len();
        // A new top-level directory goes on the tmpfs root.
        assert_eq!(
            p.ensure_dir(Path::new("/muster/bin")).unwrap(),
            PathBuf::from("/muster/bin")
        );
        // A new file under a host directory needs an overlay over that directory.
        p.ensure_file(Path::new("/usr/local/bin/muster-step"))
            .unwrap();
        // Under /tmp (private) nothing needs an overlay.
        p.ensure_dir(Path::new("/tmp/a/b")).unwrap();
        let new: Vec<String> = ops(&p)[before..].to_vec();
        let overlays = new.iter().filter(|o| o.contains("(overlay")).count();
        assert_eq!(overlays, 1, "{new:#?}");
        assert!(
            new.iter()
                .any(|o| o.contains("(overlay") && o.contains("/root/usr/local/bin ")),
            "{new:#?}"
        );
        assert!(
            new.iter().all(|o| !o.contains("creating directory /usr")),
            "{new:#?}"
        );
        for o in &new {
            if let Some(path) = o
                .strip_prefix("creating directory ")
                .or(o.strip_prefix("creating file "))
            {
                assert!(
                    path.starts_with(root.to_str().unwrap()),
                    "made outside the container root: {o}"
                );
            }
        }
        // Existing paths need nothing; /proc, /sys and /dev refuse new paths.
        let n = ops(&p).len();
        p.ensure_dir(Path::new("/usr/bin")).unwrap();
        assert_eq!(ops(&p).len(), n);
        assert!(
            p.ensure_dir(Path::new("/proc/muster"))
                .unwrap_err()
                .contains("/proc")
        );
        assert!(
            p.ensure_file(Path::new("/dev/termination-log"))
                .unwrap_err()
                .contains("/dev")
        );
    }

    #[test]
    fn an_image_root_shows_only_the_images_files() {
        let d = tempfile::tempdir().unwrap();
        let image = d.path().join("image");
        std::fs::create_dir_all(image.join("usr/local/bin")).unwrap();
        std::fs::write(image.join("usr/local/bin/tool"), "").unwrap();
        std::os::unix::fs::symlink("usr/local/bin", image.join("bin")).unwrap();
        let root = d.path().join("root");
        let mut p = MountPlan::with_image_root(&root, &image).unwrap();
        let plan = ops(&p).join("\n");
        let r = root.display();
        // The image's entries, the host's /dev, a fresh /proc and /tmp; nothing else.
        assert!(
            plan.contains(&format!("linking {r}/bin to usr/local/bin")),
            "{plan}"
        );
        assert!(
            plan.contains(&format!("{}/usr on {r}/usr", image.display())),
            "{plan}"
        );
        assert!(plan.contains(&format!("/dev on {r}/dev")), "{plan}");
        for host_only in ["/etc", "/lib", "/var"] {
            assert!(
                !plan.contains(&format!("{r}{host_only}")),
                "{host_only}: {plan}"
            );
        }
        // Paths resolve in the image: its files exist, the host's do not.
        let n = ops(&p).len();
        assert_eq!(
            p.ensure_file(Path::new("/bin/tool")).unwrap(),
            PathBuf::from("/usr/local/bin/tool")
        );
        assert_eq!(ops(&p).len(), n);
        p.ensure_file(Path::new("/etc/hosts")).unwrap();
        let new = ops(&p)[n..].join("\n");
        assert!(
            new.contains(&format!("creating directory {r}/etc")),
            "{new}"
        );
        assert!(
            !new.contains("overlay"),
            "/etc is the container's own: {new}"
        );
    }

    #[test]
    fn symlinks_are_followed_as_the_container_sees_them() {
        let d = tempfile::tempdir().unwrap();
        let mut p = MountPlan::new(&d.path().join("root")).unwrap();
        // Debian's /bin is a link to usr/bin (and /var/run to /run) on the host: paths under
        // them resolve to the link target.
        if std::fs::symlink_metadata("/bin").is_ok_and(|m| m.file_type().is_symlink()) {
            assert_eq!(
                p.ensure_dir(Path::new("/bin")).unwrap(),
                PathBuf::from("/usr/bin")
            );
        }
        if std::fs::symlink_metadata("/var/run").is_ok_and(|m| m.file_type().is_symlink()) {
            let at = p.ensure_dir(Path::new("/var/run/muster/step")).unwrap();
            assert_eq!(at, PathBuf::from("/run/muster/step"));
        }
    }
}
