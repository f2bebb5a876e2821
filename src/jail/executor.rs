//! The libcontainer workload executor used for every container and exec process: it runs in the
//! container process right before `execve`, after libcontainer set up namespaces, rootfs,
//! credentials and capabilities.

use super::error::error_chain;
use libcontainer::workload::default::DefaultExecutor;
use libcontainer::workload::{Executor, ExecutorError, ExecutorValidationError};
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, signal, sigprocmask};
use oci_spec::runtime::{LinuxSeccomp, Spec};
use std::os::fd::RawFd;

#[derive(Clone, Default)]
pub(crate) struct JailExecutor {
    /// Exec processes only: the pipe whose write end the helper holds. The process dies with the
    /// helper (PR_SET_PDEATHSIG) and checks the helper is still alive after arming it.
    pub helper_liveness: Option<(RawFd, RawFd)>,
    /// Container inits only: a close-on-exec pipe the shim reads; exec closes it, a failed exec
    /// writes its error there.
    pub exec_notify: Option<RawFd>,
    /// Exec processes only: the container's seccomp filter, loaded here because libcontainer's
    /// tenant does not (container inits get theirs from libcontainer).
    pub seccomp: Option<LinuxSeccomp>,
}

impl Executor for JailExecutor {
    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        // The shim ignores and blocks signals for itself; ignored dispositions and the mask
        // survive execve, so the workload would inherit them.
        reset_signals();
        if let Some((read_end, write_end)) = self.helper_liveness {
            tie_to_helper(read_end, write_end)?;
        }
        if let Some(profile) = &self.seccomp {
            load_seccomp(profile)?;
        }
        let result = DefaultExecutor {}.exec(spec);
        if let (Err(err), Some(fd)) = (&result, self.exec_notify) {
            let message = error_chain(err);
            // SAFETY: writing a buffer we own to an fd this process holds.
            unsafe { libc::write(fd, message.as_ptr().cast(), message.len()) };
        }
        result
    }

    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        DefaultExecutor {}.validate(spec)
    }
}

/// Loads `profile` for this process. Capabilities are already dropped here, so a process
/// without CAP_SYS_ADMIN needs no_new_privs first (the kernel's condition for an unprivileged
/// filter): an exec'd process of a filtered container then cannot gain privileges through
/// setuid binaries, where runc would load the filter before dropping capabilities instead.
fn load_seccomp(profile: &LinuxSeccomp) -> Result<(), ExecutorError> {
    let loaded = libcontainer::seccomp::initialize_seccomp(profile);
    let retried = match loaded {
        Err(_) if !nix::sys::prctl::get_no_new_privs().unwrap_or(true) => {
            nix::sys::prctl::set_no_new_privs().map_err(|e| {
                ExecutorError::Other(format!("cannot set no_new_privs for seccomp: {e}"))
            })?;
            libcontainer::seccomp::initialize_seccomp(profile)
        }
        other => other,
    };
    retried.map(drop).map_err(|e| {
        ExecutorError::Other(format!("cannot load the container's seccomp filter: {e}"))
    })
}

fn reset_signals() {
    for sig in Signal::iterator() {
        if matches!(sig, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: installing SIG_DFL has no handler code to be unsafe about.
        let _ = unsafe { signal(sig, SigHandler::SigDfl) };
    }
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
}

/// Arms SIGKILL-on-parent-death (set here because credential changes clear it), then checks the
/// helper did not die before: once our own copy of the write end is closed, the read end hangs
/// up exactly when the helper is gone.
fn tie_to_helper(read_end: RawFd, write_end: RawFd) -> Result<(), ExecutorError> {
    // SAFETY: plain prctl/close/poll syscalls on fds this process owns.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(ExecutorError::Other(format!(
                "cannot set parent-death signal: {}",
                std::io::Error::last_os_error()
            )));
        }
        libc::close(write_end);
        let mut pfd = libc::pollfd {
            fd: read_end,
            events: libc::POLLIN,
            revents: 0,
        };
        let ready = libc::poll(&mut pfd, 1, 0);
        libc::close(read_end);
        if ready > 0 && pfd.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
            libc::_exit(128 + libc::SIGKILL);
        }
    }
    Ok(())
}
