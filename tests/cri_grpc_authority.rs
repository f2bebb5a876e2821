//! Clients that send the unix socket path as the HTTP/2 `:authority` (older grpc-go, as in old
//! crictl, critest and kubelets; grpc-java) get answers from the CRI socket: a hand-written
//! HTTP/2 client (h2's own refuses such an authority) sends real gRPC `Version` calls.

#[path = "support/grpc.rs"]
mod support;

use loona_hpack::{Decoder, Encoder};
use prost::Message;
use runp::cri::client::RemoteRuntime;
use runp::cri::endpoint::CriEndpoint;
use runp::cri::server::CriListener;
use runp::cri::{RuntimeService, api};
use std::path::Path;
use std::sync::Arc;
use support::{FakeCri, HANG_GUARD, TestServer, test_options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const PROTOCOL_ERROR: u32 = 0x1;

fn frame(frame_type: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = len[1..].to_vec();
    out.extend([frame_type, flags]);
    out.extend(stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// What the server answered on one stream.
#[derive(Debug, Default)]
struct Answer {
    headers: Vec<(String, String)>,
    data: Vec<u8>,
    trailers: Vec<(String, String)>,
    reset: Option<u32>,
}

impl Answer {
    fn header(list: &[(String, String)], name: &str) -> Option<String> {
        list.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
    }

    /// The one gRPC message of the body (1 byte flag, 4 bytes length, message).
    fn message<T: Message + Default>(&self) -> T {
        assert!(self.data.len() >= 5, "a gRPC message: {self:?}");
        assert_eq!(self.data[0], 0, "uncompressed");
        let len = u32::from_be_bytes(self.data[1..5].try_into().unwrap()) as usize;
        T::decode(&self.data[5..5 + len]).expect("response decodes")
    }
}

/// An HTTP/2 client connection that speaks just enough for unary gRPC calls.
struct RawClient {
    sock: UnixStream,
    encoder: Encoder<'static>,
    decoder: Decoder<'static>,
    next_stream: u32,
}

impl RawClient {
    async fn connect(path: &Path) -> RawClient {
        let mut sock = UnixStream::connect(path).await.expect("connect");
        let mut hello = PREFACE.to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        sock.write_all(&hello).await.expect("preface");
        RawClient {
            sock,
            encoder: Encoder::new(),
            decoder: Decoder::new(),
            next_stream: 1,
        }
    }

    /// Sends a unary call with `authority` and reads its answer (or the stream's reset).
    async fn call(&mut self, authority: &str, path: &str, request: &impl Message) -> Answer {
        let stream = self.next_stream;
        self.next_stream += 2;
        let headers: [(&[u8], &[u8]); 7] = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.as_bytes()),
            (b":authority", authority.as_bytes()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            (b"user-agent", b"grpc-go/1.26.0"),
        ];
        // The encoder indexes: a second call refers to the dynamic table.
        let block = self.encoder.encode(headers);
        let body = request.encode_to_vec();
        let mut message = vec![0];
        message.extend(u32::try_from(body.len()).unwrap().to_be_bytes());
        message.extend(body);
        let mut out = frame(HEADERS, END_HEADERS, stream, &block);
        out.extend(frame(DATA, END_STREAM, stream, &message));
        self.sock.write_all(&out).await.expect("send the call");
        tokio::time::timeout(HANG_GUARD, self.answer(stream))
            .await
            .expect("an answer within the hang guard")
    }

    async fn answer(&mut self, stream: u32) -> Answer {
        let mut answer = Answer::default();
        loop {
            let mut head = [0u8; 9];
            self.sock.read_exact(&mut head).await.expect("frame header");
            let len =
                (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
            let (kind, flags) = (head[3], head[4]);
            let id = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
            let mut payload = vec![0; len];
            self.sock
                .read_exact(&mut payload)
                .await
                .expect("frame payload");
            match kind {
                SETTINGS if flags & ACK == 0 => {
                    let ack = frame(SETTINGS, ACK, 0, &[]);
                    self.sock.write_all(&ack).await.expect("settings ack");
                }
                GOAWAY => panic!("the server closed the connection: {payload:?}"),
                HEADERS => {
                    assert_eq!(
                        flags & END_HEADERS,
                        END_HEADERS,
                        "small answers fit a frame"
                    );
                    let list: Vec<(String, String)> = self
                        .decoder
                        .decode(&payload)
                        .expect("the server's headers decode")
                        .into_iter()
                        .map(|(n, v)| {
                            let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
                            (text(n), text(v))
                        })
                        .collect();
                    if id != stream {
                        continue;
                    }
                    if answer.headers.is_empty() {
                        answer.headers = list;
                    } else {
                        answer.trailers = list;
                    }
                    if flags & END_STREAM != 0 {
                        return answer;
                    }
                }
                DATA if id == stream => {
                    answer.data.extend(payload);
                    if flags & END_STREAM != 0 {
                        return answer;
                    }
                }
                RST_STREAM if id == stream => {
                    answer.reset = Some(u32::from_be_bytes(payload[..4].try_into().unwrap()));
                    return answer;
                }
                _ => {}
            }
        }
    }
}

const VERSION: &str = "/runtime.v1.RuntimeService/Version";

fn version_request() -> api::VersionRequest {
    api::VersionRequest {
        version: "v1".into(),
    }
}

#[tokio::test]
async fn the_socket_path_as_authority_gets_real_answers() {
    let server = TestServer::start().await;
    let socket = server.socket();
    let path = socket.to_str().unwrap().to_owned();
    let mut client = RawClient::connect(&socket).await;
    let authorities = [
        path.clone(),
        // The same, now indexed in the client's dynamic table.
        path.clone(),
        format!("unix://{path}"),
        "localhost".to_owned(),
    ];
    for authority in &authorities {
        let answer = client.call(authority, VERSION, &version_request()).await;
        assert_eq!(answer.reset, None, "{authority}: stream reset");
        assert_eq!(
            Answer::header(&answer.headers, ":status").as_deref(),
            Some("200")
        );
        assert_eq!(
            Answer::header(&answer.trailers, "grpc-status").as_deref(),
            Some("0"),
            "{authority}: {answer:?}"
        );
        let response: api::VersionResponse = answer.message();
        let recorded = server.fake.last_call();
        assert_eq!(recorded.method, "version");
        assert_eq!(recorded.request::<api::VersionRequest>(), version_request());
        assert_eq!(response, recorded.response::<api::VersionResponse>());
    }
    assert_eq!(server.fake.calls().len(), authorities.len());

    // An ordinary tonic client on the same socket is unaffected.
    let remote = RemoteRuntime::connect(&server.endpoint, test_options())
        .await
        .expect("connect");
    remote
        .version(version_request())
        .await
        .expect("the tonic client gets an answer");
}

#[tokio::test]
async fn without_the_adapter_h2_resets_such_calls() {
    // The control: this is what the adapter is for.
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("cri.sock");
    let listener = CriListener::bind(&CriEndpoint::Unix(socket.clone()))
        .await
        .expect("bind")
        .without_authority_fix();
    let fake = Arc::new(FakeCri::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(listener.serve(fake.clone(), fake.clone(), async move {
        let _ = stopped.await;
    }));
    let mut client = RawClient::connect(&socket).await;
    let path = socket.to_str().unwrap();
    let answer = client.call(path, VERSION, &version_request()).await;
    assert_eq!(answer.reset, Some(PROTOCOL_ERROR), "{answer:?}");
    assert!(fake.calls().is_empty());
    let answer = client.call("localhost", VERSION, &version_request()).await;
    assert_eq!(
        Answer::header(&answer.trailers, "grpc-status").as_deref(),
        Some("0")
    );
    drop(client); // the server drains open connections at shutdown
    let _ = stop.send(());
    let _ = tokio::time::timeout(HANG_GUARD, task).await;
}
