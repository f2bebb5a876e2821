//! Seccomp: which profile a container gets (CRI `seccomp`, else the deprecated
//! `seccomp_profile_path`, as containerd reads them) and the OCI filter for it. Unset is
//! unconfined (the kubelet asks for RuntimeDefault when the pod or `seccompDefault` wants it);
//! privileged containers are never filtered.
//!
//! RuntimeDefault follows Docker's default profile in what it refuses (EPERM), including its
//! capability-gated exceptions, but is written as a deny list over an allowing default: the
//! syscalls an unprivileged container has no business making (namespaces, mounts, modules, kexec,
//! keyrings, ptrace of others, clock setting, bpf, perf, io_uring...). `clone3` answers ENOSYS so
//! libc falls back to `clone`, whose namespace flags can then be checked.

use crate::cri::api;
use crate::runtime::error::{Result, RuntimeError};
use oci_spec::runtime::{
    Arch, Capability, LinuxCapabilities, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder,
    LinuxSeccompBuilder, LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder,
};
use std::path::PathBuf;

/// The profile a container asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeccompChoice {
    Unconfined,
    RuntimeDefault,
    /// An absolute path on the node to an OCI/Docker-format JSON profile.
    Localhost(PathBuf),
}

/// Reads the CRI security context: `seccomp` wins over `seccomp_profile_path`.
pub fn seccomp_choice(
    security: Option<&api::LinuxContainerSecurityContext>,
) -> Result<SeccompChoice> {
    let Some(sc) = security else {
        return Ok(SeccompChoice::Unconfined);
    };
    if sc.privileged {
        return Ok(SeccompChoice::Unconfined);
    }
    if let Some(profile) = &sc.seccomp {
        return match api::security_profile::ProfileType::try_from(profile.profile_type) {
            Ok(api::security_profile::ProfileType::RuntimeDefault) => {
                Ok(SeccompChoice::RuntimeDefault)
            }
            Ok(api::security_profile::ProfileType::Unconfined) => Ok(SeccompChoice::Unconfined),
            Ok(api::security_profile::ProfileType::Localhost) => localhost(&profile.localhost_ref),
            Err(_) => Err(RuntimeError::invalid(format!(
                "unknown seccomp profile type {}",
                profile.profile_type
            ))),
        };
    }
    #[allow(deprecated)]
    let path = sc.seccomp_profile_path.as_str();
    match path {
        "" | "unconfined" => Ok(SeccompChoice::Unconfined),
        "runtime/default" | "docker/default" => Ok(SeccompChoice::RuntimeDefault),
        _ => match path.strip_prefix("localhost/") {
            Some(file) => localhost(file),
            None => Err(RuntimeError::invalid(format!(
                "undefined seccomp profile {path:?} (runtime/default, unconfined or localhost/<path>)"
            ))),
        },
    }
}

fn localhost(path: &str) -> Result<SeccompChoice> {
    let path = PathBuf::from(path);
    if !path.is_absolute() {
        return Err(RuntimeError::invalid(format!(
            "seccomp localhost profile {path:?} must be an absolute path"
        )));
    }
    Ok(SeccompChoice::Localhost(path))
}

/// A localhost profile's JSON (OCI `linux.seccomp`, or Docker's format: its extra fields are
/// ignored).
pub fn parse_profile(path: &std::path::Path, json: &str) -> Result<LinuxSeccomp> {
    serde_json::from_str(json)
        .map_err(|e| RuntimeError::invalid(format!("seccomp profile {}: {e}", path.display())))
}

const EPERM: u32 = libc::EPERM as u32;
const ENOSYS: u32 = libc::ENOSYS as u32;

/// Refused unless the container holds the capability (Docker's `includes.caps` rules).
const CAPABILITY_GATED: &[(Capability, &[&str])] = &[
    (
        Capability::SysAdmin,
        &[
            "bpf",
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "name_to_handle_at",
            "open_tree",
            "perf_event_open",
            "quotactl",
            "quotactl_fd",
            "setdomainname",
            "sethostname",
            "setns",
            "syslog",
            "umount",
            "umount2",
            "unshare",
        ],
    ),
    (Capability::SysBoot, &["reboot"]),
    (
        Capability::SysModule,
        &["delete_module", "init_module", "finit_module"],
    ),
    (Capability::SysPacct, &["acct"]),
    (
        Capability::SysPtrace,
        &[
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "process_vm_readv",
            "process_vm_writev",
            "ptrace",
        ],
    ),
    (Capability::SysRawio, &["iopl", "ioperm"]),
    (
        Capability::SysTime,
        &["settimeofday", "stime", "clock_settime", "clock_adjtime"],
    ),
    (Capability::SysTtyConfig, &["vhangup"]),
    (
        Capability::SysNice,
        &[
            "get_mempolicy",
            "mbind",
            "set_mempolicy",
            "set_mempolicy_home_node",
        ],
    ),
    (Capability::Syslog, &["syslog"]),
];

/// Refused whatever the capabilities.
const ALWAYS_REFUSED: &[&str] = &[
    "add_key",
    "create_module",
    "get_kernel_syms",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "move_pages",
    "nfsservctl",
    "open_by_handle_at",
    "query_module",
    "request_key",
    "swapoff",
    "swapon",
    "_sysctl",
    "sysfs",
    "uselib",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
];

/// The clone flags that make namespaces (CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWTIME).
const CLONE_NAMESPACE_FLAGS: u64 = 0x7E02_0080;

/// The RuntimeDefault filter for a container holding `capabilities` (its bounding set).
pub fn runtime_default(capabilities: Option<&LinuxCapabilities>) -> Result<LinuxSeccomp> {
    let has = |cap: &Capability| {
        capabilities
            .and_then(|c| c.bounding().as_ref())
            .is_some_and(|set| set.contains(cap))
    };
    let mut refused: Vec<String> = ALWAYS_REFUSED.iter().map(|s| s.to_string()).collect();
    for (cap, names) in CAPABILITY_GATED {
        if !has(cap) {
            refused.extend(names.iter().map(|s| s.to_string()));
        }
    }
    refused.sort();
    refused.dedup();
    let mut syscalls = vec![rule(refused, EPERM, None)?];
    syscalls.push(rule(vec!["clone3".into()], ENOSYS, None)?);
    if !has(&Capability::SysAdmin) {
        // Any namespace flag refuses the clone (each flag a rule: libseccomp compares an
        // argument once per rule).
        for bit in (0..64).filter(|b| CLONE_NAMESPACE_FLAGS & (1 << b) != 0) {
            syscalls.push(rule(vec!["clone".into()], EPERM, Some(1u64 << bit))?);
        }
    }
    LinuxSeccompBuilder::default()
        .default_action(LinuxSeccompAction::ScmpActAllow)
        .architectures(native_architectures())
        .syscalls(syscalls)
        .build()
        .map_err(|e| RuntimeError::Internal(format!("seccomp profile: {e}")))
}

fn rule(names: Vec<String>, errno: u32, clone_flag: Option<u64>) -> Result<LinuxSyscall> {
    let mut builder = LinuxSyscallBuilder::default()
        .names(names)
        .action(LinuxSeccompAction::ScmpActErrno)
        .errno_ret(errno);
    if let Some(flag) = clone_flag {
        let arg = LinuxSeccompArgBuilder::default()
            .index(0usize)
            .value(flag)
            .value_two(flag)
            .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
            .build()
            .map_err(|e| RuntimeError::Internal(format!("seccomp rule: {e}")))?;
        builder = builder.args(vec![arg]);
    }
    builder
        .build()
        .map_err(|e| RuntimeError::Internal(format!("seccomp rule: {e}")))
}

/// Every ABI this host's processes can call in: a deny list over one ABI would leave the
/// others (32-bit `int 0x80` on x86_64) open.
fn native_architectures() -> Vec<Arch> {
    if cfg!(target_arch = "x86_64") {
        vec![Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
    } else if cfg!(target_arch = "aarch64") {
        vec![Arch::ScmpArchAarch64, Arch::ScmpArchArm]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::LinuxCapabilitiesBuilder;

    fn security(
        edit: impl FnOnce(&mut api::LinuxContainerSecurityContext),
    ) -> api::LinuxContainerSecurityContext {
        let mut sc = api::LinuxContainerSecurityContext::default();
        edit(&mut sc);
        sc
    }

    fn profile(
        typ: api::security_profile::ProfileType,
        path: &str,
    ) -> Option<api::SecurityProfile> {
        Some(api::SecurityProfile {
            profile_type: typ as i32,
            localhost_ref: path.into(),
        })
    }

    #[test]
    #[allow(deprecated)]
    fn choices_follow_containerd() {
        use api::security_profile::ProfileType::*;
        let cases: Vec<(api::LinuxContainerSecurityContext, Option<SeccompChoice>)> = vec![
            (security(|_| {}), Some(SeccompChoice::Unconfined)),
            (
                security(|s| s.seccomp = profile(RuntimeDefault, "")),
                Some(SeccompChoice::RuntimeDefault),
            ),
            (
                security(|s| s.seccomp = profile(Unconfined, "")),
                Some(SeccompChoice::Unconfined),
            ),
            (
                security(|s| s.seccomp = profile(Localhost, "/etc/p.json")),
                Some(SeccompChoice::Localhost("/etc/p.json".into())),
            ),
            (security(|s| s.seccomp = profile(Localhost, "p.json")), None),
            (security(|s| s.seccomp = profile(Localhost, "")), None),
            // `seccomp` wins over the deprecated path.
            (
                security(|s| {
                    s.seccomp = profile(Unconfined, "");
                    s.seccomp_profile_path = "runtime/default".into();
                }),
                Some(SeccompChoice::Unconfined),
            ),
            (
                security(|s| s.seccomp_profile_path = "docker/default".into()),
                Some(SeccompChoice::RuntimeDefault),
            ),
            (
                security(|s| s.seccomp_profile_path = "unconfined".into()),
                Some(SeccompChoice::Unconfined),
            ),
            (
                security(|s| s.seccomp_profile_path = "localhost//var/p.json".into()),
                Some(SeccompChoice::Localhost("/var/p.json".into())),
            ),
            // A path without localhost/ is not a profile.
            (
                security(|s| s.seccomp_profile_path = "/var/p.json".into()),
                None,
            ),
            // Privileged containers are never filtered.
            (
                security(|s| {
                    s.privileged = true;
                    s.seccomp = profile(Localhost, "/etc/p.json");
                }),
                Some(SeccompChoice::Unconfined),
            ),
        ];
        for (sc, want) in cases {
            assert_eq!(seccomp_choice(Some(&sc)).ok(), want, "{sc:?}");
        }
        assert_eq!(seccomp_choice(None).unwrap(), SeccompChoice::Unconfined);
    }

    fn refused(profile: &LinuxSeccomp) -> Vec<String> {
        profile.syscalls().as_ref().unwrap()[0].names().clone()
    }

    #[test]
    fn runtime_default_refuses_by_capability() {
        let plain = runtime_default(None).unwrap();
        assert_eq!(plain.default_action(), LinuxSeccompAction::ScmpActAllow);
        let names = refused(&plain);
        for name in [
            "sethostname",
            "mount",
            "unshare",
            "setns",
            "ptrace",
            "keyctl",
            "kexec_load",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} refused");
        }
        // clone3 is ENOSYS; clone with each namespace flag is refused.
        let rules = plain.syscalls().as_ref().unwrap();
        assert_eq!(rules[1].names(), &["clone3".to_string()]);
        assert_eq!(rules[1].errno_ret(), Some(ENOSYS));
        let clone_rules = rules
            .iter()
            .filter(|r| r.names() == &["clone".to_string()])
            .count();
        assert_eq!(clone_rules, CLONE_NAMESPACE_FLAGS.count_ones() as usize);

        let caps: oci_spec::runtime::Capabilities = [Capability::SysAdmin, Capability::SysPtrace]
            .into_iter()
            .collect();
        let admin = LinuxCapabilitiesBuilder::default()
            .bounding(caps)
            .build()
            .unwrap();
        let admin = runtime_default(Some(&admin)).unwrap();
        let names = refused(&admin);
        for name in ["sethostname", "mount", "setns", "ptrace"] {
            assert!(
                !names.iter().any(|n| n == name),
                "{name} allowed with its capability"
            );
        }
        assert!(
            names.iter().any(|n| n == "kexec_load"),
            "kexec_load always refused"
        );
        assert!(
            !admin
                .syscalls()
                .as_ref()
                .unwrap()
                .iter()
                .any(|r| r.names() == &["clone".to_string()]),
            "namespaces allowed with SYS_ADMIN"
        );
    }

    #[test]
    fn localhost_profiles_parse_oci_and_docker_formats() {
        let path = std::path::Path::new("/p.json");
        let docker = r#"{"defaultAction":"SCMP_ACT_ALLOW","archMap":[],"syscalls":[{"names":["chmod"],"action":"SCMP_ACT_ERRNO","includes":{}}]}"#;
        let parsed = parse_profile(path, docker).unwrap();
        assert_eq!(
            parsed.syscalls().as_ref().unwrap()[0].names(),
            &["chmod".to_string()]
        );
        let err = parse_profile(path, r#"{"defaultAction":"SCMP_ACT_NOPE"}"#).unwrap_err();
        assert!(err.to_string().contains("/p.json"), "{err}");
    }
}
