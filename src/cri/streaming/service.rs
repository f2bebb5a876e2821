//! [`WithStreaming`]: a [`RuntimeService`] whose Exec, Attach and PortForward answer with
//! streaming-server URLs (after containerd's checks: the container exists and runs, the sandbox
//! is ready) while every other RPC goes to the wrapped runtime unchanged.

use super::server::StreamingServer;
use crate::cri::rpcs::runtime_unary_rpcs;
use crate::cri::{CriResult, EventStream, RuntimeService, api};
use std::sync::Arc;

/// Wraps `inner` so its streaming RPCs are served by `server`.
pub struct WithStreaming {
    inner: Arc<dyn RuntimeService>,
    server: Arc<StreamingServer>,
}

impl WithStreaming {
    pub fn new(inner: Arc<dyn RuntimeService>, server: Arc<StreamingServer>) -> WithStreaming {
        WithStreaming { inner, server }
    }

    pub fn server(&self) -> &Arc<StreamingServer> {
        &self.server
    }

    /// containerd: the container must exist (the runtime's NotFound passes through) and run.
    async fn check_running(&self, container_id: &str) -> CriResult<()> {
        if container_id.is_empty() {
            return Err(tonic::Status::invalid_argument(
                "missing required container_id",
            ));
        }
        let status = self
            .inner
            .container_status(api::ContainerStatusRequest {
                container_id: container_id.to_owned(),
                verbose: false,
            })
            .await?
            .status
            .ok_or_else(|| {
                tonic::Status::not_found(format!("container {container_id:?} has no status"))
            })?;
        container_running(&status)
    }

    async fn exec_url(&self, req: api::ExecRequest) -> CriResult<api::ExecResponse> {
        self.check_running(&req.container_id).await?;
        let url = self.server.exec_url(&req)?;
        Ok(api::ExecResponse { url })
    }

    async fn attach_url(&self, req: api::AttachRequest) -> CriResult<api::AttachResponse> {
        self.check_running(&req.container_id).await?;
        let url = self.server.attach_url(&req)?;
        Ok(api::AttachResponse { url })
    }

    async fn port_forward_url(
        &self,
        req: api::PortForwardRequest,
    ) -> CriResult<api::PortForwardResponse> {
        if req.pod_sandbox_id.is_empty() {
            return Err(tonic::Status::invalid_argument(
                "missing required pod_sandbox_id",
            ));
        }
        let status = self
            .inner
            .pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: req.pod_sandbox_id.clone(),
                verbose: false,
            })
            .await?;
        sandbox_ready(status.status.as_ref())?;
        let url = self.server.port_forward_url(&req)?;
        Ok(api::PortForwardResponse { url })
    }
}

/// containerd's Exec/Attach precondition.
fn container_running(status: &api::ContainerStatus) -> CriResult<()> {
    let state = api::ContainerState::try_from(status.state)
        .unwrap_or(api::ContainerState::ContainerUnknown);
    if state != api::ContainerState::ContainerRunning {
        return Err(tonic::Status::failed_precondition(format!(
            "container is in {} state",
            state.as_str_name()
        )));
    }
    Ok(())
}

/// containerd's PortForward precondition.
fn sandbox_ready(status: Option<&api::PodSandboxStatus>) -> CriResult<()> {
    if status.map(|s| s.state) != Some(api::PodSandboxState::SandboxReady as i32) {
        return Err(tonic::Status::failed_precondition(
            "sandbox container is not running",
        ));
    }
    Ok(())
}

/// The body of one delegated RPC: the streaming three are answered here, the rest forwarded.
macro_rules! route_rpc {
    ($self:ident, exec, $req:ident) => {
        $self.exec_url($req).await
    };
    ($self:ident, attach, $req:ident) => {
        $self.attach_url($req).await
    };
    ($self:ident, port_forward, $req:ident) => {
        $self.port_forward_url($req).await
    };
    ($self:ident, $method:ident, $req:ident) => {
        $self.inner.$method($req).await
    };
}

/// Implements every unary RPC of the table (see `rpcs.rs`) through `route_rpc!`.
macro_rules! delegate_runtime {
    ([ $($method:ident($req:ident) -> $resp:ident, $_deadline:ident;)* ]) => {
        #[async_trait::async_trait]
        impl RuntimeService for WithStreaming {
            $(
                async fn $method(&self, req: api::$req) -> CriResult<api::$resp> {
                    route_rpc!(self, $method, req)
                }
            )*

            async fn get_container_events(
                &self,
                req: api::GetEventsRequest,
            ) -> CriResult<EventStream> {
                self.inner.get_container_events(req).await
            }
        }
    };
}

runtime_unary_rpcs!(delegate_runtime! {});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_running_containers_and_ready_sandboxes_stream() {
        let container = |state: api::ContainerState| api::ContainerStatus {
            state: state as i32,
            ..Default::default()
        };
        assert!(container_running(&container(api::ContainerState::ContainerRunning)).is_ok());
        for state in [
            api::ContainerState::ContainerCreated,
            api::ContainerState::ContainerExited,
            api::ContainerState::ContainerUnknown,
        ] {
            let err = container_running(&container(state)).unwrap_err();
            assert_eq!(err.code(), tonic::Code::FailedPrecondition);
            assert_eq!(
                err.message(),
                format!("container is in {} state", state.as_str_name())
            );
        }
        let mut odd = container(api::ContainerState::ContainerRunning);
        odd.state = 42;
        assert!(container_running(&odd).is_err());

        let sandbox = |state: api::PodSandboxState| api::PodSandboxStatus {
            state: state as i32,
            ..Default::default()
        };
        assert!(sandbox_ready(Some(&sandbox(api::PodSandboxState::SandboxReady))).is_ok());
        let not_ready = sandbox(api::PodSandboxState::SandboxNotready);
        assert_eq!(
            sandbox_ready(Some(&not_ready)).unwrap_err().code(),
            tonic::Code::FailedPrecondition
        );
        assert!(sandbox_ready(None).is_err());
    }
}
