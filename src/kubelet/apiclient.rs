//! The API server client of a cluster node: built from a kubeconfig (`--kubeconfig`, else
//! `KUBECONFIG`) or the in-cluster service-account environment, with errors that name what
//! failed (the file, the server, the verb and resource refused).

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The backoff of the agent's list+watch streams after an error. kube's default grows to 30 s
/// (plus up to as much jitter) and stays grown for 2 minutes after the last error, so after an
/// API server outage a pod bound meanwhile could wait a minute before the node saw it (CI's
/// `cluster_pods` did). A node holds a handful of watches: it retries sooner, 0.5 s doubling
/// to 5 s (jitter up to as much again), and starts again from 0.5 s 2 minutes after an error.
pub fn watch_backoff() -> impl Backoff {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(
        ExponentialBackoff::from(exponential),
        Duration::from_secs(120),
    )
}

#[derive(Debug, thiserror::Error)]
pub enum ApiClientError {
    // Not a `source`: kube's message already ends with its cause, and a source chain would
    // print it again under anyhow's `{:#}`.
    #[error("kubeconfig {}: {reason}", path.display())]
    Kubeconfig {
        path: PathBuf,
        reason: kube::config::KubeconfigError,
    },
    #[error(
        "no kubeconfig given (--kubeconfig or KUBECONFIG) and not in a cluster (in-cluster config: {0})"
    )]
    InCluster(kube::config::InClusterError),
    #[error("API server {server}: cannot build a client: {reason}")]
    Client { server: String, reason: kube::Error },
    #[error("API server {server}: {verb} {resource}: {reason}")]
    Request {
        server: String,
        verb: &'static str,
        resource: String,
        reason: String,
    },
}

/// Where the client's configuration came from.
#[derive(Clone, Debug)]
pub enum ClientSource {
    Kubeconfig(PathBuf),
    InCluster,
}

/// A connected client and the server it talks to (for messages).
#[derive(Clone)]
pub struct ApiClient {
    pub client: kube::Client,
    pub server: String,
}

impl ApiClient {
    /// Builds the client. Connection problems show on the first request, which
    /// [`ApiClient::request_error`] turns into a message naming the server, verb and resource.
    pub async fn connect(source: &ClientSource) -> Result<ApiClient, ApiClientError> {
        let mut config = match source {
            ClientSource::Kubeconfig(path) => {
                let kubeconfig =
                    Kubeconfig::read_from(path).map_err(|reason| ApiClientError::Kubeconfig {
                        path: path.clone(),
                        reason,
                    })?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .map_err(|reason| ApiClientError::Kubeconfig {
                        path: path.clone(),
                        reason,
                    })?
            }
            ClientSource::InCluster => {
                kube::Config::incluster().map_err(ApiClientError::InCluster)?
            }
        };
        // A dead server must fail a request, not hang it; watches have their own idle timeout.
        config.connect_timeout = Some(Duration::from_secs(10));
        let server = config.cluster_url.to_string();
        let client = kube::Client::try_from(config).map_err(|reason| ApiClientError::Client {
            server: server.clone(),
            reason,
        })?;
        Ok(ApiClient { client, server })
    }

    /// An error of `verb` on `resource`, with the server's reason (RBAC denials included).
    pub fn request_error(
        &self,
        verb: &'static str,
        resource: impl Into<String>,
        err: &kube::Error,
    ) -> ApiClientError {
        ApiClientError::Request {
            server: self.server.clone(),
            verb,
            resource: resource.into(),
            reason: describe(err),
        }
    }
}

/// The configuration source: `--kubeconfig`, else `KUBECONFIG`, else in-cluster.
pub fn client_source(flag: Option<&Path>) -> ClientSource {
    match flag {
        Some(path) => ClientSource::Kubeconfig(path.to_path_buf()),
        None => match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            Some(path) => ClientSource::Kubeconfig(PathBuf::from(path)),
            None => ClientSource::InCluster,
        },
    }
}

/// A short reason for an API error: the server's status message (with its code) or the
/// transport problem (connection refused, bad certificate...).
pub fn describe(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) => {
            format!("{} ({} {})", status.message, status.code, status.reason)
        }
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

/// The HTTP status code of an API error, if the server answered.
pub fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_retries_start_at_half_a_second_and_stay_under_ten() {
        let delays: Vec<Duration> = watch_backoff().take(12).collect();
        assert_eq!(delays.len(), 12, "never gives up");
        // 0.5 s plus up to as much jitter, then doubling.
        assert!(delays[0] >= Duration::from_millis(500) && delays[0] < Duration::from_secs(1));
        assert!(delays[1] >= Duration::from_secs(1) && delays[1] < Duration::from_secs(2));
        // Capped at 5 s (before jitter) from the 5th retry on; kube's default reaches 30 s.
        for delay in &delays[4..] {
            assert!(*delay >= Duration::from_secs(5) && *delay < Duration::from_secs(10));
        }
    }

    #[tokio::test]
    async fn bad_kubeconfig_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.kubeconfig");
        std::fs::write(&path, "apiVersion: v1\nkind: Config\nclusters: [oops").unwrap();
        let err = ApiClient::connect(&ClientSource::Kubeconfig(path.clone()))
            .await
            .err()
            .expect("a broken kubeconfig is refused");
        assert!(err.to_string().contains("broken.kubeconfig"), "{err}");
        let missing = dir.path().join("missing");
        let err = ApiClient::connect(&ClientSource::Kubeconfig(missing))
            .await
            .err()
            .expect("a missing kubeconfig is refused");
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn flag_wins_over_the_environment() {
        let source = client_source(Some(Path::new("/etc/runp/kubeconfig")));
        assert!(
            matches!(source, ClientSource::Kubeconfig(p) if p == Path::new("/etc/runp/kubeconfig"))
        );
    }
}
