//! HTTP to one repository of a registry: requests carry what authorization is known, a 401 is
//! answered once (basic credentials, or a bearer token fetched from the challenge's realm),
//! and error statuses become [`RegistryError`]s with the registry's own message.

use super::auth::{AuthCache, AuthContext, Challenge, parse_challenges};
use super::credentials::Credentials;
use super::error::RegistryError;
use super::hosts;
use crate::image::store::Clock;
use reqwest::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use reqwest::{Response, StatusCode, Url};
use std::sync::Arc;

/// One pull's view of a registry: `registry` as named in the reference (`127.0.0.1:5000`,
/// `docker.io`), the repository path in it, and whose credentials.
pub struct Session {
    pub http: reqwest::Client,
    pub cache: Arc<AuthCache>,
    pub registry: String,
    pub repository: String,
    pub base: Url,
    pub credentials: Credentials,
    pub insecure: Arc<Vec<String>>,
    pub clock: Clock,
}

impl Session {
    pub fn scope(&self) -> String {
        format!("repository:{}:pull", self.repository)
    }

    /// `<base>/<repository>/<kind>/<reference>` (kind: `manifests` or `blobs`).
    pub fn url(&self, kind: &str, reference: &str) -> Result<Url, RegistryError> {
        self.base
            .join(&format!("{}/{kind}/{reference}", self.repository))
            .map_err(|e| RegistryError::InvalidReference {
                reference: format!("{}/{}", self.registry, self.repository),
                reason: e.to_string(),
            })
    }

    /// GET `url`, authenticating as needed. Returns any response other than 401/403.
    pub async fn get(
        &self,
        url: &Url,
        headers: &[(&str, String)],
    ) -> Result<Response, RegistryError> {
        let scope = self.scope();
        let ctx = AuthContext {
            http: &self.http,
            cache: &self.cache,
            registry: &self.registry,
            scope: &scope,
            credentials: &self.credentials,
            insecure: &self.insecure,
            now: (self.clock)(),
        };
        let mut authorization = ctx.known_header();
        let mut answered = false;
        loop {
            let mut request = self.http.get(url.clone());
            for (name, value) in headers {
                request = request.header(*name, value);
            }
            if let Some(value) = &authorization {
                request = request.header(AUTHORIZATION, value);
            }
            let response = request.send().await.map_err(|e| self.network(url, &e))?;
            match response.status() {
                StatusCode::UNAUTHORIZED if !answered => {
                    answered = true;
                    let challenge = pick(parse_challenges(
                        response
                            .headers()
                            .get_all(WWW_AUTHENTICATE)
                            .iter()
                            .filter_map(|v| v.to_str().ok()),
                    ))
                    .ok_or_else(|| RegistryError::Unauthenticated {
                        registry: self.registry.clone(),
                        message: "HTTP 401 without a usable WWW-Authenticate challenge".into(),
                    })?;
                    // A cached token may simply have expired: never reuse it.
                    self.cache
                        .forget_token(&self.registry, &scope, &self.credentials);
                    let answer = ctx.answer(&challenge).await?;
                    if matches!(challenge, Challenge::Basic)
                        && authorization.as_ref() == Some(&answer)
                    {
                        return Err(self.refused(response, StatusCode::UNAUTHORIZED).await);
                    }
                    authorization = Some(answer);
                }
                status @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                    return Err(self.refused(response, status).await);
                }
                _ => return Ok(response),
            }
        }
    }

    async fn refused(&self, response: Response, status: StatusCode) -> RegistryError {
        let anonymous = matches!(self.credentials, Credentials::Anonymous);
        let message = error_message(response).await;
        let message = if anonymous {
            format!("{message} (no credentials were given)")
        } else {
            message
        };
        if status == StatusCode::FORBIDDEN {
            RegistryError::Denied {
                registry: self.registry.clone(),
                message,
            }
        } else {
            RegistryError::Unauthenticated {
                registry: self.registry.clone(),
                message,
            }
        }
    }

    /// Passes successful responses; 404 is `NotFound` (of `what`), others `Http`.
    pub async fn check(&self, response: Response, what: &str) -> Result<Response, RegistryError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let url = hosts::redact(response.url());
        let message = error_message(response).await;
        if status == StatusCode::NOT_FOUND {
            return Err(RegistryError::NotFound {
                what: what.to_string(),
                message,
            });
        }
        Err(RegistryError::Http {
            url,
            status: status.as_u16(),
            message,
        })
    }

    pub fn network(&self, url: &Url, err: &reqwest::Error) -> RegistryError {
        RegistryError::Network {
            url: hosts::redact(url),
            message: describe(err),
        }
    }
}

/// Bearer when offered (it works with every kind of credentials), else basic.
fn pick(challenges: Vec<Challenge>) -> Option<Challenge> {
    let bearer = challenges
        .iter()
        .find(|c| matches!(c, Challenge::Bearer { .. }))
        .cloned();
    bearer.or_else(|| challenges.into_iter().next())
}

/// The registry's error text: `{"errors":[{"code":..,"message":..}]}`, or the start of the
/// body, or the status line.
pub async fn error_message(response: Response) -> String {
    #[derive(serde::Deserialize)]
    struct Envelope {
        errors: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    let status = response.status();
    let body = response.bytes().await.unwrap_or_default();
    if let Ok(envelope) = serde_json::from_slice::<Envelope>(&body)
        && !envelope.errors.is_empty()
    {
        return envelope
            .errors
            .iter()
            .map(|e| match (e.code.is_empty(), e.message.is_empty()) {
                (false, false) => format!("{}: {}", e.code.to_lowercase(), e.message),
                (true, false) => e.message.clone(),
                _ => e.code.to_lowercase(),
            })
            .collect::<Vec<_>>()
            .join("; ");
    }
    let text = String::from_utf8_lossy(&body);
    let text = text.trim();
    if text.is_empty() || text.len() > 200 {
        status.to_string()
    } else {
        text.to_string()
    }
}

/// An HTTP client error with its causes ("error sending request: ...: Connection refused").
pub fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
