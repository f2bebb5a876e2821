//! Running one probe or lifecycle handler: exec (CRI ExecSync), httpGet (plain HTTP), tcpSocket,
//! grpc (grpc.health.v1), sleep. Shared by the probe workers and the postStart/preStop hooks.

use super::state::ProbeOutcome;
use crate::cri::{RuntimeService, api};
use k8s_openapi::api::core::v1::{
    ContainerPort, ExecAction, GRPCAction, HTTPGetAction, LifecycleHandler, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;

/// Where a probe or hook goes.
#[derive(Clone, Debug)]
pub struct Target<'a> {
    pub container_id: &'a str,
    /// Pod IP (the host IP for hostNetwork pods).
    pub host: &'a str,
    /// The container's declared ports, to resolve named ports.
    pub ports: &'a [ContainerPort],
}

/// Runs probes and hooks; holds the HTTP client (no keep-alive, like the kubelet's prober).
#[derive(Clone)]
pub struct Handlers {
    /// `None` only when the HTTP client could not be set up (logged once).
    http: Option<reqwest::Client>,
}

impl Default for Handlers {
    fn default() -> Self {
        Self::new()
    }
}

fn failure(message: impl Into<String>) -> ProbeOutcome {
    ProbeOutcome::Failure(message.into())
}

/// Resolves an `IntOrString` port against the container's named ports.
pub fn resolve_port(port: &IntOrString, ports: &[ContainerPort]) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => match name.parse::<i32>() {
            Ok(n) => n,
            Err(_) => ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .map(|p| p.container_port)
                .ok_or_else(|| format!("port {name:?} is not a named port of the container"))?,
        },
    };
    u16::try_from(number)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("invalid port {number}"))
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `host:port` of an httpGet/tcpSocket action: its own host, else the target's.
fn address(port: &IntOrString, host: Option<&str>, target: &Target<'_>) -> Result<String, String> {
    let port = resolve_port(port, target.ports)?;
    let host = host.filter(|h| !h.is_empty()).unwrap_or(target.host);
    Ok(host_port(host, port))
}

fn truncate(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    if text.len() > 512 {
        let mut end = 512;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &text[..end])
    } else {
        text.to_string()
    }
}

impl Handlers {
    pub fn new() -> Self {
        // reqwest has no TLS provider of its own here: it is always handed runp's config.
        let http = crate::util::tls::client_config()
            .map_err(|err| err.to_string())
            .and_then(|tls| {
                reqwest::Client::builder()
                    .pool_max_idle_per_host(0)
                    .user_agent("kube-probe/1.34")
                    .tls_backend_preconfigured(tls)
                    .build()
                    .map_err(|err| err.to_string())
            })
            .inspect_err(|err| tracing::warn!(error = %err, "HTTP probes disabled"))
            .ok();
        Handlers { http }
    }

    /// Runs the action of a probe.
    pub async fn probe(
        &self,
        runtime: &dyn RuntimeService,
        probe: &Probe,
        target: &Target<'_>,
        timeout: Duration,
    ) -> ProbeOutcome {
        if let Some(exec) = &probe.exec {
            self.exec(runtime, exec, target, timeout).await
        } else if let Some(http) = &probe.http_get {
            self.http_get(http, target, timeout).await
        } else if let Some(tcp) = &probe.tcp_socket {
            self.tcp(tcp, target, timeout).await
        } else if let Some(grpc) = &probe.grpc {
            self.grpc(grpc, target, timeout).await
        } else {
            failure("probe has no handler (exec, httpGet, tcpSocket or grpc)")
        }
    }

    /// Runs a lifecycle hook; `Err` explains the failure.
    pub async fn hook(
        &self,
        runtime: &dyn RuntimeService,
        handler: &LifecycleHandler,
        target: &Target<'_>,
        timeout: Duration,
    ) -> Result<(), String> {
        let outcome = if let Some(exec) = &handler.exec {
            self.exec(runtime, exec, target, timeout).await
        } else if let Some(http) = &handler.http_get {
            self.http_get(http, target, timeout).await
        } else if let Some(sleep) = &handler.sleep {
            let wanted = Duration::from_secs(u64::try_from(sleep.seconds).unwrap_or(0));
            tokio::time::sleep(wanted.min(timeout)).await;
            ProbeOutcome::Success
        } else if handler.tcp_socket.is_some() {
            failure("tcpSocket lifecycle handlers are not supported (deprecated in Kubernetes)")
        } else {
            failure("lifecycle handler has no action")
        };
        match outcome {
            ProbeOutcome::Success => Ok(()),
            ProbeOutcome::Failure(message) => Err(message),
        }
    }

    pub async fn exec(
        &self,
        runtime: &dyn RuntimeService,
        exec: &ExecAction,
        target: &Target<'_>,
        timeout: Duration,
    ) -> ProbeOutcome {
        let cmd = exec.command.clone().unwrap_or_default();
        if cmd.is_empty() {
            return failure("exec action has no command");
        }
        let request = api::ExecSyncRequest {
            container_id: target.container_id.to_string(),
            cmd: cmd.clone(),
            timeout: i64::try_from(timeout.as_secs().max(1)).unwrap_or(i64::MAX),
        };
        match tokio::time::timeout(timeout, runtime.exec_sync(request)).await {
            Err(_) => failure(format!(
                "command {cmd:?} timed out after {}s",
                timeout.as_secs_f64()
            )),
            Ok(Err(status)) if status.code() == tonic::Code::DeadlineExceeded => failure(format!(
                "command {cmd:?} timed out after {}s",
                timeout.as_secs_f64()
            )),
            Ok(Err(status)) => failure(format!("command {cmd:?} failed: {}", status.message())),
            Ok(Ok(resp)) if resp.exit_code == 0 => ProbeOutcome::Success,
            Ok(Ok(resp)) => {
                let mut output = resp.stdout;
                output.extend_from_slice(&resp.stderr);
                failure(format!(
                    "command {cmd:?} exited with {}: {}",
                    resp.exit_code,
                    truncate(&output)
                ))
            }
        }
    }

    pub async fn http_get(
        &self,
        action: &HTTPGetAction,
        target: &Target<'_>,
        timeout: Duration,
    ) -> ProbeOutcome {
        let scheme = action.scheme.as_deref().unwrap_or("HTTP");
        if scheme.eq_ignore_ascii_case("HTTPS") {
            return failure(
                "HTTPS probes are not supported: the kubelet probes over TLS with certificate \
                 verification disabled, which runp's prober does not do",
            );
        }
        let address = match address(&action.port, action.host.as_deref(), target) {
            Ok(address) => address,
            Err(message) => return failure(message),
        };
        let mut path = action.path.clone().unwrap_or_default();
        if !path.starts_with('/') {
            path.insert(0, '/');
        }
        let url = format!("http://{address}{path}");
        let Some(http) = &self.http else {
            return failure("HTTP probes are unavailable: the HTTP client could not be set up");
        };
        let mut request = http.get(&url).timeout(timeout).header("Accept", "*/*");
        for header in action.http_headers.iter().flatten() {
            request = request.header(header.name.as_str(), header.value.as_str());
        }
        match request.send().await {
            Err(err) if err.is_timeout() => failure(format!(
                "GET {url}: timed out after {}s",
                timeout.as_secs_f64()
            )),
            Err(err) => failure(format!("GET {url}: {err}")),
            Ok(resp) => {
                let code = resp.status().as_u16();
                if (200..400).contains(&code) {
                    ProbeOutcome::Success
                } else {
                    let body = resp.bytes().await.unwrap_or_default();
                    failure(format!(
                        "GET {url}: HTTP probe failed with statuscode: {code}: {}",
                        truncate(&body)
                    ))
                }
            }
        }
    }

    pub async fn tcp(
        &self,
        action: &TCPSocketAction,
        target: &Target<'_>,
        timeout: Duration,
    ) -> ProbeOutcome {
        let address = match address(&action.port, action.host.as_deref(), target) {
            Ok(address) => address,
            Err(message) => return failure(message),
        };
        match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&address)).await {
            Ok(Ok(_)) => ProbeOutcome::Success,
            Ok(Err(err)) => failure(format!("dial tcp {address}: {err}")),
            Err(_) => failure(format!("dial tcp {address}: i/o timeout")),
        }
    }

    pub async fn grpc(
        &self,
        action: &GRPCAction,
        target: &Target<'_>,
        timeout: Duration,
    ) -> ProbeOutcome {
        let port = match u16::try_from(action.port).ok().filter(|p| *p > 0) {
            Some(port) => port,
            None => return failure(format!("invalid gRPC port {}", action.port)),
        };
        let address = format!("http://{}", host_port(target.host, port));
        let endpoint = match tonic::transport::Endpoint::from_shared(address.clone()) {
            Ok(endpoint) => endpoint.connect_timeout(timeout).timeout(timeout),
            Err(err) => return failure(format!("gRPC address {address}: {err}")),
        };
        let check = async {
            let channel = endpoint.connect().await.map_err(|e| e.to_string())?;
            let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
            client
                .check(tonic_health::pb::HealthCheckRequest {
                    service: action.service.clone().unwrap_or_default(),
                })
                .await
                .map(|r| r.into_inner().status)
                .map_err(|s| s.message().to_string())
        };
        match tokio::time::timeout(timeout, check).await {
            Err(_) => failure(format!("gRPC health check {address}: timed out")),
            Ok(Err(message)) => failure(format!("gRPC health check {address}: {message}")),
            Ok(Ok(status)) if status == ServingStatus::Serving as i32 => ProbeOutcome::Success,
            Ok(Ok(status)) => failure(format!(
                "gRPC health check {address}: service unhealthy (responded with {})",
                ServingStatus::try_from(status)
                    .map(|s| s.as_str_name())
                    .unwrap_or("an unknown status")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn named(name: &str, port: i32) -> ContainerPort {
        ContainerPort {
            name: Some(name.into()),
            container_port: port,
            ..Default::default()
        }
    }

    #[test]
    fn ports_resolve_by_number_or_name() {
        let ports = [named("http", 8080)];
        assert_eq!(resolve_port(&IntOrString::Int(80), &ports), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &ports),
            Ok(8080)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("81".into()), &ports),
            Ok(81)
        );
        assert!(resolve_port(&IntOrString::String("grpc".into()), &ports).is_err());
        assert!(resolve_port(&IntOrString::Int(0), &ports).is_err());
        assert!(resolve_port(&IntOrString::Int(70000), &ports).is_err());
    }

    /// A one-shot HTTP server answering every request with `status`.
    async fn http_server(status: u16) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 2048];
                let _ = conn.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbody"
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        port
    }

    fn action(port: u16, scheme: Option<&str>) -> HTTPGetAction {
        HTTPGetAction {
            port: IntOrString::Int(port.into()),
            path: Some("healthz".into()),
            scheme: scheme.map(str::to_string),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn http_get_checks_the_status_code() {
        let target = Target {
            container_id: "c",
            host: "127.0.0.1",
            ports: &[],
        };
        let handlers = Handlers::new();
        let timeout = Duration::from_secs(5);
        let ok = http_server(204).await;
        assert_eq!(
            handlers.http_get(&action(ok, None), &target, timeout).await,
            ProbeOutcome::Success
        );
        let bad = http_server(503).await;
        match handlers
            .http_get(&action(bad, None), &target, timeout)
            .await
        {
            ProbeOutcome::Failure(message) => assert!(message.contains("503"), "{message}"),
            other => panic!("{other:?}"),
        }
        match handlers
            .http_get(&action(ok, Some("HTTPS")), &target, timeout)
            .await
        {
            ProbeOutcome::Failure(message) => assert!(message.contains("TLS"), "{message}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn tcp_connects_or_fails() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Target {
            container_id: "c",
            host: "127.0.0.1",
            ports: &[],
        };
        let tcp = TCPSocketAction {
            port: IntOrString::Int(port.into()),
            host: None,
        };
        let handlers = Handlers::new();
        let timeout = Duration::from_secs(5);
        assert_eq!(
            handlers.tcp(&tcp, &target, timeout).await,
            ProbeOutcome::Success
        );
        drop(listener);
        assert!(matches!(
            handlers.tcp(&tcp, &target, timeout).await,
            ProbeOutcome::Failure(_)
        ));
    }

    #[tokio::test]
    async fn grpc_health_serving_and_not_serving() {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("ok", tonic_health::ServingStatus::Serving)
            .await;
        reporter
            .set_service_status("down", tonic_health::ServingStatus::NotServing)
            .await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let target = Target {
            container_id: "c",
            host: "127.0.0.1",
            ports: &[],
        };
        let handlers = Handlers::new();
        let timeout = Duration::from_secs(5);
        let grpc = |service: &str| GRPCAction {
            port: port.into(),
            service: Some(service.into()),
        };
        assert_eq!(
            handlers.grpc(&grpc("ok"), &target, timeout).await,
            ProbeOutcome::Success
        );
        match handlers.grpc(&grpc("down"), &target, timeout).await {
            ProbeOutcome::Failure(message) => assert!(message.contains("NOT_SERVING"), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}
