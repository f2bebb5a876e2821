//! The CRI `ImageService` over the store. Store calls block (file I/O, unpacking), so each runs
//! on tokio's blocking pool; errors become CRI statuses once, via `From<ImageError>` and
//! `From<&RegistryError>`. `PullImage` of an ordinary reference pulls from its registry.

use super::error::ImageError;
use super::import::ImportOptions;
use super::pull::{PullSource, parse_pull_source};
use super::records::ImageRecord;
use super::reference::NamedRef;
use super::registry::{PullCredentials, RegistryError};
use super::store::ImageStore;
use super::usage;
use crate::cri::{CriResult, ImageService, api};
use std::collections::HashMap;
use std::time::UNIX_EPOCH;

impl ImageStore {
    /// When the registry cannot be reached, an image the store already has under that name
    /// stands in (images loaded with `runp image load` keep working offline); else the
    /// registry's error.
    async fn local_instead(&self, reference: &str, err: &RegistryError) -> CriResult<String> {
        let key = reference.to_string();
        match self.blocking(move |store| find(&store, &key)).await? {
            Some(record) => {
                tracing::warn!(image = reference, error = %err, "registry unreachable; using the image in the store");
                Ok(record.id)
            }
            None => Err(tonic::Status::from(err)),
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(ImageStore) -> Result<T, ImageError> + Send + 'static,
    ) -> CriResult<T> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(store))
            .await
            .map_err(|e| tonic::Status::internal(format!("image store task failed: {e}")))?
            .map_err(tonic::Status::from)
    }
}

/// The reference to look an `ImageSpec.image` up by: a local pull source is known by the name
/// it selects (without one it names no image, so it is "not present" and will be pulled).
fn lookup_key(image: &str) -> Option<String> {
    match parse_pull_source(image) {
        PullSource::Reference(reference) => Some(reference),
        PullSource::Local { select, .. } => select,
    }
}

fn spec_image(spec: Option<&api::ImageSpec>) -> &str {
    spec.map(|s| s.image.as_str()).unwrap_or("")
}

/// Finds an image, treating "no such image" as `None`, and a name that is no valid reference
/// too: containerd resolves such a name locally as not present (ImageStatus answers empty,
/// RemoveImage succeeds); only PullImage refuses it.
fn find(store: &ImageStore, image: &str) -> Result<Option<ImageRecord>, ImageError> {
    let Some(key) = lookup_key(image) else {
        return Ok(None);
    };
    match store.resolve(&key) {
        Ok(record) => Ok(Some(record)),
        Err(ImageError::NotFound(_) | ImageError::InvalidReference { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

/// `User` of an image config: a numeric user (`1000`, `1000:1000`) is a uid, anything else a
/// user name, as the CRI `Image` wants them.
pub fn split_user(user: &str) -> (Option<i64>, String) {
    let name = user.split(':').next().unwrap_or("");
    match name.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, name.to_string()),
    }
}

pub fn to_cri_image(record: &ImageRecord) -> api::Image {
    let (uid, username) = record.user().map(split_user).unwrap_or_default();
    api::Image {
        id: record.id.clone(),
        repo_tags: record.repo_tags.clone(),
        repo_digests: record.repo_digests.clone(),
        size: record.size,
        uid: uid.map(|value| api::Int64Value { value }),
        username,
        spec: Some(api::ImageSpec {
            image: record.id.clone(),
            ..Default::default()
        }),
        pinned: false,
    }
}

#[async_trait::async_trait]
impl ImageService for ImageStore {
    async fn list_images(&self, req: api::ListImagesRequest) -> CriResult<api::ListImagesResponse> {
        let wanted = req
            .filter
            .as_ref()
            .map(|f| spec_image(f.image.as_ref()).to_string())
            .filter(|s| !s.is_empty());
        let records = self
            .blocking(move |store| match wanted {
                Some(image) => Ok(find(&store, &image)?.into_iter().collect()),
                None => store.list(),
            })
            .await?;
        Ok(api::ListImagesResponse {
            images: records.iter().map(to_cri_image).collect(),
        })
    }

    async fn image_status(
        &self,
        req: api::ImageStatusRequest,
    ) -> CriResult<api::ImageStatusResponse> {
        let image = spec_image(req.image.as_ref()).to_string();
        let record = self.blocking(move |store| find(&store, &image)).await?;
        let mut info = HashMap::new();
        if req.verbose
            && let Some(record) = &record
        {
            let json = serde_json::to_string(record)
                .map_err(|e| tonic::Status::internal(format!("encoding image info: {e}")))?;
            info.insert("info".to_string(), json);
        }
        Ok(api::ImageStatusResponse {
            image: record.as_ref().map(to_cri_image),
            info,
        })
    }

    async fn pull_image(&self, req: api::PullImageRequest) -> CriResult<api::PullImageResponse> {
        let image = spec_image(req.image.as_ref()).to_string();
        if image.is_empty() {
            return Err(tonic::Status::invalid_argument("PullImage needs an image"));
        }
        let id = match parse_pull_source(&image) {
            PullSource::Local { path, select } => {
                self.blocking(move |store| {
                    let options = ImportOptions {
                        select: select.as_deref(),
                        progress: None,
                    };
                    let records = store.import_with(&path, options)?;
                    if records.len() > 1 {
                        tracing::info!(source = %path.display(), count = records.len(), "pulled several images; reporting the first");
                    }
                    records
                        .first()
                        .map(|r| r.id.clone())
                        .ok_or_else(|| ImageError::NotFound(image.clone()))
                })
                .await?
            }
            PullSource::Reference(reference) => {
                let name = NamedRef::parse(&reference)?;
                let credentials = PullCredentials::from_cri(req.auth.as_ref())?;
                match self.pull(&name, credentials, None).await {
                    Ok(record) => record.id,
                    Err(err) if err.is_unreachable() => {
                        self.local_instead(&reference, &err).await?
                    }
                    Err(err) => return Err(tonic::Status::from(&*err)),
                }
            }
        };
        Ok(api::PullImageResponse { image_ref: id })
    }

    async fn remove_image(
        &self,
        req: api::RemoveImageRequest,
    ) -> CriResult<api::RemoveImageResponse> {
        let image = spec_image(req.image.as_ref()).to_string();
        self.blocking(move |store| {
            let Some(record) = find(&store, &image)? else {
                return Ok(()); // already gone: RemoveImage is idempotent
            };
            match store.remove(&record.id, false) {
                Err(ImageError::NotFound(_)) => Ok(()),
                other => other,
            }
        })
        .await?;
        Ok(api::RemoveImageResponse {})
    }

    async fn image_fs_info(
        &self,
        _req: api::ImageFsInfoRequest,
    ) -> CriResult<api::ImageFsInfoResponse> {
        let (measured, now) = self
            .blocking(|store| Ok((usage::measure(store.root())?, store.now())))
            .await?;
        let timestamp = now
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(1);
        Ok(api::ImageFsInfoResponse {
            image_filesystems: vec![api::FilesystemUsage {
                timestamp,
                fs_id: Some(api::FilesystemIdentifier {
                    mountpoint: measured.mountpoint.display().to_string(),
                }),
                used_bytes: Some(api::UInt64Value {
                    value: measured.used_bytes,
                }),
                inodes_used: Some(api::UInt64Value {
                    value: measured.inodes_used,
                }),
            }],
            container_filesystems: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_config_user_into_uid_or_name() {
        let cases = [
            ("1000", (Some(1000), "")),
            ("1000:1000", (Some(1000), "")),
            ("0", (Some(0), "")),
            ("app", (None, "app")),
            ("app:app", (None, "app")),
            ("", (None, "")),
        ];
        for (user, (uid, name)) in cases {
            assert_eq!(split_user(user), (uid, name.to_string()), "{user}");
        }
    }

    #[test]
    fn local_sources_are_looked_up_by_the_name_they_select() {
        assert_eq!(lookup_key("busybox").as_deref(), Some("busybox"));
        assert_eq!(
            lookup_key("oci-archive:/x.tar:runp.test/busybox:1").as_deref(),
            Some("runp.test/busybox:1")
        );
        assert_eq!(lookup_key("oci:/dir"), None);
    }
}
