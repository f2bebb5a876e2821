//! Hostile layers and archives: every one fails with an error naming the entry, writes nothing
//! outside the store, and leaves the store exactly as it was.

#[path = "support/image.rs"]
mod support;

use runp::image::{ImageError, ImageStore};
use std::fs;
use std::path::{Path, PathBuf};
use support::*;
use tar::EntryType;

struct Setup {
    dir: tempfile::TempDir,
    store: ImageStore,
    outside: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("target"), b"original").unwrap();
    let store = open_store(dir.path());
    Setup {
        dir,
        store,
        outside,
    }
}

impl Setup {
    fn store_root(&self) -> PathBuf {
        self.dir.path().join("images")
    }

    /// Imports a single-layer image made of `tar`, in both OCI forms (directory and tarball).
    fn import_layer(&self, name: &str, tar: Vec<u8>) -> Vec<Result<(), ImageError>> {
        let layout = self.dir.path().join(format!("layout-{name}"));
        write_oci_layout(
            &layout,
            &[TestImage::new(
                &format!("hostile.test/{name}:1"),
                vec![(tar, Compress::Gzip)],
            )],
        );
        let tarball = self.dir.path().join(format!("layout-{name}.tar"));
        tar_dir(&layout, &tarball);
        [layout, tarball]
            .iter()
            .map(|source| self.store.import(source).map(|_| ()))
            .collect()
    }

    fn assert_outside_untouched(&self) {
        assert_eq!(names(&self.outside), vec!["target"]);
        assert_eq!(fs::read(self.outside.join("target")).unwrap(), b"original");
        assert!(!self.dir.path().join("evil").exists());
        assert!(!Path::new("/tmp/runp-hostile-evil").exists());
    }
}

/// Each case is a layer and the entry name the error must mention.
fn refused_cases(outside: &Path) -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let outside = outside.to_str().unwrap().to_string();
    vec![
        (
            "tar-slip",
            LayerBuilder::new().file("../evil", b"x").finish(),
            "../evil",
        ),
        (
            "tar-slip-deep",
            LayerBuilder::new()
                .dir("a", 0o755)
                .file("a/../../evil", b"x")
                .finish(),
            "a/../../evil",
        ),
        (
            "tar-slip-absolute-dotdot",
            LayerBuilder::new()
                .file("/../../tmp/runp-hostile-evil", b"x")
                .finish(),
            "/../../tmp/runp-hostile-evil",
        ),
        (
            "symlink-escape-absolute",
            LayerBuilder::new()
                .symlink("link", &outside)
                .file("link/pwned", b"x")
                .finish(),
            "link/pwned",
        ),
        (
            "symlink-escape-relative",
            LayerBuilder::new()
                .dir("d", 0o755)
                .symlink("d/up", "../../../../../../../../..")
                .file("d/up/tmp/runp-hostile-evil", b"x")
                .finish(),
            "d/up/tmp/runp-hostile-evil",
        ),
        (
            "symlink-escape-overwrite-target",
            LayerBuilder::new()
                .symlink("link", &outside)
                .file("link/target", b"overwritten")
                .finish(),
            "link/target",
        ),
        (
            "hardlink-escape",
            LayerBuilder::new()
                .hardlink("h", "../../../../etc/passwd")
                .finish(),
            "h",
        ),
        (
            "hardlink-through-symlink",
            LayerBuilder::new()
                .symlink("s", &outside)
                .hardlink("h", "s/target")
                .finish(),
            "h",
        ),
        (
            "hardlink-to-absent-target",
            LayerBuilder::new().hardlink("h", "etc/passwd").finish(),
            "h",
        ),
        (
            "malformed-whiteout",
            LayerBuilder::new()
                .dir("d", 0o755)
                .file("d/.wh..", b"")
                .finish(),
            "d/.wh..",
        ),
    ]
}

#[test]
fn hostile_layers_are_refused_and_leave_nothing_behind() {
    let setup = setup();
    let before = snapshot(&setup.store_root());
    for (name, tar, entry) in refused_cases(&setup.outside) {
        for result in setup.import_layer(name, tar.clone()) {
            let err = result.expect_err(name);
            assert!(
                matches!(err, ImageError::UnsafeEntry { .. }),
                "{name}: unexpected error {err}"
            );
            let message = err.to_string();
            assert!(
                message.contains(entry),
                "{name}: error {message:?} does not name {entry:?}"
            );
            assert_eq!(
                snapshot(&setup.store_root()),
                before,
                "{name}: store changed"
            );
            setup.assert_outside_untouched();
            let status = tonic::Status::from(err);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{name}");
        }
    }
}

#[test]
fn absolute_names_land_inside_the_layer_and_symlinks_are_replaced_not_followed() {
    let setup = setup();
    let outside_target = setup.outside.join("target");
    let tar = LayerBuilder::new()
        .file("/etc/absolute", b"inside")
        // A symlink to a host file, then a regular file of the same name: the symlink is
        // replaced, the host file is not written through.
        .symlink("replaced", outside_target.to_str().unwrap())
        .file("replaced", b"new content")
        // A hardlink to a symlink links the symlink itself.
        .symlink("to-host", outside_target.to_str().unwrap())
        .hardlink("hard-to-symlink", "to-host")
        .finish();
    for result in setup.import_layer("benign", tar) {
        result.unwrap();
    }
    let record = setup.store.resolve("hostile.test/benign:1").unwrap();
    let (tree, _) = setup.store.layer_tree(&record.layers[0]).unwrap();
    assert_eq!(fs::read(tree.join("etc/absolute")).unwrap(), b"inside");
    assert_eq!(fs::read(tree.join("replaced")).unwrap(), b"new content");
    assert!(
        fs::symlink_metadata(tree.join("hard-to-symlink"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    setup.assert_outside_untouched();
}

#[test]
fn hostile_outer_archive_entries_write_nothing() {
    // The archive around the layout carries escaping entries of its own: they are never
    // extracted by name, so they cannot land anywhere.
    let setup = setup();
    let layout = setup.dir.path().join("layout");
    let tar = LayerBuilder::new().file("ok", b"ok").finish();
    write_oci_layout(
        &layout,
        &[TestImage::new(
            "hostile.test/outer:1",
            vec![(tar, Compress::None)],
        )],
    );
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_dir_all(".", &layout).unwrap();
    let mut archive = builder.into_inner().unwrap();
    // Drop the two zero blocks that end the archive, append hostile entries, end it again.
    archive.truncate(archive.len() - 1024);
    let extra = LayerBuilder::new()
        .file("../evil", b"x")
        .file("/tmp/runp-hostile-evil", b"x")
        .symlink("blobs/escape", "/etc")
        .raw(
            EntryType::Regular,
            b"blobs/escape/passwd",
            b"",
            b"x",
            0o644,
            (0, 0),
        )
        .finish();
    archive.extend_from_slice(&extra);
    let path = setup.dir.path().join("outer.tar");
    fs::write(&path, archive).unwrap();
    setup.store.import(&path).unwrap();
    setup.assert_outside_untouched();
    assert!(setup.store.resolve("hostile.test/outer:1").is_ok());
}

#[test]
fn truncated_and_garbage_layers_fail_cleanly() {
    let setup = setup();
    let before = snapshot(&setup.store_root());
    let full = LayerBuilder::new()
        .file("big", &vec![7u8; 100_000])
        .finish();
    let truncated = full[..50_000].to_vec();
    let garbage = vec![0x1f, 0x8b, 0x08, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
    for (name, layer) in [("truncated", truncated), ("garbage", garbage)] {
        let layout = setup.dir.path().join(name);
        let mut image = TestImage::new(
            "hostile.test/broken:1",
            vec![(layer.clone(), Compress::None)],
        );
        image.diff_ids = Some(vec![sha(&layer)]);
        write_oci_layout(&layout, &[image]);
        let err = setup.store.import(&layout).unwrap_err();
        assert!(
            matches!(
                err,
                ImageError::Unpack { .. } | ImageError::DigestMismatch { .. }
            ),
            "{name}: {err}"
        );
        assert_eq!(snapshot(&setup.store_root()), before, "{name}");
    }
}
