//! StopContainer: the stop signal (the image's StopSignal, default SIGTERM) through the pidfd,
//! wait up to the timeout for the exit, then SIGKILL. Idempotent.

use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::shim::{open_pidfd, signal};
use crate::runtime::state::{ContainerEntry, ContainerState, lock};
use std::time::Duration;

/// How long a SIGKILLed container may take to be reported exited before we give up.
const KILL_GRACE: Duration = Duration::from_secs(30);

impl ProcessRuntime {
    pub(crate) async fn stop_container_impl(&self, id: &str, timeout_secs: i64) -> Result<()> {
        let entry = self.shared.index.container(id)?;
        let _op = entry.op.lock().await;
        self.stop_container_locked(&entry, timeout_secs).await
    }

    /// Stops a container whose op lock the caller holds.
    pub(crate) async fn stop_container_locked(
        &self,
        entry: &ContainerEntry,
        timeout_secs: i64,
    ) -> Result<()> {
        let record = entry.snapshot();
        if record.state != ContainerState::Running {
            return Ok(());
        }
        let pidfd = lock(&self.shared.pidfds).get(&record.id).cloned();
        let pidfd = match pidfd {
            Some(fd) => Some(fd),
            None => record
                .process
                .and_then(|p| open_pidfd(p.pid, p.pid_start_time))
                .map(std::sync::Arc::new),
        };
        let Some(pidfd) = pidfd else {
            // The process is gone; the watcher records the exit when the shim finishes.
            return self.wait_exited(entry, KILL_GRACE).await;
        };
        if timeout_secs > 0 {
            signal(&*pidfd, record.stop_signal)?;
            let grace = Duration::from_secs(timeout_secs as u64);
            if self.wait_exited(entry, grace).await.is_ok() {
                return Ok(());
            }
            tracing::info!(container = %record.id, "stop timeout expired, sending SIGKILL");
        }
        signal(&*pidfd, libc::SIGKILL)?;
        self.wait_exited(entry, KILL_GRACE).await
    }

    /// Waits until the record says the container is no longer running.
    pub(crate) async fn wait_exited(&self, entry: &ContainerEntry, limit: Duration) -> Result<()> {
        let mut changes = entry.subscribe();
        let wait = async {
            while entry.snapshot().state == ContainerState::Running {
                if changes.changed().await.is_err() {
                    break;
                }
            }
        };
        tokio::time::timeout(limit, wait).await.map_err(|_| {
            RuntimeError::DeadlineExceeded(format!(
                "container {} did not exit within {limit:?}",
                entry.snapshot().id
            ))
        })
    }
}
