//! RemoveContainer: kill if running, release the rootfs lease, delete the state. Idempotent;
//! an unknown id is success.

use crate::cri::api;
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::monitor::container_event;
use crate::runtime::state::{ContainerEntry, container_name_key, lock, remove_dir_if_present};

impl ProcessRuntime {
    pub(crate) async fn remove_container_impl(&self, id: &str) -> Result<()> {
        let entry = match self.shared.index.container(id) {
            Ok(e) => e,
            Err(RuntimeError::NotFound { .. }) => return self.remove_broken(id, false).await,
            Err(e) => return Err(e),
        };
        self.remove_container_entry(&entry).await
    }

    pub(crate) async fn remove_container_entry(&self, entry: &ContainerEntry) -> Result<()> {
        let _op = entry.op.lock().await;
        self.stop_container_locked(entry, 0).await?;
        let record = entry.snapshot();
        let dir = self.shared.layout.container_dir(&record.id);
        let run_dir = self.shared.layout.container_run_dir(&record.id);
        let lc_state = self.shared.layout.libcontainer_root().join(&record.id);
        let (images, image_id, holder) = (
            self.images.clone(),
            record.image_id.clone(),
            record.id.clone(),
        );
        tokio::task::spawn_blocking(move || {
            images.release_rootfs(&image_id, &holder, &dir)?;
            // The shim cleans libcontainer's state; leftovers of a crashed shim go here.
            let _ = std::fs::remove_dir_all(&lc_state);
            // The record dir last: a run dir never outlives it (see the state layout).
            remove_dir_if_present(&run_dir)?;
            remove_dir_if_present(&dir)
        })
        .await
        .map_err(|e| RuntimeError::Internal(format!("container removal task: {e}")))??;
        lock(&self.shared.pidfds).remove(&record.id);
        self.shared.index.remove_container(&record.id);
        if let Ok(config) = record.config() {
            let meta = config.metadata.unwrap_or_default();
            self.shared
                .index
                .release_name(&container_name_key(&record.sandbox_id, &meta), &record.id);
        }
        tracing::info!(container = %record.id, "container removed");
        self.shared.events.publish(container_event(
            &record,
            api::ContainerEventType::ContainerDeletedEvent,
            &self.shared,
        ));
        Ok(())
    }
}
