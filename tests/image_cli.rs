//! `runp image load|ls|inspect|rm` through the real binary.

#[path = "support/image.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Output};
use support::*;

fn runp(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--image-root")
        .arg(root)
        .args(["--log-level", "warn", "image"])
        .args(args)
        .output()
        .expect("running runp")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "runp failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn load_list_inspect_remove() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("images");
    let archive = fixtures().join("busybox-docker.tar");
    let loaded = stdout(&runp(&root, &["load", archive.to_str().unwrap()]));
    assert_eq!(
        loaded,
        format!("Loaded image: {BUSYBOX_TAG}\nLoaded image: {BUSYBOX_ALT_TAG}\n")
    );

    let listing = stdout(&runp(&root, &["ls"]));
    let rows: Vec<&str> = listing.lines().collect();
    assert_eq!(rows.len(), 3, "{listing}");
    assert!(
        rows[1].starts_with("docker.io/library/busybox ") && rows[1].contains(" latest "),
        "{listing}"
    );
    let ids = stdout(&runp(&root, &["ls", "--quiet"]));
    assert_eq!(ids.lines().count(), 1);
    assert!(ids.starts_with("sha256:"));

    let inspected: serde_json::Value =
        serde_json::from_str(&stdout(&runp(&root, &["inspect", "busybox"]))).unwrap();
    assert_eq!(inspected["id"], ids.trim());
    assert_eq!(inspected["config"]["config"]["StopSignal"], "SIGTERM");

    // A lease taken by another process (here: the library) blocks removal.
    let store = runp::image::ImageStore::open(&root).unwrap();
    store
        .prepare_rootfs("busybox", "c1", &dir.path().join("c1"))
        .unwrap();
    let refused = runp(&root, &["rm", "busybox"]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("in use by") && err.contains("c1"), "{err}");
    let removed = stdout(&runp(&root, &["rm", "--force", "busybox"]));
    assert_eq!(removed.trim(), format!("Deleted: {}", ids.trim()));
    store
        .release_rootfs(ids.trim(), "c1", &dir.path().join("c1"))
        .unwrap();

    let missing = runp(&root, &["inspect", "busybox"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));
    assert_eq!(stdout(&runp(&root, &["ls", "-q"])), "");
}

#[test]
fn load_reports_a_broken_file() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"junk").unwrap();
    let output = runp(
        &dir.path().join("images"),
        &["load", junk.to_str().unwrap()],
    );
    assert!(!output.status.success());
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("loading") && err.contains("junk"), "{err}");
}
