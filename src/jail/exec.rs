//! `runp exec-helper`: runs one process inside a running container (its namespaces, cgroup,
//! capabilities, no_new_privs and user) with libcontainer's tenant builder, reports its pid, waits
//! for it and exits with its exit code. The process dies with the helper (SIGKILL on parent
//! death), so a caller that kills the helper on timeout leaves nothing behind.

use super::channel::{Receiver, Sender};
use super::console::{BoundSocket, send_fd};
use super::error::error_chain;
use super::executor::JailExecutor;
use super::fds::{cloexec_pipe, close_fds_above, take_inherited_fd};
use super::spawn::{
    EXEC_CONSOLE_FD, EXEC_REPORT_FD, EXEC_SPEC_FD, EXEC_STDERR_FD, EXEC_STDIN_FD, EXEC_STDOUT_FD,
};
use super::{ExecReport, ExecSpec, JailError, exit_code_from_wait_status};
use libcontainer::container::Container;
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::syscall::syscall::SyscallType;
use nix::errno::Errno;
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use oci_spec::runtime::{LinuxSeccomp, Process, Spec, User};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;
use tracing::error;

/// Exit code of the helper when the command could not be started.
const START_FAILED: i32 = 255;
const SPEC_TIMEOUT: Duration = Duration::from_secs(10);

/// Entry point of `runp exec-helper`; returns the process exit code. `init_logging` runs once
/// inherited fds are sorted out.
pub fn run_exec_helper(init_logging: impl FnOnce()) -> i32 {
    let fds = [EXEC_REPORT_FD, EXEC_SPEC_FD, EXEC_STDOUT_FD, EXEC_STDERR_FD].map(take_inherited_fd);
    // Present only when the spec asks for them (the spawner maps nothing else there).
    let stdin = take_inherited_fd(EXEC_STDIN_FD).ok();
    let console = take_inherited_fd(EXEC_CONSOLE_FD).ok();
    close_fds_above(EXEC_CONSOLE_FD);
    init_logging();
    let [Ok(report), Ok(spec), Ok(stdout), Ok(stderr)] = fds else {
        eprintln!("runp exec-helper: missing fds (the helper is started by the runtime)");
        return START_FAILED;
    };
    let mut report = Sender::<ExecReport>::from_owned_fd(report);
    let stdio = Stdio {
        stdin,
        stdout,
        stderr,
        console,
    };
    let started = Receiver::<ExecSpec>::from_owned_fd(spec)
        .recv_timeout(SPEC_TIMEOUT)
        .map_err(JailError::from)
        .and_then(|spec| start(&spec, stdio));
    let (pid, _liveness) = match started {
        Ok(started) => started,
        Err(err) => {
            error!(error = %err, "exec failed");
            let _ = report.send(&ExecReport::Failed {
                message: err.to_string(),
            });
            return START_FAILED;
        }
    };
    // The caller may have given up already; the command still runs to completion or SIGKILL.
    let _ = report.send(&ExecReport::Started { pid: pid.as_raw() });
    drop(report);
    loop {
        match waitpid(pid, Some(WaitPidFlag::__WALL)) {
            Ok(status) => {
                if let Some((code, _)) = exit_code_from_wait_status(status) {
                    return code;
                }
            }
            Err(Errno::EINTR) => {}
            Err(err) => {
                error!(%err, "waitpid on the exec process");
                return START_FAILED;
            }
        }
    }
}

/// The fds the helper was given for the command.
struct Stdio {
    stdin: Option<OwnedFd>,
    stdout: OwnedFd,
    stderr: OwnedFd,
    console: Option<OwnedFd>,
}

/// Starts the process; also returns the write end of the liveness pipe, which must stay open
/// for as long as the helper lives.
fn start(spec: &ExecSpec, stdio: Stdio) -> Result<(Pid, OwnedFd), JailError> {
    if spec.args.is_empty() {
        return Err(JailError::InvalidSpec("exec needs a command".into()));
    }
    if spec.tty != stdio.console.is_some() || (spec.stdin && !spec.tty) != stdio.stdin.is_some() {
        return Err(JailError::InvalidSpec(
            "the exec spec does not match the fds the helper was given".into(),
        ));
    }
    let env = parse_env(&spec.env)?;
    let (live_r, live_w) = cloexec_pipe()?;
    let stdin: OwnedFd = match stdio.stdin {
        Some(fd) => fd,
        None => std::fs::File::open("/dev/null")
            .map_err(|err| JailError::io("cannot open /dev/null", err))?
            .into(),
    };
    let container = container_user(spec)?;
    let executor = JailExecutor {
        helper_liveness: Some((live_r.as_raw_fd(), live_w.as_raw_fd())),
        seccomp: container.seccomp.clone(),
        ..JailExecutor::default()
    };
    let builder = ContainerBuilder::new(spec.container_id.clone(), SyscallType::default())
        .with_executor(executor)
        .with_stdin(stdin)
        .with_stdout(stdio.stdout)
        .with_stderr(stdio.stderr)
        .with_root_path(&spec.libcontainer_root)
        .and_then(|builder| builder.validate_id())
        .map_err(|err| JailError::Container(format!("cannot exec: {}", error_chain(&err))))?;
    let pid = match &stdio.console {
        None => {
            let user = container.user;
            // As containerd: the exec starts where the container's process does (libcontainer's
            // tenant would start it in /).
            let cwd = spec
                .cwd
                .clone()
                .unwrap_or_else(|| container.process.cwd().clone());
            builder
                .as_tenant()
                .with_container_args(spec.args.clone())
                .with_env(env)
                .with_cwd(Some(cwd))
                .with_detach(true)
                .with_user(Some(user.uid()))
                .with_group(Some(user.gid()))
                .with_additional_gids(user.additional_gids().clone().unwrap_or_default())
                .build()
                .map_err(|err| {
                    JailError::Container(format!("cannot exec: {}", error_chain(&err)))
                })?
        }
        Some(console) => start_on_terminal(spec, container.process, builder, env, console)?,
    };
    drop(live_r);
    Ok((pid, live_w))
}

/// A tty exec: libcontainer's tenant takes a full process.json (the container's own process
/// with our args, env, cwd and `terminal: true`) and a console socket, on which the process
/// sends the master of the pty it opened on the container's devpts; that master goes to the
/// runtime on `console`.
fn start_on_terminal(
    spec: &ExecSpec,
    mut process: Process,
    builder: ContainerBuilder,
    env: HashMap<String, String>,
    console: &OwnedFd,
) -> Result<Pid, JailError> {
    const TERMINAL_TIMEOUT: Duration = Duration::from_secs(30);
    let mut merged: Vec<String> = process
        .env()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|entry| !env.contains_key(entry.split('=').next().unwrap_or("")))
        .collect();
    merged.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    process.set_args(Some(spec.args.clone()));
    process.set_env(Some(merged));
    process.set_terminal(Some(true));
    process.set_console_size(None);
    if let Some(cwd) = &spec.cwd {
        process.set_cwd(cwd.clone());
    }
    // Next to libcontainer's own tenant sockets, in the container's state dir.
    let dir = spec.libcontainer_root.join(&spec.container_id);
    let me = std::process::id();
    let process_file = dir.join(format!("runp-exec-{me}.json"));
    crate::util::atomic_file::write_json_atomic(&process_file, &process)
        .map_err(|err| JailError::io(format!("cannot write {}", process_file.display()), err))?;
    let listener = BoundSocket::listen(&dir, &format!("runp-exec-{me}.sock"), 1);
    let built = listener.and_then(|listener| {
        let pid = builder
            .with_console_socket(Some(listener.path()))
            .as_tenant()
            .with_process(Some(&process_file))
            .with_detach(true)
            .build()
            .map_err(|err| JailError::Container(format!("cannot exec: {}", error_chain(&err))))?;
        Ok((pid, listener))
    });
    let _ = std::fs::remove_file(&process_file);
    let (pid, listener) = built?;
    remove_links_to(&dir, listener.path());
    let sent = listener
        .receive_pty_master(TERMINAL_TIMEOUT)
        .and_then(|master| send_fd(console, &master));
    if let Err(err) = sent {
        // The process is ours (detached tenant: our child); without its terminal it is useless.
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        return Err(err);
    }
    Ok(pid)
}

/// libcontainer links the console socket into the container's state dir (`tenant-tty-*.sock`)
/// and leaves the link: remove ours, so tty execs do not pile up dangling links.
fn remove_links_to(dir: &Path, target: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if std::fs::read_link(&path).is_ok_and(|t| t == target) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

fn parse_env(entries: &[String]) -> Result<HashMap<String, String>, JailError> {
    entries
        .iter()
        .map(|entry| match entry.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
            _ => Err(JailError::InvalidSpec(format!(
                "environment entry {entry:?} is not KEY=value"
            ))),
        })
        .collect()
}

/// The container's own process, and its user (the tenant builder would otherwise run the
/// command as uid 0).
struct ContainerProcess {
    user: User,
    process: Process,
    /// The container's filter: libcontainer's tenant drops `linux.seccomp`, so the executor
    /// loads it for the exec'd process (as runc exec does).
    seccomp: Option<LinuxSeccomp>,
}

fn container_user(spec: &ExecSpec) -> Result<ContainerProcess, JailError> {
    let dir = spec.libcontainer_root.join(&spec.container_id);
    let container = Container::load(dir).map_err(|err| {
        JailError::Container(format!(
            "no running container {}: {}",
            spec.container_id,
            error_chain(&err)
        ))
    })?;
    let config = container.bundle().join("config.json");
    let oci = Spec::load(&config)
        .map_err(|err| JailError::Container(format!("cannot read {}: {err}", config.display())))?;
    let process = oci.process().clone().unwrap_or_default();
    Ok(ContainerProcess {
        user: process.user().clone(),
        process,
        seccomp: oci.linux().as_ref().and_then(|l| l.seccomp().clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_entries() {
        let ok = parse_env(&["A=1".into(), "B=".into(), "C=x=y".into()]).unwrap();
        assert_eq!(ok["A"], "1");
        assert_eq!(ok["B"], "");
        assert_eq!(ok["C"], "x=y");
        assert!(parse_env(&["NOEQUALS".into()]).is_err());
        assert!(parse_env(&["=v".into()]).is_err());
    }
}
