//! UpdateContainerResources: cgroup update when cgroups are usable; the new values are kept in
//! the record either way (and reported by ContainerStatus).

use crate::cri::api;
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::spec::linux_resources;
use crate::runtime::state::ContainerState;

impl ProcessRuntime {
    pub(crate) async fn update_container_resources_impl(
        &self,
        req: api::UpdateContainerResourcesRequest,
    ) -> Result<()> {
        let entry = self.shared.index.container(&req.container_id)?;
        let _op = entry.op.lock().await;
        let record = entry.snapshot();
        let Some(resources) = req.linux else {
            return Err(RuntimeError::invalid(
                "UpdateContainerResources without linux resources",
            ));
        };
        // Validates before anything changes.
        linux_resources(&resources)?;
        if record.state == ContainerState::Running
            && let Some(path) = &record.cgroups_path
            && self.cgroups.available()
        {
            self.cgroups.update(path, &resources)?;
        } else if !self.cgroups.available() {
            self.notice_once(
                "cgroups unavailable (rootless): cpu/memory/pids limits are not enforced",
            );
        }
        entry.update(|r| r.resources = prost::Message::encode_to_vec(&resources))?;
        Ok(())
    }
}
