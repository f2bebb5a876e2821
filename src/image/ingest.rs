//! Partial downloads, `<root>/ingest/<hex>`: a blob being fetched is appended here and hashed
//! as it arrives, and moves into a blob directory only once it is complete and its sha256
//! matches. A partial outlives a failed pull, so the next attempt resumes where the last one
//! stopped (the caller asks for the rest with an HTTP Range); a mismatching one is deleted.
//! Writers hold a flock on the file; unlocked partials older than the store's
//! `ingest_max_age` are removed by garbage collection.

use super::blobs::{BlobDir, StoredBlob};
use super::digest::Digest;
use super::error::{ImageError, IoContext};
use sha2::{Digest as _, Sha256};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A blob being downloaded: what is on disk so far, and its running hash.
pub struct PartialBlob {
    path: PathBuf,
    file: File,
    hasher: Sha256,
    written: u64,
    digest: Digest,
    size: u64,
}

impl PartialBlob {
    /// Opens the partial for `digest` (expected to be `size` bytes), keeping what an earlier
    /// attempt wrote. When another writer holds it, a private partial is used instead (that
    /// download starts from zero rather than wait).
    pub fn open(dir: &Path, digest: &Digest, size: u64) -> Result<PartialBlob, ImageError> {
        let shared = dir.join(digest.hex());
        let (path, file) = match open_locked(&shared)? {
            Some(file) => (shared, file),
            None => {
                let private = dir.join(format!(
                    "{}.{}-{:08x}",
                    digest.hex(),
                    std::process::id(),
                    rand::random::<u32>()
                ));
                let file = open_locked(&private)?.ok_or_else(|| {
                    ImageError::io(
                        format!("locking {}", private.display()),
                        io::Error::from(io::ErrorKind::WouldBlock),
                    )
                })?;
                (private, file)
            }
        };
        let mut partial = PartialBlob {
            path,
            file,
            hasher: Sha256::new(),
            written: 0,
            digest: digest.clone(),
            size,
        };
        partial.rehash()?;
        Ok(partial)
    }

    /// Bytes already on disk: where the download resumes.
    pub fn offset(&self) -> u64 {
        self.written
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Forgets what was written (the server sent the whole blob instead of the rest).
    pub fn restart(&mut self) -> Result<(), ImageError> {
        self.file
            .set_len(0)
            .and_then(|()| self.file.seek(SeekFrom::Start(0)).map(drop))
            .context(|| format!("truncating {}", self.path.display()))?;
        self.hasher = Sha256::new();
        self.written = 0;
        Ok(())
    }

    /// Appends `data`. More than the expected size is refused, and the partial deleted.
    pub fn write(&mut self, data: &[u8], what: &str) -> Result<(), ImageError> {
        let total = self.written + data.len() as u64;
        if total > self.size {
            self.discard();
            return Err(ImageError::SizeMismatch {
                what: what.to_string(),
                expected: self.size,
                actual: format!("more than {total} bytes"),
            });
        }
        self.file
            .write_all(data)
            .context(|| format!("writing {}", self.path.display()))?;
        self.hasher.update(data);
        self.written = total;
        Ok(())
    }

    /// Checks size and digest and moves the blob into `blobs`. On a mismatch the partial is
    /// deleted: its bytes can never become the blob.
    pub fn commit(mut self, blobs: &BlobDir, what: &str) -> Result<StoredBlob, ImageError> {
        if self.written != self.size {
            let written = self.written;
            self.discard();
            return Err(ImageError::SizeMismatch {
                what: what.to_string(),
                expected: self.size,
                actual: written.to_string(),
            });
        }
        let actual = Digest::from_hex(&hex::encode(self.hasher.clone().finalize()))
            .map_err(|reason| ImageError::io(reason, io::Error::other("bad digest")))?;
        if actual != self.digest {
            self.discard();
            return Err(ImageError::DigestMismatch {
                what: what.to_string(),
                expected: self.digest.to_string(),
                actual: actual.to_string(),
            });
        }
        self.file
            .sync_all()
            .context(|| format!("syncing {}", self.path.display()))?;
        let dest = blobs.path(&self.digest);
        if blobs.get(&self.digest).is_some() {
            fs::remove_file(&self.path).context(|| format!("removing {}", self.path.display()))?;
        } else {
            fs::rename(&self.path, &dest).context(|| format!("storing {}", dest.display()))?;
        }
        Ok(StoredBlob {
            digest: self.digest.clone(),
            size: self.size,
            path: dest,
        })
    }

    /// Deletes the partial (its content is wrong, not merely incomplete).
    pub fn discard(&mut self) {
        if let Err(err) = fs::remove_file(&self.path)
            && err.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!("cannot remove {}: {err}", self.path.display());
        }
        self.written = 0;
    }

    /// Hashes what is already on disk; content longer than the blob can only be wrong.
    fn rehash(&mut self) -> Result<(), ImageError> {
        let len = self
            .file
            .metadata()
            .context(|| format!("reading {}", self.path.display()))?
            .len();
        if len > self.size {
            return self.restart();
        }
        self.file
            .seek(SeekFrom::Start(0))
            .context(|| format!("reading {}", self.path.display()))?;
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = self
                .file
                .read(&mut buf)
                .context(|| format!("reading {}", self.path.display()))?;
            if n == 0 {
                break;
            }
            self.hasher.update(&buf[..n]);
            self.written += n as u64;
        }
        Ok(())
    }
}

/// Opens and flocks `path` (creating it). `None` when another writer holds it. Retries when
/// garbage collection unlinked the file between our open and our lock.
fn open_locked(path: &Path) -> Result<Option<File>, ImageError> {
    for _ in 0..3 {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(err)) => {
                return Err(ImageError::io(format!("locking {}", path.display()), err));
            }
        }
        let ours = file
            .metadata()
            .context(|| format!("reading {}", path.display()))?;
        match fs::metadata(path) {
            Ok(now) if now.ino() == ours.ino() && now.dev() == ours.dev() => {
                let mut file = file;
                file.seek(SeekFrom::End(0))
                    .context(|| format!("reading {}", path.display()))?;
                return Ok(Some(file));
            }
            _ => continue,
        }
    }
    Err(ImageError::io(
        format!("opening {}", path.display()),
        io::Error::other("the file keeps being replaced"),
    ))
}

/// Removes partials nobody is writing that were last touched more than `max_age` before
/// `now`. Returns how many were removed.
pub fn remove_stale(dir: &Path, now: SystemTime, max_age: Duration) -> Result<usize, ImageError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(ImageError::io(format!("listing {}", dir.display()), err)),
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let touched = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let stale = now.duration_since(touched).is_ok_and(|age| age > max_age);
        if !stale || !meta.is_file() {
            continue;
        }
        let Ok(file) = File::open(&path) else {
            continue;
        };
        // A writer holds its partial locked: skip it, however old it looks.
        if file.try_lock().is_ok() {
            fs::remove_file(&path).context(|| format!("removing {}", path.display()))?;
            tracing::info!(partial = %path.display(), "removed a stale partial download");
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, PathBuf, BlobDir) {
        let tmp = tempfile::tempdir().unwrap();
        let ingest = tmp.path().join("ingest");
        fs::create_dir(&ingest).unwrap();
        let blobs = BlobDir::create(tmp.path().join("blobs")).unwrap();
        (tmp, ingest, blobs)
    }

    #[test]
    fn resumes_where_an_earlier_attempt_stopped() {
        let (_tmp, ingest, blobs) = setup();
        let data = b"hello, partial world";
        let digest = Digest::of_bytes(data);
        let mut first = PartialBlob::open(&ingest, &digest, data.len() as u64).unwrap();
        first.write(&data[..7], "blob").unwrap();
        drop(first);
        let mut second = PartialBlob::open(&ingest, &digest, data.len() as u64).unwrap();
        assert_eq!(second.offset(), 7);
        second.write(&data[7..], "blob").unwrap();
        let stored = second.commit(&blobs, "blob").unwrap();
        assert_eq!(fs::read(&stored.path).unwrap(), data);
        assert_eq!(fs::read_dir(&ingest).unwrap().count(), 0, "partial moved");
    }

    #[test]
    fn mismatching_content_is_deleted() {
        let (_tmp, ingest, blobs) = setup();
        let digest = Digest::of_bytes(b"right");
        let mut partial = PartialBlob::open(&ingest, &digest, 5).unwrap();
        partial.write(b"wrong", "blob").unwrap();
        let err = partial.commit(&blobs, "blob").unwrap_err();
        assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
        assert_eq!(fs::read_dir(&ingest).unwrap().count(), 0);
        assert!(blobs.get(&digest).is_none());

        let mut long = PartialBlob::open(&ingest, &digest, 5).unwrap();
        let err = long.write(b"toolong", "blob").unwrap_err();
        assert!(matches!(err, ImageError::SizeMismatch { .. }), "{err}");
        assert_eq!(fs::read_dir(&ingest).unwrap().count(), 0);
    }

    #[test]
    fn concurrent_writers_get_separate_files() {
        let (_tmp, ingest, blobs) = setup();
        let digest = Digest::of_bytes(b"abc");
        let mut a = PartialBlob::open(&ingest, &digest, 3).unwrap();
        let mut b = PartialBlob::open(&ingest, &digest, 3).unwrap();
        assert_ne!(a.path(), b.path());
        a.write(b"abc", "a").unwrap();
        b.write(b"abc", "b").unwrap();
        a.commit(&blobs, "a").unwrap();
        b.commit(&blobs, "b").unwrap();
        assert_eq!(fs::read_dir(&ingest).unwrap().count(), 0);
        assert!(blobs.get(&digest).is_some());
    }

    #[test]
    fn collects_only_old_unlocked_partials() {
        let (_tmp, ingest, _blobs) = setup();
        let digest = Digest::of_bytes(b"abc");
        let held = PartialBlob::open(&ingest, &digest, 3).unwrap();
        fs::write(ingest.join("old"), b"x").unwrap();
        let now = SystemTime::now();
        let day = Duration::from_secs(86_400);
        assert_eq!(
            remove_stale(&ingest, now, day).unwrap(),
            0,
            "nothing is old yet"
        );
        let later = now + 2 * day;
        assert_eq!(
            remove_stale(&ingest, later, day).unwrap(),
            1,
            "the held one stays"
        );
        assert!(held.path().exists());
        assert!(!ingest.join("old").exists());
        drop(held);
        assert_eq!(remove_stale(&ingest, later, day).unwrap(), 1);
    }
}
