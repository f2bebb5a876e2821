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
        self.teardown_container(&record.id, &record.image_id)
            .await?;
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

    /// Releases the rootfs lease (`image_id` "" when the record is gone), libcontainer's
    /// leftovers of a crashed shim (a live shim cleans its own), the run dir, then the record
    /// dir: a run dir never outlives its record dir (see the state layout).
    pub(crate) async fn teardown_container(&self, id: &str, image_id: &str) -> Result<()> {
        let layout = &self.shared.layout;
        let (images, image_id, holder) =
            (self.images.clone(), image_id.to_string(), id.to_string());
        let (dir, run_dir, lc_state) = (
            layout.container_dir(id),
            layout.container_run_dir(id),
            layout.libcontainer_root().join(id),
        );
        tokio::task::spawn_blocking(move || {
            images.release_rootfs(&image_id, &holder, &dir)?;
            let _ = std::fs::remove_dir_all(&lc_state);
            remove_dir_if_present(&run_dir)?;
            remove_dir_if_present(&dir)
        })
        .await
        .map_err(|e| RuntimeError::Internal(format!("container teardown task: {e}")))?
    }
}
