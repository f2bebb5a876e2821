//! Registry credentials from a CRI `AuthConfig` (or `--creds user:pass`). Secrets never reach
//! logs: `Debug` redacts them, and pulls are told apart by a hash of them.

use super::error::RegistryError;
use crate::cri::api;
use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use std::fmt;

#[derive(Clone, PartialEq, Eq, Default)]
pub enum Credentials {
    #[default]
    Anonymous,
    /// Sent as HTTP basic auth, or to a token server to get a bearer token.
    Basic { username: String, password: String },
    /// An OAuth2 refresh token, exchanged at the token server for an access token.
    IdentityToken { username: String, token: String },
    /// A bearer token sent to the registry as is.
    RegistryToken(String),
}

impl Credentials {
    /// From the CRI request's `AuthConfig`. A registry token wins, then an identity token, then
    /// username/password, then the docker-config style `auth` (base64 of `user:pass`).
    pub fn from_cri(auth: Option<&api::AuthConfig>) -> Result<Credentials, RegistryError> {
        let Some(auth) = auth else {
            return Ok(Credentials::Anonymous);
        };
        if !auth.registry_token.is_empty() {
            return Ok(Credentials::RegistryToken(auth.registry_token.clone()));
        }
        if !auth.identity_token.is_empty() {
            return Ok(Credentials::IdentityToken {
                username: auth.username.clone(),
                token: auth.identity_token.clone(),
            });
        }
        if !auth.username.is_empty() || !auth.password.is_empty() {
            return Ok(Credentials::Basic {
                username: auth.username.clone(),
                password: auth.password.clone(),
            });
        }
        if !auth.auth.is_empty() {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.auth.trim())
                .map_err(|e| {
                    RegistryError::InvalidCredentials(format!("auth is not base64: {e}"))
                })?;
            let text = String::from_utf8(decoded)
                .map_err(|_| RegistryError::InvalidCredentials("auth is not UTF-8".into()))?;
            return Credentials::from_user_pass(&text);
        }
        Ok(Credentials::Anonymous)
    }

    /// `user:pass` (the password may contain ':').
    pub fn from_user_pass(text: &str) -> Result<Credentials, RegistryError> {
        match text.split_once(':') {
            Some((username, password)) if !username.is_empty() => Ok(Credentials::Basic {
                username: username.to_string(),
                password: password.to_string(),
            }),
            _ => Err(RegistryError::InvalidCredentials(
                "expected USERNAME:PASSWORD".into(),
            )),
        }
    }

    /// A stable hash of the credentials: pulls with different credentials are never merged
    /// and never share cached tokens.
    pub fn fingerprint(&self) -> String {
        let mut hash = Sha256::new();
        let parts: Vec<&str> = match self {
            Credentials::Anonymous => vec!["anonymous"],
            Credentials::Basic { username, password } => vec!["basic", username, password],
            Credentials::IdentityToken { username, token } => vec!["identity", username, token],
            Credentials::RegistryToken(token) => vec!["registry", token],
        };
        for part in parts {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
        hex::encode(hash.finalize())
    }

    /// The `Authorization` value for HTTP basic auth, when these are basic credentials.
    pub fn basic_header(&self) -> Option<String> {
        match self {
            Credentials::Basic { username, password } => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
            )),
            _ => None,
        }
    }
}

/// Credentials with the registry they were given for (the CRI AuthConfig's server_address).
/// As containerd does, they go only to that host: a mirror or any other host of the pull is
/// asked anonymously, so a secret meant for one registry never reaches another. Without a
/// server address they go to every host of the pull.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PullCredentials {
    credentials: Credentials,
    /// `host[:port]`, lowercase.
    server: Option<String>,
}

/// The names Docker Hub's credentials are filed under, and the host its API is reached at.
const DOCKER_HUB_HOSTS: [&str; 3] = ["docker.io", "index.docker.io", "registry-1.docker.io"];

impl PullCredentials {
    pub fn from_cri(auth: Option<&api::AuthConfig>) -> Result<PullCredentials, RegistryError> {
        Ok(PullCredentials {
            credentials: Credentials::from_cri(auth)?,
            server: auth
                .map(|a| server_host(&a.server_address))
                .filter(|host| !host.is_empty()),
        })
    }

    /// Credentials for every host of the pull (`runp image pull --creds`).
    pub fn any_host(credentials: Credentials) -> PullCredentials {
        PullCredentials {
            credentials,
            server: None,
        }
    }

    /// What to send to `host` (`host[:port]`).
    pub fn for_host(&self, host: &str) -> Credentials {
        match &self.server {
            Some(server) if !same_registry(server, &host.to_ascii_lowercase()) => {
                Credentials::Anonymous
            }
            _ => self.credentials.clone(),
        }
    }

    /// Pulls are merged only when they would send the same thing to every host.
    pub fn fingerprint(&self) -> String {
        match &self.server {
            None => self.credentials.fingerprint(),
            Some(server) => format!("{}@{server}", self.credentials.fingerprint()),
        }
    }
}

/// `host[:port]` of a server address: a bare host, or a URL (`https://index.docker.io/v1/`).
fn server_host(address: &str) -> String {
    let address = address.trim();
    let rest = address.split_once("://").map_or(address, |(_, rest)| rest);
    rest.split('/').next().unwrap_or("").to_ascii_lowercase()
}

fn same_registry(server: &str, host: &str) -> bool {
    server == host || (DOCKER_HUB_HOSTS.contains(&server) && DOCKER_HUB_HOSTS.contains(&host))
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Anonymous => write!(f, "Anonymous"),
            Credentials::Basic { username, .. } => write!(f, "Basic({username:?}, <redacted>)"),
            Credentials::IdentityToken { username, .. } => {
                write!(f, "IdentityToken({username:?}, <redacted>)")
            }
            Credentials::RegistryToken(_) => write!(f, "RegistryToken(<redacted>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(u: &str, p: &str) -> Credentials {
        Credentials::Basic {
            username: u.into(),
            password: p.into(),
        }
    }

    #[test]
    fn reads_every_cri_auth_form() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let cases: Vec<(api::AuthConfig, Result<Credentials, ()>)> = vec![
            (api::AuthConfig::default(), Ok(Credentials::Anonymous)),
            (
                api::AuthConfig {
                    username: "u".into(),
                    password: "p".into(),
                    ..Default::default()
                },
                Ok(basic("u", "p")),
            ),
            (
                api::AuthConfig {
                    auth: b64("u:p:with:colons"),
                    ..Default::default()
                },
                Ok(basic("u", "p:with:colons")),
            ),
            (
                api::AuthConfig {
                    auth: "***".into(),
                    ..Default::default()
                },
                Err(()),
            ),
            (
                api::AuthConfig {
                    auth: b64("no-colon"),
                    ..Default::default()
                },
                Err(()),
            ),
            (
                api::AuthConfig {
                    username: "u".into(),
                    identity_token: "refresh".into(),
                    ..Default::default()
                },
                Ok(Credentials::IdentityToken {
                    username: "u".into(),
                    token: "refresh".into(),
                }),
            ),
            (
                api::AuthConfig {
                    username: "u".into(),
                    password: "p".into(),
                    registry_token: "bearer".into(),
                    ..Default::default()
                },
                Ok(Credentials::RegistryToken("bearer".into())),
            ),
        ];
        for (auth, want) in cases {
            let got = Credentials::from_cri(Some(&auth)).map_err(|_| ());
            assert_eq!(got, want, "{auth:?}");
        }
        assert_eq!(Credentials::from_cri(None).unwrap(), Credentials::Anonymous);
    }

    #[test]
    fn credentials_go_only_to_the_server_they_name() {
        let with_server = |server: &str| {
            PullCredentials::from_cri(Some(&api::AuthConfig {
                username: "u".into(),
                password: "p".into(),
                server_address: server.into(),
                ..Default::default()
            }))
            .unwrap()
        };
        let cases: &[(&str, &str, bool)] = &[
            ("", "anything.example:5000", true),
            ("  ", "mirror.example", true),
            ("registry.example.com", "registry.example.com", true),
            ("Registry.Example.com", "registry.example.COM", true),
            ("registry.example.com", "mirror.example.com", false),
            ("registry.example.com", "registry.example.com:5000", false),
            ("http://127.0.0.1:5000", "127.0.0.1:5000", true),
            ("https://127.0.0.1:5000/v2/", "127.0.0.1:5000", true),
            ("127.0.0.1:5000", "127.0.0.1:5001", false),
            ("https://index.docker.io/v1/", "registry-1.docker.io", true),
            ("docker.io", "registry-1.docker.io", true),
            ("docker.io", "mirror.gcr.io", false),
        ];
        for (server, host, sent) in cases {
            let got = with_server(server).for_host(host);
            let want = if *sent {
                basic("u", "p")
            } else {
                Credentials::Anonymous
            };
            assert_eq!(got, want, "server {server:?}, host {host:?}");
        }
        assert_eq!(
            PullCredentials::any_host(basic("u", "p")).for_host("x"),
            basic("u", "p")
        );
        assert_eq!(
            PullCredentials::from_cri(None).unwrap().for_host("x"),
            Credentials::Anonymous
        );
        assert_ne!(
            with_server("a.example").fingerprint(),
            with_server("b.example").fingerprint()
        );
    }

    #[test]
    fn fingerprints_differ_and_debug_redacts() {
        let a = basic("u", "p1");
        let b = basic("u", "p2");
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint(), basic("u", "p1").fingerprint());
        // Field boundaries count: ("ab","c") is not ("a","bc").
        assert_ne!(
            basic("ab", "c").fingerprint(),
            basic("a", "bc").fingerprint()
        );
        assert!(!format!("{a:?}").contains("p1"));
        assert_eq!(a.basic_header().unwrap(), "Basic dTpwMQ==");
    }
}
