//! What a registry pull can fail with, and its single mapping to a CRI status. Codes follow
//! containerd's errdefs: a registry's 401 is `Unauthenticated`, its 403 `PermissionDenied`, a
//! missing repository, tag or platform `NotFound`, a bad reference or credential
//! `InvalidArgument`, an unreachable or failing registry `Unavailable`.

use crate::image::error::ImageError;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },
    #[error("invalid registry credentials: {0}")]
    InvalidCredentials(String),
    #[error("{registry}: authentication failed: {message}")]
    Unauthenticated { registry: String, message: String },
    #[error("{registry}: access denied: {message}")]
    Denied { registry: String, message: String },
    #[error("{what} not found: {message}")]
    NotFound { what: String, message: String },
    #[error("{0}")]
    NoPlatform(String),
    #[error("{what}: digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{what}: {reason}")]
    BadContent { what: String, reason: String },
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("refusing {what}: {reason}")]
    Refused { what: String, reason: String },
    #[error("{url}: HTTP {status}: {message}")]
    Http {
        url: String,
        status: u16,
        message: String,
    },
    #[error("{url}: {message}")]
    Network { url: String, message: String },
    #[error(transparent)]
    Store(#[from] ImageError),
    #[error("pull task failed: {0}")]
    Task(String),
    #[error("HTTP client setup: {0}")]
    Client(String),
    #[error(transparent)]
    HostsConfig(#[from] super::hosts_config::HostsConfigError),
}

impl RegistryError {
    /// The registry could not be reached or answered like one failing temporarily: worth
    /// retrying, and (for `PullImage`) the case where a local copy may stand in.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, RegistryError::Network { .. })
            || matches!(self, RegistryError::Http { status, .. } if *status >= 500)
    }

    /// Errors of content: the registry served bytes that are not what was asked for.
    pub(crate) fn from_store(err: ImageError, registry: &str) -> RegistryError {
        match err {
            ImageError::DigestMismatch {
                what,
                expected,
                actual,
            } => RegistryError::DigestMismatch {
                what: format!("{what} from {registry}"),
                expected,
                actual,
            },
            ImageError::SizeMismatch {
                what,
                expected,
                actual,
            } => RegistryError::BadContent {
                what: format!("{what} from {registry}"),
                reason: format!("expected {expected} bytes, got {actual}"),
            },
            other => RegistryError::Store(other),
        }
    }
}

impl From<&RegistryError> for tonic::Status {
    fn from(err: &RegistryError) -> tonic::Status {
        let message = err.to_string();
        match err {
            RegistryError::Store(inner) => tonic::Status::new(inner.code(), message),
            RegistryError::InvalidReference { .. } | RegistryError::InvalidCredentials(_) => {
                tonic::Status::invalid_argument(message)
            }
            RegistryError::Unauthenticated { .. } => tonic::Status::unauthenticated(message),
            RegistryError::Denied { .. } => tonic::Status::permission_denied(message),
            RegistryError::NotFound { .. } | RegistryError::NoPlatform(_) => {
                tonic::Status::not_found(message)
            }
            RegistryError::DigestMismatch { .. } | RegistryError::BadContent { .. } => {
                tonic::Status::data_loss(message)
            }
            RegistryError::Unsupported(_) => tonic::Status::unimplemented(message),
            // The node's registry configuration, not the request, is wrong.
            RegistryError::Refused { .. } | RegistryError::HostsConfig(_) => {
                tonic::Status::failed_precondition(message)
            }
            RegistryError::Http { status: 429, .. } => tonic::Status::resource_exhausted(message),
            RegistryError::Http { status, .. } if *status >= 500 => {
                tonic::Status::unavailable(message)
            }
            RegistryError::Http { .. } => tonic::Status::unknown(message),
            RegistryError::Network { .. } => tonic::Status::unavailable(message),
            RegistryError::Task(_) | RegistryError::Client(_) => tonic::Status::internal(message),
        }
    }
}

impl From<RegistryError> for tonic::Status {
    fn from(err: RegistryError) -> tonic::Status {
        tonic::Status::from(&err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_each_kind_to_its_cri_code() {
        let http = |status| RegistryError::Http {
            url: "u".into(),
            status,
            message: "m".into(),
        };
        let cases: Vec<(RegistryError, tonic::Code)> = vec![
            (
                RegistryError::InvalidReference {
                    reference: "A".into(),
                    reason: "r".into(),
                },
                tonic::Code::InvalidArgument,
            ),
            (
                RegistryError::InvalidCredentials("bad base64".into()),
                tonic::Code::InvalidArgument,
            ),
            (
                RegistryError::Unauthenticated {
                    registry: "r".into(),
                    message: "m".into(),
                },
                tonic::Code::Unauthenticated,
            ),
            (
                RegistryError::Denied {
                    registry: "r".into(),
                    message: "m".into(),
                },
                tonic::Code::PermissionDenied,
            ),
            (
                RegistryError::NotFound {
                    what: "w".into(),
                    message: "m".into(),
                },
                tonic::Code::NotFound,
            ),
            (RegistryError::NoPlatform("x".into()), tonic::Code::NotFound),
            (
                RegistryError::DigestMismatch {
                    what: "w".into(),
                    expected: "e".into(),
                    actual: "a".into(),
                },
                tonic::Code::DataLoss,
            ),
            (
                RegistryError::HostsConfig(super::super::hosts_config::HostsConfigError::Invalid {
                    file: "/d/r/hosts.toml".into(),
                    message: "unknown field".into(),
                }),
                tonic::Code::FailedPrecondition,
            ),
            (http(429), tonic::Code::ResourceExhausted),
            (http(503), tonic::Code::Unavailable),
            (http(400), tonic::Code::Unknown),
            (
                RegistryError::Network {
                    url: "u".into(),
                    message: "refused".into(),
                },
                tonic::Code::Unavailable,
            ),
            (
                RegistryError::Store(ImageError::io("x", std::io::Error::other("y"))),
                tonic::Code::Internal,
            ),
            (
                RegistryError::Store(ImageError::UnsafeEntry {
                    layer: "l".into(),
                    entry: "../x".into(),
                    reason: "r".into(),
                }),
                tonic::Code::InvalidArgument,
            ),
        ];
        for (err, code) in cases {
            let status = tonic::Status::from(&err);
            assert_eq!(status.code(), code, "{err}");
            assert_eq!(status.message(), err.to_string());
        }
        assert!(http(502).is_unreachable());
        assert!(!http(404).is_unreachable());
    }
}
