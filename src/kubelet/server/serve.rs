//! The kubelet API server: TLS on `--address:--kubelet-port`, each request authenticated and
//! authorized (see [`auth`](super::auth)) before its route runs. Every connection and every
//! stream is its own task, so no client can hold up the agent.

use super::auth::{Auth, Credentials, Verdict, bearer};
use super::authz;
use super::handlers::{self, Context};
use super::response::{Body, text};
use super::routes::{self, Match};
use super::tls::certificate_user;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// A client has this long to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

struct Shared {
    node_name: String,
    auth: Auth,
    context: Arc<Context>,
}

/// The running server; [`KubeletServer::stop`] ends it (dropping it does too).
pub struct KubeletServer {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    accept_loop: Option<JoinHandle<()>>,
}

impl KubeletServer {
    /// Listens on `bind` and serves until stopped.
    pub async fn start(
        bind: SocketAddr,
        tls: Arc<rustls::ServerConfig>,
        node_name: &str,
        auth: Auth,
        context: Context,
    ) -> Result<KubeletServer, ServeError> {
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|source| ServeError::Listen { addr: bind, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServeError::Listen { addr: bind, source })?;
        let (shutdown, stopping) = watch::channel(false);
        let shared = Arc::new(Shared {
            node_name: node_name.to_string(),
            auth,
            context: Arc::new(context),
        });
        let accept_loop = tokio::spawn(accept_loop(
            listener,
            TlsAcceptor::from(tls),
            shared,
            stopping,
        ));
        tracing::info!(%addr, "kubelet API listening");
        Ok(KubeletServer {
            addr,
            shutdown,
            accept_loop: Some(accept_loop),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes the open connections (streams already spliced end with
    /// the process).
    pub async fn stop(mut self) {
        self.shutdown.send_replace(true);
        if let Some(task) = self.accept_loop.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for KubeletServer {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        if let Some(task) = &self.accept_loop {
            task.abort();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    stopping: watch::Receiver<bool>,
) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(error = %err, "kubelet API accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, shared, mut stopping) =
            (acceptor.clone(), Arc::clone(&shared), stopping.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(err)) => {
                    tracing::debug!(%peer, error = %err, "kubelet API TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "kubelet API TLS handshake timed out");
                    return;
                }
            };
            // rustls verified the chain; the first certificate is the client's.
            let cert_user = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .and_then(|cert| certificate_user(cert));
            let service = hyper::service::service_fn(move |request| {
                let (shared, cert_user) = (Arc::clone(&shared), cert_user.clone());
                async move { Ok::<_, Infallible>(dispatch(&shared, cert_user, request).await) }
            });
            // hyper's request-header timeout (30 s) needs a timer: a client that never
            // finishes its headers does not keep its task forever.
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades();
            tokio::select! {
                result = connection => {
                    if let Err(err) = result {
                        tracing::debug!(%peer, error = %err, "kubelet API connection");
                    }
                }
                _ = stopping.wait_for(|stop| *stop) => {}
            }
        });
    }
}

async fn dispatch(
    shared: &Shared,
    cert_user: Option<super::review::User>,
    request: Request<Incoming>,
) -> Response<Body> {
    let method = request.method().as_str().to_string();
    let path = request.uri().path().to_string();
    let Some(attrs) = authz::attributes(&method, &path, &shared.node_name) else {
        return text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    };
    let credentials = match (
        cert_user,
        request.headers().get(hyper::header::AUTHORIZATION),
    ) {
        (Some(user), _) => Credentials::Certificate(user),
        (None, Some(value)) => match bearer(value.to_str().ok()) {
            Some(token) => Credentials::Bearer(token),
            None => Credentials::None,
        },
        (None, None) => Credentials::None,
    };
    let user = match shared.auth.check(credentials, &attrs).await {
        Verdict::Allowed(user) => user,
        Verdict::Unauthorized => return text(StatusCode::UNAUTHORIZED, "Unauthorized"),
        Verdict::Forbidden(message) => return text(StatusCode::FORBIDDEN, &message),
        Verdict::Failed(reason) => {
            tracing::warn!(%reason, %path, "kubelet API: review failed");
            let message = format!("Authorization error: {reason}");
            return text(StatusCode::INTERNAL_SERVER_ERROR, &message);
        }
    };
    tracing::debug!(user = %user.name, %method, %path, "kubelet API request");
    match routes::route(routes::ROUTES, &method, &path) {
        Match::NotFound => text(StatusCode::NOT_FOUND, "404 page not found"),
        Match::MethodNotAllowed => text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed"),
        Match::Found { endpoint, params } => {
            handlers::handle(Arc::clone(&shared.context), endpoint, params, request).await
        }
    }
}
