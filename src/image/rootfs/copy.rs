//! The copy fallback: a private root filesystem built by applying each unpacked layer, bottom
//! first, the way overlayfs would merge them: whiteouts delete, opaque directories hide what
//! is below, later entries replace earlier ones, directories merge.
//!
//! Files are copied, never hardlinked to the shared layer trees (a container writing to a file
//! would change the layer for everyone). Hardlinks inside a layer stay hardlinks. Nothing in the
//! target is ever followed: existing entries are replaced, not written through.

use crate::image::error::ImageError;
use crate::image::unpack::LayerFormat;
use crate::image::unpack::metadata::{
    Meta, Warnings, apply_owner_mode_xattrs, display_name, set_times,
};
use crate::image::unpack::whiteout::{
    NameMarker, classify_name, has_opaque_xattr, is_whiteout_device,
};
use nix::sys::stat::{Mode, SFlag, mknod};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// One layer to apply: its tree and how whiteouts are stored in it.
pub struct LayerTree {
    pub path: PathBuf,
    pub format: LayerFormat,
    pub name: String,
}

/// Builds `target` (which must not exist) from `layers`, bottom first.
pub fn build(layers: &[LayerTree], target: &Path, privileged: bool) -> Result<(), ImageError> {
    let io_err = |layer: &str, entry: &Path, source: io::Error| ImageError::Unpack {
        layer: layer.to_string(),
        entry: entry.display().to_string(),
        source,
    };
    fs::DirBuilder::new()
        .mode(0o755)
        .create(target)
        .map_err(|e| io_err("-", target, e))?;
    let mut dirs: BTreeMap<PathBuf, Meta> = BTreeMap::new();
    let mut warnings = Warnings::default();
    for layer in layers {
        let mut copier = Copier {
            layer,
            privileged,
            links: HashMap::new(),
            dirs: &mut dirs,
            warnings: &mut warnings,
        };
        copier
            .apply_dir(&layer.path, target)
            .map_err(|(entry, e)| io_err(&layer.name, &entry, e))?;
    }
    // Directory metadata last (children change mtimes); the topmost layer's wins.
    for (dir, meta) in dirs.iter().rev() {
        if !fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            continue; // deleted by a later layer
        }
        apply_owner_mode_xattrs(dir, meta, false, &mut warnings, &dir.display().to_string())
            .and_then(|()| set_times(dir, meta))
            .map_err(|e| io_err("-", dir, e))?;
    }
    warnings.log("rootfs copy");
    Ok(())
}

struct Copier<'a> {
    layer: &'a LayerTree,
    privileged: bool,
    /// (dev, ino) of a multiply-linked source file → its first copy in the target.
    links: HashMap<(u64, u64), PathBuf>,
    dirs: &'a mut BTreeMap<PathBuf, Meta>,
    warnings: &'a mut Warnings,
}

type EntryResult = Result<(), (PathBuf, io::Error)>;

impl Copier<'_> {
    /// Merges the layer directory `src` into the target directory `dst` (a real directory).
    fn apply_dir(&mut self, src: &Path, dst: &Path) -> EntryResult {
        let at = |path: &Path| {
            let path = path.to_path_buf();
            move |e| (path, e)
        };
        let src_stat = fs::symlink_metadata(src).map_err(at(src))?;
        self.dirs
            .insert(dst.to_path_buf(), Meta::from_fs(src, &src_stat));
        let mut names: Vec<OsString> = fs::read_dir(src)
            .map_err(at(src))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()
            .map_err(at(src))?;
        names.sort();
        let portable = self.layer.format == LayerFormat::Portable;
        let opaque = if portable {
            names
                .iter()
                .any(|n| classify_name(n) == Some(NameMarker::Opaque))
        } else {
            has_opaque_xattr(src)
        };
        if opaque {
            for child in fs::read_dir(dst).map_err(at(dst))? {
                let child = child.map_err(at(dst))?;
                remove_any(&child.path()).map_err(at(&child.path()))?;
            }
        }
        // Whiteouts first: they only hide lower layers, never this layer's own entries.
        let mut entries = Vec::new();
        for name in names {
            let src_path = src.join(&name);
            let stat = fs::symlink_metadata(&src_path).map_err(at(&src_path))?;
            match (portable, classify_name(&name)) {
                (true, Some(NameMarker::Whiteout(target))) => {
                    remove_any(&dst.join(target)).map_err(at(&src_path))?;
                }
                (true, Some(_)) => {} // opaque marker (handled above) or aufs bookkeeping
                (false, _) if is_whiteout_device(&stat) => {
                    remove_any(&dst.join(&name)).map_err(at(&src_path))?;
                }
                _ => entries.push((name, src_path, stat)),
            }
        }
        for (name, src_path, stat) in entries {
            let dst_path = dst.join(&name);
            self.apply_entry(&src_path, &dst_path, &stat)
                .map_err(at(&src_path))?;
            if stat.is_dir() {
                self.apply_dir(&src_path, &dst_path)?;
            }
        }
        Ok(())
    }

    fn apply_entry(&mut self, src: &Path, dst: &Path, stat: &fs::Metadata) -> io::Result<()> {
        let name = display_name(dst.file_name().unwrap_or_default());
        let kind = stat.file_type();
        if kind.is_dir() {
            match fs::symlink_metadata(dst) {
                Ok(existing) if existing.is_dir() => return Ok(()),
                Ok(_) => remove_any(dst)?,
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
            return fs::DirBuilder::new().mode(0o755).create(dst);
        }
        remove_any(dst)?;
        let meta = Meta::from_fs(src, stat);
        if kind.is_file() {
            let key = (stat.dev(), stat.ino());
            if stat.nlink() > 1 {
                if let Some(first) = self.links.get(&key) {
                    return fs::hard_link(first, dst);
                }
                self.links.insert(key, dst.to_path_buf());
            }
            let mut from = File::open(src)?;
            let mut to = OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(0o600)
                .open(dst)?;
            io::copy(&mut from, &mut to)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(src)?, dst)?;
        } else if kind.is_fifo() {
            nix::unistd::mkfifo(dst, Mode::from_bits_truncate(0o600)).map_err(io::Error::from)?;
        } else if kind.is_char_device() || kind.is_block_device() {
            if !self.privileged {
                self.warnings
                    .devices
                    .note(&name, format!("device {:#x}", stat.rdev()));
                return Ok(());
            }
            let flag = if kind.is_char_device() {
                SFlag::S_IFCHR
            } else {
                SFlag::S_IFBLK
            };
            mknod(dst, flag, Mode::from_bits_truncate(0o600), stat.rdev())
                .map_err(io::Error::from)?;
        } else {
            self.warnings.skipped.note(&name, "socket".into());
            return Ok(());
        }
        apply_owner_mode_xattrs(dst, &meta, kind.is_symlink(), self.warnings, &name)?;
        set_times(dst, &meta)
    }
}

/// Removes whatever is at `path` (a directory with its contents); absent is fine. Never follows
/// a symlink.
pub fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}
