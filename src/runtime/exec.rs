//! ExecSync: a command inside a running container (its namespaces, cgroup, caps, user) through
//! the jail's exec helper; output read concurrently with a size cap; a timeout kills it.

use crate::cri::api;
use crate::jail::{self, ExecReport, ExecSpec};
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::shim::signal;
use crate::runtime::state::ContainerState;
use rustix::process::{Pid, PidfdFlags, pidfd_open};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// Output kept per stream; the rest is read and dropped so the command never blocks on a full
/// pipe.
pub const MAX_EXEC_OUTPUT: usize = 16 << 20;

/// Hang guard for the exec helper's start report.
const EXEC_REPORT_TIMEOUT: Duration = Duration::from_secs(30);

async fn read_capped(fd: OwnedFd) -> Vec<u8> {
    let flags = nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)
        .map(nix::fcntl::OFlag::from_bits_truncate)
        .unwrap_or(nix::fcntl::OFlag::empty());
    let _ = nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(flags | nix::fcntl::OFlag::O_NONBLOCK),
    );
    let mut rx = match tokio::net::unix::pipe::Receiver::from_owned_fd(fd) {
        Ok(rx) => rx,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read exec output");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match rx.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => {
                let room = MAX_EXEC_OUTPUT.saturating_sub(out.len());
                out.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

impl ProcessRuntime {
    pub(crate) async fn exec_sync_impl(
        &self,
        req: api::ExecSyncRequest,
    ) -> Result<api::ExecSyncResponse> {
        if req.cmd.is_empty() {
            return Err(RuntimeError::invalid("ExecSync without a command"));
        }
        let record = self.shared.index.container(&req.container_id)?.snapshot();
        if record.state != ContainerState::Running {
            return Err(RuntimeError::FailedPrecondition(format!(
                "container {} is not running",
                record.id
            )));
        }
        let spec = ExecSpec {
            container_id: record.id.clone(),
            libcontainer_root: self.shared.layout.libcontainer_root(),
            args: req.cmd.clone(),
            env: Vec::new(),
            cwd: None,
            tty: false,
            stdin: false,
        };
        let spawned = jail::spawn_exec(&self.runp_exe, &spec)?;
        let helper_pid = spawned.helper_pid;
        let helper_pidfd =
            Pid::from_raw(helper_pid).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
        let started_at = tokio::time::Instant::now();
        let limit = (req.timeout > 0).then(|| Duration::from_secs(req.timeout as u64));
        let status = self.reaper.wait(helper_pid);
        let stdout = read_capped(spawned.stdout);
        let stderr = read_capped(spawned.stderr);
        let mut report_rx = spawned.report;
        let report_wait = limit
            .unwrap_or(EXEC_REPORT_TIMEOUT)
            .min(EXEC_REPORT_TIMEOUT);
        let report = tokio::task::spawn_blocking(move || report_rx.recv_timeout(report_wait))
            .await
            .map_err(|e| RuntimeError::Internal(format!("exec report task: {e}")))?;
        let command_pidfd = match report {
            Ok(ExecReport::Started { pid }) => {
                Pid::from_raw(pid).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok())
            }
            Ok(ExecReport::Failed { message }) => {
                return Err(RuntimeError::Internal(format!(
                    "exec in container {}: {message}",
                    record.id
                )));
            }
            Err(e) => {
                if let Some(fd) = &helper_pidfd {
                    let _ = signal(fd, libc::SIGKILL);
                }
                return Err(RuntimeError::Internal(format!(
                    "exec in container {}: no start report: {e}",
                    record.id
                )));
            }
        };
        let all = async { tokio::join!(stdout, stderr, status) };
        let finished = match limit {
            Some(limit) => tokio::time::timeout(limit.saturating_sub(started_at.elapsed()), all)
                .await
                .ok(),
            None => Some(all.await),
        };
        let Some((stdout, stderr, status)) = finished else {
            for fd in [&command_pidfd, &helper_pidfd].into_iter().flatten() {
                let _ = signal(fd, libc::SIGKILL);
            }
            return Err(RuntimeError::DeadlineExceeded(format!(
                "command {:?} in container {} timed out after {}s",
                req.cmd, record.id, req.timeout
            )));
        };
        let status = status.ok_or_else(|| RuntimeError::Internal("the reaper stopped".into()))?;
        Ok(api::ExecSyncResponse {
            stdout,
            stderr,
            exit_code: status.code(),
        })
    }
}
