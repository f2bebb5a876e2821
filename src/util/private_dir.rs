//! Directories that hold secrets (container specs with their env, pod volumes with Secret
//! files): created with a mode that keeps other users out, and tightened when they exist
//! already with looser bits (an operator's `mkdir`, an older runp).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// Creates `path` (and its parents) with `mode`; an existing `path` loses the group and other
/// bits that `mode` does not have. Parents that exist already are left as they are.
pub fn ensure_private_dir(path: &Path, mode: u32) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)?;
    let current = fs::metadata(path)?.permissions().mode() & 0o7777;
    let tightened = current & !(0o077 & !mode);
    if tightened != current {
        tracing::info!(path = %path.display(), from = format!("{current:o}"), to = format!("{tightened:o}"),
            "tightening the mode of a private directory");
        fs::set_permissions(path, fs::Permissions::from_mode(tightened))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn creates_and_tightens() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("a/b");
        ensure_private_dir(&fresh, 0o700).unwrap();
        assert_eq!(mode(&fresh), 0o700);

        let loose = dir.path().join("loose");
        fs::create_dir(&loose).unwrap();
        fs::set_permissions(&loose, fs::Permissions::from_mode(0o777)).unwrap();
        ensure_private_dir(&loose, 0o750).unwrap();
        assert_eq!(mode(&loose), 0o750);
        // Tighter than asked stays as it is (only bits are removed).
        fs::set_permissions(&loose, fs::Permissions::from_mode(0o700)).unwrap();
        ensure_private_dir(&loose, 0o750).unwrap();
        assert_eq!(mode(&loose), 0o700);
    }
}
