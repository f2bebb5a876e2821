//! ListPodSandbox.

use super::status::cri_state;
use crate::cri::api;
use crate::runtime::ProcessRuntime;
use crate::runtime::state::SandboxRecord;
use std::collections::HashMap;

/// Every selector key/value must be present in the labels.
pub(crate) fn labels_match(
    selector: &HashMap<String, String>,
    labels: &HashMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The listing of `r` when it passes `filter`; read in place, as the record is large.
fn matching_sandbox(filter: &api::PodSandboxFilter, r: &SandboxRecord) -> Option<api::PodSandbox> {
    let state = cri_state(r.state) as i32;
    if !r.id.starts_with(&filter.id) || filter.state.as_ref().is_some_and(|s| s.state != state) {
        return None;
    }
    if !filter.label_selector.is_empty() && !labels_match(&filter.label_selector, &r.labels().ok()?)
    {
        return None;
    }
    let config = r.config().ok()?;
    Some(api::PodSandbox {
        id: r.id.clone(),
        metadata: config.metadata,
        state,
        created_at: r.created_at,
        labels: config.labels,
        annotations: config.annotations,
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
            .sandboxes()
            .iter()
            .filter_map(|entry| entry.with(|r| matching_sandbox(&filter, r)))
            .collect();
        out.sort_by_key(|s| s.created_at);
        out
    }
}
