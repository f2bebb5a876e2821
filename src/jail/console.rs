//! Terminals for tty containers and tty execs, through libcontainer's console-socket mechanism:
//! the container process opens a pty pair on the container's own devpts (after pivot_root),
//! makes the slave its controlling terminal (it runs `setsid` first) and sends the master to the
//! socket we listen on. So `tty` inside says `/dev/pts/N` of the container's devpts, as with
//! runc; a pty allocated out here would belong to a devpts the container cannot see.
//!
//! Also: passing an fd over a unix socket (the exec helper hands the master to the runtime) and
//! setting a terminal's size.

use super::JailError;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr,
    accept4, bind, listen, recvmsg, sendmsg, socket,
};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A unix socket bound in a directory whose path may be longer than `sun_path` allows: the name
/// is bound through `/proc/self/fd/<dir fd>/<name>`. The socket file is removed on drop.
pub(crate) struct BoundSocket {
    pub socket: OwnedFd,
    path: PathBuf,
}

impl BoundSocket {
    /// A listening SOCK_STREAM socket at `dir/name` (replacing a stale file of that name).
    pub fn listen(dir: &Path, name: &str, backlog: i32) -> Result<BoundSocket, JailError> {
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        let socket = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .map_err(|err| JailError::sys("socket", err))?;
        let addr = short_addr(dir, name)?;
        bind(socket.as_raw_fd(), &addr.addr)
            .map_err(|err| JailError::sys(format!("cannot bind {}", path.display()), err))?;
        // Only the owner (root, or the mapped root) may connect.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(|err| JailError::io(format!("chmod {}", path.display()), err))?;
        let backlog = nix::sys::socket::Backlog::new(backlog)
            .map_err(|err| JailError::sys("listen backlog", err))?;
        listen(&socket, backlog).map_err(|err| JailError::sys("listen", err))?;
        Ok(BoundSocket { socket, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts one connection (non-blocking, close-on-exec), waiting at most `timeout`.
    pub fn accept(&self, timeout: Duration) -> Result<OwnedFd, JailError> {
        wait_readable(&self.socket, timeout, "a connection")?;
        let fd = accept4(
            self.socket.as_raw_fd(),
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        )
        .map_err(|err| JailError::sys("accept", err))?;
        // SAFETY: accept4 returned a fresh descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Waits for the container process to connect and send its pty master.
    pub fn receive_pty_master(&self, timeout: Duration) -> Result<OwnedFd, JailError> {
        let deadline = Instant::now() + timeout;
        let conn = self.accept(timeout)?;
        recv_fd(&conn, deadline.saturating_duration_since(Instant::now()))
    }
}

impl Drop for BoundSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// `/proc/self/fd/<fd>/<name>` with the directory fd that keeps it valid.
pub(crate) struct ShortAddr {
    _dir: OwnedFd,
    pub addr: UnixAddr,
}

pub(crate) fn short_addr(dir: &Path, name: &str) -> Result<ShortAddr, JailError> {
    let dir_fd: OwnedFd = std::fs::File::open(dir)
        .map_err(|err| JailError::io(format!("cannot open {}", dir.display()), err))?
        .into();
    let short = format!("/proc/self/fd/{}/{name}", dir_fd.as_raw_fd());
    let addr = UnixAddr::new(short.as_str())
        .map_err(|err| JailError::sys(format!("socket path {short}"), err))?;
    Ok(ShortAddr { _dir: dir_fd, addr })
}

fn wait_readable(fd: &impl AsFd, timeout: Duration, what: &str) -> Result<(), JailError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) if left.is_zero() => {
                return Err(JailError::io(
                    format!("waiting for {what}"),
                    std::io::Error::from(std::io::ErrorKind::TimedOut),
                ));
            }
            Ok(0) | Err(nix::errno::Errno::EINTR) => {}
            Ok(_) => return Ok(()),
            Err(err) => return Err(JailError::sys("poll", err)),
        }
    }
}

/// Sends `fd` over the unix socket `sock` (one byte of payload, the fd as SCM_RIGHTS).
pub(crate) fn send_fd(sock: &impl AsFd, fd: &impl AsFd) -> Result<(), JailError> {
    let fds = [fd.as_fd().as_raw_fd()];
    let iov = [IoSlice::new(b"m")];
    sendmsg::<UnixAddr>(
        sock.as_fd().as_raw_fd(),
        &iov,
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|err| JailError::sys("cannot pass the terminal", err))?;
    Ok(())
}

/// Receives one fd sent with SCM_RIGHTS on `sock`, waiting at most `timeout`. A peer that hangs
/// up first (the process died before it got a terminal) is an error.
pub fn recv_fd(sock: &impl AsFd, timeout: Duration) -> Result<OwnedFd, JailError> {
    let deadline = Instant::now() + timeout;
    loop {
        wait_readable(
            sock,
            deadline.saturating_duration_since(Instant::now()),
            "a terminal",
        )?;
        let mut buf = [0u8; 64];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 2]);
        let msg = match recvmsg::<UnixAddr>(
            sock.as_fd().as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(msg) => msg,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => continue,
            Err(err) => return Err(JailError::sys("cannot receive the terminal", err)),
        };
        let mut received: Vec<OwnedFd> = Vec::new();
        if let Ok(cmsgs) = msg.cmsgs() {
            for cmsg in cmsgs {
                if let ControlMessageOwned::ScmRights(fds) = cmsg {
                    // SAFETY: the kernel installed these descriptors for us alone.
                    received.extend(
                        fds.into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
        }
        if let Some(fd) = received.into_iter().next() {
            return Ok(fd);
        }
        if msg.bytes == 0 {
            return Err(JailError::Container(
                "the process ended before it sent its terminal".into(),
            ));
        }
    }
}

/// A connected pair of close-on-exec unix stream sockets.
pub(crate) fn socket_pair() -> Result<(OwnedFd, OwnedFd), JailError> {
    nix::sys::socket::socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|err| JailError::sys("socketpair", err))
}

/// Sets the size of the terminal behind `fd` (a pty master); the foreground process group gets
/// SIGWINCH from the kernel.
pub fn set_window_size(fd: &impl AsFd, width: u16, height: u16) -> Result<(), JailError> {
    let size = libc::winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which outlives the call.
    let rc = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), libc::TIOCSWINSZ, &size) };
    if rc < 0 {
        return Err(JailError::io(
            "cannot set the terminal size",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fds_cross_a_socket_pair_and_a_long_socket_path_binds() {
        let (a, b) = socket_pair().unwrap();
        let (r, w) = super::super::fds::cloexec_pipe().unwrap();
        send_fd(&a, &w).unwrap();
        drop(w);
        let got = recv_fd(&b, Duration::from_secs(5)).unwrap();
        nix::unistd::write(&got, b"x").unwrap();
        drop(got);
        let mut byte = [0u8; 2];
        assert_eq!(nix::unistd::read(r.as_raw_fd(), &mut byte).unwrap(), 1);
        // A peer that hangs up without an fd.
        drop(a);
        assert!(recv_fd(&b, Duration::from_secs(5)).is_err());

        let base = tempfile::tempdir().unwrap();
        let deep = base.path().join("d".repeat(100));
        std::fs::create_dir(&deep).unwrap();
        let bound = BoundSocket::listen(&deep, "x.sock", 1).unwrap();
        assert!(bound.path().as_os_str().len() > 108);
        let addr = short_addr(&deep, "x.sock").unwrap();
        let client = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        nix::sys::socket::connect(client.as_raw_fd(), &addr.addr).unwrap();
        bound.accept(Duration::from_secs(5)).unwrap();
        let path = bound.path().to_path_buf();
        drop(bound);
        assert!(!path.exists());
    }

    #[test]
    fn window_size_of_a_pty() {
        let pty = nix::pty::openpty(None, None).unwrap();
        set_window_size(&pty.master, 100, 40).unwrap();
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ writes one winsize into `size`.
        assert_eq!(
            unsafe { libc::ioctl(pty.slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) },
            0
        );
        assert_eq!((size.ws_col, size.ws_row), (100, 40));
        let (r, _w) = super::super::fds::cloexec_pipe().unwrap();
        assert!(set_window_size(&r, 1, 1).is_err());
    }
}
