//! CRI conformance through the gRPC socket of `runp serve`: the security context as critest's
//! security_context specs check it and containerd applies it: RunAsUser / RunAsGroup /
//! RunAsUsername, image users "uid:gid" and "name:group" from the image's /etc/passwd and
//! /etc/group, supplemental groups (from the spec and the image), read-only rootfs, privileged,
//! capabilities (add, drop, ALL), NoNewPrivs, seccomp (RuntimeDefault, Unconfined, Localhost),
//! masked and read-only paths, and AppArmor refused cleanly (runp applies none).

#[path = "support/conformance.rs"]
mod conformance;
#[path = "support/image.rs"]
mod image;
#[path = "support/serve.rs"]
mod serve;
#[path = "support/runtime.rs"]
mod support;

use conformance::*;
use image::{Compress, LayerBuilder, TestImage, write_oci_layout};
use runp::cri::api;
use support::*;
use tonic::Code;

const UID_GID_IMAGE: &str = "runp.test/user-uid-gid:1";
const NAME_GROUP_IMAGE: &str = "runp.test/user-name-group:1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_conformance_security() {
    let Some(s) = Suite::start("cri_conformance_security").await else {
        return;
    };
    import_user_images(&s);
    s.run(vec![
        ("run_as_user_and_group", Box::pin(run_as_user_and_group(&s))),
        ("image_users", Box::pin(image_users(&s))),
        ("read_only_rootfs", Box::pin(read_only_rootfs(&s))),
        ("capabilities", Box::pin(capabilities(&s))),
        ("privileged", Box::pin(privileged(&s))),
        ("no_new_privs", Box::pin(no_new_privs(&s))),
        ("seccomp", Box::pin(seccomp(&s))),
        (
            "masked_and_readonly_paths",
            Box::pin(masked_and_readonly_paths(&s)),
        ),
        (
            "apparmor_refused_cleanly",
            Box::pin(apparmor_refused_cleanly(&s)),
        ),
    ])
    .await;
}

/// Two images on one busybox layer whose User is "1000:2000" and "app:extra", and whose
/// /etc/group makes `app` a member of `extra` (2000) and `more` (3000).
fn import_user_images(s: &Suite) {
    let mut layer = LayerBuilder::new()
        .dir("bin", 0o755)
        .dir("etc", 0o755)
        .dir("tmp", 0o1777)
        .dir("proc", 0o755)
        .dir("sys", 0o755)
        .dir("dev", 0o755)
        .file_with(
            "bin/busybox",
            &std::fs::read("/bin/busybox").unwrap(),
            0o755,
            (0, 0),
        )
        .file(
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/tmp:/bin/sh\n",
        )
        .file(
            "etc/group",
            b"root:x:0:\napp:x:1000:\nextra:x:2000:app\nmore:x:3000:root,app\n",
        );
    for applet in ["sh", "id", "cat", "tr", "sort"] {
        layer = layer.symlink(&format!("bin/{applet}"), "busybox");
    }
    let layer = layer.finish();
    let layout = s.dir.path().join("user-images");
    let images: Vec<TestImage> = [
        (UID_GID_IMAGE, "1000:2000"),
        (NAME_GROUP_IMAGE, "app:extra"),
    ]
    .into_iter()
    .map(|(name, user)| {
        let mut image = TestImage::new(name, vec![(layer.clone(), Compress::Gzip)]);
        image.user = Some(user.to_string());
        image
    })
    .collect();
    write_oci_layout(&layout, &images);
    runp::image::ImageStore::open(s.dir.path().join("root/images"))
        .unwrap()
        .import(&layout)
        .unwrap();
}

/// `id` of a container that prints it once: "uid gid groups..." (groups sorted, unique).
async fn id_of(
    s: &Suite,
    pod: &(String, api::PodSandboxConfig),
    name: &str,
    image: &str,
    adjust: impl FnOnce(&mut api::ContainerConfig),
) -> String {
    let script = "echo $(id -u) $(id -g) $(id -G | tr ' ' '\\n' | sort -un)";
    let config = container(name, script, |c| {
        c.image.as_mut().unwrap().image = image.to_string();
        adjust(c);
    });
    s.output_of(pod, config).await
}

/// critest: runAsUser, runAsGroup, runAsUserName; the gid comes from the image's passwd when
/// the uid is listed there, else 0 (containerd's WithUserID); supplemental groups are added.
async fn run_as_user_and_group(s: &Suite) {
    let pod = s.pod(s.pod_config("sec-users")).await;
    let uid = |uid: i64| Some(api::Int64Value { value: uid });
    assert_eq!(
        id_of(s, &pod, "uid", BUSYBOX, |c| security(c).run_as_user =
            uid(1000))
        .await,
        "1000 1000 1000"
    );
    assert_eq!(
        id_of(s, &pod, "unlisted", BUSYBOX, |c| security(c).run_as_user =
            uid(4242))
        .await,
        "4242 0 0"
    );
    let with_group = id_of(s, &pod, "group", BUSYBOX, |c| {
        security(c).run_as_user = uid(1000);
        security(c).run_as_group = uid(2345);
    })
    .await;
    assert!(with_group.starts_with("1000 2345 "), "{with_group}");
    assert!(
        with_group.split(' ').skip(2).any(|g| g == "2345"),
        "{with_group}"
    );
    // A group alone names no user: containerd's "user group is specified without user".
    let lone = container("lone-group", "true", |c| {
        security(c).run_as_group = uid(2345)
    });
    let refused = s.create(&pod, lone).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("without user"), "{refused:?}");
    assert_eq!(
        id_of(s, &pod, "username", BUSYBOX, |c| security(c)
            .run_as_username =
            "app".into())
        .await,
        "1000 1000 1000"
    );
    let supplemental = id_of(s, &pod, "supplemental", BUSYBOX, |c| {
        security(c).run_as_user = uid(1000);
        security(c).supplemental_groups = vec![5555, 6666];
    })
    .await;
    assert_eq!(supplemental, "1000 1000 1000 5555 6666");
    // The image's own user when the spec gives none.
    assert_eq!(
        id_of(s, &pod, "extra", EXTRA, |_| {}).await,
        "1000 1000 1000"
    );
}

/// Image users "uid:gid" and "name:group", and the groups /etc/group gives the user.
async fn image_users(s: &Suite) {
    let pod = s.pod(s.pod_config("sec-image-users")).await;
    assert_eq!(
        id_of(s, &pod, "uid-gid", UID_GID_IMAGE, |_| {}).await,
        "1000 2000 2000 3000"
    );
    assert_eq!(
        id_of(s, &pod, "name-group", NAME_GROUP_IMAGE, |_| {}).await,
        "1000 2000 2000 3000"
    );
    let status = s.image(NAME_GROUP_IMAGE).await.expect("the image is there");
    assert_eq!(status.username, "app", "{status:?}");
    assert_eq!(status.uid, None, "{status:?}");
    let uid_image = s.image(UID_GID_IMAGE).await.expect("the image is there");
    assert_eq!(uid_image.uid, Some(api::Int64Value { value: 1000 }));
    assert_eq!(uid_image.username, "");
}

async fn read_only_rootfs(s: &Suite) {
    let pod = s.pod(s.pod_config("sec-rofs")).await;
    let script =
        "touch /newfile 2>&1 && echo wrote || echo refused; echo ok > /dev/shm/x && echo shm";
    let out = s
        .output_of(
            &pod,
            container("ro", script, |c| security(c).readonly_rootfs = true),
        )
        .await;
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(out.contains("refused") && !out.contains("wrote"), "{out}");
    let out = s.output_of(&pod, container("rw", script, |_| {})).await;
    assert!(out.contains("wrote"), "{out}");
}

/// The effective capability mask of a container's process.
async fn cap_eff(
    s: &Suite,
    pod: &(String, api::PodSandboxConfig),
    name: &str,
    adjust: impl FnOnce(&mut api::ContainerConfig),
) -> u64 {
    let script = "grep CapEff /proc/self/status | cut -f2";
    let out = s.output_of(pod, container(name, script, adjust)).await;
    u64::from_str_radix(out.trim(), 16).unwrap_or_else(|e| panic!("{out:?}: {e}"))
}

const CAP_CHOWN: u64 = 1 << 0;
const CAP_NET_RAW: u64 = 1 << 13;
const CAP_NET_ADMIN: u64 = 1 << 12;
const CAP_SYS_ADMIN: u64 = 1 << 21;

async fn capabilities(s: &Suite) {
    let pod = s.pod(s.pod_config("sec-caps")).await;
    let default = cap_eff(s, &pod, "default", |_| {}).await;
    assert_eq!(
        default & (CAP_CHOWN | CAP_NET_RAW | CAP_NET_ADMIN | CAP_SYS_ADMIN),
        CAP_CHOWN | CAP_NET_RAW,
        "{default:x}"
    );
    let caps = |add: &[&str], drop: &[&str]| api::Capability {
        add_capabilities: add.iter().map(|c| c.to_string()).collect(),
        drop_capabilities: drop.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    };
    let added = cap_eff(s, &pod, "add", |c| {
        security(c).capabilities = Some(caps(&["NET_ADMIN"], &["CHOWN"]))
    })
    .await;
    assert_eq!(added, (default | CAP_NET_ADMIN) & !CAP_CHOWN, "{added:x}");
    let none = cap_eff(s, &pod, "drop-all", |c| {
        security(c).capabilities = Some(caps(&[], &["ALL"]))
    })
    .await;
    assert_eq!(none, 0);
    let only = cap_eff(s, &pod, "drop-all-add-one", |c| {
        security(c).capabilities = Some(caps(&["CAP_NET_RAW"], &["ALL"]))
    })
    .await;
    assert_eq!(only, CAP_NET_RAW);
    let all = cap_eff(s, &pod, "add-all", |c| {
        security(c).capabilities = Some(caps(&["ALL"], &[]))
    })
    .await;
    assert_ne!(all & CAP_SYS_ADMIN, 0, "{all:x}");
    let bad = s
        .create(
            &pod,
            container("bad-cap", "true", |c| {
                security(c).capabilities = Some(caps(&["NOT_A_CAP"], &[]))
            }),
        )
        .await
        .expect_err("an unknown capability");
    assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
}

/// Privileged needs a privileged pod; it gets every capability, no masked paths, all devices.
async fn privileged(s: &Suite) {
    let mut config = s.pod_config("sec-priv");
    pod_security(&mut config).privileged = true;
    let pod = s.pod(config).await;
    let eff = cap_eff(s, &pod, "caps", |c| security(c).privileged = true).await;
    assert_ne!(eff & CAP_SYS_ADMIN, 0, "{eff:x}");
    // A host device outside runc's default list: there in privileged containers only.
    let device = ["/dev/loop-control", "/dev/kmsg", "/dev/fuse"]
        .into_iter()
        .find(|d| std::path::Path::new(d).exists())
        .expect("a host device to look for");
    let script = format!(
        "test -c {device} && echo device; wc -c < /proc/interrupts; grep Seccomp: /proc/self/status"
    );
    let out = s
        .output_of(
            &pod,
            container("view", &script, |c| security(c).privileged = true),
        )
        .await;
    assert!(out.contains("device"), "{device} is missing: {out}");
    assert!(
        !out.lines().any(|l| l == "0"),
        "/proc/interrupts is masked: {out}"
    );
    assert!(out.contains("Seccomp:\t0"), "{out}");
    let out = s.output_of(&pod, container("plain", &script, |_| {})).await;
    assert!(
        !out.contains("device"),
        "{device} in an unprivileged container: {out}"
    );
    let script = "mount -t tmpfs tmpfs /tmp 2>&1 && echo mounted; true";
    let out = s
        .output_of(
            &pod,
            container("mount", script, |c| security(c).privileged = true),
        )
        .await;
    assert!(out.contains("mounted"), "{out}");
    let out = s
        .output_of(&pod, container("no-mount", script, |_| {}))
        .await;
    assert!(
        !out.contains("mounted"),
        "an unprivileged container mounted: {out}"
    );

    let plain = s.pod(s.pod_config("sec-unpriv")).await;
    let err = s
        .create(
            &plain,
            container("escalate", "true", |c| security(c).privileged = true),
        )
        .await
        .expect_err("a privileged container in an unprivileged pod");
    assert_ne!(err.code(), Code::Ok);
}

async fn no_new_privs(s: &Suite) {
    let pod = s.pod(s.pod_config("sec-nnp")).await;
    let script = "grep NoNewPrivs: /proc/self/status | cut -f2";
    let on = s
        .output_of(
            &pod,
            container("on", script, |c| security(c).no_new_privs = true),
        )
        .await;
    assert_eq!(on, "1");
    let off = s.output_of(&pod, container("off", script, |_| {})).await;
    assert_eq!(off, "0");
}

async fn seccomp(s: &Suite) {
    use api::security_profile::ProfileType;
    let pod = s.pod(s.pod_config("sec-seccomp")).await;
    let profile = |profile_type: ProfileType, path: &str| api::SecurityProfile {
        profile_type: profile_type as i32,
        localhost_ref: path.to_string(),
    };
    let script = "grep Seccomp: /proc/self/status | cut -f2; mkdir /tmp/d 2>&1 && echo made; true";
    let default = s
        .output_of(
            &pod,
            container("default", script, |c| {
                security(c).seccomp = Some(profile(ProfileType::RuntimeDefault, ""))
            }),
        )
        .await;
    assert!(
        default.lines().any(|l| l == "2") && default.contains("made"),
        "{default}"
    );
    let unconfined = s
        .output_of(
            &pod,
            container("unconfined", script, |c| {
                security(c).seccomp = Some(profile(ProfileType::Unconfined, ""))
            }),
        )
        .await;
    assert!(unconfined.lines().any(|l| l == "0"), "{unconfined}");
    let path = s.dir.path().join("no-mkdir.json");
    std::fs::write(
        &path,
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let local = s
        .output_of(
            &pod,
            container("localhost", script, |c| {
                security(c).seccomp = Some(profile(ProfileType::Localhost, path.to_str().unwrap()))
            }),
        )
        .await;
    assert!(local.lines().any(|l| l == "2"), "{local}");
    assert!(
        local.contains("Operation not permitted") && !local.contains("made"),
        "{local}"
    );
    let missing = s
        .create(
            &pod,
            container("missing", "true", |c| {
                security(c).seccomp = Some(profile(ProfileType::Localhost, "/no/such/profile.json"))
            }),
        )
        .await
        .expect_err("a missing localhost profile");
    assert_eq!(missing.code(), Code::InvalidArgument, "{missing:?}");
}

async fn masked_and_readonly_paths(s: &Suite) {
    let pod = s.pod(s.pod_config("sec-paths")).await;
    let script =
        "cat /proc/interrupts | wc -c; echo 1 > /proc/sys/kernel/domainname 2>&1 || echo ro-sys";
    let defaults = s
        .output_of(&pod, container("defaults", script, |_| {}))
        .await;
    assert!(
        defaults.lines().any(|l| l == "0"),
        "/proc/interrupts is masked: {defaults}"
    );
    assert!(defaults.contains("ro-sys"), "{defaults}");
    let script = "cat /opt/data/b | wc -c; touch /opt/cfg/new 2>&1 || echo ro-cfg; touch /tmp/ok && echo rw-tmp";
    let custom = s
        .output_of(
            &pod,
            container("custom", script, |c| {
                security(c).masked_paths = vec!["/opt/data/b".into()];
                security(c).readonly_paths = vec!["/opt/cfg".into()];
            }),
        )
        .await;
    assert!(custom.lines().any(|l| l == "0"), "{custom}");
    assert!(
        custom.contains("ro-cfg") && custom.contains("rw-tmp"),
        "{custom}"
    );
}

/// runp applies no AppArmor profile: asking for one is an InvalidArgument naming AppArmor
/// (as containerd on a host without it), never a container silently left unconfined.
async fn apparmor_refused_cleanly(s: &Suite) {
    use api::security_profile::ProfileType;
    let pod = s.pod(s.pod_config("sec-apparmor")).await;
    let err = s
        .create(
            &pod,
            container("localhost", "true", |c| {
                security(c).apparmor = Some(api::SecurityProfile {
                    profile_type: ProfileType::Localhost as i32,
                    localhost_ref: "k8s-deny-write".into(),
                })
            }),
        )
        .await
        .expect_err("a localhost AppArmor profile");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("apparmor"), "{err:?}");
    #[allow(deprecated)]
    let err = s
        .create(
            &pod,
            container("deprecated", "true", |c| {
                security(c).apparmor_profile = "localhost/k8s-deny-write".into()
            }),
        )
        .await
        .expect_err("a localhost AppArmor profile (deprecated field)");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    for (name, kind) in [
        ("unconfined", ProfileType::Unconfined),
        ("default", ProfileType::RuntimeDefault),
    ] {
        let out = s
            .output_of(
                &pod,
                container(name, "echo ran", |c| {
                    security(c).apparmor = Some(api::SecurityProfile {
                        profile_type: kind as i32,
                        localhost_ref: String::new(),
                    })
                }),
            )
            .await;
        assert_eq!(out, "ran");
    }
}
