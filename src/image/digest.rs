//! sha256 content digests, and hashing while data streams through.

use sha2::{Digest as _, Sha256};
use std::fmt;
use std::io::{self, Read, Write};

/// A sha256 digest: 64 lowercase hex characters, shown as `sha256:<hex>`.
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl Digest {
    /// Parses `sha256:<64 hex>`. Other algorithms are refused: the store addresses by sha256.
    pub fn parse(text: &str) -> Result<Digest, String> {
        match text.split_once(':') {
            Some(("sha256", hex)) => Digest::from_hex(hex),
            Some((algorithm, _)) => Err(format!("unsupported digest algorithm {algorithm:?}")),
            None => Err(format!("{text:?} is not a digest (expected sha256:<hex>)")),
        }
    }

    /// Accepts exactly 64 hex characters (either case; stored lowercase).
    pub fn from_hex(hex: &str) -> Result<Digest, String> {
        if is_hex(hex) && hex.len() == 64 {
            Ok(Digest(hex.to_ascii_lowercase()))
        } else {
            Err(format!("{hex:?} is not a sha256 hex digest"))
        }
    }

    pub fn hex(&self) -> &str {
        &self.0
    }

    pub fn of_bytes(bytes: &[u8]) -> Digest {
        Digest(hex::encode(Sha256::digest(bytes)))
    }
}

pub(crate) fn is_hex(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit())
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

impl TryFrom<String> for Digest {
    type Error = String;
    fn try_from(text: String) -> Result<Digest, String> {
        Digest::parse(&text)
    }
}

impl From<Digest> for String {
    fn from(digest: Digest) -> String {
        digest.to_string()
    }
}

/// Hashes everything read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    bytes: u64,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    /// Reads what is left (e.g. tar padding after the last entry) so the digest covers it all.
    pub fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((Digest(hex::encode(self.hasher.finalize())), self.bytes))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Hashes everything written through it.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    pub fn finish(self) -> (W, Digest, u64) {
        (
            self.inner,
            Digest(hex::encode(self.hasher.finalize())),
            self.bytes,
        )
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parses_only_full_sha256_digests() {
        let upper = format!("sha256:{}", EMPTY.to_uppercase());
        let cases: Vec<(&str, bool)> = vec![
            (&upper, true),
            ("sha256:abc", false),
            ("sha512:abc", false),
            (EMPTY, false),
            ("", false),
        ];
        for (text, ok) in cases {
            assert_eq!(Digest::parse(text).is_ok(), ok, "{text}");
        }
        let full = format!("sha256:{EMPTY}");
        assert_eq!(Digest::parse(&full).unwrap().to_string(), full);
        assert_eq!(Digest::parse(&upper).unwrap().hex(), EMPTY);
    }

    #[test]
    fn hashing_reader_and_writer_agree_with_sha256() {
        let data = b"hello world";
        let (digest, n) = HashingReader::new(&data[..]).finish().unwrap();
        assert_eq!(n, 11);
        assert_eq!(digest, Digest::of_bytes(data));
        let mut writer = HashingWriter::new(Vec::new());
        writer.write_all(data).unwrap();
        let (out, digest2, _) = writer.finish();
        assert_eq!(out, data);
        assert_eq!(digest2, digest);
        assert_eq!(
            HashingReader::new(&b""[..]).finish().unwrap().0.hex(),
            EMPTY
        );
    }
}
