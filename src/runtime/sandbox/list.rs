//! ListPodSandbox.

use super::status::cri_state;
use crate::cri::api;
use crate::runtime::ProcessRuntime;
use std::collections::HashMap;

/// Every selector key/value must be present in the labels.
pub(crate) fn labels_match(
    selector: &HashMap<String, String>,
    labels: &HashMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
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
            .sandbox_records(&filter.id)
            .into_iter()
            .filter(|r| {
                filter
                    .state
                    .as_ref()
                    .is_none_or(|s| s.state == cri_state(r.state) as i32)
            })
            .filter_map(|r| {
                let config = r.config().ok()?;
                labels_match(&filter.label_selector, &config.labels).then(|| api::PodSandbox {
                    id: r.id.clone(),
                    metadata: config.metadata.clone(),
                    state: cri_state(r.state) as i32,
                    created_at: r.created_at,
                    labels: config.labels,
                    annotations: config.annotations,
                    runtime_handler: r.runtime_handler.clone(),
                })
            })
            .collect();
        out.sort_by_key(|s| s.created_at);
        out
    }
}
