//! Rootfs leases: which holder (container) has a root filesystem made from which image. They
//! are files, so `runp image rm` in another process respects the agent's containers, and they
//! keep their layers alive even after a forced removal of the image.

use super::digest::Digest;
use super::error::{ImageError, IoContext};
use super::rootfs::RootfsKind;
use crate::util::atomic_file::replace_json_atomic;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Lease {
    pub holder: String,
    pub image_id: String,
    /// The image's layers, kept alive while the lease exists.
    pub layers: Vec<Digest>,
    pub container_dir: PathBuf,
    /// Set once the rootfs is complete.
    pub kind: Option<RootfsKind>,
    pub created_at: String,
}

/// Holder names are arbitrary strings; the file name is a hash of them.
pub fn lease_path(dir: &Path, holder: &str) -> PathBuf {
    dir.join(format!(
        "{}.json",
        &Digest::of_bytes(holder.as_bytes()).hex()[..32]
    ))
}

pub fn read(dir: &Path, holder: &str) -> Result<Option<Lease>, ImageError> {
    let path = lease_path(dir, holder);
    match fs::read(&path) {
        Ok(bytes) => parse(&path, &bytes).map(|lease| lease.filter(|l| l.holder == holder)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(ImageError::io(format!("reading {}", path.display()), err)),
    }
}

/// Deletes the temporaries that atomic writes killed before their rename left (`.<name>.tmp.*`).
/// Call with the store lock held: every lease write holds it too.
pub fn remove_temporaries(dir: &Path) -> Result<(), ImageError> {
    for entry in fs::read_dir(dir)
        .context(|| format!("listing {}", dir.display()))?
        .flatten()
    {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.contains(".json.tmp.") {
            let path = entry.path();
            fs::remove_file(&path).context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

pub fn read_all(dir: &Path) -> Result<Vec<Lease>, ImageError> {
    let mut leases = Vec::new();
    for entry in fs::read_dir(dir)
        .context(|| format!("listing {}", dir.display()))?
        .flatten()
    {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue; // temporaries of atomic writes
        }
        let bytes = fs::read(&path).context(|| format!("reading {}", path.display()))?;
        leases.extend(parse(&path, &bytes)?);
    }
    Ok(leases)
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Option<Lease>, ImageError> {
    match serde_json::from_slice(bytes) {
        Ok(lease) => Ok(Some(lease)),
        Err(err) => {
            // A lease we cannot read must not block removals forever, nor be silently lost.
            tracing::warn!("ignoring unreadable lease {}: {err}", path.display());
            Ok(None)
        }
    }
}

/// Replaced atomically but not fsynced: a lease guards layers against removal while a
/// container may run on them, and a power loss ends every container. Another process (`runp
/// image rm`) and a restarted runtime see it as soon as it is renamed into place. Two fsync
/// pairs fewer per CreateContainer (~1 ms on a virtio disk).
pub fn write(dir: &Path, lease: &Lease) -> Result<(), ImageError> {
    let path = lease_path(dir, &lease.holder);
    replace_json_atomic(&path, lease).context(|| format!("writing {}", path.display()))
}

pub fn remove(dir: &Path, holder: &str) -> Result<(), ImageError> {
    let path = lease_path(dir, holder);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(ImageError::io(format!("removing {}", path.display()), err)),
    }
}
