//! ListContainers.

use crate::cri::api;
use crate::runtime::ProcessRuntime;
use crate::runtime::state::ContainerRecord;

impl ProcessRuntime {
    pub(crate) fn list_containers_impl(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Vec<api::Container> {
        let filter = filter.unwrap_or_default();
        let mut out: Vec<api::Container> = self
            .shared
            .index
            .containers_for(&filter.label_selector)
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
                    wanted.then(|| listed_container(r))
                })
            })
            .collect();
        out.sort_by_key(|c| c.created_at);
        out
    }
}

/// The listing of `r`: the fields ListContainers returns, from the record's cached listing
/// (not a whole ContainerStatus: the PLEG lists every container each second).
fn listed_container(r: &ContainerRecord) -> api::Container {
    let listing = r.listing();
    api::Container {
        id: r.id.clone(),
        pod_sandbox_id: r.sandbox_id.clone(),
        metadata: listing.metadata.clone(),
        image: Some(r.image_spec()),
        image_ref: r.image_id.clone(),
        state: r.state.to_cri() as i32,
        created_at: r.created_at,
        labels: listing.labels.clone(),
        annotations: listing.annotations.clone(),
        image_id: r.image_id.clone(),
    }
}
