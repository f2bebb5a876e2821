//! overlayfs root filesystems: the image's unpacked layers as read-only lowerdirs, with the
//! container's writable upper and work directories.

use crate::image::layers::LayerInfo;
use crate::image::unpack::LayerFormat;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use std::io;
use std::path::{Path, PathBuf};

/// Which opaque-directory xattrs the mount reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverlayMode {
    /// `trusted.overlay.*` (needs real root).
    Trusted,
    /// `user.overlay.*` via the `userxattr` option (works in a user namespace).
    UserXattr,
}

/// Mount options are limited to one page; stay well below it.
const MAX_OPTIONS_LEN: usize = 3800;

/// Picks the mode every layer supports, or says why overlay cannot be used.
pub fn choose_mode(layers: &[LayerInfo], real_root: bool) -> Result<OverlayMode, String> {
    if layers.is_empty() {
        return Err("the image has no layers".into());
    }
    let mut trusted = true;
    let mut user = true;
    for layer in layers {
        match layer.format {
            LayerFormat::Overlay {
                trusted_xattr,
                user_xattr,
            } => {
                trusted &= trusted_xattr;
                user &= user_xattr;
            }
            LayerFormat::Portable => {
                return Err(format!(
                    "layer {} was unpacked without overlay whiteouts",
                    layer.diff_id
                ));
            }
        }
    }
    match (real_root && trusted, user) {
        (true, _) => Ok(OverlayMode::Trusted),
        (false, true) => Ok(OverlayMode::UserXattr),
        (false, false) => {
            Err("the layers' opaque directories carry no xattr this process can mount with".into())
        }
    }
}

/// The mount data for `lowers` (bottom layer first).
pub fn mount_options(
    lowers: &[PathBuf],
    upper: &Path,
    work: &Path,
    mode: OverlayMode,
) -> Result<String, String> {
    let all = lowers.iter().map(PathBuf::as_path).chain([upper, work]);
    for path in all {
        let text = path.to_str().ok_or("a layer path is not UTF-8")?;
        if text.contains([',', ':', '\\']) {
            return Err(format!(
                "path {text} has characters overlay options cannot carry"
            ));
        }
    }
    // overlayfs lists the top layer first.
    let lowerdir: Vec<String> = lowers
        .iter()
        .rev()
        .map(|p| p.display().to_string())
        .collect();
    let mut options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lowerdir.join(":"),
        upper.display(),
        work.display()
    );
    if mode == OverlayMode::UserXattr {
        options.push_str(",userxattr");
    }
    if options.len() > MAX_OPTIONS_LEN {
        return Err(format!(
            "{} layers make the mount options too long ({} bytes)",
            lowers.len(),
            options.len()
        ));
    }
    Ok(options)
}

pub fn mount_overlay(target: &Path, options: &str) -> io::Result<()> {
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::empty(),
        Some(options),
    )
    .map_err(io::Error::from)
}

/// Detaches whatever is mounted at `target` (stacked mounts too). Not mounted is fine.
pub fn unmount_all(target: &Path) -> io::Result<()> {
    for _ in 0..16 {
        match umount2(target, MntFlags::MNT_DETACH) {
            Ok(()) => continue,
            Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => return Ok(()),
            // Not permitted means we could not have mounted it either.
            Err(nix::errno::Errno::EPERM) => return Ok(()),
            Err(err) => return Err(err.into()),
        }
    }
    Err(io::Error::other(format!(
        "{} is still mounted after 16 unmounts",
        target.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::digest::Digest;

    fn layer(format: LayerFormat) -> LayerInfo {
        LayerInfo {
            diff_id: Digest::of_bytes(b"x"),
            format,
            entries: 0,
            file_bytes: 0,
        }
    }

    #[test]
    fn chooses_a_mode_every_layer_supports() {
        let both = layer(LayerFormat::Overlay {
            trusted_xattr: true,
            user_xattr: true,
        });
        let user = layer(LayerFormat::Overlay {
            trusted_xattr: false,
            user_xattr: true,
        });
        let trusted = layer(LayerFormat::Overlay {
            trusted_xattr: true,
            user_xattr: false,
        });
        let portable = layer(LayerFormat::Portable);
        let cases = vec![
            (vec![both.clone()], true, Ok(OverlayMode::Trusted)),
            (vec![both.clone()], false, Ok(OverlayMode::UserXattr)),
            (
                vec![both.clone(), user.clone()],
                true,
                Ok(OverlayMode::UserXattr),
            ),
            (
                vec![both.clone(), trusted.clone()],
                true,
                Ok(OverlayMode::Trusted),
            ),
            (vec![trusted.clone()], false, Err(())),
            (vec![both.clone(), portable], true, Err(())),
            (vec![], true, Err(())),
        ];
        for (layers, real_root, want) in cases {
            assert_eq!(
                choose_mode(&layers, real_root).map_err(|_| ()),
                want,
                "{layers:?} real_root={real_root}"
            );
        }
    }

    #[test]
    fn options_list_the_top_layer_first() {
        let lowers = vec![PathBuf::from("/s/l/bottom"), PathBuf::from("/s/l/top")];
        let options = mount_options(
            &lowers,
            Path::new("/c/upper"),
            Path::new("/c/work"),
            OverlayMode::UserXattr,
        )
        .unwrap();
        assert_eq!(
            options,
            "lowerdir=/s/l/top:/s/l/bottom,upperdir=/c/upper,workdir=/c/work,userxattr"
        );
        assert!(
            mount_options(
                &[PathBuf::from("/a:b")],
                Path::new("/u"),
                Path::new("/w"),
                OverlayMode::Trusted
            )
            .is_err()
        );
        let many: Vec<PathBuf> = (0..100)
            .map(|i| PathBuf::from(format!("/{}/{i}", "x".repeat(60))))
            .collect();
        assert!(
            mount_options(
                &many,
                Path::new("/u"),
                Path::new("/w"),
                OverlayMode::Trusted
            )
            .is_err()
        );
    }
}
