//! Safe resolution of a volumeMount's `subPath` (the CVE-2017-1002101 class): the path is walked
//! component by component with `lstat`, symlinks are followed only while they stay inside the
//! volume, and missing directories are created only inside it. The result has no symlink left.
//!
//! What is left to the runtime: the volume's content can change between this check and the bind
//! mount (a container swapping a checked directory for a symlink); a runtime that opens the path
//! with `O_PATH|O_NOFOLLOW` per component (or `openat2` with `RESOLVE_BENEATH`) closes that window.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Symlinks followed at most (as the kernel's ELOOP limit).
const MAX_SYMLINKS: usize = 40;

#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    #[error("must be a relative path")]
    Absolute,
    #[error("must not contain '..'")]
    ParentDir,
    #[error("resolves outside the volume (through {0})")]
    Escapes(PathBuf),
    #[error("too many levels of symbolic links")]
    Loop,
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Checks the subPath text itself: relative and without `..` components.
pub fn check_sub_path(sub_path: &str) -> Result<(), SubPathError> {
    let path = Path::new(sub_path);
    if path.is_absolute() {
        return Err(SubPathError::Absolute);
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(SubPathError::ParentDir);
    }
    Ok(())
}

/// Resolves `sub_path` inside `volume_root`, creating missing directories with `dir_mode`.
/// Returns a host path free of symlinks that lies inside the (canonical) volume root.
pub fn resolve_sub_path(
    volume_root: &Path,
    sub_path: &str,
    dir_mode: u32,
) -> Result<PathBuf, SubPathError> {
    check_sub_path(sub_path)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SubPathError::Io { path, source }
    };
    let root = volume_root.canonicalize().map_err(io(volume_root))?;
    let mut pending: VecDeque<OsString> = components(Path::new(sub_path));
    let mut current = root.clone();
    let mut followed = 0;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            // Only from a symlink target; `current` is resolved, so popping is exact.
            if current == root {
                return Err(SubPathError::Escapes(current.join("..")));
            }
            current.pop();
            continue;
        }
        let next = current.join(&part);
        match fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                followed += 1;
                if followed > MAX_SYMLINKS {
                    return Err(SubPathError::Loop);
                }
                let target = fs::read_link(&next).map_err(io(&next))?;
                let mut target_parts = if target.is_absolute() {
                    // Absolute targets are host paths here; only ones inside the volume are allowed.
                    let inside = target
                        .strip_prefix(&root)
                        .map_err(|_| SubPathError::Escapes(next.clone()))?;
                    current = root.clone();
                    components(inside)
                } else {
                    components(&target)
                };
                target_parts.extend(pending.drain(..));
                pending = target_parts;
            }
            Ok(meta) => {
                if !meta.is_dir() && !pending.is_empty() {
                    return Err(SubPathError::NotADirectory(next));
                }
                current = next;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                match fs::DirBuilder::new().mode(dir_mode).create(&next) {
                    Ok(()) => {
                        // Explicitly, since the umask applies at creation.
                        fs::set_permissions(&next, fs::Permissions::from_mode(dir_mode))
                            .map_err(io(&next))?;
                        current = next;
                    }
                    // Created meanwhile (maybe as a symlink): look at it again.
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => pending.push_front(part),
                    Err(e) => return Err(io(&next)(e)),
                }
            }
            Err(e) => return Err(io(&next)(e)),
        }
    }
    if !current.starts_with(&root) {
        return Err(SubPathError::Escapes(current));
    }
    Ok(current)
}

/// Normal and `..` components as names (`.` and the root are dropped).
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(part) => Some(part.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
    }

    /// A volume with some content and symlinks, and a secret file beside it.
    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("volume");
        let outside = base.join("outside");
        fs::create_dir_all(root.join("data/inner")).unwrap();
        fs::write(root.join("data/file"), "f").unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret"), "s").unwrap();
        symlink("data", root.join("rel-in")).unwrap();
        symlink("../data/inner", root.join("data/up-and-in")).unwrap();
        symlink(root.join("data"), root.join("abs-in")).unwrap();
        symlink("../outside", root.join("rel-out")).unwrap();
        symlink(&outside, root.join("abs-out")).unwrap();
        symlink("/", root.join("to-root")).unwrap();
        symlink("/etc", root.join("to-etc")).unwrap();
        symlink("data/../../outside", root.join("sneaky")).unwrap();
        symlink("loop-b", root.join("loop-a")).unwrap();
        symlink("loop-a", root.join("loop-b")).unwrap();
        symlink("rel-out", root.join("chain")).unwrap();
        symlink("data/file", root.join("file-link")).unwrap();
        Fixture {
            _dir: dir,
            root,
            outside,
        }
    }

    #[test]
    fn resolves_inside_the_volume() {
        let f = fixture();
        let cases: &[(&str, &str)] = &[
            ("", ""),
            ("data", "data"),
            ("./data/./inner", "data/inner"),
            ("data/file", "data/file"),
            ("rel-in", "data"),
            ("rel-in/inner", "data/inner"),
            ("data/up-and-in", "data/inner"),
            ("abs-in/inner", "data/inner"),
            ("file-link", "data/file"),
        ];
        for (sub, expected) in cases {
            let got =
                resolve_sub_path(&f.root, sub, 0o755).unwrap_or_else(|e| panic!("{sub}: {e}"));
            assert_eq!(got, f.root.join(expected), "{sub}");
        }
    }

    #[test]
    fn symlink_attacks_are_refused() {
        let f = fixture();
        let cases: &[&str] = &[
            "rel-out",
            "rel-out/secret",
            "abs-out/secret",
            "to-root",
            "to-root/etc",
            "to-etc/passwd",
            "sneaky/secret",
            "chain/secret",
            "data/../../outside",
            "../outside",
            "/etc",
            "loop-a",
            "data/file/x",
            "rel-out/new-dir",
        ];
        for sub in cases {
            assert!(
                resolve_sub_path(&f.root, sub, 0o755).is_err(),
                "{sub} was accepted"
            );
        }
        // Nothing was created outside.
        let outside: Vec<_> = fs::read_dir(&f.outside).unwrap().collect();
        assert_eq!(outside.len(), 1);
        assert!(!f.outside.join("new-dir").exists());
    }

    #[test]
    fn creates_missing_directories_with_the_volume_mode() {
        let f = fixture();
        let got = resolve_sub_path(&f.root, "rel-in/new/deeper", 0o750).unwrap();
        assert_eq!(got, f.root.join("data/new/deeper"));
        for dir in ["data/new", "data/new/deeper"] {
            let mode = fs::metadata(f.root.join(dir)).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o750, "{dir}");
        }
        // Idempotent.
        assert_eq!(
            resolve_sub_path(&f.root, "rel-in/new/deeper", 0o750).unwrap(),
            got
        );
    }

    #[test]
    fn checks_the_text() {
        assert!(matches!(
            check_sub_path("/abs"),
            Err(SubPathError::Absolute)
        ));
        assert!(matches!(
            check_sub_path("a/../b"),
            Err(SubPathError::ParentDir)
        ));
        assert!(check_sub_path("a/..b/c..").is_ok());
    }
}
