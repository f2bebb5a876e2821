//! Where a registry is reached: `docker.io` is `registry-1.docker.io`; plain http only for
//! hosts given with `--insecure-registry HOST[:PORT]` (a bare HOST covers every port),
//! everything else over https.

use super::error::RegistryError;
use reqwest::Url;

pub const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// `registry/path` (a normalized repository) → (`registry`, `path`).
pub fn split_repository(repository: &str) -> (&str, &str) {
    repository
        .split_once('/')
        .unwrap_or((DOCKER_HUB, repository))
}

/// Checks a `--insecure-registry` value: a host with an optional port, nothing else.
pub fn validate_insecure(entry: &str) -> Result<(), String> {
    if entry.contains("://") || entry.contains('/') || entry.is_empty() {
        return Err(format!(
            "{entry:?}: expected HOST or HOST:PORT (no scheme, no path)"
        ));
    }
    let url = Url::parse(&format!("http://{entry}/")).map_err(|e| format!("{entry:?}: {e}"))?;
    if url.host_str().is_none() || !url.username().is_empty() {
        return Err(format!("{entry:?}: expected HOST or HOST:PORT"));
    }
    Ok(())
}

/// `host[:port]` as written in references (`[::1]:5000` keeps its brackets).
fn host_and_port(host: &str) -> (&str, Option<&str>) {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((_, tail)) => (&host[..rest.len() - tail.len() + 1], tail.strip_prefix(':')),
            None => (host, None),
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => (name, Some(port)),
        _ => (host, None),
    }
}

/// True when `host` (`name[:port]`) was configured insecure.
pub fn is_insecure(host: &str, insecure: &[String]) -> bool {
    let (name, port) = host_and_port(host);
    insecure.iter().any(|entry| {
        let (entry_name, entry_port) = host_and_port(entry);
        entry_name.eq_ignore_ascii_case(name)
            && match entry_port {
                Some(p) => Some(p) == port,
                None => true,
            }
    })
}

/// `host[:port]` of a URL, as `is_insecure` wants it.
pub fn url_host(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// A URL without its query (token requests carry scopes; never credentials, but keep logs
/// short) for messages.
pub fn redact(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    let _ = shown.set_password(None);
    shown.to_string()
}

/// The `/v2/` base URL of a registry.
pub fn base_url(registry: &str, insecure: &[String]) -> Result<Url, RegistryError> {
    let api = if registry == DOCKER_HUB {
        DOCKER_HUB_API
    } else {
        registry
    };
    let scheme = if is_insecure(registry, insecure) {
        "http"
    } else {
        "https"
    };
    Url::parse(&format!("{scheme}://{api}/v2/")).map_err(|e| RegistryError::InvalidReference {
        reference: registry.to_string(),
        reason: format!("not a registry host: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_insecure_hosts() {
        let insecure: Vec<String> = ["127.0.0.1:5000", "registry.local", "[::1]:5001"]
            .map(String::from)
            .to_vec();
        let cases = [
            ("127.0.0.1:5000", true),
            ("127.0.0.1:5001", false),
            ("127.0.0.1", false),
            ("registry.local", true),
            ("registry.local:443", true),
            ("REGISTRY.local:8080", true),
            ("other.local", false),
            ("[::1]:5001", true),
            ("[::1]:5000", false),
            ("docker.io", false),
        ];
        for (host, want) in cases {
            assert_eq!(is_insecure(host, &insecure), want, "{host}");
        }
    }

    #[test]
    fn base_urls() {
        let insecure = vec!["localhost:5000".to_string()];
        let cases = [
            ("docker.io", "https://registry-1.docker.io/v2/"),
            ("quay.io", "https://quay.io/v2/"),
            ("localhost:5000", "http://localhost:5000/v2/"),
            ("localhost:5001", "https://localhost:5001/v2/"),
        ];
        for (registry, want) in cases {
            assert_eq!(base_url(registry, &insecure).unwrap().as_str(), want);
        }
        assert_eq!(
            split_repository("docker.io/library/busybox"),
            ("docker.io", "library/busybox")
        );
        assert_eq!(
            split_repository("127.0.0.1:5000/a/b"),
            ("127.0.0.1:5000", "a/b")
        );
    }

    #[test]
    fn validates_insecure_entries() {
        for ok in [
            "127.0.0.1:5000",
            "host",
            "[::1]:5000",
            "reg.example.com:443",
        ] {
            assert!(validate_insecure(ok).is_ok(), "{ok}");
        }
        for bad in ["http://host", "host/path", "", "user@host", "host:port"] {
            assert!(validate_insecure(bad).is_err(), "{bad}");
        }
    }
}
