//! A CRI gRPC client implementing [`RuntimeService`] and [`ImageService`], so the sync loop can
//! drive any CRI runtime (containerd, CRI-O, `runp serve`) exactly as it drives the in-process one.
//!
//! Timeouts follow kubelet's remote runtime: every call gets [`RemoteOptions::call_timeout`]
//! (2 min); `StopContainer` and `ExecSync` get the call's own timeout on top; `PullImage` gets
//! [`RemoteOptions::pull_timeout`]; the `GetContainerEvents` stream has none once open. A deadline
//! is sent as `grpc-timeout` (so the server can give up too) and enforced locally, surfacing as
//! `DeadlineExceeded`. All other errors are the server's (or the transport's) `tonic::Status`.

use crate::cri::api::{
    self, image_service_client::ImageServiceClient, runtime_service_client::RuntimeServiceClient,
};
use crate::cri::endpoint::CriEndpoint;
use crate::cri::rpcs::{image_rpcs, runtime_unary_rpcs};
use crate::cri::server::MAX_MESSAGE_SIZE;
use crate::cri::{CriResult, EventStream, ImageService, RuntimeService};
use futures::StreamExt;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use tracing::debug;

/// The `VersionRequest.version` kubelet sends (runtimes ignore it).
const KUBELET_RUNTIME_API_VERSION: &str = "0.1.0";
/// Upper bound on a call's own timeout (ExecSync/StopContainer seconds), so a hostile value
/// cannot overflow a deadline.
const MAX_EXTRA_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Client tuning; the defaults are kubelet's.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Deadline of an ordinary call (kubelet's `--runtime-request-timeout`, 2 min).
    pub call_timeout: Duration,
    /// Deadline of `PullImage`, which legitimately takes long.
    pub pull_timeout: Duration,
    /// How long [`RemoteRuntime::connect`] keeps retrying while the runtime is not up yet.
    pub connect_timeout: Duration,
    /// Largest message sent or accepted.
    pub max_message_size: usize,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            call_timeout: Duration::from_secs(120),
            pull_timeout: Duration::from_secs(30 * 60),
            connect_timeout: Duration::from_secs(30),
            max_message_size: MAX_MESSAGE_SIZE,
        }
    }
}

/// Why [`RemoteRuntime::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("CRI endpoint {0} is not a valid gRPC target: {1}")]
    BadEndpoint(CriEndpoint, String),
    #[error(
        "CRI runtime at {endpoint} unreachable after {attempts} attempts over {waited:?}: {last}"
    )]
    Unreachable {
        endpoint: CriEndpoint,
        attempts: u32,
        waited: Duration,
        last: String,
    },
    #[error("{endpoint} does not serve the CRI runtime.v1 API: {status}")]
    NotCri {
        endpoint: CriEndpoint,
        status: Status,
    },
}

/// A remote CRI runtime and image service behind one gRPC channel. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RemoteRuntime {
    endpoint: CriEndpoint,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    options: RemoteOptions,
}

impl RemoteRuntime {
    /// Connects to `endpoint` and checks it speaks `runtime.v1` (a `Version` call), retrying
    /// with backoff for up to `options.connect_timeout` while the runtime is starting. Once
    /// connected the channel reconnects by itself; calls made while it is down fail `Unavailable`.
    pub async fn connect(
        endpoint: &CriEndpoint,
        options: RemoteOptions,
    ) -> Result<RemoteRuntime, RemoteError> {
        let target = grpc_endpoint(endpoint)?;
        let started = Instant::now();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let last = match Self::try_connect(endpoint, &target, &options).await {
                Ok(remote) => return Ok(remote),
                Err(ConnectFailure::Fatal(err)) => return Err(err),
                Err(ConnectFailure::Retry(reason)) => reason,
            };
            let waited = started.elapsed();
            let delay = retry_delay(attempts);
            if waited + delay >= options.connect_timeout {
                return Err(RemoteError::Unreachable {
                    endpoint: endpoint.clone(),
                    attempts,
                    waited,
                    last,
                });
            }
            debug!(%endpoint, attempts, reason = %last, "CRI runtime not reachable yet; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    async fn try_connect(
        endpoint: &CriEndpoint,
        target: &Endpoint,
        options: &RemoteOptions,
    ) -> Result<RemoteRuntime, ConnectFailure> {
        let channel = match tokio::time::timeout(options.call_timeout, target.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(err)) => return Err(ConnectFailure::Retry(error_chain(&err))),
            Err(_) => return Err(ConnectFailure::Retry("connect timed out".to_owned())),
        };
        let size = options.max_message_size;
        let remote = RemoteRuntime {
            endpoint: endpoint.clone(),
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(size)
                .max_encoding_message_size(size),
            images: ImageServiceClient::new(channel)
                .max_decoding_message_size(size)
                .max_encoding_message_size(size),
            options: options.clone(),
        };
        let request = api::VersionRequest {
            version: KUBELET_RUNTIME_API_VERSION.to_owned(),
        };
        match RuntimeService::version(&remote, request).await {
            Ok(version) => {
                debug!(
                    %endpoint,
                    runtime = %version.runtime_name,
                    runtime_version = %version.runtime_version,
                    api = %version.runtime_api_version,
                    "connected to the CRI runtime"
                );
                Ok(remote)
            }
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                Err(ConnectFailure::Fatal(RemoteError::NotCri {
                    endpoint: endpoint.clone(),
                    status,
                }))
            }
            Err(status) => Err(ConnectFailure::Retry(status.to_string())),
        }
    }

    pub fn endpoint(&self) -> &CriEndpoint {
        &self.endpoint
    }

    /// Sends one unary call with `timeout` as its deadline (none if `None`).
    async fn unary<Req, Resp, Fut>(
        &self,
        method: &'static str,
        timeout: Option<Duration>,
        req: Req,
        send: impl FnOnce(Request<Req>) -> Fut,
    ) -> CriResult<Resp>
    where
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let mut request = Request::new(req);
        let Some((timeout, deadline)) =
            timeout.and_then(|t| Some((t, Instant::now().checked_add(t)?)))
        else {
            return send(request).await.map(Response::into_inner);
        };
        request.set_timeout(timeout);
        match tokio::time::timeout_at(deadline, send(request)).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            // The server's grpc-timeout may win the race and answer Cancelled; report the
            // deadline either way.
            Ok(Err(status)) if Instant::now() < deadline => Err(status),
            Ok(Err(_)) | Err(_) => Err(self.deadline_exceeded(method, timeout)),
        }
    }

    fn deadline_exceeded(&self, method: &str, timeout: Duration) -> Status {
        Status::deadline_exceeded(format!(
            "{method} to {} timed out after {timeout:?}",
            self.endpoint
        ))
    }
}

/// Deadline of an ordinary call.
fn call_deadline<T>(options: &RemoteOptions, _req: &T) -> Option<Duration> {
    Some(options.call_timeout)
}

fn pull_deadline(options: &RemoteOptions, _req: &api::PullImageRequest) -> Option<Duration> {
    Some(options.pull_timeout)
}

/// The call timeout plus the stop grace period, as kubelet gives the runtime time to kill.
fn stop_deadline(options: &RemoteOptions, req: &api::StopContainerRequest) -> Option<Duration> {
    Some(
        options
            .call_timeout
            .saturating_add(extra_seconds(req.timeout)),
    )
}

/// Like kubelet: no deadline when the command has none, else the call timeout on top.
fn exec_sync_deadline(options: &RemoteOptions, req: &api::ExecSyncRequest) -> Option<Duration> {
    (req.timeout > 0).then(|| {
        options
            .call_timeout
            .saturating_add(extra_seconds(req.timeout))
    })
}

/// A call's own timeout in seconds, non-negative and bounded so it cannot overflow a deadline.
fn extra_seconds(seconds: i64) -> Duration {
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0)).min(MAX_EXTRA_TIMEOUT)
}

enum ConnectFailure {
    Retry(String),
    Fatal(RemoteError),
}

/// The tonic endpoint for a CRI endpoint; tonic dials `unix:` paths itself.
fn grpc_endpoint(endpoint: &CriEndpoint) -> Result<Endpoint, RemoteError> {
    let uri = match endpoint {
        CriEndpoint::Unix(path) => {
            let path = path.to_str().ok_or_else(|| {
                RemoteError::BadEndpoint(endpoint.clone(), "socket path is not UTF-8".to_owned())
            })?;
            format!("unix:{path}")
        }
        CriEndpoint::Tcp { host, port } if host.contains(':') => format!("http://[{host}]:{port}"),
        CriEndpoint::Tcp { host, port } => format!("http://{host}:{port}"),
    };
    Endpoint::from_shared(uri)
        .map_err(|err| RemoteError::BadEndpoint(endpoint.clone(), error_chain(&err)))
}

/// Delay before connection attempt `attempt + 1`: 100 ms doubling, capped at 2 s.
pub fn retry_delay(attempt: u32) -> Duration {
    let millis = 100u64.saturating_mul(1u64 << attempt.saturating_sub(1).min(16));
    Duration::from_millis(millis.min(2000))
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Implements a CRI trait for [`RemoteRuntime`]: each unary RPC of the table (see `rpcs.rs`)
/// is sent on `self.$client` with the deadline `$deadline(&self.options, &req)`; `$extra` holds the
/// hand-written rest.
macro_rules! remote_unary {
    ($service:path, $client:ident, { $($extra:tt)* }
     [ $($method:ident($req:ident) -> $resp:ident, $deadline:ident;)* ]) => {
        #[async_trait::async_trait]
        impl $service for RemoteRuntime {
            $(
                async fn $method(&self, req: api::$req) -> CriResult<api::$resp> {
                    let mut client = self.$client.clone();
                    let deadline = $deadline(&self.options, &req);
                    self.unary(stringify!($method), deadline, req, |r| async move {
                        client.$method(r).await
                    })
                    .await
                }
            )*
            $($extra)*
        }
    };
}

runtime_unary_rpcs!(remote_unary! {
    RuntimeService, runtime, {
        async fn get_container_events(
            &self,
            req: api::GetEventsRequest,
        ) -> CriResult<EventStream> {
            let mut client = self.runtime.clone();
            // No grpc-timeout: a server would end the stream at the deadline. The local deadline
            // covers opening the stream only; an open stream runs until either side ends it.
            let timeout = self.options.call_timeout;
            match tokio::time::timeout(timeout, client.get_container_events(req)).await {
                Ok(response) => Ok(response?.into_inner().boxed()),
                Err(_) => Err(self.deadline_exceeded("get_container_events", timeout)),
            }
        }
    }
});

image_rpcs!(remote_unary! { ImageService, images, {} });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_from_100ms_and_caps_at_2s() {
        let table = [
            (0, 100),
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1600),
            (6, 2000),
            (40, 2000),
            (u32::MAX, 2000),
        ];
        for (attempt, millis) in table {
            assert_eq!(
                retry_delay(attempt),
                Duration::from_millis(millis),
                "attempt {attempt}"
            );
        }
    }

    #[test]
    fn stop_and_exec_sync_deadlines_add_the_calls_own_timeout() {
        let options = RemoteOptions::default();
        let two_min = Duration::from_secs(120);
        let day = Duration::from_secs(24 * 3600);
        let half_min = Duration::from_secs(30);
        for (timeout, stop, exec) in [
            (0, Some(two_min), None),
            (-5, Some(two_min), None),
            (30, Some(two_min + half_min), Some(two_min + half_min)),
            (i64::MAX, Some(two_min + day), Some(two_min + day)),
        ] {
            let stop_req = api::StopContainerRequest {
                container_id: "c".into(),
                timeout,
            };
            assert_eq!(
                stop_deadline(&options, &stop_req),
                stop,
                "stop timeout {timeout}"
            );
            let exec_req = api::ExecSyncRequest {
                timeout,
                ..Default::default()
            };
            assert_eq!(
                exec_sync_deadline(&options, &exec_req),
                exec,
                "exec timeout {timeout}"
            );
        }
        let huge = RemoteOptions {
            call_timeout: Duration::MAX,
            ..RemoteOptions::default()
        };
        let stop_req = api::StopContainerRequest {
            container_id: "c".into(),
            timeout: 10,
        };
        assert_eq!(stop_deadline(&huge, &stop_req), Some(Duration::MAX));
    }
}
