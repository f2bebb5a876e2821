//! `runp exec-helper`: runs one process inside a running container (its namespaces, cgroup,
//! capabilities, no_new_privs and user) with libcontainer's tenant builder, reports its pid, waits
//! for it and exits with its exit code. The process dies with the helper (SIGKILL on parent
//! death), so a caller that kills the helper on timeout leaves nothing behind.

use super::channel::{Receiver, Sender};
use super::error::error_chain;
use super::executor::JailExecutor;
use super::fds::{cloexec_pipe, close_fds_above, take_inherited_fd};
use super::spawn::{EXEC_REPORT_FD, EXEC_SPEC_FD, EXEC_STDERR_FD, EXEC_STDOUT_FD};
use super::{ExecReport, ExecSpec, JailError, exit_code_from_wait_status};
use libcontainer::container::Container;
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::syscall::syscall::SyscallType;
use nix::errno::Errno;
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use oci_spec::runtime::Spec;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;
use tracing::error;

/// Exit code of the helper when the command could not be started.
const START_FAILED: i32 = 255;
const SPEC_TIMEOUT: Duration = Duration::from_secs(10);

/// Entry point of `runp exec-helper`; returns the process exit code. `init_logging` runs once
/// inherited fds are sorted out.
pub fn run_exec_helper(init_logging: impl FnOnce()) -> i32 {
    let fds = [EXEC_REPORT_FD, EXEC_SPEC_FD, EXEC_STDOUT_FD, EXEC_STDERR_FD].map(take_inherited_fd);
    close_fds_above(EXEC_STDERR_FD);
    init_logging();
    let [Ok(report), Ok(spec), Ok(stdout), Ok(stderr)] = fds else {
        eprintln!("runp exec-helper: missing fds (the helper is started by the runtime)");
        return START_FAILED;
    };
    let mut report = Sender::<ExecReport>::from_owned_fd(report);
    let started = Receiver::<ExecSpec>::from_owned_fd(spec)
        .recv_timeout(SPEC_TIMEOUT)
        .map_err(JailError::from)
        .and_then(|spec| start(&spec, stdout, stderr));
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

/// Starts the process; also returns the write end of the liveness pipe, which must stay open
/// for as long as the helper lives.
fn start(spec: &ExecSpec, stdout: OwnedFd, stderr: OwnedFd) -> Result<(Pid, OwnedFd), JailError> {
    if spec.tty {
        return Err(JailError::InvalidSpec(
            "exec with a tty is not supported yet".into(),
        ));
    }
    if spec.args.is_empty() {
        return Err(JailError::InvalidSpec("exec needs a command".into()));
    }
    let env = parse_env(&spec.env)?;
    let user = container_user(spec)?;
    let (live_r, live_w) = cloexec_pipe()?;
    let stdin = std::fs::File::open("/dev/null")
        .map_err(|err| JailError::io("cannot open /dev/null", err))?;
    let executor = JailExecutor {
        helper_liveness: Some((live_r.as_raw_fd(), live_w.as_raw_fd())),
        ..JailExecutor::default()
    };
    let pid = ContainerBuilder::new(spec.container_id.clone(), SyscallType::default())
        .with_executor(executor)
        .with_stdin(stdin)
        .with_stdout(stdout)
        .with_stderr(stderr)
        .with_root_path(&spec.libcontainer_root)
        .and_then(|builder| builder.validate_id())
        .and_then(|builder| {
            builder
                .as_tenant()
                .with_container_args(spec.args.clone())
                .with_env(env)
                .with_cwd(spec.cwd.clone())
                .with_detach(true)
                .with_user(Some(user.uid))
                .with_group(Some(user.gid))
                .with_additional_gids(user.additional_gids)
                .build()
        })
        .map_err(|err| JailError::Container(format!("cannot exec: {}", error_chain(&err))))?;
    drop(live_r);
    Ok((pid, live_w))
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

struct ProcessUser {
    uid: u32,
    gid: u32,
    additional_gids: Vec<u32>,
}

/// The container's own user: the tenant builder would otherwise run the command as uid 0.
fn container_user(spec: &ExecSpec) -> Result<ProcessUser, JailError> {
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
    let user = oci
        .process()
        .as_ref()
        .map(|p| p.user().clone())
        .unwrap_or_default();
    Ok(ProcessUser {
        uid: user.uid(),
        gid: user.gid(),
        additional_gids: user.additional_gids().clone().unwrap_or_default(),
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
