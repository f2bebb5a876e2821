//! `runp zygote`: a small single-threaded process the runtime starts once, which forks shims on
//! request instead of the runtime forking and exec'ing `runp shim` for each one.
//!
//! Why: the exec of this binary (loader, relocations, CPU feature probing) and the fork of a big
//! multi-threaded runtime cost about 3.5 ms per shim on a 2-core VM, twice per pod (infra and
//! container). A fork of the zygote, a fresh image with nothing in it, costs a fraction of that.
//!
//! A forked shim is what `runp shim <state_dir>` would be: its own session, stdin on /dev/null,
//! stdout/stderr on its `shim.log`, the report pipe on fd 3, nothing else open, default SIGCHLD
//! handling, and `<runp> shim <state_dir>` as its command line (see [`set_command_line`]: the
//! leftovers cleanup finds a dead shim's clones by it). The zygote ignores SIGCHLD, so the kernel
//! reaps its children; the runtime follows each shim through a pidfd. It exits when the runtime's
//! end of its socket closes, leaving the shims it forked running.

use super::channel;
use super::fds::{close_fds_above, take_inherited_fd};
use super::spawn::{Output, SHIM_REPORT_FD, open_shim_log, reexec};
use super::{JailError, ShimReport, SpawnedShim};
use nix::sys::signal::{SigHandler, Signal, signal};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, setsockopt, socketpair, sockopt,
};
use nix::sys::time::TimeVal;
use std::ffi::{OsStr, OsString};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// fd of `runp zygote`'s end of its socket.
pub(crate) const ZYGOTE_FD: RawFd = 3;
/// Length of the placeholder argument the zygote is started with: the room its children write
/// their `<runp> shim <state_dir>` command line into (a state dir is a path, so at most
/// PATH_MAX).
/// The subcommand the zygote is re-executed as (its argv[1]).
const ZYGOTE_ARG: &str = "zygote";

/// Whether a `/proc/<pid>/cmdline` is a shim zygote's (tests and benches find zygotes so).
pub fn is_zygote_cmdline(cmdline: &[u8]) -> bool {
    cmdline.split(|b| *b == 0).nth(1) == Some(ZYGOTE_ARG.as_bytes())
}

const TITLE_ROOM: usize = 4096 + 256;
/// How long the runtime waits for the zygote to answer a request (it only forks).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why [`Zygote::spawn_shim`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ZygoteError {
    /// The request never reached a zygote (it exited or was killed): no shim was started, so
    /// the caller may start one another way.
    #[error("the shim zygote is gone: {0}")]
    Gone(JailError),
    /// The request was sent: a shim may have been started, and the caller must not start
    /// another. A shim whose report finds nobody stops what it started.
    #[error(transparent)]
    Failed(JailError),
}

/// The runtime's handle on its zygote. Dropping it closes the socket, and the zygote exits.
pub struct Zygote {
    pid: i32,
    socket: Mutex<OwnedFd>,
    /// A request went unanswered: a late answer could be taken for the next one's, so this
    /// zygote takes no more requests.
    unsynced: AtomicBool,
}

impl Zygote {
    /// Starts `runp zygote` as a child of this process, in a session of its own. The caller's
    /// reaper reaps it.
    pub fn start(runp_exe: &Path) -> Result<Zygote, JailError> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|err| JailError::sys("socketpair", err))?;
        setsockopt(
            &ours,
            sockopt::ReceiveTimeout,
            &TimeVal::new(ANSWER_TIMEOUT.as_secs() as _, 0),
        )
        .map_err(|err| JailError::sys("SO_RCVTIMEO", err))?;
        let room = OsString::from("_".repeat(TITLE_ROOM));
        let pid = reexec(
            runp_exe,
            &[OsStr::new(ZYGOTE_ARG), &room],
            &[(&theirs, ZYGOTE_FD)],
            Output {
                stdout: Stdio::null(),
                stderr: Stdio::inherit(),
            },
            true,
        )?;
        Ok(Zygote {
            pid,
            socket: Mutex::new(ours),
            unsynced: AtomicBool::new(false),
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// As [`super::spawn_shim`], but forked by the zygote.
    pub fn spawn_shim(&self, state_dir: &Path) -> Result<SpawnedShim, ZygoteError> {
        let shim_log = open_shim_log(state_dir).map_err(ZygoteError::Failed)?;
        let (report_tx, report_rx) =
            channel::pipe::<ShimReport>().map_err(|err| ZygoteError::Failed(err.into()))?;
        let report_tx = report_tx.into_owned_fd();
        let path = state_dir.as_os_str().as_bytes();
        let fds = [report_tx.as_raw_fd(), shim_log.as_raw_fd()];
        let socket = self.socket.lock().unwrap_or_else(|e| e.into_inner());
        if self.unsynced.load(Ordering::Relaxed) {
            return Err(ZygoteError::Gone(JailError::Container(
                "an earlier request to the shim zygote went unanswered".into(),
            )));
        }
        sendmsg::<()>(
            socket.as_raw_fd(),
            &[IoSlice::new(path)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(|err| ZygoteError::Gone(JailError::sys("request to the shim zygote", err)))?;
        // Only the shim may hold the write end: its death then reads as EOF.
        drop(report_tx);
        let mut answer = [0u8; 4];
        let read = nix::unistd::read(socket.as_raw_fd(), &mut answer);
        if read != Ok(answer.len()) {
            self.unsynced.store(true, Ordering::Relaxed);
            let err = match read {
                Err(err) => JailError::sys("the shim zygote's answer", err),
                Ok(_) => JailError::Container("the shim zygote exited before answering".into()),
            };
            return Err(ZygoteError::Failed(err));
        }
        match i32::from_le_bytes(answer) {
            pid if pid > 0 => Ok(SpawnedShim {
                pid,
                report: report_rx,
            }),
            errno => Err(ZygoteError::Failed(JailError::sys(
                "the shim zygote cannot fork",
                nix::Error::from_raw(-errno),
            ))),
        }
    }
}

/// Entry point of `runp zygote`; returns the process exit code once the runtime's end of the
/// socket closes. `init_shim_logging` is what `runp shim` runs once its fds are sorted out.
pub fn run_zygote(init_shim_logging: fn()) -> i32 {
    let socket = match take_inherited_fd(ZYGOTE_FD) {
        Ok(fd) => fd,
        Err(err) => {
            eprintln!("runp zygote: {err} (the zygote is started by the runtime, not by hand)");
            return 2;
        }
    };
    close_fds_above(ZYGOTE_FD);
    // SAFETY: SIG_IGN installs no handler code. Ignored SIGCHLD: the kernel reaps our children.
    if let Err(err) = unsafe { signal(Signal::SIGCHLD, SigHandler::SigIgn) } {
        eprintln!("runp zygote: cannot ignore SIGCHLD: {err}");
        return 1;
    }
    let mut path = vec![0u8; libc::PATH_MAX as usize + 1];
    loop {
        let mut space = nix::cmsg_space!([RawFd; 2]);
        let mut iov = [IoSliceMut::new(&mut path)];
        let (len, fds) = match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                let mut fds = Vec::new();
                for cmsg in msg.cmsgs().into_iter().flatten() {
                    if let ControlMessageOwned::ScmRights(received) = cmsg {
                        // SAFETY: SCM_RIGHTS just installed these fds in our table.
                        fds.extend(
                            received
                                .into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                (msg.bytes, fds)
            }
            Err(nix::Error::EINTR) => continue,
            // The runtime closed its end with our late answer unread (after it timed out).
            Err(nix::Error::ECONNRESET) => return 0,
            Err(err) => {
                eprintln!("runp zygote: {err}");
                return 1;
            }
        };
        if len == 0 && fds.is_empty() {
            return 0; // the runtime closed its end
        }
        let answer = match <[OwnedFd; 2]>::try_from(fds) {
            Ok([report, log]) if len > 0 && len < path.len() => {
                let state_dir = PathBuf::from(OsStr::from_bytes(&path[..len]));
                fork_shim(&socket, state_dir, report, log, init_shim_logging)
            }
            _ => -libc::EINVAL,
        };
        match nix::unistd::write(&socket, &answer.to_le_bytes()) {
            Ok(_) => {}
            // The runtime closed its end while we forked: the end of the zygote's job.
            Err(nix::Error::EPIPE | nix::Error::ECONNRESET) => return 0,
            Err(err) => {
                eprintln!("runp zygote: cannot answer: {err}");
                return 1;
            }
        }
    }
}

/// Forks a shim for `state_dir`; returns its pid, or `-errno`. The received fds are closed here
/// on return, so the shim is their only holder.
fn fork_shim(
    socket: &OwnedFd,
    state_dir: PathBuf,
    report: OwnedFd,
    log: OwnedFd,
    init_shim_logging: fn(),
) -> i32 {
    // SAFETY: the zygote is single-threaded (it never starts a thread or runtime), so the child
    // may do anything the parent could.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Parent { child }) => child.as_raw(),
        Ok(nix::unistd::ForkResult::Child) => {
            let code = match become_shim(socket, &state_dir, report, log) {
                Ok(()) => super::run_shim(&state_dir, init_shim_logging),
                Err(err) => {
                    eprintln!(
                        "runp zygote: cannot become the shim of {}: {err}",
                        state_dir.display()
                    );
                    1
                }
            };
            std::process::exit(code)
        }
        Err(err) => -(err as i32),
    }
}

/// In the forked child: the fds, session, signals and command line of `runp shim <state_dir>`.
fn become_shim(
    socket: &OwnedFd,
    state_dir: &Path,
    report: OwnedFd,
    log: OwnedFd,
) -> Result<(), JailError> {
    // SAFETY: SIG_DFL installs no handler code. The shim reads SIGCHLD from a signalfd.
    unsafe { signal(Signal::SIGCHLD, SigHandler::SigDfl) }
        .map_err(|err| JailError::sys("cannot restore SIGCHLD", err))?;
    nix::unistd::setsid().map_err(|err| JailError::sys("setsid", err))?;
    for (fd, target) in [(&log, 1), (&log, 2)] {
        nix::unistd::dup2(fd.as_raw_fd(), target).map_err(|err| JailError::sys("dup2", err))?;
    }
    // The report replaces the zygote's socket on fd 3 (SHIM_REPORT_FD == ZYGOTE_FD). The
    // socket's `OwnedFd` is never dropped in this process (it exits without unwinding back to
    // the zygote's loop), so nothing closes the report by its old name.
    debug_assert_eq!(socket.as_raw_fd(), SHIM_REPORT_FD);
    nix::unistd::dup2(report.as_raw_fd(), SHIM_REPORT_FD)
        .map_err(|err| JailError::sys("dup2", err))?;
    set_command_line(state_dir);
    Ok(())
}

/// Writes `<runp> shim <state_dir>` over this process's argument area (the zygote's command
/// line, with room for it), so that /proc/PID/cmdline reads as an exec'd shim's would. Skipped
/// when it does not fit.
fn set_command_line(state_dir: &Path) {
    let Some((start, end)) = argument_area() else {
        return;
    };
    let exe = std::env::args_os().next().unwrap_or_default();
    let mut line = Vec::with_capacity(TITLE_ROOM);
    for part in [exe.as_os_str(), OsStr::new("shim"), state_dir.as_os_str()] {
        line.extend_from_slice(part.as_bytes());
        line.push(0);
    }
    let room = end.saturating_sub(start);
    if line.len() > room {
        return;
    }
    line.resize(room, 0);
    // SAFETY: [start, end) is this process's own argument area (from /proc/self/stat), mapped
    // writable on its stack; nothing holds a Rust reference into it.
    unsafe { std::ptr::copy_nonoverlapping(line.as_ptr(), start as *mut u8, room) };
}

/// `arg_start` and `arg_end` of this process (fields 48 and 49 of /proc/self/stat).
fn argument_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which may itself contain spaces: field 3 is the first.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let start = fields.get(48 - 3)?.parse().ok()?;
    let end = fields.get(49 - 3)?.parse().ok()?;
    (start != 0 && end > start).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zygote_cmdlines_are_told_by_their_subcommand() {
        assert!(is_zygote_cmdline(b"/usr/bin/runp\0zygote\0____\0"));
        assert!(!is_zygote_cmdline(b"/usr/bin/runp\0agent\0zygote\0"));
        assert!(!is_zygote_cmdline(b"zygote\0"));
        assert!(!is_zygote_cmdline(b""));
    }
}
