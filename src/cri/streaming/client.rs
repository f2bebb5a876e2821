//! The client side of an Exec/Attach URL, as `kubectl exec` and `crictl exec -it` speak it:
//! a WebSocket with the `v5.channel.k8s.io` protocol (`v4.` accepted, which cannot close stdin),
//! binary messages `[channel, data...]` — 0 stdin, 1 stdout, 2 stderr, 3 the final status (a
//! metav1.Status JSON), 4 terminal resizes — and, on v5, `[255, 0]` to close stdin.

use crate::cri::TerminalSize;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE_SIGNAL: u8 = 255;
const PROTOCOLS: &str = "v5.channel.k8s.io, v4.channel.k8s.io";

#[derive(Debug, thiserror::Error)]
pub enum StreamClientError {
    #[error("streaming URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("streaming connection: {0}")]
    WebSocket(#[from] tungstenite::Error),
    #[error("writing the command's output: {0}")]
    Output(#[source] std::io::Error),
    #[error("the runtime reported: {0}")]
    Remote(String),
    #[error("the runtime's final status is not a Status object: {0}")]
    BadStatus(String),
}

/// What the local side connects to the remote command. Absent parts were not requested.
pub struct ClientIo<O, E> {
    /// Chunks for the command's stdin; the channel's end closes it (v5).
    pub stdin: Option<mpsc::Receiver<Vec<u8>>>,
    pub stdout: O,
    /// `None` with a terminal: the terminal merges stderr into stdout.
    pub stderr: Option<E>,
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
}

/// Runs the session behind `url` to its end; the command's exit code (128+signal for signals).
pub async fn run_remote_command<O, E>(
    url: &str,
    mut io: ClientIo<O, E>,
) -> Result<i32, StreamClientError>
where
    O: AsyncWrite + Unpin,
    E: AsyncWrite + Unpin,
{
    let ws_url = websocket_url(url)?;
    let mut request = ws_url
        .as_str()
        .into_client_request()
        .map_err(|e| bad_url(url, e))?;
    let addr = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .ok_or_else(|| bad_url(url, "no host"))?;
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        tungstenite::http::HeaderValue::from_static(PROTOCOLS),
    );
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|source| StreamClientError::Connect {
            addr: addr.clone(),
            source,
        })?;
    let (ws, response) = tokio_tungstenite::client_async(request, tcp).await?;
    let can_close_stdin = response
        .headers()
        .get("sec-websocket-protocol")
        .is_some_and(|p| p.as_bytes().starts_with(b"v5."));
    let (mut sink, mut incoming) = ws.split();
    let mut status = Vec::new();
    loop {
        tokio::select! {
            message = incoming.next() => match message {
                None | Some(Ok(Message::Close(_))) => break,
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(Message::Binary(data))) => {
                    let Some((&channel, payload)) = data.split_first() else { continue };
                    match channel {
                        STDOUT => write_out(&mut io.stdout, payload).await?,
                        STDERR => match io.stderr.as_mut() {
                            Some(stderr) => write_out(stderr, payload).await?,
                            None => write_out(&mut io.stdout, payload).await?,
                        },
                        ERROR => status.extend_from_slice(payload),
                        _ => {}
                    }
                }
                Some(Ok(_)) => {}
            },
            chunk = next_or_pending(&mut io.stdin) => match chunk {
                Some(data) => sink.send(frame(STDIN, &data)).await?,
                None => {
                    io.stdin = None;
                    if can_close_stdin {
                        sink.send(frame(CLOSE_SIGNAL, &[STDIN])).await?;
                    }
                }
            },
            size = next_or_pending(&mut io.resize) => match size {
                Some(size) => {
                    let event = serde_json::json!({"Width": size.width, "Height": size.height});
                    sink.send(frame(RESIZE, event.to_string().as_bytes())).await?;
                }
                None => io.resize = None,
            },
        }
    }
    exit_code(&status)
}

/// The exit code a final status means: none or `Success` is 0, `NonZeroExitCode` carries it.
pub fn exit_code(status: &[u8]) -> Result<i32, StreamClientError> {
    if status.iter().all(u8::is_ascii_whitespace) {
        return Ok(0);
    }
    let text = String::from_utf8_lossy(status).into_owned();
    let value: serde_json::Value =
        serde_json::from_slice(status).map_err(|_| StreamClientError::BadStatus(text.clone()))?;
    match value["status"].as_str() {
        Some("Success") => return Ok(0),
        Some("Failure") => {}
        _ => return Err(StreamClientError::BadStatus(text)),
    }
    if value["reason"] == "NonZeroExitCode" {
        let code = value["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|cause| cause["reason"] == "ExitCode")
            .and_then(|cause| cause["message"].as_str()?.parse().ok());
        if let Some(code) = code {
            return Ok(code);
        }
    }
    let message = value["message"].as_str().unwrap_or(&text);
    Err(StreamClientError::Remote(message.to_string()))
}

fn websocket_url(url: &str) -> Result<String, StreamClientError> {
    if let Some(rest) = url.strip_prefix("http://") {
        Ok(format!("ws://{rest}"))
    } else if url.starts_with("ws://") {
        Ok(url.to_string())
    } else {
        // The runtime's streaming servers (runp's, containerd's by default) are plain http.
        Err(bad_url(url, "only http:// and ws:// URLs are supported"))
    }
}

fn bad_url(url: &str, reason: impl std::fmt::Display) -> StreamClientError {
    StreamClientError::BadUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    }
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::binary(bytes)
}

async fn write_out(
    out: &mut (impl AsyncWrite + Unpin),
    data: &[u8],
) -> Result<(), StreamClientError> {
    out.write_all(data)
        .await
        .map_err(StreamClientError::Output)?;
    out.flush().await.map_err(StreamClientError::Output)
}

/// The next item of an open channel; pending forever once it is gone, so `select!` skips it.
async fn next_or_pending<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_statuses_give_exit_codes() {
        let cases: &[(&str, Option<i32>)] = &[
            ("", Some(0)),
            (r#"{"metadata":{},"status":"Success"}"#, Some(0)),
            (
                r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#,
                Some(3),
            ),
            (
                r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: no such file","reason":"InternalError","code":500}"#,
                None,
            ),
            ("not json", None),
        ];
        for (status, want) in cases {
            assert_eq!(exit_code(status.as_bytes()).ok(), *want, "{status}");
        }
        let err = exit_code(br#"{"status":"Failure","message":"boom"}"#).unwrap_err();
        assert!(err.to_string().contains("boom"), "{err}");
    }

    #[test]
    fn only_plain_http_urls_are_followed() {
        assert_eq!(
            websocket_url("http://127.0.0.1:1234/exec/abc").unwrap(),
            "ws://127.0.0.1:1234/exec/abc"
        );
        assert!(websocket_url("https://127.0.0.1/exec/abc").is_err());
        assert!(websocket_url("/exec/abc").is_err());
    }
}
