//! Registry authentication: `WWW-Authenticate` challenges (RFC 7235; Bearer per the docker
//! token spec with realm/service/scope, or Basic), fetching bearer tokens from the realm, and
//! the caches of both, keyed by registry, scope and the credentials' fingerprint.

use super::credentials::Credentials;
use super::error::RegistryError;
use super::hosts;
use reqwest::Url;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// The challenges of `WWW-Authenticate` header values; unknown schemes are skipped.
pub fn parse_challenges<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Challenge> {
    let mut out = Vec::new();
    for value in values {
        for (scheme, params) in split_challenges(value) {
            let get = |key: &str| {
                params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(key))
                    .map(|(_, v)| v.clone())
            };
            if scheme.eq_ignore_ascii_case("basic") {
                out.push(Challenge::Basic);
            } else if scheme.eq_ignore_ascii_case("bearer")
                && let Some(realm) = get("realm")
            {
                out.push(Challenge::Bearer {
                    realm,
                    service: get("service"),
                    scope: get("scope"),
                });
            }
        }
    }
    out
}

type Params = Vec<(String, String)>;

/// `Scheme k=v, k="quoted, value", Other k=v` → [(Scheme, params), (Other, params)].
fn split_challenges(value: &str) -> Vec<(String, Params)> {
    let chars: Vec<char> = value.chars().collect();
    let mut i = 0;
    let mut out: Vec<(String, Params)> = Vec::new();
    let skip = |i: &mut usize, what: &dyn Fn(char) -> bool| {
        while *i < chars.len() && what(chars[*i]) {
            *i += 1;
        }
    };
    let token_char = |c: char| !c.is_whitespace() && c != ',' && c != '=' && c != '"';
    loop {
        skip(&mut i, &|c| c.is_whitespace() || c == ',');
        if i >= chars.len() {
            break;
        }
        let start = i;
        skip(&mut i, &token_char);
        let word: String = chars[start..i].iter().collect();
        let after_ws = {
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            j
        };
        if after_ws < chars.len() && chars[after_ws] == '=' && !out.is_empty() {
            // A parameter of the current challenge.
            i = after_ws + 1;
            skip(&mut i, &|c| c.is_whitespace());
            let mut val = String::new();
            if i < chars.len() && chars[i] == '"' {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    val.push(chars[i]);
                    i += 1;
                }
                i += 1; // closing quote
            } else {
                let s = i;
                skip(&mut i, &|c| !c.is_whitespace() && c != ',');
                val = chars[s..i].iter().collect();
            }
            if let Some(last) = out.last_mut() {
                last.1.push((word, val));
            }
        } else if !word.is_empty() {
            out.push((word, Vec::new()));
        } else {
            i += 1; // a stray character: never loop on it
        }
    }
    out
}

/// The token server's answer (`token` per the docker spec, `access_token` per OAuth2).
#[derive(serde::Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: String,
    #[serde(default)]
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// Tokens live 60 s when the server does not say (the docker token spec's default).
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(60);

/// Who may use a cached token: registry, scope and credentials.
type TokenKey = (String, String, String);

/// What each registry asked for, and the bearer tokens obtained so far.
#[derive(Default)]
pub struct AuthCache {
    challenges: Mutex<HashMap<String, Challenge>>,
    tokens: Mutex<HashMap<TokenKey, (String, SystemTime)>>,
}

impl AuthCache {
    pub fn challenge(&self, registry: &str) -> Option<Challenge> {
        lock(&self.challenges).get(registry).cloned()
    }

    pub fn set_challenge(&self, registry: &str, challenge: Challenge) {
        lock(&self.challenges).insert(registry.to_string(), challenge);
    }

    fn token(&self, key: &TokenKey, now: SystemTime) -> Option<String> {
        let mut tokens = lock(&self.tokens);
        match tokens.get(key) {
            Some((token, expires)) if *expires > now => Some(token.clone()),
            Some(_) => {
                tokens.remove(key);
                None
            }
            None => None,
        }
    }

    fn set_token(&self, key: TokenKey, token: String, expires: SystemTime) {
        lock(&self.tokens).insert(key, (token, expires));
    }

    pub fn forget_token(&self, registry: &str, scope: &str, credentials: &Credentials) {
        let key = (
            registry.to_string(),
            scope.to_string(),
            credentials.fingerprint(),
        );
        lock(&self.tokens).remove(&key);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Everything needed to answer a challenge for one repository.
pub struct AuthContext<'a> {
    pub http: &'a reqwest::Client,
    pub cache: &'a AuthCache,
    pub registry: &'a str,
    pub scope: &'a str,
    pub credentials: &'a Credentials,
    pub insecure: &'a [String],
    pub now: SystemTime,
}

impl AuthContext<'_> {
    fn unauthenticated(&self, message: impl Into<String>) -> RegistryError {
        RegistryError::Unauthenticated {
            registry: self.registry.to_string(),
            message: message.into(),
        }
    }

    /// The `Authorization` header for a request, from what is known without asking anyone:
    /// a registry token, basic credentials for a basic registry, or a cached bearer token.
    pub fn known_header(&self) -> Option<String> {
        if let Credentials::RegistryToken(token) = self.credentials {
            return Some(format!("Bearer {token}"));
        }
        match self.cache.challenge(self.registry)? {
            Challenge::Basic => self.credentials.basic_header(),
            Challenge::Bearer { .. } => {
                let key = self.token_key();
                self.cache
                    .token(&key, self.now)
                    .map(|t| format!("Bearer {t}"))
            }
        }
    }

    fn token_key(&self) -> TokenKey {
        (
            self.registry.to_string(),
            self.scope.to_string(),
            self.credentials.fingerprint(),
        )
    }

    /// Answers a challenge: the header to retry with.
    pub async fn answer(&self, challenge: &Challenge) -> Result<String, RegistryError> {
        self.cache.set_challenge(self.registry, challenge.clone());
        match (challenge, self.credentials) {
            (_, Credentials::RegistryToken(_)) => {
                Err(self.unauthenticated("the registry refused the registry token"))
            }
            (Challenge::Basic, Credentials::Basic { .. }) => self
                .credentials
                .basic_header()
                .ok_or_else(|| self.unauthenticated("no credentials")),
            (Challenge::Basic, Credentials::Anonymous) => Err(self.unauthenticated(
                "the registry requires credentials (basic auth) and none were given",
            )),
            (Challenge::Basic, Credentials::IdentityToken { .. }) => Err(self.unauthenticated(
                "the registry asks for basic auth; an identity token needs a token server",
            )),
            (
                Challenge::Bearer {
                    realm,
                    service,
                    scope,
                },
                _,
            ) => {
                // Our scope first: a challenge from /v2/ carries none, and one from a resource
                // names the same repository.
                let scope = if self.scope.is_empty() {
                    scope.as_deref().unwrap_or_default()
                } else {
                    self.scope
                };
                let (token, lifetime) = self.fetch_token(realm, service.as_deref(), scope).await?;
                let expires = self.now + lifetime.saturating_sub(Duration::from_secs(5));
                self.cache
                    .set_token(self.token_key(), token.clone(), expires);
                Ok(format!("Bearer {token}"))
            }
        }
    }

    async fn fetch_token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<(String, Duration), RegistryError> {
        let mut url = Url::parse(realm).map_err(|e| RegistryError::BadContent {
            what: format!("token realm {realm:?} of {}", self.registry),
            reason: e.to_string(),
        })?;
        let realm_host = hosts::url_host(&url);
        match url.scheme() {
            "https" => {}
            "http" if hosts::is_insecure(&realm_host, self.insecure) => {}
            other => {
                return Err(RegistryError::Refused {
                    what: format!("token realm {realm}"),
                    reason: format!(
                        "{other}:// is only used for hosts given with --insecure-registry"
                    ),
                });
            }
        }
        let mut params: Vec<(&str, &str)> = Vec::new();
        if let Some(service) = service {
            params.push(("service", service));
        }
        if !scope.is_empty() {
            params.push(("scope", scope));
        }
        let request = match self.credentials {
            Credentials::IdentityToken { token, .. } => {
                // OAuth2 refresh-token grant, as docker does with an identity token.
                let mut form = Url::parse("http://form.invalid/")
                    .map_err(|e| RegistryError::Task(format!("building the token request: {e}")))?;
                form.query_pairs_mut()
                    .extend_pairs(params.iter().copied())
                    .append_pair("grant_type", "refresh_token")
                    .append_pair("refresh_token", token)
                    .append_pair("client_id", "runp");
                self.http
                    .post(url.clone())
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .body(form.query().unwrap_or_default().to_string())
            }
            credentials => {
                url.query_pairs_mut().extend_pairs(params.iter().copied());
                let request = self.http.get(url.clone());
                match credentials.basic_header() {
                    Some(header) => request.header("Authorization", header),
                    None => request,
                }
            }
        };
        let shown = format!("token server {}", hosts::redact(&url));
        let response = request.send().await.map_err(|e| RegistryError::Network {
            url: shown.clone(),
            message: super::transport::describe(&e),
        })?;
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(self.unauthenticated(format!(
                "the {shown} refused the credentials (HTTP {})",
                status.as_u16()
            )));
        }
        if !status.is_success() {
            return Err(RegistryError::Http {
                url: shown,
                status: status.as_u16(),
                message: "token request failed".into(),
            });
        }
        let body = response.bytes().await.map_err(|e| RegistryError::Network {
            url: shown.clone(),
            message: super::transport::describe(&e),
        })?;
        let parsed: TokenResponse =
            serde_json::from_slice(&body).map_err(|e| RegistryError::BadContent {
                what: shown.clone(),
                reason: format!("not a token response: {e}"),
            })?;
        let token = if parsed.token.is_empty() {
            parsed.access_token
        } else {
            parsed.token
        };
        if token.is_empty() {
            return Err(RegistryError::BadContent {
                what: shown,
                reason: "the response has no token".into(),
            });
        }
        let lifetime = parsed
            .expires_in
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TOKEN_LIFETIME);
        Ok((token, lifetime))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(realm: &str, service: Option<&str>, scope: Option<&str>) -> Challenge {
        Challenge::Bearer {
            realm: realm.into(),
            service: service.map(String::from),
            scope: scope.map(String::from),
        }
    }

    #[test]
    fn parses_challenges() {
        let cases: Vec<(&str, Vec<Challenge>)> = vec![
            (
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull""#,
                vec![bearer(
                    "https://auth.docker.io/token",
                    Some("registry.docker.io"),
                    Some("repository:library/busybox:pull"),
                )],
            ),
            (r#"Basic realm="basic-realm""#, vec![Challenge::Basic]),
            (r#"basic realm=x"#, vec![Challenge::Basic]),
            (
                r#"Bearer realm="http://127.0.0.1:1/t",scope="repository:a/b:pull,push""#,
                vec![bearer(
                    "http://127.0.0.1:1/t",
                    None,
                    Some("repository:a/b:pull,push"),
                )],
            ),
            (
                r#"Negotiate, Basic realm="r", Bearer realm="https://t", service=s"#,
                vec![Challenge::Basic, bearer("https://t", Some("s"), None)],
            ),
            (r#"Bearer realm="a\"b""#, vec![bearer("a\"b", None, None)]),
            (r#"Bearer service="no realm""#, vec![]),
            ("", vec![]),
            ("=,=\"", vec![]),
        ];
        for (header, want) in cases {
            assert_eq!(parse_challenges([header]), want, "{header}");
        }
    }

    #[test]
    fn cached_tokens_expire_and_are_per_credentials() {
        let cache = AuthCache::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let key = |c: &Credentials| ("r".to_string(), "s".to_string(), c.fingerprint());
        let alice = Credentials::from_user_pass("alice:1").unwrap();
        let bob = Credentials::from_user_pass("bob:2").unwrap();
        cache.set_token(key(&alice), "t".into(), now + Duration::from_secs(10));
        assert_eq!(cache.token(&key(&alice), now).as_deref(), Some("t"));
        assert_eq!(cache.token(&key(&bob), now), None);
        assert_eq!(
            cache.token(&key(&alice), now + Duration::from_secs(11)),
            None
        );
    }
}
