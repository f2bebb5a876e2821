//! The files of an image source (an OCI layout or docker-save archive, as a directory or a
//! tarball), each handed out as a verified blob in the staging area (or the store's own copy
//! when it already has that digest).
//!
//! A tarball is streamed once: every regular file is hashed into the staging area as it goes
//! by (files named `blobs/sha256/<hex>` must match their name), so nothing is extracted by
//! name and an archive entry can never write outside the staging area.

use super::staging::Staging;
use crate::image::blobs::{BlobDir, StoredBlob};
use crate::image::digest::{Digest, HashingWriter};
use crate::image::error::{ImageError, IoContext};
use crate::image::unpack::compression;
use crate::image::unpack::path_safety::normalize_entry_name;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

/// Progress of reading a source: bytes consumed so far and the total, when known.
pub type ReadProgress<'a> = &'a dyn Fn(u64, u64);

pub struct Source<'a> {
    path: PathBuf,
    staging: &'a Staging,
    store: &'a BlobDir,
    kind: SourceKind,
}

enum SourceKind {
    Dir {
        staged: HashMap<PathBuf, StoredBlob>,
    },
    Archive {
        files: HashMap<PathBuf, StoredBlob>,
    },
}

impl<'a> Source<'a> {
    /// Opens a directory in place, or streams a (possibly compressed) tarball into staging.
    pub fn open(
        path: &Path,
        staging: &'a Staging,
        store: &'a BlobDir,
        progress: ReadProgress<'_>,
    ) -> Result<Source<'a>, ImageError> {
        let meta = std::fs::metadata(path).context(|| format!("opening {}", path.display()))?;
        let kind = if meta.is_dir() {
            SourceKind::Dir {
                staged: HashMap::new(),
            }
        } else {
            SourceKind::Archive {
                files: stream_archive(path, meta.len(), staging, store, progress)?,
            }
        };
        Ok(Source {
            path: path.to_path_buf(),
            staging,
            store,
            kind,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when the source has a regular file at `rel`.
    pub fn has(&self, rel: &str) -> bool {
        let Ok(Some(rel)) = normalize_entry_name(rel.as_bytes()) else {
            return false;
        };
        match &self.kind {
            SourceKind::Dir { .. } => self.path.join(&rel).is_file(),
            SourceKind::Archive { files } => files.contains_key(&rel),
        }
    }

    /// The file at `rel` (a path inside the source, as manifests name them), as a blob.
    pub fn file(&mut self, rel: &str) -> Result<StoredBlob, ImageError> {
        self.get(rel, None)
    }

    /// The blob with `digest`, from the store when it already has it, else from the source's
    /// `blobs/sha256/<hex>` (verified).
    pub fn blob(&mut self, digest: &Digest) -> Result<StoredBlob, ImageError> {
        if let Some(stored) = self.store.get(digest) {
            return Ok(stored);
        }
        self.get(&format!("blobs/sha256/{}", digest.hex()), Some(digest))
    }

    fn get(&mut self, rel_text: &str, expected: Option<&Digest>) -> Result<StoredBlob, ImageError> {
        let missing = || ImageError::invalid_source(&self.path, format!("{rel_text} is missing"));
        let rel = normalize_entry_name(rel_text.as_bytes())
            .map_err(|reason| {
                ImageError::invalid_source(
                    &self.path,
                    format!("bad file name {rel_text:?}: {reason}"),
                )
            })?
            .ok_or_else(missing)?;
        match &mut self.kind {
            SourceKind::Archive { files } => {
                let found = files.get(&rel).cloned().ok_or_else(missing)?;
                if let Some(expected) = expected
                    && found.digest != *expected
                {
                    return Err(ImageError::DigestMismatch {
                        what: rel_text.to_string(),
                        expected: expected.to_string(),
                        actual: found.digest.to_string(),
                    });
                }
                Ok(found)
            }
            SourceKind::Dir { staged } => {
                if let Some(found) = staged.get(&rel) {
                    return Ok(found.clone());
                }
                let full = self.path.join(&rel);
                let file = match File::open(&full) {
                    Ok(file) => file,
                    Err(err) if err.kind() == io::ErrorKind::NotFound => return Err(missing()),
                    Err(err) => {
                        return Err(ImageError::io(format!("opening {}", full.display()), err));
                    }
                };
                let mut reader = BufReader::with_capacity(256 << 10, file);
                let stored = self
                    .staging
                    .blobs
                    .write_verified(&mut reader, expected, rel_text)?;
                staged.insert(rel, stored.clone());
                Ok(stored)
            }
        }
    }
}

/// Counts bytes read, for progress reporting.
struct Counting<'p, R> {
    inner: R,
    done: u64,
    total: u64,
    progress: ReadProgress<'p>,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.done += n as u64;
        (self.progress)(self.done, self.total);
        Ok(n)
    }
}

fn stream_archive(
    path: &Path,
    total: u64,
    staging: &Staging,
    store: &BlobDir,
    progress: ReadProgress<'_>,
) -> Result<HashMap<PathBuf, StoredBlob>, ImageError> {
    let bad = |reason: String| ImageError::invalid_source(path, reason);
    let file = File::open(path).context(|| format!("opening {}", path.display()))?;
    let counting = Counting {
        inner: BufReader::with_capacity(256 << 10, file),
        done: 0,
        total,
        progress,
    };
    let (_, decoded) = compression::decoder(counting).map_err(|e| bad(e.to_string()))?;
    let mut archive = tar::Archive::new(decoded);
    let mut files = HashMap::new();
    // Symlinks and hardlinks (docker save links duplicate layers), resolved after the pass.
    let mut links: HashMap<PathBuf, PathBuf> = HashMap::new();
    let entries = archive
        .entries()
        .map_err(|e| bad(format!("not a tar archive: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(format!("reading archive: {e}")))?;
        let raw = entry.path_bytes().into_owned();
        let Ok(Some(rel)) = normalize_entry_name(&raw) else {
            continue; // never referenced by a valid manifest; nothing is extracted by name
        };
        let kind = entry.header().entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            let Some(target) = entry.link_name_bytes().map(|t| t.into_owned()) else {
                continue;
            };
            let target = String::from_utf8_lossy(&target);
            // Symlink targets are relative to the link's directory, hardlinks to the root.
            let joined = match rel.parent() {
                Some(dir) if kind.is_symlink() && !target.starts_with('/') => {
                    format!("{}/{target}", dir.to_string_lossy())
                }
                _ => target.into_owned(),
            };
            if let Ok(Some(target)) = normalize_symlink_target(&joined) {
                links.insert(rel, target);
            }
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let expected = blob_name_digest(&rel);
        let what = format!("{} in {}", rel.display(), path.display());
        let stored = match expected.as_ref().and_then(|d| store.get(d)) {
            // The store already has it: verify the bytes anyway, keep the store's copy.
            Some(existing) => {
                let mut sink = HashingWriter::new(io::sink());
                io::copy(&mut entry, &mut sink).map_err(|e| bad(format!("reading {what}: {e}")))?;
                let (_, digest, _) = sink.finish();
                if digest != existing.digest {
                    return Err(ImageError::DigestMismatch {
                        what,
                        expected: existing.digest.to_string(),
                        actual: digest.to_string(),
                    });
                }
                existing
            }
            None => staging
                .blobs
                .write_verified(&mut entry, expected.as_ref(), &what)?,
        };
        files.insert(rel, stored);
    }
    for (link, target) in &links {
        let mut current = target;
        for _ in 0..8 {
            if let Some(found) = files.get(current) {
                files.insert(link.clone(), found.clone());
                break;
            }
            match links.get(current) {
                Some(next) => current = next,
                None => break,
            }
        }
    }
    Ok(files)
}

/// Resolves `a/b/../c` lexically (archive symlinks may use `..` within the archive).
fn normalize_symlink_target(text: &str) -> Result<Option<PathBuf>, ()> {
    let mut parts: Vec<&str> = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop().ok_or(())?;
            }
            other => parts.push(other),
        }
    }
    Ok((!parts.is_empty()).then(|| parts.iter().collect()))
}

/// `blobs/sha256/<hex>` → the digest the content must have.
fn blob_name_digest(rel: &Path) -> Option<Digest> {
    let mut parts = rel.iter();
    if parts.next()? != "blobs" || parts.next()? != "sha256" {
        return None;
    }
    let hex = parts.next()?.to_str()?;
    if parts.next().is_some() {
        return None;
    }
    Digest::from_hex(hex).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_blob_names() {
        let hex = "ab".repeat(32);
        assert!(blob_name_digest(Path::new(&format!("blobs/sha256/{hex}"))).is_some());
        assert!(blob_name_digest(Path::new(&format!("blobs/sha512/{hex}"))).is_none());
        assert!(blob_name_digest(Path::new("blobs/sha256/abc")).is_none());
        assert!(blob_name_digest(Path::new(&format!("x/blobs/sha256/{hex}"))).is_none());
    }

    #[test]
    fn resolves_archive_link_targets_lexically() {
        let cases = [
            ("a/../b/layer.tar", Ok(Some(PathBuf::from("b/layer.tar")))),
            ("/x/y", Ok(Some(PathBuf::from("x/y")))),
            ("../x", Err(())),
            (".", Ok(None)),
        ];
        for (text, want) in cases {
            assert_eq!(normalize_symlink_target(text), want, "{text}");
        }
    }
}
