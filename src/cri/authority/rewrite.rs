//! The client→server byte stream of one HTTP/2 connection, with every header block re-encoded
//! so that an `:authority` h2 would refuse becomes `localhost` (pure: bytes in, bytes out).
//!
//! Frames other than HEADERS and CONTINUATION pass through as they arrive. Header blocks are
//! decoded with the client's dynamic table (one decoder per connection) and re-encoded with
//! the static table and literals without indexing, so the server's decoder never holds
//! dynamic entries and the server's SETTINGS_HEADER_TABLE_SIZE needs no tracking. Anything that is not HTTP/2 after
//! all is passed on untouched for h2 to refuse.

use super::hpack_static;
use loona_hpack::Decoder;
use loona_hpack::encoder::encode_integer_into;

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// What an invalid `:authority` becomes.
pub const REPLACEMENT_AUTHORITY: &str = "localhost";
/// Frames we write are never larger than this: the protocol's initial SETTINGS_MAX_FRAME_SIZE,
/// which every server accepts (ours keeps h2's default).
pub const MAX_FRAME_PAYLOAD: usize = 16_384;
/// The server decoder's table size that the client's encoder may use: h2's default (the
/// server does not change SETTINGS_HEADER_TABLE_SIZE).
const CLIENT_TABLE_SIZE: usize = 4_096;
/// Bounds on one header block, encoded and decoded. Far above the server's own limit
/// (hyper's 16 KiB header list), so h2 still answers oversize requests itself; these only
/// keep a hostile client from making the adapter buffer without end.
pub const MAX_BLOCK_BYTES: usize = 256 * 1024;
pub const MAX_DECODED_BYTES: usize = 256 * 1024;

const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;

/// Why a connection cannot be carried on; the adapter then closes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    #[error("HTTP/2 header block does not decode: {0}")]
    Hpack(String),
    #[error("HTTP/2 header block larger than {MAX_BLOCK_BYTES} bytes")]
    BlockTooLarge,
    #[error("HTTP/2 header list larger than {MAX_DECODED_BYTES} bytes once decoded")]
    DecodedTooLarge,
    #[error("HTTP/2 HEADERS frame on stream {0} with bad padding or priority")]
    BadHeadersFrame(u32),
    #[error("HTTP/2 frame of type {frame_type:#x} inside the header block of stream {stream}")]
    ContinuationExpected { stream: u32, frame_type: u8 },
    #[error("HTTP/2 CONTINUATION frame on stream {0} outside a header block")]
    UnexpectedContinuation(u32),
}

/// True when h2 accepts `value` as `:authority` (it parses it exactly so).
pub fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Matching the connection preface; `matched` bytes of it seen.
    Preface { matched: usize },
    /// Collecting the 9-byte header of the next frame.
    FrameHeader,
    /// Forwarding `remaining` payload bytes of a frame as they come.
    Forward { remaining: usize },
    /// Collecting the payload of a HEADERS or CONTINUATION frame.
    Block { remaining: usize },
    /// Not HTTP/2 after all: everything goes through untouched.
    Passthrough,
}

/// The open header block: the stream, the first frame's flags and priority, the fragments.
struct OpenBlock {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragments: Vec<u8>,
}

/// Rewrites one connection's client→server bytes; see the module docs.
pub struct Rewriter {
    state: State,
    header: Vec<u8>,
    payload: Vec<u8>,
    open: Option<OpenBlock>,
    decoder: Decoder<'static>,
    rewritten: u64,
}

impl Default for Rewriter {
    fn default() -> Self {
        Self::new()
    }
}

impl Rewriter {
    pub fn new() -> Rewriter {
        let mut decoder = Decoder::new();
        decoder.set_max_allowed_table_size(CLIENT_TABLE_SIZE);
        Rewriter {
            state: State::Preface { matched: 0 },
            header: Vec::with_capacity(FRAME_HEADER_LEN),
            payload: Vec::new(),
            open: None,
            decoder,
            rewritten: 0,
        }
    }

    /// How many `:authority` values were replaced so far.
    pub fn rewritten(&self) -> u64 {
        self.rewritten
    }

    /// Consumes `input` (any split of the stream), appending what the server should read.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), RewriteError> {
        while !input.is_empty() {
            match self.state {
                State::Passthrough => {
                    out.extend_from_slice(input);
                    return Ok(());
                }
                State::Preface { matched } => {
                    let want = &PREFACE[matched..];
                    let n = want.len().min(input.len());
                    out.extend_from_slice(&input[..n]);
                    self.state = if input[..n] != want[..n] {
                        State::Passthrough
                    } else if matched + n == PREFACE.len() {
                        State::FrameHeader
                    } else {
                        State::Preface {
                            matched: matched + n,
                        }
                    };
                    input = &input[n..];
                }
                State::FrameHeader => {
                    let n = (FRAME_HEADER_LEN - self.header.len()).min(input.len());
                    self.header.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if self.header.len() == FRAME_HEADER_LEN {
                        self.start_frame(out)?;
                    }
                }
                State::Forward { remaining } => {
                    let n = remaining.min(input.len());
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if n == remaining {
                        State::FrameHeader
                    } else {
                        State::Forward {
                            remaining: remaining - n,
                        }
                    };
                }
                State::Block { remaining } => {
                    let n = remaining.min(input.len());
                    self.payload.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if n == remaining {
                        self.end_block_frame(out)?;
                    } else {
                        self.state = State::Block {
                            remaining: remaining - n,
                        };
                    }
                }
            }
        }
        Ok(())
    }

    fn frame_header(&self) -> (usize, u8, u8, u32) {
        let h = &self.header;
        let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        (len, h[3], h[4], stream)
    }

    fn start_frame(&mut self, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        let (len, frame_type, _, stream) = self.frame_header();
        let in_block = self.open.is_some();
        match frame_type {
            TYPE_HEADERS | TYPE_CONTINUATION => {
                let buffered = self.open.as_ref().map_or(0, |b| b.fragments.len());
                if buffered + len > MAX_BLOCK_BYTES {
                    return Err(RewriteError::BlockTooLarge);
                }
                self.payload.clear();
                self.state = State::Block { remaining: len };
                // An empty payload is complete as soon as its header is.
                if len == 0 {
                    self.end_block_frame(out)?;
                }
                Ok(())
            }
            other if in_block => Err(RewriteError::ContinuationExpected {
                stream,
                frame_type: other,
            }),
            _ => {
                out.extend_from_slice(&self.header);
                self.header.clear();
                self.state = if len == 0 {
                    State::FrameHeader
                } else {
                    State::Forward { remaining: len }
                };
                Ok(())
            }
        }
    }

    /// A whole HEADERS or CONTINUATION payload is in `self.payload`.
    fn end_block_frame(&mut self, out: &mut Vec<u8>) -> Result<(), RewriteError> {
        let (_, frame_type, flags, stream) = self.frame_header();
        self.header.clear();
        self.state = State::FrameHeader;
        let payload = std::mem::take(&mut self.payload);
        if frame_type == TYPE_HEADERS {
            if let Some(open) = &self.open {
                return Err(RewriteError::ContinuationExpected {
                    stream: open.stream,
                    frame_type,
                });
            }
            let (priority, fragment) =
                headers_fragment(&payload, flags).ok_or(RewriteError::BadHeadersFrame(stream))?;
            self.open = Some(OpenBlock {
                stream,
                end_stream: flags & FLAG_END_STREAM != 0,
                priority,
                fragments: fragment.to_vec(),
            });
        } else {
            match &mut self.open {
                Some(open) if open.stream == stream => open.fragments.extend_from_slice(&payload),
                _ => return Err(RewriteError::UnexpectedContinuation(stream)),
            }
        }
        self.payload = payload;
        if flags & FLAG_END_HEADERS != 0
            && let Some(open) = self.open.take()
        {
            let block = self.reencode(&open.fragments)?;
            write_block(out, open.stream, open.end_stream, open.priority, &block);
        }
        Ok(())
    }

    /// Decodes a complete header block and encodes it again with a valid `:authority`.
    fn reencode(&mut self, block: &[u8]) -> Result<Vec<u8>, RewriteError> {
        let mut encoded = Vec::with_capacity(block.len() + 64);
        let mut decoded = 0usize;
        let mut too_large = false;
        let mut replaced = false;
        self.decoder
            .decode_with_cb(block, |name, value| {
                // RFC 7541 §4.1 sizes: name + value + 32 per field.
                decoded += name.len() + value.len() + 32;
                if decoded > MAX_DECODED_BYTES {
                    too_large = true;
                    return;
                }
                let value: &[u8] = if &*name == b":authority" && !valid_authority(&value) {
                    replaced = true;
                    REPLACEMENT_AUTHORITY.as_bytes()
                } else {
                    &value
                };
                encode_literal(&name, value, &mut encoded);
            })
            .map_err(|e| RewriteError::Hpack(e.to_string()))?;
        if too_large {
            return Err(RewriteError::DecodedTooLarge);
        }
        self.rewritten += u64::from(replaced);
        Ok(encoded)
    }
}

/// The priority fields and header block fragment of a HEADERS payload, without padding.
fn headers_fragment(payload: &[u8], flags: u8) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut rest = payload;
    let mut pad = 0;
    if flags & FLAG_PADDED != 0 {
        let (&len, tail) = rest.split_first()?;
        pad = usize::from(len);
        rest = tail;
    }
    let mut priority = None;
    if flags & FLAG_PRIORITY != 0 {
        priority = Some(<[u8; 5]>::try_from(rest.get(..5)?).ok()?);
        rest = &rest[5..];
    }
    let end = rest.len().checked_sub(pad)?;
    Some((priority, &rest[..end]))
}

/// One field, never into the dynamic table: a static-table index when the pair is there
/// (RFC 7541 §6.1), else a literal without indexing (§6.2.2) naming a static entry when the
/// name is there; strings without Huffman. Writing into a Vec cannot fail.
fn encode_literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let string = |text: &[u8], out: &mut Vec<u8>| {
        let _ = encode_integer_into(text.len(), 7, 0x00, out);
        out.extend_from_slice(text);
    };
    match hpack_static::lookup(name, value) {
        Some((index, true)) => {
            let _ = encode_integer_into(index, 7, 0x80, out);
        }
        Some((index, false)) => {
            let _ = encode_integer_into(index, 4, 0x00, out);
            string(value, out);
        }
        None => {
            out.push(0x00);
            string(name, out);
            string(value, out);
        }
    }
}

/// One HEADERS frame and as many CONTINUATION frames as `block` needs.
fn write_block(
    out: &mut Vec<u8>,
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    block: &[u8],
) {
    let prefix = if priority.is_some() { 5 } else { 0 };
    let first = block.len().min(MAX_FRAME_PAYLOAD - prefix);
    let (head, mut rest) = block.split_at(first);
    let mut flags = if end_stream { FLAG_END_STREAM } else { 0 };
    if priority.is_some() {
        flags |= FLAG_PRIORITY;
    }
    if rest.is_empty() {
        flags |= FLAG_END_HEADERS;
    }
    frame_header(out, prefix + head.len(), TYPE_HEADERS, flags, stream);
    if let Some(priority) = priority {
        out.extend_from_slice(&priority);
    }
    out.extend_from_slice(head);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(MAX_FRAME_PAYLOAD));
        rest = tail;
        let flags = if rest.is_empty() { FLAG_END_HEADERS } else { 0 };
        frame_header(out, chunk.len(), TYPE_CONTINUATION, flags, stream);
        out.extend_from_slice(chunk);
    }
}

fn frame_header(out: &mut Vec<u8>, len: usize, frame_type: u8, flags: u8, stream: u32) {
    let len = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.push(frame_type);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

#[cfg(test)]
#[path = "rewrite_tests.rs"]
mod tests;
