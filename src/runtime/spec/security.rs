//! Capabilities, masked and read-only paths, rlimits: Docker/containerd/runc defaults adjusted by
//! the CRI security context.

use crate::cri::api;
use crate::runtime::error::{Result, RuntimeError};
use oci_spec::runtime::{
    Capabilities, Capability, LinuxCapabilities, LinuxDevice, LinuxDeviceBuilder,
    LinuxDeviceCgroup, LinuxDeviceCgroupBuilder, LinuxDeviceType, PosixRlimit, PosixRlimitBuilder,
    PosixRlimitType,
};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::str::FromStr;

/// The device cgroup of a container, as runc's: unprivileged ones start from "deny all"
/// (libcgroups then allows runc's default list: null, zero, full, tty, random, urandom,
/// console, ptmx, pts, tun, and mknod without access), privileged ones may use every device.
pub fn device_cgroup_rules(privileged: bool) -> Result<Vec<LinuxDeviceCgroup>> {
    let rule = LinuxDeviceCgroupBuilder::default()
        .allow(privileged)
        .access("rwm")
        .build()
        .map_err(|e| RuntimeError::Internal(format!("device cgroup rule: {e}")))?;
    Ok(vec![rule])
}

/// The host's device nodes, which a privileged container gets as containerd's
/// `WithHostDevices` (runc's `HostDevices`) hands them: every character and block device under
/// /dev, except under pts, shm, fd and mqueue, and the console (the container has its own).
pub fn host_devices() -> Vec<LinuxDevice> {
    let mut devices = Vec::new();
    collect_devices(Path::new("/dev"), &mut devices);
    devices
}

fn collect_devices(dir: &Path, devices: &mut Vec<LinuxDevice>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let (path, name) = (entry.path(), entry.file_name());
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let kind = meta.file_type();
        let typ = if kind.is_dir() {
            let skipped = ["pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"];
            if !skipped.iter().any(|s| name == *s) {
                collect_devices(&path, devices);
            }
            continue;
        } else if name == "console" {
            continue;
        } else if kind.is_char_device() {
            LinuxDeviceType::C
        } else if kind.is_block_device() {
            LinuxDeviceType::B
        } else {
            continue;
        };
        let rdev = meta.rdev();
        if let Ok(device) = LinuxDeviceBuilder::default()
            .path(path)
            .typ(typ)
            .major(i64::from(libc::major(rdev)))
            .minor(i64::from(libc::minor(rdev)))
            .file_mode(meta.mode() & 0o7777)
            .uid(meta.uid())
            .gid(meta.gid())
            .build()
        {
            devices.push(device);
        }
    }
}

/// Removes `cap` from every set.
pub fn drop_capability(caps: &mut LinuxCapabilities, cap: Capability) {
    let without = |set: &Option<Capabilities>| {
        set.clone().map(|mut set| {
            set.remove(&cap);
            set
        })
    };
    let (bounding, effective, inheritable, permitted, ambient) = (
        without(caps.bounding()),
        without(caps.effective()),
        without(caps.inheritable()),
        without(caps.permitted()),
        without(caps.ambient()),
    );
    caps.set_bounding(bounding)
        .set_effective(effective)
        .set_inheritable(inheritable)
        .set_permitted(permitted)
        .set_ambient(ambient);
}

/// Docker's (and containerd's) default capability set.
pub const DEFAULT_CAPABILITIES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// runc's default masked paths.
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/asound",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// runc's default read-only paths.
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// runp applies no AppArmor profile. Like containerd on a host without AppArmor, a profile
/// that would confine the container (`Localhost`, or any other named profile) is refused, so it
/// is never silently not applied; unconfined and the runtime's default (here: none) are accepted.
pub fn check_apparmor(security: Option<&api::LinuxContainerSecurityContext>) -> Result<()> {
    let Some(sc) = security else {
        return Ok(());
    };
    let refused = |what: &str| {
        Err(RuntimeError::invalid(format!(
            "apparmor is not supported: cannot apply apparmor profile {what}"
        )))
    };
    if let Some(profile) = &sc.apparmor {
        return match api::security_profile::ProfileType::try_from(profile.profile_type) {
            Ok(api::security_profile::ProfileType::RuntimeDefault)
            | Ok(api::security_profile::ProfileType::Unconfined) => Ok(()),
            _ => refused(&format!("{:?}", profile.localhost_ref)),
        };
    }
    #[allow(deprecated)]
    match sc.apparmor_profile.as_str() {
        "" | "unconfined" | "runtime/default" => Ok(()),
        other => refused(&format!("{other:?}")),
    }
}

/// containerd's default open-files limit.
pub const DEFAULT_NOFILE: u64 = 1_048_576;

fn parse_capability(name: &str) -> Result<Capability> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    Capability::from_str(bare)
        .map_err(|_| RuntimeError::invalid(format!("unknown capability {name:?}")))
}

/// What `privileged` and `add: [ALL]` grant: every capability the runtime itself may hand on
/// (its bounding set), as containerd does. Root of a container may lack some (here
/// CAP_SYS_RESOURCE), and asking for one makes libcontainer's capset fail the start.
pub fn all_capabilities() -> Capabilities {
    let bounding = caps::read(None, caps::CapSet::Bounding).unwrap_or_else(|_| caps::all());
    bounding
        .into_iter()
        .filter_map(|c| parse_capability(&c.to_string()).ok())
        .collect()
}

fn is_all(name: &str) -> bool {
    name.eq_ignore_ascii_case("ALL") || name.eq_ignore_ascii_case("CAP_ALL")
}

/// The capability sets: the default set, `ALL` handling, explicit adds then explicit drops.
/// Inheritable stays empty (as containerd does since CVE-2022-24769); ambient are the
/// requested ambient caps.
pub fn capabilities(
    privileged: bool,
    requested: Option<&api::Capability>,
) -> Result<LinuxCapabilities> {
    let empty = api::Capability::default();
    let requested = requested.unwrap_or(&empty);
    let mut set: Capabilities = if privileged {
        all_capabilities()
    } else {
        DEFAULT_CAPABILITIES
            .iter()
            .map(|c| parse_capability(c))
            .collect::<Result<_>>()?
    };
    if !privileged {
        if requested.drop_capabilities.iter().any(|c| is_all(c)) {
            set.clear();
        }
        if requested.add_capabilities.iter().any(|c| is_all(c)) {
            set = all_capabilities();
        }
        for add in requested.add_capabilities.iter().filter(|c| !is_all(c)) {
            set.insert(parse_capability(add)?);
        }
        for drop in requested.drop_capabilities.iter().filter(|c| !is_all(c)) {
            set.remove(&parse_capability(drop)?);
        }
    }
    let ambient: Capabilities = requested
        .add_ambient_capabilities
        .iter()
        .map(|c| parse_capability(c))
        .collect::<Result<_>>()?;
    if let Some(missing) = ambient.iter().find(|c| !set.contains(c)) {
        return Err(RuntimeError::invalid(format!(
            "ambient capability {missing} is not in the container's capability set"
        )));
    }
    let mut caps = LinuxCapabilities::default();
    caps.set_bounding(Some(set.clone()))
        .set_effective(Some(set.clone()))
        .set_permitted(Some(set))
        .set_inheritable(Some(Capabilities::new()))
        .set_ambient(Some(ambient));
    Ok(caps)
}

/// Masked and read-only paths: none for privileged containers, the config's when it gives any
/// (kubelet passes the defaults explicitly for the Default procMount), else runc's.
pub fn masked_and_readonly_paths(
    privileged: bool,
    security: Option<&api::LinuxContainerSecurityContext>,
) -> (Vec<String>, Vec<String>) {
    if privileged {
        return (Vec::new(), Vec::new());
    }
    let pick = |given: Option<&Vec<String>>, default: &[&str]| match given {
        Some(list) if !list.is_empty() => list.clone(),
        _ => default.iter().map(|s| s.to_string()).collect(),
    };
    (
        pick(security.map(|s| &s.masked_paths), DEFAULT_MASKED_PATHS),
        pick(security.map(|s| &s.readonly_paths), DEFAULT_READONLY_PATHS),
    )
}

/// /sys/fs/cgroup and each cgroup mount in it (parent first: a read-only remount covers only
/// the mount it names).
pub fn cgroup_readonly_paths(mounts: &[String]) -> Vec<String> {
    std::iter::once("/sys/fs/cgroup".to_string())
        .chain(
            mounts
                .iter()
                .filter(|m| !m.is_empty() && !m.contains('/') && *m != "." && *m != "..")
                .map(|m| format!("/sys/fs/cgroup/{m}")),
        )
        .collect()
}

/// RLIMIT_NOFILE as containerd sets it, capped at `max` (the runtime's own hard limit: raising
/// a hard limit needs CAP_SYS_RESOURCE, which root may lack).
pub fn default_rlimits(max: u64) -> Vec<PosixRlimit> {
    let limit = DEFAULT_NOFILE.min(max);
    let nofile = PosixRlimitBuilder::default()
        .typ(PosixRlimitType::RlimitNofile)
        .hard(limit)
        .soft(limit)
        .build();
    nofile.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(set: &Option<Capabilities>) -> Vec<String> {
        let mut v: Vec<String> = set
            .as_ref()
            .map(|s| s.iter().map(|c| c.to_string()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    fn req(add: &[&str], drop: &[&str]) -> api::Capability {
        api::Capability {
            add_capabilities: add.iter().map(|s| s.to_string()).collect(),
            drop_capabilities: drop.iter().map(|s| s.to_string()).collect(),
            add_ambient_capabilities: vec![],
        }
    }

    #[test]
    fn default_set_is_dockers() {
        let caps = capabilities(false, None).unwrap();
        let got = names(caps.bounding());
        assert_eq!(got.len(), 14);
        assert!(
            got.contains(&"CHOWN".to_string()) || got.contains(&"CAP_CHOWN".to_string()),
            "{got:?}"
        );
        assert_eq!(caps.bounding(), caps.effective());
        assert_eq!(caps.bounding(), caps.permitted());
        assert!(caps.inheritable().as_ref().unwrap().is_empty());
        assert!(!got.iter().any(|c| c.contains("SYS_ADMIN")));
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn add_drop_table() {
        let cases: &[(&[&str], &[&str], usize, &[&str], &[&str])] = &[
            // add, drop, expected count, must contain, must not contain
            (&["SYS_ADMIN"], &[], 15, &["SYS_ADMIN"], &[]),
            (
                &["CAP_NET_ADMIN"],
                &["CAP_CHOWN", "kill"],
                13,
                &["NET_ADMIN"],
                &["CHOWN", "KILL"],
            ),
            (&["NET_ADMIN"], &["ALL"], 1, &["NET_ADMIN"], &["CHOWN"]),
            (&[], &["ALL"], 0, &[], &["CHOWN"]),
            (
                &["ALL"],
                &["SYS_ADMIN"],
                all_capabilities().len() - 1,
                &["SYS_PTRACE"],
                &["SYS_ADMIN"],
            ),
        ];
        for (add, drop, count, has, lacks) in cases {
            let caps = capabilities(false, Some(&req(add, drop))).unwrap();
            let got = caps.bounding().clone().unwrap();
            assert_eq!(got.len(), *count, "{add:?} {drop:?}");
            for c in *has {
                assert!(got.contains(&parse_capability(c).unwrap()), "{c}");
            }
            for c in *lacks {
                assert!(!got.contains(&parse_capability(c).unwrap()), "{c}");
            }
        }
    }

    #[test]
    fn privileged_gets_everything_and_bad_names_fail() {
        let caps = capabilities(true, Some(&req(&[], &["ALL"]))).unwrap();
        assert_eq!(
            caps.bounding().as_ref().unwrap().len(),
            all_capabilities().len()
        );
        assert!(all_capabilities().len() >= 40);
        let err = capabilities(false, Some(&req(&["CAP_FLY"], &[]))).unwrap_err();
        assert!(matches!(err, RuntimeError::InvalidArgument(_)), "{err}");
        let mut r = req(&[], &[]);
        r.add_ambient_capabilities = vec!["SYS_ADMIN".into()];
        assert!(
            capabilities(false, Some(&r)).is_err(),
            "ambient outside the set"
        );
        r.add_capabilities = vec!["SYS_ADMIN".into()];
        let caps = capabilities(false, Some(&r)).unwrap();
        assert_eq!(caps.ambient().as_ref().unwrap().len(), 1);
    }

    #[test]
    fn paths_follow_privilege_and_config() {
        let (masked, ro) = masked_and_readonly_paths(false, None);
        assert!(masked.contains(&"/proc/kcore".to_string()));
        assert!(ro.contains(&"/proc/sys".to_string()));
        let (masked, ro) = masked_and_readonly_paths(true, None);
        assert!(masked.is_empty() && ro.is_empty());
        let sc = api::LinuxContainerSecurityContext {
            masked_paths: vec!["/proc/x".into()],
            ..Default::default()
        };
        let (masked, ro) = masked_and_readonly_paths(false, Some(&sc));
        assert_eq!(masked, vec!["/proc/x".to_string()]);
        assert!(ro.contains(&"/proc/sys".to_string()));
    }

    #[test]
    fn nofile_default() {
        let limits = default_rlimits(u64::MAX);
        assert_eq!(limits[0].typ(), PosixRlimitType::RlimitNofile);
        assert_eq!(
            (limits[0].soft(), limits[0].hard()),
            (DEFAULT_NOFILE, DEFAULT_NOFILE)
        );
        let limits = default_rlimits(20_000);
        assert_eq!((limits[0].soft(), limits[0].hard()), (20_000, 20_000));
    }
}
