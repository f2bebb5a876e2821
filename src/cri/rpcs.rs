//! The one table of CRI unary RPCs, shared by the gRPC server and client so neither can forget
//! one (the traits' default methods would otherwise hide an omission).
//!
//! Each entry is `method(Request) -> Response, deadline;` where `deadline` names the
//! `RemoteRuntime` method computing the client's deadline for that call (the server ignores it).
//! The streaming `GetContainerEvents` is not in the table; both sides write it by hand.

/// Calls `$callback! { $($prefix)* [ <runtime.v1.RuntimeService unary RPCs> ] }`.
macro_rules! runtime_unary_rpcs {
    ($callback:ident! { $($prefix:tt)* }) => {
        $callback! { $($prefix)* [
            version(VersionRequest) -> VersionResponse, call_deadline;
            run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse, call_deadline;
            stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse, call_deadline;
            remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse, call_deadline;
            pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse, call_deadline;
            list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse, call_deadline;
            create_container(CreateContainerRequest) -> CreateContainerResponse, call_deadline;
            start_container(StartContainerRequest) -> StartContainerResponse, call_deadline;
            stop_container(StopContainerRequest) -> StopContainerResponse, stop_deadline;
            remove_container(RemoveContainerRequest) -> RemoveContainerResponse, call_deadline;
            list_containers(ListContainersRequest) -> ListContainersResponse, call_deadline;
            container_status(ContainerStatusRequest) -> ContainerStatusResponse, call_deadline;
            update_container_resources(UpdateContainerResourcesRequest)
                -> UpdateContainerResourcesResponse, call_deadline;
            reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse, call_deadline;
            exec_sync(ExecSyncRequest) -> ExecSyncResponse, exec_sync_deadline;
            exec(ExecRequest) -> ExecResponse, call_deadline;
            attach(AttachRequest) -> AttachResponse, call_deadline;
            port_forward(PortForwardRequest) -> PortForwardResponse, call_deadline;
            container_stats(ContainerStatsRequest) -> ContainerStatsResponse, call_deadline;
            list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse, call_deadline;
            pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse, call_deadline;
            list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse, call_deadline;
            update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse, call_deadline;
            status(StatusRequest) -> StatusResponse, call_deadline;
            runtime_config(RuntimeConfigRequest) -> RuntimeConfigResponse, call_deadline;
            checkpoint_container(CheckpointContainerRequest) -> CheckpointContainerResponse, call_deadline;
            list_metric_descriptors(ListMetricDescriptorsRequest)
                -> ListMetricDescriptorsResponse, call_deadline;
            list_pod_sandbox_metrics(ListPodSandboxMetricsRequest)
                -> ListPodSandboxMetricsResponse, call_deadline;
        ] }
    };
}

/// Calls `$callback! { $($prefix)* [ <runtime.v1.ImageService RPCs> ] }`.
macro_rules! image_rpcs {
    ($callback:ident! { $($prefix:tt)* }) => {
        $callback! { $($prefix)* [
            list_images(ListImagesRequest) -> ListImagesResponse, call_deadline;
            image_status(ImageStatusRequest) -> ImageStatusResponse, call_deadline;
            pull_image(PullImageRequest) -> PullImageResponse, pull_deadline;
            remove_image(RemoveImageRequest) -> RemoveImageResponse, call_deadline;
            image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse, call_deadline;
        ] }
    };
}

pub(crate) use {image_rpcs, runtime_unary_rpcs};
