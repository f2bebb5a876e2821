//! Content-addressed blob directories (`<dir>/<hex>`): the store's `blobs/sha256/` and each
//! import's staging area. A blob only ever appears under its name after its bytes were hashed
//! and matched: data streams through sha256 into a temporary file that is renamed into place.

use super::digest::{Digest, HashingWriter};
use super::error::{ImageError, IoContext};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct BlobDir {
    dir: PathBuf,
}

/// A blob that was verified and is readable at `path`.
#[derive(Clone, Debug)]
pub struct StoredBlob {
    pub digest: Digest,
    pub size: u64,
    pub path: PathBuf,
}

/// Refuse to hold more than this in memory when a blob is read as JSON (manifests, configs).
pub const MAX_JSON_BLOB: u64 = 16 << 20;

impl BlobDir {
    pub fn create(dir: PathBuf) -> Result<BlobDir, ImageError> {
        fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
        Ok(BlobDir { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.hex())
    }

    /// The blob, when this directory holds it.
    pub fn get(&self, digest: &Digest) -> Option<StoredBlob> {
        let path = self.path(digest);
        let meta = fs::symlink_metadata(&path).ok()?;
        meta.is_file().then(|| StoredBlob {
            digest: digest.clone(),
            size: meta.len(),
            path,
        })
    }

    /// Streams `reader` into the directory, hashing it on the way. With `expected`, the blob is
    /// kept only if the content matches. An existing blob with the same digest is kept as is
    /// (the new bytes were still verified, so the caller's input is checked either way).
    pub fn write_verified(
        &self,
        reader: &mut dyn Read,
        expected: Option<&Digest>,
        what: &str,
    ) -> Result<StoredBlob, ImageError> {
        let tmp = self.dir.join(format!(
            ".incoming-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let result = self.write_to(&tmp, reader, expected, what);
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    fn write_to(
        &self,
        tmp: &Path,
        reader: &mut dyn Read,
        expected: Option<&Digest>,
        what: &str,
    ) -> Result<StoredBlob, ImageError> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(tmp)
            .context(|| format!("creating {}", tmp.display()))?;
        let mut writer = HashingWriter::new(BufWriter::with_capacity(256 << 10, file));
        io::copy(reader, &mut writer).context(|| format!("reading {what}"))?;
        let (buffered, digest, size) = writer.finish();
        if let Some(expected) = expected
            && *expected != digest
        {
            return Err(ImageError::DigestMismatch {
                what: what.to_string(),
                expected: expected.to_string(),
                actual: digest.to_string(),
            });
        }
        let file = buffered
            .into_inner()
            .map_err(|e| e.into_error())
            .context(|| format!("writing {}", tmp.display()))?;
        file.sync_all()
            .context(|| format!("syncing {}", tmp.display()))?;
        let path = self.path(&digest);
        if self.get(&digest).is_some() {
            fs::remove_file(tmp).context(|| format!("removing {}", tmp.display()))?;
        } else {
            fs::rename(tmp, &path).context(|| format!("storing {}", path.display()))?;
        }
        Ok(StoredBlob { digest, size, path })
    }

    /// Stores in-memory bytes (e.g. a synthesized manifest) under their digest.
    pub fn write_bytes(&self, bytes: &[u8], what: &str) -> Result<StoredBlob, ImageError> {
        self.write_verified(&mut &bytes[..], None, what)
    }
}

/// Reads a small blob (manifest, config, index) fully, refusing oversized ones.
pub fn read_json_blob(path: &Path, what: &str) -> Result<Vec<u8>, ImageError> {
    let file = File::open(path).context(|| format!("opening {what} at {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_JSON_BLOB + 1)
        .read_to_end(&mut bytes)
        .context(|| format!("reading {what}"))?;
    if bytes.len() as u64 > MAX_JSON_BLOB {
        return Err(ImageError::invalid_source(
            path,
            format!("{what} is larger than {MAX_JSON_BLOB} bytes"),
        ));
    }
    Ok(bytes)
}

/// Reads `path` through sha256 and checks it matches `expected` (for blobs read in place).
pub fn verify_file(path: &Path, expected: &Digest, what: &str) -> Result<u64, ImageError> {
    let file = File::open(path).context(|| format!("opening {what} at {}", path.display()))?;
    let mut writer = HashingWriter::new(io::sink());
    io::copy(
        &mut io::BufReader::with_capacity(256 << 10, file),
        &mut writer,
    )
    .context(|| format!("reading {what}"))?;
    let (_, digest, size) = writer.finish();
    if digest != *expected {
        return Err(ImageError::DigestMismatch {
            what: what.to_string(),
            expected: expected.to_string(),
            actual: digest.to_string(),
        });
    }
    Ok(size)
}

/// Flushes a directory entry change (rename/create) to disk.
pub fn sync_dir(dir: &Path) -> Result<(), ImageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .context(|| format!("syncing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_only_matching_content() {
        let tmp = tempfile::tempdir().unwrap();
        let blobs = BlobDir::create(tmp.path().join("b")).unwrap();
        let good = Digest::of_bytes(b"abc");
        let stored = blobs
            .write_verified(&mut &b"abc"[..], Some(&good), "blob")
            .unwrap();
        assert_eq!(fs::read(&stored.path).unwrap(), b"abc");
        assert_eq!(stored.size, 3);

        let err = blobs
            .write_verified(&mut &b"abd"[..], Some(&good), "blob")
            .unwrap_err();
        assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
        // Only the good blob remains: no temporaries, no mismatching content.
        let names: Vec<_> = fs::read_dir(blobs.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec![good.hex().to_string()]);
        assert_eq!(verify_file(&stored.path, &good, "blob").unwrap(), 3);
        assert!(verify_file(&stored.path, &Digest::of_bytes(b"x"), "blob").is_err());
    }
}
