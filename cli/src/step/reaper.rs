//! Running as a container's first process (PID 1): orphaned processes are re-parented to us
//! and must be reaped, and signals without a handler are ignored. As `tini` does, we fork:
//! the parent reaps every child and forwards signals to the child, which does the real work.

use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let c = CHILD.load(Ordering::Relaxed);
    if c > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe {
            libc::kill(c, sig);
        }
    }
}

/// Forks; returns in the child. The parent never returns: it exits with the child's status.
/// Must be called while the process has a single thread.
pub fn become_child() {
    // SAFETY: called before any other thread exists (before the async runtime starts).
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {}
        Ok(ForkResult::Parent { child }) => reap(child),
        Err(e) => eprintln!("muster-step: cannot fork a reaper ({e}); running as PID 1"),
    }
}

fn reap(child: Pid) -> ! {
    CHILD.store(child.as_raw(), Ordering::Relaxed);
    let act = SigAction::new(
        SigHandler::Handler(forward),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ] {
        // SAFETY: the handler only calls kill.
        let _ = unsafe { sigaction(s, &act) };
    }
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == child => std::process::exit(code),
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == child => {
                std::process::exit(128 + sig as i32)
            }
            Err(nix::errno::Errno::ECHILD) => std::process::exit(0),
            _ => {}
        }
    }
}
