//! Disk usage of the image root, for `ImageFsInfo`: real allocated bytes and inodes, each inode
//! counted once however many hardlinks it has.

use super::error::{ImageError, IoContext};
use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsUsage {
    pub used_bytes: u64,
    pub inodes_used: u64,
    /// Mount point of the filesystem holding the image root.
    pub mountpoint: PathBuf,
}

pub fn measure(root: &Path) -> Result<FsUsage, ImageError> {
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut used_bytes = 0u64;
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let entry = match entry {
            Ok(entry) => entry,
            // Entries vanish while imports and removals run: skip them.
            Err(err)
                if err
                    .io_error()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
            {
                continue;
            }
            Err(err) => {
                return Err(ImageError::io(
                    format!("measuring {}", root.display()),
                    err.into(),
                ));
            }
        };
        let Ok(meta) = entry.metadata() else { continue };
        if seen.insert((meta.dev(), meta.ino())) {
            used_bytes += meta.blocks() * 512;
        }
    }
    Ok(FsUsage {
        used_bytes,
        inodes_used: seen.len() as u64,
        mountpoint: mountpoint_of(root)?,
    })
}

/// Walks up from `path` while the parent is on the same device.
fn mountpoint_of(path: &Path) -> Result<PathBuf, ImageError> {
    let path = fs::canonicalize(path).context(|| format!("resolving {}", path.display()))?;
    let dev = |p: &Path| fs::metadata(p).map(|m| m.dev());
    let own = dev(&path).context(|| format!("stat {}", path.display()))?;
    let mut current = path.as_path();
    while let Some(parent) = current.parent() {
        if dev(parent).ok() != Some(own) {
            break;
        }
        current = parent;
    }
    Ok(current.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_hardlinked_inodes_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir(&root).unwrap();
        fs::write(root.join("a"), vec![1u8; 64 << 10]).unwrap();
        let before = measure(&root).unwrap();
        assert_eq!(before.inodes_used, 2); // root dir + a
        assert!(before.used_bytes >= 64 << 10);
        fs::hard_link(root.join("a"), root.join("b")).unwrap();
        let after = measure(&root).unwrap();
        assert_eq!(after.inodes_used, 2);
        assert_eq!(after.used_bytes, before.used_bytes);
        assert!(
            root.starts_with(&after.mountpoint)
                || fs::canonicalize(&root)
                    .unwrap()
                    .starts_with(&after.mountpoint)
        );
    }
}
