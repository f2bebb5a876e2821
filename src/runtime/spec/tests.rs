use super::*;
use oci_spec::image::ConfigBuilder;

fn pod_files() -> PodFiles {
    PodFiles {
        hostname: "/pod/hostname".into(),
        hosts: "/pod/hosts".into(),
        resolv_conf: "/pod/resolv.conf".into(),
        shm: Some("/pod/shm".into()),
    }
}

fn pod_ns() -> PodNamespaces {
    PodNamespaces {
        net: Some("/pod/ns/net".into()),
        ipc: Some("/pod/ns/ipc".into()),
        uts: Some("/pod/ns/uts".into()),
        pid_to_join: Some("/proc/42/ns/pid".into()),
    }
}

fn image() -> oci_spec::image::Config {
    ConfigBuilder::default()
        .entrypoint(vec!["/bin/sh".to_string(), "-c".to_string()])
        .cmd(vec!["echo hi".to_string()])
        .env(vec!["PATH=/bin".to_string(), "A=image".to_string()])
        .working_dir("/work".to_string())
        .user("app".to_string())
        .stop_signal("SIGQUIT".to_string())
        .build()
        .unwrap()
}

fn etc() -> EtcFiles {
    EtcFiles {
        passwd: Some("root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n".into()),
        group: Some("root:x:0:\napp:x:1000:\n".into()),
    }
}

struct Case {
    config: api::ContainerConfig,
    sandbox: api::PodSandboxConfig,
    cgroups: Option<PathBuf>,
    devices_filtered: bool,
    rootless: bool,
    localhost_seccomp: Option<&'static str>,
}

impl Case {
    fn new() -> Self {
        Case {
            config: api::ContainerConfig::default(),
            sandbox: api::PodSandboxConfig::default(),
            cgroups: None,
            devices_filtered: true,
            rootless: false,
            localhost_seccomp: None,
        }
    }
    fn build(&self) -> Result<ContainerSpec> {
        let img = image();
        let etc = etc();
        let files = pod_files();
        let ns = pod_ns();
        build_spec(&SpecInputs {
            config: &self.config,
            sandbox: &self.sandbox,
            image: Some(&img),
            rootfs: Path::new("/c/rootfs"),
            etc: &etc,
            hostname: "mypod",
            pod_files: &files,
            namespaces: &ns,
            cgroups_path: self.cgroups.clone(),
            devices_filtered: self.devices_filtered,
            rootless: self.rootless,
            max_nofile: u64::MAX,
            ids: &IdMapping::host(),
            localhost_seccomp: self.localhost_seccomp,
            cgroup_mounts: &["pids".to_string(), "cpu,cpuacct".to_string()],
            runp_exe: Some(Path::new("/usr/bin/runp")),
        })
    }
}

fn security(
    f: impl FnOnce(&mut api::LinuxContainerSecurityContext),
) -> Option<api::LinuxContainerConfig> {
    let mut sc = api::LinuxContainerSecurityContext::default();
    f(&mut sc);
    Some(api::LinuxContainerConfig {
        resources: None,
        security_context: Some(sc),
    })
}

#[test]
fn image_defaults_fill_the_process() {
    let out = Case::new().build().unwrap();
    let p = out.spec.process().as_ref().unwrap();
    assert_eq!(p.args().as_ref().unwrap(), &["/bin/sh", "-c", "echo hi"]);
    assert_eq!(p.cwd(), Path::new("/work"));
    assert_eq!((p.user().uid(), p.user().gid()), (1000, 1000));
    let env = p.env().as_ref().unwrap();
    assert_eq!(env[0], "HOSTNAME=mypod");
    assert!(env.contains(&"A=image".to_string()));
    assert_eq!(p.no_new_privileges(), None);
    assert!(
        out.spec.hostname().is_none(),
        "must not reset the pod's hostname"
    );
    let root = out.spec.root().as_ref().unwrap();
    assert_eq!(root.path(), Path::new("/c/rootfs"));
    assert_eq!(root.readonly(), Some(false));
    let linux = out.spec.linux().as_ref().unwrap();
    assert!(
        linux.cgroups_path().is_none(),
        "no cgroups when not writable"
    );
    assert!(linux.resources().is_none());
    let ns = linux.namespaces().as_ref().unwrap();
    let kinds: Vec<_> = ns.iter().map(|n| (n.typ(), n.path().clone())).collect();
    assert_eq!(
        kinds,
        vec![
            (LinuxNamespaceType::Mount, None),
            (LinuxNamespaceType::Network, Some("/pod/ns/net".into())),
            (LinuxNamespaceType::Ipc, Some("/pod/ns/ipc".into())),
            (LinuxNamespaceType::Uts, Some("/pod/ns/uts".into())),
            (LinuxNamespaceType::Pid, None),
        ]
    );
    assert!(
        linux
            .masked_paths()
            .as_ref()
            .unwrap()
            .contains(&"/proc/kcore".to_string())
    );
    // Only the notice that no device cgroup holds mknod back.
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    assert!(out.warnings[0].contains("CAP_MKNOD"));
}

#[test]
fn pid_modes() {
    let mut case = Case::new();
    let with_pid = |mode: api::NamespaceMode| {
        security(|sc| {
            sc.namespace_options = Some(api::NamespaceOption {
                pid: mode as i32,
                ..Default::default()
            })
        })
    };
    let pid_ns = |case: &Case| {
        case.build()
            .unwrap()
            .spec
            .linux()
            .as_ref()
            .unwrap()
            .namespaces()
            .as_ref()
            .unwrap()
            .iter()
            .find(|n| n.typ() == LinuxNamespaceType::Pid)
            .map(|n| n.path().clone())
    };
    case.config.linux = with_pid(api::NamespaceMode::Pod);
    assert_eq!(pid_ns(&case), Some(Some("/proc/42/ns/pid".into())));
    case.config.linux = with_pid(api::NamespaceMode::Node);
    assert_eq!(pid_ns(&case), None);
    case.config.linux = with_pid(api::NamespaceMode::Container);
    assert_eq!(pid_ns(&case), Some(None));
}

#[test]
fn security_context_is_applied() {
    let mut case = Case::new();
    case.config.command = vec!["/bin/true".into()];
    case.config.linux = security(|sc| {
        sc.readonly_rootfs = true;
        sc.no_new_privs = true;
        sc.run_as_user = Some(api::Int64Value { value: 0 });
        sc.capabilities = Some(api::Capability {
            drop_capabilities: vec!["ALL".into()],
            add_capabilities: vec!["NET_ADMIN".into()],
            ..Default::default()
        });
    });
    let out = case.build().unwrap();
    let p = out.spec.process().as_ref().unwrap();
    assert_eq!(p.args().as_ref().unwrap(), &["/bin/true"]);
    assert_eq!(p.user().uid(), 0);
    assert_eq!(p.no_new_privileges(), Some(true));
    assert_eq!(
        p.capabilities()
            .as_ref()
            .unwrap()
            .bounding()
            .as_ref()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(out.spec.root().as_ref().unwrap().readonly(), Some(true));
}

#[test]
fn privileged_needs_a_privileged_pod() {
    let mut case = Case::new();
    case.config.linux = security(|sc| sc.privileged = true);
    assert!(matches!(
        case.build(),
        Err(RuntimeError::InvalidArgument(_))
    ));
    case.sandbox.linux = Some(api::LinuxPodSandboxConfig {
        security_context: Some(api::LinuxSandboxSecurityContext {
            privileged: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    let out = case.build().unwrap();
    let linux = out.spec.linux().as_ref().unwrap();
    assert!(linux.masked_paths().as_ref().unwrap().is_empty());
    assert!(
        out.spec
            .process()
            .as_ref()
            .unwrap()
            .capabilities()
            .as_ref()
            .unwrap()
            .bounding()
            .as_ref()
            .unwrap()
            .len()
            > 30
    );
}

#[test]
fn resources_only_with_cgroups() {
    let mut case = Case::new();
    case.config.linux = Some(api::LinuxContainerConfig {
        resources: Some(api::LinuxContainerResources {
            cpu_shares: 512,
            cpu_quota: 50_000,
            cpu_period: 100_000,
            memory_limit_in_bytes: 64 << 20,
            oom_score_adj: -997,
            ..Default::default()
        }),
        security_context: None,
    });
    let out = case.build().unwrap();
    assert!(out.spec.linux().as_ref().unwrap().resources().is_none());
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("cgroups unavailable")),
        "{:?}",
        out.warnings
    );
    assert!(out.warnings.iter().any(|w| w.contains("oom_score_adj")));
    case.cgroups = Some("/runp/pod/ctr".into());
    let out = case.build().unwrap();
    let linux = out.spec.linux().as_ref().unwrap();
    assert_eq!(
        linux.cgroups_path().as_deref(),
        Some(Path::new("/runp/pod/ctr"))
    );
    let res = linux.resources().as_ref().unwrap();
    assert_eq!(res.cpu().as_ref().unwrap().shares(), Some(512));
    assert_eq!(res.cpu().as_ref().unwrap().quota(), Some(50_000));
    assert_eq!(res.memory().as_ref().unwrap().limit(), Some(64 << 20));
}

#[test]
fn invalid_configs() {
    let mut case = Case::new();
    case.config.working_dir = "relative".into();
    assert!(matches!(
        case.build(),
        Err(RuntimeError::InvalidArgument(_))
    ));
    let mut case = Case::new();
    case.config.linux = security(|sc| sc.run_as_username = "ghost".into());
    assert!(matches!(
        case.build(),
        Err(RuntimeError::InvalidArgument(_))
    ));
}

#[test]
fn stop_signal_parsing() {
    let with = |s: &str| {
        ConfigBuilder::default()
            .stop_signal(s.to_string())
            .build()
            .unwrap()
    };
    assert_eq!(stop_signal(None).unwrap(), libc::SIGTERM);
    assert_eq!(stop_signal(Some(&with("SIGQUIT"))).unwrap(), libc::SIGQUIT);
    assert_eq!(stop_signal(Some(&with("usr1"))).unwrap(), libc::SIGUSR1);
    assert_eq!(stop_signal(Some(&with("9"))).unwrap(), libc::SIGKILL);
    assert!(stop_signal(Some(&with("SIGNOPE"))).is_err());
    assert!(stop_signal(Some(&with("999"))).is_err());
}

#[test]
fn a_tty_container_gets_a_terminal_and_stdin_alone_does_not() {
    let terminal = |tty: bool, stdin: bool| {
        let mut case = Case::new();
        case.config.tty = tty;
        case.config.stdin = stdin;
        case.build()
            .unwrap()
            .spec
            .process()
            .as_ref()
            .unwrap()
            .terminal()
    };
    assert_eq!(terminal(false, false), Some(false));
    assert_eq!(terminal(false, true), Some(false));
    assert_eq!(terminal(true, false), Some(true));
    assert_eq!(terminal(true, true), Some(true));
}

#[test]
fn seccomp_profiles_reach_the_spec() {
    use oci_spec::runtime::LinuxSeccompAction;
    let seccomp = |case: &Case| {
        case.build()
            .map(|b| b.spec.linux().clone().unwrap().seccomp().clone())
    };
    assert_eq!(seccomp(&Case::new()).unwrap(), None, "unset is unconfined");

    let mut case = Case::new();
    case.config.linux = security(|s| {
        s.seccomp = Some(api::SecurityProfile {
            profile_type: api::security_profile::ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        })
    });
    let default = seccomp(&case).unwrap().expect("RuntimeDefault filters");
    assert_eq!(default.default_action(), LinuxSeccompAction::ScmpActAllow);
    // The default capability set has no SYS_ADMIN: sethostname is refused.
    let names = default.syscalls().as_ref().unwrap()[0].names();
    assert!(names.contains(&"sethostname".to_string()), "{names:?}");

    let mut case = Case::new();
    case.config.linux = security(|s| {
        s.seccomp = Some(api::SecurityProfile {
            profile_type: api::security_profile::ProfileType::Localhost as i32,
            localhost_ref: "/profiles/deny-chmod.json".into(),
        })
    });
    assert!(
        seccomp(&case).is_err(),
        "a localhost profile must be read by the caller"
    );
    case.localhost_seccomp = Some(
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["chmod"],"action":"SCMP_ACT_ERRNO"}]}"#,
    );
    let local = seccomp(&case).unwrap().expect("localhost filters");
    assert_eq!(
        local.syscalls().as_ref().unwrap()[0].names(),
        &["chmod".to_string()]
    );
    case.localhost_seccomp = Some("{");
    let err = seccomp(&case).unwrap_err();
    assert!(err.to_string().contains("deny-chmod.json"), "{err}");
}

fn bounding(out: &ContainerSpec) -> Vec<Capability> {
    let caps = out.spec.process().as_ref().unwrap().capabilities().clone();
    caps.unwrap()
        .bounding()
        .clone()
        .unwrap()
        .into_iter()
        .collect()
}

#[test]
fn device_cgroup_denies_all_but_the_defaults_unless_privileged() {
    let mut case = Case::new();
    case.cgroups = Some("/runp/pod/ctr".into());
    let out = case.build().unwrap();
    let res = out
        .spec
        .linux()
        .as_ref()
        .unwrap()
        .resources()
        .clone()
        .unwrap();
    let rules = res.devices().clone().unwrap();
    assert_eq!(rules.len(), 1);
    assert!(!rules[0].allow(), "unprivileged: deny everything first");
    assert_eq!(rules[0].access().as_deref(), Some("rwm"));
    assert!(rules[0].major().is_none() && rules[0].minor().is_none());
    assert!(
        bounding(&out).contains(&Capability::Mknod),
        "containerd keeps MKNOD"
    );

    case.config.linux = security(|sc| sc.privileged = true);
    case.sandbox.linux = Some(api::LinuxPodSandboxConfig {
        security_context: Some(api::LinuxSandboxSecurityContext {
            privileged: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    let out = case.build().unwrap();
    let res = out
        .spec
        .linux()
        .as_ref()
        .unwrap()
        .resources()
        .clone()
        .unwrap();
    let rules = res.devices().clone().unwrap();
    assert!(rules[0].allow(), "privileged: every device");
    let ro = out.spec.linux().as_ref().unwrap().readonly_paths().clone();
    assert!(ro.unwrap_or_default().is_empty());
}

#[test]
fn own_cgroup_files_are_read_only() {
    let out = Case::new().build().unwrap();
    let ro = out
        .spec
        .linux()
        .as_ref()
        .unwrap()
        .readonly_paths()
        .clone()
        .unwrap();
    let at = |p: &str| ro.iter().position(|r| r == p);
    let parent = at("/sys/fs/cgroup").expect("cgroup root read-only");
    assert!(parent < at("/sys/fs/cgroup/pids").expect("pids read-only"));
    assert!(at("/sys/fs/cgroup/cpu,cpuacct").is_some());
}

#[test]
fn without_a_device_cgroup_mknod_is_dropped() {
    let mut case = Case::new();
    let out = case.build().unwrap();
    assert!(!bounding(&out).contains(&Capability::Mknod));
    assert!(out.warnings.iter().any(|w| w.contains("CAP_MKNOD")));
    // A cgroup without a device filter (cgroup v2 here) holds nothing back either.
    case.cgroups = Some("/runp/pod/ctr".into());
    case.devices_filtered = false;
    let out = case.build().unwrap();
    assert!(!bounding(&out).contains(&Capability::Mknod));
    assert!(out.warnings.iter().any(|w| w.contains("CAP_MKNOD")));
    // In a user namespace the kernel refuses device nodes anyway: capabilities as asked.
    case.rootless = true;
    let out = case.build().unwrap();
    assert!(bounding(&out).contains(&Capability::Mknod));
}
