//! Test support for the CRI streaming server: an in-test [`StreamingRuntime`] (a tiny
//! deterministic command interpreter and a loopback TCP echo server for port forwarding), a
//! SPDY/3.1 client that behaves like client-go's (the upgrade request, stream creation order,
//! headers, waiting for each SYN_REPLY, reading to EOF), and WebSocket helpers.
#![allow(dead_code)]

use runp::cri::streaming::spdy::{Frame, FrameDecoder, FrameEncoder, Headers};
use runp::cri::streaming::{StreamingConfig, StreamingServer};
use runp::cri::{CriResult, StreamIo, StreamingRuntime, TerminalSize};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

/// Hang guard for waits in tests (never a performance assertion).
pub const HANG_GUARD: Duration = Duration::from_secs(20);

/// An ExecRequest for container `ctr-1`.
pub fn exec_request(
    cmd: &[&str],
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
) -> runp::cri::api::ExecRequest {
    runp::cri::api::ExecRequest {
        container_id: "ctr-1".into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty,
        stdin,
        stdout,
        stderr,
    }
}

/// What the runtime was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub op: &'static str,
    pub target: String,
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub resize: bool,
}

/// Commands: `echo ARGS..` (stdout), `cat` (stdin to stdout), `both OUT ERR CODE`,
/// `exit CODE`, `sizes N` (prints N resize events as `WxH`), `big N` (N bytes), `fail`.
#[derive(Default)]
pub struct TestRuntime {
    pub seen: Mutex<Vec<Seen>>,
}

fn seen(op: &'static str, target: &str, tty: bool, io: &StreamIo) -> Seen {
    Seen {
        op,
        target: target.to_owned(),
        tty,
        stdin: io.stdin.is_some(),
        stdout: io.stdout.is_some(),
        stderr: io.stderr.is_some(),
        resize: io.resize.is_some(),
    }
}

async fn put(out: &mut Option<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>, data: &[u8]) {
    if let Some(out) = out {
        out.write_all(data).await.expect("write output");
    }
}

#[async_trait::async_trait]
impl StreamingRuntime for TestRuntime {
    async fn exec_stream(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        tty: bool,
        mut io: StreamIo,
    ) -> CriResult<i32> {
        self.seen
            .lock()
            .unwrap()
            .push(seen("exec", container_id, tty, &io));
        let arg = |i: usize| cmd.get(i).cloned().unwrap_or_default();
        let code = match arg(0).as_str() {
            "echo" => {
                put(
                    &mut io.stdout,
                    format!("{}\n", cmd[1..].join(" ")).as_bytes(),
                )
                .await;
                0
            }
            "cat" => {
                let mut input = Vec::new();
                if let Some(stdin) = &mut io.stdin {
                    let mut buf = [0u8; 4096];
                    loop {
                        let n = stdin.read(&mut buf).await.expect("read stdin");
                        if n == 0 {
                            break;
                        }
                        input.extend_from_slice(&buf[..n]);
                        put(&mut io.stdout, &buf[..n]).await;
                    }
                }
                0
            }
            "both" => {
                put(&mut io.stdout, arg(1).as_bytes()).await;
                put(&mut io.stderr, arg(2).as_bytes()).await;
                arg(3).parse().unwrap_or(0)
            }
            "exit" => arg(1).parse().unwrap_or(0),
            "sizes" => {
                let wanted: usize = arg(1).parse().unwrap_or(0);
                let mut resize = io.resize.take().expect("a resize channel");
                for _ in 0..wanted {
                    let TerminalSize { width, height } =
                        resize.recv().await.expect("a resize event");
                    put(&mut io.stdout, format!("{width}x{height}\n").as_bytes()).await;
                }
                0
            }
            "big" => {
                let len: usize = arg(1).parse().unwrap_or(0);
                let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                put(&mut io.stdout, &data).await;
                0
            }
            _ => return Err(Status::internal(format!("no such command: {}", arg(0)))),
        };
        Ok(code)
    }

    async fn attach_stream(
        &self,
        container_id: &str,
        tty: bool,
        mut io: StreamIo,
    ) -> CriResult<()> {
        self.seen
            .lock()
            .unwrap()
            .push(seen("attach", container_id, tty, &io));
        put(&mut io.stdout, b"attached\n").await;
        if let (Some(stdin), Some(stdout)) = (&mut io.stdin, &mut io.stdout) {
            tokio::io::copy(stdin, stdout).await.expect("copy");
        }
        Ok(())
    }

    async fn port_forward_stream(&self, sandbox_id: &str, port: u16) -> CriResult<TcpStream> {
        self.seen.lock().unwrap().push(Seen {
            op: "portforward",
            target: format!("{sandbox_id}:{port}"),
            tty: false,
            stdin: false,
            stdout: false,
            stderr: false,
            resize: false,
        });
        TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| Status::unavailable(format!("dial 127.0.0.1:{port}: {e}")))
    }
}

/// A loopback TCP server that echoes every chunk and, at the client's EOF, writes `bye\n` and
/// closes. Returns its port.
pub async fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if tcp.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = tcp.write_all(b"bye\n").await;
            });
        }
    });
    port
}

/// A streaming server over a fresh [`TestRuntime`].
pub fn start_server(config: StreamingConfig) -> (StreamingServer, Arc<TestRuntime>) {
    let runtime = Arc::new(TestRuntime::default());
    let server = StreamingServer::start_with(config, runtime.clone()).expect("start server");
    (server, runtime)
}

/// An HTTP answer that was not an upgrade.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpAnswer {
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Sends an HTTP/1.1 request with `headers` to `url` and reads the response head (and the body
/// of a non-101 answer). Returns the stream positioned after the head.
pub async fn http_request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
) -> (TcpStream, HttpAnswer) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (authority, path) = rest.split_at(rest.find('/').expect("a path"));
    let mut tcp = TcpStream::connect(authority).await.expect("connect");
    // What Go's net/http sends for client-go's upgrade request.
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 0\r\n"
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        let n = tcp.read(&mut byte).await.expect("read response head");
        assert_eq!(n, 1, "connection closed inside the response head");
        raw.push(byte[0]);
    }
    let text = String::from_utf8(raw).unwrap();
    let mut lines = text.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let mut answer = HttpAnswer {
        status,
        headers,
        body: String::new(),
    };
    if status != 101 {
        let len: usize = answer
            .header("content-length")
            .first()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        tcp.read_exact(&mut body).await.unwrap();
        answer.body = String::from_utf8(body).unwrap();
    }
    (tcp, answer)
}

struct ClientStreamSlot {
    data: mpsc::UnboundedSender<Vec<u8>>,
    reply: Option<oneshot::Sender<()>>,
}

#[derive(Default)]
struct ClientShared {
    streams: HashMap<u32, ClientStreamSlot>,
    resets: Vec<(u32, u32)>,
    pongs: Vec<u32>,
    go_away: bool,
    window_updates: u32,
}

/// A SPDY/3.1 client connection, as client-go's spdy round tripper + spdystream.
pub struct SpdyClient {
    out: mpsc::UnboundedSender<Frame>,
    shared: Arc<Mutex<ClientShared>>,
    next_id: u32,
    pub protocol: String,
    reader: tokio::task::JoinHandle<()>,
}

/// One client-created stream.
pub struct ClientStream {
    pub id: u32,
    out: mpsc::UnboundedSender<Frame>,
    data: mpsc::UnboundedReceiver<Vec<u8>>,
}

impl ClientStream {
    pub fn write(&self, data: &[u8]) {
        let _ = self.out.send(Frame::Data {
            stream_id: self.id,
            fin: false,
            data: data.to_vec(),
        });
    }

    /// Half-close (spdystream's Stream.Close).
    pub fn close(&self) {
        let _ = self.out.send(Frame::Data {
            stream_id: self.id,
            fin: true,
            data: Vec::new(),
        });
    }

    /// Reads until the server's FIN / reset / connection end.
    pub async fn read_to_end(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        while let Some(chunk) = tokio::time::timeout(HANG_GUARD, self.data.recv())
            .await
            .expect("stream ended in time")
        {
            all.extend_from_slice(&chunk);
        }
        all
    }

    /// Reads until at least `len` bytes arrived.
    pub async fn read_exactly(&mut self, len: usize) -> Vec<u8> {
        let mut all = Vec::new();
        while all.len() < len {
            let chunk = tokio::time::timeout(HANG_GUARD, self.data.recv())
                .await
                .expect("data in time")
                .expect("stream still open");
            all.extend_from_slice(&chunk);
        }
        all
    }
}

impl SpdyClient {
    /// POSTs the upgrade to `url` offering `protocols` (one header line each, like client-go).
    pub async fn connect(url: &str, protocols: &[&str]) -> Result<SpdyClient, HttpAnswer> {
        let mut headers = vec![("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")];
        headers.extend(protocols.iter().map(|p| ("X-Stream-Protocol-Version", *p)));
        let (tcp, answer) = http_request("POST", url, &headers).await;
        if answer.status != 101 {
            return Err(answer);
        }
        let protocol = answer
            .header("x-stream-protocol-version")
            .first()
            .map(|p| p.to_string())
            .unwrap_or_default();
        assert_eq!(answer.header("upgrade"), ["SPDY/3.1"]);
        let (read_half, mut write_half) = tcp.into_split();
        let (out, mut out_rx) = mpsc::unbounded_channel::<Frame>();
        tokio::spawn(async move {
            let mut encoder = FrameEncoder::new().unwrap();
            while let Some(frame) = out_rx.recv().await {
                let mut buf = Vec::new();
                encoder.encode(&frame, &mut buf).unwrap();
                if write_half.write_all(&buf).await.is_err() {
                    return;
                }
            }
        });
        let shared = Arc::new(Mutex::new(ClientShared::default()));
        let reader_shared = shared.clone();
        let reader = tokio::spawn(async move {
            let mut read_half = read_half;
            let mut decoder = FrameDecoder::new();
            while let Ok(Some(frame)) = decoder.read(&mut read_half).await {
                let mut shared = reader_shared.lock().unwrap();
                match frame {
                    Frame::SynReply { stream_id, .. } => {
                        if let Some(reply) = shared
                            .streams
                            .get_mut(&stream_id)
                            .and_then(|s| s.reply.take())
                        {
                            let _ = reply.send(());
                        }
                    }
                    Frame::Data {
                        stream_id,
                        fin,
                        data,
                    } => {
                        if let Some(slot) = shared.streams.get(&stream_id)
                            && !data.is_empty()
                        {
                            let _ = slot.data.send(data);
                        }
                        if fin {
                            shared.streams.remove(&stream_id);
                        }
                    }
                    Frame::RstStream { stream_id, status } => {
                        shared.resets.push((stream_id, status));
                        shared.streams.remove(&stream_id);
                    }
                    Frame::Ping { id } => shared.pongs.push(id),
                    Frame::GoAway { .. } => shared.go_away = true,
                    Frame::WindowUpdate { .. } => shared.window_updates += 1,
                    _ => {}
                }
            }
            // Connection gone: every stream reads EOF.
            reader_shared.lock().unwrap().streams.clear();
        });
        Ok(SpdyClient {
            out,
            shared,
            next_id: 1,
            protocol,
            reader,
        })
    }

    /// Sends SYN_STREAM with `headers`; with `wait_reply`, waits for SYN_REPLY as client-go's
    /// CreateStream does. Panics if the server resets the stream instead.
    pub async fn create_stream(&mut self, headers: Headers, wait_reply: bool) -> ClientStream {
        let id = self.next_id;
        self.next_id += 2;
        let (data_tx, data_rx) = mpsc::unbounded_channel();
        let (reply_tx, reply_rx) = oneshot::channel();
        self.shared.lock().unwrap().streams.insert(
            id,
            ClientStreamSlot {
                data: data_tx,
                reply: Some(reply_tx),
            },
        );
        self.out
            .send(Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                fin: false,
                unidirectional: false,
                headers,
            })
            .unwrap();
        if wait_reply {
            tokio::time::timeout(HANG_GUARD, reply_rx)
                .await
                .expect("SYN_REPLY in time")
                .expect("stream accepted, not reset");
        }
        ClientStream {
            id,
            out: self.out.clone(),
            data: data_rx,
        }
    }

    /// A stream of `streamtype` (`http.Header.Set("streamType", ..)`, lowercased on the wire).
    pub async fn typed_stream(&mut self, stream_type: &str) -> ClientStream {
        self.create_stream(Headers::new().with("streamType", stream_type), true)
            .await
    }

    pub fn send(&self, frame: Frame) {
        self.out.send(frame).unwrap();
    }

    pub fn resets(&self) -> Vec<(u32, u32)> {
        self.shared.lock().unwrap().resets.clone()
    }

    pub fn pongs(&self) -> Vec<u32> {
        self.shared.lock().unwrap().pongs.clone()
    }

    pub fn got_go_away(&self) -> bool {
        self.shared.lock().unwrap().go_away
    }

    pub fn window_updates(&self) -> u32 {
        self.shared.lock().unwrap().window_updates
    }

    /// Waits until the server closed the connection.
    pub async fn closed_by_server(self) {
        tokio::time::timeout(HANG_GUARD, self.reader)
            .await
            .expect("server closed the connection")
            .unwrap();
    }
}

/// What client-go's exec executor ends with.
#[derive(Debug, Default)]
pub struct ExecOutcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Everything read on the error stream.
    pub error: Vec<u8>,
}

impl ExecOutcome {
    pub fn status(&self) -> serde_json::Value {
        serde_json::from_slice(&self.error).expect("a JSON status")
    }
}

/// What to send and which streams to open.
#[derive(Default)]
pub struct ExecInput {
    pub stdin: Option<Vec<u8>>,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
    pub resize: Vec<(u16, u16)>,
}

/// client-go's streamProtocolV2/V3/V4: error stream, then stdin, stdout, stderr (not with a
/// TTY), then resize (v3+ with a TTY); copy stdin and close it; read stdout/stderr to EOF, then
/// the error stream to EOF.
pub async fn spdy_exec(url: &str, protocols: &[&str], input: ExecInput) -> ExecOutcome {
    let mut client = SpdyClient::connect(url, protocols)
        .await
        .expect("upgrade to SPDY");
    let mut error = client.typed_stream("error").await;
    let stdin = match input.stdin {
        Some(_) => Some(client.typed_stream("stdin").await),
        None => None,
    };
    let mut stdout = match input.stdout {
        true => Some(client.typed_stream("stdout").await),
        false => None,
    };
    let mut stderr = match input.stderr && !input.tty {
        true => Some(client.typed_stream("stderr").await),
        false => None,
    };
    let resizable = client.protocol.starts_with("v3.") || client.protocol.starts_with("v4.");
    let resize = match input.tty && resizable {
        true => Some(client.typed_stream("resize").await),
        false => None,
    };
    if let Some(resize) = &resize {
        for (width, height) in &input.resize {
            let event = serde_json::json!({ "Width": width, "Height": height });
            resize.write(event.to_string().as_bytes());
        }
    }
    if let (Some(stream), Some(data)) = (&stdin, &input.stdin) {
        stream.write(data);
        stream.close();
    }
    let mut outcome = ExecOutcome::default();
    if let Some(stream) = &mut stdout {
        outcome.stdout = stream.read_to_end().await;
    }
    if let Some(stream) = &mut stderr {
        outcome.stderr = stream.read_to_end().await;
    }
    outcome.error = error.read_to_end().await;
    outcome
}

/// Starts a server with a short token TTL and manual clock.
pub fn manual_clock() -> (
    runp::cri::streaming::Clock,
    Arc<std::sync::atomic::AtomicU64>,
) {
    let start = std::time::Instant::now();
    let offset = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let read = offset.clone();
    let clock: runp::cri::streaming::Clock = Arc::new(move || {
        start + Duration::from_secs(read.load(std::sync::atomic::Ordering::SeqCst))
    });
    (clock, offset)
}

pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

pub type Ws = tokio_tungstenite::WebSocketStream<TcpStream>;

/// Opens a WebSocket to the streaming `url` (http://...) offering `protocols` ("" = none).
pub async fn ws_connect(
    url: &str,
    protocols: &str,
) -> Result<(Ws, Option<String>), tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let ws_url = url.replacen("http://", "ws://", 1);
    let mut request = ws_url.as_str().into_client_request()?;
    if !protocols.is_empty() {
        request
            .headers_mut()
            .insert("sec-websocket-protocol", protocols.parse().unwrap());
    }
    let authority = url.trim_start_matches("http://").split('/').next().unwrap();
    let tcp = TcpStream::connect(authority).await.unwrap();
    let (ws, response) = tokio_tungstenite::client_async(request, tcp).await?;
    let chosen = response
        .headers()
        .get("sec-websocket-protocol")
        .map(|v| v.to_str().unwrap().to_owned());
    Ok((ws, chosen))
}

/// Every (channel, data) message until the server closes, decoding base64 text frames.
pub async fn ws_read_all(ws: &mut Ws) -> Vec<(u8, Vec<u8>)> {
    use base64::Engine;
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let mut messages = Vec::new();
    loop {
        let next = tokio::time::timeout(HANG_GUARD, ws.next())
            .await
            .expect("server closed in time");
        match next {
            Some(Ok(Message::Binary(data))) => messages.push((data[0], data[1..].to_vec())),
            Some(Ok(Message::Text(text))) => {
                let bytes = text.as_bytes();
                let data = base64::engine::general_purpose::STANDARD
                    .decode(&bytes[1..])
                    .expect("base64");
                messages.push((bytes[0] - b'0', data));
            }
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return messages,
            Some(Ok(_)) => {}
        }
    }
}

/// The concatenated data of `channel`.
pub fn channel_data(messages: &[(u8, Vec<u8>)], channel: u8) -> Vec<u8> {
    messages
        .iter()
        .filter(|(c, _)| *c == channel)
        .flat_map(|(_, d)| d.clone())
        .collect()
}
