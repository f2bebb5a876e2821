//! Removing pod directories without crossing into mounts.

use crate::kubelet::podconfig::volumes::tmpfs::mounts_under;
use std::io;
use std::path::Path;

/// Removes `path` recursively without descending into mounts: a volume still mounted below
/// it (or a bind mount of host data, which a device check cannot tell from the same
/// filesystem) makes the removal fail instead of deleting what the mount shows.
pub fn remove_dir_same_fs(path: &Path) -> io::Result<()> {
    if !path.exists() {
        return Ok(());
    }
    if let Some(mounted) = mounts_under(path).first() {
        return Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!("{} is still mounted", mounted.display()),
        ));
    }
    for entry in walkdir::WalkDir::new(path)
        .same_file_system(true)
        .contents_first(true)
    {
        let entry = entry.map_err(io::Error::other)?;
        let result = if entry.file_type().is_dir() {
            std::fs::remove_dir(entry.path())
        } else {
            std::fs::remove_file(entry.path())
        };
        match result {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                return Err(io::Error::new(
                    err.kind(),
                    format!("removing {}: {err}", entry.path().display()),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("pod");
        std::fs::create_dir_all(root.join("volumes/a/b")).unwrap();
        std::fs::write(root.join("volumes/a/b/file"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("volumes/link")).unwrap();
        remove_dir_same_fs(&root).unwrap();
        assert!(!root.exists());
        assert!(Path::new("/etc/hostname").exists() || Path::new("/etc").exists());
        remove_dir_same_fs(&root).unwrap();
    }
}
