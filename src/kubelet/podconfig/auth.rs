//! Registry credentials for an image, as the kubelet's `credentialprovider` keyring finds them:
//! from the pod's imagePullSecrets, then the agent's configured secret (types
//! `kubernetes.io/dockerconfigjson` and `kubernetes.io/dockercfg`), then the configured
//! `user:password` fallback.
//!
//! Matching: a credential key is `host[:port][/path]` (scheme and `/v1/`, `/v2/` stripped); it
//! matches an image repository with the same number of host labels, each label a glob
//! (`*.example.com`), the same port, and a path that is a prefix of the image's. Keys are tried
//! most specific first (reverse lexical order). Docker Hub images also match credentials for
//! `index.docker.io` / `docker.io`.

use super::ObjectSource;
use super::objects::secret_entries;
use super::spec::imageref::parse_image_name;
use crate::cri::api;
use crate::kubelet::config::AgentConfig;
use base64::Engine as _;
use k8s_openapi::api::core::v1::{Pod, Secret};
use serde::Deserialize;
use std::collections::BTreeMap;

const DOCKER_HUB: &str = "index.docker.io";

#[derive(Deserialize, Default)]
struct DockerConfigEntry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

#[derive(Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, DockerConfigEntry>,
}

/// Credentials by registry key, tried most specific first.
#[derive(Default)]
struct Keyring {
    /// (key, credentials) in the order added.
    entries: Vec<(String, api::AuthConfig)>,
}

/// `https://host/v1/` → `host`; `host/path` stays.
fn credential_key(location: &str) -> Option<String> {
    let rest = location
        .strip_prefix("https://")
        .or_else(|| location.strip_prefix("http://"))
        .unwrap_or(location);
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty() {
        return None;
    }
    let path = path
        .strip_prefix("/v2/")
        .or_else(|| path.strip_prefix("/v1/"))
        .map_or(path.to_string(), |p| format!("/{p}"));
    let host = if host == "docker.io" {
        DOCKER_HUB
    } else {
        host
    };
    let path = path.trim_end_matches('/');
    Some(format!("{host}{path}"))
}

impl Keyring {
    fn add_docker_config(&mut self, auths: BTreeMap<String, DockerConfigEntry>) {
        for (location, entry) in auths {
            let Some(key) = credential_key(&location) else {
                tracing::warn!("registry credential entry {location:?} is invalid; ignored");
                continue;
            };
            let (mut username, mut password) = (entry.username, entry.password);
            if !entry.auth.is_empty() {
                // `auth` is base64("user:password") and wins, as in the kubelet.
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(entry.auth.trim())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok());
                match decoded.as_deref().and_then(|d| d.split_once(':')) {
                    Some((u, p)) => (username, password) = (u.to_string(), p.to_string()),
                    None => tracing::warn!(
                        "registry credential for {location:?} has an invalid auth field"
                    ),
                }
            }
            let server_address = key.split('/').next().unwrap_or(&key).to_string();
            let auth = api::AuthConfig {
                username,
                password,
                server_address,
                ..Default::default()
            };
            self.entries.push((key, auth));
        }
    }

    fn add_secret(&mut self, secret: &Secret) {
        let name = secret.metadata.name.as_deref().unwrap_or("");
        let entries = secret_entries(secret);
        let parsed = match secret.type_.as_deref() {
            Some("kubernetes.io/dockerconfigjson") => entries
                .get(".dockerconfigjson")
                .map(|raw| serde_json::from_slice::<DockerConfigJson>(raw).map(|c| c.auths)),
            Some("kubernetes.io/dockercfg") => entries
                .get(".dockercfg")
                .map(|raw| serde_json::from_slice::<BTreeMap<String, DockerConfigEntry>>(raw)),
            other => {
                tracing::warn!(
                    secret = name,
                    "secret of type {other:?} holds no registry credentials; ignored"
                );
                return;
            }
        };
        match parsed {
            Some(Ok(auths)) => self.add_docker_config(auths),
            Some(Err(e)) => tracing::warn!(secret = name, "invalid registry credentials: {e}"),
            None => tracing::warn!(secret = name, "registry secret lacks its data key"),
        }
    }

    /// Every credential matching `image`, most specific key first.
    fn lookup(&self, image: &str) -> Vec<api::AuthConfig> {
        let name = parse_image_name(image);
        let repo = name.repository();
        let mut keys: Vec<&str> = self.entries.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable_by(|a, b| b.cmp(a));
        keys.dedup();
        let credentials_for = |key: &str| -> Vec<api::AuthConfig> {
            let found = self.entries.iter().filter(|(k, _)| k == key);
            found.map(|(_, auth)| auth.clone()).collect()
        };
        let mut found: Vec<api::AuthConfig> = keys
            .iter()
            .filter(|k| url_matches(k, &repo))
            .flat_map(|k| credentials_for(k))
            .collect();
        if found.is_empty() && name.domain == "docker.io" {
            found.extend(credentials_for(DOCKER_HUB));
        }
        found
    }
}

fn split_host(host_and_path: &str) -> (&str, &str, &str) {
    let (host, path) = match host_and_path.find('/') {
        Some(i) => (&host_and_path[..i], &host_and_path[i..]),
        None => (host_and_path, ""),
    };
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => (h, port, path),
        _ => (host, "", path),
    }
}

/// The kubelet's `URLsMatchStr`.
fn url_matches(glob: &str, target: &str) -> bool {
    let (glob_host, glob_port, glob_path) = split_host(glob);
    let (host, port, path) = split_host(target);
    if glob_port != port || !path.starts_with(glob_path) {
        return false;
    }
    let glob_parts: Vec<&str> = glob_host.split('.').collect();
    let parts: Vec<&str> = host.split('.').collect();
    glob_parts.len() == parts.len()
        && glob_parts
            .iter()
            .zip(&parts)
            .all(|(g, p)| glob_match(g.as_bytes(), p.as_bytes()))
}

/// `filepath.Match` within one host label: `*`, `?`, `[...]` classes with ranges and `^`/`!`.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(b'*') => (0..=text.len()).any(|i| glob_match(&pattern[1..], &text[i..])),
        Some(b'?') => !text.is_empty() && glob_match(&pattern[1..], &text[1..]),
        Some(b'[') => {
            let Some(close) = pattern
                .iter()
                .skip(1)
                .position(|b| *b == b']')
                .map(|i| i + 1)
            else {
                return false; // malformed: no match, like a pattern error
            };
            let Some(c) = text.first() else { return false };
            let class = &pattern[1..close];
            let (negated, class) = match class.first() {
                Some(b'^' | b'!') => (true, &class[1..]),
                _ => (false, class),
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= (class[i]..=class[i + 2]).contains(c);
                    i += 3;
                } else {
                    hit |= class[i] == *c;
                    i += 1;
                }
            }
            hit != negated && glob_match(&pattern[close + 1..], &text[1..])
        }
        Some(p) => text.first() == Some(p) && glob_match(&pattern[1..], &text[1..]),
    }
}

fn keyring_for(pod: &Pod, objects: &dyn ObjectSource, config: &AgentConfig) -> Keyring {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut keyring = Keyring::default();
    let pull_secrets = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref());
    for reference in pull_secrets.into_iter().flatten() {
        match objects.secret(namespace, &reference.name) {
            Some(secret) => keyring.add_secret(&secret),
            None => {
                tracing::warn!(secret = %reference.name, "imagePullSecret {namespace}/{} not found", reference.name)
            }
        }
    }
    if let Some(configured) = config.registry_auth_secret.as_deref() {
        let (ns, name) = configured
            .split_once('/')
            .unwrap_or(("default", configured));
        match objects.secret(ns, name) {
            Some(secret) => keyring.add_secret(&secret),
            None => tracing::warn!("configured registry auth secret {ns}/{name} not found"),
        }
    }
    keyring
}

/// Every credential that may pull `image`, in the order to try them (pod secrets, configured
/// secret, then the configured `user:password`).
pub fn pull_auths(
    pod: &Pod,
    image: &str,
    objects: &dyn ObjectSource,
    config: &AgentConfig,
) -> Vec<api::AuthConfig> {
    let mut found = keyring_for(pod, objects, config).lookup(image);
    if let Some((username, password)) = config
        .registry_credentials
        .as_deref()
        .and_then(|c| c.split_once(':'))
    {
        found.push(api::AuthConfig {
            username: username.to_string(),
            password: password.to_string(),
            server_address: parse_image_name(image).domain,
            ..Default::default()
        });
    }
    found
}

/// The first credential for `image` (see [`pull_auths`]), if any.
pub fn pull_auth(
    pod: &Pod,
    image: &str,
    objects: &dyn ObjectSource,
    config: &AgentConfig,
) -> Option<api::AuthConfig> {
    pull_auths(pod, image, objects, config).into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::podconfig::test_objects::Objects;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn docker_secret(name: &str, type_: &str, key: &str, json: serde_json::Value) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            type_: Some(type_.into()),
            data: Some([(key.to_string(), ByteString(json.to_string().into_bytes()))].into()),
            ..Default::default()
        }
    }

    fn setup() -> (Objects, AgentConfig) {
        let objects = Objects::default();
        objects.0.insert_secret(docker_secret(
            "pod-creds",
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            serde_json::json!({"auths": {
                "registry.example.com/team": {"username": "team", "password": "t"},
                "registry.example.com": {"auth": b64("general:g")},
                "*.corp.example:5000": {"username": "corp", "password": "c"},
                "https://index.docker.io/v1/": {"username": "hub", "password": "h"}
            }}),
        ));
        objects.0.insert_secret(docker_secret(
            "global",
            "kubernetes.io/dockercfg",
            ".dockercfg",
            serde_json::json!({"localhost:5000": {"username": "local", "password": "l"},
                               "docker.io": {"username": "hub2", "password": "h2"}}),
        ));
        let mut config = AgentConfig::with_root("/tmp/x");
        config.registry_auth_secret = Some("default/global".into());
        config.registry_credentials = Some("fallback:f".into());
        (objects, config)
    }

    fn pod(pull_secrets: &[&str]) -> Pod {
        let secrets: Vec<_> = pull_secrets
            .iter()
            .map(|n| serde_json::json!({"name": n}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"imagePullSecrets": secrets, "containers": [{"name": "c", "image": "x"}]}
        }))
        .unwrap()
    }

    #[test]
    fn lookup_table() {
        let (objects, config) = setup();
        let with_secret = pod(&["pod-creds"]);
        let cases: &[(&str, &[&str])] = &[
            (
                "registry.example.com/team/app:1",
                &["team", "general", "fallback"],
            ),
            ("registry.example.com/other/app", &["general", "fallback"]),
            (
                "registry.example.com/teamwork/app",
                &["team", "general", "fallback"],
            ),
            ("a.corp.example:5000/x", &["corp", "fallback"]),
            ("a.corp.example/x", &["fallback"]),
            ("a.b.corp.example:5000/x", &["fallback"]),
            ("busybox", &["hub", "hub2", "fallback"]),
            (
                "docker.io/library/busybox:1.36",
                &["hub", "hub2", "fallback"],
            ),
            ("index.docker.io/user/app", &["hub", "hub2", "fallback"]),
            ("localhost:5000/app", &["local", "fallback"]),
            ("quay.io/app", &["fallback"]),
        ];
        for (image, expected) in cases {
            let got: Vec<String> = pull_auths(&with_secret, image, &objects, &config)
                .into_iter()
                .map(|a| a.username)
                .collect();
            assert_eq!(got, *expected, "{image}");
        }
        let first = pull_auth(&with_secret, "registry.example.com/x", &objects, &config).unwrap();
        assert_eq!(
            (
                first.username.as_str(),
                first.password.as_str(),
                first.server_address.as_str()
            ),
            ("general", "g", "registry.example.com")
        );
        // Without the pod's secret only the configured ones apply.
        let got: Vec<String> = pull_auths(
            &pod(&["missing"]),
            "registry.example.com/team/app",
            &objects,
            &config,
        )
        .into_iter()
        .map(|a| a.username)
        .collect();
        assert_eq!(got, ["fallback"]);
        let bare = AgentConfig::with_root("/tmp/x");
        assert!(pull_auth(&pod(&[]), "busybox", &objects, &bare).is_none());
    }

    #[test]
    fn keys_and_globs() {
        assert_eq!(
            credential_key("https://index.docker.io/v1/").as_deref(),
            Some("index.docker.io")
        );
        assert_eq!(
            credential_key("http://r.io:5000/v2/ns/").as_deref(),
            Some("r.io:5000/ns")
        );
        assert_eq!(
            credential_key("docker.io").as_deref(),
            Some("index.docker.io")
        );
        assert_eq!(credential_key("r.io/a/b").as_deref(), Some("r.io/a/b"));
        assert_eq!(credential_key("https://"), None);
        for (pattern, text, ok) in [
            ("*", "abc", true),
            ("a*c", "abbbc", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("[a-c]x", "bx", true),
            ("[^a-c]x", "bx", false),
            ("[!a-c]x", "dx", true),
            ("[abc", "a", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ] {
            assert_eq!(
                glob_match(pattern.as_bytes(), text.as_bytes()),
                ok,
                "{pattern} {text}"
            );
        }
    }

    #[test]
    fn bad_secrets_are_ignored() {
        let objects = Objects::default();
        objects.0.insert_secret(docker_secret(
            "opaque",
            "Opaque",
            ".dockerconfigjson",
            serde_json::json!({}),
        ));
        objects.0.insert_secret(docker_secret(
            "garbage",
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            serde_json::json!("x"),
        ));
        let config = AgentConfig::with_root("/tmp/x");
        assert!(pull_auth(&pod(&["opaque", "garbage"]), "busybox", &objects, &config).is_none());
    }
}
