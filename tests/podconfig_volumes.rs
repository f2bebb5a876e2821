//! Volumes on a real filesystem: configMap/secret updates are atomic and visible through the
//! volume directory (and through a bind mount of it, as a container sees it, when root);
//! subPath symlink escapes are refused; emptyDir medium Memory is a tmpfs when root.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use runp::cri::api;
use runp::kubelet::config::AgentConfig;
use runp::kubelet::podconfig::volumes::tmpfs::is_mount_point;
use runp::kubelet::podconfig::{ObjectStore, PodVolumes, VolumeManager};
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::PathBuf;

/// Real root: euid 0 and the identity uid map (not mapped root in a user namespace).
fn is_real_root() -> bool {
    let uid_map = fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let identity = uid_map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    nix::unistd::geteuid().is_root() && identity
}

fn skip(test: &str, needs: &str) {
    eprintln!("SKIP: {test}: needs {needs}");
}

/// subPath mounts are pinned with a bind mount: root (real, or mapped in a user namespace).
fn can_mount(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        skip(test, "root to bind-mount subPath pins");
    }
    root
}

/// (device, inode) of a path, symlinks not followed.
fn identity(path: &std::path::Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(path).unwrap();
    (meta.dev(), meta.ino())
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        ..Default::default()
    }
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: meta(name),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: meta(name),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "uid": "uid-1", "labels": {"app": "web"}},
        "spec": spec,
    }))
    .expect("valid pod")
}

struct Env {
    _root: tempfile::TempDir,
    config: AgentConfig,
    manager: VolumeManager,
    objects: ObjectStore,
}

fn env() -> Env {
    let root = tempfile::tempdir().unwrap();
    let config = AgentConfig::with_root(root.path().canonicalize().unwrap());
    Env {
        manager: VolumeManager::new(config.clone()),
        config,
        objects: ObjectStore::new(),
        _root: root,
    }
}

fn container(pod: &Pod, name: &str) -> Container {
    let spec = pod.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .find(|c| c.name == name)
        .unwrap()
        .clone()
}

fn mount_at<'a>(mounts: &'a [api::Mount], container_path: &str) -> &'a api::Mount {
    mounts
        .iter()
        .find(|m| m.container_path == container_path)
        .unwrap_or_else(|| panic!("no mount at {container_path}: {mounts:?}"))
}

fn mounts(volumes: &PodVolumes, pod: &Pod, name: &str) -> Vec<api::Mount> {
    volumes.mounts_for(&container(pod, name)).expect("mounts")
}

#[test]
fn config_map_and_secret_updates_are_atomic_and_visible() {
    if !can_mount("config_map_and_secret_updates_are_atomic_and_visible") {
        return;
    }
    let e = env();
    e.objects
        .insert_config_map(config_map("cfg", &[("app.conf", "v1"), ("other", "x")]));
    e.objects.insert_secret(secret("sec", &[("token", "t1")]));
    let pod = pod(serde_json::json!({
        "containers": [{"name": "main", "image": "busybox", "volumeMounts": [
            {"name": "cfg", "mountPath": "/etc/app"},
            {"name": "sec", "mountPath": "/run/secret", "readOnly": false},
            {"name": "one", "mountPath": "/etc/one.conf", "subPath": "app.conf"}]}],
        "volumes": [
            {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 0o640}},
            {"name": "sec", "secret": {"secretName": "sec"}},
            {"name": "one", "configMap": {"name": "cfg"}}]
    }));
    let volumes = e.manager.setup(&pod, &e.objects).expect("setup");
    let m = mounts(&volumes, &pod, "main");
    let cfg = mount_at(&m, "/etc/app");
    assert!(cfg.readonly, "API data is mounted read-only");
    assert_eq!(
        cfg.propagation,
        api::MountPropagation::PropagationPrivate as i32
    );
    let cfg_dir = PathBuf::from(&cfg.host_path);
    assert!(
        cfg_dir.starts_with(
            e.config
                .pod_dir("uid-1")
                .join("volumes/kubernetes.io~configmap")
        )
    );
    assert_eq!(fs::read_to_string(cfg_dir.join("app.conf")).unwrap(), "v1");
    let mode = fs::metadata(cfg_dir.join("app.conf"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o640);
    let sec_dir = PathBuf::from(&mount_at(&m, "/run/secret").host_path);
    assert!(
        mount_at(&m, "/run/secret").readonly,
        "secrets are read-only even if asked otherwise"
    );
    assert_eq!(fs::read_to_string(sec_dir.join("token")).unwrap(), "t1");
    // subPath of a single key: the file of the current version.
    let one = PathBuf::from(&mount_at(&m, "/etc/one.conf").host_path);
    assert_eq!(fs::read_to_string(&one).unwrap(), "v1");
    assert!(!fs::symlink_metadata(&one).unwrap().file_type().is_symlink());

    // As a container would see it: a bind mount of the volume dir (root only).
    let bind_dir = tempfile::tempdir().unwrap();
    let bound = is_real_root()
        && nix::mount::mount(
            Some(&cfg_dir),
            bind_dir.path(),
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .is_ok();
    if !bound {
        skip(
            "config_map_and_secret_updates_are_atomic_and_visible (bind mount part)",
            "real root",
        );
    }

    // A reader holding a file of the old version.
    let held = fs::File::open(cfg_dir.join("app.conf")).unwrap();
    e.objects
        .insert_config_map(config_map("cfg", &[("app.conf", "v2"), ("added", "new")]));
    e.objects.insert_secret(secret("sec", &[("token", "t2")]));
    let again = e.manager.setup(&pod, &e.objects).expect("refresh");
    let m2 = mounts(&again, &pod, "main");
    assert_eq!(
        m2[..2],
        m[..2],
        "volume directories are stable across updates"
    );
    let one2 = PathBuf::from(&mount_at(&m2, "/etc/one.conf").host_path);
    assert_eq!(one2, one, "a subPath pin stays at its path");
    assert_eq!(fs::read_to_string(&one2).unwrap(), "v2");
    assert_eq!(fs::read_to_string(cfg_dir.join("app.conf")).unwrap(), "v2");
    assert_eq!(fs::read_to_string(cfg_dir.join("added")).unwrap(), "new");
    assert!(!cfg_dir.join("other").exists(), "removed key disappears");
    assert_eq!(fs::read_to_string(sec_dir.join("token")).unwrap(), "t2");
    assert_eq!(
        std::io::read_to_string(held).unwrap(),
        "v1",
        "old version stays whole"
    );
    if bound {
        let through_mount = bind_dir.path();
        assert_eq!(
            fs::read_to_string(through_mount.join("app.conf")).unwrap(),
            "v2"
        );
        assert!(!through_mount.join("other").exists());
        nix::mount::umount(bind_dir.path()).unwrap();
    }
    // Unchanged objects: no rewrite (the version dir stays).
    let version = fs::read_link(cfg_dir.join("..data")).unwrap();
    e.manager.setup(&pod, &e.objects).unwrap();
    assert_eq!(fs::read_link(cfg_dir.join("..data")).unwrap(), version);

    e.manager.teardown("uid-1").unwrap();
    assert!(!e.config.pod_dir("uid-1").exists());
    e.manager.teardown("uid-1").expect("idempotent");
}

#[test]
fn missing_objects_fail_unless_optional() {
    let e = env();
    let required = pod(serde_json::json!({
        "containers": [{"name": "main", "image": "busybox"}],
        "volumes": [{"name": "cfg", "configMap": {"name": "absent"}}]
    }));
    let err = e
        .manager
        .setup(&required, &e.objects)
        .err()
        .expect("missing configMap");
    assert!(
        err.to_string()
            .contains("configMap default/absent not found"),
        "{err}"
    );
    let optional = pod(serde_json::json!({
        "containers": [{"name": "main", "image": "busybox", "volumeMounts": [{"name": "cfg", "mountPath": "/c"}]}],
        "volumes": [{"name": "cfg", "configMap": {"name": "absent", "optional": true}}]
    }));
    let volumes = e.manager.setup(&optional, &e.objects).expect("optional");
    let dir = volumes.host_path("cfg").unwrap();
    let visible: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with(".."))
        .collect();
    assert!(visible.is_empty());
    // Appears later: the next setup fills it.
    e.objects
        .insert_config_map(config_map("absent", &[("k", "v")]));
    e.manager.setup(&optional, &e.objects).unwrap();
    assert_eq!(fs::read_to_string(dir.join("k")).unwrap(), "v");
}

#[test]
fn sub_path_symlink_escapes_are_refused() {
    if !can_mount("sub_path_symlink_escapes_are_refused") {
        return;
    }
    let e = env();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("host-secret"), "root's").unwrap();
    // Targets outside the volume that exist (so a regression would create `x` there, in a
    // temporary directory, not on the host).
    let out = outside.path().to_str().unwrap().to_string();
    let rel_out = format!("../../../../../../../../../../../..{out}");
    let abs_out = format!(
        "{out}/../{}",
        outside.path().file_name().unwrap().to_str().unwrap()
    );
    let attacks = [
        ("escape-rel", rel_out.as_str()),
        ("escape-abs", abs_out.as_str()),
        ("escape-out", out.as_str()),
    ];
    let mut mounts_json = vec![serde_json::json!({"name": "data", "mountPath": "/data"})];
    for (i, (name, _)) in attacks.iter().enumerate() {
        mounts_json.push(serde_json::json!({"name": "data", "mountPath": format!("/m{i}"), "subPath": format!("{name}/x")}));
    }
    let pod = pod(serde_json::json!({
        "containers": [
            {"name": "main", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            {"name": "ok", "image": "busybox", "volumeMounts": [
                {"name": "data", "mountPath": "/logs", "subPath": "inside-link/logs"}]}],
        "volumes": [{"name": "data", "emptyDir": {}}]
    }));
    let volumes = e.manager.setup(&pod, &e.objects).unwrap();
    let root = volumes.host_path("data").unwrap().to_path_buf();
    // What a malicious container could have written into its emptyDir.
    for (name, target) in attacks {
        symlink(target, root.join(name)).unwrap();
    }
    fs::create_dir(root.join("real")).unwrap();
    symlink("real", root.join("inside-link")).unwrap();

    for (i, (name, _)) in attacks.iter().enumerate() {
        let evil: Container = serde_json::from_value(serde_json::json!({
            "name": "main", "image": "busybox",
            "volumeMounts": [{"name": "data", "mountPath": format!("/m{i}"), "subPath": format!("{name}/x")}]
        }))
        .unwrap();
        let err = volumes
            .mounts_for(&evil)
            .err()
            .unwrap_or_else(|| panic!("{name} accepted"));
        assert!(
            err.to_string().contains("outside the volume"),
            "{name}: {err}"
        );
    }
    assert!(
        !outside.path().join("x").exists(),
        "nothing created outside"
    );

    // A symlink that stays inside is followed; the missing dir is created with the volume's mode.
    let m = mounts(&volumes, &pod, "ok");
    let pin = PathBuf::from(&mount_at(&m, "/logs").host_path);
    assert!(pin.starts_with(e.config.pod_dir("uid-1").join("volume-subpaths/data/ok")));
    assert!(is_mount_point(&pin) || identity(&pin) == identity(&root.join("real/logs")));
    assert_eq!(
        identity(&pin),
        identity(&root.join("real/logs")),
        "the pin shows the subPath"
    );
    let mode = fs::metadata(root.join("real/logs"))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o777, "emptyDir mode");
    // Text checks come first.
    let dotdot: Container = serde_json::from_value(serde_json::json!({
        "name": "main", "image": "busybox",
        "volumeMounts": [{"name": "data", "mountPath": "/x", "subPath": "real/../../x"}]
    }))
    .unwrap();
    assert!(
        volumes
            .mounts_for(&dotdot)
            .unwrap_err()
            .to_string()
            .contains("'..'")
    );
    e.manager.teardown("uid-1").unwrap();
}

#[test]
fn host_path_empty_dir_downward_api_sub_path_expr_and_storage() {
    if !can_mount("host_path_empty_dir_downward_api_sub_path_expr_and_storage") {
        return;
    }
    let e = env();
    let host = tempfile::tempdir().unwrap();
    let host_dir = host.path().join("created");
    let pod = pod(serde_json::json!({
        "containers": [{"name": "main", "image": "busybox",
            "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "volumeMounts": [
                {"name": "host", "mountPath": "/host", "readOnly": true, "mountPropagation": "HostToContainer"},
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "scratch", "mountPath": "/per-pod", "subPathExpr": "pods/$(POD)"},
                {"name": "info", "mountPath": "/etc/podinfo"}]}],
        "volumes": [
            {"name": "host", "hostPath": {"path": host_dir, "type": "DirectoryOrCreate"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "info", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]
    }));
    let volumes = e.manager.setup(&pod, &e.objects).unwrap();
    assert!(host_dir.is_dir(), "DirectoryOrCreate");
    let m = mounts(&volumes, &pod, "main");
    let host_mount = mount_at(&m, "/host");
    assert_eq!(host_mount.host_path, host_dir.to_string_lossy());
    assert!(host_mount.readonly);
    assert_eq!(
        host_mount.propagation,
        api::MountPropagation::PropagationHostToContainer as i32
    );
    let scratch = PathBuf::from(&mount_at(&m, "/scratch").host_path);
    assert!(scratch.ends_with("volumes/kubernetes.io~empty-dir/scratch"));
    assert!(!mount_at(&m, "/scratch").readonly);
    assert_eq!(
        identity(std::path::Path::new(&mount_at(&m, "/per-pod").host_path)),
        identity(&scratch.join("pods/web"))
    );
    let info = PathBuf::from(&mount_at(&m, "/etc/podinfo").host_path);
    assert_eq!(
        fs::read_to_string(info.join("labels")).unwrap(),
        "app=\"web\""
    );
    // The shared storage dir, at the same path.
    let storage = e.config.storage_dir.clone().unwrap();
    let storage_mount = mount_at(&m, storage.to_str().unwrap());
    assert_eq!(storage_mount.host_path, storage_mount.container_path);
    assert!(storage.is_dir());

    // Bidirectional needs a privileged container.
    let bidi: Container = serde_json::from_value(serde_json::json!({
        "name": "main", "image": "busybox",
        "volumeMounts": [{"name": "host", "mountPath": "/h", "mountPropagation": "Bidirectional"}]
    }))
    .unwrap();
    assert!(
        volumes
            .mounts_for(&bidi)
            .unwrap_err()
            .to_string()
            .contains("privileged")
    );

    // A type mismatch is reported with the path.
    let bad = pod_with_host_path(host.path().join("created"), "File");
    let err = e.manager.setup(&bad, &e.objects).err().expect("type check");
    assert!(
        err.to_string().contains("is a directory, expected a file"),
        "{err}"
    );

    // Dropping a volume from the spec removes its directory at the next setup.
    let fewer = pod_with_host_path(host.path().join("created"), "Directory");
    e.manager.setup(&fewer, &e.objects).unwrap();
    assert!(!scratch.exists(), "stale emptyDir removed");
    e.manager.teardown("uid-1").unwrap();
    assert!(host_dir.is_dir(), "teardown never touches hostPath volumes");
}

fn pod_with_host_path(path: PathBuf, type_: &str) -> Pod {
    pod(serde_json::json!({
        "containers": [{"name": "main", "image": "busybox"}],
        "volumes": [{"name": "host", "hostPath": {"path": path, "type": type_}}]
    }))
}

#[test]
fn memory_empty_dir_is_a_tmpfs_when_root() {
    let e = env();
    let pod = pod(serde_json::json!({
        "containers": [{"name": "main", "image": "busybox"}],
        "volumes": [{"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
                    {"name": "sec", "secret": {"secretName": "s", "optional": true}}]
    }));
    let volumes = e
        .manager
        .setup(&pod, &e.objects)
        .expect("setup works with or without tmpfs");
    let mem = volumes.host_path("mem").unwrap().to_path_buf();
    assert!(mem.is_dir());
    if !is_real_root() {
        skip("memory_empty_dir_is_a_tmpfs_when_root", "real root");
        e.manager.teardown("uid-1").unwrap();
        return;
    }
    assert!(is_mount_point(&mem), "tmpfs mounted");
    let statfs = nix::sys::statfs::statfs(&mem).unwrap();
    assert_eq!(statfs.filesystem_type(), nix::sys::statfs::TMPFS_MAGIC);
    let size = statfs.blocks() * statfs.block_size() as u64;
    assert_eq!(size, 8 << 20, "sizeLimit is the tmpfs size");
    assert!(
        is_mount_point(volumes.host_path("sec").unwrap()),
        "secrets on tmpfs"
    );
    // Idempotent: no second mount stacked.
    e.manager.setup(&pod, &e.objects).unwrap();
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let count = info
        .lines()
        .filter(|l| l.contains(mem.to_str().unwrap()))
        .count();
    assert_eq!(count, 1);
    e.manager.teardown("uid-1").unwrap();
    assert!(!mem.exists());
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !info.contains(e.config.pod_dir("uid-1").to_str().unwrap()),
        "all unmounted"
    );
}

#[test]
fn fs_group_owns_data_volumes_when_root() {
    if !is_real_root() {
        skip("fs_group_owns_data_volumes_when_root", "real root");
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let e = env();
    e.objects
        .insert_config_map(config_map("cfg", &[("k", "v")]));
    let pod = pod(serde_json::json!({
        "securityContext": {"fsGroup": 4321},
        "containers": [{"name": "main", "image": "busybox"}],
        "volumes": [{"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 0o600}},
                    {"name": "scratch", "emptyDir": {}}]
    }));
    let volumes = e.manager.setup(&pod, &e.objects).unwrap();
    let file = volumes.host_path("cfg").unwrap().join("k");
    let meta = fs::metadata(&file).unwrap();
    assert_eq!(meta.gid(), 4321);
    assert_eq!(meta.permissions().mode() & 0o777, 0o640, "group can read");
    let scratch = fs::metadata(volumes.host_path("scratch").unwrap()).unwrap();
    assert_eq!(scratch.gid(), 4321);
    assert_eq!(scratch.permissions().mode() & 0o2000, 0o2000, "setgid dir");
    e.manager.teardown("uid-1").unwrap();
}

/// The CVE-2017-1002101 race as a container would run it: `x` of an emptyDir is swapped for a
/// symlink to `/` in a loop while the container mounting `subPath: x` is (re)started. The pin
/// never shows the host's root, writes through it land in the volume, and teardown unmounts
/// every pin without deleting through one (a hostPath's data survives).
#[test]
fn sub_path_pins_survive_a_swapping_container() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !can_mount("sub_path_pins_survive_a_swapping_container") {
        return;
    }
    let e = env();
    let host = tempfile::tempdir().unwrap();
    fs::create_dir(host.path().join("sub")).unwrap();
    fs::write(host.path().join("sub/keep"), "host data").unwrap();
    let pod = pod(serde_json::json!({
        "containers": [
            {"name": "victim", "image": "busybox", "volumeMounts": [
                {"name": "data", "mountPath": "/sub", "subPath": "x"},
                {"name": "host", "mountPath": "/h", "subPath": "sub"}]}],
        "volumes": [{"name": "data", "emptyDir": {}},
                    {"name": "host", "hostPath": {"path": host.path()}}]
    }));
    let volumes = e.manager.setup(&pod, &e.objects).unwrap();
    let root = volumes.host_path("data").unwrap().to_path_buf();
    fs::create_dir(root.join("x")).unwrap();
    let host_root = identity(std::path::Path::new("/"));
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (x, real, stop) = (root.join("x"), root.join("x.real"), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut swaps = 0u32;
            while !stop.load(Ordering::Relaxed) {
                if fs::rename(&x, &real).is_ok() {
                    let _ = symlink("/", &x);
                    let _ = fs::remove_file(&x);
                    let _ = fs::rename(&real, &x);
                    swaps += 1;
                }
                // A moment with the real directory in place: without it, on a loaded machine
                // every pin attempt can overlap a swap (CI saw 300 refusals of 300), and the
                // test must also see pins succeed.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            swaps
        })
    };
    let victim = container(&pod, "victim");
    let (mut pinned, mut refused) = (0, 0);
    for _ in 0..300 {
        match volumes.mounts_for(&victim) {
            Ok(m) => {
                let pin = PathBuf::from(&mount_at(&m, "/sub").host_path);
                assert_ne!(
                    identity(&pin),
                    host_root,
                    "the subPath pin shows the host's /"
                );
                pinned += 1;
            }
            Err(err) => {
                assert!(err.to_string().contains("subPath"), "{err}");
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(swapper.join().unwrap() > 0, "the swapper ran");
    assert!(pinned > 0, "no pin won the race ({refused} refused)");
    // Calm again: a write through the pin lands in the volume.
    let _ = fs::remove_file(root.join("x"));
    let _ = fs::create_dir(root.join("x"));
    let m = volumes.mounts_for(&victim).unwrap();
    let pin = PathBuf::from(&mount_at(&m, "/sub").host_path);
    fs::write(pin.join("written"), "through the pin").unwrap();
    assert_eq!(
        fs::read_to_string(root.join("x/written")).unwrap(),
        "through the pin"
    );
    let host_pin = PathBuf::from(&mount_at(&m, "/h").host_path);
    assert_eq!(
        fs::read_to_string(host_pin.join("keep")).unwrap(),
        "host data"
    );
    e.manager.teardown("uid-1").unwrap();
    assert!(
        !is_mount_point(&pin) && !pin.exists(),
        "pins unmounted and removed"
    );
    assert_eq!(
        fs::read_to_string(host.path().join("sub/keep")).unwrap(),
        "host data",
        "teardown never deletes through a pin"
    );
}
