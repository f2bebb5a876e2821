//! The endpoints behind the routes: /healthz, /pods, /configz, /containerLogs, and the
//! exec/attach/portForward streams and /run through the CRI.

use super::lookup::{self, LookupError, PodRef};
use super::proxy;
use super::response::{Body, full, json, text};
use super::routes::Endpoint;
use super::stats;
use super::streamopts::{ports, run_command, stream_options};
use crate::cri::{RuntimeService, api};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The pods the agent runs (with status), for `/pods`.
pub trait PodSource: Send + Sync {
    fn pods(&self) -> Vec<Pod>;
}

impl PodSource for crate::kubelet::AgentHandle {
    fn pods(&self) -> Vec<Pod> {
        self.pod_objects()
    }
}

/// What the handlers use.
pub struct Context {
    pub runtime: Arc<dyn RuntimeService>,
    pub pods: Arc<dyn PodSource>,
    /// `/metrics`.
    pub metrics: Arc<crate::kubelet::metrics::KubeletMetrics>,
    /// `/configz`'s `kubeletconfig`.
    pub configz: serde_json::Value,
    pub node_name: String,
    /// The agent's root: the node filesystem figures are its filesystem's.
    pub root: std::path::PathBuf,
}

fn lookup_error(err: &LookupError) -> Response<Body> {
    let status = match err {
        LookupError::Runtime(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::NOT_FOUND,
    };
    text(status, &err.to_string())
}

fn cri_error(what: &str, status: &tonic::Status) -> Response<Body> {
    let code = match status.code() {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    text(code, &format!("{what}: {}", status.message()))
}

fn param(params: &BTreeMap<&'static str, String>, name: &str) -> String {
    params.get(name).cloned().unwrap_or_default()
}

pub async fn handle(
    ctx: Arc<Context>,
    endpoint: Endpoint,
    params: BTreeMap<&'static str, String>,
    request: Request<Incoming>,
) -> Response<Body> {
    let query = request.uri().query().unwrap_or("").to_string();
    let pod = PodRef {
        namespace: param(&params, "ns"),
        name: param(&params, "pod"),
        uid: params.get("uid").cloned(),
    };
    let container = param(&params, "container");
    let runtime = Arc::clone(&ctx.runtime);
    match endpoint {
        Endpoint::Healthz => Response::new(full("ok")),
        Endpoint::Pods => json(&serde_json::json!({
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {},
            "items": ctx.pods.pods(),
        })),
        Endpoint::Metrics => {
            if let Err(err) =
                crate::kubelet::pleg::refresh_running_gauges(runtime.as_ref(), &ctx.metrics).await
            {
                tracing::warn!(error = %err, "/metrics: cannot count the running pods; the gauges are the last relist's");
            }
            metrics_response(&ctx.metrics)
        }
        Endpoint::Configz => json(&serde_json::json!({ "kubeletconfig": ctx.configz })),
        Endpoint::ContainerLogs => super::logs::serve(runtime, pod, &container, &query).await,
        Endpoint::Exec | Endpoint::Attach => {
            let exec = endpoint == Endpoint::Exec;
            let opts = match stream_options(&query, exec) {
                Ok(opts) => opts,
                Err(err) => return text(StatusCode::BAD_REQUEST, &err.to_string()),
            };
            let found = match lookup::container(runtime.as_ref(), &pod, &container, false).await {
                Ok(found) => found,
                Err(err) => return lookup_error(&err),
            };
            let url = if exec {
                runtime
                    .exec(api::ExecRequest {
                        container_id: found.id,
                        cmd: opts.command,
                        tty: opts.tty,
                        stdin: opts.stdin,
                        stdout: opts.stdout,
                        stderr: opts.stderr,
                    })
                    .await
                    .map(|r| r.url)
            } else {
                runtime
                    .attach(api::AttachRequest {
                        container_id: found.id,
                        stdin: opts.stdin,
                        tty: opts.tty,
                        stdout: opts.stdout,
                        stderr: opts.stderr,
                    })
                    .await
                    .map(|r| r.url)
            };
            match url {
                Ok(url) => proxy::upgrade(request, &url)
                    .await
                    .unwrap_or_else(|e| proxy::failed(&e)),
                Err(status) => cri_error(if exec { "exec" } else { "attach" }, &status),
            }
        }
        Endpoint::PortForward => {
            let port = match ports(&query) {
                Ok(port) => port,
                Err(err) => return text(StatusCode::BAD_REQUEST, &err.to_string()),
            };
            let sandbox = match lookup::sandbox(runtime.as_ref(), &pod).await {
                Ok(sandbox) => sandbox,
                Err(err) => return lookup_error(&err),
            };
            let forward = api::PortForwardRequest {
                pod_sandbox_id: sandbox.id,
                port,
            };
            match runtime.port_forward(forward).await {
                Ok(answer) => proxy::upgrade(request, &answer.url)
                    .await
                    .unwrap_or_else(|e| proxy::failed(&e)),
                Err(status) => cri_error("port forward", &status),
            }
        }
        Endpoint::Run => run(runtime.as_ref(), &pod, &container, &query).await,
        Endpoint::StatsSummary | Endpoint::MetricsResource => {
            let rt = match stats::runtime_figures(runtime.as_ref()).await {
                Ok(rt) => rt,
                Err(status) => return cri_error("stats", &status),
            };
            let root = ctx.root.clone();
            let node = tokio::task::spawn_blocking(move || stats::node_figures(&root))
                .await
                .unwrap_or_default();
            let now = chrono::Utc::now();
            if endpoint == Endpoint::StatsSummary {
                return json(&stats::summary(&ctx.node_name, &node, &rt, now));
            }
            let mut response = Response::new(full(stats::resource_metrics(&node, &rt, now)));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            response
        }
    }
}

/// `/run`: ExecSync, stdout then stderr in the body; a non-zero exit is an error (kubelet's
/// RunInContainer).
async fn run(
    runtime: &dyn RuntimeService,
    pod: &PodRef,
    container: &str,
    query: &str,
) -> Response<Body> {
    let cmd = match run_command(query) {
        Ok(cmd) => cmd,
        Err(err) => return text(StatusCode::BAD_REQUEST, &err.to_string()),
    };
    let found = match lookup::container(runtime, pod, container, false).await {
        Ok(found) => found,
        Err(err) => return lookup_error(&err),
    };
    let answer = match runtime
        .exec_sync(api::ExecSyncRequest {
            container_id: found.id,
            cmd: cmd.clone(),
            timeout: 0,
        })
        .await
    {
        Ok(answer) => answer,
        Err(status) => return cri_error("run", &status),
    };
    let mut output = answer.stdout;
    output.extend(answer.stderr);
    if answer.exit_code != 0 {
        let message = format!(
            "command {cmd:?} exited with {}: {}",
            answer.exit_code,
            String::from_utf8_lossy(&output)
        );
        return text(StatusCode::INTERNAL_SERVER_ERROR, &message);
    }
    let mut response = Response::new(full(output));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    response
}

/// The metrics in Prometheus' text format.
fn metrics_response(metrics: &crate::kubelet::metrics::KubeletMetrics) -> Response<Body> {
    match metrics.render() {
        Ok(body) => {
            let mut response = Response::new(full(body));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(crate::kubelet::metrics::CONTENT_TYPE),
            );
            response
        }
        Err(err) => text(StatusCode::INTERNAL_SERVER_ERROR, &err.to_string()),
    }
}
