//! The HTTP side of the streaming endpoints: Go-style error answers and the SPDY (httpstream)
//! and WebSocket upgrade answers.

use super::websocket;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};

const HEADER_PROTOCOL_VERSION: &str = "X-Stream-Protocol-Version";
const HEADER_ACCEPTED_PROTOCOL_VERSIONS: &str = "X-Accepted-Stream-Protocol-Versions";

pub fn not_found() -> Response<String> {
    plain(StatusCode::NOT_FOUND, "404 page not found", &[])
}

/// Go's http.Error: text/plain, nosniff, the message and a newline.
pub fn plain(status: StatusCode, message: &str, headers: &[(&str, String)]) -> Response<String> {
    let mut response = Response::new(format!("{message}\n"));
    *response.status_mut() = status;
    let map = response.headers_mut();
    map.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    map.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            hyper::header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            map.append(name, value);
        }
    }
    response
}

/// The SPDY handshake: the 101 answer with the negotiated protocol, or the refusal and `None`.
pub fn spdy_handshake(
    headers: &HeaderMap,
    supported: &[&str],
) -> (Response<String>, Option<String>) {
    match negotiate_spdy(headers, supported) {
        Err(refusal) => (*refusal, None),
        Ok(protocol) => match spdy_upgrade(headers, &protocol) {
            Ok(response) => (response, Some(protocol)),
            Err(refusal) => (*refusal, None),
        },
    }
}

/// httpstream.Handshake: the first client protocol (header values may be comma-separated) the
/// server supports. 400 when the client named none, 403 with the accepted list when none fits.
fn negotiate_spdy(
    headers: &HeaderMap,
    supported: &[&str],
) -> Result<String, Box<Response<String>>> {
    let client: Vec<&str> = headers
        .get_all(HEADER_PROTOCOL_VERSION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if client.is_empty() {
        let message = format!("unable to upgrade: {HEADER_PROTOCOL_VERSION} is required");
        return Err(Box::new(plain(StatusCode::BAD_REQUEST, &message, &[])));
    }
    if let Some(chosen) = client.iter().find(|p| supported.contains(p)) {
        return Ok((*chosen).to_owned());
    }
    let accepted: Vec<(&str, String)> = supported
        .iter()
        .map(|p| (HEADER_ACCEPTED_PROTOCOL_VERSIONS, (*p).to_owned()))
        .collect();
    let message = format!(
        "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{}]",
        client.join(" "),
        supported.join(" ")
    );
    Err(Box::new(plain(StatusCode::FORBIDDEN, &message, &accepted)))
}

/// The SPDY upgrade answer, or 400 when the request does not ask for `Upgrade: SPDY/3.1`.
fn spdy_upgrade(
    headers: &HeaderMap,
    protocol: &str,
) -> Result<Response<String>, Box<Response<String>>> {
    let upgrade = headers
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !websocket::connection_has_upgrade(headers)
        || !upgrade.to_ascii_lowercase().contains("spdy/3.1")
    {
        let message = "unable to upgrade: missing upgrade headers in request";
        return Err(Box::new(plain(StatusCode::BAD_REQUEST, message, &[])));
    }
    let mut response = Response::new(String::new());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let map = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(protocol) {
        map.insert(HEADER_PROTOCOL_VERSION, value);
    }
    map.insert(
        hyper::header::CONNECTION,
        HeaderValue::from_static("Upgrade"),
    );
    map.insert(hyper::header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    Ok(response)
}

/// The WebSocket upgrade answer for `handshake`.
pub fn websocket_upgrade(handshake: &websocket::Handshake) -> Response<String> {
    let mut response = Response::new(String::new());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let map = response.headers_mut();
    map.insert(
        hyper::header::UPGRADE,
        HeaderValue::from_static("websocket"),
    );
    map.insert(
        hyper::header::CONNECTION,
        HeaderValue::from_static("Upgrade"),
    );
    if let Ok(value) = HeaderValue::from_str(&handshake.accept_key) {
        map.insert("sec-websocket-accept", value);
    }
    if !handshake.protocol.is_empty()
        && let Ok(value) = HeaderValue::from_str(&handshake.protocol)
    {
        map.insert("sec-websocket-protocol", value);
    }
    response
}

pub fn refusal_response(refusal: websocket::HandshakeRefusal) -> Response<String> {
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    let headers: Vec<(&str, String)> = refusal.headers.into_iter().collect();
    plain(status, &refusal.message, &headers)
}
