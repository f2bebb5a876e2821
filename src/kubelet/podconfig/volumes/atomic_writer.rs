//! Atomic updates of a volume directory holding API data (configMap, secret, downwardAPI,
//! projected), with the kubelet's `AtomicWriter` layout, so a container reading through the
//! mount sees either the old or the new set of files, never a mix:
//!
//! ```text
//! <dir>/..2024_05_01_10_00_00.123456   the current files (a new directory per version)
//! <dir>/..data -> ..2024_05_01_10_00_00.123456   swapped atomically by rename(2)
//! <dir>/<key>  -> ..data/<key>                    one symlink per top-level name
//! ```

use super::VolumeError;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

/// One file of a payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// Relative path → content.
pub type Payload = BTreeMap<String, FileProjection>;

/// Checks a payload path: relative, no `..` component, not starting with `..` (the writer's own
/// names), within length limits.
pub fn check_payload_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("empty path".into());
    }
    if path.len() > 4096 {
        return Err(format!("{path:?}: longer than 4096 bytes"));
    }
    if Path::new(path).is_absolute() {
        return Err(format!("{path:?}: must be a relative path"));
    }
    if path.starts_with("..") {
        return Err(format!("{path:?}: must not start with '..'"));
    }
    for component in Path::new(path).components() {
        match component {
            Component::ParentDir => return Err(format!("{path:?}: must not contain '..'")),
            Component::Normal(part) if part.len() > 255 => {
                return Err(format!("{path:?}: a component is longer than 255 bytes"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Top-level name of a payload path (`a/b/c` → `a`).
fn top_level(path: &str) -> &str {
    path.trim_start_matches("./")
        .split('/')
        .find(|p| !p.is_empty() && *p != ".")
        .unwrap_or(path)
}

/// Writes `payload` into `target` if it differs from what is there; returns whether it wrote.
/// `set_perms` runs on the new version's directory before it becomes visible (fsGroup).
pub fn write_atomically(
    target: &Path,
    payload: &Payload,
    set_perms: &dyn Fn(&Path) -> Result<(), VolumeError>,
) -> Result<bool, VolumeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| VolumeError::Io { path, source }
    };
    for path in payload.keys() {
        check_payload_path(path).map_err(|reason| VolumeError::Invalid {
            volume: target.display().to_string(),
            reason,
        })?;
    }
    let data_link = target.join(DATA_DIR);
    let old_version = match fs::read_link(&data_link) {
        Ok(old) => Some(old),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(io(&data_link)(e)),
    };
    let new_names: BTreeSet<&str> = payload.keys().map(|p| top_level(p)).collect();
    let old_names = visible_names(target).map_err(io(target))?;
    let unchanged = match &old_version {
        Some(old) => same_content(&target.join(old), payload).map_err(io(target))?,
        None => false,
    };
    if unchanged
        && old_names
            .iter()
            .map(String::as_str)
            .eq(new_names.iter().copied())
    {
        return Ok(false);
    }

    let version = new_version_dir(target)?;
    let version_path = target.join(&version);
    let result = write_payload(&version_path, payload).and_then(|()| set_perms(&version_path));
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&version_path);
        return Err(e);
    }
    // Swap: a fresh symlink renamed over the old one.
    let tmp_link = target.join(DATA_DIR_TMP);
    let _ = fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&version, &tmp_link).map_err(io(&tmp_link))?;
    fs::rename(&tmp_link, &data_link).map_err(io(&data_link))?;

    for name in &new_names {
        let link = target.join(name);
        match fs::symlink_metadata(&link) {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::os::unix::fs::symlink(Path::new(DATA_DIR).join(name), &link)
                    .map_err(io(&link))?;
            }
            Err(e) => return Err(io(&link)(e)),
        }
    }
    for name in old_names.iter().filter(|n| !new_names.contains(n.as_str())) {
        let link = target.join(name);
        match fs::remove_file(&link) {
            Err(e) if e.kind() != ErrorKind::NotFound => return Err(io(&link)(e)),
            _ => {}
        }
    }
    remove_stale_versions(target, &version);
    Ok(true)
}

/// The user-visible entries: everything not starting with `..`.
fn visible_names(target: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(target)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Whether `dir` holds exactly `payload` (content and mode of every file, nothing else).
fn same_content(dir: &Path, payload: &Payload) -> std::io::Result<bool> {
    let mut count = 0;
    for entry in walkdir::WalkDir::new(dir).min_depth(1) {
        let entry = entry.map_err(std::io::Error::other)?;
        if !entry.file_type().is_file() {
            continue;
        }
        count += 1;
        let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
        let Some(wanted) = rel.to_str().and_then(|r| payload.get(r)) else {
            return Ok(false);
        };
        let mode = entry
            .metadata()
            .map_err(std::io::Error::other)?
            .permissions()
            .mode()
            & 0o7777;
        if mode != wanted.mode || fs::read(entry.path())? != wanted.data {
            return Ok(false);
        }
    }
    Ok(count == payload.len())
}

/// Creates `..<timestamp>.<random>` under `target`.
fn new_version_dir(target: &Path) -> Result<String, VolumeError> {
    let stamp = chrono::Utc::now().format("%Y_%m_%d_%H_%M_%S%.6f");
    for _ in 0..16 {
        let name = format!("..{stamp}{:06}", rand::random::<u32>() % 1_000_000);
        let path = target.join(&name);
        match fs::create_dir(&path) {
            Ok(()) => {
                fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
                    .map_err(|source| VolumeError::Io { path, source })?;
                return Ok(name);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(VolumeError::Io { path, source }),
        }
    }
    Err(VolumeError::Invalid {
        volume: target.display().to_string(),
        reason: "cannot create a unique version directory".into(),
    })
}

fn write_payload(dir: &Path, payload: &Payload) -> Result<(), VolumeError> {
    for (rel, file) in payload {
        let path = dir.join(rel);
        let io = |source| VolumeError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io)?;
        }
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(file.mode)
            .open(&path)
            .map_err(io)?;
        out.write_all(&file.data).map_err(io)?;
        // Explicitly, since the umask applies at creation.
        fs::set_permissions(&path, fs::Permissions::from_mode(file.mode)).map_err(io)?;
    }
    Ok(())
}

/// Removes version directories other than `current` (the previous one, and leftovers of an
/// interrupted write).
fn remove_stale_versions(target: &Path, current: &str) {
    let Ok(entries) = fs::read_dir(target) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let is_version = name.starts_with("..") && name != DATA_DIR && name != DATA_DIR_TMP;
        if is_version
            && name != current
            && entry.file_type().is_ok_and(|t| t.is_dir())
            && let Err(e) = fs::remove_dir_all(entry.path())
        {
            tracing::warn!(path = %entry.path().display(), "cannot remove old volume data: {e}");
        }
    }
}

/// The directory `..data` currently points to (for tests and diagnostics).
pub fn current_version(target: &Path) -> Option<PathBuf> {
    fs::read_link(target.join(DATA_DIR)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(files: &[(&str, &str, u32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    FileProjection {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                    },
                )
            })
            .collect()
    }

    fn no_perms(_: &Path) -> Result<(), VolumeError> {
        Ok(())
    }

    fn read(path: &Path) -> String {
        fs::read_to_string(path).unwrap()
    }

    #[test]
    fn writes_swaps_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        let first = payload(&[("a", "1", 0o644), ("sub/b", "2", 0o600)]);
        assert!(write_atomically(t, &first, &no_perms).unwrap());
        assert_eq!(read(&t.join("a")), "1");
        assert_eq!(read(&t.join("sub/b")), "2");
        assert_eq!(fs::read_link(t.join("a")).unwrap(), Path::new("..data/a"));
        let mode = fs::metadata(t.join("sub/b")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let v1 = current_version(t).unwrap();

        // Same payload: nothing written.
        assert!(!write_atomically(t, &first, &no_perms).unwrap());
        assert_eq!(current_version(t).unwrap(), v1);

        // A mode change alone is a change.
        let chmod = payload(&[("a", "1", 0o640), ("sub/b", "2", 0o600)]);
        assert!(write_atomically(t, &chmod, &no_perms).unwrap());

        // New content, a key removed, one added.
        let second = payload(&[("a", "one", 0o644), ("c", "3", 0o644)]);
        assert!(write_atomically(t, &second, &no_perms).unwrap());
        assert_eq!(read(&t.join("a")), "one");
        assert_eq!(read(&t.join("c")), "3");
        assert!(
            fs::symlink_metadata(t.join("sub")).is_err(),
            "stale link removed"
        );
        assert!(!t.join(&v1).exists(), "old version removed");
        let names: Vec<String> = fs::read_dir(t)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".."))
            .collect();
        assert_eq!(names.len(), 2, "only ..data and one version: {names:?}");

        // Emptied.
        assert!(write_atomically(t, &Payload::new(), &no_perms).unwrap());
        assert!(visible_names(t).unwrap().is_empty());
    }

    #[test]
    fn a_reader_holding_the_old_version_keeps_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        write_atomically(t, &payload(&[("x", "old", 0o644)]), &no_perms).unwrap();
        // Opened before the swap: still reads the old content.
        let old = fs::File::open(t.join("x")).unwrap();
        write_atomically(t, &payload(&[("x", "new", 0o644)]), &no_perms).unwrap();
        assert_eq!(std::io::read_to_string(old).unwrap(), "old");
        assert_eq!(read(&t.join("x")), "new");
    }

    #[test]
    fn refuses_bad_paths_and_leaves_the_old_version() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        write_atomically(t, &payload(&[("x", "1", 0o644)]), &no_perms).unwrap();
        for bad in ["/etc/passwd", "../x", "a/../../x", "..data", "..x", ""] {
            let result = write_atomically(t, &payload(&[(bad, "evil", 0o644)]), &no_perms);
            assert!(result.is_err(), "{bad:?} accepted");
        }
        assert_eq!(read(&t.join("x")), "1");
        // A failing permission hook aborts before the swap.
        let failing = |p: &Path| -> Result<(), VolumeError> {
            Err(VolumeError::Invalid {
                volume: p.display().to_string(),
                reason: "nope".into(),
            })
        };
        assert!(write_atomically(t, &payload(&[("x", "2", 0o644)]), &failing).is_err());
        assert_eq!(read(&t.join("x")), "1");
    }

    #[test]
    fn removes_leftovers_of_interrupted_writes() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        fs::create_dir(t.join("..2020_01_01_00_00_00.000000123")).unwrap();
        write_atomically(t, &payload(&[("x", "1", 0o644)]), &no_perms).unwrap();
        assert!(!t.join("..2020_01_01_00_00_00.000000123").exists());
    }
}
