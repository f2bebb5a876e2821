//! Private staging areas under `<root>/tmp/`: an import hashes blobs and unpacks layers there,
//! without the store lock, and the store only changes when the finished pieces are renamed in.
//! A staging area is owned through a flock on its `.lock` file; areas whose lock can be taken
//! belong to a process that died and are removed when a store is opened.

use crate::image::blobs::BlobDir;
use crate::image::error::{ImageError, IoContext};
use crate::image::lock::StoreLock;
use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

pub struct Staging {
    dir: PathBuf,
    lock_path: PathBuf,
    pub blobs: BlobDir,
    _lock: StoreLock,
}

impl Staging {
    /// Creates `<tmp>/<kind>-<pid>-<random>/`. Called with the store lock held, so stale-area
    /// cleanup never sees a lock file before its owner holds it.
    pub fn create(tmp: &Path, kind: &str) -> Result<Staging, ImageError> {
        let name = format!(
            "{kind}-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        );
        let dir = tmp.join(&name);
        let lock_path = tmp.join(format!("{name}.lock"));
        let lock = StoreLock::exclusive(&lock_path)?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .context(|| format!("creating {}", dir.display()))?;
        let blobs = BlobDir::create(dir.join("blobs"))?;
        Ok(Staging {
            dir,
            lock_path,
            blobs,
            _lock: lock,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where a layer with this hex digest is unpacked before being moved into the store.
    pub fn layer_dir(&self, hex: &str) -> PathBuf {
        self.dir.join("layers").join(hex)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Err(err) = fs::remove_dir_all(&self.dir)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("cannot remove staging area {}: {err}", self.dir.display());
        }
        let _ = fs::remove_file(&self.lock_path);
    }
}

/// Removes staging areas left by processes that died. Call with the store lock held.
pub fn remove_stale(tmp: &Path) -> Result<(), ImageError> {
    let entries = fs::read_dir(tmp).context(|| format!("listing {}", tmp.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let is_lock = path.extension().is_some_and(|e| e == "lock");
        if is_lock {
            if let Some(_held) = StoreLock::try_exclusive(&path)? {
                remove_any(&path.with_extension(""));
                let _ = fs::remove_file(&path);
            }
        } else if !path.with_extension("lock").exists() {
            // No lock file: its owner is gone (trash from a collection, or an area whose lock
            // file was already removed).
            remove_any(&path);
        }
    }
    Ok(())
}

/// True while some process holds a staging area: an import that may be relying on layers and
/// blobs already in the store. Call with the store lock held.
pub fn any_live(tmp: &Path) -> Result<bool, ImageError> {
    let entries = fs::read_dir(tmp).context(|| format!("listing {}", tmp.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "lock")
            && StoreLock::try_exclusive(&path)?.is_none()
        {
            return Ok(true);
        }
    }
    Ok(false)
}

fn remove_any(path: &Path) {
    let result = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(_) => return,
    };
    if let Err(err) = result {
        tracing::warn!("cannot remove stale {}: {err}", path.display());
    } else {
        tracing::info!("removed stale staging data {}", path.display());
    }
}
