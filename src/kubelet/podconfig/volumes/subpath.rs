//! Safe use of a volumeMount's `subPath` (the CVE-2017-1002101 class), as kubelet does it:
//!
//! 1. the path is walked from an fd of the volume root, one component at a time with
//!    `O_PATH|O_NOFOLLOW` (`openat`), so every step is relative to a directory already opened
//!    inside the volume; symlinks are read (`readlinkat`) and followed only while they stay
//!    inside the volume, missing directories are made with `mkdirat` in the opened parent;
//! 2. the opened fd is bind-mounted (through `/proc/self/fd/N`) onto a directory of the pod's
//!    own (`<pod dir>/volume-subpaths/<volume>/<container>/<index>`) that no container can
//!    write, and that mount point — not the volume path — is what the runtime binds.
//!
//! A container swapping a directory of its volume for a symlink (to `/`, say) while this runs
//! either loses the race (the walk already holds the directory's inode) or is seen (the walk
//! finds a symlink leading out and refuses); nothing resolves a path a second time.

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
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
    #[error("cannot pin it at {}: {source}", to.display())]
    Mount { to: PathBuf, source: std::io::Error },
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

fn io_at(path: &Path) -> impl FnOnce(rustix::io::Errno) -> SubPathError + '_ {
    move |errno| SubPathError::Io {
        path: path.to_path_buf(),
        source: errno.into(),
    }
}

const PATH_FLAGS: OFlags = OFlags::PATH.union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Opens `sub_path` inside `volume_root` (which the agent made, so its own path is trusted),
/// creating missing directories with `dir_mode`. The fd is an `O_PATH` handle of what the
/// subPath names, reached without leaving the volume.
pub fn open_sub_path(
    volume_root: &Path,
    sub_path: &str,
    dir_mode: u32,
) -> Result<OwnedFd, SubPathError> {
    check_sub_path(sub_path)?;
    // Absolute symlink targets are host paths here: only ones under the volume are allowed.
    let root_path = volume_root
        .canonicalize()
        .map_err(|source| SubPathError::Io {
            path: volume_root.to_path_buf(),
            source,
        })?;
    let root = rustix::fs::open(&root_path, PATH_FLAGS | OFlags::DIRECTORY, Mode::empty())
        .map_err(io_at(&root_path))?;
    // The directories walked so far below the root, and their path (for messages).
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut walked = root_path.clone();
    let mut pending: VecDeque<OsString> = components(Path::new(sub_path));
    let mut followed = 0;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            // Only from a symlink target.
            if stack.pop().is_none() {
                return Err(SubPathError::Escapes(walked.join("..")));
            }
            walked.pop();
            continue;
        }
        let next = walked.join(&part);
        let parent = stack.last().unwrap_or(&root);
        let fd = match rustix::fs::openat(parent, part.as_os_str(), PATH_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => {
                match rustix::fs::mkdirat(parent, part.as_os_str(), Mode::from_raw_mode(dir_mode)) {
                    Ok(()) => set_mode_at(parent, &part, dir_mode, &next)?,
                    // Made meanwhile (maybe as a symlink): look at it again.
                    Err(rustix::io::Errno::EXIST) => {}
                    Err(errno) => return Err(io_at(&next)(errno)),
                }
                pending.push_front(part);
                continue;
            }
            Err(errno) => return Err(io_at(&next)(errno)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(io_at(&next))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => {
                followed += 1;
                if followed > MAX_SYMLINKS {
                    return Err(SubPathError::Loop);
                }
                let target = rustix::fs::readlinkat(parent, part.as_os_str(), Vec::new())
                    .map_err(io_at(&next))?;
                let target = PathBuf::from(std::ffi::OsStr::from_bytes(target.as_bytes()));
                let mut target_parts = if target.is_absolute() {
                    let inside = target
                        .strip_prefix(&root_path)
                        .map_err(|_| SubPathError::Escapes(next.clone()))?;
                    stack.clear();
                    walked = root_path.clone();
                    components(inside)
                } else {
                    components(&target)
                };
                target_parts.extend(pending.drain(..));
                pending = target_parts;
            }
            FileType::Directory => {
                stack.push(fd);
                walked = next;
            }
            _ if pending.is_empty() => return Ok(fd),
            _ => return Err(SubPathError::NotADirectory(next)),
        }
    }
    match stack.pop() {
        Some(fd) => Ok(fd),
        None => Ok(root),
    }
}

/// The mode of a directory just made (the umask applied at creation), set through an fd of it.
fn set_mode_at(
    parent: &OwnedFd,
    name: &OsString,
    mode: u32,
    path: &Path,
) -> Result<(), SubPathError> {
    let dir = rustix::fs::openat(
        parent,
        name.as_os_str(),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_at(path))?;
    rustix::fs::fchmod(&dir, Mode::from_raw_mode(mode)).map_err(io_at(path))
}

/// Binds what `fd` names onto `target` (made as an empty directory or file to match), first
/// detaching whatever an earlier pin left there. `target` must lie in a directory no container
/// can write.
pub fn pin_sub_path(fd: &OwnedFd, target: &Path) -> Result<(), SubPathError> {
    let io = |source: std::io::Error| SubPathError::Io {
        path: target.to_path_buf(),
        source,
    };
    let is_dir = FileType::from_raw_mode(rustix::fs::fstat(fd).map_err(|e| io(e.into()))?.st_mode)
        == FileType::Directory;
    // Detach earlier pins (a container restart pins again; the old container had its own copy).
    loop {
        match rustix::mount::unmount(target, rustix::mount::UnmountFlags::DETACH) {
            Ok(()) => continue,
            Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => break,
            Err(errno) => return Err(io(errno.into())),
        }
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let existing = rustix::fs::statat(CWD, target, AtFlags::SYMLINK_NOFOLLOW).ok();
    let existing_is_dir =
        existing.map(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory);
    if existing_is_dir.is_some_and(|d| d != is_dir) {
        // The subPath changed type (a key became a directory...): make the right kind.
        if existing_is_dir == Some(true) {
            std::fs::remove_dir(target).map_err(io)?;
        } else {
            std::fs::remove_file(target).map_err(io)?;
        }
    }
    let made = if is_dir {
        std::fs::create_dir(target)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(target)
            .map(drop)
    };
    match made {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let from = PathBuf::from(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()));
    rustix::mount::mount_bind(&from, target).map_err(|errno| SubPathError::Mount {
        to: target.to_path_buf(),
        source: errno.into(),
    })
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
mod tests;
