//! What the streaming server (Exec/Attach/PortForward over SPDY or WebSocket) needs from a
//! runtime. Like the service traits, this is a leaf: the runtime implements it, and the
//! streaming server, which sits above the runtime, drives it.

use crate::cri::CriResult;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// A terminal size change sent by the client (columns × rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminalSize {
    pub width: u16,
    pub height: u16,
}

/// The client side of one interactive session. Absent streams were not requested. With a TTY,
/// stdout carries the merged terminal output and `stderr` is `None`.
pub struct StreamIo {
    pub stdin: Option<Box<dyn AsyncRead + Send + Unpin>>,
    pub stdout: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub stderr: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
}

/// Runtime operations behind the streaming URLs.
#[async_trait::async_trait]
pub trait StreamingRuntime: Send + Sync + 'static {
    /// Runs `cmd` in a running container wired to `io`; resolves with its exit code
    /// (128+signal for signal deaths) once it exited and its output was delivered.
    async fn exec_stream(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        tty: bool,
        io: StreamIo,
    ) -> CriResult<i32>;

    /// Attaches `io` to the main process of a running container until the client detaches
    /// (stdin closed with stdin_once, or the connection ends) or the container exits.
    async fn attach_stream(&self, container_id: &str, tty: bool, io: StreamIo) -> CriResult<()>;

    /// A TCP connection to `port` on the loopback of the sandbox's network namespace.
    async fn port_forward_stream(
        &self,
        sandbox_id: &str,
        port: u16,
    ) -> CriResult<tokio::net::TcpStream>;
}
