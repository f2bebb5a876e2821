//! Image garbage collection by disk usage (the kubelet's image GC): when the image filesystem is
//! more than `high_percent` full, remove unused images, least recently used first, until usage is
//! back to `low_percent`. Images used by any container (running or not) are never removed.

use crate::cri::{CriResult, ImageService, RuntimeService, api};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// Thresholds of the image GC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageGcPolicy {
    pub high_percent: u8,
    pub low_percent: u8,
    /// Images detected more recently than this are not removed (they may be about to be used).
    pub min_age: Duration,
    pub period: Duration,
}

impl Default for ImageGcPolicy {
    /// The kubelet's defaults: 85 % / 80 %, images at least 2 minutes old, every 5 minutes.
    fn default() -> Self {
        ImageGcPolicy {
            high_percent: 85,
            low_percent: 80,
            min_age: Duration::from_secs(120),
            period: Duration::from_secs(300),
        }
    }
}

/// An image as the GC sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcImage {
    pub id: String,
    pub size: u64,
    pub in_use: bool,
    pub first_seen: SystemTime,
    pub last_used: SystemTime,
}

/// Capacity and free space of the image filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskUsage {
    pub capacity: u64,
    pub available: u64,
}

/// Images to remove (in order) and the bytes that frees.
pub fn select_images(
    images: &[GcImage],
    disk: DiskUsage,
    policy: &ImageGcPolicy,
    now: SystemTime,
) -> (Vec<String>, u64) {
    if disk.capacity == 0 {
        return (Vec::new(), 0);
    }
    let used = disk.capacity.saturating_sub(disk.available);
    let percent = u128::from(used) * 100 / u128::from(disk.capacity);
    if percent < u128::from(policy.high_percent) {
        return (Vec::new(), 0);
    }
    let target_used = (u128::from(disk.capacity) * u128::from(policy.low_percent) / 100) as u64;
    let to_free = used.saturating_sub(target_used);
    let mut candidates: Vec<&GcImage> = images
        .iter()
        .filter(|i| !i.in_use)
        .filter(|i| {
            now.duration_since(i.first_seen)
                .is_ok_and(|age| age >= policy.min_age)
        })
        .collect();
    candidates.sort_by_key(|i| (i.last_used, i.id.clone()));
    let mut freed = 0u64;
    let mut remove = Vec::new();
    for image in candidates {
        if freed >= to_free {
            break;
        }
        freed = freed.saturating_add(image.size);
        remove.push(image.id.clone());
    }
    (remove, freed)
}

/// Capacity and free space of the filesystem holding `path`.
pub fn disk_usage(path: &Path) -> std::io::Result<DiskUsage> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(std::io::Error::from)?;
    let fragment = stat.fragment_size() as u64;
    Ok(DiskUsage {
        capacity: (stat.blocks() as u64).saturating_mul(fragment),
        available: (stat.blocks_available() as u64).saturating_mul(fragment),
    })
}

/// Remembers when images were first seen and last used, across GC passes.
#[derive(Default)]
pub struct ImageGc {
    seen: HashMap<String, (SystemTime, SystemTime)>,
}

impl ImageGc {
    /// One pass: returns the number of images removed.
    pub async fn collect(
        &mut self,
        runtime: &dyn RuntimeService,
        images: &dyn ImageService,
        policy: &ImageGcPolicy,
        now: SystemTime,
    ) -> CriResult<usize> {
        let in_use: HashSet<String> = runtime
            .list_containers(api::ListContainersRequest::default())
            .await?
            .containers
            .into_iter()
            .flat_map(|c| {
                let spec = c.image.map(|i| i.image).unwrap_or_default();
                [c.image_ref, c.image_id, spec]
            })
            .filter(|s| !s.is_empty())
            .collect();
        let listed = images
            .list_images(api::ListImagesRequest::default())
            .await?
            .images;
        let current: HashSet<&str> = listed.iter().map(|i| i.id.as_str()).collect();
        self.seen.retain(|id, _| current.contains(id.as_str()));
        let mut gc_images = Vec::with_capacity(listed.len());
        for image in &listed {
            let used = in_use.contains(&image.id)
                || image.repo_tags.iter().any(|t| in_use.contains(t))
                || image.repo_digests.iter().any(|d| in_use.contains(d));
            let entry = self.seen.entry(image.id.clone()).or_insert((now, now));
            if used {
                entry.1 = now;
            }
            gc_images.push(GcImage {
                id: image.id.clone(),
                size: image.size,
                in_use: used,
                first_seen: entry.0,
                last_used: entry.1,
            });
        }
        let fs = images
            .image_fs_info(api::ImageFsInfoRequest {})
            .await?
            .image_filesystems;
        let Some(mountpoint) = fs
            .first()
            .and_then(|f| f.fs_id.as_ref())
            .map(|f| f.mountpoint.clone())
        else {
            return Ok(0);
        };
        let disk = match disk_usage(Path::new(&mountpoint)) {
            Ok(disk) => disk,
            Err(err) => {
                tracing::warn!(%mountpoint, error = %err, "image GC: cannot stat the image filesystem");
                return Ok(0);
            }
        };
        let (remove, freed) = select_images(&gc_images, disk, policy, now);
        let mut removed = 0;
        for id in remove {
            match images
                .remove_image(api::RemoveImageRequest {
                    image: Some(api::ImageSpec {
                        image: id.clone(),
                        ..Default::default()
                    }),
                })
                .await
            {
                Ok(_) => {
                    removed += 1;
                    self.seen.remove(&id);
                }
                Err(status) => tracing::warn!(%id, error = %status, "image GC: cannot remove"),
            }
        }
        if removed > 0 {
            tracing::info!(removed, freed_bytes = freed, "image GC freed disk space");
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn img(id: &str, size: u64, in_use: bool, first: u64, last: u64) -> GcImage {
        GcImage {
            id: id.into(),
            size,
            in_use,
            first_seen: at(first),
            last_used: at(last),
        }
    }

    #[test]
    fn frees_down_to_the_low_threshold_lru_first() {
        let policy = ImageGcPolicy::default();
        let images = vec![
            img("used", 50, true, 0, 0),
            img("old", 10, false, 0, 10),
            img("older", 10, false, 0, 5),
            img("newest", 10, false, 0, 500),
            img("fresh", 10, false, 900, 900),
        ];
        let now = at(1000);
        let disk = |available| DiskUsage {
            capacity: 100,
            available,
        };
        let cases = [
            ("below the high threshold", disk(16), vec![], 0),
            ("90 % used: free 10 bytes", disk(10), vec!["older"], 10),
            (
                "95 % used: free 15 bytes",
                disk(5),
                vec!["older", "old"],
                20,
            ),
            ("full: free 20 bytes", disk(0), vec!["older", "old"], 20),
        ];
        for (name, disk, want, freed) in cases {
            let (got, got_freed) = select_images(&images, disk, &policy, now);
            assert_eq!(got, want, "{name}");
            assert_eq!(got_freed, freed, "{name}");
        }
        let empty = DiskUsage {
            capacity: 0,
            available: 0,
        };
        assert!(select_images(&images, empty, &policy, now).0.is_empty());
    }

    #[test]
    fn statvfs_of_root() {
        let usage = disk_usage(Path::new("/")).unwrap();
        assert!(usage.capacity > 0 && usage.available <= usage.capacity);
    }
}
