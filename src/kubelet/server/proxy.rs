//! Exec, attach and port-forward streams: the runtime answers the CRI call with a one-time URL
//! on its streaming server, and the client's HTTP upgrade request is forwarded there (kubelet's
//! UpgradeAwareHandler). Once both sides switched protocols the bytes are spliced both ways, so
//! SPDY and WebSocket pass alike, until either side closes. Each stream lives in its own task: a client that goes away
//! closes the runtime's side (which then ends the session and its process).

use super::response::{Body, full, text};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// An error answer of the runtime's streaming server is relayed up to this size.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("streaming URL {url:?}: {reason}")]
    Url { url: String, reason: &'static str },
    #[error("connecting to the runtime's streaming server {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("the runtime's streaming server: {0}")]
    Http(#[from] hyper::Error),
    #[error("building the streaming request: {0}")]
    Request(#[from] hyper::http::Error),
}

/// Whether a client header goes to the streaming server (the upgrade negotiation only).
pub fn forwarded_header(name: &str) -> bool {
    matches!(name, "upgrade" | "connection" | "x-stream-protocol-version")
        || name.starts_with("sec-websocket-")
}

/// `host:port` and `path?query` of an `http://` streaming URL.
pub fn target(url: &str) -> Result<(String, String), ProxyError> {
    let bad = |reason| ProxyError::Url {
        url: url.to_string(),
        reason,
    };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("only http:// streaming URLs are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    let authority = if authority.contains(':') && !authority.ends_with(']') {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Ok((authority, path.to_string()))
}

/// Forwards `client`'s upgrade request to `url`; the answer goes back to the client, and on
/// 101 a task splices the two connections.
pub async fn upgrade(client: Request<Incoming>, url: &str) -> Result<Response<Body>, ProxyError> {
    let (authority, path) = target(url)?;
    let tcp = TcpStream::connect(&authority)
        .await
        .map_err(|source| ProxyError::Connect {
            addr: authority.clone(),
            source,
        })?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        if let Err(err) = connection.with_upgrades().await {
            tracing::debug!(error = %err, "streaming backend connection");
        }
    });
    let mut builder = Request::builder()
        .method(client.method().clone())
        .uri(path)
        .header(hyper::header::HOST, authority.as_str());
    for (name, value) in client.headers() {
        if forwarded_header(name.as_str()) {
            builder = builder.header(name, value);
        }
    }
    let mut backend = sender
        .send_request(builder.body(Empty::<Bytes>::new())?)
        .await?;
    if backend.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = backend.status();
        let headers = backend.headers().clone();
        let body = Limited::new(backend.into_body(), ERROR_BODY_LIMIT)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut out = Response::new(full(body));
        *out.status_mut() = status;
        for (name, value) in &headers {
            if name != hyper::header::CONTENT_LENGTH && name != hyper::header::TRANSFER_ENCODING {
                out.headers_mut().append(name, value.clone());
            }
        }
        return Ok(out);
    }
    let mut out = Response::new(full(Bytes::new()));
    *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *out.headers_mut() = backend.headers().clone();
    tokio::spawn(async move {
        let (client_side, backend_side) =
            tokio::join!(hyper::upgrade::on(client), hyper::upgrade::on(&mut backend));
        let (client_side, backend_side) = match (client_side, backend_side) {
            (Ok(c), Ok(b)) => (c, b),
            (c, b) => {
                tracing::debug!(client = ?c.err(), runtime = ?b.err(), "stream upgrade failed");
                return;
            }
        };
        splice(TokioIo::new(client_side), TokioIo::new(backend_side)).await;
    });
    Ok(out)
}

/// Copies both ways until either side is done, then closes both (as kubelet's and the API
/// server's proxies do): a client's EOF means it is gone — stdin's end travels inside the
/// stream protocol — so the runtime's side must close too, which ends the session and its
/// process even when the process writes nothing.
async fn splice<C, B>(client: C, backend: B)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut backend_read, mut backend_write) = tokio::io::split(backend);
    let up = async {
        let copied = tokio::io::copy(&mut client_read, &mut backend_write).await;
        let _ = backend_write.shutdown().await;
        copied
    };
    let down = async {
        let copied = tokio::io::copy(&mut backend_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
        copied
    };
    tokio::select! {
        copied = up => tracing::debug!(?copied, "stream ended by the client"),
        copied = down => tracing::debug!(?copied, "stream ended by the runtime"),
    }
}

/// The answer when the stream could not be set up.
pub fn failed(err: &ProxyError) -> Response<Body> {
    text(StatusCode::INTERNAL_SERVER_ERROR, &err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_urls_split_into_address_and_path() {
        let table = [
            (
                "http://127.0.0.1:4321/exec/tok",
                Some(("127.0.0.1:4321", "/exec/tok")),
            ),
            (
                "http://[::1]:80/portforward/t",
                Some(("[::1]:80", "/portforward/t")),
            ),
            ("http://host/attach/t", Some(("host:80", "/attach/t"))),
            ("http://127.0.0.1:1", Some(("127.0.0.1:1", "/"))),
            ("https://127.0.0.1:1/exec/t", None),
            ("/exec/t", None),
            ("http:///exec/t", None),
        ];
        for (url, want) in table {
            let got = target(url).ok();
            let want = want.map(|(a, p)| (a.to_string(), p.to_string()));
            assert_eq!(got, want, "{url}");
        }
    }

    #[tokio::test]
    async fn splice_carries_both_ways_and_a_gone_client_closes_the_runtime_side() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};
        let (mut client, client_near) = duplex(1024);
        let (backend_near, mut backend) = duplex(1024);
        let task = tokio::spawn(splice(client_near, backend_near));
        client.write_all(b"stdin").await.unwrap();
        let mut buf = [0u8; 5];
        backend.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"stdin");
        backend.write_all(b"out").await.unwrap();
        let mut buf = [0u8; 3];
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"out");
        // The client goes away; the runtime's side, silent, is closed all the same.
        drop(client);
        tokio::time::timeout(std::time::Duration::from_secs(30), task)
            .await
            .expect("hang guard: splice ends with its client")
            .unwrap();
        let mut rest = Vec::new();
        backend.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        assert!(backend.write_all(b"late output").await.is_err());
    }

    #[test]
    fn only_upgrade_negotiation_headers_are_forwarded() {
        for name in [
            "upgrade",
            "connection",
            "x-stream-protocol-version",
            "sec-websocket-key",
            "sec-websocket-protocol",
        ] {
            assert!(forwarded_header(name), "{name}");
        }
        for name in ["authorization", "cookie", "host", "content-length"] {
            assert!(!forwarded_header(name), "{name}");
        }
    }
}
