//! Pulling images from OCI/Docker registries (distribution API v2) into the store.
//!
//! - [`hosts`]: which URL a registry is reached at (https, or plain http for hosts configured
//!   insecure), [`credentials`] and [`auth`]: CRI credentials, Basic and Bearer-token auth.
//! - [`transport`]: authenticated requests and error statuses, [`manifest`]: tag or digest to
//!   this host's manifest through indexes, with digest checks.
//! - [`download`]: blobs streamed into the ingest directory (resumable) and verified, and
//!   [`pull`]: the whole image, layers fetched in parallel (bounded) and unpacked once,
//!   committed like an import.
//! - [`single_flight`]: concurrent pulls of one image (with the same credentials) share one
//!   run.
//!
//! Hand-written on reqwest rather than with the oci-client crate: that crate builds its own
//! reqwest client (so TLS would need a process-wide rustls provider or the aws-lc C build),
//! has no identity-token (refresh token) flow, and added 30 crates against 15 here.

pub mod auth;
pub mod credentials;
pub mod download;
pub mod error;
pub mod hosts;
pub mod hosts_config;
pub mod manifest;
pub mod pull;
pub mod single_flight;
pub mod transport;

pub use credentials::{Credentials, PullCredentials};
pub use error::RegistryError;

use crate::image::digest::Digest;
use crate::image::records::ImageRecord;
use auth::AuthCache;
use hosts_config::{Endpoint, TlsSettings};
use single_flight::SingleFlight;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct RegistryOptions {
    /// `HOST[:PORT]` of registries reached over plain http (`--insecure-registry`).
    pub insecure: Vec<String>,
    /// Layers downloaded at once per pull.
    pub max_parallel_downloads: usize,
    /// Attempts per blob, each resuming where the previous one stopped.
    pub blob_attempts: u32,
    /// containerd's hosts.toml directory (`--registry-config-dir`): mirrors and TLS per registry.
    pub config_dir: Option<PathBuf>,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            insecure: Vec::new(),
            max_parallel_downloads: 3,
            blob_attempts: 4,
            config_dir: None,
        }
    }
}

impl RegistryOptions {
    /// Checks the `--insecure-registry` values.
    pub fn validate(&self) -> Result<(), String> {
        self.insecure
            .iter()
            .try_for_each(|entry| hosts::validate_insecure(entry))
    }
}

/// Reported while pulling, for progress display.
#[derive(Clone, Debug)]
pub enum PullProgress {
    /// The manifest is known: its layer blobs (bottom first) and their sizes.
    Resolved {
        manifest: Digest,
        layers: Vec<(Digest, u64)>,
    },
    Layer {
        digest: Digest,
        stage: LayerStage,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerStage {
    /// The store already has this blob: nothing to download.
    Present,
    Downloading {
        done: u64,
        total: u64,
    },
    Unpacking,
    Ready,
}

pub type ProgressFn = Arc<dyn Fn(&PullProgress) + Send + Sync>;

type Flight = Result<ImageRecord, Arc<RegistryError>>;

/// The registry side of a store: one HTTP client (built on first use), the auth caches, and
/// the pulls under way.
pub struct Registry {
    options: RegistryOptions,
    insecure: Arc<Vec<String>>,
    http: OnceLock<Result<reqwest::Client, String>>,
    /// Clients for hosts.toml hosts with their own TLS settings or plain http.
    host_clients: Mutex<HashMap<(TlsSettings, Option<String>), reqwest::Client>>,
    auth: Arc<AuthCache>,
    flights: SingleFlight<Flight>,
}

impl Registry {
    pub fn new(options: RegistryOptions) -> Registry {
        Registry {
            insecure: Arc::new(options.insecure.clone()),
            options,
            http: OnceLock::new(),
            host_clients: Mutex::default(),
            auth: Arc::default(),
            flights: SingleFlight::default(),
        }
    }

    pub fn options(&self) -> &RegistryOptions {
        &self.options
    }

    fn client(&self) -> Result<reqwest::Client, RegistryError> {
        self.http
            .get_or_init(|| build_client(self.insecure.clone(), &TlsSettings::default()))
            .clone()
            .map_err(RegistryError::Client)
    }

    /// The insecure hosts for requests to `endpoint`: a hosts.toml `http://` host is one.
    fn insecure_for(&self, endpoint: &Endpoint) -> Arc<Vec<String>> {
        if endpoint.plain_http {
            let mut list = self.insecure.as_ref().clone();
            list.push(endpoint.host.clone());
            Arc::new(list)
        } else {
            self.insecure.clone()
        }
    }

    /// The HTTP client for `endpoint`: the shared one unless it has TLS settings of its own or
    /// plain http (clients are kept per distinct setting; files are read when one is built).
    fn client_for(&self, endpoint: &Endpoint) -> Result<reqwest::Client, RegistryError> {
        if endpoint.tls == TlsSettings::default() && !endpoint.plain_http {
            return self.client();
        }
        let key = (
            endpoint.tls.clone(),
            endpoint.plain_http.then(|| endpoint.host.clone()),
        );
        let mut clients = self
            .host_clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = build_client(self.insecure_for(endpoint), &endpoint.tls)
            .map_err(|e| RegistryError::Client(format!("{}: {e}", endpoint.host)))?;
        clients.insert(key, client.clone());
        Ok(client)
    }
}

fn build_client(
    insecure: Arc<Vec<String>>,
    settings: &TlsSettings,
) -> Result<reqwest::Client, String> {
    let tls = if *settings == TlsSettings::default() {
        crate::util::tls::client_config().map_err(|e| format!("TLS setup: {e}"))?
    } else {
        let client = settings
            .client
            .first()
            .map(|(cert, key)| (cert.as_path(), key.as_deref()));
        crate::util::tls::client_config_for(&settings.ca, client, settings.skip_verify)
            .map_err(|e| format!("TLS setup: {e}"))?
    };
    // Blob downloads are often redirected to storage hosts; never down to plain http unless
    // that host is insecure by configuration.
    let redirects = reqwest::redirect::Policy::custom(move |attempt| {
        let url = attempt.url();
        let plain =
            url.scheme() != "https" && !hosts::is_insecure(&hosts::url_host(url), &insecure);
        let shown = hosts::redact(url);
        if attempt.previous().len() >= 10 {
            attempt.error("too many redirects")
        } else if plain {
            attempt.error(format!(
                "refusing a redirect to {shown} (not https, not an insecure registry)"
            ))
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(redirects)
        .user_agent(concat!("runp/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        .read_timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| format!("building the HTTP client: {}", transport::describe(&e)))
}
