//! Starting the re-executed helpers (`runp shim`, `runp exec-helper`). The child gets only the
//! fds listed here at fixed numbers (everything we create is close-on-exec, and the helpers close
//! anything above their fixed fds first thing). Nothing here waits for the child: the caller's
//! reaper owns it.

use super::channel;
use super::fds::{cloexec_pipe, set_nonblocking};
use super::{
    ExecReport, ExecSpec, JailError, ShimReport, SpawnedExec, SpawnedProgram, SpawnedShim,
};
use nix::fcntl::{FcntlArg, fcntl};
use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// fd on which `runp shim` sends its single [`ShimReport`].
pub(crate) const SHIM_REPORT_FD: RawFd = 3;
/// fds of `runp exec-helper`: report out, spec in, the command's stdout and stderr, then the
/// optional ones: its stdin (when streamed) and the socket the terminal master is passed on
/// (tty execs).
pub(crate) const EXEC_REPORT_FD: RawFd = 3;
pub(crate) const EXEC_SPEC_FD: RawFd = 4;
pub(crate) const EXEC_STDOUT_FD: RawFd = 5;
pub(crate) const EXEC_STDERR_FD: RawFd = 6;
pub(crate) const EXEC_STDIN_FD: RawFd = 7;
pub(crate) const EXEC_CONSOLE_FD: RawFd = 8;

/// Environment variables a re-executed helper keeps (everything else is dropped so the agent's
/// environment does not leak towards containers).
const KEPT_ENV: &[&str] = &["PATH", "RUNP_LOG", "RUST_BACKTRACE"];

/// Starts `runp shim <state_dir>` in a new session. `<state_dir>/shim.json` must exist.
pub fn spawn_shim(runp_exe: &Path, state_dir: &Path) -> Result<SpawnedShim, JailError> {
    let shim_log = open_shim_log(state_dir)?;
    let (report_tx, report_rx) = channel::pipe::<ShimReport>()?;
    let report_tx = report_tx.into_owned_fd();
    let pid = reexec(
        runp_exe,
        &[OsStr::new("shim"), state_dir.as_os_str()],
        &[(&report_tx, SHIM_REPORT_FD)],
        Output {
            stdout: Stdio::from(
                shim_log
                    .try_clone()
                    .map_err(|err| JailError::io("dup", err))?,
            ),
            stderr: Stdio::from(shim_log),
        },
        true,
    )?;
    Ok(SpawnedShim {
        pid,
        report: report_rx,
    })
}

/// The shim's stdout/stderr (its diagnostics) go to `shim.log` from its first instruction.
/// Fails when `shim.json` is missing.
pub(super) fn open_shim_log(state_dir: &Path) -> Result<std::fs::File, JailError> {
    let spec_path = state_dir.join(super::SHIM_SPEC_FILE);
    if !spec_path.is_file() {
        return Err(JailError::InvalidSpec(format!(
            "{} does not exist",
            spec_path.display()
        )));
    }
    let log_path = state_dir.join(super::SHIM_LOG_FILE);
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&log_path)
        .map_err(|err| JailError::io(format!("cannot open {}", log_path.display()), err))
}

/// Starts `runp exec-helper` for `spec`. The returned stdout/stderr are the read ends of the
/// command's pipes, `stdin` the write end of its stdin when `spec.stdin` (and no tty), and
/// `console` the socket the helper passes the terminal master on when `spec.tty`; the helper
/// exits with the command's exit code.
pub fn spawn_exec(runp_exe: &Path, spec: &ExecSpec) -> Result<SpawnedExec, JailError> {
    let (report_tx, report_rx) = channel::pipe::<ExecReport>()?;
    let (spec_tx, spec_rx) = channel::pipe::<ExecSpec>()?;
    preload_spec(spec_tx, spec)?;
    let (stdout_r, stdout_w) = cloexec_pipe()?;
    let (stderr_r, stderr_w) = cloexec_pipe()?;
    let stdin = match spec.stdin && !spec.tty {
        true => Some(cloexec_pipe()?),
        false => None,
    };
    let console = match spec.tty {
        true => Some(super::console::socket_pair()?),
        false => None,
    };
    let report_tx = report_tx.into_owned_fd();
    let spec_rx = spec_rx.into_owned_fd();
    let mut fds = vec![
        (&report_tx, EXEC_REPORT_FD),
        (&spec_rx, EXEC_SPEC_FD),
        (&stdout_w, EXEC_STDOUT_FD),
        (&stderr_w, EXEC_STDERR_FD),
    ];
    if let Some((read, _)) = &stdin {
        fds.push((read, EXEC_STDIN_FD));
    }
    if let Some((_, helper_end)) = &console {
        fds.push((helper_end, EXEC_CONSOLE_FD));
    }
    let helper_pid = reexec(
        runp_exe,
        &[OsStr::new("exec-helper")],
        &fds,
        // The helper's own diagnostics go where the agent's go.
        Output {
            stdout: Stdio::null(),
            stderr: Stdio::inherit(),
        },
        false,
    )?;
    Ok(SpawnedExec {
        helper_pid,
        stdout: stdout_r,
        stderr: stderr_r,
        stdin: stdin.map(|(_, write)| write),
        console: console.map(|(ours, _)| ours),
        report: report_rx,
    })
}

/// Starts a helper program (a CNI plugin, iptables) with `args`, exactly `env` and
/// stdin/stdout/stderr on pipes.
/// A plain `Command` (no pre-exec hook, no cwd change): std uses posix_spawn, whose
/// exec-failure path never needs our `waitpid`.
pub fn spawn_program(
    program: &Path,
    args: &[&str],
    env: &[(String, String)],
) -> Result<SpawnedProgram, JailError> {
    let mut child = Command::new(program)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| JailError::io(format!("cannot execute {}", program.display()), err))?;
    let pid = child.id() as i32;
    let missing = || JailError::io("child pipe", std::io::Error::other("not piped"));
    // Dropping `Child` neither waits nor kills: the caller's reaper owns the pid.
    Ok(SpawnedProgram {
        pid,
        stdin: child.stdin.take().ok_or_else(missing)?.into(),
        stdout: child.stdout.take().ok_or_else(missing)?.into(),
        stderr: child.stderr.take().ok_or_else(missing)?.into(),
    })
}

/// Writes the spec into the pipe before the helper exists, so that nothing can fail after the
/// spawn (a failure then would leave the caller a child it does not know about).
fn preload_spec(tx: channel::Sender<ExecSpec>, spec: &ExecSpec) -> Result<(), JailError> {
    let frame = channel::encode(spec)?;
    let fd = tx.into_owned_fd();
    if frame.len() > 65536 {
        // Grow the pipe (up to the unprivileged maximum, 1 MiB by default).
        let size = i32::try_from(frame.len()).unwrap_or(i32::MAX);
        fcntl(fd.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(size))
            .map_err(|err| JailError::sys("exec spec too large for a pipe", err))?;
    }
    set_nonblocking(&fd)?;
    std::fs::File::from(fd)
        .write_all(&frame)
        .map_err(|err| JailError::io("cannot queue the exec spec", err))
}

/// Where a helper's own stdout/stderr go.
pub(super) struct Output {
    pub stdout: Stdio,
    pub stderr: Stdio,
}

/// Re-executes `exe args..` with stdin on /dev/null, the given output, and each `(fd, target)`
/// of `fds` placed at `target`.
pub(super) fn reexec(
    exe: &Path,
    args: &[&OsStr],
    fds: &[(&OwnedFd, RawFd)],
    output: Output,
    new_session: bool,
) -> Result<i32, JailError> {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(output.stdout)
        .stderr(output.stderr)
        .current_dir("/")
        .env_clear();
    for key in KEPT_ENV {
        if let Some(value) = std::env::var_os(key) {
            cmd.env(key, value);
        }
    }
    let map: Vec<(RawFd, RawFd)> = fds.iter().map(|(fd, to)| (fd.as_raw_fd(), *to)).collect();
    // Sized up front: the closure runs between fork and exec and must not allocate.
    let mut parked: Vec<RawFd> = vec![-1; map.len()];
    // SAFETY: the closure only makes async-signal-safe calls (setsid, fcntl, dup2) and does not
    // allocate.
    unsafe {
        cmd.pre_exec(move || {
            if new_session && libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Park every source above the targets first, so a source that happens to sit on
            // another entry's target is not clobbered by the dup2 below.
            for (slot, (from, _)) in parked.iter_mut().zip(map.iter()) {
                *slot = libc::fcntl(*from, libc::F_DUPFD_CLOEXEC, 64);
                if *slot < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (parked_fd, (_, to)) in parked.iter().zip(map.iter()) {
                // dup2 leaves the target without FD_CLOEXEC; the parked copy closes on exec.
                if libc::dup2(*parked_fd, *to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|err| JailError::io(format!("cannot execute {}", exe.display()), err))?;
    // Dropping `Child` neither waits nor kills: the caller's reaper owns the pid.
    Ok(child.id() as i32)
}
