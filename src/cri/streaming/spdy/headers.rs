//! SPDY/3 name/value header blocks: the block layout (32-bit counts and lengths, lowercase names,
//! several values of one name joined by NUL) and its zlib compression with the SPDY/3 preset
//! dictionary. Each direction of a connection is ONE zlib stream: every block is compressed with
//! a sync flush and the next block continues the same stream, so a connection keeps one
//! [`HeaderCompressor`] and one [`HeaderDecompressor`] for its lifetime.

use super::SpdyError;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// Largest decompressed header block accepted (a hostile peer could otherwise inflate a small
/// frame into gigabytes). client-go's blocks are a few dozen bytes.
pub const MAX_HEADER_BLOCK: usize = 1 << 20;

/// The header names and values of one SYN_STREAM / SYN_REPLY / HEADERS frame, in wire order.
/// Names are lowercase on the wire (SPDY/3 §2.6.10); lookups ignore case like Go's `http.Header`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    pub fn new() -> Headers {
        Headers::default()
    }

    /// Adds one value (names are lowercased, as SPDY requires).
    pub fn add(&mut self, name: &str, value: &str) {
        self.0.push((name.to_ascii_lowercase(), value.to_owned()));
    }

    /// Builder form of [`Headers::add`].
    pub fn with(mut self, name: &str, value: &str) -> Headers {
        self.add(name, value);
        self
    }

    /// The first value of `name`, like Go's `http.Header.Get`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The uncompressed name/value block: values of one name are joined with NUL, in first
    /// appearance order of the name.
    pub fn encode_block(&self) -> Vec<u8> {
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in &self.0 {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        let mut out = Vec::new();
        put_u32(&mut out, names.len());
        for name in names {
            let values: Vec<&str> = self
                .0
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .collect();
            let joined = values.join("\0");
            put_u32(&mut out, name.len());
            out.extend_from_slice(name.as_bytes());
            put_u32(&mut out, joined.len());
            out.extend_from_slice(joined.as_bytes());
        }
        out
    }

    /// Parses an uncompressed name/value block.
    pub fn decode_block(block: &[u8]) -> Result<Headers, SpdyError> {
        let mut reader = BlockReader { rest: block };
        let count = reader.u32()?;
        // Each pair needs at least 8 bytes of lengths: reject absurd counts before allocating.
        if count.saturating_mul(8) > reader.rest.len() {
            return Err(SpdyError::Protocol("header block count exceeds its length"));
        }
        let mut headers = Headers::new();
        for _ in 0..count {
            let name_len = reader.u32()?;
            let name = reader.take(name_len)?;
            let value_len = reader.u32()?;
            let value = reader.take(value_len)?;
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            if name.is_empty() {
                return Err(SpdyError::Protocol("empty header name"));
            }
            for value in value.split(|b| *b == 0) {
                headers.add(&name, &String::from_utf8_lossy(value));
            }
        }
        if !reader.rest.is_empty() {
            return Err(SpdyError::Protocol("trailing bytes after the header block"));
        }
        Ok(headers)
    }
}

struct BlockReader<'a> {
    rest: &'a [u8],
}

impl<'a> BlockReader<'a> {
    fn u32(&mut self) -> Result<usize, SpdyError> {
        let bytes = self.take(4)?;
        let value = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        Ok(value as usize)
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], SpdyError> {
        if self.rest.len() < len {
            return Err(SpdyError::Protocol("truncated header block"));
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }
}

fn put_u32(out: &mut Vec<u8>, value: usize) {
    // Header names and values are far below 4 GiB (frames are limited to 16 MiB).
    out.extend_from_slice(&u32::try_from(value).unwrap_or(u32::MAX).to_be_bytes());
}

/// Compresses outgoing header blocks (one zlib stream per connection direction).
pub struct HeaderCompressor {
    zlib: Compress,
}

impl HeaderCompressor {
    pub fn new() -> Result<HeaderCompressor, SpdyError> {
        // Best compression, as Go's framer (the peer does not care, but it keeps frames small).
        let mut zlib = Compress::new(Compression::best(), true);
        zlib.set_dictionary(&dictionary())
            .map_err(|e| SpdyError::Compression(e.to_string()))?;
        Ok(HeaderCompressor { zlib })
    }

    /// The compressed bytes of `headers`, ending at a sync-flush boundary.
    pub fn compress(&mut self, headers: &Headers) -> Result<Vec<u8>, SpdyError> {
        let input = headers.encode_block();
        let mut out = Vec::with_capacity(input.len() + 64);
        let mut consumed = 0;
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            let before = self.zlib.total_in();
            self.zlib
                .compress_vec(&input[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| SpdyError::Compression(e.to_string()))?;
            consumed += usize::try_from(self.zlib.total_in() - before).unwrap_or(usize::MAX);
            // zlib's contract: the flush is complete once output space was left over.
            if consumed >= input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// Decompresses incoming header blocks (one zlib stream per connection direction).
pub struct HeaderDecompressor {
    zlib: Decompress,
}

impl Default for HeaderDecompressor {
    fn default() -> Self {
        HeaderDecompressor::new()
    }
}

impl HeaderDecompressor {
    pub fn new() -> HeaderDecompressor {
        HeaderDecompressor {
            zlib: Decompress::new(true),
        }
    }

    /// Inflates one compressed header block and parses it.
    pub fn decompress(&mut self, compressed: &[u8]) -> Result<Headers, SpdyError> {
        let mut out = Vec::with_capacity(compressed.len() * 4 + 64);
        let mut consumed = 0;
        loop {
            if out.capacity() - out.len() < 256 {
                out.reserve(out.capacity().max(256));
            }
            let before = self.zlib.total_in();
            let result =
                self.zlib
                    .decompress_vec(&compressed[consumed..], &mut out, FlushDecompress::Sync);
            consumed += usize::try_from(self.zlib.total_in() - before).unwrap_or(usize::MAX);
            match result {
                Ok(Status::StreamEnd) => {
                    return Err(SpdyError::Compression(
                        "peer ended the header zlib stream".into(),
                    ));
                }
                Ok(_) => {}
                // The stream's header names the SPDY/3 dictionary (checked by its Adler-32).
                Err(e) if e.needs_dictionary().is_some() => {
                    self.zlib
                        .set_dictionary(&dictionary())
                        .map_err(|e| SpdyError::Compression(e.to_string()))?;
                    continue;
                }
                Err(e) => return Err(SpdyError::Compression(e.to_string())),
            }
            if out.len() > MAX_HEADER_BLOCK {
                return Err(SpdyError::Protocol("header block too large"));
            }
            if consumed >= compressed.len() && out.len() < out.capacity() {
                return Headers::decode_block(&out);
            }
        }
    }
}

/// The SPDY/3 header compression dictionary (draft 3, §2.6.10.1): 65 length-prefixed words
/// followed by a run of literal text, 1423 bytes in all.
pub fn dictionary() -> Vec<u8> {
    const WORDS: [&str; 65] = [
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
        "200 OK",
        "version",
        "HTTP/1.1",
        "url",
        "public",
        "set-cookie",
        "keep-alive",
        "origin",
    ];
    const TAIL: &str = concat!(
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
        "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request",
        "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error",
        "501 Not Implemented503 Service Unavailable",
        "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
        "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
        "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,",
        "text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdch",
        "charset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
    );
    let mut dict = Vec::with_capacity(1423);
    for word in WORDS {
        put_u32(&mut dict, word.len());
        dict.extend_from_slice(word.as_bytes());
    }
    dict.extend_from_slice(TAIL.as_bytes());
    dict
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_has_the_spec_length() {
        assert_eq!(dictionary().len(), 1423);
    }

    #[test]
    fn blocks_round_trip_through_one_stateful_stream() {
        let mut compressor = HeaderCompressor::new().unwrap();
        let mut decompressor = HeaderDecompressor::new();
        let first = Headers::new().with("streamType", "error");
        let second = Headers::new()
            .with("port", "8080")
            .with("streamtype", "data")
            .with("requestid", "0")
            .with("port", "9090");
        for headers in [&first, &second, &Headers::new(), &first] {
            let block = compressor.compress(headers).unwrap();
            let decoded = decompressor.decompress(&block).unwrap();
            let mut expected: Vec<(String, String)> = Vec::new();
            for (n, v) in headers.iter() {
                expected.push((n.to_owned(), v.to_owned()));
            }
            // Values of one name come back grouped, in first appearance order.
            expected.sort_by_key(|(n, _)| {
                headers
                    .iter()
                    .position(|(m, _)| m == n)
                    .unwrap_or(usize::MAX)
            });
            assert_eq!(decoded.0, expected);
        }
        assert_eq!(first.get("STREAMTYPE"), Some("error"));
    }

    #[test]
    fn hostile_blocks_are_errors_not_panics() {
        for block in [
            &[0u8, 0, 0][..],
            &[0, 0, 0, 1, 0, 0, 0, 9, b'a'],
            &[255, 255, 255, 255],
            &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
            &[0, 0, 0, 0, 1],
        ] {
            assert!(Headers::decode_block(block).is_err(), "{block:?}");
        }
        let mut decompressor = HeaderDecompressor::new();
        assert!(decompressor.decompress(b"not zlib at all").is_err());
    }
}
