//! The CRI streaming server: Exec, Attach and PortForward return a one-time URL on loopback
//! (as containerd does), and the client — kubectl, crictl, critest, all through client-go —
//! connects to it with SPDY/3.1 or WebSocket to run the session against a
//! [`StreamingRuntime`](crate::cri::StreamingRuntime).
//!
//! ```ignore
//! let server = Arc::new(StreamingServer::start("127.0.0.1:0".parse()?, runtime.clone())?);
//! let cri: Arc<dyn RuntimeService> = Arc::new(WithStreaming::new(runtime, server));
//! ```

pub mod client;
mod http;
mod idle;
mod portforward;
mod remotecommand;
mod server;
mod service;
pub mod spdy;
mod tokens;
pub mod websocket;

pub use server::{
    DEFAULT_STREAM_CREATION_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT, StreamingConfig, StreamingError,
    StreamingServer,
};
pub use service::WithStreaming;
pub use tokens::{CachedRequest, Clock, MAX_IN_FLIGHT, TOKEN_TTL, system_clock};
