//! Owners, modes, times and extended attributes of extracted entries, and the warn-once
//! bookkeeping for what an unprivileged store cannot reproduce.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::sys::stat::{UtimensatFlags, utimensat};
use nix::sys::time::TimeSpec;

/// The metadata of one entry, from a tar header (plus PAX records) or from a file on disk.
#[derive(Clone, Debug)]
pub struct Meta {
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: i64,
    pub xattrs: Vec<(OsString, Vec<u8>)>,
}

const PAX_XATTR_PREFIX: &str = "SCHILY.xattr.";

impl Meta {
    /// Reads the header and the entry's PAX records (which override numeric fields and carry
    /// xattrs). Only allowed xattrs are kept; the others are counted in `warnings`.
    pub fn from_tar<R: Read>(
        entry: &mut tar::Entry<'_, R>,
        warnings: &mut Warnings,
        name: &str,
    ) -> io::Result<Meta> {
        let header = entry.header();
        // Blank numeric fields are read as 0, as GNU tar and Go's archive/tar do.
        let mut meta = Meta {
            mode: header.mode()? & 0o7777,
            uid: header.uid().unwrap_or(0),
            gid: header.gid().unwrap_or(0),
            mtime_sec: header
                .mtime()
                .ok()
                .and_then(|t| i64::try_from(t).ok())
                .unwrap_or(0),
            mtime_nsec: 0,
            xattrs: Vec::new(),
        };
        if let Some(extensions) = entry.pax_extensions()? {
            for extension in extensions {
                let extension = extension?;
                let Ok(key) = extension.key() else { continue };
                let value = extension.value_bytes();
                if let Some(attr) = key.strip_prefix(PAX_XATTR_PREFIX) {
                    if xattr_allowed(attr) {
                        meta.xattrs.push((attr.into(), value.to_vec()));
                    } else {
                        warnings
                            .xattrs
                            .note(name, format!("xattr {attr} not allowed"));
                    }
                    continue;
                }
                let text = std::str::from_utf8(value).unwrap_or("");
                match key {
                    "uid" => meta.uid = text.parse().unwrap_or(meta.uid),
                    "gid" => meta.gid = text.parse().unwrap_or(meta.gid),
                    "mtime" => {
                        if let Some((sec, nsec)) = parse_pax_time(text) {
                            meta.mtime_sec = sec;
                            meta.mtime_nsec = nsec;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(meta)
    }

    /// The metadata of an unpacked file (for the copy fallback), with its allowed xattrs.
    pub fn from_fs(path: &Path, stat: &fs::Metadata) -> Meta {
        let xattrs = if stat.file_type().is_symlink() {
            Vec::new()
        } else {
            read_allowed_xattrs(path)
        };
        Meta {
            mode: stat.mode() & 0o7777,
            uid: u64::from(stat.uid()),
            gid: u64::from(stat.gid()),
            mtime_sec: stat.mtime(),
            mtime_nsec: stat.mtime_nsec(),
            xattrs,
        }
    }
}

/// Extended attributes an image may set. Overlay's own attributes (`trusted.overlay.*`,
/// `user.overlay.*`) are never taken from image content: they would let a layer forge opaque
/// directories or redirects.
pub fn xattr_allowed(name: &str) -> bool {
    (name.starts_with("user.") && !name.starts_with("user.overlay."))
        || matches!(
            name,
            "security.capability" | "system.posix_acl_access" | "system.posix_acl_default"
        )
}

fn read_allowed_xattrs(path: &Path) -> Vec<(OsString, Vec<u8>)> {
    let Ok(names) = xattr::list(path) else {
        return Vec::new();
    };
    names
        .filter(|name| name.to_str().is_some_and(xattr_allowed))
        .filter_map(|name| {
            let value = xattr::get(path, &name).ok()??;
            Some((name, value))
        })
        .collect()
}

/// PAX times are decimal seconds with an optional fraction (`1700000000.123456789`).
fn parse_pax_time(text: &str) -> Option<(i64, i64)> {
    let (sec, frac) = text.split_once('.').unwrap_or((text, ""));
    let sec: i64 = sec.parse().ok()?;
    let digits: String = frac.chars().take(9).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let nsec = if digits.is_empty() {
        0
    } else {
        format!("{digits:0<9}").parse().ok()?
    };
    Some((sec, nsec))
}

/// Sets owner, then mode (changing the owner clears setuid/setgid bits), then xattrs. Symlinks
/// get only an owner. A failed chown (unmapped id in a user namespace, or not root) is counted,
/// not fatal, and then the setuid/setgid bits are dropped rather than granted to our own uid.
pub fn apply_owner_mode_xattrs(
    path: &Path,
    meta: &Meta,
    is_symlink: bool,
    warnings: &mut Warnings,
    name: &str,
) -> io::Result<()> {
    let mut mode = meta.mode;
    let ids = u32::try_from(meta.uid)
        .ok()
        .zip(u32::try_from(meta.gid).ok());
    let chowned = match ids {
        Some((uid, gid)) => match std::os::unix::fs::lchown(path, Some(uid), Some(gid)) {
            Ok(()) => true,
            Err(err) if is_permission_problem(&err) => {
                warnings
                    .chown
                    .note(name, format!("chown {uid}:{gid}: {err}"));
                false
            }
            Err(err) => return Err(err),
        },
        None => {
            warnings
                .chown
                .note(name, format!("ids {}:{} out of range", meta.uid, meta.gid));
            false
        }
    };
    if is_symlink {
        return Ok(());
    }
    if !chowned {
        mode &= !0o6000;
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    for (attr, value) in &meta.xattrs {
        if let Err(err) = xattr::set(path, attr, value) {
            warnings
                .xattrs
                .note(name, format!("{}: {err}", attr.to_string_lossy()));
        }
    }
    Ok(())
}

/// Sets atime and mtime without following a final symlink.
pub fn set_times(path: &Path, meta: &Meta) -> io::Result<()> {
    let time = TimeSpec::new(meta.mtime_sec, meta.mtime_nsec);
    utimensat(None, path, &time, &time, UtimensatFlags::NoFollowSymlink).map_err(io::Error::from)
}

/// Errors that mean "not allowed here" rather than "the store is broken".
pub fn is_permission_problem(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EPERM | libc::EINVAL | libc::EACCES | libc::EOPNOTSUPP)
    )
}

/// Counts one kind of degraded entry and remembers the first, to warn once per layer.
#[derive(Debug, Default)]
pub struct Counter {
    pub count: u64,
    first: Option<String>,
}

impl Counter {
    pub fn note(&mut self, entry: &str, detail: String) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(format!("{entry}: {detail}"));
        }
    }
}

/// What could not be reproduced faithfully while extracting or copying one layer.
#[derive(Debug, Default)]
pub struct Warnings {
    pub chown: Counter,
    pub devices: Counter,
    pub xattrs: Counter,
    pub skipped: Counter,
}

impl Warnings {
    /// One warning per kind of problem, with a count and the first example.
    pub fn log(&self, what: &str) {
        let kinds = [
            (
                &self.chown,
                "entries keep the extracting user's owner (chown not permitted)",
            ),
            (
                &self.devices,
                "device nodes skipped (creating them needs real root)",
            ),
            (&self.xattrs, "extended attributes not set"),
            (&self.skipped, "entries of unsupported types skipped"),
        ];
        for (counter, summary) in kinds {
            if let Some(first) = &counter.first {
                tracing::warn!("{what}: {} {summary}; first: {first}", counter.count);
            }
        }
    }
}

/// File name of a path as text, for messages.
pub fn display_name(name: &OsStr) -> String {
    String::from_utf8_lossy(name.as_bytes()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_safe_xattrs_are_taken_from_images() {
        let cases = [
            ("user.comment", true),
            ("security.capability", true),
            ("system.posix_acl_access", true),
            ("user.overlay.opaque", false),
            ("trusted.overlay.opaque", false),
            ("trusted.overlay.redirect", false),
            ("security.selinux", false),
            ("system.nfs4_acl", false),
        ];
        for (name, allowed) in cases {
            assert_eq!(xattr_allowed(name), allowed, "{name}");
        }
    }

    #[test]
    fn parses_pax_times() {
        assert_eq!(parse_pax_time("1700000000"), Some((1_700_000_000, 0)));
        assert_eq!(
            parse_pax_time("1700000000.5"),
            Some((1_700_000_000, 500_000_000))
        );
        assert_eq!(parse_pax_time("1.123456789123"), Some((1, 123_456_789)));
        assert_eq!(parse_pax_time("x"), None);
        assert_eq!(parse_pax_time("1.x"), None);
    }
}
