//! The Kubernetes channel protocols over WebSocket (apimachinery's wsstream): every message
//! starts with a channel number. `channel.k8s.io` (and the `v4.`/`v5.` variants) send binary
//! messages `[channel, data...]`; `base64.channel.k8s.io` sends text messages
//! `'0'+channel` followed by the base64 of the data. `v5.channel.k8s.io` adds a close signal:
//! the message `[255, channel]` half-closes that channel (stdin EOF).
//!
//! The handshake mirrors golang.org/x/net/websocket as wsstream drives it: GET only (405),
//! `Sec-WebSocket-Version: 13` and a key (400), and a subprotocol from the server's list, where
//! no subprotocol means "" (403 when none is acceptable).

use crate::cri::streaming::idle::{IdleClock, spawn_watchdog};
use base64::Engine;
use futures::{SinkExt, StreamExt};
use hyper::header::{HeaderMap, HeaderValue};
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tracing::debug;

pub const CHANNEL_PROTOCOL: &str = "channel.k8s.io";
pub const BASE64_CHANNEL_PROTOCOL: &str = "base64.channel.k8s.io";
pub const V4_CHANNEL_PROTOCOL: &str = "v4.channel.k8s.io";
pub const V4_BASE64_CHANNEL_PROTOCOL: &str = "v4.base64.channel.k8s.io";
pub const V5_CHANNEL_PROTOCOL: &str = "v5.channel.k8s.io";

/// The v5 close-signal channel byte.
const CLOSE_SIGNAL: u8 = 255;
const INCOMING_QUEUE: usize = 16;
const OUTGOING_QUEUE: usize = 64;

/// `Upgrade: websocket` with a `Connection` header naming `upgrade` (wsstream.IsWebSocketRequest).
pub fn is_websocket_request(headers: &HeaderMap) -> bool {
    let upgrade = headers
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    upgrade && connection_has_upgrade(headers)
}

pub fn connection_has_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// Why a WebSocket handshake was refused: the HTTP status and extra response headers.
#[derive(Debug)]
pub struct HandshakeRefusal {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub message: String,
}

/// An accepted handshake: the chosen subprotocol ("" when the client named none) and the
/// `Sec-WebSocket-Accept` value.
#[derive(Debug)]
pub struct Handshake {
    pub protocol: String,
    pub accept_key: String,
}

/// Checks a WebSocket upgrade request and picks the first client subprotocol the server has.
pub fn handshake(
    method: &hyper::Method,
    headers: &HeaderMap,
    supported: &[&str],
) -> Result<Handshake, HandshakeRefusal> {
    let refuse = |status, message: &str| HandshakeRefusal {
        status,
        headers: Vec::new(),
        message: message.to_owned(),
    };
    if method != hyper::Method::GET {
        return Err(refuse(405, "websocket: bad request method"));
    }
    let key = header_str(headers, "sec-websocket-key");
    if key.is_empty() {
        return Err(refuse(400, "websocket: missing Sec-WebSocket-Key"));
    }
    if header_str(headers, "sec-websocket-version") != "13" {
        let mut refusal = refuse(400, "websocket: unsupported Sec-WebSocket-Version");
        refusal
            .headers
            .push(("Sec-WebSocket-Version", "13".to_owned()));
        return Err(refusal);
    }
    // x/net/websocket reads only the first header line, split at commas.
    let requested = header_str(headers, "sec-websocket-protocol").trim();
    let mut wanted: Vec<&str> = requested.split(',').map(str::trim).collect();
    if requested.is_empty() {
        wanted = vec![""];
    }
    let Some(protocol) = wanted.iter().find(|p| supported.contains(p)) else {
        return Err(refuse(
            403,
            &format!("requested protocol(s) are not supported: {wanted:?}; supports {supported:?}"),
        ));
    };
    Ok(Handshake {
        protocol: (*protocol).to_owned(),
        accept_key: tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()),
    })
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v: &HeaderValue| v.to_str().ok())
        .unwrap_or("")
}

/// How channel numbers and data are framed on the chosen subprotocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelCodec {
    pub base64: bool,
    /// `[255, channel]` half-closes a channel (v5).
    pub close_signal: bool,
}

impl ChannelCodec {
    pub fn for_protocol(protocol: &str) -> ChannelCodec {
        ChannelCodec {
            base64: protocol.contains("base64"),
            close_signal: protocol == V5_CHANNEL_PROTOCOL,
        }
    }

    fn encode(&self, channel: u8, data: &[u8]) -> Message {
        if self.base64 {
            let mut text = String::with_capacity(1 + data.len() * 4 / 3 + 4);
            text.push(char::from(b'0'.wrapping_add(channel)));
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
            Message::text(text)
        } else {
            let mut frame = Vec::with_capacity(1 + data.len());
            frame.push(channel);
            frame.extend_from_slice(data);
            Message::binary(frame)
        }
    }
}

enum Command {
    Send(Message),
    Barrier(oneshot::Sender<()>),
}

/// Writes one channel. Cheap to clone.
#[derive(Clone)]
pub struct ChannelWriter {
    channel: u8,
    codec: ChannelCodec,
    out: mpsc::Sender<Command>,
}

impl ChannelWriter {
    /// Sends `data` as one message on this channel (an empty message is sent too: wsstream uses
    /// one to tell the client the connection is ready).
    pub async fn write(&self, data: &[u8]) -> io::Result<()> {
        self.out
            .send(Command::Send(self.codec.encode(self.channel, data)))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "WebSocket closed"))
    }
}

/// One upgraded WebSocket connection multiplexing numbered channels. Dropping it tears it down.
pub struct ChannelConnection {
    codec: ChannelCodec,
    out: mpsc::Sender<Command>,
    ended: watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl ChannelConnection {
    /// Serves `ws`. `readable[i]` says whether data the client sends on channel `i` is
    /// delivered (others are dropped, as wsstream's write-only and ignored channels); the
    /// returned receivers end when the client closes the channel (v5) or the connection.
    pub fn start<S>(
        ws: WebSocketStream<S>,
        codec: ChannelCodec,
        readable: &[bool],
        idle_timeout: Duration,
    ) -> (ChannelConnection, Vec<Option<mpsc::Receiver<Vec<u8>>>>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sink, stream) = ws.split();
        let (ended_tx, ended_rx) = watch::channel(false);
        let ended_tx = Arc::new(ended_tx);
        let clock = Arc::new(IdleClock::default());
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        for readable in readable {
            if *readable {
                let (tx, rx) = mpsc::channel(INCOMING_QUEUE);
                senders.push(Some(tx));
                receivers.push(Some(rx));
            } else {
                senders.push(None);
                receivers.push(None);
            }
        }
        let (out_tx, out_rx) = mpsc::channel(OUTGOING_QUEUE);
        let writer = tokio::spawn(write_loop(sink, out_rx, clock.clone(), ended_tx.clone()));
        let reader = tokio::spawn(read_loop(
            stream,
            codec,
            senders,
            clock.clone(),
            ended_tx.clone(),
        ));
        let aborts = vec![writer.abort_handle(), reader.abort_handle()];
        let mut tasks = vec![writer, reader];
        tasks.extend(spawn_watchdog(clock, idle_timeout, aborts, move || {
            ended_tx.send_replace(true);
        }));
        let conn = ChannelConnection {
            codec,
            out: out_tx,
            ended: ended_rx,
            tasks,
        };
        (conn, receivers)
    }

    pub fn writer(&self, channel: u8) -> ChannelWriter {
        ChannelWriter {
            channel,
            codec: self.codec,
            out: self.out.clone(),
        }
    }

    /// Resolves when the connection ended.
    pub async fn ended(&self) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|ended| *ended).await;
    }

    /// Graceful close: flush what is queued (up to `drain`), send a normal Close frame and give
    /// the client up to `linger` to answer it.
    pub async fn close(self, drain: Duration, linger: Duration) {
        let close = Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        }));
        let _ = self.out.send(Command::Send(close)).await;
        let (done_tx, done_rx) = oneshot::channel();
        if self.out.send(Command::Barrier(done_tx)).await.is_ok() {
            let _ = tokio::time::timeout(drain, done_rx).await;
        }
        let _ = tokio::time::timeout(linger, self.ended()).await;
    }
}

impl Drop for ChannelConnection {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

async fn write_loop<S>(
    mut sink: futures::stream::SplitSink<WebSocketStream<S>, Message>,
    mut commands: mpsc::Receiver<Command>,
    clock: Arc<IdleClock>,
    ended: Arc<watch::Sender<bool>>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(command) = commands.recv().await {
        match command {
            Command::Send(message) => {
                if let Err(e) = sink.send(message).await {
                    debug!(error = %e, "WebSocket write failed");
                    ended.send_replace(true);
                    return;
                }
                clock.touch();
            }
            Command::Barrier(done) => {
                let _ = done.send(());
            }
        }
    }
}

async fn read_loop<S>(
    mut stream: futures::stream::SplitStream<WebSocketStream<S>>,
    codec: ChannelCodec,
    mut channels: Vec<Option<mpsc::Sender<Vec<u8>>>>,
    clock: Arc<IdleClock>,
    ended: Arc<watch::Sender<bool>>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(message) = stream.next().await {
        clock.touch();
        let data = match message {
            Ok(Message::Binary(data)) => data.to_vec(),
            Ok(Message::Text(text)) => text.as_bytes().to_vec(),
            Ok(Message::Close(_)) => break,
            Ok(_) => continue, // ping/pong (answered by tungstenite)
            Err(e) => {
                debug!(error = %e, "WebSocket read failed");
                break;
            }
        };
        let Some((&first, rest)) = data.split_first() else {
            continue;
        };
        let channel = if codec.base64 {
            first.wrapping_sub(b'0')
        } else {
            first
        };
        if codec.close_signal && first == CLOSE_SIGNAL {
            if let Some(&closed) = rest.first()
                && let Some(slot) = channels.get_mut(usize::from(closed))
            {
                *slot = None;
            }
            continue;
        }
        let payload = if codec.base64 {
            match base64::engine::general_purpose::STANDARD.decode(rest) {
                Ok(decoded) => decoded,
                Err(e) => {
                    debug!(channel, error = %e, "dropping a message that is not base64");
                    continue;
                }
            }
        } else {
            rest.to_vec()
        };
        if let Some(Some(sender)) = channels.get(usize::from(channel))
            && !payload.is_empty()
        {
            // A consumer that went away just stops receiving.
            let _ = sender.send(payload).await;
        }
    }
    ended.send_replace(true);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    const SUPPORTED: [&str; 3] = ["", CHANNEL_PROTOCOL, V4_CHANNEL_PROTOCOL];

    #[test]
    fn handshake_follows_x_net_websocket() {
        let good = [
            ("upgrade", "websocket"),
            ("connection", "keep-alive, Upgrade"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("sec-websocket-version", "13"),
        ];
        let headers = request(&good);
        assert!(is_websocket_request(&headers));
        let ok = handshake(&hyper::Method::GET, &headers, &SUPPORTED).unwrap();
        assert_eq!(ok.protocol, "");
        // RFC 6455's example key and answer.
        assert_eq!(ok.accept_key, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");

        let mut with_protocols = good.to_vec();
        with_protocols.push((
            "sec-websocket-protocol",
            "v9.channel.k8s.io, v4.channel.k8s.io",
        ));
        let ok = handshake(&hyper::Method::GET, &request(&with_protocols), &SUPPORTED).unwrap();
        assert_eq!(ok.protocol, V4_CHANNEL_PROTOCOL);

        let mut unknown = good.to_vec();
        unknown.push(("sec-websocket-protocol", "v9.channel.k8s.io"));
        let refused = handshake(&hyper::Method::GET, &request(&unknown), &SUPPORTED).unwrap_err();
        assert_eq!(refused.status, 403);

        assert_eq!(
            handshake(&hyper::Method::POST, &headers, &SUPPORTED)
                .unwrap_err()
                .status,
            405
        );
        let old_version = request(&[good[0], good[1], good[2], ("sec-websocket-version", "8")]);
        let refused = handshake(&hyper::Method::GET, &old_version, &SUPPORTED).unwrap_err();
        assert_eq!((refused.status, refused.headers.len()), (400, 1));
        let no_key = request(&[good[0], good[1], good[3]]);
        assert_eq!(
            handshake(&hyper::Method::GET, &no_key, &SUPPORTED)
                .unwrap_err()
                .status,
            400
        );
        assert!(!is_websocket_request(&request(&[("upgrade", "websocket")])));
    }

    #[test]
    fn codecs_frame_channels() {
        let binary = ChannelCodec::for_protocol(V4_CHANNEL_PROTOCOL);
        assert_eq!(
            binary.encode(1, b"hi"),
            Message::binary(vec![1, b'h', b'i'])
        );
        let text = ChannelCodec::for_protocol(BASE64_CHANNEL_PROTOCOL);
        assert_eq!(text.encode(2, b"hi"), Message::text("2aGk="));
        assert!(ChannelCodec::for_protocol(V5_CHANNEL_PROTOCOL).close_signal);
    }
}
