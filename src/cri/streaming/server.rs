//! The streaming HTTP server (kubelet's cri/streaming server, as containerd runs it): serves
//! `/exec/<token>`, `/attach/<token>` and `/portforward/<token>` (GET or POST) on a loopback
//! port, upgrading each request to SPDY/3.1 or WebSocket and running the session against a
//! [`StreamingRuntime`].

use super::http::{not_found, plain, refusal_response, spdy_handshake, websocket_upgrade};
use super::portforward;
use super::remotecommand::{self, Operation, OutStream, Session, StatusFormat};
use super::spdy::SpdyConnection;
use super::tokens::{CachedRequest, Clock, RequestCache, TOKEN_TTL, system_clock};
use super::websocket::{self, ChannelCodec, ChannelConnection};
use crate::cri::{CriResult, StreamingRuntime, api};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::Role;
use tracing::{debug, info, warn};

/// How long a streaming connection may see no frame before it is closed (kubelet's and
/// containerd's default `stream_idle_timeout`).
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);
/// How long a client has to create its streams (remotecommand's DefaultStreamCreationTimeout).
pub const DEFAULT_STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);
/// After the session ended: how long queued output may take to reach the socket, then how long
/// the client gets to hang up first (it does as soon as it has the status).
const CLOSE_DRAIN: Duration = Duration::from_secs(30);
const CLOSE_LINGER: Duration = Duration::from_secs(5);

/// WebSocket subprotocols for exec/attach; "" is a client that named none (binary).
const WS_REMOTECOMMAND_PROTOCOLS: [&str; 6] = [
    "",
    websocket::CHANNEL_PROTOCOL,
    websocket::BASE64_CHANNEL_PROTOCOL,
    websocket::V4_CHANNEL_PROTOCOL,
    websocket::V4_BASE64_CHANNEL_PROTOCOL,
    websocket::V5_CHANNEL_PROTOCOL,
];

#[derive(Debug, thiserror::Error)]
pub enum StreamingError {
    #[error("cannot listen for streaming on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Streaming server settings. The defaults are the kubelet's.
#[derive(Clone)]
pub struct StreamingConfig {
    /// Where to listen; `127.0.0.1:0` picks a free loopback port.
    pub bind: SocketAddr,
    pub stream_idle_timeout: Duration,
    pub stream_creation_timeout: Duration,
    /// How long a URL stays valid.
    pub token_ttl: Duration,
    pub clock: Clock,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        StreamingConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            stream_idle_timeout: DEFAULT_STREAM_IDLE_TIMEOUT,
            stream_creation_timeout: DEFAULT_STREAM_CREATION_TIMEOUT,
            token_ttl: TOKEN_TTL,
            clock: system_clock(),
        }
    }
}

struct ServerState {
    cache: RequestCache,
    runtime: Arc<dyn StreamingRuntime>,
    idle_timeout: Duration,
    creation_timeout: Duration,
    shutdown: watch::Receiver<bool>,
}

/// A running streaming server. Dropping it stops it.
pub struct StreamingServer {
    state: Arc<ServerState>,
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    accept_loop: Mutex<Option<JoinHandle<()>>>,
}

impl StreamingServer {
    /// Listens on `bind` with the kubelet's default timeouts. Needs a tokio runtime.
    pub fn start(
        bind: SocketAddr,
        runtime: Arc<dyn StreamingRuntime>,
    ) -> Result<StreamingServer, StreamingError> {
        StreamingServer::start_with(
            StreamingConfig {
                bind,
                ..StreamingConfig::default()
            },
            runtime,
        )
    }

    pub fn start_with(
        config: StreamingConfig,
        runtime: Arc<dyn StreamingRuntime>,
    ) -> Result<StreamingServer, StreamingError> {
        let listen_error = |source| StreamingError::Listen {
            addr: config.bind,
            source,
        };
        let listener = std::net::TcpListener::bind(config.bind).map_err(listen_error)?;
        listener.set_nonblocking(true).map_err(listen_error)?;
        let addr = listener.local_addr().map_err(listen_error)?;
        let listener = TcpListener::from_std(listener).map_err(listen_error)?;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let state = Arc::new(ServerState {
            cache: RequestCache::new(config.clock, config.token_ttl),
            runtime,
            idle_timeout: config.stream_idle_timeout,
            creation_timeout: config.stream_creation_timeout,
            shutdown: shutdown_rx,
        });
        let accept_loop = tokio::spawn(accept_loop(listener, state.clone()));
        info!(%addr, "streaming server listening");
        Ok(StreamingServer {
            state,
            addr,
            shutdown: shutdown_tx,
            accept_loop: Mutex::new(Some(accept_loop)),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>/`, the base of every URL handed out.
    pub fn base_url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// A one-time URL for `request` (kubelet's GetExec checks; the container's state is the
    /// caller's to check).
    pub fn exec_url(&self, request: &api::ExecRequest) -> CriResult<String> {
        if request.container_id.is_empty() {
            return Err(invalid("missing required container_id"));
        }
        if request.cmd.is_empty() {
            return Err(invalid("cmd must not be empty"));
        }
        check_stdio(request.tty, request.stdin, request.stdout, request.stderr)?;
        self.url("exec", CachedRequest::Exec(request.clone()))
    }

    pub fn attach_url(&self, request: &api::AttachRequest) -> CriResult<String> {
        if request.container_id.is_empty() {
            return Err(invalid("missing required container_id"));
        }
        check_stdio(request.tty, request.stdin, request.stdout, request.stderr)?;
        self.url("attach", CachedRequest::Attach(request.clone()))
    }

    pub fn port_forward_url(&self, request: &api::PortForwardRequest) -> CriResult<String> {
        if request.pod_sandbox_id.is_empty() {
            return Err(invalid("missing required pod_sandbox_id"));
        }
        self.url("portforward", CachedRequest::PortForward(request.clone()))
    }

    fn url(&self, kind: &str, request: CachedRequest) -> CriResult<String> {
        let token = self.state.cache.insert(request)?;
        Ok(format!("{}{kind}/{token}", self.base_url()))
    }

    /// Stops accepting connections and ends every session.
    pub async fn shutdown(&self) {
        self.shutdown.send_replace(true);
        let task = self
            .accept_loop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for StreamingServer {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        if let Some(task) = self
            .accept_loop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

fn invalid(message: &str) -> tonic::Status {
    tonic::Status::invalid_argument(message)
}

/// kubelet's validateExecRequest / validateAttachRequest.
fn check_stdio(tty: bool, stdin: bool, stdout: bool, stderr: bool) -> CriResult<()> {
    if tty && stderr {
        // With a TTY stdout and stderr are one terminal: no separate stream to multiplex.
        return Err(invalid("tty and stderr cannot both be true"));
    }
    if !stdin && !stdout && !stderr {
        return Err(invalid("one of stdin, stdout, or stderr must be set"));
    }
    Ok(())
}

async fn accept_loop(listener: TcpListener, state: Arc<ServerState>) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!(error = %e, "streaming server accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let mut shutdown = state.shutdown.clone();
            let service = hyper::service::service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(state, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .with_upgrades();
            tokio::select! {
                result = connection => {
                    if let Err(e) = result {
                        debug!(%peer, error = %e, "streaming HTTP connection failed");
                    }
                }
                _ = shutdown.wait_for(|stopping| *stopping) => {}
            }
        });
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exec,
    Attach,
    PortForward,
}

async fn route(state: Arc<ServerState>, request: Request<Incoming>) -> Response<String> {
    let path = request.uri().path().to_owned();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let kind = match parts.next() {
        Some("exec") => Kind::Exec,
        Some("attach") => Kind::Attach,
        Some("portforward") => Kind::PortForward,
        _ => return not_found(),
    };
    let token = match parts.next() {
        Some(token) if !token.is_empty() && !token.contains('/') => token,
        _ => return not_found(),
    };
    if request.method() != hyper::Method::GET && request.method() != hyper::Method::POST {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "405: Method Not Allowed",
            &[],
        );
    }
    let Some(cached) = state.cache.consume(token) else {
        return not_found();
    };
    match (kind, cached) {
        (Kind::Exec, CachedRequest::Exec(exec)) => {
            let options = (exec.stdin, exec.stdout, exec.stderr, exec.tty);
            let operation = Operation::Exec {
                container_id: exec.container_id,
                cmd: exec.cmd,
            };
            serve_remotecommand(state, request, options, operation)
        }
        (Kind::Attach, CachedRequest::Attach(attach)) => {
            let options = (attach.stdin, attach.stdout, attach.stderr, attach.tty);
            let operation = Operation::Attach {
                container_id: attach.container_id,
            };
            serve_remotecommand(state, request, options, operation)
        }
        (Kind::PortForward, CachedRequest::PortForward(forward)) => {
            serve_port_forward(state, request, forward)
        }
        // A token used at another kind's URL is spent all the same, as in the kubelet.
        _ => not_found(),
    }
}

/// Runs `session` on the upgraded connection once hyper hands it over, unless the server
/// shuts down first.
fn spawn_upgraded<F, Fut>(state: &Arc<ServerState>, request: Request<Incoming>, session: F)
where
    F: FnOnce(TokioIo<hyper::upgrade::Upgraded>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(request).await {
            Ok(upgraded) => upgraded,
            Err(e) => {
                debug!(error = %e, "streaming upgrade failed");
                return;
            }
        };
        tokio::select! {
            () = session(TokioIo::new(upgraded)) => {}
            _ = shutdown.wait_for(|stopping| *stopping) => {}
        }
    });
}

fn serve_remotecommand(
    state: Arc<ServerState>,
    request: Request<Incoming>,
    (stdin, stdout, stderr, tty): (bool, bool, bool, bool),
    operation: Operation,
) -> Response<String> {
    let headers = request.headers();
    if websocket::is_websocket_request(headers) {
        let handshake =
            match websocket::handshake(request.method(), headers, &WS_REMOTECOMMAND_PROTOCOLS) {
                Ok(handshake) => handshake,
                Err(refusal) => return refusal_response(refusal),
            };
        let response = websocket_upgrade(&handshake);
        let protocol = handshake.protocol;
        let session_state = state.clone();
        spawn_upgraded(&state, request, move |io| async move {
            let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
            let codec = ChannelCodec::for_protocol(&protocol);
            let readable = [stdin, false, false, false, true];
            let (conn, mut incoming) =
                ChannelConnection::start(ws, codec, &readable, session_state.idle_timeout);
            // An empty message on the lowest writable channel tells the client it is live.
            let ready_channel = if stdout {
                1
            } else if stderr {
                2
            } else {
                3
            };
            let _ = conn.writer(ready_channel).write(&[]).await;
            let session = Session {
                stdin: incoming[0].take(),
                stdout: stdout.then(|| OutStream::Ws(conn.writer(1))),
                stderr: stderr.then(|| OutStream::Ws(conn.writer(2))),
                resize: incoming[4].take(),
                error: Some(OutStream::Ws(conn.writer(3))),
                status: StatusFormat::for_protocol(&protocol),
                tty,
            };
            run_until_hangup(session, operation, &session_state, conn.ended()).await;
            conn.close(CLOSE_DRAIN, CLOSE_LINGER).await;
        });
        return response;
    }
    let (response, protocol) = spdy_handshake(headers, &remotecommand::SUPPORTED_SPDY_PROTOCOLS);
    let Some(protocol) = protocol else {
        return response;
    };
    let session_state = state.clone();
    spawn_upgraded(&state, request, move |io| async move {
        let (conn, mut incoming) = SpdyConnection::start(io, session_state.idle_timeout);
        let resizable = tty
            && (protocol == remotecommand::STREAM_PROTOCOL_V4
                || protocol == remotecommand::STREAM_PROTOCOL_V3);
        let expected = 1 + [stdin, stdout, stderr, resizable]
            .iter()
            .filter(|wanted| **wanted)
            .count();
        let streams = match remotecommand::wait_for_spdy_streams(
            &mut incoming,
            expected,
            session_state.creation_timeout,
        )
        .await
        {
            Ok(streams) => streams,
            Err(reason) => {
                warn!(reason, "streaming session not started");
                return;
            }
        };
        let session = Session {
            stdin: streams.stdin.map(|s| s.data),
            stdout: streams.stdout.map(|s| OutStream::Spdy(s.writer)),
            stderr: streams.stderr.map(|s| OutStream::Spdy(s.writer)),
            resize: streams.resize.map(|s| s.data),
            error: streams.error.map(|s| OutStream::Spdy(s.writer)),
            status: StatusFormat::for_protocol(&protocol),
            tty,
        };
        run_until_hangup(session, operation, &session_state, conn.ended()).await;
        conn.close(CLOSE_DRAIN, CLOSE_LINGER).await;
    });
    response
}

/// Runs the session until it ends or the client hangs up. A client that goes away drops the
/// session, and with it the exec'd command (the runtime kills what a dropped exec leaves), as
/// kubelet's streaming server does: a closed `kubectl exec` leaves nothing running.
async fn run_until_hangup(
    session: Session,
    operation: Operation,
    state: &ServerState,
    hangup: impl std::future::Future<Output = ()>,
) {
    tokio::select! {
        () = remotecommand::run(session, operation, state.runtime.clone()) => {}
        () = hangup => debug!("streaming client hung up; the session is dropped"),
    }
}

fn serve_port_forward(
    state: Arc<ServerState>,
    request: Request<Incoming>,
    forward: api::PortForwardRequest,
) -> Response<String> {
    let headers = request.headers();
    let sandbox_id = forward.pod_sandbox_id.clone();
    if websocket::is_websocket_request(headers) {
        let ports = match portforward::websocket_ports(request.uri().query(), &forward.port) {
            Ok(ports) => ports,
            Err(message) => return plain(StatusCode::BAD_REQUEST, &message, &[]),
        };
        let handshake = match websocket::handshake(
            request.method(),
            headers,
            &portforward::SUPPORTED_WS_PROTOCOLS,
        ) {
            Ok(handshake) => handshake,
            Err(refusal) => return refusal_response(refusal),
        };
        let response = websocket_upgrade(&handshake);
        let session_state = state.clone();
        spawn_upgraded(&state, request, move |io| async move {
            let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
            let codec = ChannelCodec::for_protocol(&handshake.protocol);
            // Per port: data (read and write), then error (write only).
            let readable: Vec<bool> = ports.iter().flat_map(|_| [true, false]).collect();
            let (conn, incoming) =
                ChannelConnection::start(ws, codec, &readable, session_state.idle_timeout);
            let runtime = session_state.runtime.clone();
            portforward::serve_websocket(&conn, incoming, &ports, &sandbox_id, runtime).await;
            conn.close(CLOSE_DRAIN, CLOSE_LINGER).await;
        });
        return response;
    }
    let (response, protocol) = spdy_handshake(headers, &portforward::SUPPORTED_SPDY_PROTOCOLS);
    // portforward.k8s.io is the only protocol; nothing depends on it yet (as in the kubelet).
    if protocol.is_none() {
        return response;
    }
    let session_state = state.clone();
    spawn_upgraded(&state, request, move |io| async move {
        let (conn, incoming) = SpdyConnection::start(io, session_state.idle_timeout);
        let runtime = session_state.runtime.clone();
        portforward::serve_spdy(
            incoming,
            sandbox_id,
            runtime,
            session_state.creation_timeout,
        )
        .await;
        drop(conn);
    });
    response
}
