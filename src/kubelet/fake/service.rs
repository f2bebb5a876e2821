//! `RuntimeService` of the fake runtime.

use super::{Behavior, FakeContainer, FakeRuntime, FakeSandbox, State};
use crate::cri::{CriResult, EventStream, RuntimeService, api};
use futures::StreamExt;
use std::collections::HashMap;
use tonic::Status;

fn labels_match(selector: &HashMap<String, String>, labels: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn sandbox_status(id: &str, sandbox: &FakeSandbox, pod_ip: &str) -> api::PodSandboxStatus {
    let host_network = sandbox
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .is_some_and(|n| n.network == api::NamespaceMode::Node as i32);
    api::PodSandboxStatus {
        id: id.to_string(),
        metadata: sandbox.config.metadata.clone(),
        state: if sandbox.ready {
            api::PodSandboxState::SandboxReady as i32
        } else {
            api::PodSandboxState::SandboxNotready as i32
        },
        created_at: sandbox.created_at,
        network: Some(api::PodSandboxNetworkStatus {
            ip: pod_ip.to_string(),
            additional_ips: Vec::new(),
        }),
        linux: Some(api::LinuxPodSandboxStatus {
            namespaces: Some(api::Namespace {
                options: Some(api::NamespaceOption {
                    network: if host_network {
                        api::NamespaceMode::Node as i32
                    } else {
                        api::NamespaceMode::Pod as i32
                    },
                    ..Default::default()
                }),
            }),
        }),
        labels: sandbox.config.labels.clone(),
        annotations: sandbox.config.annotations.clone(),
        runtime_handler: String::new(),
    }
}

fn container_status(id: &str, c: &FakeContainer) -> api::ContainerStatus {
    api::ContainerStatus {
        id: id.to_string(),
        metadata: c.config.metadata.clone(),
        state: c.state as i32,
        created_at: c.created_at,
        started_at: c.started_at,
        finished_at: c.finished_at,
        exit_code: c.exit_code,
        image: c.config.image.clone(),
        image_ref: c.image_ref.clone(),
        image_id: c.image_ref.clone(),
        reason: c.reason.clone(),
        labels: c.config.labels.clone(),
        annotations: c.config.annotations.clone(),
        mounts: c.config.mounts.clone(),
        log_path: c.config.log_path.clone(),
        ..Default::default()
    }
}

/// The CRI event for container `id`, with its sandbox and status.
pub(crate) fn event(
    state: &State,
    id: &str,
    kind: api::ContainerEventType,
    at: i64,
) -> Option<api::ContainerEventResponse> {
    let container = state.containers.get(id)?;
    let sandbox = state.sandboxes.get(&container.sandbox_id);
    Some(api::ContainerEventResponse {
        container_id: id.to_string(),
        container_event_type: kind as i32,
        created_at: at,
        pod_sandbox_status: sandbox
            .map(|s| sandbox_status(&container.sandbox_id, s, &state.pod_ip)),
        containers_statuses: vec![container_status(id, container)],
    })
}

fn not_found(what: &str, id: &str) -> Status {
    Status::not_found(format!("{what} {id:?} not found"))
}

fn unsupported(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not supported by the fake runtime"))
}

impl FakeRuntime {
    fn emit(&self, id: &str, kind: api::ContainerEventType) {
        let now = self.now_nanos();
        let event = event(&self.lock(), id, kind, now);
        if let Some(event) = event {
            let _ = self.events.send(event);
        }
    }
}

#[async_trait::async_trait]
impl RuntimeService for FakeRuntime {
    async fn version(&self, _req: api::VersionRequest) -> CriResult<api::VersionResponse> {
        Ok(api::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "0".into(),
            runtime_api_version: crate::cri::CRI_API_VERSION.into(),
        })
    }

    async fn run_pod_sandbox(
        &self,
        req: api::RunPodSandboxRequest,
    ) -> CriResult<api::RunPodSandboxResponse> {
        let config = req
            .config
            .ok_or_else(|| Status::invalid_argument("sandbox config is required"))?;
        let now = self.now_nanos();
        let mut state = self.lock();
        let id = FakeRuntime::fresh_id(&mut state, "sb");
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        state.calls.push(format!("RunPodSandbox {id} {name}"));
        state.sandboxes.insert(
            id.clone(),
            FakeSandbox {
                config,
                ready: true,
                created_at: now,
            },
        );
        Ok(api::RunPodSandboxResponse { pod_sandbox_id: id })
    }

    async fn stop_pod_sandbox(
        &self,
        req: api::StopPodSandboxRequest,
    ) -> CriResult<api::StopPodSandboxResponse> {
        let id = req.pod_sandbox_id;
        self.record(format!("StopPodSandbox {id}"));
        let running: Vec<String> = {
            let state = self.lock();
            if !state.sandboxes.contains_key(&id) {
                return Err(not_found("sandbox", &id));
            }
            state
                .containers
                .iter()
                .filter(|(_, c)| c.sandbox_id == id)
                .map(|(cid, _)| cid.clone())
                .collect()
        };
        for cid in running {
            self.finish(&cid, 137, "");
        }
        if let Some(sandbox) = self.lock().sandboxes.get_mut(&id) {
            sandbox.ready = false;
        }
        Ok(api::StopPodSandboxResponse {})
    }

    async fn remove_pod_sandbox(
        &self,
        req: api::RemovePodSandboxRequest,
    ) -> CriResult<api::RemovePodSandboxResponse> {
        let id = req.pod_sandbox_id;
        let mut state = self.lock();
        state.calls.push(format!("RemovePodSandbox {id}"));
        state.sandboxes.remove(&id);
        state.containers.retain(|_, c| c.sandbox_id != id);
        Ok(api::RemovePodSandboxResponse {})
    }

    async fn pod_sandbox_status(
        &self,
        req: api::PodSandboxStatusRequest,
    ) -> CriResult<api::PodSandboxStatusResponse> {
        let state = self.lock();
        let id = req.pod_sandbox_id;
        let sandbox = state
            .sandboxes
            .get(&id)
            .ok_or_else(|| not_found("sandbox", &id))?;
        Ok(api::PodSandboxStatusResponse {
            status: Some(sandbox_status(&id, sandbox, &state.pod_ip)),
            ..Default::default()
        })
    }

    async fn list_pod_sandbox(
        &self,
        req: api::ListPodSandboxRequest,
    ) -> CriResult<api::ListPodSandboxResponse> {
        let filter = req.filter.unwrap_or_default();
        let state = self.lock();
        let items = state
            .sandboxes
            .iter()
            .filter(|(id, s)| {
                (filter.id.is_empty() || **id == filter.id)
                    && filter.state.as_ref().is_none_or(|want| {
                        (want.state == api::PodSandboxState::SandboxReady as i32) == s.ready
                    })
                    && labels_match(&filter.label_selector, &s.config.labels)
            })
            .map(|(id, s)| api::PodSandbox {
                id: id.clone(),
                metadata: s.config.metadata.clone(),
                state: sandbox_status(id, s, "").state,
                created_at: s.created_at,
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
                runtime_handler: String::new(),
            })
            .collect();
        Ok(api::ListPodSandboxResponse { items })
    }

    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> CriResult<api::CreateContainerResponse> {
        let config = req
            .config
            .ok_or_else(|| Status::invalid_argument("container config is required"))?;
        let now = self.now_nanos();
        let mut state = self.lock();
        if !state
            .sandboxes
            .get(&req.pod_sandbox_id)
            .is_some_and(|s| s.ready)
        {
            return Err(Status::failed_precondition(format!(
                "sandbox {:?} is not ready",
                req.pod_sandbox_id
            )));
        }
        let image = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let image_ref = super::images::find(&state, &image)
            .map(|i| i.id.clone())
            .ok_or_else(|| Status::not_found(format!("image {image:?} not found")))?;
        let id = FakeRuntime::fresh_id(&mut state, "ctr");
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        state.calls.push(format!("CreateContainer {id} {name}"));
        state.containers.insert(
            id.clone(),
            FakeContainer {
                sandbox_id: req.pod_sandbox_id,
                config,
                state: api::ContainerState::ContainerCreated,
                created_at: now,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
                image_ref,
            },
        );
        drop(state);
        self.emit(&id, api::ContainerEventType::ContainerCreatedEvent);
        Ok(api::CreateContainerResponse { container_id: id })
    }

    async fn start_container(
        &self,
        req: api::StartContainerRequest,
    ) -> CriResult<api::StartContainerResponse> {
        let id = req.container_id;
        let now = self.now_nanos();
        let behavior = {
            let mut state = self.lock();
            state.calls.push(format!("StartContainer {id}"));
            let container = state
                .containers
                .get_mut(&id)
                .ok_or_else(|| not_found("container", &id))?;
            if container.state != api::ContainerState::ContainerCreated {
                return Err(Status::failed_precondition(format!(
                    "container {id:?} is not in the created state"
                )));
            }
            container.state = api::ContainerState::ContainerRunning;
            container.started_at = now;
            let name = container.name().to_string();
            state.starts.push((name.clone(), now));
            state
                .behaviors
                .get(&name)
                .cloned()
                .unwrap_or(Behavior::RunForever)
        };
        self.emit(&id, api::ContainerEventType::ContainerStartedEvent);
        self.schedule_exit(&id, behavior);
        Ok(api::StartContainerResponse {})
    }

    async fn stop_container(
        &self,
        req: api::StopContainerRequest,
    ) -> CriResult<api::StopContainerResponse> {
        let id = req.container_id;
        let code = {
            let mut state = self.lock();
            state
                .calls
                .push(format!("StopContainer {id} {}", req.timeout));
            if !state.containers.contains_key(&id) {
                return Err(not_found("container", &id));
            }
            state.stop_exit_code
        };
        self.finish(&id, code, "");
        Ok(api::StopContainerResponse {})
    }

    async fn remove_container(
        &self,
        req: api::RemoveContainerRequest,
    ) -> CriResult<api::RemoveContainerResponse> {
        let id = req.container_id;
        {
            let mut state = self.lock();
            state.calls.push(format!("RemoveContainer {id}"));
            if !state.containers.contains_key(&id) {
                return Ok(api::RemoveContainerResponse {});
            }
        }
        self.emit(&id, api::ContainerEventType::ContainerDeletedEvent);
        self.lock().containers.remove(&id);
        Ok(api::RemoveContainerResponse {})
    }

    async fn list_containers(
        &self,
        req: api::ListContainersRequest,
    ) -> CriResult<api::ListContainersResponse> {
        let filter = req.filter.unwrap_or_default();
        let state = self.lock();
        let containers = state
            .containers
            .iter()
            .filter(|(id, c)| {
                (filter.id.is_empty() || **id == filter.id)
                    && (filter.pod_sandbox_id.is_empty() || c.sandbox_id == filter.pod_sandbox_id)
                    && filter
                        .state
                        .as_ref()
                        .is_none_or(|want| want.state == c.state as i32)
                    && labels_match(&filter.label_selector, &c.config.labels)
            })
            .map(|(id, c)| api::Container {
                id: id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.config.metadata.clone(),
                image: c.config.image.clone(),
                image_ref: c.image_ref.clone(),
                image_id: c.image_ref.clone(),
                state: c.state as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
            })
            .collect();
        Ok(api::ListContainersResponse { containers })
    }

    async fn container_status(
        &self,
        req: api::ContainerStatusRequest,
    ) -> CriResult<api::ContainerStatusResponse> {
        let state = self.lock();
        let id = req.container_id;
        let container = state
            .containers
            .get(&id)
            .ok_or_else(|| not_found("container", &id))?;
        Ok(api::ContainerStatusResponse {
            status: Some(container_status(&id, container)),
            info: HashMap::new(),
        })
    }

    async fn update_container_resources(
        &self,
        _req: api::UpdateContainerResourcesRequest,
    ) -> CriResult<api::UpdateContainerResourcesResponse> {
        Ok(api::UpdateContainerResourcesResponse {})
    }

    async fn reopen_container_log(
        &self,
        req: api::ReopenContainerLogRequest,
    ) -> CriResult<api::ReopenContainerLogResponse> {
        self.record(format!("ReopenContainerLog {}", req.container_id));
        Ok(api::ReopenContainerLogResponse {})
    }

    async fn exec_sync(&self, req: api::ExecSyncRequest) -> CriResult<api::ExecSyncResponse> {
        let mut state = self.lock();
        let id = req.container_id;
        state
            .calls
            .push(format!("ExecSync {id} {}", req.cmd.join(" ")));
        let container = state
            .containers
            .get(&id)
            .ok_or_else(|| not_found("container", &id))?;
        if container.state != api::ContainerState::ContainerRunning {
            return Err(Status::failed_precondition(format!(
                "container {id:?} is not running"
            )));
        }
        let code = state
            .exec_exit_codes
            .get(container.name())
            .copied()
            .unwrap_or(0);
        Ok(api::ExecSyncResponse {
            stdout: Vec::new(),
            stderr: if code == 0 {
                Vec::new()
            } else {
                format!("exit {code}").into_bytes()
            },
            exit_code: code,
        })
    }

    async fn exec(&self, _req: api::ExecRequest) -> CriResult<api::ExecResponse> {
        Err(unsupported("Exec"))
    }

    async fn attach(&self, _req: api::AttachRequest) -> CriResult<api::AttachResponse> {
        Err(unsupported("Attach"))
    }

    async fn port_forward(
        &self,
        _req: api::PortForwardRequest,
    ) -> CriResult<api::PortForwardResponse> {
        Err(unsupported("PortForward"))
    }

    async fn container_stats(
        &self,
        _req: api::ContainerStatsRequest,
    ) -> CriResult<api::ContainerStatsResponse> {
        Err(unsupported("ContainerStats"))
    }

    async fn list_container_stats(
        &self,
        _req: api::ListContainerStatsRequest,
    ) -> CriResult<api::ListContainerStatsResponse> {
        Ok(api::ListContainerStatsResponse::default())
    }

    async fn pod_sandbox_stats(
        &self,
        _req: api::PodSandboxStatsRequest,
    ) -> CriResult<api::PodSandboxStatsResponse> {
        Err(unsupported("PodSandboxStats"))
    }

    async fn list_pod_sandbox_stats(
        &self,
        _req: api::ListPodSandboxStatsRequest,
    ) -> CriResult<api::ListPodSandboxStatsResponse> {
        Ok(api::ListPodSandboxStatsResponse::default())
    }

    async fn update_runtime_config(
        &self,
        _req: api::UpdateRuntimeConfigRequest,
    ) -> CriResult<api::UpdateRuntimeConfigResponse> {
        Ok(api::UpdateRuntimeConfigResponse {})
    }

    async fn status(&self, _req: api::StatusRequest) -> CriResult<api::StatusResponse> {
        let ready = |type_: &str| api::RuntimeCondition {
            r#type: type_.to_string(),
            status: true,
            ..Default::default()
        };
        Ok(api::StatusResponse {
            status: Some(api::RuntimeStatus {
                conditions: vec![ready("RuntimeReady"), ready("NetworkReady")],
            }),
            ..Default::default()
        })
    }

    async fn runtime_config(
        &self,
        _req: api::RuntimeConfigRequest,
    ) -> CriResult<api::RuntimeConfigResponse> {
        Ok(api::RuntimeConfigResponse::default())
    }

    async fn get_container_events(&self, _req: api::GetEventsRequest) -> CriResult<EventStream> {
        if self.lock().no_event_stream {
            return Err(tonic::Status::unimplemented("no container event stream"));
        }
        let stream = tokio_stream::wrappers::BroadcastStream::new(self.events.subscribe())
            .filter_map(|item| async move { item.ok().map(Ok) });
        Ok(stream.boxed())
    }
}
