//! PodSandboxStatus.

use super::namespace_options;
use crate::cri::api;
use crate::runtime::ProcessRuntime;
use crate::runtime::error::Result;
use crate::runtime::state::{SandboxRecord, SandboxState};
use std::collections::HashMap;

pub(crate) fn cri_state(state: SandboxState) -> api::PodSandboxState {
    match state {
        SandboxState::Ready => api::PodSandboxState::SandboxReady,
        SandboxState::NotReady => api::PodSandboxState::SandboxNotready,
    }
}

/// The CRI status of a sandbox record.
pub(crate) fn sandbox_status(record: &SandboxRecord) -> api::PodSandboxStatus {
    let config = record.config().unwrap_or_default();
    api::PodSandboxStatus {
        id: record.id.clone(),
        metadata: config.metadata.clone(),
        state: cri_state(record.state) as i32,
        created_at: record.created_at,
        network: Some(api::PodSandboxNetworkStatus {
            ip: record.ip.clone(),
            additional_ips: record
                .additional_ips
                .iter()
                .map(|ip| api::PodIp { ip: ip.clone() })
                .collect(),
        }),
        linux: Some(api::LinuxPodSandboxStatus {
            namespaces: Some(api::Namespace {
                options: Some(namespace_options(&config)),
            }),
        }),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        runtime_handler: record.runtime_handler.clone(),
    }
}

impl ProcessRuntime {
    pub(crate) async fn pod_sandbox_status_impl(
        &self,
        req: api::PodSandboxStatusRequest,
    ) -> Result<api::PodSandboxStatusResponse> {
        let record = self.shared.index.sandbox(&req.pod_sandbox_id)?.snapshot();
        let mut info = HashMap::new();
        if req.verbose {
            let verbose = serde_json::json!({
                "infraPid": record.infra.map(|p| p.pid),
                "shimPid": record.infra.map(|p| p.shim_pid),
                "hostname": record.hostname,
                "network": record.network_info,
                "cniAttached": record.network.is_some(),
                "namespaces": record.namespaces,
                "cgroupParent": record.cgroup_parent,
                "cgroups": self.cgroups.unavailable_reason().unwrap_or("available"),
            });
            info.insert("info".to_string(), verbose.to_string());
        }
        let containers_statuses = self
            .shared
            .index
            .containers_of(&record.id)
            .iter()
            .map(|c| crate::runtime::container::status::container_status(&c.snapshot()))
            .collect();
        Ok(api::PodSandboxStatusResponse {
            status: Some(sandbox_status(&record)),
            info,
            containers_statuses,
            timestamp: self.now(),
        })
    }
}
