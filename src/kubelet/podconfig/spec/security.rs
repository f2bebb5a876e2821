//! Pod and container security contexts → CRI, as the kubelet's `securitycontext` conversion:
//! the container's settings override the pod's; groups and namespaces come from the pod.

use crate::cri::api;
use crate::kubelet::config::AgentConfig;
use crate::kubelet::podconfig::{ImageUser, PodConfigError};
use k8s_openapi::api::core::v1::{
    Container, Pod, PodSecurityContext, SeccompProfile, SecurityContext,
};

/// What runtimes mask in /proc and /sys by default (`procMount: Default`).
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
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
/// What runtimes make read-only in /proc by default.
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

fn pod_sc(pod: &Pod) -> Option<&PodSecurityContext> {
    pod.spec.as_ref()?.security_context.as_ref()
}

fn flag(value: Option<bool>) -> bool {
    value.unwrap_or(false)
}

/// Namespaces of the pod: node network/IPC/PID when asked, a pod-wide PID namespace with
/// shareProcessNamespace, else one per container.
pub fn namespace_options(pod: &Pod) -> api::NamespaceOption {
    use api::NamespaceMode as Mode;
    let spec = pod.spec.as_ref();
    let host = |f: fn(&k8s_openapi::api::core::v1::PodSpec) -> Option<bool>| {
        spec.and_then(f).unwrap_or(false)
    };
    let pid = if host(|s| s.host_pid) {
        Mode::Node
    } else if host(|s| s.share_process_namespace) {
        Mode::Pod
    } else {
        Mode::Container
    };
    api::NamespaceOption {
        network: if host(|s| s.host_network) {
            Mode::Node
        } else {
            Mode::Pod
        } as i32,
        pid: pid as i32,
        ipc: if host(|s| s.host_ipc) {
            Mode::Node
        } else {
            Mode::Pod
        } as i32,
        ..Default::default()
    }
}

/// fsGroup first, then supplementalGroups (the kubelet's order).
fn supplemental_groups(pod: &Pod) -> Vec<i64> {
    let sc = pod_sc(pod);
    let fs_group = sc.and_then(|s| s.fs_group);
    fs_group
        .into_iter()
        .chain(
            sc.and_then(|s| s.supplemental_groups.clone())
                .into_iter()
                .flatten(),
        )
        .collect()
}

fn supplemental_groups_policy(pod: &Pod) -> i32 {
    match pod_sc(pod).and_then(|s| s.supplemental_groups_policy.as_deref()) {
        Some("Strict") => api::SupplementalGroupsPolicy::Strict as i32,
        _ => api::SupplementalGroupsPolicy::Merge as i32,
    }
}

fn selinux(
    options: Option<&k8s_openapi::api::core::v1::SELinuxOptions>,
) -> Option<api::SeLinuxOption> {
    options.map(|o| api::SeLinuxOption {
        user: o.user.clone().unwrap_or_default(),
        role: o.role.clone().unwrap_or_default(),
        r#type: o.type_.clone().unwrap_or_default(),
        level: o.level.clone().unwrap_or_default(),
    })
}

/// A seccomp profile; unset is Unconfined (the kubelet without SeccompDefault).
fn seccomp(
    profile: Option<&SeccompProfile>,
    config: &AgentConfig,
) -> Result<api::SecurityProfile, PodConfigError> {
    use api::security_profile::ProfileType;
    let Some(profile) = profile else {
        return Ok(api::SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        });
    };
    let (profile_type, localhost_ref) = match profile.type_.as_str() {
        "RuntimeDefault" => (ProfileType::RuntimeDefault, String::new()),
        "Unconfined" => (ProfileType::Unconfined, String::new()),
        "Localhost" => {
            let name = profile
                .localhost_profile
                .as_deref()
                .filter(|p| !p.is_empty())
                .ok_or_else(|| {
                    PodConfigError::Invalid(
                        "seccompProfile type Localhost needs localhostProfile".into(),
                    )
                })?;
            if name.starts_with('/') || name.split('/').any(|p| p == "..") {
                return Err(PodConfigError::Invalid(format!(
                    "seccompProfile localhostProfile {name:?} must be a relative path without '..'"
                )));
            }
            let path = config.root_dir.join("seccomp").join(name);
            (ProfileType::Localhost, path.to_string_lossy().into_owned())
        }
        other => {
            return Err(PodConfigError::Invalid(format!(
                "unknown seccompProfile type {other:?}"
            )));
        }
    };
    Ok(api::SecurityProfile {
        profile_type: profile_type as i32,
        localhost_ref,
    })
}

fn any_privileged(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let containers = spec.into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    });
    containers
        .into_iter()
        .any(|c| flag(c.security_context.as_ref().and_then(|s| s.privileged)))
}

/// The sandbox's security context.
pub fn sandbox_security_context(
    pod: &Pod,
    config: &AgentConfig,
) -> Result<api::LinuxSandboxSecurityContext, PodConfigError> {
    let sc = pod_sc(pod);
    Ok(api::LinuxSandboxSecurityContext {
        namespace_options: Some(namespace_options(pod)),
        selinux_options: selinux(sc.and_then(|s| s.se_linux_options.as_ref())),
        run_as_user: sc
            .and_then(|s| s.run_as_user)
            .map(|value| api::Int64Value { value }),
        run_as_group: sc
            .and_then(|s| s.run_as_group)
            .map(|value| api::Int64Value { value }),
        supplemental_groups: supplemental_groups(pod),
        supplemental_groups_policy: supplemental_groups_policy(pod),
        privileged: any_privileged(pod),
        seccomp: Some(seccomp(
            sc.and_then(|s| s.seccomp_profile.as_ref()),
            config,
        )?),
        ..Default::default()
    })
}

/// The container's settings with the pod's as defaults (`DetermineEffectiveSecurityContext`).
pub fn effective_security_context(pod: &Pod, container: &Container) -> SecurityContext {
    let mut effective = container.security_context.clone().unwrap_or_default();
    if let Some(pod_sc) = pod_sc(pod) {
        effective.run_as_user = effective.run_as_user.or(pod_sc.run_as_user);
        effective.run_as_group = effective.run_as_group.or(pod_sc.run_as_group);
        effective.run_as_non_root = effective.run_as_non_root.or(pod_sc.run_as_non_root);
        if effective.se_linux_options.is_none() {
            effective.se_linux_options = pod_sc.se_linux_options.clone();
        }
        if effective.seccomp_profile.is_none() {
            effective.seccomp_profile = pod_sc.seccomp_profile.clone();
        }
    }
    effective
}

/// The kubelet's `verifyRunAsNonRoot`, given what the image runs as (`image_uid`, or a
/// non-numeric `image_user`). `container_config` checks the explicit runAsUser; call this with
/// the image's user before starting the container.
pub fn verify_run_as_non_root(
    pod: &Pod,
    container: &Container,
    image_uid: Option<i64>,
    image_user: &str,
) -> Result<(), PodConfigError> {
    let effective = effective_security_context(pod, container);
    if !flag(effective.run_as_non_root) {
        return Ok(());
    }
    let name = &container.name;
    match (effective.run_as_user, image_uid) {
        (Some(0), _) => Err(PodConfigError::Invalid(format!(
            "container {name}: runAsUser breaks non-root policy"
        ))),
        (Some(_), _) => Ok(()),
        (None, Some(0)) => Err(PodConfigError::Invalid(format!(
            "container {name} has runAsNonRoot and image will run as root"
        ))),
        (None, None) if !image_user.is_empty() => Err(PodConfigError::Invalid(format!(
            "container {name} has runAsNonRoot and image has non-numeric user ({image_user}), cannot verify user is non-root"
        ))),
        _ => Ok(()),
    }
}

/// The container's CRI security context. Without a runAsUser it names the image's user
/// (kubelet's determineEffectiveSecurityContext), so a runAsGroup always comes with a user.
pub fn container_security_context(
    pod: &Pod,
    container: &Container,
    config: &AgentConfig,
    image_user: &ImageUser,
) -> Result<api::LinuxContainerSecurityContext, PodConfigError> {
    verify_run_as_non_root(pod, container, image_user.uid, &image_user.username)?;
    let sc = effective_security_context(pod, container);
    let (run_as_user, run_as_username) = match sc.run_as_user {
        Some(uid) => (Some(uid), String::new()),
        None => (image_user.uid, image_user.username.clone()),
    };
    let capabilities = sc.capabilities.as_ref().map(|caps| api::Capability {
        add_capabilities: caps.add.clone().unwrap_or_default(),
        drop_capabilities: caps.drop.clone().unwrap_or_default(),
        add_ambient_capabilities: Vec::new(),
    });
    let unmasked = sc.proc_mount.as_deref() == Some("Unmasked");
    let paths = |defaults: &[&str]| -> Vec<String> {
        if unmasked {
            Vec::new()
        } else {
            defaults.iter().map(|p| p.to_string()).collect()
        }
    };
    Ok(api::LinuxContainerSecurityContext {
        capabilities,
        privileged: flag(sc.privileged),
        namespace_options: Some(namespace_options(pod)),
        selinux_options: selinux(sc.se_linux_options.as_ref()),
        run_as_user: run_as_user.map(|value| api::Int64Value { value }),
        run_as_username,
        run_as_group: sc.run_as_group.map(|value| api::Int64Value { value }),
        readonly_rootfs: flag(sc.read_only_root_filesystem),
        supplemental_groups: supplemental_groups(pod),
        supplemental_groups_policy: supplemental_groups_policy(pod),
        no_new_privs: sc.allow_privilege_escalation.is_some_and(|allow| !allow),
        masked_paths: paths(DEFAULT_MASKED_PATHS),
        readonly_paths: paths(DEFAULT_READONLY_PATHS),
        seccomp: Some(seccomp(sc.seccomp_profile.as_ref(), config)?),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::NamespaceMode as Mode;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        if spec.get("containers").is_none() {
            spec["containers"] = json!([{"name": "c", "image": "x"}]);
        }
        serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}),
        )
        .unwrap()
    }

    fn config() -> AgentConfig {
        AgentConfig::with_root("/var/lib/runp")
    }

    #[test]
    fn namespaces() {
        let cases = [
            (json!({}), (Mode::Pod, Mode::Container, Mode::Pod)),
            (
                json!({"hostNetwork": true}),
                (Mode::Node, Mode::Container, Mode::Pod),
            ),
            (
                json!({"hostPID": true, "shareProcessNamespace": true}),
                (Mode::Pod, Mode::Node, Mode::Pod),
            ),
            (
                json!({"shareProcessNamespace": true}),
                (Mode::Pod, Mode::Pod, Mode::Pod),
            ),
            (
                json!({"hostIPC": true}),
                (Mode::Pod, Mode::Container, Mode::Node),
            ),
        ];
        for (spec, (net, pid, ipc)) in cases {
            let ns = namespace_options(&pod(spec.clone()));
            assert_eq!(
                (ns.network, ns.pid, ns.ipc),
                (net as i32, pid as i32, ipc as i32),
                "{spec}"
            );
        }
    }

    #[test]
    fn container_overrides_pod() {
        let p = pod(json!({
            "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000, 5000],
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "x", "securityContext": {
                "runAsUser": 1001, "privileged": false, "readOnlyRootFilesystem": true,
                "allowPrivilegeEscalation": false,
                "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}},
                {"name": "d", "image": "x", "securityContext": {"procMount": "Unmasked", "privileged": true,
                 "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/audit.json"}}}]
        }));
        let c = &p.spec.as_ref().unwrap().containers;
        let sc = container_security_context(&p, &c[0], &config(), &root()).unwrap();
        assert_eq!(sc.run_as_user.map(|v| v.value), Some(1001));
        assert_eq!(sc.run_as_group.map(|v| v.value), Some(3000));
        assert_eq!(sc.supplemental_groups, vec![2000, 4000, 5000]);
        assert!(sc.readonly_rootfs && sc.no_new_privs && !sc.privileged);
        let caps = sc.capabilities.unwrap();
        assert_eq!(
            (caps.add_capabilities, caps.drop_capabilities),
            (vec!["NET_ADMIN".to_string()], vec!["ALL".to_string()])
        );
        assert_eq!(sc.masked_paths.len(), DEFAULT_MASKED_PATHS.len());
        assert_eq!(sc.readonly_paths, DEFAULT_READONLY_PATHS);
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            api::security_profile::ProfileType::RuntimeDefault as i32
        );
        let sd = container_security_context(&p, &c[1], &config(), &root()).unwrap();
        // The pod's runAsUser wins over the image's.
        assert_eq!(sd.run_as_user.map(|v| v.value), Some(1000));
        assert!(sd.privileged && !sd.no_new_privs);
        assert!(sd.masked_paths.is_empty() && sd.readonly_paths.is_empty());
        let seccomp = sd.seccomp.unwrap();
        assert_eq!(
            seccomp.localhost_ref,
            "/var/lib/runp/seccomp/profiles/audit.json"
        );
        let sandbox = sandbox_security_context(&p, &config()).unwrap();
        assert!(
            sandbox.privileged,
            "a privileged container makes a privileged sandbox"
        );
        assert_eq!(sandbox.run_as_user.map(|v| v.value), Some(1000));
        assert_eq!(sandbox.supplemental_groups, vec![2000, 4000, 5000]);
    }

    fn root() -> ImageUser {
        ImageUser::of(None)
    }

    #[test]
    fn defaults_without_security_context() {
        let p = pod(json!({}));
        let sc = container_security_context(
            &p,
            &p.spec.as_ref().unwrap().containers[0],
            &config(),
            &root(),
        )
        .unwrap();
        // kubelet names the image's user (root when the image names none).
        assert_eq!(sc.run_as_user.map(|v| v.value), Some(0));
        assert!(!sc.no_new_privs && !sc.privileged);
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            api::security_profile::ProfileType::Unconfined as i32
        );
        assert!(!sandbox_security_context(&p, &config()).unwrap().privileged);
    }

    #[test]
    fn run_as_non_root() {
        let p = pod(json!({"securityContext": {"runAsNonRoot": true},
            "containers": [{"name": "c", "image": "x"},
                           {"name": "root", "image": "x", "securityContext": {"runAsUser": 0}},
                           {"name": "ok", "image": "x", "securityContext": {"runAsUser": 10}}]}));
        let c = &p.spec.as_ref().unwrap().containers;
        assert!(container_security_context(&p, &c[1], &config(), &root()).is_err());
        assert!(container_security_context(&p, &c[2], &config(), &root()).is_ok());
        // The image's user is checked too: root, or a name that cannot be verified.
        assert!(container_security_context(&p, &c[0], &config(), &root()).is_err());
        let named = ImageUser {
            uid: None,
            username: "nginx".into(),
        };
        assert!(container_security_context(&p, &c[0], &config(), &named).is_err());
        let uid = ImageUser {
            uid: Some(1000),
            username: String::new(),
        };
        assert!(container_security_context(&p, &c[0], &config(), &uid).is_ok());
        let cases: [(usize, Option<i64>, &str, bool); 5] = [
            (0, Some(0), "", false),
            (0, Some(1000), "", true),
            (0, None, "nginx", false),
            (0, None, "", true),
            (2, Some(0), "", true),
        ];
        for (i, uid, user, ok) in cases {
            assert_eq!(
                verify_run_as_non_root(&p, &c[i], uid, user).is_ok(),
                ok,
                "{i} {uid:?} {user}"
            );
        }
        let bad = pod(
            json!({"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "../x"}}}),
        );
        assert!(sandbox_security_context(&bad, &config()).is_err());
    }

    #[test]
    fn image_user_as_kubelet_reads_it() {
        let image = |uid: Option<i64>, username: &str| api::Image {
            uid: uid.map(|value| api::Int64Value { value }),
            username: username.into(),
            ..Default::default()
        };
        let cases = [
            (Some(image(Some(7), "")), Some(7), ""),
            (Some(image(None, "www")), None, "www"),
            (Some(image(None, "")), Some(0), ""),
            (None, Some(0), ""),
        ];
        for (image, uid, username) in cases {
            let got = ImageUser::of(image.as_ref());
            assert_eq!(
                (got.uid, got.username.as_str()),
                (uid, username),
                "{image:?}"
            );
        }
        // A runAsGroup alone gets the image's user beside it (the runtime refuses a lone group).
        let p = pod(json!({"securityContext": {"runAsGroup": 3000}}));
        let named = ImageUser {
            uid: None,
            username: "www".into(),
        };
        let sc = container_security_context(
            &p,
            &p.spec.as_ref().unwrap().containers[0],
            &config(),
            &named,
        )
        .unwrap();
        assert_eq!(
            (
                sc.run_as_user,
                sc.run_as_username.as_str(),
                sc.run_as_group.map(|g| g.value)
            ),
            (None, "www", Some(3000))
        );
    }
}
