//! Async plumbing between the jail's fds (pipes, a terminal master) and a session's streams.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub(super) type Reader = Box<dyn AsyncRead + Send + Unpin>;
pub(super) type Writer = Box<dyn AsyncWrite + Send + Unpin>;

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok(())
}

/// The read end of a pipe from the jail.
pub(super) fn pipe_reader(fd: OwnedFd) -> io::Result<Reader> {
    set_nonblocking(&fd)?;
    Ok(Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(
        fd,
    )?))
}

/// The write end of a pipe from the jail.
pub(super) fn pipe_writer(fd: OwnedFd) -> io::Result<Writer> {
    set_nonblocking(&fd)?;
    Ok(Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(fd)?))
}

/// Copies `from` to `to` until EOF. Once `to` fails (the client is gone) the rest is read and
/// dropped, so the process never blocks on a full pipe. `to` is dropped (closed) at the end.
pub(super) async fn pump_out(mut from: impl AsyncRead + Unpin, mut to: Option<Writer>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(writer) = &mut to
            && writer.write_all(&buf[..n]).await.is_err()
        {
            to = None;
        }
    }
    if let Some(mut writer) = to {
        let _ = writer.shutdown().await;
    }
}

/// Copies the client's stdin to `to` until EOF (or until the process closed its stdin), then
/// closes `to`: the process reads EOF.
pub(super) async fn pump_in(mut from: Reader, mut to: impl AsyncWrite + Unpin) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// A terminal master as a reader and a writer (two duplicates of it: tokio's pipe types poll
/// any fd that epoll takes, and a master reads EIO, an error that ends a pump, once nothing
/// holds the terminal).
pub(super) fn terminal_halves(master: &OwnedFd) -> io::Result<(Reader, Writer)> {
    set_nonblocking(master)?;
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(master.try_clone()?)?;
    let writer = tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(master.try_clone()?)?;
    Ok((Box::new(reader), Box::new(writer)))
}
