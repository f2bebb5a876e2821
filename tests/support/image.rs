//! Helpers for the image store tests: environment detection, the built fixtures, and crafted
//! layers and OCI layouts (including hostile ones the tar crate would refuse to write).
#![allow(dead_code)]

use runp::image::{Digest, ImageStore, RootfsPolicy, StoreOptions};
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// euid 0 with the identity uid map: not a user namespace's mapped root.
pub fn is_real_root() -> bool {
    let map = fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let fields: Vec<&str> = map.split_whitespace().collect();
    nix::unistd::geteuid().is_root() && fields == ["0", "0", "4294967295"]
}

pub fn skip(test: &str, what: &str) {
    eprintln!("SKIP: {test}: needs {what}");
}

/// `rootfs-fixtures/build`, built by `scripts/build-fixtures.sh` (once per test process; the
/// script itself serializes parallel callers with flock and returns at once when up to date).
pub fn fixtures() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
            let status = Command::new(repo.join("scripts/build-fixtures.sh"))
                .status()
                .expect("running scripts/build-fixtures.sh");
            assert!(status.success(), "scripts/build-fixtures.sh failed");
            repo.join("rootfs-fixtures/build")
        })
        .clone()
}

pub const BUSYBOX_TAG: &str = "docker.io/library/busybox:latest";
pub const BUSYBOX_ALT_TAG: &str = "runp.test/busybox:1";
pub const EXTRA_TAG: &str = "runp.test/busybox-extra:1";

pub fn open_store(dir: &Path) -> ImageStore {
    ImageStore::open(dir.join("images")).expect("open store")
}

/// Every path under `root` with its type, size and content hash: to prove a failed operation
/// left a store exactly as it was. The lock file and empty `tmp/` are part of a valid store.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.unwrap();
        let meta = entry.path().symlink_metadata().unwrap();
        let rel = entry.path().strip_prefix(root).unwrap().to_path_buf();
        let what = if meta.is_file() {
            let bytes = fs::read(entry.path()).unwrap();
            format!(
                "file {} {}",
                meta.len(),
                hex::encode(sha2::Sha256::digest(&bytes))
            )
        } else if meta.file_type().is_symlink() {
            format!("link {:?}", fs::read_link(entry.path()).unwrap())
        } else if meta.is_dir() {
            "dir".to_string()
        } else {
            format!("other {:o} {}", meta.mode(), meta.rdev())
        };
        out.insert(rel, what);
    }
    out
}

/// Checks the merged busybox fixture tree (`rootfs` of docker.io/library/busybox:latest).
pub fn check_busybox_tree(test: &str, rootfs: &Path) {
    let host_busybox = fs::metadata("/bin/busybox").unwrap();
    let busybox = fs::metadata(rootfs.join("bin/busybox")).unwrap();
    assert_eq!(busybox.len(), host_busybox.len());
    assert_eq!(busybox.mode() & 0o7777, 0o755);
    assert_eq!(
        fs::read_link(rootfs.join("bin/sh")).unwrap(),
        Path::new("/bin/busybox")
    );
    let passwd = fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(passwd.contains("app:x:1000:1000"), "{passwd}");

    // Layer 3 whiteout and opaque dir.
    assert!(
        fs::symlink_metadata(rootfs.join("opt/data/a")).is_err(),
        "whiteout applied"
    );
    let cfg: Vec<String> = names(&rootfs.join("opt/cfg"));
    assert_eq!(cfg, vec!["z"], "opaque dir replaced its lower content");
    assert_eq!(
        fs::read_to_string(rootfs.join("opt/cfg/z")).unwrap(),
        "zulu\n"
    );
    assert_eq!(
        names(&rootfs.join("opt/data")),
        vec!["b", "b-hard", "b-sym"],
        "no whiteout markers visible"
    );

    // Layer 2 content kept: hardlink, symlink, mode, mtime.
    let b = fs::symlink_metadata(rootfs.join("opt/data/b")).unwrap();
    let b_hard = fs::symlink_metadata(rootfs.join("opt/data/b-hard")).unwrap();
    assert_eq!(
        fs::read_to_string(rootfs.join("opt/data/b")).unwrap(),
        "bravo\n"
    );
    assert_eq!(
        (b.dev(), b.ino()),
        (b_hard.dev(), b_hard.ino()),
        "hardlink shares the inode"
    );
    assert_eq!(b.nlink(), 2);
    assert_eq!(b.mode() & 0o7777, 0o640);
    assert_eq!(b.mtime(), 1_600_000_000);
    assert_eq!(
        fs::read_link(rootfs.join("opt/data/b-sym")).unwrap(),
        Path::new("b")
    );
    assert_eq!(
        fs::metadata(rootfs.join("tmp")).unwrap().mode() & 0o7777,
        0o1777
    );
    assert_eq!(
        fs::metadata(rootfs.join("root")).unwrap().mode() & 0o7777,
        0o700
    );
    assert_eq!(
        fs::metadata(rootfs.join("etc/passwd")).unwrap().mtime(),
        1_700_000_000
    );
    if is_real_root() {
        assert_eq!((b.uid(), b.gid()), (1000, 1000));
        let home = fs::metadata(rootfs.join("home/app")).unwrap();
        assert_eq!((home.uid(), home.gid()), (1000, 1000));
        assert_eq!(fs::metadata(rootfs.join("etc/passwd")).unwrap().uid(), 0);
    } else {
        skip(
            test,
            "real root to check non-root owners (chown to unmapped ids fails here)",
        );
    }
    // No whiteout device leaked anywhere into the merged view.
    for entry in walkdir::WalkDir::new(rootfs) {
        let entry = entry.unwrap();
        let meta = entry.path().symlink_metadata().unwrap();
        assert!(
            !(meta.file_type().is_char_device() && meta.rdev() == 0),
            "whiteout visible at {}",
            entry.path().display()
        );
        let name = entry.file_name().to_string_lossy();
        assert!(
            !name.starts_with(".wh."),
            "marker visible at {}",
            entry.path().display()
        );
    }
}

pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Builds layer tars entry by entry, with raw names when a test needs a hostile one.
pub struct LayerBuilder {
    builder: tar::Builder<Vec<u8>>,
}

pub const MTIME: u64 = 1_650_000_000;

impl Default for LayerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl LayerBuilder {
    pub fn new() -> LayerBuilder {
        LayerBuilder {
            builder: tar::Builder::new(Vec::new()),
        }
    }

    /// Appends an entry with `name`/`link` written verbatim into the header (no validation).
    pub fn raw(
        mut self,
        kind: tar::EntryType,
        name: &[u8],
        link: &[u8],
        data: &[u8],
        mode: u32,
        owner: (u64, u64),
    ) -> Self {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(kind);
        header.as_old_mut().name[..name.len()].copy_from_slice(name);
        header.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        header.set_mode(mode);
        header.set_uid(owner.0);
        header.set_gid(owner.1);
        header.set_mtime(MTIME);
        header.set_size(data.len() as u64);
        header.set_cksum();
        self.builder.append(&header, data).unwrap();
        self
    }

    pub fn dir(self, name: &str, mode: u32) -> Self {
        self.raw(
            tar::EntryType::Directory,
            name.as_bytes(),
            b"",
            b"",
            mode,
            (0, 0),
        )
    }

    pub fn file(self, name: &str, data: &[u8]) -> Self {
        self.raw(
            tar::EntryType::Regular,
            name.as_bytes(),
            b"",
            data,
            0o644,
            (0, 0),
        )
    }

    pub fn file_with(self, name: &str, data: &[u8], mode: u32, owner: (u64, u64)) -> Self {
        self.raw(
            tar::EntryType::Regular,
            name.as_bytes(),
            b"",
            data,
            mode,
            owner,
        )
    }

    pub fn symlink(self, name: &str, target: &str) -> Self {
        self.raw(
            tar::EntryType::Symlink,
            name.as_bytes(),
            target.as_bytes(),
            b"",
            0o777,
            (0, 0),
        )
    }

    pub fn hardlink(self, name: &str, target: &str) -> Self {
        self.raw(
            tar::EntryType::Link,
            name.as_bytes(),
            target.as_bytes(),
            b"",
            0o644,
            (0, 0),
        )
    }

    pub fn node(self, kind: tar::EntryType, name: &str, major: u32, minor: u32) -> Self {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(kind);
        header.set_path(name).unwrap();
        header.set_mode(0o600);
        header.set_mtime(MTIME);
        header.set_size(0);
        header.set_device_major(major).unwrap();
        header.set_device_minor(minor).unwrap();
        header.set_cksum();
        let mut this = self;
        this.builder.append(&header, &b""[..]).unwrap();
        this
    }

    /// A regular file preceded by a PAX header carrying `records` (e.g. `SCHILY.xattr.user.x`).
    pub fn file_with_pax(mut self, name: &str, data: &[u8], records: &[(&str, &[u8])]) -> Self {
        let mut pax = Vec::new();
        for (key, value) in records {
            // "<len> <key>=<value>\n", where len counts the whole record including itself.
            let body_len = key.len() + value.len() + 3;
            let mut len = body_len + 1;
            while len.to_string().len() + body_len != len {
                len = len.to_string().len() + body_len;
            }
            pax.extend_from_slice(format!("{len} {key}=").as_bytes());
            pax.extend_from_slice(value);
            pax.push(b'\n');
        }
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::XHeader);
        header.set_path("PaxHeaders/x").unwrap();
        header.set_size(pax.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        self.builder.append(&header, &pax[..]).unwrap();
        self.file(name, data)
    }

    pub fn finish(self) -> Vec<u8> {
        self.builder.into_inner().unwrap()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compress {
    None,
    Gzip,
    Zstd,
}

pub fn compress(data: &[u8], how: Compress) -> Vec<u8> {
    match how {
        Compress::None => data.to_vec(),
        Compress::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(data).unwrap();
            enc.finish().unwrap()
        }
        Compress::Zstd => zstd::encode_all(data, 3).unwrap(),
    }
}

pub fn sha(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}

/// An image to write into a crafted OCI layout.
pub struct TestImage {
    pub name: String,
    /// Uncompressed layer tars and how to store each.
    pub layers: Vec<(Vec<u8>, Compress)>,
    pub user: Option<String>,
    /// Replaces the true diff_ids (to test verification).
    pub diff_ids: Option<Vec<String>>,
    /// Media type written for every layer (default: the truthful one).
    pub layer_media_type: Option<String>,
}

impl TestImage {
    pub fn new(name: &str, layers: Vec<(Vec<u8>, Compress)>) -> TestImage {
        TestImage {
            name: name.to_string(),
            layers,
            user: None,
            diff_ids: None,
            layer_media_type: None,
        }
    }
}

pub fn put_blob(layout: &Path, data: &[u8]) -> String {
    let digest = sha(data);
    let path = layout.join("blobs/sha256").join(&digest["sha256:".len()..]);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, data).unwrap();
    digest
}

/// Writes an OCI layout directory holding `images`; returns each image's id (config digest).
pub fn write_oci_layout(layout: &Path, images: &[TestImage]) -> Vec<String> {
    fs::create_dir_all(layout).unwrap();
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let mut index_entries = Vec::new();
    let mut ids = Vec::new();
    for image in images {
        let mut layer_descs = Vec::new();
        let mut diff_ids = Vec::new();
        for (tar, how) in &image.layers {
            let stored = compress(tar, *how);
            let media = image.layer_media_type.clone().unwrap_or_else(|| {
                match how {
                    Compress::None => "application/vnd.oci.image.layer.v1.tar",
                    Compress::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
                    Compress::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
                }
                .to_string()
            });
            let digest = put_blob(layout, &stored);
            layer_descs.push(
                serde_json::json!({"mediaType": media, "digest": digest, "size": stored.len()}),
            );
            diff_ids.push(sha(tar));
        }
        let config = serde_json::json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Env": ["PATH=/bin"],
                "Cmd": ["sh"],
                "User": image.user.clone().unwrap_or_default(),
                "Labels": {"test.name": image.name},
            },
            "rootfs": {"type": "layers", "diff_ids": image.diff_ids.clone().unwrap_or(diff_ids)},
        });
        let config_bytes = serde_json::to_vec(&config).unwrap();
        let config_digest = put_blob(layout, &config_bytes);
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_bytes.len()},
            "layers": layer_descs,
        });
        let manifest_bytes = serde_json::to_vec(&manifest).unwrap();
        let manifest_digest = put_blob(layout, &manifest_bytes);
        index_entries.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_bytes.len(),
            "annotations": {"org.opencontainers.image.ref.name": image.name},
        }));
        ids.push(config_digest);
    }
    let index = serde_json::json!({"schemaVersion": 2, "manifests": index_entries});
    fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    ids
}

/// Digests of [`write_multi_platform_layout`]'s pieces.
pub struct MultiPlatform {
    pub index: String,
    pub arm_manifest: String,
    pub arm_config: String,
    pub arm_layer: String,
}

/// A copy of the OCI layout `base` (one linux/amd64 image) whose `index.json` names, as
/// `name`, a nested index listing a small linux/arm64 image first and `base`'s image second.
pub fn write_multi_platform_layout(layout: &Path, base: &Path, name: &str) -> MultiPlatform {
    let copied = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", base.display()))
        .arg(layout)
        .status()
        .unwrap();
    assert!(copied.success());
    let layer_tar = LayerBuilder::new()
        .file("arm64", b"not for this host\n")
        .finish();
    let layer = compress(&layer_tar, Compress::Gzip);
    let arm_layer = put_blob(layout, &layer);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "arm64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [sha(&layer_tar)]},
    }))
    .unwrap();
    let arm_config = put_blob(layout, &config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": arm_config, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": arm_layer, "size": layer.len()}],
    }))
    .unwrap();
    let arm_manifest = put_blob(layout, &manifest);
    let base_index: serde_json::Value =
        serde_json::from_slice(&fs::read(base.join("index.json")).unwrap()).unwrap();
    let amd = &base_index["manifests"][0];
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": arm_manifest,
             "size": manifest.len(), "platform": {"os": "linux", "architecture": "arm64"}},
            {"mediaType": amd["mediaType"], "digest": amd["digest"], "size": amd["size"],
             "platform": {"os": "linux", "architecture": "amd64"}},
        ],
    }))
    .unwrap();
    let index_digest = put_blob(layout, &index);
    let top = serde_json::json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.index.v1+json", "digest": index_digest,
        "size": index.len(), "annotations": {"org.opencontainers.image.ref.name": name}}]});
    fs::write(layout.join("index.json"), serde_json::to_vec(&top).unwrap()).unwrap();
    MultiPlatform {
        index: index_digest,
        arm_manifest,
        arm_config,
        arm_layer,
    }
}

/// Tars a directory (an OCI layout) into `out`.
pub fn tar_dir(dir: &Path, out: &Path) {
    let mut builder = tar::Builder::new(fs::File::create(out).unwrap());
    builder.append_dir_all(".", dir).unwrap();
    builder.into_inner().unwrap().sync_all().unwrap();
}

/// The layer diff_id of an uncompressed tar, as the store names it.
pub fn diff_id(tar: &[u8]) -> Digest {
    Digest::parse(&sha(tar)).unwrap()
}

pub fn open_store_with(dir: &Path, rootfs: RootfsPolicy, portable_layers: bool) -> ImageStore {
    let options = StoreOptions {
        rootfs,
        portable_layers,
        ..StoreOptions::default()
    };
    ImageStore::open_with(dir.join("images"), options).expect("open store")
}

/// How many mounts sit at `path` (from /proc/self/mountinfo).
pub fn mounts_at(path: &Path) -> usize {
    let wanted = path.to_str().unwrap();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|line| line.split(' ').nth(4) == Some(wanted))
        .count()
}

/// Imports one fixture (by file name under `rootfs-fixtures/build`) and returns its record.
pub fn import_fixture(store: &ImageStore, name: &str) -> runp::image::ImageRecord {
    let mut records = store
        .import(&fixtures().join(name))
        .expect("import fixture");
    assert_eq!(records.len(), 1, "{name} holds one image");
    records.remove(0)
}

/// Runs scripts/build-image.sh into `out` with the tests' runp binary: `out/oci` (tag
/// VERSION) and `out/runp-image.tar`. Before any reaper starts: std waits for this child.
pub fn build_runp_image(out: &Path) {
    let built = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-image.sh"))
        .arg(out)
        .env("RUNP_BIN", env!("CARGO_BIN_EXE_runp"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
}
