//! Service-account tokens through the TokenRequest API (`serviceaccounts/<sa>/token`), bound to
//! the pod, refreshed by kubelet's token-manager rule.

use super::refs::TokenKey;
use crate::kubelet::apiclient::ApiClient;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A token is refreshed at the latest this long after it was issued (kubelet's `maxTTL`), even
/// when the server granted a longer lifetime.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// A token as issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedToken {
    pub token: String,
    pub issued: SystemTime,
    pub expiry: SystemTime,
}

/// Whether a token issued at `issued`, expiring at `expiry`, is due for a new one at `now`:
/// when 80 % of its lifetime passed, or after [`MAX_TTL`] (kubelet's `requiresRefresh`, without
/// its jitter).
pub fn needs_refresh(issued: SystemTime, expiry: SystemTime, now: SystemTime) -> bool {
    let lifetime = expiry.duration_since(issued).unwrap_or_default();
    let due = issued + lifetime.mul_f64(0.8).min(MAX_TTL);
    now >= due
}

/// The TokenRequest kubelet sends for `key`: bound to the pod (name and uid), for the source's
/// audience (none: the API server's default audiences) and lifetime.
pub fn token_request(key: &TokenKey) -> TokenRequest {
    let audiences = if key.audience.is_empty() {
        Vec::new()
    } else {
        vec![key.audience.clone()]
    };
    TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(audiences),
            expiration_seconds: Some(key.expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(key.pod_name.clone()),
                uid: Some(key.pod_uid.clone()),
            }),
        }),
        ..Default::default()
    }
}

/// The token of a TokenRequest answer; issued at its expiry minus the granted lifetime (as
/// kubelet computes it: the server may grant more than asked).
pub fn issued_token(answer: &TokenRequest, asked_seconds: i64) -> Option<IssuedToken> {
    let status = answer.status.as_ref()?;
    let token = status.token.clone().filter(|t| !t.is_empty())?;
    let expiry_secs = status.expiration_timestamp.as_ref()?.0.as_second();
    let expiry = UNIX_EPOCH + Duration::from_secs(u64::try_from(expiry_secs).ok()?);
    let granted = answer.spec.as_ref().and_then(|s| s.expiration_seconds);
    let granted = granted.unwrap_or(asked_seconds);
    let lifetime = Duration::from_secs(u64::try_from(granted).unwrap_or(0));
    Some(IssuedToken {
        token,
        issued: expiry.checked_sub(lifetime).unwrap_or(UNIX_EPOCH),
        expiry,
    })
}

/// Creates a token for `key`; the error names the verb and resource.
pub async fn request(api: &ApiClient, key: &TokenKey) -> Result<IssuedToken, String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(api.client.clone(), &key.namespace);
    let resource = format!(
        "serviceaccounts/{}/token in namespace {} (pod {})",
        key.service_account, key.namespace, key.pod_name
    );
    let answer = accounts
        .create_token_request(
            &key.service_account,
            &PostParams::default(),
            &token_request(key),
        )
        .await
        .map_err(|e| {
            api.request_error("create", resource.clone(), &e)
                .to_string()
        })?;
    issued_token(&answer, key.expiration_seconds)
        .ok_or_else(|| format!("create {resource}: the answer has no token or expiry"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(T0 + secs)
    }

    #[test]
    fn refresh_table() {
        let hour = 3600;
        let year = 365 * 24 * hour;
        // (lifetime, now since issue, due)
        let cases = [
            (hour, 0, false),
            (hour, 2879, false),
            (hour, 2880, true), // 80 % of an hour
            (hour, 4000, true), // expired
            (600, 479, false),
            (600, 480, true),
            (year, 23 * hour, false),
            (year, 24 * hour, true), // a year-long token is renewed daily
            (48 * hour, 24 * hour, true),
        ];
        for (lifetime, elapsed, due) in cases {
            assert_eq!(
                needs_refresh(at(0), at(lifetime), at(elapsed)),
                due,
                "lifetime {lifetime} s, {elapsed} s later"
            );
        }
        // A clock behind the issue time (or a zero lifetime) is not a reason to wait forever.
        assert!(needs_refresh(at(10), at(10), at(10)));
        assert!(!needs_refresh(at(10), at(3610), at(0)));
    }

    fn key(audience: &str) -> TokenKey {
        TokenKey {
            namespace: "ns".into(),
            service_account: "default".into(),
            audience: audience.into(),
            expiration_seconds: 3607,
            pod_name: "web".into(),
            pod_uid: "u-1".into(),
        }
    }

    #[test]
    fn the_request_binds_the_pod_and_leaves_the_default_audience_to_the_server() {
        let request = token_request(&key(""));
        let spec = request.spec.as_ref().unwrap();
        assert_eq!(spec.audiences, Some(vec![]));
        assert_eq!(spec.expiration_seconds, Some(3607));
        let bound = spec.bound_object_ref.as_ref().unwrap();
        assert_eq!(
            (
                bound.kind.as_deref(),
                bound.name.as_deref(),
                bound.uid.as_deref()
            ),
            (Some("Pod"), Some("web"), Some("u-1"))
        );
        let vault = token_request(&key("vault"));
        assert_eq!(
            vault.spec.unwrap().audiences,
            Some(vec!["vault".to_string()])
        );
    }

    #[test]
    fn issue_time_comes_from_the_granted_lifetime() {
        let answer: TokenRequest = serde_json::from_value(serde_json::json!({
            "spec": {"audiences": [], "expirationSeconds": 31536000},
            "status": {"token": "eyJ", "expirationTimestamp": "2024-01-01T00:00:00Z"}
        }))
        .unwrap();
        let token = issued_token(&answer, 3607).unwrap();
        let expiry = UNIX_EPOCH + Duration::from_secs(1_704_067_200);
        assert_eq!(token.expiry, expiry);
        assert_eq!(token.issued, expiry - Duration::from_secs(31_536_000));
        assert_eq!(token.token, "eyJ");
        let empty: TokenRequest = serde_json::from_value(serde_json::json!({
            "spec": {}, "status": {"token": "", "expirationTimestamp": "2024-01-01T00:00:00Z"}
        }))
        .unwrap();
        assert!(issued_token(&empty, 3600).is_none());
    }
}
