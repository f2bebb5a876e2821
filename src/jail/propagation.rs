//! `runp mount-propagation ROOTFS MODE:PATH...`: the OCI createContainer hook that gives CRI
//! mounts their propagation. libcontainer clones each bind mount (open_tree) and ignores its
//! "rprivate"/"rslave" option, so the bind of a shared host mount stayed in the host's peer
//! group: mounts the host made later showed in a private mount, and mounts made in the
//! container went back to the host through a HostToContainer one. runc applies the option after
//! the bind; this hook does the same, in the container's mount namespace after the mounts and
//! before pivot_root (where libcontainer runs createContainer hooks).

use nix::mount::{MsFlags, mount};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PropagationError {
    #[error("mount propagation argument {0:?} is not private:PATH or slave:PATH")]
    BadArgument(String),
    #[error("mount {path:?} resolves to {} outside the rootfs", resolved.display())]
    Escapes { path: String, resolved: PathBuf },
    #[error("cannot resolve mount {}: {source}", path.display())]
    Resolve {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot make {} {mode}: {source}", path.display())]
    Mount {
        path: PathBuf,
        mode: String,
        #[source]
        source: nix::Error,
    },
}

/// Applies each `MODE:PATH` (PATH inside the container, parents listed before children)
/// recursively to the mount at `rootfs`/PATH.
pub fn apply_mount_propagation(rootfs: &Path, mounts: &[String]) -> Result<(), PropagationError> {
    let root = rootfs
        .canonicalize()
        .map_err(|source| PropagationError::Resolve {
            path: rootfs.to_path_buf(),
            source,
        })?;
    for arg in mounts {
        let (mode, path) = arg
            .split_once(':')
            .ok_or_else(|| PropagationError::BadArgument(arg.clone()))?;
        let flags = match mode {
            "private" => MsFlags::MS_PRIVATE,
            "slave" => MsFlags::MS_SLAVE,
            _ => return Err(PropagationError::BadArgument(arg.clone())),
        };
        let joined = root.join(path.trim_start_matches('/'));
        let resolved = joined
            .canonicalize()
            .map_err(|source| PropagationError::Resolve {
                path: joined.clone(),
                source,
            })?;
        if !resolved.starts_with(&root) {
            return Err(PropagationError::Escapes {
                path: path.to_string(),
                resolved,
            });
        }
        mount(
            None::<&str>,
            &resolved,
            None::<&str>,
            flags | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|source| PropagationError::Mount {
            path: resolved.clone(),
            mode: mode.to_string(),
            source,
        })?;
    }
    Ok(())
}
