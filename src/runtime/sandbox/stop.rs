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
        let record = entry.snapshot();
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
        let dir = self.shared.layout.sandbox_dir(&sandbox_id);
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
        tracing::info!(sandbox = %sandbox_id, "pod sandbox stopped");
        Ok(())
    }
}
