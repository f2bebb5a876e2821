//! Importing the fixture formats and crafted layouts: names, configs, dedup, compression, and
//! the unpacked layer trees.

#[path = "support/image.rs"]
mod support;

use runp::image::{ImageError, LayerFormat};
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use support::*;

#[test]
fn each_fixture_format_imports_the_same_image() {
    let fixtures = fixtures();
    let mut ids = Vec::new();
    for name in ["busybox-oci", "busybox-oci.tar", "busybox-docker.tar"] {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let records = store.import(&fixtures.join(name)).unwrap();
        assert_eq!(records.len(), 1, "{name}");
        let record = &records[0];
        assert_eq!(
            record.repo_tags,
            vec![BUSYBOX_TAG, BUSYBOX_ALT_TAG],
            "{name}"
        );
        assert_eq!(record.repo_digests.len(), 2, "{name}");
        assert!(record.repo_digests[0].starts_with("docker.io/library/busybox@sha256:"));
        assert_eq!(record.layers.len(), 3, "{name}");
        assert!(record.size > 500_000, "{name}: size {}", record.size);
        let config = record.config.config().as_ref().expect("config");
        assert_eq!(config.cmd().as_deref(), Some(&["sh".to_string()][..]));
        assert_eq!(config.working_dir().as_deref(), Some("/"));
        assert_eq!(config.stop_signal().as_deref(), Some("SIGTERM"));
        assert!(config.env().as_ref().unwrap()[0].starts_with("PATH="));
        assert_eq!(
            config
                .labels()
                .as_ref()
                .unwrap()
                .get("org.runp.fixture")
                .map(String::as_str),
            Some("busybox")
        );
        // Every name form finds it.
        for key in [
            "busybox",
            "busybox:latest",
            BUSYBOX_TAG,
            BUSYBOX_ALT_TAG,
            &record.id,
            &record.repo_digests[0],
        ] {
            assert_eq!(store.resolve(key).unwrap().id, record.id, "{name}: {key}");
        }
        assert!(matches!(
            store.resolve("busybox:2"),
            Err(ImageError::NotFound(_))
        ));
        ids.push(record.id.clone());
    }
    assert!(
        ids.windows(2).all(|w| w[0] == w[1]),
        "same config digest in every format: {ids:?}"
    );
}

#[test]
fn a_shared_layer_is_unpacked_once() {
    let fixtures = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let busybox = store
        .import(&fixtures.join("busybox-oci"))
        .unwrap()
        .remove(0);
    let base = busybox.layers[0].clone();
    let (tree, _) = store.layer_tree(&base).unwrap();
    let inode_before = fs::metadata(tree.join("bin/busybox")).unwrap().ino();

    let extra = store
        .import(&fixtures.join("busybox-extra-oci"))
        .unwrap()
        .remove(0);
    assert_eq!(extra.repo_tags, vec![EXTRA_TAG]);
    assert_eq!(extra.layers[0], base, "the fixtures share the base layer");
    assert_ne!(extra.id, busybox.id);
    let layer_dirs = fs::read_dir(dir.path().join("images/layers"))
        .unwrap()
        .count();
    assert_eq!(
        layer_dirs, 4,
        "3 busybox layers + 1 extra layer, base not duplicated"
    );
    let inode_after = fs::metadata(tree.join("bin/busybox")).unwrap().ino();
    assert_eq!(
        inode_before, inode_after,
        "the base layer was not unpacked again"
    );

    // The docker-save form of busybox stores other blobs but reuses the unpacked layers.
    store.import(&fixtures.join("busybox-docker.tar")).unwrap();
    assert_eq!(
        fs::read_dir(dir.path().join("images/layers"))
            .unwrap()
            .count(),
        4
    );
    assert_eq!(
        fs::metadata(tree.join("bin/busybox")).unwrap().ino(),
        inode_before
    );
    assert_eq!(store.list().unwrap().len(), 2);
    // Re-importing changes nothing.
    let before = snapshot(&dir.path().join("images"));
    store.import(&fixtures.join("busybox-oci")).unwrap();
    let mut after = snapshot(&dir.path().join("images"));
    // images.json is rewritten (imported_at moves); everything else is identical.
    after.remove(Path::new("images.json"));
    let mut before = before;
    before.remove(Path::new("images.json"));
    assert_eq!(before, after);
}

#[test]
fn unpacked_layer_keeps_metadata_links_and_whiteouts() {
    let fixtures = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let record = store
        .import(&fixtures.join("busybox-docker.tar"))
        .unwrap()
        .remove(0);
    let (data_layer, info) = store.layer_tree(&record.layers[1]).unwrap();
    let b = fs::symlink_metadata(data_layer.join("opt/data/b")).unwrap();
    let hard = fs::symlink_metadata(data_layer.join("opt/data/b-hard")).unwrap();
    assert_eq!(b.ino(), hard.ino());
    assert_eq!(b.mode() & 0o7777, 0o640);
    assert_eq!(b.mtime(), 1_600_000_000);
    assert_eq!(
        fs::read_link(data_layer.join("opt/data/b-sym")).unwrap(),
        Path::new("b")
    );

    let (top, top_info) = store.layer_tree(&record.layers[2]).unwrap();
    match top_info.format {
        LayerFormat::Overlay {
            trusted_xattr,
            user_xattr,
        } => {
            let whiteout = fs::symlink_metadata(top.join("opt/data/a")).unwrap();
            assert!(whiteout.file_type().is_char_device() && whiteout.rdev() == 0);
            let opaque_user = xattr::get(top.join("opt/cfg"), "user.overlay.opaque").unwrap();
            assert_eq!(opaque_user.as_deref(), user_xattr.then_some(&b"y"[..]));
            if is_real_root() {
                assert!(trusted_xattr, "real root sets trusted.overlay.opaque");
                let trusted = xattr::get(top.join("opt/cfg"), "trusted.overlay.opaque").unwrap();
                assert_eq!(trusted.as_deref(), Some(&b"y"[..]));
            }
            assert!(!top.join("opt/cfg/.wh..wh..opq").exists());
        }
        LayerFormat::Portable => {
            assert!(top.join("opt/data/.wh.a").is_file());
            assert!(top.join("opt/cfg/.wh..wh..opq").is_file());
        }
    }
    assert_eq!(info.format, top_info.format);
    if is_real_root() {
        assert_eq!((b.uid(), b.gid()), (1000, 1000));
    } else {
        skip(
            "unpacked_layer_keeps_metadata_links_and_whiteouts",
            "real root for owner checks",
        );
    }
}

#[test]
fn gzip_zstd_and_plain_layers_are_recognised_by_content() {
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let layer = |n: u8| {
        LayerBuilder::new()
            .file(&format!("f{n}"), &[n; 1000])
            .finish()
    };
    let mut image = TestImage::new(
        "test.io/mixed:1",
        vec![
            (layer(1), Compress::Gzip),
            (layer(2), Compress::Zstd),
            (layer(3), Compress::None),
        ],
    );
    // Media types lie (all say uncompressed tar): the bytes decide.
    image.layer_media_type = Some("application/vnd.oci.image.layer.v1.tar".into());
    write_oci_layout(&layout, &[image]);
    let store = open_store(dir.path());
    let record = store.import(&layout).unwrap().remove(0);
    for (i, diff) in record.layers.iter().enumerate() {
        let (tree, _) = store.layer_tree(diff).unwrap();
        let n = i as u8 + 1;
        assert_eq!(fs::read(tree.join(format!("f{n}"))).unwrap(), vec![n; 1000]);
    }
}

#[test]
fn xattrs_fifos_devices_and_pax_records() {
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let tar = LayerBuilder::new()
        .file_with_pax(
            "with-xattr",
            b"data",
            &[
                ("SCHILY.xattr.user.note", b"hello"),
                ("SCHILY.xattr.trusted.overlay.opaque", b"y"),
                ("SCHILY.xattr.user.overlay.opaque", b"y"),
                ("mtime", b"1234567890.5"),
            ],
        )
        .node(tar::EntryType::Fifo, "pipe", 0, 0)
        .node(tar::EntryType::Char, "dev/null", 1, 3)
        .file_with("setuid", b"#!/bin/sh\n", 0o4755, (0, 0))
        .finish();
    write_oci_layout(
        &layout,
        &[TestImage::new(
            "test.io/attrs:1",
            vec![(tar, Compress::Gzip)],
        )],
    );
    let store = open_store(dir.path());
    let record = store.import(&layout).unwrap().remove(0);
    let (tree, _) = store.layer_tree(&record.layers[0]).unwrap();
    let file = tree.join("with-xattr");
    assert_eq!(
        xattr::get(&file, "user.note").unwrap().as_deref(),
        Some(&b"hello"[..])
    );
    assert_eq!(
        xattr::get(&file, "user.overlay.opaque").unwrap(),
        None,
        "overlay xattrs are never taken from image content"
    );
    let meta = fs::metadata(&file).unwrap();
    assert_eq!(
        (meta.mtime(), meta.mtime_nsec()),
        (1_234_567_890, 500_000_000)
    );
    assert!(
        fs::symlink_metadata(tree.join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    assert_eq!(
        fs::metadata(tree.join("setuid")).unwrap().mode() & 0o7777,
        0o4755
    );
    if is_real_root() {
        let null = fs::symlink_metadata(tree.join("dev/null")).unwrap();
        assert!(null.file_type().is_char_device());
        assert_eq!(null.rdev(), nix::sys::stat::makedev(1, 3));
    } else {
        assert!(
            !tree.join("dev/null").exists(),
            "devices are skipped without privilege"
        );
        skip(
            "xattrs_fifos_devices_and_pax_records",
            "real root to create device nodes",
        );
    }
}

#[test]
fn failed_imports_leave_the_store_unchanged() {
    let fixtures = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    store.import(&fixtures.join("busybox-oci")).unwrap();
    let root = dir.path().join("images");
    let before = snapshot(&root);

    // A layer whose content does not match the config's diff_id.
    let layout = dir.path().join("bad-diff");
    let mut image = TestImage::new(
        "test.io/bad:1",
        vec![(LayerBuilder::new().file("x", b"x").finish(), Compress::Gzip)],
    );
    image.diff_ids = Some(vec![sha(b"something else")]);
    write_oci_layout(&layout, &[image]);
    let err = store.import(&layout).unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");

    // A blob whose bytes do not match its name.
    let layout = dir.path().join("bad-blob");
    let tar = LayerBuilder::new().file("y", b"y").finish();
    write_oci_layout(
        &layout,
        &[TestImage::new(
            "test.io/bad:2",
            vec![(tar.clone(), Compress::None)],
        )],
    );
    let blob = layout
        .join("blobs/sha256")
        .join(&sha(&tar)["sha256:".len()..]);
    fs::write(&blob, b"tampered").unwrap();
    let err = store.import(&layout).unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");
    // Same, as a tarball.
    let tarball = dir.path().join("bad-blob.tar");
    tar_dir(&layout, &tarball);
    let err = store.import(&tarball).unwrap_err();
    assert!(matches!(err, ImageError::DigestMismatch { .. }), "{err}");

    // Not an image at all, and a missing file.
    let junk = dir.path().join("junk.tar");
    fs::write(&junk, b"definitely not a tar archive").unwrap();
    assert!(matches!(
        store.import(&junk),
        Err(ImageError::InvalidSource { .. })
    ));
    assert!(store.import(&dir.path().join("missing")).is_err());

    assert_eq!(snapshot(&root), before, "the store is exactly as before");
    assert_eq!(store.list().unwrap().len(), 1);
}

#[test]
fn import_can_select_one_image_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let layer = |s: &str| {
        (
            LayerBuilder::new().file(s, s.as_bytes()).finish(),
            Compress::Gzip,
        )
    };
    write_oci_layout(
        &layout,
        &[
            TestImage::new("test.io/one:1", vec![layer("one")]),
            TestImage::new("test.io/two:1", vec![layer("two")]),
        ],
    );
    let store = open_store(dir.path());
    let options = runp::image::ImportOptions {
        select: Some("test.io/two:1"),
        progress: None,
    };
    let records = store.import_with(&layout, options).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].repo_tags, vec!["test.io/two:1"]);
    assert_eq!(store.list().unwrap().len(), 1);
    let options = runp::image::ImportOptions {
        select: Some("test.io/three:1"),
        progress: None,
    };
    assert!(matches!(
        store.import_with(&layout, options),
        Err(ImageError::NotFound(_))
    ));
}

#[test]
fn a_moved_tag_leaves_the_old_image_untagged() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    for content in ["first", "second"] {
        let layout = dir.path().join(content);
        let tar = LayerBuilder::new().file("f", content.as_bytes()).finish();
        write_oci_layout(
            &layout,
            &[TestImage::new(
                "test.io/app:latest",
                vec![(tar, Compress::Gzip)],
            )],
        );
        store.import(&layout).unwrap();
    }
    let images = store.list().unwrap();
    assert_eq!(images.len(), 2);
    let tagged: Vec<_> = images.iter().filter(|r| !r.repo_tags.is_empty()).collect();
    assert_eq!(tagged.len(), 1);
    let current = store.resolve("test.io/app").unwrap();
    let (tree, _) = store.layer_tree(&current.layers[0]).unwrap();
    assert_eq!(fs::read(tree.join("f")).unwrap(), b"second");
}

#[test]
fn concurrent_imports_of_one_image_both_succeed() {
    let fixtures = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let sources = ["busybox-oci.tar", "busybox-docker.tar", "busybox-oci"];
    let ids: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = sources
            .iter()
            .map(|name| {
                let store = store.clone();
                let path = fixtures.join(name);
                scope.spawn(move || store.import(&path).unwrap().remove(0).id)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ids.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(store.list().unwrap().len(), 1);
    assert_eq!(
        fs::read_dir(dir.path().join("images/layers"))
            .unwrap()
            .count(),
        3
    );
    assert_eq!(
        fs::read_dir(dir.path().join("images/tmp")).unwrap().count(),
        0,
        "no staging left"
    );
}

#[test]
fn garbage_collection_waits_for_running_imports() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("images");
    let store = open_store(dir.path());
    let record = import_fixture(&store, "busybox-oci");
    // An import in progress (its staging area is held) may be reusing these layers.
    let running =
        runp::image::import::staging::Staging::create(&root.join("tmp"), "import").unwrap();
    store.remove(&record.id, false).unwrap();
    assert!(matches!(
        store.resolve(&record.id),
        Err(ImageError::NotFound(_))
    ));
    assert!(
        store.layer_tree(&record.layers[0]).is_some(),
        "collection deferred"
    );
    drop(running);
    // The next opening of the store collects what was left.
    let reopened = open_store(dir.path());
    assert!(reopened.layer_tree(&record.layers[0]).is_none());
    assert_eq!(fs::read_dir(root.join("blobs/sha256")).unwrap().count(), 0);
    assert_eq!(fs::read_dir(root.join("tmp")).unwrap().count(), 0);
}

#[test]
fn a_multi_platform_index_resolves_to_linux_amd64() {
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let tar = LayerBuilder::new().file("amd64", b"yes").finish();
    let id = write_oci_layout(
        &layout,
        &[TestImage::new(
            "test.io/multi:1",
            vec![(tar, Compress::Gzip)],
        )],
    )
    .remove(0);
    // Wrap the written manifest in a platform index; the arm64 entry's blob is absent (as when
    // only one platform was copied) and must not be needed.
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap();
    let manifest = index["manifests"][0].clone();
    let platform_index = |amd64: bool| {
        let mut amd = manifest.clone();
        amd["platform"] = serde_json::json!({"os": "linux", "architecture": if amd64 { "amd64" } else { "s390x" }});
        amd.as_object_mut().unwrap().remove("annotations");
        let arm = serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha(b"not stored"), "size": 10,
            "platform": {"os": "linux", "architecture": "arm64"},
        });
        let nested = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [arm, amd],
        });
        let bytes = serde_json::to_vec(&nested).unwrap();
        let digest = put_blob(&layout, &bytes);
        let top = serde_json::json!({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": digest, "size": bytes.len(),
            "annotations": {"org.opencontainers.image.ref.name": "test.io/multi:1"},
        }]});
        fs::write(layout.join("index.json"), serde_json::to_vec(&top).unwrap()).unwrap();
    };

    platform_index(false);
    let store = open_store(dir.path());
    let err = store.import(&layout).unwrap_err();
    assert!(matches!(err, ImageError::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("linux/arm64"), "{err}");

    platform_index(true);
    let record = store.import(&layout).unwrap().remove(0);
    assert_eq!(record.id, id);
    assert_eq!(record.repo_tags, vec!["test.io/multi:1"]);
    // The name's digest is the index's (what `name@digest` pulls), not the platform manifest's.
    let top: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap();
    let index_digest = top["manifests"][0]["digest"].as_str().unwrap();
    assert_eq!(
        record.repo_digests,
        vec![format!("test.io/multi@{index_digest}")]
    );
    assert_ne!(record.manifests[0].to_string(), index_digest);
    assert_eq!(
        store
            .resolve(&format!("test.io/multi@{index_digest}"))
            .unwrap()
            .id,
        id
    );
}
