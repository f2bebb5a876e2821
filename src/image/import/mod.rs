//! Importing images from docker-save archives and OCI layouts (directory or tarball).
//!
//! Atomic: everything is hashed and unpacked in a private staging area first; the store changes
//! only in [`commit`], under the store lock, by renames and one records write. A failed import
//! leaves the store exactly as it was.

mod docker;
pub mod oci;
mod source;
pub mod staging;

use super::blobs::{StoredBlob, sync_dir};
use super::digest::Digest;
use super::error::{ImageError, IoContext};
use super::layers::{self, read_info};
use super::lock::StoreLock;
use super::records::{ImageRecord, Records};
use super::reference::NamedRef;
use super::store::ImageStore;
use super::unpack::UnpackOptions;
use oci_spec::image::ImageConfiguration;
use source::Source;
use staging::Staging;
use std::collections::BTreeSet;
use std::fs;
use std::os::fd::AsRawFd;
use std::path::Path;

/// One image found in a source.
pub struct Candidate {
    /// Full names (from RepoTags or name annotations).
    pub names: Vec<NamedRef>,
    /// The names as written in the source (also bare OCI `ref.name` tags), for selection.
    pub raw_refs: Vec<String>,
    pub manifest: StoredBlob,
    /// What the names point at: the top-level descriptor's digest (a multi-platform index, or
    /// the manifest itself). Repo digests are made from these, as containerd does.
    pub name_digests: Vec<Digest>,
    pub config: StoredBlob,
    pub config_json: ImageConfiguration,
    pub layers: Vec<StoredBlob>,
}

/// Reported while importing, for progress display.
#[derive(Clone, Debug)]
pub enum ImportProgress {
    Reading { done: u64, total: u64 },
    Unpacking { index: usize, count: usize },
}

#[derive(Clone, Copy, Default)]
pub struct ImportOptions<'a> {
    /// Import only the image(s) with this name (normalized, or as written in the source).
    pub select: Option<&'a str>,
    pub progress: Option<&'a dyn Fn(&ImportProgress)>,
}

impl ImageStore {
    /// Imports every image of a docker-save tarball, OCI layout directory or OCI tarball.
    pub fn import(&self, path: &Path) -> Result<Vec<ImageRecord>, ImageError> {
        self.import_with(path, ImportOptions::default())
    }

    pub fn import_with(
        &self,
        path: &Path,
        options: ImportOptions<'_>,
    ) -> Result<Vec<ImageRecord>, ImageError> {
        let paths = &self.inner.paths;
        let staging = {
            let _lock = StoreLock::exclusive(&paths.lock)?;
            Staging::create(&paths.tmp, "import")?
        };
        let report = |event: ImportProgress| {
            if let Some(progress) = options.progress {
                progress(&event);
            }
        };
        let reading = |done, total| report(ImportProgress::Reading { done, total });
        let mut source = Source::open(path, &staging, &self.inner.blobs, &reading)?;
        let candidates = if source.has("index.json") {
            oci::candidates(&mut source)?
        } else if source.has("manifest.json") {
            docker::candidates(&mut source, &staging)?
        } else {
            return Err(ImageError::invalid_source(
                path,
                "neither an OCI layout (index.json) nor a docker-save archive (manifest.json)",
            ));
        };
        let candidates = select(candidates, options.select, path)?;
        let diff_ids = candidates
            .iter()
            .map(|c| checked_diff_ids(c, path))
            .collect::<Result<Vec<_>, _>>()?;

        let mut staged_layers: Vec<Digest> = Vec::new();
        let todo: Vec<(&StoredBlob, &Digest)> = candidates
            .iter()
            .zip(&diff_ids)
            .flat_map(|(c, ids)| c.layers.iter().zip(ids))
            .collect();
        let unpack_options = UnpackOptions {
            format: self.inner.caps.layer_format,
            privileged: self.inner.caps.real_root,
        };
        for (index, (blob, diff_id)) in todo.iter().enumerate() {
            report(ImportProgress::Unpacking {
                index,
                count: todo.len(),
            });
            if staged_layers.contains(diff_id) || self.has_layer(diff_id) {
                continue;
            }
            let dir = staging.layer_dir(diff_id.hex());
            layers::unpack_blob(blob, diff_id, &dir, unpack_options)?;
            staged_layers.push((*diff_id).clone());
        }
        commit(self, &staging, &candidates, &diff_ids, &staged_layers)
    }

    pub(crate) fn has_layer(&self, diff_id: &Digest) -> bool {
        read_info(&layers::layer_dir(&self.inner.paths.layers, diff_id)).is_some()
    }
}

fn select(
    candidates: Vec<Candidate>,
    wanted: Option<&str>,
    path: &Path,
) -> Result<Vec<Candidate>, ImageError> {
    if candidates.is_empty() {
        return Err(ImageError::invalid_source(
            path,
            "the source holds no images",
        ));
    }
    let Some(wanted) = wanted else {
        return Ok(candidates);
    };
    let normalized = NamedRef::parse(wanted).ok();
    let selected: Vec<Candidate> = candidates
        .into_iter()
        .filter(|c| {
            c.raw_refs.iter().any(|r| r == wanted)
                || normalized.as_ref().is_some_and(|w| match &w.digest {
                    Some(digest) => {
                        (*digest == c.manifest.digest || c.name_digests.contains(digest))
                            && c.names.iter().any(|n| n.repository == w.repository)
                    }
                    None => c.names.iter().any(|n| n.tagged() == w.tagged()),
                })
        })
        .collect();
    if selected.is_empty() {
        return Err(ImageError::NotFound(format!(
            "{wanted} (in {})",
            path.display()
        )));
    }
    Ok(selected)
}

fn checked_diff_ids(candidate: &Candidate, path: &Path) -> Result<Vec<Digest>, ImageError> {
    let ids = candidate
        .config_json
        .rootfs()
        .diff_ids()
        .iter()
        .map(|id| Digest::parse(id))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|reason| ImageError::invalid_source(path, format!("config diff_ids: {reason}")))?;
    if ids.len() != candidate.layers.len() {
        return Err(ImageError::invalid_source(
            path,
            format!(
                "image {} lists {} layers but its config has {} diff_ids",
                candidate.config.digest,
                candidate.layers.len(),
                ids.len()
            ),
        ));
    }
    let (os, arch) = super::platform::host_platform();
    let config = &candidate.config_json;
    if config.os().to_string() != os || config.architecture().to_string() != arch {
        tracing::warn!(
            image = %candidate.config.digest,
            "image is for {}/{}, this host is {os}/{arch}",
            config.os(),
            config.architecture()
        );
    }
    Ok(ids)
}

/// Moves the staged blobs and layers into the store and records the images, under the lock.
pub(crate) fn commit(
    store: &ImageStore,
    staging: &Staging,
    candidates: &[Candidate],
    diff_ids: &[Vec<Digest>],
    staged_layers: &[Digest],
) -> Result<Vec<ImageRecord>, ImageError> {
    let paths = &store.inner.paths;
    let blobs = &store.inner.blobs;
    if !staged_layers.is_empty() {
        // One syncfs makes every unpacked file durable before its layer becomes visible.
        let dir = fs::File::open(staging.dir()).context(|| "opening staging".to_string())?;
        nix::unistd::syncfs(dir.as_raw_fd())
            .map_err(|e| ImageError::io("syncing unpacked layers", e.into()))?;
    }
    let _lock = StoreLock::exclusive(&paths.lock)?;
    for candidate in candidates {
        let all = [&candidate.config, &candidate.manifest]
            .into_iter()
            .chain(&candidate.layers);
        for blob in all {
            if blob.path.starts_with(staging.dir()) && blobs.get(&blob.digest).is_none() {
                let dest = blobs.path(&blob.digest);
                fs::rename(&blob.path, &dest).context(|| format!("storing {}", dest.display()))?;
            }
        }
    }
    sync_dir(blobs.dir())?;
    for diff_id in staged_layers {
        let dest = layers::layer_dir(&paths.layers, diff_id);
        if read_info(&dest).is_some() {
            continue; // a concurrent import got there first
        }
        if fs::symlink_metadata(&dest).is_ok() {
            // A layer whose layer.json is unreadable (truncated, garbage) would block this
            // rename forever: it goes out with the staging area, the fresh one takes its place.
            tracing::warn!(layer = %dest.display(), "replacing a layer with unreadable metadata");
            let aside = staging.dir().join(format!("damaged-{}", diff_id.hex()));
            fs::rename(&dest, &aside).context(|| format!("moving aside {}", dest.display()))?;
        }
        let staged = staging.layer_dir(diff_id.hex());
        fs::rename(&staged, &dest).context(|| format!("storing layer {}", dest.display()))?;
    }
    sync_dir(&paths.layers)?;

    let mut records = Records::load(&paths.records)?;
    let imported_at = chrono::DateTime::<chrono::Utc>::from(store.now()).to_rfc3339();
    let mut result = Vec::new();
    for (candidate, ids) in candidates.iter().zip(diff_ids) {
        let record = ImageRecord {
            id: candidate.config.digest.to_string(),
            repo_tags: dedup(candidate.names.iter().filter_map(NamedRef::tagged)),
            repo_digests: dedup(
                candidate
                    .names
                    .iter()
                    .flat_map(|n| candidate.name_digests.iter().map(|d| n.with_digest(d))),
            ),
            size: candidate.config.size + candidate.layers.iter().map(|l| l.size).sum::<u64>(),
            config: candidate.config_json.clone(),
            layers: ids.clone(),
            manifests: vec![candidate.manifest.digest.clone()],
            blobs: dedup(
                [&candidate.config, &candidate.manifest]
                    .into_iter()
                    .chain(&candidate.layers)
                    .map(|b| b.digest.clone()),
            ),
            imported_at: imported_at.clone(),
        };
        let merged = records.upsert(record);
        tracing::info!(id = %merged.id, tags = ?merged.repo_tags, "imported image");
        result.push(merged);
    }
    records.save(&paths.records)?;
    // Later candidates may have taken tags from earlier ones: report the final state.
    let mut seen = BTreeSet::new();
    Ok(result
        .into_iter()
        .filter(|r| seen.insert(r.id.clone()))
        .filter_map(|r| records.images.iter().find(|x| x.id == r.id).cloned())
        .collect())
}

fn dedup<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    items.collect::<BTreeSet<T>>().into_iter().collect()
}
