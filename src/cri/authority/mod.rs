//! Accepting the `:authority` that older gRPC clients send on unix sockets.
//!
//! grpc-go before 1.34-ish (old crictl, critest, kubelets) and grpc-java send the socket path
//! (`/run/runp/runp.sock`, `unix:///...`) as the HTTP/2 `:authority`. h2 resets such streams
//! with PROTOCOL_ERROR before tonic sees them (hyperium/tonic#243) and has no switch to relax
//! that, so each accepted unix connection is wrapped in [`AuthorityFix`], which rewrites the
//! client's header blocks on their way to h2 ([`rewrite`]). Server→client bytes are untouched.

mod hpack_static;
pub mod rewrite;

use rewrite::Rewriter;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// Bytes read from the client at a time.
const READ_CHUNK: usize = 16 * 1024;

/// A server-side connection whose incoming HTTP/2 header blocks carry a valid `:authority`.
pub struct AuthorityFix<S> {
    inner: S,
    rewriter: Rewriter,
    /// Rewritten bytes not yet handed to the server, from `pos` on.
    pending: Vec<u8>,
    pos: usize,
    scratch: Box<[u8]>,
    /// Set once the client sent something that cannot be carried on; reads fail from then on.
    failed: Option<rewrite::RewriteError>,
}

impl<S> AuthorityFix<S> {
    pub fn new(inner: S) -> AuthorityFix<S> {
        AuthorityFix {
            inner,
            rewriter: Rewriter::new(),
            pending: Vec::new(),
            pos: 0,
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            failed: None,
        }
    }
}

fn broken(err: &rewrite::RewriteError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err.clone())
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.pos < this.pending.len() {
                let n = buf.remaining().min(this.pending.len() - this.pos);
                buf.put_slice(&this.pending[this.pos..this.pos + n]);
                this.pos += n;
                if this.pos == this.pending.len() {
                    this.pending.clear();
                    this.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if let Some(err) = &this.failed {
                return Poll::Ready(Err(broken(err)));
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                return Poll::Ready(Ok(())); // end of stream
            }
            if let Err(err) = this.rewriter.feed(read.filled(), &mut this.pending) {
                tracing::warn!(error = %err, "closing a CRI connection");
                // What was rewritten before the fault still goes to the server first.
                this.failed = Some(err);
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: Connected> Connected for AuthorityFix<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}
