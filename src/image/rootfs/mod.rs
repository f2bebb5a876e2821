//! Container root filesystems made from an image: `<container_dir>/rootfs` as an overlay mount
//! (upper/work under `<container_dir>`) when possible, else a private copy. Each one is a lease
//! on the image, persisted so other processes (the CLI) respect it.

pub mod copy;
pub mod overlay;

use super::error::{ImageError, IoContext};
use super::layers::LayerInfo;
use super::lease::{self, Lease};
use super::lock::StoreLock;
use super::records::{ImageRecord, Records};
use super::reference::parse_lookup;
use super::store::{ImageStore, RootfsPolicy};
use copy::{LayerTree, remove_any};
use overlay::OverlayMode;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RootfsKind {
    Overlay,
    Copy,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedRootfs {
    pub path: PathBuf,
    pub kind: RootfsKind,
}

const ROOTFS: &str = "rootfs";
const PARTIAL: &str = "rootfs.partial";
const UPPER: &str = "upper";
const WORK: &str = "work";

impl ImageStore {
    /// Makes `<container_dir>/rootfs` from the image's layers and takes a lease for `holder`.
    /// Calling it again for a holder whose rootfs is complete returns it unchanged.
    pub fn prepare_rootfs(
        &self,
        image_id: &str,
        holder: &str,
        container_dir: &Path,
    ) -> Result<PreparedRootfs, ImageError> {
        let lookup = parse_lookup(image_id)?;
        let paths = &self.inner.paths;
        let record = {
            let _lock = StoreLock::exclusive(&paths.lock)?;
            let record = Records::load(&paths.records)?
                .find(&lookup, image_id)?
                .clone();
            if let Some(existing) = lease::read(&paths.leases, holder)? {
                if existing.image_id == record.id
                    && existing.container_dir == container_dir
                    && let Some(kind) = existing.kind
                    && is_intact(container_dir, kind)
                {
                    return Ok(PreparedRootfs {
                        path: container_dir.join(ROOTFS),
                        kind,
                    });
                }
                // An unfinished or different rootfs for this holder: start over.
                teardown(&existing.container_dir)?;
            }
            lease::write(
                &paths.leases,
                &Lease {
                    holder: holder.to_string(),
                    image_id: record.id.clone(),
                    layers: record.layers.clone(),
                    container_dir: container_dir.to_path_buf(),
                    kind: None,
                    created_at: chrono::DateTime::<chrono::Utc>::from(self.now()).to_rfc3339(),
                },
            )?;
            record
        };
        match self.build_rootfs(&record, container_dir) {
            Ok(prepared) => {
                let _lock = StoreLock::exclusive(&paths.lock)?;
                if let Some(mut held) = lease::read(&paths.leases, holder)? {
                    held.kind = Some(prepared.kind);
                    lease::write(&paths.leases, &held)?;
                }
                Ok(prepared)
            }
            Err(err) => {
                if let Err(cleanup) = self.release_rootfs(&record.id, holder, container_dir) {
                    tracing::warn!(%holder, "cleaning up a failed rootfs: {cleanup}");
                }
                Err(err)
            }
        }
    }

    /// Unmounts and removes what [`Self::prepare_rootfs`] made and drops the lease. Idempotent.
    pub fn release_rootfs(
        &self,
        image_id: &str,
        holder: &str,
        container_dir: &Path,
    ) -> Result<(), ImageError> {
        teardown(container_dir)?;
        let paths = &self.inner.paths;
        let _lock = StoreLock::exclusive(&paths.lock)?;
        let Some(held) = lease::read(&paths.leases, holder)? else {
            return Ok(());
        };
        if held.image_id != image_id && !image_id.is_empty() {
            tracing::debug!(%holder, leased = %held.image_id, asked = %image_id, "releasing a lease taken for another image id");
        }
        if held.container_dir != container_dir {
            teardown(&held.container_dir)?;
        }
        lease::remove(&paths.leases, holder)?;
        let records = Records::load(&paths.records)?;
        if !records.images.iter().any(|r| r.id == held.image_id) {
            // The image was force-removed while leased: its layers may now go.
            self.collect_garbage(&records, &lease::read_all(&paths.leases)?)?;
        }
        Ok(())
    }

    fn build_rootfs(
        &self,
        record: &ImageRecord,
        container_dir: &Path,
    ) -> Result<PreparedRootfs, ImageError> {
        let mut layers: Vec<(PathBuf, LayerInfo)> = Vec::new();
        for diff_id in &record.layers {
            let found = self.layer_tree(diff_id).ok_or_else(|| {
                ImageError::io(
                    format!("image {}", record.id),
                    std::io::Error::other(format!("layer {diff_id} is missing from the store")),
                )
            })?;
            layers.push(found);
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(container_dir)
            .context(|| format!("creating {}", container_dir.display()))?;
        let rootfs = container_dir.join(ROOTFS);
        if self.inner.options.rootfs == RootfsPolicy::Auto {
            let infos: Vec<LayerInfo> = layers.iter().map(|(_, i)| i.clone()).collect();
            let attempt = overlay::choose_mode(&infos, self.inner.caps.real_root)
                .and_then(|mode| self.mount_overlay(&layers, container_dir, mode));
            match attempt {
                Ok(mode) => {
                    self.log_choice(&format!("overlayfs ({mode:?})"));
                    return Ok(PreparedRootfs {
                        path: rootfs,
                        kind: RootfsKind::Overlay,
                    });
                }
                Err(why) => self.log_choice(&format!("copy fallback, because {why}")),
            }
        } else {
            self.log_choice("copy (configured)");
        }
        let partial = container_dir.join(PARTIAL);
        remove_any(&partial).context(|| format!("removing {}", partial.display()))?;
        let trees: Vec<LayerTree> = layers
            .into_iter()
            .map(|(path, info)| LayerTree {
                path,
                format: info.format,
                name: info.diff_id.to_string(),
            })
            .collect();
        copy::build(&trees, &partial, self.inner.caps.real_root)?;
        fs::rename(&partial, &rootfs).context(|| format!("renaming to {}", rootfs.display()))?;
        Ok(PreparedRootfs {
            path: rootfs,
            kind: RootfsKind::Copy,
        })
    }

    fn mount_overlay(
        &self,
        layers: &[(PathBuf, LayerInfo)],
        container_dir: &Path,
        mode: OverlayMode,
    ) -> Result<OverlayMode, String> {
        let lowers: Vec<PathBuf> = layers.iter().map(|(p, _)| p.clone()).collect();
        let upper = container_dir.join(UPPER);
        let work = container_dir.join(WORK);
        let target = container_dir.join(ROOTFS);
        let options = overlay::mount_options(&lowers, &upper, &work, mode)?;
        for dir in [&upper, &work, &target] {
            fs::DirBuilder::new()
                .mode(0o755)
                .create(dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        overlay::mount_overlay(&target, &options).map_err(|e| {
            for dir in [&upper, &work, &target] {
                let _ = remove_any(dir);
            }
            format!("mounting overlayfs failed: {e}")
        })?;
        Ok(mode)
    }

    fn log_choice(&self, choice: &str) {
        let mut first = false;
        self.inner.rootfs_logged.get_or_init(|| first = true);
        if first {
            tracing::info!("container root filesystems: {choice}");
        } else {
            tracing::debug!("container root filesystem: {choice}");
        }
    }
}

/// A complete rootfs of `kind` is at `<container_dir>/rootfs`.
fn is_intact(container_dir: &Path, kind: RootfsKind) -> bool {
    let rootfs = container_dir.join(ROOTFS);
    match kind {
        RootfsKind::Copy => rootfs.is_dir(),
        // A mount point sits on another device than its parent directory.
        RootfsKind::Overlay => match (fs::metadata(&rootfs), fs::metadata(container_dir)) {
            (Ok(mounted), Ok(parent)) => mounted.dev() != parent.dev(),
            _ => false,
        },
    }
}

/// Unmounts and removes the rootfs, upper, work and partial directories.
fn teardown(container_dir: &Path) -> Result<(), ImageError> {
    let rootfs = container_dir.join(ROOTFS);
    overlay::unmount_all(&rootfs).context(|| format!("unmounting {}", rootfs.display()))?;
    for name in [ROOTFS, PARTIAL, UPPER, WORK] {
        let path = container_dir.join(name);
        remove_any(&path).context(|| format!("removing {}", path.display()))?;
    }
    Ok(())
}
