//! Registry hosts as containerd configures them (`--registry-config-dir DIR`, containerd's
//! `hosts.toml` layout), so mirrors and loopback registries can serve any name:
//!
//! ```toml
//! # DIR/registry.k8s.io/hosts.toml (DIR/_default/hosts.toml: every registry without its own)
//! server = "https://registry.k8s.io"          # optional: the registry itself by default
//! [host."http://127.0.0.1:5000"]               # tried first, in file order
//!   capabilities = ["pull", "resolve"]
//! [host."https://mirror.example:8443/v2/k8s"]
//!   ca = ["/etc/certs/mirror-ca.pem"]          # or one path; relative to this file's dir
//!   client = [["client.crt", "client.key"]]    # or "client.pem" (cert and key in one file)
//!   skip_verify = false
//!   override_path = true                       # the path is the API root, no /v2 added
//! ```
//!
//! The file is read at each pull (edits apply at once), parsed with `toml` into structs that
//! reject unknown fields; [`endpoints`] is the pure ordering: hosts, then the server.

use super::hosts;
use reqwest::Url;
use serde::Deserialize;
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "hosts.toml";
/// The directory whose hosts.toml applies to registries without their own.
pub const DEFAULT_DIR: &str = "_default";

/// What a host may be asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub pull: bool,
    pub resolve: bool,
    pub push: bool,
}

impl Capabilities {
    const ALL: Capabilities = Capabilities {
        pull: true,
        resolve: true,
        push: true,
    };
    /// A `[host]` entry without `capabilities` (containerd's default).
    const PULL_RESOLVE: Capabilities = Capabilities {
        pull: true,
        resolve: true,
        push: false,
    };
}

/// How to reach a host over TLS; the default is runp's ordinary verifying client.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TlsSettings {
    pub skip_verify: bool,
    /// Extra CA certificate files (PEM), trusted besides the system roots.
    pub ca: Vec<PathBuf>,
    /// Client certificates (PEM): a certificate file and its key file, or one file holding both.
    pub client: Vec<(PathBuf, Option<PathBuf>)>,
}

/// One place a registry's content can be fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host[:port]`: for messages, auth caches and the insecure rule.
    pub host: String,
    /// The distribution API root, ending in `/` (`http://127.0.0.1:5000/v2/`).
    pub base: Url,
    pub capabilities: Capabilities,
    pub tls: TlsSettings,
    /// Named in a hosts.toml with `http://`: plain http is allowed for this host.
    pub plain_http: bool,
}

/// A parsed hosts.toml: its `[host]` entries in file order and the server's settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostsFile {
    /// Where it was read from (for messages).
    pub file: PathBuf,
    pub server: Option<String>,
    pub server_settings: HostSettings,
    pub hosts: Vec<(String, HostSettings)>,
}

/// The settings of a `[host]` entry (or of the server, at the top of the file).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostSettings {
    pub capabilities: Option<Capabilities>,
    pub tls: TlsSettings,
    pub override_path: bool,
}

/// Why a hosts.toml cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HostsConfigError {
    #[error("registry config {file}: {message}")]
    Invalid { file: PathBuf, message: String },
    #[error("registry config {file}: cannot read it: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    capabilities: Option<Vec<String>>,
    skip_verify: Option<bool>,
    ca: Option<OneOrMany>,
    client: Option<RawClient>,
    override_path: Option<bool>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawClient {
    One(String),
    Many(Vec<OneOrMany>),
}

/// The directories whose hosts.toml may configure `registry`, most specific first: containerd
/// also looks for `host_port_` (its spelling where `:` cannot be in a file name).
pub fn candidate_dirs(dir: &Path, registry: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some((host, port)) = registry.rsplit_once(':')
        && !host.is_empty()
        && !port.contains(']')
    {
        out.push(dir.join(format!("{host}_{port}_")));
    }
    out.push(dir.join(registry));
    out.push(dir.join(DEFAULT_DIR));
    out
}

/// The hosts.toml that applies to `registry` under `dir`, if any.
pub fn load(dir: &Path, registry: &str) -> Result<Option<HostsFile>, HostsConfigError> {
    // A reference's registry never holds '/', but stay inside DIR whatever it holds.
    if registry.contains('/') || registry.starts_with('.') {
        return Ok(None);
    }
    for candidate in candidate_dirs(dir, registry) {
        let file = candidate.join(FILE_NAME);
        match std::fs::read_to_string(&file) {
            Ok(text) => return parse(&file, &text).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(HostsConfigError::Read { file, source }),
        }
    }
    Ok(None)
}

/// Parses the text of `file` (relative certificate paths are taken from its directory).
pub fn parse(file: &Path, text: &str) -> Result<HostsFile, HostsConfigError> {
    let invalid = |message: String| HostsConfigError::Invalid {
        file: file.to_owned(),
        message,
    };
    let base = file.parent().unwrap_or(Path::new("/"));
    let mut table: toml::Table = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let server = match table.remove("server") {
        None => None,
        Some(toml::Value::String(s)) => Some(s),
        Some(other) => {
            let kind = other.type_str();
            return Err(invalid(format!("server must be a string, not {kind}")));
        }
    };
    let hosts_table = match table.remove("host") {
        None => toml::Table::new(),
        Some(toml::Value::Table(t)) => t,
        Some(_) => {
            return Err(invalid(
                "host must be a table of [host.\"URL\"] entries".into(),
            ));
        }
    };
    let server_settings = settings(toml::Value::Table(table), base)
        .map_err(|e| invalid(format!("top level: {e}")))?;
    let mut hosts = Vec::new();
    for (url, value) in hosts_table {
        let entry = settings(value, base).map_err(|e| invalid(format!("host {url:?}: {e}")))?;
        hosts.push((url, entry));
    }
    Ok(HostsFile {
        file: file.to_owned(),
        server,
        server_settings,
        hosts,
    })
}

fn settings(value: toml::Value, base: &Path) -> Result<HostSettings, String> {
    let raw = RawSettings::deserialize(value).map_err(|e| e.to_string())?;
    let path = |p: String| base.join(p); // an absolute p replaces base
    let capabilities = match raw.capabilities {
        None => None,
        Some(names) => {
            let mut caps = Capabilities {
                pull: false,
                resolve: false,
                push: false,
            };
            for name in names {
                match name.as_str() {
                    "pull" => caps.pull = true,
                    "resolve" => caps.resolve = true,
                    "push" => caps.push = true,
                    other => {
                        return Err(format!(
                            "unknown capability {other:?} (pull, resolve, push)"
                        ));
                    }
                }
            }
            Some(caps)
        }
    };
    let ca = match raw.ca {
        None => Vec::new(),
        Some(OneOrMany::One(p)) => vec![path(p)],
        Some(OneOrMany::Many(ps)) => ps.into_iter().map(path).collect(),
    };
    let mut client = Vec::new();
    match raw.client {
        None => {}
        Some(RawClient::One(cert)) => client.push((path(cert), None)),
        Some(RawClient::Many(items)) => {
            for item in items {
                match item {
                    OneOrMany::One(cert) => client.push((path(cert), None)),
                    OneOrMany::Many(pair) => match <[String; 2]>::try_from(pair) {
                        Ok([cert, key]) if key.is_empty() => client.push((path(cert), None)),
                        Ok([cert, key]) => client.push((path(cert), Some(path(key)))),
                        Err(_) => return Err("client pairs are [\"cert\", \"key\"]".into()),
                    },
                }
            }
        }
    }
    Ok(HostSettings {
        capabilities,
        tls: TlsSettings {
            skip_verify: raw.skip_verify.unwrap_or(false),
            ca,
            client,
        },
        override_path: raw.override_path.unwrap_or(false),
    })
}

/// Where to fetch `registry`'s content, in the order to try: the file's hosts, then its
/// server (the registry itself, over https unless `--insecure-registry` names it, when the
/// file names none). Without a file: the registry alone.
pub fn endpoints(
    registry: &str,
    file: Option<&HostsFile>,
    insecure: &[String],
) -> Result<Vec<Endpoint>, HostsConfigError> {
    ordered_endpoints(registry, file, insecure).map_err(|message| HostsConfigError::Invalid {
        file: file.map(|f| f.file.clone()).unwrap_or_default(),
        message,
    })
}

fn ordered_endpoints(
    registry: &str,
    file: Option<&HostsFile>,
    insecure: &[String],
) -> Result<Vec<Endpoint>, String> {
    let default = HostsFile::default();
    let file = file.unwrap_or(&default);
    let mut out = Vec::new();
    for (url, entry) in &file.hosts {
        let caps = entry.capabilities.unwrap_or(Capabilities::PULL_RESOLVE);
        out.push(endpoint(url, entry, caps).map_err(|e| format!("host {url:?}: {e}"))?);
    }
    let server_caps = file
        .server_settings
        .capabilities
        .unwrap_or(Capabilities::ALL);
    match &file.server {
        Some(url) => out.push(
            endpoint(url, &file.server_settings, server_caps)
                .map_err(|e| format!("server {url:?}: {e}"))?,
        ),
        None => {
            let base = hosts::base_url(registry, insecure).map_err(|e| e.to_string())?;
            out.push(Endpoint {
                host: registry.to_string(),
                base,
                capabilities: server_caps,
                tls: file.server_settings.tls.clone(),
                plain_http: false,
            });
        }
    }
    Ok(out)
}

/// One host from its URL (`https://` when it names no scheme, as containerd).
fn endpoint(url: &str, entry: &HostSettings, caps: Capabilities) -> Result<Endpoint, String> {
    let text = if url.contains("://") {
        url.to_string()
    } else {
        format!("https://{url}")
    };
    let mut parsed = Url::parse(&text).map_err(|e| e.to_string())?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("only http:// and https:// hosts are supported".into());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() || !parsed.username().is_empty() {
        return Err("expected scheme://host[:port][/path] and nothing else".into());
    }
    let host = hosts::url_host(&parsed);
    if host.is_empty() {
        return Err("no host".into());
    }
    let path = parsed.path().trim_end_matches('/').to_string();
    let path = if entry.override_path || path.ends_with("/v2") {
        path
    } else {
        format!("{path}/v2")
    };
    parsed.set_path(&format!("{path}/"));
    Ok(Endpoint {
        host,
        plain_http: parsed.scheme() == "http",
        base: parsed,
        capabilities: caps,
        tls: entry.tls.clone(),
    })
}

#[cfg(test)]
#[path = "hosts_config_tests.rs"]
mod tests;
