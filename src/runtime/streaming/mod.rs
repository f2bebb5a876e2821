//! [`StreamingRuntime`] for the process runtime: what the streaming server (Exec, Attach,
//! PortForward URLs) runs. Exec goes through the jail's exec helper (the same path as
//! ExecSync, with stdin and a terminal), Attach through the container shim's attach socket,
//! PortForward dials the pod's loopback from inside its network namespace.

mod attach;
mod exec;
mod io;

use crate::cri::{CriResult, StreamIo, StreamingRuntime};
use crate::jail;
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::state::{ContainerRecord, ContainerState, SandboxState};
use std::time::Duration;

/// Hang guard for dialing a forwarded port.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

#[async_trait::async_trait]
impl StreamingRuntime for ProcessRuntime {
    async fn exec_stream(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        tty: bool,
        io: StreamIo,
    ) -> CriResult<i32> {
        self.exec_stream_impl(container_id, cmd, tty, io)
            .await
            .map_err(tonic::Status::from)
    }

    async fn attach_stream(&self, container_id: &str, tty: bool, io: StreamIo) -> CriResult<()> {
        self.attach_stream_impl(container_id, tty, io)
            .await
            .map_err(tonic::Status::from)
    }

    async fn port_forward_stream(
        &self,
        sandbox_id: &str,
        port: u16,
    ) -> CriResult<tokio::net::TcpStream> {
        self.port_forward_impl(sandbox_id, port)
            .await
            .map_err(tonic::Status::from)
    }
}

impl ProcessRuntime {
    /// The record of a running container (NotFound, or FailedPrecondition when not running).
    fn running_container(&self, id: &str) -> Result<ContainerRecord> {
        let record = self.shared.index.container(id)?.snapshot();
        if record.state != ContainerState::Running {
            return Err(RuntimeError::FailedPrecondition(format!(
                "container {} is not running",
                record.id
            )));
        }
        Ok(record)
    }

    async fn port_forward_impl(
        &self,
        sandbox_id: &str,
        port: u16,
    ) -> Result<tokio::net::TcpStream> {
        let sandbox = self.shared.index.sandbox(sandbox_id)?.snapshot();
        if sandbox.state != SandboxState::Ready {
            return Err(RuntimeError::FailedPrecondition(format!(
                "pod sandbox {} is not ready",
                sandbox.id
            )));
        }
        // None for host-network pods: their loopback is the host's.
        let netns = sandbox.namespaces.net.clone();
        let stream = tokio::task::spawn_blocking(move || {
            jail::connect_in_netns(netns.as_deref(), port, DIAL_TIMEOUT)
        })
        .await
        .map_err(|e| RuntimeError::Internal(format!("port-forward dial task: {e}")))??;
        stream
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpStream::from_std(stream))
            .map_err(|e| RuntimeError::Internal(format!("port-forward socket: {e}")))
    }
}
