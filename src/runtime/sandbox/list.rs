//! ListPodSandbox.

use super::status::cri_state;
use crate::cri::api;
use crate::runtime::ProcessRuntime;
use crate::runtime::state::SandboxRecord;

/// The listing of `r` when it passes `filter`; read in place, as the record is large.
fn matching_sandbox(filter: &api::PodSandboxFilter, r: &SandboxRecord) -> Option<api::PodSandbox> {
    let state = cri_state(r.state) as i32;
    if !r.id.starts_with(&filter.id) || filter.state.as_ref().is_some_and(|s| s.state != state) {
        return None;
    }
    if !r.selected_by(&filter.label_selector) {
        return None;
    }
    let listing = r.listing();
    Some(api::PodSandbox {
        id: r.id.clone(),
        metadata: listing.metadata.clone(),
        state,
        created_at: r.created_at,
        labels: listing.labels.clone(),
        annotations: listing.annotations.clone(),
        runtime_handler: r.runtime_handler.clone(),
    })
}

impl ProcessRuntime {
    pub(crate) fn list_pod_sandbox_impl(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Vec<api::PodSandbox> {
        let filter = filter.unwrap_or_default();
        let mut out: Vec<api::PodSandbox> = self
            .shared
            .index
            .sandboxes_for(&filter.label_selector)
            .iter()
            .filter_map(|entry| entry.with(|r| matching_sandbox(&filter, r)))
            .collect();
        out.sort_by_key(|s| s.created_at);
        out
    }
}
