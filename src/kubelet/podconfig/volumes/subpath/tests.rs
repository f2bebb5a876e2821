use super::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

/// A volume with some content and symlinks, and a secret file beside it.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("volume");
    let outside = base.join("outside");
    fs::create_dir_all(root.join("data/inner")).unwrap();
    fs::write(root.join("data/file"), "f").unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret"), "s").unwrap();
    symlink("data", root.join("rel-in")).unwrap();
    symlink("../data/inner", root.join("data/up-and-in")).unwrap();
    symlink(root.join("data"), root.join("abs-in")).unwrap();
    symlink("../outside", root.join("rel-out")).unwrap();
    symlink(&outside, root.join("abs-out")).unwrap();
    symlink("/", root.join("to-root")).unwrap();
    symlink("/etc", root.join("to-etc")).unwrap();
    symlink("data/../../outside", root.join("sneaky")).unwrap();
    symlink("loop-b", root.join("loop-a")).unwrap();
    symlink("loop-a", root.join("loop-b")).unwrap();
    symlink("rel-out", root.join("chain")).unwrap();
    symlink("data/file", root.join("file-link")).unwrap();
    Fixture {
        _dir: dir,
        root,
        outside,
    }
}

/// (device, inode) of what an fd names.
fn identity(fd: &OwnedFd) -> (u64, u64) {
    let stat = rustix::fs::fstat(fd).unwrap();
    (stat.st_dev as u64, stat.st_ino as u64)
}

fn identity_of(path: &Path) -> (u64, u64) {
    let meta = fs::symlink_metadata(path).unwrap();
    (meta.dev(), meta.ino())
}

#[test]
fn resolves_inside_the_volume() {
    let f = fixture();
    let cases: &[(&str, &str)] = &[
        ("", ""),
        ("data", "data"),
        ("./data/./inner", "data/inner"),
        ("data/file", "data/file"),
        ("rel-in", "data"),
        ("rel-in/inner", "data/inner"),
        ("data/up-and-in", "data/inner"),
        ("abs-in/inner", "data/inner"),
        ("file-link", "data/file"),
    ];
    for (sub, expected) in cases {
        let fd = open_sub_path(&f.root, sub, 0o755).unwrap_or_else(|e| panic!("{sub}: {e}"));
        assert_eq!(identity(&fd), identity_of(&f.root.join(expected)), "{sub}");
    }
}

#[test]
fn symlink_attacks_are_refused() {
    let f = fixture();
    let cases: &[&str] = &[
        "rel-out",
        "rel-out/secret",
        "abs-out/secret",
        "to-root",
        "to-root/etc",
        "to-etc/passwd",
        "sneaky/secret",
        "chain/secret",
        "data/../../outside",
        "../outside",
        "/etc",
        "loop-a",
        "data/file/x",
        "rel-out/new-dir",
    ];
    for sub in cases {
        assert!(
            open_sub_path(&f.root, sub, 0o755).is_err(),
            "{sub} was accepted"
        );
    }
    // Nothing was created outside.
    let outside: Vec<_> = fs::read_dir(&f.outside).unwrap().collect();
    assert_eq!(outside.len(), 1);
    assert!(!f.outside.join("new-dir").exists());
}

#[test]
fn creates_missing_directories_with_the_volume_mode() {
    let f = fixture();
    let fd = open_sub_path(&f.root, "rel-in/new/deeper", 0o750).unwrap();
    assert_eq!(identity(&fd), identity_of(&f.root.join("data/new/deeper")));
    for dir in ["data/new", "data/new/deeper"] {
        let mode = fs::metadata(f.root.join(dir)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o750, "{dir}");
    }
    // Idempotent.
    let again = open_sub_path(&f.root, "rel-in/new/deeper", 0o750).unwrap();
    assert_eq!(identity(&again), identity(&fd));
}

#[test]
fn checks_the_text() {
    assert!(matches!(
        check_sub_path("/abs"),
        Err(SubPathError::Absolute)
    ));
    assert!(matches!(
        check_sub_path("a/../b"),
        Err(SubPathError::ParentDir)
    ));
    assert!(check_sub_path("a/..b/c..").is_ok());
}

/// A container's loop: `x` is a real directory of the volume, then a symlink to `/`, then the
/// directory again, as fast as it can.
fn start_swapper(root: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        let (x, real) = (root.join("x"), root.join("x.real"));
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            if fs::rename(&x, &real).is_ok() {
                let _ = symlink("/", &x);
                let _ = fs::remove_file(&x);
                let _ = fs::rename(&real, &x);
                swaps += 1;
            }
        }
        swaps
    })
}

#[test]
fn a_swapping_container_never_gets_the_host_root() {
    let f = fixture();
    fs::create_dir(f.root.join("x")).unwrap();
    fs::write(f.root.join("x/mine"), "volume data").unwrap();
    let host_root = identity_of(Path::new("/"));
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = start_swapper(&f.root, Arc::clone(&stop));
    let (mut opened, mut refused) = (0, 0);
    for _ in 0..5000 {
        match open_sub_path(&f.root, "x", 0o755) {
            Ok(fd) => {
                let got = identity(&fd);
                assert_ne!(got, host_root, "the subPath reached the host's /");
                // The directory itself, or (while it was renamed away) a fresh x made inside:
                // once a fresh x exists the swapper's renames can stall, so any open counts.
                opened += 1;
            }
            Err(_) => refused += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 0, "the swapper ran");
    assert!(opened > 0, "some opens won the race ({refused} refused)");
}
