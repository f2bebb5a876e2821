//! Cross-process locking of the store's metadata. The agent and `runp image ...` may use one
//! store at once; every metadata change (records, leases, commits of imports, garbage
//! collection) happens under the exclusive lock, readers take it shared. Heavy work (hashing,
//! unpacking) happens before the lock is taken, in private staging directories.

use super::error::{ImageError, IoContext};
use std::fs::{File, OpenOptions};
use std::path::Path;

/// Held lock; released on drop (closing the file releases the flock).
pub struct StoreLock {
    _file: File,
}

impl StoreLock {
    pub fn exclusive(path: &Path) -> Result<StoreLock, ImageError> {
        let file = open(path)?;
        file.lock()
            .context(|| format!("locking {}", path.display()))?;
        Ok(StoreLock { _file: file })
    }

    pub fn shared(path: &Path) -> Result<StoreLock, ImageError> {
        let file = open(path)?;
        file.lock_shared()
            .context(|| format!("locking {}", path.display()))?;
        Ok(StoreLock { _file: file })
    }

    /// Exclusive, without waiting: `None` when someone else holds it.
    pub fn try_exclusive(path: &Path) -> Result<Option<StoreLock>, ImageError> {
        let file = open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(StoreLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(err)) => {
                Err(ImageError::io(format!("locking {}", path.display()), err))
            }
        }
    }
}

fn open(path: &Path) -> Result<File, ImageError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .context(|| format!("opening lock file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_excludes_and_is_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = StoreLock::exclusive(&path).unwrap();
        // A second open file description conflicts even within one process.
        assert!(StoreLock::try_exclusive(&path).unwrap().is_none());
        drop(held);
        assert!(StoreLock::try_exclusive(&path).unwrap().is_some());
        let _a = StoreLock::shared(&path).unwrap();
        let _b = StoreLock::shared(&path).unwrap();
        assert!(StoreLock::try_exclusive(&path).unwrap().is_none());
    }
}
