//! ListContainers.

use super::status::container_status;
use crate::cri::api;
use crate::runtime::ProcessRuntime;

impl ProcessRuntime {
    pub(crate) fn list_containers_impl(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Vec<api::Container> {
        let filter = filter.unwrap_or_default();
        let mut out: Vec<api::Container> = self
            .shared
            .index
            .containers()
            .iter()
            .filter_map(|entry| {
                entry.with(|r| {
                    let wanted = r.id.starts_with(&filter.id)
                        && r.sandbox_id.starts_with(&filter.pod_sandbox_id)
                        && filter
                            .state
                            .as_ref()
                            .is_none_or(|s| s.state == r.state.to_cri() as i32)
                        && r.selected_by(&filter.label_selector);
                    wanted.then(|| container_status(r).into_container(&r.sandbox_id))
                })
            })
            .collect();
        out.sort_by_key(|c| c.created_at);
        out
    }
}

trait IntoContainer {
    fn into_container(self, sandbox_id: &str) -> api::Container;
}

impl IntoContainer for api::ContainerStatus {
    fn into_container(self, sandbox_id: &str) -> api::Container {
        api::Container {
            id: self.id,
            pod_sandbox_id: sandbox_id.to_string(),
            metadata: self.metadata,
            image: self.image,
            image_ref: self.image_ref,
            state: self.state,
            created_at: self.created_at,
            labels: self.labels,
            annotations: self.annotations,
            image_id: self.image_id,
        }
    }
}
