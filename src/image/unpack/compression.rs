//! Layer compression, recognised by magic bytes: media types are often wrong (docker-save
//! archives say "tar" for anything, registries mislabel zstd), the bytes are not.

use std::io::{self, BufReader, Cursor, Read};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// The OCI layer media type for this compression.
    pub fn oci_media_type(self) -> &'static str {
        match self {
            Compression::None => "application/vnd.oci.image.layer.v1.tar",
            Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
            Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
        }
    }
}

const SNIFF_LEN: usize = 6;

/// Recognises the compression from the first bytes of a stream.
pub fn sniff(prefix: &[u8]) -> Result<Compression, String> {
    match prefix {
        [0x1f, 0x8b, ..] => Ok(Compression::Gzip),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Ok(Compression::Zstd),
        [b'B', b'Z', b'h', ..] => Err("bzip2-compressed layers are not supported".into()),
        [0xfd, b'7', b'z', b'X', b'Z', 0x00, ..] => {
            Err("xz-compressed layers are not supported".into())
        }
        _ => Ok(Compression::None),
    }
}

/// Wraps `reader` in the decoder its first bytes call for.
pub fn decoder<'a, R: Read + 'a>(mut reader: R) -> io::Result<(Compression, Box<dyn Read + 'a>)> {
    let mut prefix = [0u8; SNIFF_LEN];
    let mut filled = 0;
    while filled < SNIFF_LEN {
        match reader.read(&mut prefix[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    let compression = sniff(&prefix[..filled]).map_err(io::Error::other)?;
    let whole = Cursor::new(prefix[..filled].to_vec()).chain(reader);
    let buffered = BufReader::with_capacity(256 << 10, whole);
    let decoded: Box<dyn Read + 'a> = match compression {
        Compression::None => Box::new(buffered),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(buffered)?),
    };
    Ok((compression, decoded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn roundtrip(compression: Compression, data: &[u8]) -> Vec<u8> {
        match compression {
            Compression::None => data.to_vec(),
            Compression::Gzip => {
                let mut enc =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                enc.write_all(data).unwrap();
                enc.finish().unwrap()
            }
            Compression::Zstd => zstd::encode_all(data, 1).unwrap(),
        }
    }

    #[test]
    fn decodes_what_the_magic_says() {
        let data = b"some tar-ish bytes".repeat(100);
        for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let encoded = roundtrip(compression, &data);
            let (found, mut reader) = decoder(&encoded[..]).unwrap();
            assert_eq!(found, compression);
            let mut out = Vec::new();
            reader.read_to_end(&mut out).unwrap();
            assert_eq!(out, data);
        }
        // Shorter than the sniff window.
        let (found, mut reader) = decoder(&b"ab"[..]).unwrap();
        assert_eq!(found, Compression::None);
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        assert_eq!(out, b"ab");
        assert!(decoder(&b"BZh91AY"[..]).is_err());
    }
}
