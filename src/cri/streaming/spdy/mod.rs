//! SPDY/3.1, the multiplexing protocol kubectl/crictl (client-go over moby/spdystream) speak to a
//! CRI streaming server after `Upgrade: SPDY/3.1`: frames, zlib header blocks with the SPDY/3
//! dictionary, and a server-side connection that accepts client-created streams.

pub mod conn;
pub mod frame;
pub mod headers;

pub use conn::{IncomingStream, SpdyConnection, StreamWriter};
pub use frame::{Frame, FrameDecoder, FrameEncoder};
pub use headers::{HeaderCompressor, HeaderDecompressor, Headers};

/// A broken SPDY connection or frame.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    #[error("SPDY protocol error: {0}")]
    Protocol(&'static str),
    #[error("SPDY header compression: {0}")]
    Compression(String),
    #[error("SPDY connection I/O: {0}")]
    Io(#[from] std::io::Error),
}
