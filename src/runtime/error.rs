//! The runtime's error type, mapped once to a CRI status at the trait boundary.

use crate::runtime::network::NetworkError;
use std::path::PathBuf;

/// Everything a runtime operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{kind} {id:?} not found")]
    NotFound { kind: &'static str, id: String },
    #[error("{kind} id prefix {prefix:?} is ambiguous")]
    AmbiguousId { kind: &'static str, prefix: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    DeadlineExceeded(String),
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("image: {0}")]
    Image(#[from] crate::image::ImageError),
    #[error("jail: {0}")]
    Jail(#[from] crate::jail::JailError),
    #[error("pod network: {0}")]
    Network(#[from] crate::runtime::network::NetworkError),
    #[error("{0}")]
    Internal(String),
}

impl RuntimeError {
    pub fn not_found(kind: &'static str, id: impl Into<String>) -> Self {
        RuntimeError::NotFound {
            kind,
            id: id.into(),
        }
    }

    /// Wraps an I/O error with what was being done and to which path.
    pub fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| RuntimeError::Io { what, path, source }
    }

    pub fn invalid(msg: impl Into<String>) -> Self {
        RuntimeError::InvalidArgument(msg.into())
    }
}

impl From<RuntimeError> for tonic::Status {
    fn from(err: RuntimeError) -> Self {
        let msg = err.to_string();
        match err {
            RuntimeError::NotFound { .. } => tonic::Status::not_found(msg),
            RuntimeError::AmbiguousId { .. } | RuntimeError::InvalidArgument(_) => {
                tonic::Status::invalid_argument(msg)
            }
            RuntimeError::FailedPrecondition(_) => tonic::Status::failed_precondition(msg),
            RuntimeError::AlreadyExists(_) => tonic::Status::already_exists(msg),
            RuntimeError::DeadlineExceeded(_) => tonic::Status::deadline_exceeded(msg),
            // The image store knows its own codes (NotFound, InUse...).
            RuntimeError::Image(err) => {
                let status = tonic::Status::from(err);
                tonic::Status::new(status.code(), msg)
            }
            RuntimeError::Network(NetworkError::InvalidPortMapping(_)) => {
                tonic::Status::invalid_argument(msg)
            }
            RuntimeError::Io { .. }
            | RuntimeError::Jail(_)
            | RuntimeError::Network(_)
            | RuntimeError::Internal(_) => tonic::Status::internal(msg),
        }
    }
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
