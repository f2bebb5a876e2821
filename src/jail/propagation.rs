//! `runp mount-propagation ROOTFS MODE:PATH...`: the OCI createContainer hook that gives CRI
//! mounts their propagation. libcontainer clones each bind mount (open_tree) and ignores its
//! "rprivate"/"rslave" option, so the bind of a shared host mount stayed in the host's peer
//! group: mounts the host made later showed in a private mount, and mounts made in the
//! container went back to the host through a HostToContainer one. runc applies the option after
//! the bind; this hook does the same, in the container's mount namespace after the mounts and
//! before pivot_root (where libcontainer runs createContainer hooks).

use nix::mount::{MsFlags, mount};
use rustix::fs::{Mode, OFlags, ResolveFlags, openat2};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PropagationError {
    #[error("mount propagation argument {0:?} is not private:PATH or slave:PATH")]
    BadArgument(String),
    #[error("cannot open {} in the rootfs {}: {source}", path, root.display())]
    Resolve {
        path: String,
        root: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot make {path} {mode}: {source}")]
    Mount {
        path: String,
        mode: String,
        #[source]
        source: nix::Error,
    },
}

/// Applies each `MODE:PATH` (PATH inside the container, parents listed before children)
/// recursively to the mount at PATH, resolved inside `rootfs` as libcontainer resolved it
/// (symlinks, absolute ones too, stay in the rootfs: `RESOLVE_IN_ROOT`), through the opened
/// fd so nothing can be swapped in between.
pub fn apply_mount_propagation(rootfs: &Path, mounts: &[String]) -> Result<(), PropagationError> {
    let resolve_err = |path: &str, source: rustix::io::Errno| PropagationError::Resolve {
        path: path.to_string(),
        root: rootfs.to_path_buf(),
        source: source.into(),
    };
    let root = rustix::fs::open(
        rootfs,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| resolve_err("/", e))?;
    for arg in mounts {
        let (mode, path) = arg
            .split_once(':')
            .ok_or_else(|| PropagationError::BadArgument(arg.clone()))?;
        let flags = match mode {
            "private" => MsFlags::MS_PRIVATE,
            "slave" => MsFlags::MS_SLAVE,
            _ => return Err(PropagationError::BadArgument(arg.clone())),
        };
        let fd = open_in_root(&root, path).map_err(|e| resolve_err(path, e))?;
        let target = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount(
            None::<&str>,
            target.as_str(),
            None::<&str>,
            flags | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|source| PropagationError::Mount {
            path: path.to_string(),
            mode: mode.to_string(),
            source,
        })?;
    }
    Ok(())
}

/// An O_PATH fd of `path` resolved inside the directory `root` (absolute symlinks and `..`
/// stay in it).
fn open_in_root(root: &impl AsFd, path: &str) -> rustix::io::Result<OwnedFd> {
    openat2(
        root,
        path.trim_start_matches('/'),
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_inside_the_rootfs_through_absolute_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("real/dir")).unwrap();
        std::os::unix::fs::symlink("/real", root.join("link")).unwrap();
        std::os::unix::fs::symlink("/", root.join("up")).unwrap();
        let root_fd =
            rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let at = |path: &str| {
            let fd = open_in_root(&root_fd, path).unwrap();
            std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
        };
        let real = root.canonicalize().unwrap().join("real/dir");
        assert_eq!(at("/link/dir"), real);
        assert_eq!(at("/up/../../link/dir"), real);
        assert_eq!(at("/up"), root.canonicalize().unwrap());
        assert!(open_in_root(&root_fd, "/link/missing").is_err());
    }
}
