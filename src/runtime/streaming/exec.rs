//! Streamed Exec: the command runs in the container through the jail's exec helper (as for
//! ExecSync) with the session's streams wired to it: stdin on a pipe (closed at the client's
//! EOF), stdout/stderr from pipes, or everything on a terminal whose master the helper hands
//! over, resized on the client's events.

use super::io::{pipe_reader, pipe_writer, pump_in, pump_out, terminal_halves};
use crate::cri::StreamIo;
use crate::jail::{self, ExecReport, ExecSpec};
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::shim::signal;
use rustix::process::{Pid, PidfdFlags, pidfd_open};
use std::os::fd::OwnedFd;
use std::time::Duration;
use tokio::task::JoinSet;

/// Hang guard for the helper's start report and its terminal.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long output is still forwarded once the command exited (a background process it left
/// may hold the pipes or the terminal open forever).
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// SIGKILLs the helper (and so the command, tied to it) unless the command ended: a session
/// that is dropped midway leaves nothing running.
struct KillOnDrop(Option<OwnedFd>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(fd) = &self.0 {
            let _ = signal(fd, libc::SIGKILL);
        }
    }
}

impl ProcessRuntime {
    pub(crate) async fn exec_stream_impl(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        tty: bool,
        io: StreamIo,
    ) -> Result<i32> {
        if cmd.is_empty() {
            return Err(RuntimeError::invalid("Exec without a command"));
        }
        let record = self.running_container(container_id)?;
        let spec = ExecSpec {
            container_id: record.id.clone(),
            libcontainer_root: self.shared.layout.libcontainer_root(),
            args: cmd,
            env: Vec::new(),
            cwd: None,
            tty,
            stdin: io.stdin.is_some(),
        };
        let spawned = jail::spawn_exec(&self.runp_exe, &spec)?;
        let helper_pid = spawned.helper_pid;
        let mut helper = KillOnDrop(
            Pid::from_raw(helper_pid).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok()),
        );
        let status = self.reaper.wait(helper_pid);
        let mut report_rx = spawned.report;
        let console = spawned.console;
        // The helper passes the terminal (tty) before it reports, so both are read together.
        let started = tokio::task::spawn_blocking(move || {
            let report = report_rx.recv_timeout(START_TIMEOUT)?;
            let master = match (&report, console) {
                (ExecReport::Started { .. }, Some(console)) => {
                    Some(jail::recv_fd(&console, START_TIMEOUT)?)
                }
                _ => None,
            };
            Ok::<_, jail::JailError>((report, master))
        })
        .await
        .map_err(|e| RuntimeError::Internal(format!("exec report task: {e}")))?;
        let master = match started {
            Ok((ExecReport::Started { .. }, master)) => master,
            Ok((ExecReport::Failed { message }, _)) => {
                return Err(RuntimeError::Internal(format!(
                    "exec in container {}: {message}",
                    record.id
                )));
            }
            Err(e) => {
                return Err(RuntimeError::Internal(format!(
                    "exec in container {}: no start report: {e}",
                    record.id
                )));
            }
        };
        let io_error = |e: std::io::Error| RuntimeError::Internal(format!("exec streams: {e}"));
        let StreamIo {
            stdin,
            stdout,
            stderr,
            resize,
        } = io;
        let mut outputs = JoinSet::new();
        let mut inputs = JoinSet::new();
        match master {
            Some(master) => {
                let (from_terminal, to_terminal) = terminal_halves(&master).map_err(io_error)?;
                if let Some(mut resize) = resize {
                    inputs.spawn(async move {
                        while let Some(size) = resize.recv().await {
                            if let Err(e) = jail::set_window_size(&master, size.width, size.height)
                            {
                                tracing::debug!(error = %e, "exec resize");
                            }
                        }
                    });
                }
                if let Some(stdin) = stdin {
                    // A terminal has no half-close: the client's EOF just ends its input.
                    inputs.spawn(pump_in(stdin, to_terminal));
                }
                outputs.spawn(pump_out(from_terminal, stdout));
            }
            None => {
                if let (Some(from), Some(to)) = (stdin, spawned.stdin) {
                    let to = pipe_writer(to).map_err(io_error)?;
                    inputs.spawn(pump_in(from, to));
                }
                let out = pipe_reader(spawned.stdout).map_err(io_error)?;
                let err = pipe_reader(spawned.stderr).map_err(io_error)?;
                outputs.spawn(pump_out(out, stdout));
                outputs.spawn(pump_out(err, stderr));
            }
        }
        let status = status.await;
        // The command is gone (so is the helper): nothing left to kill.
        helper.0 = None;
        let drain = async { while outputs.join_next().await.is_some() {} };
        if tokio::time::timeout(DRAIN_LIMIT, drain).await.is_err() {
            tracing::debug!(container = %record.id, "exec output still open after the command exited");
        }
        // Every writer of the session is dropped before the result is reported.
        outputs.shutdown().await;
        inputs.shutdown().await;
        let status = status.ok_or_else(|| RuntimeError::Internal("the reaper stopped".into()))?;
        Ok(status.code())
    }
}
