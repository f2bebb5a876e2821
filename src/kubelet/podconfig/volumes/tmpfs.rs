//! Memory-backed volume directories (emptyDir medium Memory, secrets, projected) and the mount
//! bookkeeping teardown needs.

use nix::mount::{MntFlags, MsFlags};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Whether `path` is the root of a mount (its device differs from its parent's).
pub fn is_mount_point(path: &Path) -> bool {
    let parent = path.parent().unwrap_or(path);
    match (std::fs::symlink_metadata(path), std::fs::metadata(parent)) {
        (Ok(me), Ok(up)) => me.dev() != up.dev(),
        _ => false,
    }
}

/// Mounts a tmpfs on `dir` (an existing directory) unless one is there; `Err` carries the
/// reason when mounting is not permitted.
pub fn mount_tmpfs(dir: &Path, size_bytes: Option<u64>) -> Result<(), nix::Error> {
    if is_mount_point(dir) {
        return Ok(());
    }
    let mut options = String::from("mode=0777");
    if let Some(size) = size_bytes.filter(|s| *s > 0) {
        options.push_str(&format!(",size={size}"));
    }
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
}

/// Mount points at or below `dir`, deepest first (from /proc/self/mountinfo).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    // mountinfo names mount points by their resolved paths.
    let dir = &dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mountinfo(field)))
        .filter(|mount_point| mount_point.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let octal = std::str::from_utf8(&bytes[i + 1..i + 4]).ok();
            if let Some(value) = octal.and_then(|o| u8::from_str_radix(o, 8).ok()) {
                out.push(value);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detaches every mount at or below `dir`.
pub fn unmount_all_under(dir: &Path) -> Result<(), (PathBuf, nix::Error)> {
    for mount_point in mounts_under(dir) {
        match nix::mount::umount2(&mount_point, MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => {}
            Err(e) => return Err((mount_point, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo_fields() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
        assert_eq!(unescape_mountinfo("/tab\\011x\\134"), "/tab\tx\\");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo("/end\\04"), "/end\\04");
    }

    #[test]
    fn finds_the_root_mount_point() {
        assert!(
            mounts_under(Path::new("/"))
                .iter()
                .any(|p| p == Path::new("/"))
        );
        assert!(mounts_under(Path::new("/definitely/not/mounted")).is_empty());
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_mount_point(dir.path()));
    }
}
