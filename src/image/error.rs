//! The image store's error type, and its single mapping to a CRI status.

use std::io;
use std::path::PathBuf;

/// Everything the image store can fail with. Input problems (bad references, broken or hostile
/// archives) are distinct from I/O failures of the store itself so callers can tell them apart.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("image {0:?} not found")]
    NotFound(String),
    #[error("invalid image reference {reference:?}: {reason}")]
    InvalidReference { reference: String, reason: String },
    #[error("image id prefix {prefix:?} is ambiguous: it matches {count} images")]
    AmbiguousReference { prefix: String, count: usize },
    #[error("image {image} is in use by {holders:?}")]
    InUse { image: String, holders: Vec<String> },
    #[error("invalid image source {source_path}: {reason}")]
    InvalidSource {
        source_path: PathBuf,
        reason: String,
    },
    #[error("{what}: digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{what}: size mismatch: expected {expected} bytes, got {actual}")]
    SizeMismatch {
        what: String,
        expected: u64,
        actual: String,
    },
    #[error("layer {layer}: refusing entry {entry:?}: {reason}")]
    UnsafeEntry {
        layer: String,
        entry: String,
        reason: String,
    },
    #[error("layer {layer}: entry {entry:?}: {source}")]
    Unpack {
        layer: String,
        entry: String,
        #[source]
        source: io::Error,
    },
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl ImageError {
    /// Wraps an I/O error with what the store was doing.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> ImageError {
        ImageError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn invalid_source(path: &std::path::Path, reason: impl Into<String>) -> ImageError {
        ImageError::InvalidSource {
            source_path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// Attaches context to I/O results inside the image module.
pub(crate) trait IoContext<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, ImageError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, ImageError> {
        self.map_err(|source| ImageError::io(context(), source))
    }
}

impl ImageError {
    /// The CRI status code for this kind of failure.
    pub fn code(&self) -> tonic::Code {
        match self {
            ImageError::NotFound(_) => tonic::Code::NotFound,
            ImageError::InvalidReference { .. }
            | ImageError::AmbiguousReference { .. }
            | ImageError::InvalidSource { .. }
            | ImageError::DigestMismatch { .. }
            | ImageError::SizeMismatch { .. }
            | ImageError::UnsafeEntry { .. } => tonic::Code::InvalidArgument,
            ImageError::InUse { .. } => tonic::Code::FailedPrecondition,
            ImageError::Unsupported(_) => tonic::Code::Unimplemented,
            ImageError::Unpack { .. } | ImageError::Io { .. } => tonic::Code::Internal,
        }
    }
}

impl From<ImageError> for tonic::Status {
    fn from(err: ImageError) -> tonic::Status {
        tonic::Status::new(err.code(), err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_each_kind_to_its_cri_code() {
        let cases: Vec<(ImageError, tonic::Code)> = vec![
            (ImageError::NotFound("x".into()), tonic::Code::NotFound),
            (
                ImageError::InvalidReference {
                    reference: "A".into(),
                    reason: "r".into(),
                },
                tonic::Code::InvalidArgument,
            ),
            (
                ImageError::InUse {
                    image: "i".into(),
                    holders: vec!["c".into()],
                },
                tonic::Code::FailedPrecondition,
            ),
            (
                ImageError::UnsafeEntry {
                    layer: "l".into(),
                    entry: "../x".into(),
                    reason: "r".into(),
                },
                tonic::Code::InvalidArgument,
            ),
            (
                ImageError::io("reading", io::Error::other("boom")),
                tonic::Code::Internal,
            ),
        ];
        for (err, code) in cases {
            assert_eq!(tonic::Status::from(err).code(), code);
        }
    }
}
