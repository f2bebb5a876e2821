use super::*;
use oci_spec::runtime::MountBuilder;
use std::fs;

fn bind(source: &Path, destination: &str) -> Mount {
    MountBuilder::default()
        .destination(destination)
        .typ("bind")
        .source(source)
        .options(vec!["rbind".to_string(), "ro".to_string()])
        .build()
        .unwrap()
}

fn tmpfs(destination: &str) -> Mount {
    MountBuilder::default()
        .destination(destination)
        .typ("tmpfs")
        .source("tmpfs")
        .build()
        .unwrap()
}

#[test]
fn targets_are_made_inside_the_rootfs_and_nothing_is_followed_out_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let (rootfs, host) = (dir.path().join("rootfs"), dir.path().join("host"));
    for d in [rootfs.join("etc"), rootfs.join("run"), host.clone()] {
        fs::create_dir_all(d).unwrap();
    }
    let (file, volume) = (host.join("hostname"), host.join("volume"));
    fs::write(&file, "pod\n").unwrap();
    fs::create_dir(&volume).unwrap();
    // Hostile and ordinary symlinks of an image.
    std::os::unix::fs::symlink(&host, rootfs.join("etc/hosts")).unwrap();
    std::os::unix::fs::symlink("/", rootfs.join("up")).unwrap();
    std::os::unix::fs::symlink("/run", rootfs.join("varrun")).unwrap();
    let mounts = [
        bind(&file, "/etc/hostname"),
        bind(&file, "/etc/hosts"),
        bind(&file, "/up/../../escaped"),
        bind(&volume, "/data/../run/../made"),
        bind(&volume, "/data/deep/volume"),
        bind(&volume, "/varrun/secrets"),
        bind(&file, "/dev/termination-log"),
        tmpfs("/dev"),
        bind(&host.join("missing"), "/etc/missing"),
    ];
    make_bind_targets(&rootfs, &mounts);

    assert_eq!(fs::read(rootfs.join("etc/hostname")).unwrap(), b"");
    assert!(rootfs.join("data/deep/volume").is_dir());
    // Resolved from the rootfs: the image's absolute symlink means its own /run.
    assert!(rootfs.join("run/secrets").is_dir());
    // `..` and absolute links stay in the rootfs.
    assert!(rootfs.join("escaped").is_file());
    assert!(!dir.path().join("escaped").exists());
    assert!(rootfs.join("made").is_dir() && !rootfs.join("data/run").exists());
    // An existing target (a symlink here) is left as it is, and never written through.
    assert_eq!(fs::read_link(rootfs.join("etc/hosts")).unwrap(), host);
    assert_eq!(fs::read(&file).unwrap(), b"pod\n");
    // Covered by another mount, or without a source: left to init.
    assert!(!rootfs.join("dev").exists());
    assert!(!rootfs.join("etc/missing").exists());
    // Nothing else appeared on the host side.
    let mut made: Vec<String> = fs::read_dir(&host)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    made.sort();
    assert_eq!(made, ["hostname", "volume"]);
    assert_eq!(fs::read_dir(&volume).unwrap().count(), 0);
}
