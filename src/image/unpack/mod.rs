//! Extracting one layer tar into a fresh directory, safely and faithfully.
//!
//! Safety: names are normalized ([`path_safety`]), parents are walked with `lstat` and never
//! followed through symlinks, hardlinks must point at an entry already extracted from this
//! layer, files are created with `O_EXCL|O_NOFOLLOW`. A refused entry aborts the whole layer
//! with an error naming it; the caller discards the (private, staging) directory.
//!
//! Fidelity: owners, modes, mtimes (directories last, since creating children changes them),
//! hardlinks, symlinks, fifos, allowed xattrs, device nodes when privileged, whiteouts and
//! opaque directories in the layer's [`LayerFormat`].

pub mod compression;
pub mod metadata;
pub mod path_safety;
pub mod whiteout;

use super::digest::{Digest, HashingReader};
use super::error::ImageError;
use metadata::{Meta, Warnings, apply_owner_mode_xattrs, set_times};
use nix::sys::stat::{Mode, SFlag, makedev, mknod};
use path_safety::{SafeTree, TreeError, normalize_entry_name};
use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use tar::EntryType;
pub use whiteout::LayerFormat;
use whiteout::{Marker, TRUSTED_OPAQUE_XATTR, USER_OPAQUE_XATTR};

/// How to extract.
#[derive(Clone, Copy, Debug)]
pub struct UnpackOptions {
    pub format: LayerFormat,
    /// Real root: device nodes may be created.
    pub privileged: bool,
}

/// What an extraction produced.
#[derive(Clone, Debug, Default)]
pub struct UnpackStats {
    pub entries: u64,
    pub file_bytes: u64,
    /// sha256 of the uncompressed tar stream (the layer's diff_id).
    pub diff_id: Option<Digest>,
}

/// Extracts the (possibly compressed) layer tar read from `reader` into the existing, empty
/// directory `target`. `layer` names the layer in errors and warnings.
pub fn unpack_layer(
    reader: impl Read,
    target: &Path,
    options: UnpackOptions,
    layer: &str,
) -> Result<UnpackStats, ImageError> {
    let archive_err = |source: io::Error| ImageError::Unpack {
        layer: layer.to_string(),
        entry: "<archive>".to_string(),
        source,
    };
    let (_, decoded) = compression::decoder(reader).map_err(archive_err)?;
    let mut archive = tar::Archive::new(HashingReader::new(decoded));
    let mut unpacker = Unpacker {
        tree: SafeTree::new(target),
        options,
        layer,
        dir_meta: BTreeMap::new(),
        warnings: Warnings::default(),
        stats: UnpackStats::default(),
        buffer: vec![0; 256 << 10],
    };
    for entry in archive.entries().map_err(archive_err)? {
        let mut entry = entry.map_err(archive_err)?;
        unpacker.entry(&mut entry)?;
    }
    unpacker.finish()?;
    let (diff_id, _) = archive.into_inner().finish().map_err(archive_err)?;
    unpacker.warnings.log(&format!("layer {layer}"));
    let mut stats = unpacker.stats;
    stats.diff_id = Some(diff_id);
    Ok(stats)
}

struct Unpacker<'a> {
    tree: SafeTree,
    options: UnpackOptions,
    layer: &'a str,
    /// Directory modes and times, applied after every entry is in place.
    dir_meta: BTreeMap<PathBuf, Meta>,
    warnings: Warnings,
    stats: UnpackStats,
    buffer: Vec<u8>,
}

impl Unpacker<'_> {
    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<(), ImageError> {
        let raw_name = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw_name).into_owned();
        let rel = normalize_entry_name(&raw_name).map_err(|reason| self.refuse(&name, reason))?;
        let meta =
            Meta::from_tar(entry, &mut self.warnings, &name).map_err(|e| self.io_err(&name, e))?;
        let kind = entry.header().entry_type();
        self.stats.entries += 1;
        let Some(rel) = rel else {
            if kind.is_dir() {
                self.dir_meta.insert(PathBuf::new(), meta);
            }
            return Ok(());
        };
        if let LayerFormat::Overlay { .. } = self.options.format {
            match whiteout::classify(&rel) {
                Marker::None => {}
                Marker::Opaque(dir) => return self.make_opaque(&dir, &name),
                Marker::Whiteout(target) => return self.make_whiteout(&target, &name),
                Marker::Internal => return Ok(()),
                Marker::Invalid => return Err(self.refuse(&name, "malformed whiteout name")),
            }
        } else if whiteout::classify(&rel) == Marker::Invalid {
            return Err(self.refuse(&name, "malformed whiteout name"));
        }
        let full = self.parents(&rel, &name, true)?;
        let result = match kind {
            EntryType::Directory => self.make_dir(&rel, &full, meta),
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                self.make_file(&rel, &full, entry, &meta, &name)
            }
            EntryType::Symlink => {
                let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                self.make_symlink(&rel, &full, &target, &meta, &name)
            }
            EntryType::Link => {
                let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                return self.make_hardlink(&rel, &full, &target, &name);
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                let major = entry.header().device_major().ok().flatten().unwrap_or(0);
                let minor = entry.header().device_minor().ok().flatten().unwrap_or(0);
                self.make_node(&rel, &full, kind, major, minor, &meta, &name)
            }
            other => {
                self.warnings.skipped.note(
                    &name,
                    format!("tar entry type {:?}", other.as_byte() as char),
                );
                Ok(())
            }
        };
        result.map_err(|e| self.io_err(&name, e))
    }

    fn refuse(&self, name: &str, reason: impl Into<String>) -> ImageError {
        ImageError::UnsafeEntry {
            layer: self.layer.to_string(),
            entry: name.to_string(),
            reason: reason.into(),
        }
    }

    fn io_err(&self, name: &str, source: io::Error) -> ImageError {
        ImageError::Unpack {
            layer: self.layer.to_string(),
            entry: name.to_string(),
            source,
        }
    }

    fn parents(&mut self, rel: &Path, name: &str, create: bool) -> Result<PathBuf, ImageError> {
        let walked = if create {
            self.tree.prepare_parents(rel)
        } else {
            self.tree.check_parents(rel)
        };
        walked.map_err(|err| self.tree_err(name, err))
    }

    fn tree_err(&self, name: &str, err: TreeError) -> ImageError {
        match err {
            TreeError::Unsafe(reason) => self.refuse(name, reason),
            TreeError::Io(source) => self.io_err(name, source),
        }
    }

    /// Removes whatever an earlier entry of this layer left at `rel` (a later entry wins).
    fn clear(&mut self, rel: &Path, full: &Path) -> io::Result<()> {
        match fs::symlink_metadata(full) {
            Ok(meta) if meta.is_dir() => {
                fs::remove_dir_all(full)?;
                self.tree.forget(rel);
                self.dir_meta.retain(|dir, _| !dir.starts_with(rel));
                Ok(())
            }
            Ok(_) => fs::remove_file(full),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(err),
        }
    }

    fn make_dir(&mut self, rel: &Path, full: &Path, meta: Meta) -> io::Result<()> {
        match fs::symlink_metadata(full) {
            Ok(existing) if existing.is_dir() => {}
            Ok(_) => {
                fs::remove_file(full)?;
                fs::DirBuilder::new().mode(0o755).create(full)?;
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                fs::DirBuilder::new().mode(0o755).create(full)?;
            }
            Err(err) => return Err(err),
        }
        self.tree.note_dir(rel);
        self.dir_meta.insert(rel.to_path_buf(), meta);
        Ok(())
    }

    fn make_file<R: Read>(
        &mut self,
        rel: &Path,
        full: &Path,
        entry: &mut tar::Entry<'_, R>,
        meta: &Meta,
        name: &str,
    ) -> io::Result<()> {
        self.clear(rel, full)?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(full)?;
        loop {
            let n = match entry.read(&mut self.buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            file.write_all(&self.buffer[..n])?;
            self.stats.file_bytes += n as u64;
        }
        drop(file);
        apply_owner_mode_xattrs(full, meta, false, &mut self.warnings, name)?;
        set_times(full, meta)
    }

    fn make_symlink(
        &mut self,
        rel: &Path,
        full: &Path,
        target: &[u8],
        meta: &Meta,
        name: &str,
    ) -> io::Result<()> {
        self.clear(rel, full)?;
        // The target is stored verbatim: it is never followed while extracting or copying.
        std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), full)?;
        apply_owner_mode_xattrs(full, meta, true, &mut self.warnings, name)?;
        set_times(full, meta)
    }

    fn make_hardlink(
        &mut self,
        rel: &Path,
        full: &Path,
        target: &[u8],
        name: &str,
    ) -> Result<(), ImageError> {
        let target_rel = normalize_entry_name(target)
            .map_err(|reason| self.refuse(name, format!("hardlink target: {reason}")))?
            .ok_or_else(|| self.refuse(name, "hardlink to the layer root"))?;
        if target_rel == rel {
            return Ok(());
        }
        let target_full = self.parents(&target_rel, name, false)?;
        match fs::symlink_metadata(&target_full) {
            Ok(meta) if meta.is_dir() => {
                return Err(self.refuse(name, "hardlink to a directory"));
            }
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Err(self.refuse(
                    name,
                    format!(
                        "hardlink target {} is not an earlier entry of this layer",
                        target_rel.display()
                    ),
                ));
            }
            Err(err) => return Err(self.io_err(name, err)),
        }
        self.clear(rel, full).map_err(|e| self.io_err(name, e))?;
        // linkat without AT_SYMLINK_FOLLOW: a symlink target is linked itself, not followed.
        fs::hard_link(&target_full, full).map_err(|e| self.io_err(name, e))
    }

    #[allow(clippy::too_many_arguments)]
    fn make_node(
        &mut self,
        rel: &Path,
        full: &Path,
        kind: EntryType,
        major: u32,
        minor: u32,
        meta: &Meta,
        name: &str,
    ) -> io::Result<()> {
        let flag = match kind {
            EntryType::Char => SFlag::S_IFCHR,
            EntryType::Block => SFlag::S_IFBLK,
            _ => SFlag::S_IFIFO,
        };
        if flag != SFlag::S_IFIFO && !self.options.privileged {
            self.warnings
                .devices
                .note(name, format!("device {major}:{minor}"));
            return Ok(());
        }
        self.clear(rel, full)?;
        let dev = makedev(u64::from(major), u64::from(minor));
        mknod(full, flag, Mode::from_bits_truncate(0o600), dev).map_err(io::Error::from)?;
        apply_owner_mode_xattrs(full, meta, false, &mut self.warnings, name)?;
        set_times(full, meta)
    }

    /// Overlay form of `<dir>/.wh.<name>`: a 0:0 character device, unless this layer has its
    /// own entry there (a whiteout only hides lower layers).
    fn make_whiteout(&mut self, target: &Path, name: &str) -> Result<(), ImageError> {
        let full = self.parents(target, name, true)?;
        if fs::symlink_metadata(&full).is_ok() {
            return Ok(());
        }
        mknod(&full, SFlag::S_IFCHR, Mode::empty(), makedev(0, 0))
            .map_err(|e| self.io_err(name, io::Error::from(e)))
    }

    /// Overlay form of `<dir>/.wh..wh..opq`: opaque xattrs on the directory.
    fn make_opaque(&mut self, dir: &Path, name: &str) -> Result<(), ImageError> {
        let full = self
            .tree
            .prepare_dir(dir)
            .map_err(|err| self.tree_err(name, err))?;
        let LayerFormat::Overlay {
            trusted_xattr,
            user_xattr,
        } = self.options.format
        else {
            return Ok(());
        };
        for (wanted, attr) in [
            (trusted_xattr, TRUSTED_OPAQUE_XATTR),
            (user_xattr, USER_OPAQUE_XATTR),
        ] {
            if wanted {
                xattr::set(&full, attr, b"y").map_err(|e| self.io_err(name, e))?;
            }
        }
        Ok(())
    }

    /// Applies directory owners, modes and times last: creating children changes a directory's
    /// mtime, and a read-only directory mode would block them.
    fn finish(&mut self) -> Result<(), ImageError> {
        let dirs = std::mem::take(&mut self.dir_meta);
        for (rel, meta) in dirs.iter().rev() {
            let full = self.tree.root().join(rel);
            let name = rel.display().to_string();
            match fs::symlink_metadata(&full) {
                Ok(stat) if stat.is_dir() => {}
                _ => continue, // replaced by a later entry
            }
            apply_owner_mode_xattrs(&full, meta, false, &mut self.warnings, &name)
                .and_then(|()| set_times(&full, meta))
                .map_err(|e| self.io_err(&name, e))?;
        }
        Ok(())
    }
}
