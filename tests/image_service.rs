//! The CRI ImageService semantics, exercised through the trait as the sync loop uses it.

#[path = "support/image.rs"]
mod support;

use runp::cri::{ImageService, api};
use runp::image::{ImageStore, StoreOptions};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use support::*;

fn spec(image: &str) -> Option<api::ImageSpec> {
    Some(api::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

async fn status(store: &ImageStore, image: &str, verbose: bool) -> api::ImageStatusResponse {
    store
        .image_status(api::ImageStatusRequest {
            image: spec(image),
            verbose,
        })
        .await
        .unwrap()
}

async fn pull(store: &ImageStore, image: &str) -> Result<String, tonic::Status> {
    store
        .pull_image(api::PullImageRequest {
            image: spec(image),
            ..Default::default()
        })
        .await
        .map(|r| r.image_ref)
}

async fn list(store: &ImageStore, filter: Option<&str>) -> Vec<api::Image> {
    store
        .list_images(api::ListImagesRequest {
            filter: filter.map(|f| api::ImageFilter { image: spec(f) }),
        })
        .await
        .unwrap()
        .images
}

#[tokio::test]
async fn status_and_list_follow_cri_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    assert!(list(&store, None).await.is_empty());
    let unknown = status(&store, "busybox", true).await;
    assert!(unknown.image.is_none(), "unknown image is Ok with no image");
    assert!(unknown.info.is_empty());

    let busybox = import_fixture(&store, "busybox-docker.tar");
    let extra = import_fixture(&store, "busybox-extra-oci");

    let found = status(&store, "busybox", false).await;
    let image = found.image.expect("busybox");
    assert_eq!(image.id, busybox.id);
    assert_eq!(image.repo_tags, vec![BUSYBOX_TAG, BUSYBOX_ALT_TAG]);
    assert_eq!(image.repo_digests, busybox.repo_digests);
    assert!(image.size > 0);
    assert_eq!((image.uid, image.username.as_str()), (None, ""));
    assert!(found.info.is_empty(), "info only when verbose");

    let extra_status = status(&store, &extra.id[7..19], true).await;
    let extra_image = extra_status.image.expect("found by id prefix");
    assert_eq!(extra_image.username, "app");
    assert_eq!(extra_image.uid, None);
    let info: serde_json::Value = serde_json::from_str(&extra_status.info["info"]).unwrap();
    assert_eq!(info["config"]["config"]["User"], "app");
    assert_eq!(info["id"], extra.id);

    assert_eq!(list(&store, None).await.len(), 2);
    let filtered = list(&store, Some("runp.test/busybox-extra:1")).await;
    assert_eq!(
        filtered.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        vec![extra.id.as_str()]
    );
    assert!(list(&store, Some("nothere")).await.is_empty());
    assert_eq!(list(&store, Some(&busybox.id)).await.len(), 1);

    // A numeric User becomes a uid.
    let layout = dir.path().join("numeric");
    let mut numeric = TestImage::new(
        "test.io/numeric:1",
        vec![(LayerBuilder::new().file("f", b"f").finish(), Compress::Gzip)],
    );
    numeric.user = Some("1000:1000".into());
    write_oci_layout(&layout, &[numeric]);
    store.import(&layout).unwrap();
    let image = status(&store, "test.io/numeric:1", false)
        .await
        .image
        .unwrap();
    assert_eq!(image.uid, Some(api::Int64Value { value: 1000 }));
    assert_eq!(image.username, "");
}

#[tokio::test]
async fn pull_resolves_local_store_and_local_sources() {
    let fixtures = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());

    // Ordinary references go to their registry; `.test` names never resolve (RFC 2606), so
    // these registries are unreachable.
    let missing = pull(&store, "runp.test/absent:1").await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::Unavailable, "{missing:?}");
    assert_eq!(
        pull(&store, "").await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    assert_eq!(
        pull(&store, "Not A Ref").await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );

    let archive = format!(
        "oci-archive:{}:runp.test/busybox:1",
        fixtures.join("busybox-oci.tar").display()
    );
    let id = pull(&store, &archive).await.unwrap();
    assert!(id.starts_with("sha256:"));
    // Once pulled, the same image string is known (kubelet checks presence with ImageStatus).
    assert_eq!(status(&store, &archive, false).await.image.unwrap().id, id);
    assert_eq!(
        pull(&store, BUSYBOX_ALT_TAG).await.unwrap(),
        id,
        "an unreachable registry: the copy in the store stands in"
    );

    let docker = format!(
        "docker-archive:{}",
        fixtures.join("busybox-docker.tar").display()
    );
    assert_eq!(pull(&store, &docker).await.unwrap(), id);
    let extra = format!(
        "oci:{}:{EXTRA_TAG}",
        fixtures.join("busybox-extra-oci").display()
    );
    let extra_id = pull(&store, &extra).await.unwrap();
    assert_ne!(extra_id, id);
    let absent = format!(
        "oci:{}:runp.test/absent:1",
        fixtures.join("busybox-extra-oci").display()
    );
    assert_eq!(
        pull(&store, &absent).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let no_file = format!("oci-archive:{}", dir.path().join("nothing.tar").display());
    assert!(pull(&store, &no_file).await.is_err());
}

#[tokio::test]
async fn remove_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let id = import_fixture(&store, "busybox-oci").id;
    for image in [
        BUSYBOX_ALT_TAG,
        BUSYBOX_ALT_TAG,
        "never-existed:1",
        id.as_str(),
    ] {
        store
            .remove_image(api::RemoveImageRequest { image: spec(image) })
            .await
            .unwrap();
    }
    assert!(status(&store, &id, false).await.image.is_none());
    assert!(list(&store, None).await.is_empty());
}

#[tokio::test]
async fn image_fs_info_reports_real_usage_at_the_injected_time() {
    let dir = tempfile::tempdir().unwrap();
    let now = UNIX_EPOCH + Duration::from_secs(1_750_000_000) + Duration::from_nanos(42);
    let options = StoreOptions {
        clock: Arc::new(move || now),
        ..StoreOptions::default()
    };
    let store = ImageStore::open_with(dir.path().join("images"), options).unwrap();
    let usage = |r: api::ImageFsInfoResponse| {
        assert!(r.container_filesystems.is_empty());
        let fs = r.image_filesystems.into_iter().next().unwrap();
        (
            fs.timestamp,
            fs.fs_id.unwrap().mountpoint,
            fs.used_bytes.unwrap().value,
            fs.inodes_used.unwrap().value,
        )
    };
    let (ts, mountpoint, empty_bytes, empty_inodes) = usage(
        store
            .image_fs_info(api::ImageFsInfoRequest {})
            .await
            .unwrap(),
    );
    assert_eq!(ts, 1_750_000_000_000_000_042);
    assert!(!mountpoint.is_empty());
    assert!(dir.path().canonicalize().unwrap().starts_with(&mountpoint));

    store.import(&fixtures().join("busybox-oci")).unwrap();
    let (_, _, bytes, inodes) = usage(
        store
            .image_fs_info(api::ImageFsInfoRequest {})
            .await
            .unwrap(),
    );
    // The blobs (~1 MiB gzip) and the unpacked busybox (~2 MiB) are both counted.
    assert!(bytes > empty_bytes + 3_000_000, "{empty_bytes} -> {bytes}");
    // ~300 entries in the base layer, each applet symlink an inode.
    assert!(inodes > empty_inodes + 280, "{empty_inodes} -> {inodes}");
}
