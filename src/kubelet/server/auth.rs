//! Authentication and authorization of kubelet API requests, as kubelet does them: a verified
//! client certificate names the user; else a bearer token is checked by TokenReview; else the
//! request is anonymous (401 unless `--anonymous-auth`). Then, with `--authorization-mode
//! Webhook`, a SubjectAccessReview asks whether the user may do the request's verb on the
//! node's subresource. Answers are cached briefly (kubelet: 2 min for tokens, 5 min allowed,
//! 30 s denied).

use super::authz::{Attributes, forbidden_message};
use super::review::{TtlCache, User, subject_access_review};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN_TTL: Duration = Duration::from_secs(120);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("{kind} failed: {reason}")]
    Api { kind: &'static str, reason: String },
}

/// The API server's reviews (a fake in tests).
#[async_trait::async_trait]
pub trait Reviews: Send + Sync {
    /// The user a token belongs to; None when the token is not valid.
    async fn token(&self, token: &str) -> Result<Option<User>, ReviewError>;
    /// Whether `user` may do `attrs`.
    async fn allowed(&self, user: &User, attrs: &Attributes) -> Result<bool, ReviewError>;
}

/// `--authorization-mode`: `AlwaysAllow` (every authenticated request) or `Webhook` (a
/// SubjectAccessReview per request), spelled as kubelet's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthorizationMode {
    AlwaysAllow,
    Webhook,
}

impl std::str::FromStr for AuthorizationMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "Webhook" => Ok(AuthorizationMode::Webhook),
            other => Err(format!("{other:?}: expected AlwaysAllow or Webhook")),
        }
    }
}

/// What the client presented.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// A client certificate that chained to the client CA (its user).
    Certificate(User),
    Bearer(String),
    None,
}

/// The bearer token of an `Authorization` header value.
pub fn bearer(header: Option<&str>) -> Option<String> {
    let value = header?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

/// The result of checking one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed(User),
    /// 401.
    Unauthorized,
    /// 403 with kubelet's message.
    Forbidden(String),
    /// 500: a review could not be made.
    Failed(String),
}

pub struct Auth {
    anonymous: bool,
    mode: AuthorizationMode,
    reviews: Arc<dyn Reviews>,
    tokens: Mutex<TtlCache<Option<User>>>,
    allowed: Mutex<TtlCache<()>>,
    denied: Mutex<TtlCache<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Auth {
    pub fn new(anonymous: bool, mode: AuthorizationMode, reviews: Arc<dyn Reviews>) -> Auth {
        Auth {
            anonymous,
            mode,
            reviews,
            tokens: Mutex::new(TtlCache::new(TOKEN_TTL)),
            allowed: Mutex::new(TtlCache::new(ALLOWED_TTL)),
            denied: Mutex::new(TtlCache::new(DENIED_TTL)),
        }
    }

    /// The user of `credentials`; None means 401.
    pub async fn authenticate(&self, credentials: Credentials) -> Result<Option<User>, String> {
        match credentials {
            Credentials::Certificate(user) => Ok(Some(user)),
            Credentials::Bearer(token) => {
                if let Some(cached) = lock(&self.tokens).get(&token, Instant::now()) {
                    return Ok(cached);
                }
                let user = self
                    .reviews
                    .token(&token)
                    .await
                    .map_err(|e| e.to_string())?;
                lock(&self.tokens).put(&token, user.clone(), Instant::now());
                Ok(user)
            }
            Credentials::None if self.anonymous => Ok(Some(User {
                name: "system:anonymous".into(),
                uid: None,
                groups: vec!["system:unauthenticated".into()],
            })),
            Credentials::None => Ok(None),
        }
    }

    /// Whether `user` may do `attrs`.
    pub async fn authorize(&self, user: &User, attrs: &Attributes) -> Result<bool, String> {
        if self.mode == AuthorizationMode::AlwaysAllow {
            return Ok(true);
        }
        let key = serde_json::to_string(&subject_access_review(user, attrs).spec)
            .map_err(|e| e.to_string())?;
        let now = Instant::now();
        if lock(&self.allowed).get(&key, now).is_some() {
            return Ok(true);
        }
        if lock(&self.denied).get(&key, now).is_some() {
            return Ok(false);
        }
        let allowed = self
            .reviews
            .allowed(user, attrs)
            .await
            .map_err(|e| e.to_string())?;
        let cache = if allowed { &self.allowed } else { &self.denied };
        lock(cache).put(&key, (), Instant::now());
        Ok(allowed)
    }

    /// Authentication, then authorization of `attrs`.
    pub async fn check(&self, credentials: Credentials, attrs: &Attributes) -> Verdict {
        let user = match self.authenticate(credentials).await {
            Ok(Some(user)) => user,
            Ok(None) => return Verdict::Unauthorized,
            Err(reason) => return Verdict::Failed(reason),
        };
        match self.authorize(&user, attrs).await {
            Ok(true) => Verdict::Allowed(user),
            Ok(false) => Verdict::Forbidden(forbidden_message(&user.name, attrs)),
            Err(reason) => Verdict::Failed(reason),
        }
    }
}

/// Reviews through the API server (the node's own client).
pub struct ApiReviews {
    pub client: kube::Client,
}

#[async_trait::async_trait]
impl Reviews for ApiReviews {
    async fn token(&self, token: &str) -> Result<Option<User>, ReviewError> {
        let api: kube::Api<TokenReview> = kube::Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let answer = api
            .create(&kube::api::PostParams::default(), &review)
            .await
            .map_err(|e| ReviewError::Api {
                kind: "TokenReview",
                reason: crate::kubelet::apiclient::describe(&e),
            })?;
        let Some(status) = answer.status else {
            return Ok(None);
        };
        if status.authenticated != Some(true) {
            return Ok(None);
        }
        Ok(status.user.and_then(|u| {
            Some(User {
                name: u.username.filter(|n| !n.is_empty())?,
                uid: u.uid,
                groups: u.groups.unwrap_or_default(),
            })
        }))
    }

    async fn allowed(&self, user: &User, attrs: &Attributes) -> Result<bool, ReviewError> {
        let api: kube::Api<k8s_openapi::api::authorization::v1::SubjectAccessReview> =
            kube::Api::all(self.client.clone());
        let answer = api
            .create(
                &kube::api::PostParams::default(),
                &subject_access_review(user, attrs),
            )
            .await
            .map_err(|e| ReviewError::Api {
                kind: "SubjectAccessReview",
                reason: crate::kubelet::apiclient::describe(&e),
            })?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::server::authz::attributes;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Knows one token ("good" → alice) and allows alice `get` only.
    #[derive(Default)]
    struct Fake {
        calls: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Reviews for Fake {
        async fn token(&self, token: &str) -> Result<Option<User>, ReviewError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            match token {
                "good" => Ok(Some(user("alice"))),
                "broken" => Err(ReviewError::Api {
                    kind: "TokenReview",
                    reason: "down".into(),
                }),
                _ => Ok(None),
            }
        }
        async fn allowed(&self, user: &User, attrs: &Attributes) -> Result<bool, ReviewError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(user.name == "alice" && attrs.verb == "get")
        }
    }

    fn user(name: &str) -> User {
        User {
            name: name.into(),
            uid: None,
            groups: vec![],
        }
    }

    #[test]
    fn bearer_tokens_from_headers() {
        let table = [
            (Some("Bearer abc"), Some("abc")),
            (Some("bearer  abc "), Some("abc")),
            (Some("Basic abc"), None),
            (Some("Bearer "), None),
            (Some("Bearer"), None),
            (None, None),
        ];
        for (header, want) in table {
            assert_eq!(bearer(header).as_deref(), want, "{header:?}");
        }
    }

    #[tokio::test]
    async fn verdicts() {
        let get = attributes("GET", "/pods", "n").unwrap();
        let post = attributes("POST", "/exec/a/b/c", "n").unwrap();
        let cert = Credentials::Certificate(user("alice"));
        let table = [
            (
                false,
                AuthorizationMode::Webhook,
                Credentials::None,
                &get,
                "401",
            ),
            (
                true,
                AuthorizationMode::Webhook,
                Credentials::None,
                &get,
                "403",
            ),
            (
                true,
                AuthorizationMode::AlwaysAllow,
                Credentials::None,
                &get,
                "200",
            ),
            (false, AuthorizationMode::Webhook, cert.clone(), &get, "200"),
            (
                false,
                AuthorizationMode::Webhook,
                cert.clone(),
                &post,
                "403",
            ),
            (false, AuthorizationMode::AlwaysAllow, cert, &post, "200"),
            (
                false,
                AuthorizationMode::Webhook,
                Credentials::Bearer("good".into()),
                &get,
                "200",
            ),
            (
                false,
                AuthorizationMode::Webhook,
                Credentials::Bearer("bad".into()),
                &get,
                "401",
            ),
            (
                false,
                AuthorizationMode::Webhook,
                Credentials::Bearer("broken".into()),
                &get,
                "500",
            ),
        ];
        for (anonymous, mode, credentials, attrs, want) in table {
            let auth = Auth::new(anonymous, mode, Arc::new(Fake::default()));
            let got = match auth.check(credentials.clone(), attrs).await {
                Verdict::Allowed(_) => "200",
                Verdict::Unauthorized => "401",
                Verdict::Forbidden(_) => "403",
                Verdict::Failed(_) => "500",
            };
            assert_eq!(got, want, "{anonymous} {mode:?} {credentials:?} {attrs:?}");
        }
    }

    #[tokio::test]
    async fn forbidden_names_the_permission_and_answers_are_cached() {
        let fake = Arc::new(Fake::default());
        let auth = Auth::new(false, AuthorizationMode::Webhook, fake.clone());
        let post = attributes("POST", "/exec/a/b/c", "n").unwrap();
        let bob = Credentials::Certificate(user("bob"));
        assert_eq!(
            auth.check(bob.clone(), &post).await,
            Verdict::Forbidden(
                "Forbidden (user=bob, verb=create, resource=nodes, subresource=proxy)".into()
            )
        );
        auth.check(bob, &post).await;
        let token = Credentials::Bearer("good".into());
        let get = attributes("GET", "/pods", "n").unwrap();
        auth.check(token.clone(), &get).await;
        auth.check(token, &get).await;
        // One SAR for bob, one TokenReview and one SAR for alice.
        assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
    }
}
