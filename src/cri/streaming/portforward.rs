//! Port forwarding (kubelet's portforward server). Over SPDY the client opens a `data` and an
//! `error` stream per forwarded connection, paired by their `requestid` header and carrying the
//! `port`; over WebSocket the ports are fixed up front and channel 2i/2i+1 are port i's data
//! and error channels, each opened by the server writing the port as 2 little-endian bytes.
//! Each pair is joined to a TCP connection the runtime opens in the pod's network namespace.

use super::remotecommand::OutStream;
use super::spdy::IncomingStream;
use super::websocket::ChannelConnection;
use crate::cri::StreamingRuntime;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, warn};

pub const PORT_FORWARD_PROTOCOL_V1: &str = "portforward.k8s.io";
pub const SUPPORTED_SPDY_PROTOCOLS: [&str; 1] = [PORT_FORWARD_PROTOCOL_V1];
/// WebSocket subprotocols for port forwarding ("" = binary).
pub const SUPPORTED_WS_PROTOCOLS: [&str; 3] = [
    "",
    super::websocket::V4_CHANNEL_PROTOCOL,
    super::websocket::V4_BASE64_CHANNEL_PROTOCOL,
];

/// After one direction of a forwarded connection ended, how long the other may still take
/// (containerd's grace before closing both).
const HALF_CLOSE_GRACE: Duration = Duration::from_secs(1);

struct Pair {
    data: Option<IncomingStream>,
    error: Option<IncomingStream>,
    deadline: Instant,
}

/// Serves the SPDY port-forward streams of one connection until it ends.
pub async fn serve_spdy(
    mut incoming: mpsc::Receiver<IncomingStream>,
    sandbox_id: String,
    runtime: Arc<dyn StreamingRuntime>,
    creation_timeout: Duration,
) {
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    loop {
        let next_deadline = pairs.values().map(|p| p.deadline).min();
        let stream = tokio::select! {
            stream = incoming.recv() => match stream {
                Some(stream) => stream,
                None => return,
            },
            () = sleep_until(next_deadline) => {
                let now = Instant::now();
                let expired: Vec<String> = pairs
                    .iter()
                    .filter(|(_, p)| p.deadline <= now)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in expired {
                    if let Some(pair) = pairs.remove(&id) {
                        report_pair_error(&pair, "timed out waiting for streams").await;
                    }
                }
                continue;
            }
        };
        let port = match check_stream_headers(&stream) {
            Ok(port) => port,
            Err(reason) => {
                debug!(stream = stream.id, reason, "rejecting port-forward stream");
                stream.reject().await;
                continue;
            }
        };
        if stream.accept().await.is_err() {
            return;
        }
        let request_id = request_id(&stream);
        let is_error = stream.headers.get("streamtype") == Some("error");
        let pair = pairs.entry(request_id.clone()).or_insert_with(|| Pair {
            data: None,
            error: None,
            deadline: Instant::now() + creation_timeout,
        });
        let slot = if is_error {
            &mut pair.error
        } else {
            &mut pair.data
        };
        if slot.is_some() {
            let kind = if is_error { "error" } else { "data" };
            let message = format!(
                "error processing stream for request {request_id}: {kind} stream already assigned"
            );
            warn!("{message}");
            report_pair_error(pair, &message).await;
            continue;
        }
        *slot = Some(stream);
        if pair.data.is_some() && pair.error.is_some() {
            let Some(Pair {
                data: Some(data),
                error: Some(error),
                ..
            }) = pairs.remove(&request_id)
            else {
                continue;
            };
            let runtime = runtime.clone();
            let sandbox_id = sandbox_id.clone();
            tokio::spawn(async move {
                let error_out = OutStream::Spdy(error.writer.clone());
                let data_out = OutStream::Spdy(data.writer.clone());
                forward(
                    runtime.as_ref(),
                    &sandbox_id,
                    port,
                    data.data,
                    data_out,
                    error_out,
                )
                .await;
                // The error stream's data is never read; keep it open until here so the
                // client's reads end only with our FIN.
                drop(error.data);
            });
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

async fn report_pair_error(pair: &Pair, message: &str) {
    if let Some(error) = &pair.error {
        let _ = error.writer.write(message.as_bytes()).await;
    }
}

/// The kubelet's httpStreamReceived checks: a port in 1..=65535 and a data or error stream.
fn check_stream_headers(stream: &IncomingStream) -> Result<u16, &'static str> {
    let port = stream.headers.get("port").unwrap_or("");
    if port.is_empty() {
        return Err("\"port\" header is required");
    }
    let port: u16 = port.parse().map_err(|_| "unable to parse the port")?;
    if port < 1 {
        return Err("port must be > 0");
    }
    match stream.headers.get("streamtype").unwrap_or("") {
        "" => Err("\"streamType\" header is required"),
        "error" | "data" => Ok(port),
        _ => Err("invalid stream type"),
    }
}

/// The pairing key: the `requestid` header, or for old clients without it, the error stream's
/// id (a data stream counts as the error stream created just before it).
fn request_id(stream: &IncomingStream) -> String {
    match stream.headers.get("requestid") {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ if stream.headers.get("streamtype") == Some("data") => {
            stream.id.saturating_sub(2).to_string()
        }
        _ => stream.id.to_string(),
    }
}

/// Serves WebSocket port forwarding for `ports` (channels already open) until all end.
pub async fn serve_websocket(
    conn: &ChannelConnection,
    mut incoming: Vec<Option<mpsc::Receiver<Vec<u8>>>>,
    ports: &[u16],
    sandbox_id: &str,
    runtime: Arc<dyn StreamingRuntime>,
) {
    let mut forwards = Vec::new();
    for (index, port) in ports.iter().enumerate() {
        let data_channel = (index * 2) as u8;
        let data = OutStream::Ws(conn.writer(data_channel));
        let error = OutStream::Ws(conn.writer(data_channel + 1));
        let port_bytes = port.to_le_bytes();
        if data.write(&port_bytes).await.is_err() || error.write(&port_bytes).await.is_err() {
            return;
        }
        let (_, closed) = mpsc::channel(1);
        let from_client = incoming
            .get_mut(index * 2)
            .and_then(Option::take)
            .unwrap_or(closed);
        let runtime = runtime.clone();
        let sandbox_id = sandbox_id.to_owned();
        let port = *port;
        forwards.push(async move {
            forward(
                runtime.as_ref(),
                &sandbox_id,
                port,
                from_client,
                data,
                error,
            )
            .await;
        });
    }
    futures::future::join_all(forwards).await;
}

/// Joins one client data stream to a TCP connection in the pod: bytes both ways, the client's
/// FIN becomes a TCP half-close, the pod's EOF becomes our FIN. Failures go on the error stream
/// as the kubelet words them.
async fn forward(
    runtime: &dyn StreamingRuntime,
    sandbox_id: &str,
    port: u16,
    mut from_client: mpsc::Receiver<Vec<u8>>,
    to_client: OutStream,
    error: OutStream,
) {
    let tcp = match runtime.port_forward_stream(sandbox_id, port).await {
        Ok(tcp) => tcp,
        Err(status) => {
            let message = format!(
                "error forwarding port {port} to pod {sandbox_id}, uid : {}",
                status.message()
            );
            debug!("{message}");
            let _ = error.write(message.as_bytes()).await;
            to_client.finish().await;
            error.finish().await;
            return;
        }
    };
    let (tcp_read, mut tcp_write) = tcp.into_split();
    let upload = async {
        while let Some(chunk) = from_client.recv().await {
            if tcp_write.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = tcp_write.shutdown().await;
    };
    let download = to_client.pump_from(tcp_read);
    tokio::pin!(upload, download);
    tokio::select! {
        // The client is done sending: the pod may still answer until it closes.
        () = &mut upload => download.await,
        // The pod closed: whatever the client still sends gets a short grace.
        () = &mut download => {
            let _ = tokio::time::timeout(HALF_CLOSE_GRACE, upload).await;
        }
    }
    error.finish().await;
}

/// WebSocket ports: the `port` query parameters (repeatable, comma-separated) as kubelet's
/// NewV4Options reads them, else the ports of the CRI request.
pub fn websocket_ports(query: Option<&str>, request_ports: &[i32]) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    let pairs = query.into_iter().flat_map(|q| q.split('&'));
    for (name, value) in pairs.map(|kv| kv.split_once('=').unwrap_or((kv, ""))) {
        if name != "port" {
            continue;
        }
        if value.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        let value = value.replace("%2C", ",").replace("%2c", ",");
        for part in value.split(',') {
            ports.push(parse_port(part)?);
        }
    }
    if ports.is_empty() {
        for port in request_ports {
            let port = u16::try_from(*port)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("port {port} must be > 0"))?;
            ports.push(port);
        }
    }
    if ports.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    Ok(ports)
}

fn parse_port(text: &str) -> Result<u16, String> {
    match text.parse::<u16>() {
        Ok(0) => Err(format!("port {text:?} must be > 0")),
        Ok(port) => Ok(port),
        Err(e) => Err(format!("unable to parse {text:?} as a port: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_ports_come_from_the_query_or_the_request() {
        assert_eq!(
            websocket_ports(Some("port=80&port=81,82"), &[]),
            Ok(vec![80, 81, 82])
        );
        assert_eq!(websocket_ports(None, &[8080]), Ok(vec![8080]));
        assert_eq!(websocket_ports(Some("x=1"), &[9]), Ok(vec![9]));
        assert!(websocket_ports(Some("port="), &[]).is_err());
        assert!(websocket_ports(Some("port=0"), &[]).is_err());
        assert!(websocket_ports(Some("port=70000"), &[]).is_err());
        assert!(websocket_ports(None, &[]).is_err());
        assert!(websocket_ports(None, &[0]).is_err());
    }
}
