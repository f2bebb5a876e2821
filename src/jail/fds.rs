//! File-descriptor plumbing shared by the re-executed helpers.

use super::JailError;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A pipe with both ends close-on-exec: `(read, write)`.
pub(crate) fn cloexec_pipe() -> Result<(OwnedFd, OwnedFd), JailError> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|err| JailError::sys("pipe", err))
}

pub(crate) fn set_nonblocking(fd: &impl AsRawFd) -> Result<(), JailError> {
    let fd = fd.as_raw_fd();
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(|err| JailError::sys("fcntl", err))?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(|err| JailError::sys("fcntl", err))?;
    Ok(())
}

/// Takes ownership of an fd the spawner placed at `fd`, after checking it is open, and marks it
/// close-on-exec so it reaches no process we start.
pub(crate) fn take_inherited_fd(fd: RawFd) -> Result<OwnedFd, JailError> {
    // SAFETY: F_GETFD only inspects the descriptor table.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(JailError::io(
            format!("fd {fd} is not open"),
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the fd is open and nothing else in this fresh process owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain fcntl on an fd we own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(owned)
}

/// Closes every fd above `last` (whatever the parent leaked past its close-on-exec discipline).
pub(crate) fn close_fds_above(last: RawFd) {
    // SAFETY: called first thing in a fresh single-threaded process, before any fd above `last`
    // is owned by Rust code.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            (last + 1) as libc::c_uint,
            libc::c_uint::MAX,
            0,
        );
    }
}
