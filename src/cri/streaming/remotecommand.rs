//! Exec and Attach sessions (kubelet's remotecommand server): the client's streams — error,
//! stdin, stdout, stderr, resize — are wired to the runtime's [`StreamIo`], and when the command
//! ends its result goes on the error stream: a `metav1.Status` JSON for v4 (and v5), the plain
//! error text (nothing on success) for the older protocols.

use super::spdy::{IncomingStream, StreamWriter};
use super::websocket::ChannelWriter;
use crate::cri::{StreamIo, StreamingRuntime, TerminalSize};
use serde::{Deserialize, Serialize};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

pub const STREAM_PROTOCOL_V4: &str = "v4.channel.k8s.io";
pub const STREAM_PROTOCOL_V3: &str = "v3.channel.k8s.io";
pub const STREAM_PROTOCOL_V2: &str = "v2.channel.k8s.io";
pub const STREAM_PROTOCOL_V1: &str = "channel.k8s.io";
/// SPDY subprotocols, most preferred first (kubelet's SupportedStreamingProtocols).
pub const SUPPORTED_SPDY_PROTOCOLS: [&str; 4] = [
    STREAM_PROTOCOL_V4,
    STREAM_PROTOCOL_V3,
    STREAM_PROTOCOL_V2,
    STREAM_PROTOCOL_V1,
];

/// The `streamtype` header values.
pub const STREAM_TYPE_ERROR: &str = "error";
pub const STREAM_TYPE_STDIN: &str = "stdin";
pub const STREAM_TYPE_STDOUT: &str = "stdout";
pub const STREAM_TYPE_STDERR: &str = "stderr";
pub const STREAM_TYPE_RESIZE: &str = "resize";

/// How long output still in flight may take to reach the client once the command ended.
const OUTPUT_DRAIN: Duration = Duration::from_secs(10);
const PIPE_BUFFER: usize = 64 * 1024;

/// One output direction: a SPDY stream or a WebSocket channel.
#[derive(Clone)]
pub enum OutStream {
    Spdy(StreamWriter),
    Ws(ChannelWriter),
}

impl OutStream {
    pub async fn write(&self, data: &[u8]) -> io::Result<()> {
        match self {
            OutStream::Spdy(writer) => writer.write(data).await,
            OutStream::Ws(writer) => writer.write(data).await,
        }
    }

    /// Copies `reader` to this stream until EOF (or until the client is gone), then
    /// half-closes it.
    pub async fn pump_from(&self, mut reader: impl tokio::io::AsyncRead + Unpin) {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if self.write(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        self.finish().await;
    }

    /// Half-closes a SPDY stream (the client reads to EOF); WebSocket channels have no
    /// half-close from the server.
    pub async fn finish(&self) {
        if let OutStream::Spdy(writer) = self {
            let _ = writer.finish().await;
        }
    }
}

/// How the command's result is written on the error stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusFormat {
    /// v1–v3: the error message as text; nothing on success.
    Text,
    /// v4/v5: a `metav1.Status` JSON object.
    Json,
}

impl StatusFormat {
    /// JSON for the v4 and v5 protocols (SPDY or WebSocket), text for the older ones.
    pub fn for_protocol(protocol: &str) -> StatusFormat {
        if protocol.starts_with("v4.") || protocol.starts_with("v5.") {
            StatusFormat::Json
        } else {
            StatusFormat::Text
        }
    }
}

/// The client's side of a session, transport-neutral.
pub struct Session {
    pub stdin: Option<mpsc::Receiver<Vec<u8>>>,
    pub stdout: Option<OutStream>,
    pub stderr: Option<OutStream>,
    pub resize: Option<mpsc::Receiver<Vec<u8>>>,
    pub error: Option<OutStream>,
    pub status: StatusFormat,
    pub tty: bool,
}

pub enum Operation {
    Exec {
        container_id: String,
        cmd: Vec<String>,
    },
    Attach {
        container_id: String,
    },
}

/// Runs the session to its end and reports the result on the error stream.
pub async fn run(session: Session, operation: Operation, runtime: Arc<dyn StreamingRuntime>) {
    let Session {
        stdin,
        stdout,
        stderr,
        resize,
        error,
        status,
        tty,
    } = session;
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    let mut background: Vec<JoinHandle<()>> = Vec::new();
    let stdin = stdin.map(|mut incoming| {
        let (reader, mut writer) = tokio::io::duplex(PIPE_BUFFER);
        background.push(tokio::spawn(async move {
            while let Some(chunk) = incoming.recv().await {
                if writer.write_all(&chunk).await.is_err() {
                    return;
                }
            }
            // The client's FIN: the command sees EOF on stdin.
            let _ = writer.shutdown().await;
        }));
        Box::new(reader) as Box<dyn tokio::io::AsyncRead + Send + Unpin>
    });
    let mut output = |out: Option<OutStream>| {
        out.map(|out| {
            let (reader, writer) = tokio::io::duplex(PIPE_BUFFER);
            pumps.push(tokio::spawn(async move { out.pump_from(reader).await }));
            Box::new(writer) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>
        })
    };
    let stdout = output(stdout);
    // With a TTY the terminal merges stderr into stdout (kubelet refuses tty + stderr).
    let stderr = if tty { None } else { output(stderr) };
    let resize = match (tty, resize) {
        (true, Some(incoming)) => {
            let (tx, rx) = mpsc::channel(8);
            background.push(tokio::spawn(decode_resize_events(incoming, tx)));
            Some(rx)
        }
        _ => None,
    };
    let io = StreamIo {
        stdin,
        stdout,
        stderr,
        resize,
    };
    let result = match &operation {
        Operation::Exec { container_id, cmd } => runtime
            .exec_stream(container_id, cmd.clone(), tty, io)
            .await
            .map(Some),
        Operation::Attach { container_id } => runtime
            .attach_stream(container_id, tty, io)
            .await
            .map(|()| None),
    };
    // Output written before the command ended goes out before the status.
    let drained = tokio::time::timeout(OUTPUT_DRAIN, futures::future::join_all(pumps)).await;
    if drained.is_err() {
        warn!("command output did not finish within {OUTPUT_DRAIN:?} of its end");
    }
    let report = match (result, &operation) {
        (Ok(None | Some(0)), _) => ExitReport::Success,
        (Ok(Some(code)), Operation::Exec { cmd, .. }) => ExitReport::NonZero {
            code,
            message: format!("error executing command {}, exit code {code}", go_list(cmd)),
        },
        (Ok(Some(_)), Operation::Attach { .. }) => ExitReport::Success,
        (Err(status), Operation::Exec { .. }) => ExitReport::Internal(format!(
            "error executing command in container: failed to exec in container: {}",
            status.message()
        )),
        (Err(status), Operation::Attach { .. }) => ExitReport::Internal(format!(
            "error attaching to container: {}",
            status.message()
        )),
    };
    debug!(?report, "streaming session ended");
    if let Some(error) = error {
        if let Some(bytes) = report.encode(status) {
            let _ = error.write(&bytes).await;
        }
        error.finish().await;
    }
    background.iter().for_each(JoinHandle::abort);
}

/// Go's `%v` of a `[]string`: `[sh -c exit 3]`.
fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

/// The outcome written on the error stream.
#[derive(Debug, PartialEq, Eq)]
pub enum ExitReport {
    Success,
    NonZero { code: i32, message: String },
    Internal(String),
}

#[derive(Serialize)]
struct Status<'a> {
    metadata: Empty,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<i32>,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Details {
    causes: Vec<Cause>,
}

#[derive(Serialize)]
struct Cause {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    message: String,
}

impl ExitReport {
    /// The bytes for the error stream; `None` when the format writes nothing (text success).
    pub fn encode(&self, format: StatusFormat) -> Option<Vec<u8>> {
        let status = match self {
            ExitReport::Success => Status {
                metadata: Empty {},
                status: "Success",
                message: None,
                reason: None,
                details: None,
                code: None,
            },
            ExitReport::NonZero { code, message } => Status {
                metadata: Empty {},
                status: "Failure",
                message: Some(format!(
                    "command terminated with non-zero exit code: {message}"
                )),
                reason: Some("NonZeroExitCode"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: Some("ExitCode"),
                        message: code.to_string(),
                    }],
                }),
                code: None,
            },
            ExitReport::Internal(message) => Status {
                metadata: Empty {},
                status: "Failure",
                message: Some(format!("Internal error occurred: {message}")),
                reason: Some("InternalError"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: None,
                        message: message.clone(),
                    }],
                }),
                code: Some(500),
            },
        };
        match format {
            StatusFormat::Json => serde_json::to_vec(&status).ok(),
            StatusFormat::Text => status.message.map(String::into_bytes),
        }
    }
}

/// client-go's `TerminalSize`, JSON-encoded with Go's field names (matched case-insensitively
/// by Go's decoder).
#[derive(Deserialize)]
struct WireSize {
    #[serde(default, rename = "Width", alias = "width")]
    width: u16,
    #[serde(default, rename = "Height", alias = "height")]
    height: u16,
}

/// Decodes the resize stream: a sequence of JSON objects, split anywhere across chunks. Stops
/// at the first malformed value, as the kubelet's decoder loop does.
async fn decode_resize_events(
    mut incoming: mpsc::Receiver<Vec<u8>>,
    sizes: mpsc::Sender<TerminalSize>,
) {
    let mut pending: Vec<u8> = Vec::new();
    while let Some(chunk) = incoming.recv().await {
        pending.extend_from_slice(&chunk);
        let mut values = serde_json::Deserializer::from_slice(&pending).into_iter::<WireSize>();
        let mut decoded = Vec::new();
        let mut consumed = 0;
        loop {
            match values.next() {
                Some(Ok(size)) => {
                    consumed = values.byte_offset();
                    decoded.push(TerminalSize {
                        width: size.width,
                        height: size.height,
                    });
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(e)) => {
                    debug!(error = %e, "malformed resize event; ignoring further resizes");
                    for size in decoded {
                        let _ = sizes.send(size).await;
                    }
                    return;
                }
                None => break,
            }
        }
        pending.drain(..consumed);
        for size in decoded {
            if sizes.send(size).await.is_err() {
                return;
            }
        }
    }
}

/// The SPDY streams of a session, sorted by their `streamtype` header.
#[derive(Default)]
pub struct SpdyStreams {
    pub error: Option<IncomingStream>,
    pub stdin: Option<IncomingStream>,
    pub stdout: Option<IncomingStream>,
    pub stderr: Option<IncomingStream>,
    pub resize: Option<IncomingStream>,
}

/// Accepts the client's streams until the expected number arrived (kubelet's waitForStreams:
/// one error stream plus one per requested stdio stream, plus resize for a TTY on v3+).
pub async fn wait_for_spdy_streams(
    incoming: &mut mpsc::Receiver<IncomingStream>,
    expected: usize,
    timeout: Duration,
) -> Result<SpdyStreams, &'static str> {
    let mut streams = SpdyStreams::default();
    let mut received = 0;
    let deadline = tokio::time::Instant::now() + timeout;
    while received < expected {
        let stream = match tokio::time::timeout_at(deadline, incoming.recv()).await {
            Err(_) => return Err("timed out waiting for client to create streams"),
            Ok(None) => return Err("connection closed before the client created its streams"),
            Ok(Some(stream)) => stream,
        };
        if stream.accept().await.is_err() {
            return Err("connection closed before the client created its streams");
        }
        let slot = match stream.headers.get("streamtype").unwrap_or("") {
            STREAM_TYPE_ERROR => &mut streams.error,
            STREAM_TYPE_STDIN => &mut streams.stdin,
            STREAM_TYPE_STDOUT => &mut streams.stdout,
            STREAM_TYPE_STDERR => &mut streams.stderr,
            STREAM_TYPE_RESIZE => &mut streams.resize,
            other => {
                // Accepted but not counted, as the kubelet does.
                warn!(stream_type = other, "unexpected stream type");
                continue;
            }
        };
        *slot = Some(stream);
        received += 1;
    }
    Ok(streams)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_match_the_kubelet_json() {
        let json =
            |r: ExitReport| String::from_utf8(r.encode(StatusFormat::Json).unwrap()).unwrap();
        assert_eq!(
            json(ExitReport::Success),
            r#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(
            json(ExitReport::NonZero {
                code: 3,
                message: format!(
                    "error executing command {}, exit code 3",
                    go_list(&["sh".into(), "-c".into(), "exit 3".into()])
                ),
            }),
            concat!(
                r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero "#,
                r#"exit code: error executing command [sh -c exit 3], exit code 3","#,
                r#""reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
            )
        );
        assert_eq!(
            json(ExitReport::Internal("boom".into())),
            concat!(
                r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: boom","#,
                r#""reason":"InternalError","details":{"causes":[{"message":"boom"}]},"code":500}"#
            )
        );
        assert_eq!(ExitReport::Success.encode(StatusFormat::Text), None);
        assert_eq!(
            ExitReport::Internal("boom".into()).encode(StatusFormat::Text),
            Some(b"Internal error occurred: boom".to_vec())
        );
    }

    #[tokio::test]
    async fn resize_events_decode_across_chunk_boundaries() {
        let (chunks_tx, chunks_rx) = mpsc::channel(8);
        let (sizes_tx, mut sizes_rx) = mpsc::channel(8);
        let task = tokio::spawn(decode_resize_events(chunks_rx, sizes_tx));
        for chunk in [
            &br#"{"Width":80,"He"#[..],
            br#"ight":24}{"width":1"#,
            br#"00,"height":50}"#,
        ] {
            chunks_tx.send(chunk.to_vec()).await.unwrap();
        }
        chunks_tx.send(b"garbage".to_vec()).await.unwrap();
        chunks_tx
            .send(br#"{"Width":1,"Height":1}"#.to_vec())
            .await
            .unwrap();
        drop(chunks_tx);
        let mut got = Vec::new();
        while let Some(size) = sizes_rx.recv().await {
            got.push((size.width, size.height));
        }
        task.await.unwrap();
        assert_eq!(got, [(80, 24), (100, 50)]);
    }
}
