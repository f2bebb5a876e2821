//! The CRI gRPC server: `runtime.v1.RuntimeService` and `runtime.v1.ImageService` (plus the
//! standard `grpc.health.v1.Health`) over a unix socket, each RPC forwarded one to one to a
//! [`RuntimeService`] / [`ImageService`] trait object. Statuses pass through unchanged.
//!
//! ```ignore
//! let endpoint: CriEndpoint = "unix:///run/runp/runp.sock".parse()?;
//! let listener = CriListener::bind(&endpoint).await?;
//! listener.serve(runtime, images, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! ```

use crate::cri::api::{
    self, image_service_server::ImageServiceServer, runtime_service_server::RuntimeServiceServer,
};
use crate::cri::authority::AuthorityFix;
use crate::cri::endpoint::CriEndpoint;
use crate::cri::rpcs::{image_rpcs, runtime_unary_rpcs};
use crate::cri::socket::{self, SocketError, SocketFileGuard};
use crate::cri::{CriResult, EventStream, ImageService, RuntimeService};
use futures::{FutureExt, StreamExt, TryStreamExt};
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};

/// Largest message sent or accepted, as kubelet's CRI client (16 MiB).
pub const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// How long in-flight calls may take to finish once shutdown starts; then they are dropped.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error("cannot resolve {endpoint}: {source}")]
    Resolve {
        endpoint: CriEndpoint,
        source: std::io::Error,
    },
    #[error("refusing to serve the CRI on {0}: it has no authentication, so TCP is loopback only")]
    NotLoopback(SocketAddr),
    #[error("cannot listen on {endpoint}: {source}")]
    Listen {
        endpoint: CriEndpoint,
        source: std::io::Error,
    },
    #[error("CRI gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("a socket group applies to unix sockets only, not {0}")]
    GroupOnTcp(CriEndpoint),
}

/// Serves the CRI on the unix socket `path` until `shutdown` completes, then removes the socket.
pub async fn serve_unix(
    path: impl AsRef<Path>,
    runtime: Arc<dyn RuntimeService>,
    images: Arc<dyn ImageService>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let endpoint = CriEndpoint::Unix(path.as_ref().to_owned());
    serve(&endpoint, runtime, images, shutdown).await
}

/// Serves the CRI on `endpoint` (unix socket or loopback TCP) until `shutdown` completes.
pub async fn serve(
    endpoint: &CriEndpoint,
    runtime: Arc<dyn RuntimeService>,
    images: Arc<dyn ImageService>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    serve_for(endpoint, None, runtime, images, shutdown).await
}

/// [`serve`] with the unix socket open to the members of `socket_group` (mode 0660).
pub async fn serve_for(
    endpoint: &CriEndpoint,
    socket_group: Option<u32>,
    runtime: Arc<dyn RuntimeService>,
    images: Arc<dyn ImageService>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let listener = CriListener::bind_for(endpoint, socket_group).await?;
    listener.serve(runtime, images, shutdown).await
}

/// A bound, listening CRI endpoint. Binding first lets a caller know the socket exists (or learn
/// the port of `tcp://127.0.0.1:0`) before serving.
#[derive(Debug)]
pub struct CriListener {
    kind: ListenerKind,
    /// Whether unix connections go through [`AuthorityFix`] (always, except to measure it).
    authority_fix: bool,
}

#[derive(Debug)]
enum ListenerKind {
    Unix(UnixListener, SocketFileGuard),
    Tcp(TcpListener, SocketAddr),
}

impl CriListener {
    pub async fn bind(endpoint: &CriEndpoint) -> Result<CriListener, ServeError> {
        CriListener::bind_for(endpoint, None).await
    }

    /// [`CriListener::bind`]; a unix socket is open to the members of `socket_group`. A TCP
    /// endpoint has no owner: a group there is refused rather than silently ignored.
    pub async fn bind_for(
        endpoint: &CriEndpoint,
        socket_group: Option<u32>,
    ) -> Result<CriListener, ServeError> {
        let kind = match endpoint {
            CriEndpoint::Unix(path) => {
                let (listener, guard) = socket::bind_unix_for(path, socket_group).await?;
                ListenerKind::Unix(listener, guard)
            }
            CriEndpoint::Tcp { .. } if socket_group.is_some() => {
                return Err(ServeError::GroupOnTcp(endpoint.clone()));
            }
            CriEndpoint::Tcp { host, port } => {
                let resolve_error = |source| ServeError::Resolve {
                    endpoint: endpoint.clone(),
                    source,
                };
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), *port))
                    .await
                    .map_err(resolve_error)?
                    .collect();
                if let Some(addr) = addrs.iter().find(|a| !a.ip().is_loopback()) {
                    return Err(ServeError::NotLoopback(*addr));
                }
                let listener = TcpListener::bind(addrs.as_slice())
                    .await
                    .map_err(|source| ServeError::Listen {
                        endpoint: endpoint.clone(),
                        source,
                    })?;
                let addr = listener.local_addr().map_err(|source| ServeError::Listen {
                    endpoint: endpoint.clone(),
                    source,
                })?;
                ListenerKind::Tcp(listener, addr)
            }
        };
        Ok(CriListener {
            kind,
            authority_fix: true,
        })
    }

    /// Serves unix connections straight to h2, without [`AuthorityFix`]: clients that send
    /// the socket path as `:authority` are then refused. Only for measuring the adapter.
    pub fn without_authority_fix(mut self) -> CriListener {
        self.authority_fix = false;
        self
    }

    /// The endpoint clients should use (with the real port for `tcp://...:0`).
    pub fn local_endpoint(&self) -> CriEndpoint {
        match &self.kind {
            ListenerKind::Unix(_, guard) => CriEndpoint::Unix(guard.path().to_owned()),
            ListenerKind::Tcp(_, addr) => CriEndpoint::Tcp {
                host: addr.ip().to_string(),
                port: addr.port(),
            },
        }
    }

    /// Serves until `shutdown` completes: stops accepting, ends event streams, gives in-flight
    /// calls [`SHUTDOWN_GRACE`] to finish, and removes the unix socket.
    pub async fn serve(
        self,
        runtime: Arc<dyn RuntimeService>,
        images: Arc<dyn ImageService>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let endpoint = self.local_endpoint();
        let (stopping_tx, stopping_rx) = watch::channel(false);
        let (health, health_service) = tonic_health::server::health_reporter();
        health
            .set_serving::<RuntimeServiceServer<GrpcRuntime>>()
            .await;
        health.set_serving::<ImageServiceServer<GrpcImages>>().await;
        let router = tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(
                RuntimeServiceServer::new(GrpcRuntime {
                    inner: runtime,
                    stopping: stopping_rx.clone(),
                })
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
            )
            .add_service(
                ImageServiceServer::new(GrpcImages { inner: images })
                    .max_decoding_message_size(MAX_MESSAGE_SIZE)
                    .max_encoding_message_size(MAX_MESSAGE_SIZE),
            );
        let mut stopped = stopping_rx.clone();
        let stop_signal = async move {
            let _ = stopped.wait_for(|stopping| *stopping).await;
        };
        info!(%endpoint, "serving the CRI");
        // The socket guard lives until this function returns, so the socket goes last.
        let (mut server, _socket_guard) = match self.kind {
            ListenerKind::Unix(listener, guard) if self.authority_fix => {
                let incoming = UnixListenerStream::new(listener).map_ok(AuthorityFix::new);
                (
                    router
                        .serve_with_incoming_shutdown(incoming, stop_signal)
                        .boxed(),
                    Some(guard),
                )
            }
            ListenerKind::Unix(listener, guard) => (
                router
                    .serve_with_incoming_shutdown(UnixListenerStream::new(listener), stop_signal)
                    .boxed(),
                Some(guard),
            ),
            ListenerKind::Tcp(listener, _) => (
                router
                    .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop_signal)
                    .boxed(),
                None,
            ),
        };
        tokio::select! {
            result = &mut server => return result.map_err(ServeError::from),
            () = shutdown => {}
        }
        info!(%endpoint, "CRI server shutting down");
        let _ = stopping_tx.send(true);
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
            Ok(result) => result.map_err(ServeError::from),
            Err(_) => {
                warn!(%endpoint, grace = ?SHUTDOWN_GRACE, "in-flight CRI calls did not finish; dropping them");
                Ok(())
            }
        }
    }
}

/// Awaits a trait call and logs it at debug level: method, duration, status code.
async fn logged<T>(
    method: &'static str,
    call: impl Future<Output = CriResult<T>>,
) -> Result<Response<T>, Status> {
    let started = Instant::now();
    let result = call.await;
    let code = match &result {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    };
    debug!(method, elapsed = ?started.elapsed(), ?code, "CRI call");
    result.map(Response::new)
}

/// Implements a generated tonic service trait by forwarding each unary RPC of the table (see
/// `rpcs.rs`) to the same-named method of `self.inner`; `$extra` holds the hand-written rest.
macro_rules! forward_unary {
    ($service:path, $wrapper:ty, { $($extra:tt)* }
     [ $($method:ident($req:ident) -> $resp:ident, $_deadline:ident;)* ]) => {
        #[tonic::async_trait]
        impl $service for $wrapper {
            $(
                async fn $method(
                    &self,
                    request: Request<api::$req>,
                ) -> Result<Response<api::$resp>, Status> {
                    logged(stringify!($method), self.inner.$method(request.into_inner())).await
                }
            )*
            $($extra)*
        }
    };
}

/// `runtime.v1.RuntimeService` over a [`RuntimeService`].
struct GrpcRuntime {
    inner: Arc<dyn RuntimeService>,
    /// Becomes true at shutdown, ending event streams so the graceful drain can finish.
    stopping: watch::Receiver<bool>,
}

runtime_unary_rpcs!(forward_unary! {
    api::runtime_service_server::RuntimeService, GrpcRuntime, {
        type GetContainerEventsStream = EventStream;

        async fn get_container_events(
            &self,
            request: Request<api::GetEventsRequest>,
        ) -> Result<Response<EventStream>, Status> {
            let events = logged(
                "get_container_events",
                self.inner.get_container_events(request.into_inner()),
            )
            .await?
            .into_inner();
            let mut stopping = self.stopping.clone();
            let until_shutdown = async move {
                let _ = stopping.wait_for(|stopping| *stopping).await;
            };
            Ok(Response::new(events.take_until(until_shutdown).boxed()))
        }
    }
});

/// `runtime.v1.ImageService` over an [`ImageService`].
struct GrpcImages {
    inner: Arc<dyn ImageService>,
}

image_rpcs!(forward_unary! { api::image_service_server::ImageService, GrpcImages, {} });
