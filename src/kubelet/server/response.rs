//! Response bodies of the kubelet API: whole (text, JSON) or streamed from a channel (logs),
//! so a slow client only slows its own producer task.

use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Bytes;
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use tokio::sync::mpsc;

pub type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Go's http.Error: text/plain, nosniff, the message and a newline.
pub fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(full(format!("{message}\n")));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        "x-content-type-options",
        hyper::header::HeaderValue::from_static("nosniff"),
    );
    response
}

pub fn json(value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(full(value.to_string()));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A body fed by `rx`; the producer sees its sender fail once the client is gone.
pub fn channel(rx: mpsc::Receiver<Bytes>) -> Body {
    let stream = futures::StreamExt::map(tokio_stream::wrappers::ReceiverStream::new(rx), |b| {
        Ok::<_, std::io::Error>(Frame::data(b))
    });
    BodyExt::boxed(StreamBody::new(stream))
}
