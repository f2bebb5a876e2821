//! Faults under the image root: unreadable image records at open, and a full disk during an
//! import. The store opens, says which file it could not read, keeps what it could, and after
//! a failed import is exactly as before (and the import works once there is room).

#[path = "support/image.rs"]
mod support;

use runp::image::ImageStore;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use support::*;

/// Everything the store logs, for the tests to find file names in.
fn captured_log() -> Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .init();
        log
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn log_text() -> String {
    String::from_utf8_lossy(&captured_log().lock().unwrap()).into_owned()
}

fn tags(store: &ImageStore) -> Vec<String> {
    let mut tags: Vec<String> = store
        .list()
        .unwrap()
        .into_iter()
        .flat_map(|r| r.repo_tags)
        .collect();
    tags.sort();
    tags
}

#[test]
fn unreadable_image_records_are_set_aside_and_the_rest_loads() {
    let _ = captured_log();
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    store.import(&fixtures().join("busybox-oci")).unwrap();
    let busybox = tags(&store);
    store.import(&fixtures().join("busybox-extra-oci")).unwrap();
    let all = tags(&store);
    drop(store);
    let records = dir.path().join("images/images.json");
    let aside = dir.path().join("images/images.json.corrupt");

    // One entry damaged: the other still loads.
    let mut file: serde_json::Value = serde_json::from_slice(&fs::read(&records).unwrap()).unwrap();
    let images = file["images"].as_array_mut().unwrap();
    let damaged = images
        .iter()
        .position(|i| i["repo_tags"][0] == EXTRA_TAG)
        .unwrap();
    images[damaged]["layers"] = serde_json::json!("not a list");
    fs::write(&records, serde_json::to_vec(&file).unwrap()).unwrap();
    let store = open_store(dir.path());
    assert_eq!(tags(&store), busybox);
    assert!(aside.exists());
    assert!(log_text().contains(&records.display().to_string()));
    // The lost image loads again.
    store.import(&fixtures().join("busybox-extra-oci")).unwrap();
    assert_eq!(tags(&store), all);
    drop(store);

    // Truncated: nothing readable, the store still opens and works.
    let text = fs::read(&records).unwrap();
    fs::write(&records, &text[..text.len() / 2]).unwrap();
    let store = open_store(dir.path());
    assert!(tags(&store).is_empty());
    store.import(&fixtures().join("busybox-oci")).unwrap();
    store.resolve(BUSYBOX_TAG).unwrap();
    drop(store);
    open_store(dir.path()).resolve(BUSYBOX_TAG).unwrap();
}

/// A tmpfs of `mib` MiB mounted on `dir`, detached when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, mib: u32) -> Tmpfs {
        fs::create_dir_all(dir).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some(format!("size={mib}m,mode=0700").as_str()),
        )
        .expect("mount a tmpfs");
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Fills the filesystem of `dir` to the last block with `<dir>/filler`.
fn fill(dir: &Path) {
    let mut f = fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0x5au8; 1 << 16];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
    }
}

#[test]
fn a_full_image_root_fails_the_import_cleanly_and_it_succeeds_after_freeing_space() {
    const TEST: &str =
        "a_full_image_root_fails_the_import_cleanly_and_it_succeeds_after_freeing_space";
    if !is_real_root() {
        return skip(TEST, "real root (mounts a tmpfs as the image root)");
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("images");
    let _tmpfs = Tmpfs::mount(&root, 16);
    let store = open_store(dir.path());
    store.import(&fixtures().join("busybox-oci")).unwrap();
    let busybox = tags(&store);
    // An image of incompressible content that fits once there is room.
    let mut noise = vec![0u8; 4 << 20];
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let layout = dir.path().join("layout");
    write_oci_layout(
        &layout,
        &[TestImage::new(
            "runp.test/noise:1",
            vec![(
                LayerBuilder::new().file("noise", &noise).finish(),
                Compress::Gzip,
            )],
        )],
    );
    // Leave ~2 MiB: the blob goes in, its unpacking does not.
    fill(&root);
    let filler = root.join("filler");
    let len = fs::metadata(&filler).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(len - (2 << 20))
        .unwrap();
    let mut before = snapshot(&root);
    before.remove(Path::new("filler"));
    let err = store.import(&layout).unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("No space left on device") || text.contains("free space"),
        "{text}"
    );
    let mut after = snapshot(&root);
    after.remove(Path::new("filler"));
    assert_eq!(after, before, "the failed import left something");
    drop(store);
    let store = open_store(dir.path());
    assert_eq!(tags(&store), busybox);
    fs::remove_file(&filler).unwrap();
    store.import(&layout).unwrap();
    store.resolve("runp.test/noise:1").unwrap();
    store.resolve(BUSYBOX_TAG).unwrap();
}

#[test]
fn a_layer_with_unreadable_metadata_is_replaced_by_the_next_import() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    store.import(&fixtures().join("busybox-oci")).unwrap();
    let layers = store.resolve(BUSYBOX_TAG).unwrap().layers;
    for diff_id in &layers {
        let (tree, _) = store.layer_tree(diff_id).unwrap();
        fs::write(tree.parent().unwrap().join("layer.json"), b"{\"trunc").unwrap();
    }
    drop(store);
    let store = open_store(dir.path());
    store.import(&fixtures().join("busybox-oci")).unwrap();
    for diff_id in &layers {
        let (tree, _) = store.layer_tree(diff_id).expect("the layer is whole again");
        assert!(fs::read_dir(&tree).unwrap().next().is_some(), "{tree:?}");
    }
}

#[test]
fn a_lease_write_cut_short_leaves_nothing_after_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("images");
    drop(ImageStore::open(&root).unwrap());
    // What a process killed between an atomic write's create and its rename leaves.
    let leases = root.join("leases");
    let temporary = leases.join(".f935f53f23c908ab.json.tmp.15133.3422708637");
    fs::write(&temporary, b"{\"holder\":").unwrap();
    drop(ImageStore::open(&root).unwrap());
    assert!(!temporary.exists());
    assert_eq!(fs::read_dir(&leases).unwrap().count(), 0);
}
