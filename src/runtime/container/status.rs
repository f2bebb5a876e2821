//! ContainerStatus.

use crate::cri::api;
use crate::runtime::ProcessRuntime;
use crate::runtime::error::Result;
use crate::runtime::state::ContainerRecord;
use std::collections::HashMap;

/// The CRI status of a container record.
pub(crate) fn container_status(record: &ContainerRecord) -> api::ContainerStatus {
    let config = record.config().unwrap_or_default();
    api::ContainerStatus {
        id: record.id.clone(),
        metadata: config.metadata.clone(),
        state: record.state.to_cri() as i32,
        created_at: record.created_at,
        started_at: record.started_at,
        finished_at: record.finished_at,
        exit_code: record.exit_code,
        image: Some(record.image_spec()),
        image_ref: record.image_id.clone(),
        reason: record.reason.clone(),
        message: record.message.clone(),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        mounts: config.mounts.clone(),
        log_path: record
            .log_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        resources: record.resources().map(|linux| api::ContainerResources {
            linux: Some(linux),
            windows: None,
        }),
        image_id: record.image_id.clone(),
        user: Some(api::ContainerUser {
            linux: Some(api::LinuxContainerUser {
                uid: i64::from(record.user.uid),
                gid: i64::from(record.user.gid),
                supplemental_groups: record
                    .user
                    .additional_gids
                    .iter()
                    .map(|g| i64::from(*g))
                    .collect(),
            }),
        }),
    }
}

impl ProcessRuntime {
    pub(crate) async fn container_status_impl(
        &self,
        req: api::ContainerStatusRequest,
    ) -> Result<api::ContainerStatusResponse> {
        let record = self.shared.index.container(&req.container_id)?.snapshot();
        let mut info = HashMap::new();
        if req.verbose {
            let dir = self.shared.layout.container_run_dir(&record.id);
            let verbose = serde_json::json!({
                "pid": record.process.map(|p| p.pid),
                "shimPid": record.process.map(|p| p.shim_pid),
                "sandboxID": record.sandbox_id,
                "bundle": dir.join("bundle"),
                "rootfs": record.rootfs,
                "cgroupsPath": record.cgroups_path,
                "stopSignal": record.stop_signal,
                "imageRef": record.image_id,
            });
            info.insert("info".to_string(), verbose.to_string());
        }
        Ok(api::ContainerStatusResponse {
            status: Some(container_status(&record)),
            info,
        })
    }
}
