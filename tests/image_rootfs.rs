//! Container root filesystems: overlayfs and the copy fallback give the same merged tree,
//! writes never reach the shared layers, and leases protect images from removal.

#[path = "support/image.rs"]
mod support;

use runp::cri::{ImageService, api};
use runp::image::{ImageError, ImageStore, RootfsKind, RootfsPolicy};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use support::*;

fn busybox(store: &ImageStore) -> String {
    import_fixture(store, "busybox-oci.tar").id
}

/// Writes into a rootfs and checks the shared layer did not change.
fn check_writes_stay_private(store: &ImageStore, id: &str, rootfs: &Path) {
    let record = store.resolve(id).unwrap();
    let (data_layer, _) = store.layer_tree(&record.layers[1]).unwrap();
    let (base_layer, _) = store.layer_tree(&record.layers[0]).unwrap();
    fs::write(rootfs.join("opt/data/b"), b"changed\n").unwrap();
    fs::remove_file(rootfs.join("bin/sh")).unwrap();
    fs::write(rootfs.join("new-file"), b"new").unwrap();
    assert_eq!(fs::read(data_layer.join("opt/data/b")).unwrap(), b"bravo\n");
    assert_eq!(
        fs::read(data_layer.join("opt/data/b-hard")).unwrap(),
        b"bravo\n"
    );
    assert!(fs::symlink_metadata(base_layer.join("bin/sh")).is_ok());
    assert!(!base_layer.join("new-file").exists());
    let layer_ino = fs::metadata(base_layer.join("bin/busybox")).unwrap().ino();
    let rootfs_busybox = fs::metadata(rootfs.join("bin/busybox")).unwrap();
    if rootfs_busybox.dev() == fs::metadata(&base_layer).unwrap().dev() {
        assert_ne!(
            rootfs_busybox.ino(),
            layer_ino,
            "a copy must not share inodes with the layer"
        );
    }
}

#[test]
fn overlay_rootfs_merges_layers_and_keeps_them_read_only() {
    const TEST: &str = "overlay_rootfs_merges_layers_and_keeps_them_read_only";
    if !nix::unistd::geteuid().is_root() {
        skip(TEST, "root or a user namespace's root (overlay mounts)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let id = busybox(&store);
    let one = dir.path().join("containers/one");
    let prepared = store.prepare_rootfs(&id, "one", &one).unwrap();
    assert_eq!(
        prepared.kind,
        RootfsKind::Overlay,
        "overlayfs works as root and in a user namespace here"
    );
    assert_eq!(prepared.path, one.join("rootfs"));
    assert_eq!(mounts_at(&prepared.path), 1);
    check_busybox_tree(TEST, &prepared.path);

    // Preparing again for the same holder returns the same mount.
    assert_eq!(store.prepare_rootfs(&id, "one", &one).unwrap(), prepared);
    assert_eq!(mounts_at(&prepared.path), 1);

    check_writes_stay_private(&store, &id, &prepared.path);
    assert!(
        one.join("upper/new-file").exists(),
        "writes land in the upper dir"
    );
    // A second container still sees the image as built.
    let two = dir.path().join("containers/two");
    let second = store.prepare_rootfs(&id, "two", &two).unwrap();
    check_busybox_tree(TEST, &second.path);

    store.release_rootfs(&id, "one", &one).unwrap();
    assert_eq!(mounts_at(&prepared.path), 0);
    assert!(
        !one.join("rootfs").exists() && !one.join("upper").exists() && !one.join("work").exists()
    );
    store.release_rootfs(&id, "one", &one).unwrap(); // idempotent
    store.release_rootfs(&id, "two", &two).unwrap();
    assert_eq!(mounts_at(&second.path), 0);
    assert_eq!(
        fs::read_dir(dir.path().join("images/leases"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn copy_fallback_builds_the_same_tree() {
    const TEST: &str = "copy_fallback_builds_the_same_tree";
    for portable in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store_with(dir.path(), RootfsPolicy::CopyOnly, portable);
        let id = busybox(&store);
        let container = dir.path().join("c");
        let prepared = store.prepare_rootfs(&id, "c", &container).unwrap();
        assert_eq!(prepared.kind, RootfsKind::Copy);
        assert_eq!(mounts_at(&prepared.path), 0);
        check_busybox_tree(TEST, &prepared.path);
        check_writes_stay_private(&store, &id, &prepared.path);
        store.release_rootfs(&id, "c", &container).unwrap();
        assert!(!prepared.path.exists());
        assert!(!container.join("rootfs.partial").exists());
    }
}

#[test]
fn portable_layers_fall_back_to_a_copy_automatically() {
    const TEST: &str = "portable_layers_fall_back_to_a_copy_automatically";
    let dir = tempfile::tempdir().unwrap();
    let store = open_store_with(dir.path(), RootfsPolicy::Auto, true);
    let id = busybox(&store);
    let record = store.resolve(&id).unwrap();
    let (top, _) = store.layer_tree(&record.layers[2]).unwrap();
    assert!(
        top.join("opt/data/.wh.a").is_file(),
        "portable layers keep OCI whiteout files"
    );
    let prepared = store
        .prepare_rootfs(&id, "c", &dir.path().join("c"))
        .unwrap();
    assert_eq!(prepared.kind, RootfsKind::Copy);
    check_busybox_tree(TEST, &prepared.path);
}

#[test]
fn leased_images_are_not_removed_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store_with(dir.path(), RootfsPolicy::CopyOnly, false);
    let id = busybox(&store);
    let record = store.resolve(&id).unwrap();
    let container = dir.path().join("c");
    store
        .prepare_rootfs(BUSYBOX_TAG, "container-1", &container)
        .unwrap();

    match store.remove(BUSYBOX_ALT_TAG, false) {
        Err(ImageError::InUse { image, holders }) => {
            assert_eq!(image, id);
            assert_eq!(holders, vec!["container-1"]);
        }
        other => panic!("expected InUse, got {other:?}"),
    }
    // Another process (a second store handle on the same root) sees the lease too.
    let other = open_store(dir.path());
    assert!(matches!(
        other.remove(&id, false),
        Err(ImageError::InUse { .. })
    ));
    // Through the CRI: FailedPrecondition.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = rt
        .block_on(store.remove_image(api::RemoveImageRequest {
            image: Some(api::ImageSpec {
                image: id.clone(),
                ..Default::default()
            }),
        }))
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
    assert!(store.resolve(&id).is_ok());

    // Forced: the image goes, the leased layers stay until the rootfs is released.
    store.remove(&id, true).unwrap();
    assert!(matches!(store.resolve(&id), Err(ImageError::NotFound(_))));
    for layer in &record.layers {
        assert!(store.layer_tree(layer).is_some(), "leased layer kept");
    }
    assert!(container.join("rootfs/bin/busybox").exists());
    store
        .release_rootfs(&id, "container-1", &container)
        .unwrap();
    for layer in &record.layers {
        assert!(
            store.layer_tree(layer).is_none(),
            "layer collected after release"
        );
    }
    assert_eq!(
        fs::read_dir(dir.path().join("images/blobs/sha256"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        fs::read_dir(dir.path().join("images/layers"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn removing_one_image_keeps_layers_another_needs() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let busybox = import_fixture(&store, "busybox-oci");
    let extra = import_fixture(&store, "busybox-extra-oci");
    store.remove(BUSYBOX_TAG, false).unwrap();
    assert!(
        store.layer_tree(&extra.layers[0]).is_some(),
        "shared base layer kept"
    );
    assert!(
        store.layer_tree(&busybox.layers[2]).is_none(),
        "busybox-only layer removed"
    );
    assert!(matches!(
        store.remove(BUSYBOX_TAG, false),
        Err(ImageError::NotFound(_))
    ));
    let prepared = store
        .prepare_rootfs(EXTRA_TAG, "x", &dir.path().join("x"))
        .unwrap();
    assert_eq!(
        fs::read_to_string(prepared.path.join("opt/extra/hello")).unwrap(),
        "hello from extra\n"
    );
    assert!(prepared.path.join("bin/busybox").exists());
    store
        .release_rootfs(&extra.id, "x", &dir.path().join("x"))
        .unwrap();
}

#[test]
fn preparing_an_unknown_image_takes_no_lease() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let err = store
        .prepare_rootfs("nothere:1", "c", &dir.path().join("c"))
        .unwrap_err();
    assert!(matches!(err, ImageError::NotFound(_)), "{err}");
    assert_eq!(
        fs::read_dir(dir.path().join("images/leases"))
            .unwrap()
            .count(),
        0
    );
    assert!(!dir.path().join("c/rootfs").exists());
}
