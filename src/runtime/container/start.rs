//! StartContainer: spawn the container's shim, record pid and start time, hold a pidfd for
//! signals, watch for the exit.

use crate::cri::api;
use crate::jail::{ContainerStdio, ShimProcess, ShimSpec};
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::monitor::{container_event, watch_container};
use crate::runtime::shim::open_pidfd;
use crate::runtime::state::{ContainerState, SandboxState, lock};
use std::sync::Arc;

/// containerd's exit code and reason for a container that failed to start.
const START_ERROR_EXIT_CODE: i32 = 128;
const START_ERROR_REASON: &str = "StartError";

impl ProcessRuntime {
    pub(crate) async fn start_container_impl(&self, id: &str) -> Result<()> {
        let entry = self.shared.index.container(id)?;
        let _op = entry.op.lock().await;
        let record = entry.snapshot();
        if record.state != ContainerState::Created {
            return Err(RuntimeError::FailedPrecondition(format!(
                "container {} is {:?}, not created",
                record.id, record.state
            )));
        }
        let sandbox = self.shared.index.sandbox(&record.sandbox_id)?.snapshot();
        if sandbox.state != SandboxState::Ready {
            return Err(RuntimeError::FailedPrecondition(format!(
                "pod sandbox {} is not ready",
                sandbox.id
            )));
        }
        let dir = self.shared.layout.container_run_dir(&record.id);
        let config = record.config()?;
        let spec = ShimSpec {
            id: record.id.clone(),
            process: ShimProcess::Container {
                bundle: dir.join("bundle"),
                libcontainer_root: self.shared.layout.libcontainer_root(),
                stdio: ContainerStdio {
                    stdin: config.stdin,
                    stdin_once: config.stdin_once,
                    tty: config.tty,
                },
            },
            log_path: record.log_path.clone(),
            log_max_size: self.container_log_max_live_size,
        };
        if record.cgroups_path.is_some() {
            self.cgroups.prime_migration();
        }
        let started = match self.start_shim(&dir, spec).await {
            Ok(s) => s,
            Err(e) => {
                let now = self.now();
                let message = e.to_string();
                entry.update(|r| {
                    r.state = ContainerState::Exited;
                    r.finished_at = now;
                    r.exit_code = START_ERROR_EXIT_CODE;
                    r.reason = START_ERROR_REASON.to_string();
                    r.message = message;
                })?;
                return Err(e);
            }
        };
        let process = started.process;
        match open_pidfd(process.pid, process.pid_start_time) {
            Some(fd) => {
                lock(&self.shared.pidfds).insert(record.id.clone(), Arc::new(fd));
            }
            None => {
                tracing::debug!(container = %record.id, "container process already gone at start")
            }
        }
        // Volatile: after a power loss the process is gone either way, and a record still
        // Created is as good as one Running (its sandbox is NotReady, the pod gets a new one).
        entry.update_volatile(|r| {
            r.state = ContainerState::Running;
            r.started_at = process.started_at;
            r.process = Some(process);
        })?;
        watch_container(
            self.shared.clone(),
            entry.clone(),
            started.shim_pidfd,
            dir,
            self.shutdown.subscribe(),
        );
        tracing::info!(container = %record.id, pid = process.pid, "container started");
        self.shared.events.publish(container_event(
            &entry.snapshot(),
            api::ContainerEventType::ContainerStartedEvent,
            &self.shared,
        ));
        Ok(())
    }
}
