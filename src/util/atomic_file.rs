//! Crash-safe file replacement: write a temporary sibling, fsync it, rename it over the target,
//! then fsync the directory so the rename itself is durable.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Atomically replaces `path` with `contents` (mode 0644 for new files).
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    write_atomic_with_mode(path, contents, 0o644)
}

/// Atomically replaces `path` with `contents`, creating it with `mode`.
pub fn write_atomic_with_mode(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let tmp = temporary_sibling(path)?;
    let dir = tmp.parent().unwrap_or(Path::new("."));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Replaces `path` with `contents` through a renamed temporary, without fsync: a reader (or a
/// restarted process) sees the old or the new content, never a mix, but after a power loss the
/// old content (or, on filesystems that do not flush data before a rename, an empty file) may
/// be back. For state a power loss makes moot anyway.
pub fn replace_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = temporary_sibling(path)?;
    let result = fs::write(&tmp, contents).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn temporary_sibling(path: &Path) -> io::Result<std::path::PathBuf> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    Ok(dir.join(format!(
        ".{}.tmp.{}.{}",
        name.to_string_lossy(),
        std::process::id(),
        rand::random::<u32>()
    )))
}

/// Serializes `value` as pretty JSON and replaces `path` with it through a rename, without
/// fsync (see [`replace_atomic`]).
pub fn replace_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    replace_atomic(path, &bytes)
}

/// Serializes `value` as pretty JSON and writes it atomically.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("state.json");
        write_atomic(&target, b"one").unwrap();
        write_atomic(&target, b"two").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
    }

    #[test]
    fn replace_without_fsync_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("state.json");
        write_atomic(&target, b"one").unwrap();
        replace_atomic(&target, b"two").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(replace_atomic(&dir.path().join("no/such"), b"x").is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn json_replacement_is_renamed_into_place() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("lease.json");
        replace_json_atomic(&target, &serde_json::json!({"holder": "a"})).unwrap();
        replace_json_atomic(&target, &serde_json::json!({"holder": "b"})).unwrap();
        let read: serde_json::Value = serde_json::from_slice(&fs::read(&target).unwrap()).unwrap();
        assert_eq!(read["holder"], "b");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn failure_keeps_the_old_content() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub").join("x");
        // The parent does not exist: the write fails and nothing is created.
        assert!(write_atomic(&target, b"data").is_err());
        assert!(!target.exists());
    }
}
