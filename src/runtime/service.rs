//! `impl RuntimeService for ProcessRuntime`: the one place runtime errors become CRI statuses.

use crate::cri::{CRI_API_VERSION, CriResult, EventStream, RuntimeService, api};
use crate::runtime::ProcessRuntime;
use crate::runtime::error::RuntimeError;

/// The bare runtime has no URL to give: its `StreamingRuntime` side is served by a streaming
/// server, through `cri::streaming::WithStreaming` (as `runp serve` and `runp agent` do).
const NO_STREAMING: &str = "Exec/Attach/PortForward URLs come from the streaming server: wrap the runtime in WithStreaming (runp serve and runp agent do)";

fn cri<T>(result: Result<T, RuntimeError>) -> CriResult<T> {
    result.map_err(tonic::Status::from)
}

#[async_trait::async_trait]
impl RuntimeService for ProcessRuntime {
    async fn version(&self, _req: api::VersionRequest) -> CriResult<api::VersionResponse> {
        Ok(api::VersionResponse {
            version: "0.1.0".to_string(),
            runtime_name: "runp".to_string(),
            runtime_version: env!("CARGO_PKG_VERSION").to_string(),
            runtime_api_version: CRI_API_VERSION.to_string(),
        })
    }

    async fn run_pod_sandbox(
        &self,
        req: api::RunPodSandboxRequest,
    ) -> CriResult<api::RunPodSandboxResponse> {
        let pod_sandbox_id = cri(self.run_pod_sandbox_impl(req).await)?;
        Ok(api::RunPodSandboxResponse { pod_sandbox_id })
    }

    async fn stop_pod_sandbox(
        &self,
        req: api::StopPodSandboxRequest,
    ) -> CriResult<api::StopPodSandboxResponse> {
        cri(self.stop_pod_sandbox_impl(&req.pod_sandbox_id).await)?;
        Ok(api::StopPodSandboxResponse {})
    }

    async fn remove_pod_sandbox(
        &self,
        req: api::RemovePodSandboxRequest,
    ) -> CriResult<api::RemovePodSandboxResponse> {
        cri(self.remove_pod_sandbox_impl(&req.pod_sandbox_id).await)?;
        Ok(api::RemovePodSandboxResponse {})
    }

    async fn pod_sandbox_status(
        &self,
        req: api::PodSandboxStatusRequest,
    ) -> CriResult<api::PodSandboxStatusResponse> {
        cri(self.pod_sandbox_status_impl(req).await)
    }

    async fn list_pod_sandbox(
        &self,
        req: api::ListPodSandboxRequest,
    ) -> CriResult<api::ListPodSandboxResponse> {
        Ok(api::ListPodSandboxResponse {
            items: self.list_pod_sandbox_impl(req.filter),
        })
    }

    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> CriResult<api::CreateContainerResponse> {
        let container_id = cri(self.create_container_impl(req).await)?;
        Ok(api::CreateContainerResponse { container_id })
    }

    async fn start_container(
        &self,
        req: api::StartContainerRequest,
    ) -> CriResult<api::StartContainerResponse> {
        cri(self.start_container_impl(&req.container_id).await)?;
        Ok(api::StartContainerResponse {})
    }

    async fn stop_container(
        &self,
        req: api::StopContainerRequest,
    ) -> CriResult<api::StopContainerResponse> {
        cri(self
            .stop_container_impl(&req.container_id, req.timeout)
            .await)?;
        Ok(api::StopContainerResponse {})
    }

    async fn remove_container(
        &self,
        req: api::RemoveContainerRequest,
    ) -> CriResult<api::RemoveContainerResponse> {
        cri(self.remove_container_impl(&req.container_id).await)?;
        Ok(api::RemoveContainerResponse {})
    }

    async fn list_containers(
        &self,
        req: api::ListContainersRequest,
    ) -> CriResult<api::ListContainersResponse> {
        Ok(api::ListContainersResponse {
            containers: self.list_containers_impl(req.filter),
        })
    }

    async fn container_status(
        &self,
        req: api::ContainerStatusRequest,
    ) -> CriResult<api::ContainerStatusResponse> {
        cri(self.container_status_impl(req).await)
    }

    async fn update_container_resources(
        &self,
        req: api::UpdateContainerResourcesRequest,
    ) -> CriResult<api::UpdateContainerResourcesResponse> {
        cri(self.update_container_resources_impl(req).await)?;
        Ok(api::UpdateContainerResourcesResponse {})
    }

    async fn reopen_container_log(
        &self,
        req: api::ReopenContainerLogRequest,
    ) -> CriResult<api::ReopenContainerLogResponse> {
        cri(self.reopen_container_log_impl(&req.container_id).await)?;
        Ok(api::ReopenContainerLogResponse {})
    }

    async fn exec_sync(&self, req: api::ExecSyncRequest) -> CriResult<api::ExecSyncResponse> {
        cri(self.exec_sync_impl(req).await)
    }

    async fn exec(&self, _req: api::ExecRequest) -> CriResult<api::ExecResponse> {
        Err(tonic::Status::unimplemented(NO_STREAMING))
    }

    async fn attach(&self, _req: api::AttachRequest) -> CriResult<api::AttachResponse> {
        Err(tonic::Status::unimplemented(NO_STREAMING))
    }

    async fn port_forward(
        &self,
        _req: api::PortForwardRequest,
    ) -> CriResult<api::PortForwardResponse> {
        Err(tonic::Status::unimplemented(NO_STREAMING))
    }

    async fn container_stats(
        &self,
        req: api::ContainerStatsRequest,
    ) -> CriResult<api::ContainerStatsResponse> {
        let stats = cri(self.container_stats_impl(&req.container_id))?;
        Ok(api::ContainerStatsResponse { stats: Some(stats) })
    }

    async fn list_container_stats(
        &self,
        req: api::ListContainerStatsRequest,
    ) -> CriResult<api::ListContainerStatsResponse> {
        Ok(api::ListContainerStatsResponse {
            stats: self.list_container_stats_impl(req.filter),
        })
    }

    async fn pod_sandbox_stats(
        &self,
        req: api::PodSandboxStatsRequest,
    ) -> CriResult<api::PodSandboxStatsResponse> {
        let stats = cri(self.pod_sandbox_stats_impl(&req.pod_sandbox_id))?;
        Ok(api::PodSandboxStatsResponse { stats: Some(stats) })
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: api::ListPodSandboxStatsRequest,
    ) -> CriResult<api::ListPodSandboxStatsResponse> {
        Ok(api::ListPodSandboxStatsResponse {
            stats: self.list_pod_sandbox_stats_impl(req.filter),
        })
    }

    async fn update_runtime_config(
        &self,
        req: api::UpdateRuntimeConfigRequest,
    ) -> CriResult<api::UpdateRuntimeConfigResponse> {
        if let Some(cidr) = req
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
            .filter(|c| !c.is_empty())
        {
            tracing::info!(pod_cidr = %cidr, "pod CIDR from UpdateRuntimeConfig ignored: runp allocates pod IPs from its --pod-cidr");
        }
        Ok(api::UpdateRuntimeConfigResponse {})
    }

    async fn status(&self, req: api::StatusRequest) -> CriResult<api::StatusResponse> {
        let mut info = std::collections::HashMap::new();
        if req.verbose {
            let verbose = serde_json::json!({
                "cgroups": self.cgroups.unavailable_reason().unwrap_or("available"),
                "cgroupSetup": self.cgroups.setup_name(),
                "rootless": self.rootless,
                "network": self.network.describe(),
            });
            info.insert("info".to_string(), verbose.to_string());
        }
        Ok(api::StatusResponse {
            status: Some(api::RuntimeStatus {
                conditions: vec![
                    api::RuntimeCondition {
                        r#type: "RuntimeReady".to_string(),
                        status: true,
                        reason: String::new(),
                        message: String::new(),
                    },
                    // Loopback-only pods still run (and reach each other through hostNetwork
                    // services), so the network is "ready" either way; the reason says which.
                    match self.network.loopback_reason() {
                        None => api::RuntimeCondition {
                            r#type: "NetworkReady".to_string(),
                            status: true,
                            reason: String::new(),
                            message: self.network.pod_summary(),
                        },
                        Some(reason) => api::RuntimeCondition {
                            r#type: "NetworkReady".to_string(),
                            status: true,
                            reason: "LoopbackOnly".to_string(),
                            message: format!(
                                "each pod has its own network namespace with loopback only: {reason}"
                            ),
                        },
                    },
                ],
            }),
            info,
            runtime_handlers: vec![api::RuntimeHandler {
                name: String::new(),
                features: Some(api::RuntimeHandlerFeatures {
                    recursive_read_only_mounts: true,
                    user_namespaces: false,
                }),
            }],
            features: Some(api::RuntimeFeatures {
                supplemental_groups_policy: true,
            }),
        })
    }

    async fn runtime_config(
        &self,
        _req: api::RuntimeConfigRequest,
    ) -> CriResult<api::RuntimeConfigResponse> {
        Ok(api::RuntimeConfigResponse {
            linux: Some(api::LinuxRuntimeConfiguration {
                cgroup_driver: api::CgroupDriver::Cgroupfs as i32,
            }),
        })
    }

    async fn get_container_events(&self, _req: api::GetEventsRequest) -> CriResult<EventStream> {
        Ok(self.shared.events.subscribe())
    }
}
