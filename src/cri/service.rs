//! The CRI service traits. Methods take and return the generated request/response messages
//! one-to-one with the gRPC API, so the gRPC server and client are thin wrappers and a fake
//! runtime for sync-loop tests implements exactly what a real one does.
//!
//! Errors are [`tonic::Status`]: each module's `thiserror` enum is mapped to a CRI status code
//! once, at the trait boundary (unknown ids are `NotFound`, bad configs `InvalidArgument`).

use crate::cri::api;
use futures::stream::BoxStream;

/// Result of a CRI call.
pub type CriResult<T> = Result<T, tonic::Status>;

/// Stream of container lifecycle events (`GetContainerEvents`).
pub type EventStream = BoxStream<'static, CriResult<api::ContainerEventResponse>>;

/// CRI `RuntimeService`: pod sandboxes and containers.
#[async_trait::async_trait]
pub trait RuntimeService: Send + Sync + 'static {
    async fn version(&self, req: api::VersionRequest) -> CriResult<api::VersionResponse>;

    async fn run_pod_sandbox(
        &self,
        req: api::RunPodSandboxRequest,
    ) -> CriResult<api::RunPodSandboxResponse>;
    async fn stop_pod_sandbox(
        &self,
        req: api::StopPodSandboxRequest,
    ) -> CriResult<api::StopPodSandboxResponse>;
    async fn remove_pod_sandbox(
        &self,
        req: api::RemovePodSandboxRequest,
    ) -> CriResult<api::RemovePodSandboxResponse>;
    async fn pod_sandbox_status(
        &self,
        req: api::PodSandboxStatusRequest,
    ) -> CriResult<api::PodSandboxStatusResponse>;
    async fn list_pod_sandbox(
        &self,
        req: api::ListPodSandboxRequest,
    ) -> CriResult<api::ListPodSandboxResponse>;

    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> CriResult<api::CreateContainerResponse>;
    async fn start_container(
        &self,
        req: api::StartContainerRequest,
    ) -> CriResult<api::StartContainerResponse>;
    async fn stop_container(
        &self,
        req: api::StopContainerRequest,
    ) -> CriResult<api::StopContainerResponse>;
    async fn remove_container(
        &self,
        req: api::RemoveContainerRequest,
    ) -> CriResult<api::RemoveContainerResponse>;
    async fn list_containers(
        &self,
        req: api::ListContainersRequest,
    ) -> CriResult<api::ListContainersResponse>;
    async fn container_status(
        &self,
        req: api::ContainerStatusRequest,
    ) -> CriResult<api::ContainerStatusResponse>;
    async fn update_container_resources(
        &self,
        req: api::UpdateContainerResourcesRequest,
    ) -> CriResult<api::UpdateContainerResourcesResponse>;
    async fn reopen_container_log(
        &self,
        req: api::ReopenContainerLogRequest,
    ) -> CriResult<api::ReopenContainerLogResponse>;

    async fn exec_sync(&self, req: api::ExecSyncRequest) -> CriResult<api::ExecSyncResponse>;
    async fn exec(&self, req: api::ExecRequest) -> CriResult<api::ExecResponse>;
    async fn attach(&self, req: api::AttachRequest) -> CriResult<api::AttachResponse>;
    async fn port_forward(
        &self,
        req: api::PortForwardRequest,
    ) -> CriResult<api::PortForwardResponse>;

    async fn container_stats(
        &self,
        req: api::ContainerStatsRequest,
    ) -> CriResult<api::ContainerStatsResponse>;
    async fn list_container_stats(
        &self,
        req: api::ListContainerStatsRequest,
    ) -> CriResult<api::ListContainerStatsResponse>;
    async fn pod_sandbox_stats(
        &self,
        req: api::PodSandboxStatsRequest,
    ) -> CriResult<api::PodSandboxStatsResponse>;
    async fn list_pod_sandbox_stats(
        &self,
        req: api::ListPodSandboxStatsRequest,
    ) -> CriResult<api::ListPodSandboxStatsResponse>;

    async fn update_runtime_config(
        &self,
        req: api::UpdateRuntimeConfigRequest,
    ) -> CriResult<api::UpdateRuntimeConfigResponse>;
    async fn status(&self, req: api::StatusRequest) -> CriResult<api::StatusResponse>;
    async fn runtime_config(
        &self,
        req: api::RuntimeConfigRequest,
    ) -> CriResult<api::RuntimeConfigResponse>;

    /// Container lifecycle events as they happen (the evented-PLEG source).
    async fn get_container_events(&self, req: api::GetEventsRequest) -> CriResult<EventStream>;

    async fn checkpoint_container(
        &self,
        _req: api::CheckpointContainerRequest,
    ) -> CriResult<api::CheckpointContainerResponse> {
        Err(tonic::Status::unimplemented(
            "CheckpointContainer is not supported by this runtime",
        ))
    }
    async fn list_metric_descriptors(
        &self,
        _req: api::ListMetricDescriptorsRequest,
    ) -> CriResult<api::ListMetricDescriptorsResponse> {
        Ok(api::ListMetricDescriptorsResponse::default())
    }
    async fn list_pod_sandbox_metrics(
        &self,
        _req: api::ListPodSandboxMetricsRequest,
    ) -> CriResult<api::ListPodSandboxMetricsResponse> {
        Ok(api::ListPodSandboxMetricsResponse::default())
    }
}

/// CRI `ImageService`: the image store.
#[async_trait::async_trait]
pub trait ImageService: Send + Sync + 'static {
    async fn list_images(&self, req: api::ListImagesRequest) -> CriResult<api::ListImagesResponse>;
    async fn image_status(
        &self,
        req: api::ImageStatusRequest,
    ) -> CriResult<api::ImageStatusResponse>;
    async fn pull_image(&self, req: api::PullImageRequest) -> CriResult<api::PullImageResponse>;
    async fn remove_image(
        &self,
        req: api::RemoveImageRequest,
    ) -> CriResult<api::RemoveImageResponse>;
    async fn image_fs_info(
        &self,
        req: api::ImageFsInfoRequest,
    ) -> CriResult<api::ImageFsInfoResponse>;
}
