//! The shim's attach endpoint (protocol in `jail::attach`): a unix socket in the state dir,
//! served from the shim's poll loop. Output is fanned out to every attached client as it is
//! logged (the log never waits for a client: one that falls too far behind is dropped), input
//! from clients goes to the container's stdin (pipe or terminal), resizes to the terminal.

use super::super::attach::{ATTACH_SOCKET_FILE, AttachFrame, AttachHello, AttachReady};
use super::super::console::{BoundSocket, set_window_size};
use super::super::{ContainerStdio, JailError};
use super::logs::Stream;
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Output queued for one client before it counts as gone.
const MAX_CLIENT_BACKLOG: usize = 4 << 20;
/// Input queued for the container's stdin before clients are no longer read.
const MAX_STDIN_BACKLOG: usize = 1 << 20;
const MAX_CLIENTS: usize = 64;
const READ_CHUNK: usize = 64 * 1024;

pub(super) struct AttachServer {
    listener: Option<BoundSocket>,
    clients: Vec<Client>,
    stdin: Option<StdinSink>,
    terminal: Option<OwnedFd>,
    stdio: ContainerStdio,
}

struct StdinSink {
    file: File,
    pending: Vec<u8>,
    /// stdin_once: closed as soon as what is pending was written.
    close_when_flushed: bool,
}

struct Client {
    conn: UnixStream,
    input: Vec<u8>,
    output: Vec<u8>,
    hello: Option<AttachHello>,
    /// Granted stdin that has not ended yet.
    stdin: bool,
    gone: bool,
}

/// Which fds `poll_fds` registered, in order: listener, stdin, then the first `clients`.
pub(super) struct PollPlan {
    listener: bool,
    stdin: bool,
    clients: usize,
}

impl AttachServer {
    /// Listens on `<state_dir>/attach.sock`. `stdin` and `terminal` come from the started
    /// container.
    pub fn listen(
        state_dir: &Path,
        stdio: ContainerStdio,
        stdin: Option<OwnedFd>,
        terminal: Option<OwnedFd>,
    ) -> Result<AttachServer, JailError> {
        let listener = BoundSocket::listen(state_dir, ATTACH_SOCKET_FILE, 16)?;
        let stdin = stdin
            .map(|fd| {
                super::super::fds::set_nonblocking(&fd)?;
                Ok::<_, JailError>(StdinSink {
                    file: File::from(fd),
                    pending: Vec::new(),
                    close_when_flushed: false,
                })
            })
            .transpose()?;
        Ok(AttachServer {
            listener: Some(listener),
            clients: Vec::new(),
            stdin,
            terminal,
            stdio,
        })
    }

    /// Registers what to wait for; the plan says how `handle` reads the results.
    pub fn poll_fds<'a>(&'a self, fds: &mut Vec<PollFd<'a>>) -> PollPlan {
        let mut plan = PollPlan {
            listener: false,
            stdin: false,
            clients: self.clients.len(),
        };
        if let Some(listener) = &self.listener {
            fds.push(PollFd::new(listener.socket.as_fd(), PollFlags::POLLIN));
            plan.listener = true;
        }
        let stdin_full = match &self.stdin {
            Some(sink) if !sink.pending.is_empty() => {
                fds.push(PollFd::new(sink.file.as_fd(), PollFlags::POLLOUT));
                plan.stdin = true;
                sink.pending.len() >= MAX_STDIN_BACKLOG
            }
            _ => false,
        };
        for client in &self.clients {
            let mut flags = PollFlags::empty();
            if !stdin_full {
                flags |= PollFlags::POLLIN;
            }
            if !client.output.is_empty() {
                flags |= PollFlags::POLLOUT;
            }
            fds.push(PollFd::new(client.conn.as_fd(), flags));
        }
        plan
    }

    /// Acts on the poll results of the fds `plan` registered (`revents` in the same order).
    pub fn handle(&mut self, plan: &PollPlan, revents: &[PollFlags]) {
        let mut next = 0;
        let accept = plan.listener && !revents[next].is_empty();
        next += usize::from(plan.listener);
        if plan.stdin && !revents[next].is_empty() {
            self.flush_stdin();
        }
        next += usize::from(plan.stdin);
        for index in 0..plan.clients {
            let events = revents[next + index];
            if events.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                self.read_client(index);
            }
            if events.contains(PollFlags::POLLOUT) {
                flush_client(&mut self.clients[index]);
            }
        }
        self.flush_stdin();
        self.remove_gone();
        if accept {
            self.accept();
        }
    }

    /// Output of the container, for every client that asked for `stream`.
    pub fn broadcast(&mut self, stream: Stream, data: &[u8]) {
        let frame = match stream {
            Stream::Stdout => AttachFrame::Stdout(data.to_vec()),
            Stream::Stderr => AttachFrame::Stderr(data.to_vec()),
        };
        let mut encoded = None;
        for client in &mut self.clients {
            let wants = client.hello.is_some_and(|h| match stream {
                Stream::Stdout => h.stdout,
                Stream::Stderr => h.stderr,
            });
            if !wants || client.gone {
                continue;
            }
            let bytes = encoded.get_or_insert_with(|| frame.to_bytes());
            client.output.extend_from_slice(bytes);
            flush_client(client);
            if client.output.len() > MAX_CLIENT_BACKLOG {
                info!("dropping an attached client that does not keep up with the output");
                client.gone = true;
            }
        }
        self.remove_gone();
    }

    /// The container exited and its output was drained: stop listening, close its stdin, give
    /// clients until `deadline` to take what is queued for them, then hang up on them.
    pub fn finish(&mut self, deadline: Instant) {
        self.listener = None;
        self.stdin = None;
        loop {
            self.clients
                .retain(|c| !c.gone && c.hello.is_some() && !c.output.is_empty());
            let left = deadline.saturating_duration_since(Instant::now());
            if self.clients.is_empty() || left.is_zero() {
                break;
            }
            let mut fds: Vec<PollFd<'_>> = self
                .clients
                .iter()
                .map(|c| PollFd::new(c.conn.as_fd(), PollFlags::POLLOUT))
                .collect();
            let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
            let polled = poll(&mut fds, PollTimeout::from(ms));
            drop(fds);
            if matches!(polled, Err(err) if err != Errno::EINTR) {
                break;
            }
            for client in &mut self.clients {
                flush_client(client);
            }
        }
        if !self.clients.is_empty() {
            debug!(
                clients = self.clients.len(),
                "attached clients did not take all output"
            );
        }
        self.clients.clear();
    }

    fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        loop {
            match nix::sys::socket::accept4(
                std::os::fd::AsRawFd::as_raw_fd(&listener.socket),
                nix::sys::socket::SockFlag::SOCK_CLOEXEC
                    | nix::sys::socket::SockFlag::SOCK_NONBLOCK,
            ) {
                Ok(fd) => {
                    // SAFETY: accept4 returned a fresh descriptor nobody else owns.
                    let conn = unsafe { <UnixStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
                    if self.clients.len() >= MAX_CLIENTS {
                        warn!("too many attached clients; refusing one");
                        continue;
                    }
                    self.clients.push(Client {
                        conn,
                        input: Vec::new(),
                        output: Vec::new(),
                        hello: None,
                        stdin: false,
                        gone: false,
                    });
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return,
                Err(err) => {
                    warn!(%err, "cannot accept an attach connection");
                    return;
                }
            }
        }
    }

    fn read_client(&mut self, index: usize) {
        let mut buf = vec![0u8; READ_CHUNK];
        let client = &mut self.clients[index];
        match client.conn.read(&mut buf) {
            Ok(0) => client.gone = true,
            Ok(n) => client.input.extend_from_slice(&buf[..n]),
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(_) => client.gone = true,
        }
        loop {
            let client = &mut self.clients[index];
            let frame = match AttachFrame::decode(&client.input) {
                Ok(Some((frame, used))) => {
                    client.input.drain(..used);
                    frame
                }
                Ok(None) => break,
                Err(err) => {
                    warn!(%err, "attach protocol error; dropping the client");
                    client.gone = true;
                    break;
                }
            };
            self.on_frame(index, frame);
        }
        if self.clients[index].gone {
            self.stdin_ended(index);
        }
    }

    fn on_frame(&mut self, index: usize, frame: AttachFrame) {
        let has_hello = self.clients[index].hello.is_some();
        match frame {
            AttachFrame::Hello(hello) if !has_hello => {
                let open = self.stdin.as_ref().is_some_and(|s| !s.close_when_flushed);
                let ready = AttachReady {
                    stdin: hello.stdin && open,
                    tty: self.stdio.tty,
                };
                let client = &mut self.clients[index];
                client.hello = Some(hello);
                client.stdin = ready.stdin;
                AttachFrame::Ready(ready).encode(&mut client.output);
                flush_client(client);
            }
            AttachFrame::Stdin(data) if has_hello => {
                if let (true, Some(sink)) = (self.clients[index].stdin, &mut self.stdin) {
                    sink.pending.extend_from_slice(&data);
                }
            }
            AttachFrame::StdinEof if has_hello => self.stdin_ended(index),
            AttachFrame::Resize { width, height } if has_hello => {
                if let Some(terminal) = &self.terminal
                    && let Err(err) = set_window_size(terminal, width, height)
                {
                    debug!(%err, "resize");
                }
            }
            other => {
                warn!(frame = ?std::mem::discriminant(&other), "unexpected attach frame; dropping the client");
                self.clients[index].gone = true;
            }
        }
    }

    /// The client's stdin ended (EOF or hang-up): with stdin_once (and no tty, as containerd)
    /// that closes the container's stdin once what it sent was written.
    fn stdin_ended(&mut self, index: usize) {
        let client = &mut self.clients[index];
        if !std::mem::take(&mut client.stdin) {
            return;
        }
        if self.stdio.stdin_once
            && !self.stdio.tty
            && let Some(sink) = &mut self.stdin
        {
            sink.close_when_flushed = true;
        }
        self.flush_stdin();
    }

    fn flush_stdin(&mut self) {
        let Some(sink) = &mut self.stdin else {
            return;
        };
        while !sink.pending.is_empty() {
            match sink.file.write(&sink.pending) {
                Ok(n) => {
                    sink.pending.drain(..n);
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) if err.kind() == ErrorKind::WouldBlock => return,
                Err(err) => {
                    // EPIPE: the container closed its stdin.
                    debug!(%err, "the container's stdin is closed");
                    self.stdin = None;
                    return;
                }
            }
        }
        if sink.close_when_flushed {
            info!("closing the container's stdin (stdin_once)");
            self.stdin = None;
        }
    }

    fn remove_gone(&mut self) {
        for index in 0..self.clients.len() {
            if self.clients[index].gone {
                self.stdin_ended(index);
            }
        }
        self.clients.retain(|c| !c.gone);
    }
}

fn flush_client(client: &mut Client) {
    while !client.output.is_empty() && !client.gone {
        match client.conn.write(&client.output) {
            Ok(n) => {
                client.output.drain(..n);
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) if err.kind() == ErrorKind::WouldBlock => return,
            Err(_) => client.gone = true,
        }
    }
}

/// How long clients get for queued output after the container's output was drained.
pub(super) const FINISH_LIMIT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jail::attach::connect_attach;

    /// Runs the server's side of the poll loop until `done` (bounded: a hang guard, not a
    /// timing assertion).
    fn drive(server: &mut AttachServer, mut done: impl FnMut(&AttachServer) -> bool) {
        for _ in 0..2000 {
            if done(server) {
                return;
            }
            let mut fds = Vec::new();
            let plan = server.poll_fds(&mut fds);
            let _ = poll(&mut fds, PollTimeout::from(10u8));
            let revents: Vec<PollFlags> = fds
                .iter()
                .map(|fd| fd.revents().unwrap_or(PollFlags::empty()))
                .collect();
            drop(fds);
            server.handle(&plan, &revents);
        }
        panic!("the attach server did not get there");
    }

    fn read_frame(conn: &mut UnixStream, buf: &mut Vec<u8>) -> AttachFrame {
        loop {
            if let Some((frame, used)) = AttachFrame::decode(buf).unwrap() {
                buf.drain(..used);
                return frame;
            }
            let mut chunk = [0u8; 4096];
            let n = conn.read(&mut chunk).unwrap();
            assert!(n > 0, "the shim hung up");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    #[test]
    fn output_fans_out_by_stream_and_stdin_once_closes_stdin_after_the_first_client() {
        let dir = tempfile::tempdir().unwrap();
        let (stdin_r, stdin_w) = crate::jail::fds::cloexec_pipe().unwrap();
        let stdio = ContainerStdio {
            stdin: true,
            stdin_once: true,
            tty: false,
        };
        let mut server = AttachServer::listen(dir.path(), stdio, Some(stdin_w), None).unwrap();
        let mut first = connect_attach(dir.path()).unwrap();
        first
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let hello = AttachHello {
            stdin: true,
            stdout: true,
            stderr: false,
        };
        first
            .write_all(&AttachFrame::Hello(hello).to_bytes())
            .unwrap();
        drive(&mut server, |s| {
            s.clients.len() == 1 && s.clients[0].hello.is_some()
        });
        let mut buf = Vec::new();
        assert_eq!(
            read_frame(&mut first, &mut buf),
            AttachFrame::Ready(AttachReady {
                stdin: true,
                tty: false
            })
        );
        // Only the streams asked for.
        server.broadcast(Stream::Stderr, b"not for you");
        server.broadcast(Stream::Stdout, b"out");
        assert_eq!(
            read_frame(&mut first, &mut buf),
            AttachFrame::Stdout(b"out".to_vec())
        );
        // Input reaches the container's stdin; the client's EOF closes it (stdin_once).
        let mut input = AttachFrame::Stdin(b"typed".to_vec()).to_bytes();
        AttachFrame::StdinEof.encode(&mut input);
        first.write_all(&input).unwrap();
        drive(&mut server, |s| s.stdin.is_none());
        let mut got = String::new();
        File::from(stdin_r).read_to_string(&mut got).unwrap();
        assert_eq!(got, "typed");
        // A later client gets no stdin, and the first one still gets output.
        let mut second = connect_attach(dir.path()).unwrap();
        second
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        second
            .write_all(&AttachFrame::Hello(hello).to_bytes())
            .unwrap();
        drive(&mut server, |s| {
            s.clients.len() == 2 && s.clients[1].hello.is_some()
        });
        let mut buf2 = Vec::new();
        assert_eq!(
            read_frame(&mut second, &mut buf2),
            AttachFrame::Ready(AttachReady {
                stdin: false,
                tty: false
            })
        );
        server.broadcast(Stream::Stdout, b"both");
        for (conn, buf) in [(&mut first, &mut buf), (&mut second, &mut buf2)] {
            assert_eq!(read_frame(conn, buf), AttachFrame::Stdout(b"both".to_vec()));
        }
        // A client that talks before its hello is dropped; finish hangs up on the rest.
        let mut rude = connect_attach(dir.path()).unwrap();
        rude.write_all(&AttachFrame::StdinEof.to_bytes()).unwrap();
        drive(&mut server, |s| s.clients.len() == 3);
        drive(&mut server, |s| s.clients.len() == 2);
        server.finish(Instant::now() + Duration::from_secs(5));
        let mut rest = Vec::new();
        first.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        assert!(!dir.path().join(ATTACH_SOCKET_FILE).exists());
    }
}
