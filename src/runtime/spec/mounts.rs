//! The container's mounts: the kernel filesystems (/proc, a minimal /dev, /sys...), the pod's
//! shared files (/etc/hostname, /etc/hosts, /etc/resolv.conf, /dev/shm), then the CRI mounts,
//! which replace a default at the same destination.

use crate::cri::api;
use crate::runtime::error::{Result, RuntimeError};
use oci_spec::runtime::{Hook, HookBuilder, Mount};
use std::path::{Component, Path, PathBuf};

/// Pod-level files every container of the pod shares.
#[derive(Clone, Debug)]
pub struct PodFiles {
    pub hostname: PathBuf,
    pub hosts: PathBuf,
    pub resolv_conf: PathBuf,
    /// The pod's /dev/shm (a tmpfs the runtime mounted); None with the host IPC namespace, when
    /// the host's /dev/shm is bound instead.
    pub shm: Option<PathBuf>,
}

fn mount(dest: &str, typ: &str, source: &str, options: &[&str]) -> Mount {
    let mut m = Mount::default();
    m.set_destination(PathBuf::from(dest))
        .set_typ(Some(typ.to_string()))
        .set_source(Some(PathBuf::from(source)))
        .set_options(Some(options.iter().map(|o| o.to_string()).collect()));
    m
}

fn bind(dest: &Path, source: &Path, options: Vec<String>) -> Mount {
    let mut m = Mount::default();
    m.set_destination(dest.to_path_buf())
        .set_typ(Some("bind".to_string()))
        .set_source(Some(source.to_path_buf()))
        .set_options(Some(options));
    m
}

/// The kernel filesystems. Rootless: no devpts `gid=5` (no gid 5 mapped) and /sys is an rbind
/// of the host's (sysfs cannot be mounted for a network namespace we do not own).
pub fn kernel_mounts(rootless: bool, privileged: bool) -> Vec<Mount> {
    let sys_rw = if privileged { "rw" } else { "ro" };
    let mut pts = vec![
        "nosuid",
        "noexec",
        "newinstance",
        "ptmxmode=0666",
        "mode=0620",
    ];
    if !rootless {
        pts.push("gid=5");
    }
    let mut mounts = vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount("/dev/pts", "devpts", "devpts", &pts),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
    ];
    if rootless {
        mounts.push(mount(
            "/sys",
            "none",
            "/sys",
            &["rbind", "nosuid", "noexec", "nodev", sys_rw],
        ));
    } else {
        mounts.push(mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", sys_rw],
        ));
        mounts.push(mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", sys_rw],
        ));
    }
    mounts
}

/// Binds of the pod's files; read-only along with a read-only rootfs (as containerd does).
pub fn pod_mounts(files: &PodFiles, readonly_rootfs: bool) -> Vec<Mount> {
    let access = if readonly_rootfs { "ro" } else { "rw" };
    let file = |dest: &str, source: &Path| {
        bind(
            Path::new(dest),
            source,
            vec!["rbind".into(), "rprivate".into(), access.into()],
        )
    };
    let shm_source = files
        .shm
        .clone()
        .unwrap_or_else(|| PathBuf::from("/dev/shm"));
    vec![
        file("/etc/hostname", &files.hostname),
        file("/etc/hosts", &files.hosts),
        file("/etc/resolv.conf", &files.resolv_conf),
        bind(
            Path::new("/dev/shm"),
            &shm_source,
            vec![
                "rbind".into(),
                "nosuid".into(),
                "nodev".into(),
                "noexec".into(),
                "rw".into(),
            ],
        ),
    ]
}

/// An absolute path without `..` steps.
fn check_container_path(path: &str) -> Result<PathBuf> {
    let p = Path::new(path);
    if !p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(RuntimeError::invalid(format!(
            "mount container path {path:?} must be absolute without '..'"
        )));
    }
    Ok(p.to_path_buf())
}

/// The rootfs propagation the CRI mounts need (shared for Bidirectional, else slave for
/// HostToContainer), None for private-only mounts. Always applied recursively: libcontainer
/// knows only "shared", "private", "slave" and "unbindable" here (and adds MS_REC itself), and
/// refuses runc's "rshared"/"rslave" at container start.
pub fn rootfs_propagation(cri: &[api::Mount]) -> Option<&'static str> {
    use api::MountPropagation as P;
    let props: Vec<i32> = cri.iter().map(|m| m.propagation).collect();
    if props.contains(&(P::PropagationBidirectional as i32)) {
        Some("shared")
    } else if props.contains(&(P::PropagationHostToContainer as i32)) {
        Some("slave")
    } else {
        None
    }
}

/// The createContainer hook (`runp mount-propagation`, see `jail::apply_mount_propagation`)
/// that makes private and HostToContainer CRI mounts private and slave in the container, parents
/// first; None when no mount needs it (Bidirectional ones stay in the host's peer group).
pub fn propagation_hook(runp_exe: &Path, rootfs: &Path, cri: &[api::Mount]) -> Option<Hook> {
    use api::MountPropagation as P;
    let mut mounts: Vec<(usize, String)> = cri
        .iter()
        .filter_map(|m| {
            let mode = match P::try_from(m.propagation) {
                Ok(P::PropagationPrivate) => "private",
                Ok(P::PropagationHostToContainer) => "slave",
                _ => return None,
            };
            let depth = Path::new(&m.container_path).components().count();
            Some((depth, format!("{mode}:{}", m.container_path)))
        })
        .collect();
    if mounts.is_empty() {
        return None;
    }
    mounts.sort_by_key(|(depth, _)| *depth);
    let mut args = vec![
        "runp".to_string(),
        "mount-propagation".to_string(),
        rootfs.display().to_string(),
    ];
    args.extend(mounts.into_iter().map(|(_, arg)| arg));
    HookBuilder::default()
        .path(runp_exe.to_path_buf())
        .args(args)
        .build()
        .ok()
}

/// CRI mounts as OCI bind mounts, parents before children (sorted by depth, stable).
pub fn cri_mounts(cri: &[api::Mount]) -> Result<Vec<Mount>> {
    use api::MountPropagation as P;
    let mut out = Vec::with_capacity(cri.len());
    for m in cri {
        if m.host_path.is_empty() {
            return Err(RuntimeError::invalid(format!(
                "mount {:?} has no host path",
                m.container_path
            )));
        }
        if m.image.is_some() {
            return Err(RuntimeError::invalid(format!(
                "image volume mounts ({:?}) are not supported",
                m.container_path
            )));
        }
        if !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty() {
            return Err(RuntimeError::invalid(format!(
                "id-mapped mounts ({:?}) are not supported",
                m.container_path
            )));
        }
        let dest = check_container_path(&m.container_path)?;
        let host = Path::new(&m.host_path);
        if !host.is_absolute() {
            return Err(RuntimeError::invalid(format!(
                "mount host path {:?} must be absolute",
                m.host_path
            )));
        }
        let propagation = match P::try_from(m.propagation) {
            Ok(P::PropagationPrivate) => "rprivate",
            Ok(P::PropagationHostToContainer) => "rslave",
            Ok(P::PropagationBidirectional) => "rshared",
            Err(_) => {
                return Err(RuntimeError::invalid(format!(
                    "mount {:?}: unknown propagation {}",
                    m.container_path, m.propagation
                )));
            }
        };
        let mut options = vec!["rbind".to_string(), propagation.to_string()];
        options.push(if m.readonly { "ro" } else { "rw" }.to_string());
        if m.recursive_read_only {
            if !m.readonly {
                return Err(RuntimeError::invalid(format!(
                    "mount {:?}: recursive read-only needs readonly",
                    m.container_path
                )));
            }
            options.push("rro".to_string());
        }
        out.push(bind(&dest, host, options));
    }
    out.sort_by_key(|m| m.destination().components().count());
    Ok(out)
}

/// All mounts in order: defaults not shadowed by a CRI mount, then the CRI mounts.
pub fn all_mounts(
    cri: &[api::Mount],
    files: &PodFiles,
    rootless: bool,
    privileged: bool,
    readonly_rootfs: bool,
) -> Result<Vec<Mount>> {
    let user = cri_mounts(cri)?;
    let shadowed = |m: &Mount| user.iter().any(|u| u.destination() == m.destination());
    let mut mounts: Vec<Mount> = kernel_mounts(rootless, privileged)
        .into_iter()
        .chain(pod_mounts(files, readonly_rootfs))
        .filter(|m| !shadowed(m))
        .collect();
    mounts.extend(user);
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> PodFiles {
        PodFiles {
            hostname: "/s/hostname".into(),
            hosts: "/s/hosts".into(),
            resolv_conf: "/s/resolv.conf".into(),
            shm: Some("/s/shm".into()),
        }
    }

    fn cri(container: &str, host: &str, ro: bool, prop: api::MountPropagation) -> api::Mount {
        api::Mount {
            container_path: container.into(),
            host_path: host.into(),
            readonly: ro,
            propagation: prop as i32,
            ..Default::default()
        }
    }

    fn dests(mounts: &[Mount]) -> Vec<String> {
        mounts
            .iter()
            .map(|m| m.destination().display().to_string())
            .collect()
    }

    #[test]
    fn defaults_then_cri_and_shadowing() {
        use api::MountPropagation as P;
        let user = vec![
            cri("/data/sub", "/h/sub", false, P::PropagationPrivate),
            cri("/data", "/h/data", true, P::PropagationHostToContainer),
            cri("/etc/hosts", "/k/hosts", false, P::PropagationPrivate),
        ];
        let mounts = all_mounts(&user, &files(), false, false, false).unwrap();
        let d = dests(&mounts);
        assert_eq!(
            d,
            [
                "/proc",
                "/dev",
                "/dev/pts",
                "/dev/mqueue",
                "/sys",
                "/sys/fs/cgroup",
                "/etc/hostname",
                "/etc/resolv.conf",
                "/dev/shm",
                "/data",
                "/data/sub",
                "/etc/hosts"
            ]
        );
        let data = &mounts[9];
        assert_eq!(
            data.options().clone().unwrap(),
            vec!["rbind", "rslave", "ro"]
        );
        let hosts = mounts
            .iter()
            .find(|m| m.destination() == Path::new("/etc/hosts"))
            .unwrap();
        assert_eq!(hosts.source().clone().unwrap(), PathBuf::from("/k/hosts"));
        assert_eq!(rootfs_propagation(&user), Some("slave"));
        assert_eq!(rootfs_propagation(&user[..1]), None);
        let shared = vec![cri("/x", "/y", false, P::PropagationBidirectional)];
        assert_eq!(rootfs_propagation(&shared), Some("shared"));
    }

    #[test]
    fn rootless_and_readonly_variants() {
        let mounts = all_mounts(&[], &files(), true, false, true).unwrap();
        let sys = mounts
            .iter()
            .find(|m| m.destination() == Path::new("/sys"))
            .unwrap();
        assert_eq!(sys.typ().as_deref(), Some("none"));
        assert!(
            sys.options()
                .as_ref()
                .unwrap()
                .contains(&"rbind".to_string())
        );
        let pts = mounts
            .iter()
            .find(|m| m.destination() == Path::new("/dev/pts"))
            .unwrap();
        assert!(
            !pts.options()
                .as_ref()
                .unwrap()
                .contains(&"gid=5".to_string())
        );
        assert!(!dests(&mounts).contains(&"/sys/fs/cgroup".to_string()));
        let hostname = mounts
            .iter()
            .find(|m| m.destination() == Path::new("/etc/hostname"))
            .unwrap();
        assert!(
            hostname
                .options()
                .as_ref()
                .unwrap()
                .contains(&"ro".to_string())
        );
        let mut no_shm = files();
        no_shm.shm = None;
        let mounts = all_mounts(&[], &no_shm, false, false, false).unwrap();
        let shm = mounts
            .iter()
            .find(|m| m.destination() == Path::new("/dev/shm"))
            .unwrap();
        assert_eq!(shm.source().clone().unwrap(), PathBuf::from("/dev/shm"));
    }

    #[test]
    fn bad_mounts_are_invalid_arguments() {
        use api::MountPropagation as P;
        let bad = [
            cri("relative", "/h", false, P::PropagationPrivate),
            cri("/a/../b", "/h", false, P::PropagationPrivate),
            cri("/a", "", false, P::PropagationPrivate),
            cri("/a", "rel", false, P::PropagationPrivate),
            api::Mount {
                propagation: 42,
                ..cri("/a", "/h", false, P::PropagationPrivate)
            },
            api::Mount {
                recursive_read_only: true,
                ..cri("/a", "/h", false, P::PropagationPrivate)
            },
        ];
        for m in bad {
            let err = cri_mounts(std::slice::from_ref(&m)).unwrap_err();
            assert!(
                matches!(err, RuntimeError::InvalidArgument(_)),
                "{m:?}: {err}"
            );
        }
    }
}
