//! Bind-mount targets made in the rootfs at CreateContainer, by the runtime, before the
//! container's init would make them.
//!
//! Why: init runs in the container's memory cgroup, so the pages of the writable layer's
//! filesystem metadata that creating a target touches (inode tables, directory blocks: the
//! block device's page cache, shared and long-lived) are charged to that cgroup. On cgroup v1
//! a removed memory cgroup lingers while any page is charged to it: every pod left two behind
//! (78 -> 142 after 32 pods here, back to 78 after `drop_caches`), and with a few hundred of them
//! pod start took 1.5-2x as long. Made here, the pages are charged to the runtime.
//!
//! Best effort: anything unexpected (a missing parent, a symlink, an unreadable source) is left
//! to init, which makes the target as before.

use oci_spec::runtime::Mount;
use rustix::fs::{Mode, OFlags, ResolveFlags, openat2};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// Makes the file or directory each bind mount of `mounts` needs at its destination in
/// `rootfs`, unless another mount covers the destination (it is made there at start).
pub(crate) fn make_bind_targets(rootfs: &Path, mounts: &[Mount]) {
    let Ok(root) = rustix::fs::open(
        rootfs,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    for mount in mounts.iter().filter(|m| is_bind(m)) {
        let destination = mount.destination();
        if covered_by_another(destination, mounts) {
            continue;
        }
        let Some(source) = mount.source() else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(source) else {
            continue;
        };
        let made = make_target(&root, destination, meta.is_dir());
        if let Err(err) = made {
            tracing::debug!(destination = %destination.display(), %err, "bind target left to init");
        }
    }
}

fn is_bind(mount: &Mount) -> bool {
    mount.typ().as_deref() == Some("bind")
        || mount
            .options()
            .iter()
            .flatten()
            .any(|o| o == "bind" || o == "rbind")
}

/// Another mount's destination is a proper ancestor of `destination` (e.g. /dev for
/// /dev/termination-log).
fn covered_by_another(destination: &Path, mounts: &[Mount]) -> bool {
    mounts.iter().any(|other| {
        let above = other.destination();
        above != destination && destination.starts_with(above)
    })
}

/// Creates `destination` (a directory when `dir`, with its missing parents, else an empty
/// file in an existing parent), resolved inside the rootfs: absolute symlinks and `..` stay in
/// it, and an existing final component, symlink or not, is left as it is.
fn make_target(root: &OwnedFd, destination: &Path, dir: bool) -> rustix::io::Result<()> {
    let names: Vec<&std::ffi::OsStr> = destination
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            Component::ParentDir => Some(std::ffi::OsStr::new("..")),
            _ => None,
        })
        .collect();
    let Some((last, parents)) = names.split_last() else {
        return Ok(()); // the rootfs itself
    };
    if *last == ".." {
        return Ok(());
    }
    // Each prefix is resolved from the rootfs (as init resolves it), not from its parent's fd:
    // an absolute symlink such as /var/run -> /run means the rootfs's /run.
    let mut prefix = PathBuf::from(".");
    let mut parent = in_root(root, &prefix)?;
    for name in parents {
        prefix.push(name);
        parent = match in_root(root, &prefix) {
            Err(rustix::io::Errno::NOENT) if dir => {
                mkdir(&parent, name)?;
                in_root(root, &prefix)?
            }
            other => other?,
        };
    }
    let made = match dir {
        true => mkdir(&parent, last),
        false => rustix::fs::openat(
            &parent,
            *last,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map(drop),
    };
    match made {
        Err(rustix::io::Errno::EXIST) => Ok(()),
        other => other,
    }
}

/// The directory `path` in the rootfs `root`, resolved without leaving it.
fn in_root(root: &impl AsFd, path: &Path) -> rustix::io::Result<OwnedFd> {
    openat2(
        root,
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
}

fn mkdir(parent: &impl AsFd, name: &std::ffi::OsStr) -> rustix::io::Result<()> {
    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o755)) {
        Err(rustix::io::Errno::EXIST) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
#[path = "targets_tests.rs"]
mod tests;
