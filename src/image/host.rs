//! What this process may do to the filesystem: decides the layer format and rootfs strategy.

use super::unpack::LayerFormat;
use super::unpack::whiteout::{TRUSTED_OPAQUE_XATTR, USER_OPAQUE_XATTR};
use nix::sys::stat::{Mode, SFlag, makedev, mknod};
use std::fs;
use std::path::Path;

/// Probed once when a store is opened.
#[derive(Clone, Copy, Debug)]
pub struct HostCaps {
    /// euid 0 in the initial user namespace: may create device nodes, set trusted xattrs.
    pub real_root: bool,
    /// The form layers are unpacked in by this process.
    pub layer_format: LayerFormat,
}

/// Real root = euid 0 and an identity uid map (not a user namespace's mapped root).
pub fn is_real_root() -> bool {
    nix::unistd::geteuid().is_root() && uid_map_is_identity()
}

fn uid_map_is_identity() -> bool {
    fs::read_to_string("/proc/self/uid_map").is_ok_and(|map| {
        let fields: Vec<&str> = map.split_whitespace().collect();
        fields == ["0", "0", "4294967295"]
    })
}

impl HostCaps {
    /// Tries, in a scratch directory under `scratch_parent`, to make an overlay whiteout
    /// (char device 0:0) and each opaque xattr.
    pub fn probe(scratch_parent: &Path) -> HostCaps {
        let real_root = is_real_root();
        let scratch = scratch_parent.join(format!(
            "probe-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let layer_format = match fs::create_dir(&scratch) {
            Ok(()) => {
                let format = probe_in(&scratch);
                let _ = fs::remove_dir_all(&scratch);
                format
            }
            Err(err) => {
                tracing::warn!(
                    "cannot probe overlay layer support in {}: {err}",
                    scratch.display()
                );
                LayerFormat::Portable
            }
        };
        HostCaps {
            real_root,
            layer_format,
        }
    }
}

fn probe_in(scratch: &Path) -> LayerFormat {
    let whiteout_ok = mknod(
        &scratch.join("whiteout"),
        SFlag::S_IFCHR,
        Mode::empty(),
        makedev(0, 0),
    )
    .is_ok();
    let dir = scratch.join("dir");
    if fs::create_dir(&dir).is_err() {
        return LayerFormat::Portable;
    }
    let trusted_xattr = xattr::set(&dir, TRUSTED_OPAQUE_XATTR, b"y").is_ok();
    let user_xattr = xattr::set(&dir, USER_OPAQUE_XATTR, b"y").is_ok();
    if whiteout_ok && (trusted_xattr || user_xattr) {
        LayerFormat::Overlay {
            trusted_xattr,
            user_xattr,
        }
    } else {
        tracing::info!(
            whiteout_ok,
            trusted_xattr,
            user_xattr,
            "layers are unpacked in portable form (OCI whiteout files): containers will get copied root filesystems"
        );
        LayerFormat::Portable
    }
}
