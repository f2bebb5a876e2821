//! The CRI traits wrapped with timing (kubelet's `instrumentedRuntimeService`): every call
//! counts into `kubelet_runtime_operations*` under kubelet's operation names.

use super::KubeletMetrics;
use crate::cri::{CriResult, EventStream, ImageService, RuntimeService, api};
use std::sync::Arc;
use std::time::Instant;

/// A [`RuntimeService`] that records each call's duration and error into `metrics`.
pub struct InstrumentedRuntime {
    inner: Arc<dyn RuntimeService>,
    metrics: Arc<KubeletMetrics>,
}

impl InstrumentedRuntime {
    pub fn new(inner: Arc<dyn RuntimeService>, metrics: Arc<KubeletMetrics>) -> Self {
        InstrumentedRuntime { inner, metrics }
    }
}

/// An [`ImageService`] that records each call's duration and error into `metrics`.
pub struct InstrumentedImages {
    inner: Arc<dyn ImageService>,
    metrics: Arc<KubeletMetrics>,
}

impl InstrumentedImages {
    pub fn new(inner: Arc<dyn ImageService>, metrics: Arc<KubeletMetrics>) -> Self {
        InstrumentedImages { inner, metrics }
    }
}

// One impl block per trait, generated whole so async_trait sees the expanded methods.
macro_rules! instrument {
    ($trait:ident for $ty:ident { $($method:ident($req:ty) -> $resp:ty = $name:literal;)* }) => {
        #[async_trait::async_trait]
        impl $trait for $ty {
            $(
                async fn $method(&self, req: $req) -> CriResult<$resp> {
                    let started = Instant::now();
                    let result = self.inner.$method(req).await;
                    self.metrics
                        .observe_operation($name, started.elapsed(), result.is_err());
                    result
                }
            )*
        }
    };
}

instrument!(RuntimeService for InstrumentedRuntime {
    version(api::VersionRequest) -> api::VersionResponse = "version";
    run_pod_sandbox(api::RunPodSandboxRequest) -> api::RunPodSandboxResponse = "run_podsandbox";
    stop_pod_sandbox(api::StopPodSandboxRequest) -> api::StopPodSandboxResponse = "stop_podsandbox";
    remove_pod_sandbox(api::RemovePodSandboxRequest) -> api::RemovePodSandboxResponse = "remove_podsandbox";
    pod_sandbox_status(api::PodSandboxStatusRequest) -> api::PodSandboxStatusResponse = "podsandbox_status";
    list_pod_sandbox(api::ListPodSandboxRequest) -> api::ListPodSandboxResponse = "list_podsandbox";
    create_container(api::CreateContainerRequest) -> api::CreateContainerResponse = "create_container";
    start_container(api::StartContainerRequest) -> api::StartContainerResponse = "start_container";
    stop_container(api::StopContainerRequest) -> api::StopContainerResponse = "stop_container";
    remove_container(api::RemoveContainerRequest) -> api::RemoveContainerResponse = "remove_container";
    list_containers(api::ListContainersRequest) -> api::ListContainersResponse = "list_containers";
    container_status(api::ContainerStatusRequest) -> api::ContainerStatusResponse = "container_status";
    update_container_resources(api::UpdateContainerResourcesRequest) -> api::UpdateContainerResourcesResponse = "update_container";
    reopen_container_log(api::ReopenContainerLogRequest) -> api::ReopenContainerLogResponse = "reopen_container_log";
    exec_sync(api::ExecSyncRequest) -> api::ExecSyncResponse = "exec_sync";
    exec(api::ExecRequest) -> api::ExecResponse = "exec";
    attach(api::AttachRequest) -> api::AttachResponse = "attach";
    port_forward(api::PortForwardRequest) -> api::PortForwardResponse = "port_forward";
    container_stats(api::ContainerStatsRequest) -> api::ContainerStatsResponse = "container_stats";
    list_container_stats(api::ListContainerStatsRequest) -> api::ListContainerStatsResponse = "list_container_stats";
    pod_sandbox_stats(api::PodSandboxStatsRequest) -> api::PodSandboxStatsResponse = "podsandbox_stats";
    list_pod_sandbox_stats(api::ListPodSandboxStatsRequest) -> api::ListPodSandboxStatsResponse = "list_podsandbox_stats";
    update_runtime_config(api::UpdateRuntimeConfigRequest) -> api::UpdateRuntimeConfigResponse = "update_runtime_config";
    status(api::StatusRequest) -> api::StatusResponse = "status";
    runtime_config(api::RuntimeConfigRequest) -> api::RuntimeConfigResponse = "runtime_config";
    get_container_events(api::GetEventsRequest) -> EventStream = "get_container_events";
    checkpoint_container(api::CheckpointContainerRequest) -> api::CheckpointContainerResponse = "checkpoint_container";
    list_metric_descriptors(api::ListMetricDescriptorsRequest) -> api::ListMetricDescriptorsResponse = "list_metric_descriptors";
    list_pod_sandbox_metrics(api::ListPodSandboxMetricsRequest) -> api::ListPodSandboxMetricsResponse = "list_podsandbox_metrics";
});

instrument!(ImageService for InstrumentedImages {
    list_images(api::ListImagesRequest) -> api::ListImagesResponse = "list_images";
    image_status(api::ImageStatusRequest) -> api::ImageStatusResponse = "image_status";
    pull_image(api::PullImageRequest) -> api::PullImageResponse = "pull_image";
    remove_image(api::RemoveImageRequest) -> api::RemoveImageResponse = "remove_image";
    image_fs_info(api::ImageFsInfoRequest) -> api::ImageFsInfoResponse = "image_fs_info";
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::clock::FakeClock;
    use crate::kubelet::fake::FakeRuntime;

    #[tokio::test]
    async fn calls_and_failures_are_counted_by_operation() {
        let metrics = Arc::new(KubeletMetrics::new());
        let fake = FakeRuntime::new(Arc::new(FakeClock::new()));
        let runtime = InstrumentedRuntime::new(fake, Arc::clone(&metrics));
        runtime
            .version(api::VersionRequest::default())
            .await
            .unwrap();
        let missing = api::ContainerStatusRequest {
            container_id: "no-such-container".into(),
            ..Default::default()
        };
        assert!(runtime.container_status(missing).await.is_err());
        let text = metrics.render().unwrap();
        for want in [
            "kubelet_runtime_operations_total{operation_type=\"version\"} 1",
            "kubelet_runtime_operations_total{operation_type=\"container_status\"} 1",
            "kubelet_runtime_operations_errors_total{operation_type=\"container_status\"} 1",
            "kubelet_runtime_operations_duration_seconds_count{operation_type=\"version\"} 1",
        ] {
            assert!(text.lines().any(|l| l == want), "{want} not in\n{text}");
        }
        assert!(
            !text.contains("errors_total{operation_type=\"version\"}"),
            "{text}"
        );
    }
}
