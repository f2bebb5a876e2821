//! RemovePodSandbox: stop, remove every container of the pod, the pod cgroup and all state.
//! Idempotent; an unknown id is success.

use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::state::sandbox_name_key;

impl ProcessRuntime {
    pub(crate) async fn remove_pod_sandbox_impl(&self, id: &str) -> Result<()> {
        let entry = match self.shared.index.sandbox(id) {
            Ok(e) => e,
            Err(RuntimeError::NotFound { .. }) => return self.remove_broken(id, true).await,
            Err(e) => return Err(e),
        };
        let _op = entry.op.lock().await;
        self.stop_sandbox_locked(&entry).await?;
        let record = entry.snapshot();
        for container in self.shared.index.containers_of(&record.id) {
            self.remove_container_entry(&container).await?;
        }
        if let Some(cg) = &record.cgroup_parent
            && let Err(e) = self.cgroups.remove(cg)
        {
            tracing::warn!(sandbox = %record.id, error = %e, "cannot remove the pod cgroup");
        }
        self.teardown_sandbox(&record.id).await?;
        self.shared.index.remove_sandbox(&record.id);
        self.shared
            .index
            .release_name(&sandbox_name_key(&record.metadata()), &record.id);
        tracing::info!(sandbox = %record.id, "pod sandbox removed");
        Ok(())
    }
}
