//! The shim's poll loop: copies output into the CRI log, reopens the log on SIGUSR1, reaps the
//! process (and any other child that ends up with us), then drains the pipes for a bounded time.

use super::attach::{AttachServer, FINISH_LIMIT};
use super::logs::{CriLog, Stream};
use crate::jail::JailError;
use crate::jail::fds::set_nonblocking;
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How long output is still copied after the process died. Background processes that outlive
/// it (containers sharing a pid namespace) may hold the pipes open forever.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
const READ_CHUNK: usize = 64 * 1024;

/// Runs until `pid` has been reaped and its output drained; returns its wait status. Output also
/// goes to the clients of `attach`, which is served from this loop.
pub(super) fn supervise(
    pid: i32,
    outputs: Vec<(Stream, OwnedFd)>,
    log: &mut CriLog,
    signals: &mut SignalFd,
    mut attach: Option<AttachServer>,
) -> Result<WaitStatus, JailError> {
    let mut outputs: Vec<(Stream, File)> = outputs
        .into_iter()
        .map(|(stream, fd)| {
            set_nonblocking(&fd)?;
            Ok((stream, File::from(fd)))
        })
        .collect::<Result<_, JailError>>()?;
    // pidfd readiness is exact even if SIGCHLD got lost; without pidfd a slow tick re-checks.
    let pidfd = pidfd_open(pid);
    let mut status: Option<WaitStatus> = None;
    let mut drain_until: Option<Instant> = None;
    let mut buf = vec![0u8; READ_CHUNK];
    let mut pause_reported = false;

    loop {
        if status.is_none() {
            status = reap(pid)?;
            if status.is_some() {
                drain_until = Some(Instant::now() + DRAIN_LIMIT);
            }
        }
        if let Some(deadline) = drain_until
            && (outputs.is_empty() || Instant::now() >= deadline)
        {
            break;
        }

        let timeout = match drain_until {
            Some(deadline) => millis(deadline.saturating_duration_since(Instant::now())),
            None if pidfd.is_some() => PollTimeout::NONE,
            None => millis(Duration::from_secs(1)),
        };
        let watch_pidfd = status.is_none() && pidfd.is_some();
        let mut fds = Vec::with_capacity(outputs.len() + 2);
        fds.push(PollFd::new(signals.as_fd(), PollFlags::POLLIN));
        if let (true, Some(pidfd)) = (watch_pidfd, &pidfd) {
            fds.push(PollFd::new(pidfd.as_fd(), PollFlags::POLLIN));
        }
        // A full log pauses the copying while the process runs (its writes block until the log
        // is rotated); its last output after exit is copied regardless.
        let paused = status.is_none() && log.is_full();
        if paused && !pause_reported {
            info!("the container log is at its maximum size: output waits for its rotation");
        }
        pause_reported = paused;
        let first_output = fds.len();
        if !paused {
            for (_, file) in &outputs {
                fds.push(PollFd::new(file.as_fd(), PollFlags::POLLIN));
            }
        }
        let first_attach = fds.len();
        let plan = attach.as_ref().map(|a| a.poll_fds(&mut fds));
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(err) => return Err(JailError::sys("poll", err)),
        }
        let revents: Vec<PollFlags> = fds
            .iter()
            .map(|fd| fd.revents().unwrap_or(PollFlags::empty()))
            .collect();
        let ready: Vec<bool> = revents.iter().map(|r| !r.is_empty()).collect();
        drop(fds);

        if ready[0] {
            handle_signals(signals, log);
        }
        if let (Some(attach), Some(plan)) = (&mut attach, &plan) {
            attach.handle(plan, &revents[first_attach..]);
        }
        // Outputs in reverse so removing a closed one keeps the other indices valid.
        for index in (0..outputs.len()).rev() {
            if paused || !ready[first_output + index] {
                continue;
            }
            let (stream, file) = &mut outputs[index];
            let stream = *stream;
            match file.read(&mut buf) {
                Ok(0) => {
                    log.finish(stream, chrono::Utc::now());
                    outputs.remove(index);
                }
                Ok(n) => {
                    log.push(stream, &buf[..n], chrono::Utc::now());
                    if let Some(attach) = &mut attach {
                        attach.broadcast(stream, &buf[..n]);
                    }
                }
                Err(err)
                    if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                // A terminal master reads EIO once no process holds the terminal any more.
                Err(err) if err.raw_os_error() == Some(libc::EIO) => {
                    log.finish(stream, chrono::Utc::now());
                    outputs.remove(index);
                }
                Err(err) => {
                    warn!(%err, stream = stream.as_str(), "cannot read container output");
                    log.finish(stream, chrono::Utc::now());
                    outputs.remove(index);
                }
            }
        }
    }
    if !outputs.is_empty() {
        info!("output still open {DRAIN_LIMIT:?} after the process exited; not waiting longer");
    }
    for (stream, _) in &outputs {
        log.finish(*stream, chrono::Utc::now());
    }
    if let Some(attach) = &mut attach {
        attach.finish(Instant::now() + FINISH_LIMIT);
    }
    status.ok_or_else(|| JailError::Container("supervision ended without an exit status".into()))
}

fn handle_signals(signals: &mut SignalFd, log: &mut CriLog) {
    // SIGCHLD needs no action here: the loop reaps at its top.
    while let Ok(Some(info)) = signals.read_signal() {
        if info.ssi_signo == Signal::SIGUSR1 as u32 {
            info!("reopening the container log");
            log.reopen();
        }
    }
}

/// Reaps every exited child; returns the status of `pid` once it is among them.
fn reap(pid: i32) -> Result<Option<WaitStatus>, JailError> {
    let mut main = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL)) {
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return Ok(main),
            Ok(status) => {
                if status.pid() == Some(Pid::from_raw(pid))
                    && matches!(status, WaitStatus::Exited(..) | WaitStatus::Signaled(..))
                {
                    main = Some(status);
                }
            }
            Err(Errno::EINTR) => {}
            Err(err) => return Err(JailError::sys("waitpid", err)),
        }
    }
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open returns a new fd we take ownership of, or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        info!(err = %std::io::Error::last_os_error(), "pidfd_open unavailable; polling for exit");
        return None;
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn millis(duration: Duration) -> PollTimeout {
    let ms = duration.as_millis().saturating_add(1).min(i32::MAX as u128) as i32;
    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
}
