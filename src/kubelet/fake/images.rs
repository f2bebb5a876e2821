//! `ImageService` of the fake runtime: exact-string image references.

use super::{FakeImage, FakeRuntime, State};
use crate::cri::{CriResult, ImageService, api};
use sha2::{Digest, Sha256};
use tonic::Status;

pub(crate) fn find<'a>(state: &'a State, reference: &str) -> Option<&'a FakeImage> {
    state
        .images
        .iter()
        .find(|i| i.id == reference || i.tags.iter().any(|t| t == reference))
}

pub(crate) fn insert(state: &mut State, reference: &str, size: u64) -> String {
    if let Some(image) = find(state, reference) {
        return image.id.clone();
    }
    let id = format!(
        "sha256:{}",
        hex::encode(Sha256::digest(reference.as_bytes()))
    );
    state.images.push(FakeImage {
        id: id.clone(),
        tags: vec![reference.to_string()],
        size,
    });
    id
}

fn to_api(image: &FakeImage) -> api::Image {
    api::Image {
        id: image.id.clone(),
        repo_tags: image.tags.clone(),
        size: image.size,
        ..Default::default()
    }
}

fn requested(spec: Option<api::ImageSpec>) -> Result<String, Status> {
    spec.map(|s| s.image)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Status::invalid_argument("image is required"))
}

#[async_trait::async_trait]
impl ImageService for FakeRuntime {
    async fn list_images(
        &self,
        _req: api::ListImagesRequest,
    ) -> CriResult<api::ListImagesResponse> {
        let state = self.lock();
        Ok(api::ListImagesResponse {
            images: state.images.iter().map(to_api).collect(),
        })
    }

    async fn image_status(
        &self,
        req: api::ImageStatusRequest,
    ) -> CriResult<api::ImageStatusResponse> {
        let reference = requested(req.image)?;
        let state = self.lock();
        Ok(api::ImageStatusResponse {
            image: find(&state, &reference).map(to_api),
            ..Default::default()
        })
    }

    async fn pull_image(&self, req: api::PullImageRequest) -> CriResult<api::PullImageResponse> {
        let reference = requested(req.image)?;
        let mut state = self.lock();
        state.calls.push(format!("PullImage {reference}"));
        if state.failing_pulls.contains(&reference) {
            return Err(Status::unavailable(format!(
                "pulling {reference}: connection refused"
            )));
        }
        let image_ref = insert(&mut state, &reference, 1 << 20);
        Ok(api::PullImageResponse { image_ref })
    }

    async fn remove_image(
        &self,
        req: api::RemoveImageRequest,
    ) -> CriResult<api::RemoveImageResponse> {
        let reference = requested(req.image)?;
        let mut state = self.lock();
        state.calls.push(format!("RemoveImage {reference}"));
        state
            .images
            .retain(|i| i.id != reference && !i.tags.contains(&reference));
        Ok(api::RemoveImageResponse {})
    }

    async fn image_fs_info(
        &self,
        _req: api::ImageFsInfoRequest,
    ) -> CriResult<api::ImageFsInfoResponse> {
        let state = self.lock();
        let used: u64 = state.images.iter().map(|i| i.size).sum();
        Ok(api::ImageFsInfoResponse {
            image_filesystems: vec![api::FilesystemUsage {
                timestamp: self.now_nanos(),
                fs_id: Some(api::FilesystemIdentifier {
                    mountpoint: state.image_fs_mountpoint.clone(),
                }),
                used_bytes: Some(api::UInt64Value { value: used }),
                inodes_used: None,
            }],
            container_filesystems: Vec::new(),
        })
    }
}
