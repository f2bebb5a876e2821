//! Errors of the jail layer.

use super::channel::ChannelError;

#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{context}: {source}")]
    Sys {
        context: String,
        #[source]
        source: nix::Error,
    },
    #[error(transparent)]
    Channel(#[from] ChannelError),
    #[error("no such process: {0}")]
    NoSuchProcess(i32),
    #[error("invalid shim spec: {0}")]
    InvalidSpec(String),
    /// libcontainer refused or failed; the message carries its whole error chain.
    #[error("{0}")]
    Container(String),
    #[error("corrupt state file {path}: {message}")]
    CorruptState { path: String, message: String },
}

impl JailError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        JailError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn sys(context: impl Into<String>, source: nix::Error) -> Self {
        JailError::Sys {
            context: context.into(),
            source,
        }
    }
}

/// `err` and all its sources joined with ": " (libcontainer errors nest several levels deep and
/// the useful part is usually the innermost).
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = inner.source();
    }
    message
}
