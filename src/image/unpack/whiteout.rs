//! OCI whiteouts (`.wh.<name>`, `.wh..wh..opq`) and the two on-disk forms a layer can have.
//!
//! In [`LayerFormat::Overlay`] a whiteout is a character device 0:0 and an opaque directory
//! carries `trusted.overlay.opaque=y` (read by a root overlay mount) and/or
//! `user.overlay.opaque=y` (read by a `userxattr` mount, e.g. in a user namespace): the layer
//! tree is directly an overlayfs lowerdir. When the store cannot make that form (no `mknod`,
//! no xattrs), the markers are kept as OCI files ([`LayerFormat::Portable`]) and only the copy
//! fallback can apply them. The copy fallback understands both forms.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

pub const WHITEOUT_PREFIX: &[u8] = b".wh.";
pub const OPAQUE_MARKER: &[u8] = b".wh..wh..opq";
pub const TRUSTED_OPAQUE_XATTR: &str = "trusted.overlay.opaque";
pub const USER_OPAQUE_XATTR: &str = "user.overlay.opaque";

/// How an unpacked layer stores whiteouts and opaque directories.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LayerFormat {
    /// Overlayfs form; the flags say which opaque xattrs the layer's opaque dirs carry.
    Overlay {
        trusted_xattr: bool,
        user_xattr: bool,
    },
    /// OCI marker files kept as they were in the tar.
    Portable,
}

/// What a (normalized) entry path means for whiteout handling.
#[derive(Debug, PartialEq, Eq)]
pub enum Marker {
    /// An ordinary entry.
    None,
    /// `<dir>/.wh..wh..opq`: hide everything below `dir` from lower layers.
    Opaque(PathBuf),
    /// `<dir>/.wh.<name>`: delete `<dir>/<name>` from lower layers.
    Whiteout(PathBuf),
    /// Another `.wh..wh.` name (aufs bookkeeping such as `.wh..wh.plnk`): meaningless here.
    Internal,
    /// A whiteout whose target is not a usable name (`.wh.`, `.wh..`, `.wh...`).
    Invalid,
}

/// Classifies an entry path by its file name.
pub fn classify(rel: &Path) -> Marker {
    let Some(name) = rel.file_name() else {
        return Marker::None;
    };
    let parent = rel.parent().unwrap_or(Path::new(""));
    classify_name(name).map_or(Marker::None, |marker| match marker {
        NameMarker::Opaque => Marker::Opaque(parent.to_path_buf()),
        NameMarker::Whiteout(target) => Marker::Whiteout(parent.join(target)),
        NameMarker::Internal => Marker::Internal,
        NameMarker::Invalid => Marker::Invalid,
    })
}

/// The meaning of a single file name, for walking an unpacked tree.
#[derive(Debug, PartialEq, Eq)]
pub enum NameMarker<'a> {
    Opaque,
    Whiteout(&'a OsStr),
    Internal,
    Invalid,
}

pub fn classify_name(name: &OsStr) -> Option<NameMarker<'_>> {
    let bytes = name.as_bytes();
    if bytes == OPAQUE_MARKER {
        return Some(NameMarker::Opaque);
    }
    let rest = bytes.strip_prefix(WHITEOUT_PREFIX)?;
    if rest.starts_with(WHITEOUT_PREFIX) {
        return Some(NameMarker::Internal);
    }
    match rest {
        b"" | b"." | b".." => Some(NameMarker::Invalid),
        target => Some(NameMarker::Whiteout(OsStr::from_bytes(target))),
    }
}

/// An overlayfs whiteout: a character device with device number 0:0.
pub fn is_whiteout_device(meta: &fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// True when the directory carries either overlay opaque xattr.
pub fn has_opaque_xattr(dir: &Path) -> bool {
    [TRUSTED_OPAQUE_XATTR, USER_OPAQUE_XATTR]
        .iter()
        .any(|name| matches!(xattr::get(dir, name), Ok(Some(v)) if v == b"y"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_marker_names() {
        let cases: Vec<(&str, Marker)> = vec![
            ("a/b", Marker::None),
            ("a/.wh..wh..opq", Marker::Opaque(PathBuf::from("a"))),
            (".wh..wh..opq", Marker::Opaque(PathBuf::from(""))),
            ("a/.wh.b", Marker::Whiteout(PathBuf::from("a/b"))),
            (".wh.etc", Marker::Whiteout(PathBuf::from("etc"))),
            (
                "a/.wh..hidden",
                Marker::Whiteout(PathBuf::from("a/.hidden")),
            ),
            ("a/.wh..wh.plnk", Marker::Internal),
            ("a/.wh.", Marker::Invalid),
            ("a/.wh..", Marker::Invalid),
            ("a/.wh...", Marker::Invalid),
            ("a/x.wh.b", Marker::None),
        ];
        for (path, want) in cases {
            assert_eq!(classify(Path::new(path)), want, "{path}");
        }
    }
}
