//! A loopback proxy in front of a test registry: it records every request (to count
//! downloads), can play a token server (Bearer challenges with realm/service/scope), delay
//! blob answers (so concurrent pulls overlap), and cut a blob's connection mid-body.
#![allow(dead_code)]

use base64::Engine as _;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

pub const SERVICE: &str = "runp-test";

#[derive(Clone, Default)]
pub struct ProxyConfig {
    pub token: Option<TokenAuth>,
    pub blob_delay: Option<Duration>,
    /// Cut GETs of this blob digest (`sha256:...`) after `cut_after` bytes, `cut_times` times.
    pub cut_digest: Option<String>,
    pub cut_after: usize,
}

#[derive(Clone)]
pub struct TokenAuth {
    pub user: String,
    pub pass: String,
    pub identity_token: String,
}

#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub status: u16,
}

struct State {
    upstream: String,
    addr: String,
    config: ProxyConfig,
    cut_times: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
    token_requests: Mutex<Vec<String>>,
    http: reqwest::Client,
}

pub struct Proxy {
    pub addr: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A token server in front of `upstream`: user bob, password hunter2, identity token
    /// refresh-me.
    pub async fn token_gate(upstream: &str) -> Proxy {
        let token = TokenAuth {
            user: "bob".into(),
            pass: "hunter2".into(),
            identity_token: "refresh-me".into(),
        };
        let config = ProxyConfig {
            token: Some(token),
            ..ProxyConfig::default()
        };
        Proxy::start(upstream, config).await
    }

    pub async fn start(upstream: &str, config: ProxyConfig) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(runp::util::tls::client_config().unwrap())
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let state = Arc::new(State {
            upstream: upstream.to_string(),
            addr: addr.clone(),
            config,
            cut_times: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
            token_requests: Mutex::new(Vec::new()),
            http,
        });
        let serving = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(state.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Proxy { addr, state, task }
    }

    /// How many more GETs of the cut digest are cut.
    pub fn cut(&self, times: usize) {
        self.state.cut_times.store(times, Ordering::SeqCst);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    pub fn clear(&self) {
        self.state.seen.lock().unwrap().clear();
        self.state.token_requests.lock().unwrap().clear();
    }

    /// GETs (answered 2xx) of paths ending in `suffix`.
    pub fn gets(&self, suffix: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == "GET" && s.path.ends_with(suffix) && s.status < 300)
            .collect()
    }

    /// Blob GETs answered 2xx, by digest.
    pub fn blob_gets(&self) -> Vec<String> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == "GET" && s.status < 300 && s.path.contains("/blobs/"))
            .map(|s| s.path.rsplit('/').next().unwrap_or("").to_string())
            .collect()
    }

    /// `METHOD params` of each token request.
    pub fn token_requests(&self) -> Vec<String> {
        self.state.token_requests.lock().unwrap().clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A body that sends its bytes and then, when `fail`, breaks the connection (after a pause,
/// so the bytes are on the wire first) while promising `len` bytes.
struct ProxyBody {
    data: Option<Bytes>,
    len: u64,
    fail: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl ProxyBody {
    fn full(data: Vec<u8>) -> ProxyBody {
        ProxyBody {
            len: data.len() as u64,
            data: Some(Bytes::from(data)),
            fail: None,
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        if let Some(data) = this.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        match &mut this.fail {
            Some(sleep) => match sleep.as_mut().poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(()) => {
                    this.fail = None;
                    Poll::Ready(Some(Err(std::io::Error::other("cut by the test proxy"))))
                }
            },
            None => Poll::Ready(None),
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

use std::future::Future;

async fn read_body(mut body: Incoming) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    out.extend_from_slice(data);
                }
            }
            Err(_) => break,
        }
    }
    out
}

fn params(text: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://x/?{text}"))
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn answer(status: StatusCode, headers: &[(&str, String)], body: &str) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::full(body.as_bytes().to_vec()));
    *response.status_mut() = status;
    for (name, value) in headers {
        response.headers_mut().insert(
            hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    response
}

/// The repository of `/v2/<name>/(manifests|blobs)/<ref>`.
fn repository(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v2/")?;
    ["/manifests/", "/blobs/"]
        .iter()
        .filter_map(|marker| rest.rfind(marker).map(|i| &rest[..i]))
        .next()
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let range = req
        .headers()
        .get("range")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let authorization = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let response = route(&state, req, &path, &query, &authorization).await;
    state.seen.lock().unwrap().push(Seen {
        method: method.to_string(),
        path,
        range,
        status: response.status().as_u16(),
    });
    Ok(response)
}

async fn route(
    state: &State,
    req: Request<Incoming>,
    path: &str,
    query: &str,
    authorization: &str,
) -> Response<ProxyBody> {
    if let Some(token) = &state.config.token {
        if path == "/token" {
            let post = req.method() == hyper::Method::POST;
            let body = String::from_utf8_lossy(&read_body(req.into_body()).await).into_owned();
            let form = params(if post { &body } else { query });
            state.token_requests.lock().unwrap().push(format!(
                "{} {}",
                if post { "POST" } else { "GET" },
                if post { &body } else { query }
            ));
            let basic = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD
                    .encode(format!("{}:{}", token.user, token.pass))
            );
            let allowed = param(&form, "service") == Some(SERVICE)
                && if post {
                    param(&form, "grant_type") == Some("refresh_token")
                        && param(&form, "refresh_token") == Some(token.identity_token.as_str())
                } else {
                    authorization == basic
                };
            if !allowed {
                return answer(
                    StatusCode::UNAUTHORIZED,
                    &[],
                    r#"{"details":"bad credentials"}"#,
                );
            }
            let issued = format!("tok:{}", param(&form, "scope").unwrap_or(""));
            let body =
                serde_json::json!({"token": issued, "access_token": issued, "expires_in": 300});
            return answer(
                StatusCode::OK,
                &[("content-type", "application/json".into())],
                &body.to_string(),
            );
        }
        let needed = repository(path).map(|r| format!("repository:{r}:pull"));
        match authorization.strip_prefix("Bearer tok:") {
            Some(scope) if needed.as_deref().is_none_or(|n| n == scope) => {}
            Some(_) => {
                return answer(
                    StatusCode::FORBIDDEN,
                    &[("content-type", "application/json".into())],
                    r#"{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}"#,
                );
            }
            None => {
                let mut challenge = format!(
                    r#"Bearer realm="http://{}/token",service="{SERVICE}""#,
                    state.addr
                );
                if let Some(scope) = &needed {
                    challenge.push_str(&format!(r#",scope="{scope}""#));
                }
                return answer(
                    StatusCode::UNAUTHORIZED,
                    &[
                        ("www-authenticate", challenge),
                        ("content-type", "application/json".into()),
                    ],
                    r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#,
                );
            }
        }
    }
    if path.contains("/blobs/")
        && let Some(delay) = state.config.blob_delay
    {
        tokio::time::sleep(delay).await;
    }
    forward(state, req, path, query).await
}

async fn forward(
    state: &State,
    req: Request<Incoming>,
    path: &str,
    query: &str,
) -> Response<ProxyBody> {
    let url = if query.is_empty() {
        format!("http://{}{path}", state.upstream)
    } else {
        format!("http://{}{path}?{query}", state.upstream)
    };
    let head = req.method() == hyper::Method::HEAD;
    let mut request = state.http.request(req.method().clone(), &url);
    for (name, value) in req.headers() {
        let skip = name == hyper::header::HOST
            || name == hyper::header::CONNECTION
            || (state.config.token.is_some() && name == hyper::header::AUTHORIZATION);
        if !skip {
            request = request.header(name, value);
        }
    }
    let upstream = match request.send().await {
        Ok(upstream) => upstream,
        Err(err) => return answer(StatusCode::BAD_GATEWAY, &[], &err.to_string()),
    };
    let status = upstream.status();
    let headers = upstream.headers().clone();
    let data = upstream.bytes().await.unwrap_or_default().to_vec();
    let cut = req.method() == hyper::Method::GET
        && state
            .config
            .cut_digest
            .as_deref()
            .is_some_and(|d| path.ends_with(&format!("/blobs/{d}")))
        && data.len() > state.config.cut_after
        && state
            .cut_times
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    let len = data.len() as u64;
    let body = if cut {
        ProxyBody {
            data: Some(Bytes::from(data[..state.config.cut_after].to_vec())),
            len,
            fail: Some(Box::pin(tokio::time::sleep(Duration::from_millis(100)))),
        }
    } else {
        ProxyBody::full(data)
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    for (name, value) in &headers {
        let skip = name == hyper::header::TRANSFER_ENCODING
            || name == hyper::header::CONNECTION
            || (!head && name == hyper::header::CONTENT_LENGTH);
        if !skip {
            response.headers_mut().append(name, value.clone());
        }
    }
    response
}
