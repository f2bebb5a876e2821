//! StopPodSandbox: kill the pod's containers and its infra, release the namespace files and
//! /dev/shm. Idempotent; an unknown id is success (as containerd does).

use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::sandbox::run::unmount_all;
use crate::runtime::shim::{open_pidfd, signal};
use crate::runtime::state::{SandboxEntry, SandboxState};
use std::time::Duration;

/// Hang guard for the infra shim to go away after SIGKILL.
const INFRA_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

impl ProcessRuntime {
    pub(crate) async fn stop_pod_sandbox_impl(&self, id: &str) -> Result<()> {
        let entry = match self.shared.index.sandbox(id) {
            Ok(e) => e,
            Err(RuntimeError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = entry.op.lock().await;
        self.stop_sandbox_locked(&entry).await
    }

    pub(crate) async fn stop_sandbox_locked(&self, entry: &SandboxEntry) -> Result<()> {
        let sandbox_id = entry.snapshot().id;
        for container in self.shared.index.containers_of(&sandbox_id) {
            let _op = container.op.lock().await;
            self.stop_container_locked(&container, 0).await?;
        }
        // While the namespace file still holds the netns: the bridge plugin finds the pod's
        // addresses there to remove its masquerade rules. A failed DEL fails the stop (the
        // kubelet retries) and keeps the namespace for the retry.
        self.detach_network(entry).await?;
        self.kill_infra(entry).await?;
        tracing::info!(sandbox = %sandbox_id, "pod sandbox stopped");
        Ok(())
    }

    /// CNI DEL when the pod has an attachment; idempotent (cleared once DEL succeeded).
    pub(crate) async fn detach_network(&self, entry: &SandboxEntry) -> Result<()> {
        let Some(attachment) = entry.snapshot().network else {
            return Ok(());
        };
        self.network.del(&attachment).await?;
        entry.update(|r| r.network = None)?;
        tracing::info!(sandbox = %attachment.container_id, "pod network detached (CNI DEL)");
        Ok(())
    }

    /// Kills the infra, waits for its shim, releases the namespace files and /dev/shm.
    pub(crate) async fn kill_infra(&self, entry: &SandboxEntry) -> Result<()> {
        let record = entry.snapshot();
        let sandbox_id = record.id.clone();
        if let Some(infra) = record.infra {
            let mut changes = entry.subscribe();
            if let Some(fd) = open_pidfd(infra.pid, infra.pid_start_time) {
                signal(&fd, libc::SIGKILL)?;
            }
            let shim_alive = open_pidfd(infra.shim_pid, infra.shim_start_time).is_some();
            if shim_alive {
                // The infra watcher clears `infra` once the shim is gone.
                let wait = async {
                    while entry.snapshot().infra.is_some() {
                        if changes.changed().await.is_err() {
                            break;
                        }
                    }
                };
                if tokio::time::timeout(INFRA_EXIT_TIMEOUT, wait)
                    .await
                    .is_err()
                {
                    tracing::warn!(sandbox = %sandbox_id, "infra shim did not exit after SIGKILL");
                }
            }
        }
        let dir = self.shared.layout.sandbox_run_dir(&sandbox_id);
        let ns_dir = dir.join("ns");
        tokio::task::spawn_blocking(move || {
            crate::jail::release_pod_namespaces(&ns_dir)?;
            unmount_all(&dir.join("shm"));
            Ok::<_, RuntimeError>(())
        })
        .await
        .map_err(|e| RuntimeError::Internal(format!("sandbox stop task: {e}")))??;
        entry.update(|r| {
            r.state = SandboxState::NotReady;
            r.infra = None;
            r.shm_mounted = false;
        })?;
        Ok(())
    }
}
