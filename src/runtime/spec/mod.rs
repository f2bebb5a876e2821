//! Pure CRI → OCI runtime-spec conversion for a container. Everything impure (reading the
//! rootfs's /etc/passwd, creating missing host paths, choosing the cgroup path) is done by the
//! caller and passed in, so the conversion is table-tested.

pub mod mounts;
pub mod process;
pub mod seccomp;
pub mod security;

use crate::cri::api;
use crate::runtime::error::{Result, RuntimeError};
use oci_spec::runtime::{
    Capability, Linux, LinuxCpu, LinuxMemory, LinuxNamespace, LinuxNamespaceType, LinuxResources,
    ProcessBuilder, RootBuilder, Spec, UserBuilder,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use mounts::PodFiles;
pub use process::{EtcFiles, IdMapping, ResolvedUser};

/// How the container joins the pod's namespaces.
#[derive(Clone, Debug, Default)]
pub struct PodNamespaces {
    /// Bind-mounted namespace files of the pod; None = the host's namespace.
    pub net: Option<PathBuf>,
    pub ipc: Option<PathBuf>,
    pub uts: Option<PathBuf>,
    /// The pid namespace to join for `pid: POD`/`TARGET` (e.g. /proc/<infra pid>/ns/pid).
    pub pid_to_join: Option<PathBuf>,
}

/// Everything the conversion needs besides the CRI config.
#[derive(Clone, Debug)]
pub struct SpecInputs<'a> {
    pub config: &'a api::ContainerConfig,
    /// The pod's config (sysctls, privileged...).
    pub sandbox: &'a api::PodSandboxConfig,
    pub image: Option<&'a oci_spec::image::Config>,
    pub rootfs: &'a Path,
    pub etc: &'a EtcFiles,
    pub hostname: &'a str,
    pub pod_files: &'a PodFiles,
    pub namespaces: &'a PodNamespaces,
    /// Some(path) when cgroups are writable; None = no cgroup and no resources (rootless).
    pub cgroups_path: Option<PathBuf>,
    /// The device rules will be enforced: a v1 device cgroup. (cgroup v2 enforces them through
    /// a BPF program, which libcgroups builds only with its `cgroupsv2_devices` feature, not
    /// enabled here.)
    pub devices_filtered: bool,
    pub rootless: bool,
    /// Upper bound for RLIMIT_NOFILE (the runtime's own hard limit).
    pub max_nofile: u64,
    pub ids: &'a IdMapping,
    /// The JSON of the container's localhost seccomp profile, read by the caller
    /// ([`seccomp::seccomp_choice`] names the file).
    pub localhost_seccomp: Option<&'a str>,
    /// Names of the host's cgroup mounts under /sys/fs/cgroup (v1: `pids`, `cpu,cpuacct`...;
    /// empty with v2), made read-only in unprivileged containers.
    pub cgroup_mounts: &'a [String],
    /// The runp binary, run as the createContainer hook that applies mount propagation
    /// ([`mounts::propagation_hook`]); None: no hook.
    pub runp_exe: Option<&'a Path>,
}

/// The bundle's config.json plus what the runtime keeps beside it.
#[derive(Clone, Debug)]
pub struct ContainerSpec {
    pub spec: Spec,
    pub user: ResolvedUser,
    /// Things the caller should log once (settings this host cannot honour).
    pub warnings: Vec<String>,
}

fn sandbox_privileged(sandbox: &api::PodSandboxConfig) -> bool {
    sandbox
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .is_some_and(|sc| sc.privileged)
}

/// The pid namespace mode the container asks for (default: its own, as CRI says).
pub fn pid_mode(config: &api::ContainerConfig) -> api::NamespaceMode {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|sc| sc.namespace_options.as_ref())
        .and_then(|ns| api::NamespaceMode::try_from(ns.pid).ok())
        .unwrap_or(api::NamespaceMode::Container)
}

/// cgroup resources from the CRI ones (zero means unset, as in CRI).
pub fn linux_resources(res: &api::LinuxContainerResources) -> Result<LinuxResources> {
    let mut cpu = LinuxCpu::default();
    let mut any_cpu = false;
    if res.cpu_shares > 0 {
        cpu.set_shares(Some(res.cpu_shares as u64));
        any_cpu = true;
    }
    if res.cpu_quota > 0 {
        cpu.set_quota(Some(res.cpu_quota));
        any_cpu = true;
    }
    if res.cpu_period > 0 {
        cpu.set_period(Some(res.cpu_period as u64));
        any_cpu = true;
    }
    if !res.cpuset_cpus.is_empty() {
        cpu.set_cpus(Some(res.cpuset_cpus.clone()));
        any_cpu = true;
    }
    if !res.cpuset_mems.is_empty() {
        cpu.set_mems(Some(res.cpuset_mems.clone()));
        any_cpu = true;
    }
    let mut memory = LinuxMemory::default();
    let mut any_memory = false;
    if res.memory_limit_in_bytes > 0 {
        memory.set_limit(Some(res.memory_limit_in_bytes));
        any_memory = true;
    }
    if res.memory_swap_limit_in_bytes > 0 {
        if res.memory_limit_in_bytes > 0
            && res.memory_swap_limit_in_bytes < res.memory_limit_in_bytes
        {
            return Err(RuntimeError::invalid(
                "memory_swap_limit_in_bytes is below memory_limit_in_bytes",
            ));
        }
        memory.set_swap(Some(res.memory_swap_limit_in_bytes));
        any_memory = true;
    }
    if res.cpu_shares < 0
        || res.cpu_quota < -1
        || res.cpu_period < 0
        || res.memory_limit_in_bytes < 0
    {
        return Err(RuntimeError::invalid(format!(
            "negative resource values in {res:?}"
        )));
    }
    let mut out = LinuxResources::default();
    if any_cpu {
        out.set_cpu(Some(cpu));
    }
    if any_memory {
        out.set_memory(Some(memory));
    }
    if !res.unified.is_empty() {
        out.set_unified(Some(
            res.unified.clone().into_iter().collect::<HashMap<_, _>>(),
        ));
    }
    Ok(out)
}

fn namespace(typ: LinuxNamespaceType, path: Option<&Path>) -> LinuxNamespace {
    let mut ns = LinuxNamespace::default();
    ns.set_typ(typ).set_path(path.map(Path::to_path_buf));
    ns
}

fn oci_err(e: oci_spec::OciSpecError) -> RuntimeError {
    RuntimeError::Internal(format!("building the OCI spec: {e}"))
}

/// Builds the container's OCI spec.
pub fn build_spec(inputs: &SpecInputs<'_>) -> Result<ContainerSpec> {
    let config = inputs.config;
    let linux_cfg = config.linux.clone().unwrap_or_default();
    let security = linux_cfg.security_context.as_ref();
    let privileged = security.is_some_and(|s| s.privileged);
    if privileged && !sandbox_privileged(inputs.sandbox) {
        return Err(RuntimeError::invalid(
            "privileged container in a non-privileged pod sandbox",
        ));
    }
    let mut warnings = Vec::new();
    let image = inputs.image;
    let empty: Vec<String> = Vec::new();
    let args = process::merge_args(
        &config.command,
        &config.args,
        image
            .and_then(|i| i.entrypoint().as_ref())
            .unwrap_or(&empty),
        image.and_then(|i| i.cmd().as_ref()).unwrap_or(&empty),
    )?;
    let env = process::merge_env(
        inputs.hostname,
        image.and_then(|i| i.env().as_ref()).unwrap_or(&empty),
        &config.envs,
    );
    let cwd = process::working_dir(
        &config.working_dir,
        image.and_then(|i| i.working_dir().as_deref()),
    )?;
    let mut user = process::resolve_user(
        security,
        image.and_then(|i| i.user().as_deref()),
        inputs.etc,
    )?;
    if let Some(note) = inputs.ids.restrict(&mut user)? {
        warnings.push(note);
    }

    let mut oci_user = UserBuilder::default()
        .uid(user.uid)
        .gid(user.gid)
        .additional_gids(user.additional_gids.clone());
    if let Some(name) = &user.username {
        oci_user = oci_user.username(name.clone());
    }
    let mut capabilities =
        security::capabilities(privileged, security.and_then(|s| s.capabilities.as_ref()))?;
    let device_cgroup = inputs.cgroups_path.is_some() && inputs.devices_filtered;
    if !device_cgroup && !inputs.rootless && !privileged {
        // No device cgroup to refuse a node made with mknod: no mknod either. (In a user
        // namespace the kernel refuses device nodes by itself.)
        security::drop_capability(&mut capabilities, Capability::Mknod);
        warnings.push(
            "no device cgroup (cgroups unavailable, or cgroup v2 without the device filter): CAP_MKNOD is dropped so the container cannot make device nodes".into(),
        );
    }
    let mut proc_builder = ProcessBuilder::default()
        // The shim gives a tty container a terminal through libcontainer's console socket.
        .terminal(config.tty)
        .user(oci_user.build().map_err(oci_err)?)
        .args(args)
        .env(env)
        .cwd(cwd)
        .capabilities(capabilities)
        .rlimits(security::default_rlimits(inputs.max_nofile));
    if let Some(res) = &linux_cfg.resources
        && res.oom_score_adj != 0
    {
        let adj = i32::try_from(res.oom_score_adj)
            .ok()
            .filter(|a| (-1000..=1000).contains(a))
            .ok_or_else(|| {
                RuntimeError::invalid(format!("oom_score_adj {} out of range", res.oom_score_adj))
            })?;
        if adj < 0 {
            // Lowering the OOM score needs CAP_SYS_RESOURCE over the host, which this
            // machine's root lacks; a failed write would fail the start.
            warnings.push(format!(
                "negative oom_score_adj ({adj}) is not applied: lowering OOM scores is not permitted here"
            ));
        } else {
            proc_builder = proc_builder.oom_score_adj(adj);
        }
    }
    let mut proc = proc_builder.build().map_err(oci_err)?;
    // Unset rather than false (the builder's default is true): libcontainer loads a seccomp
    // filter before dropping capabilities only when the field is absent; with `false` it loads
    // it after, and the kernel refuses it.
    let no_new_privs = !privileged && security.is_some_and(|s| s.no_new_privs);
    proc.set_no_new_privileges(no_new_privs.then_some(true));
    let seccomp = match seccomp::seccomp_choice(security)? {
        seccomp::SeccompChoice::Unconfined => None,
        seccomp::SeccompChoice::RuntimeDefault => {
            Some(seccomp::runtime_default(proc.capabilities().as_ref())?)
        }
        seccomp::SeccompChoice::Localhost(path) => {
            let json = inputs.localhost_seccomp.ok_or_else(|| {
                RuntimeError::Internal(format!("seccomp profile {} was not read", path.display()))
            })?;
            Some(seccomp::parse_profile(&path, json)?)
        }
    };

    let readonly_rootfs = security.is_some_and(|s| s.readonly_rootfs);
    let mounts = mounts::all_mounts(
        &config.mounts,
        inputs.pod_files,
        inputs.rootless,
        privileged,
        readonly_rootfs,
    )?;
    let (masked, mut readonly) = security::masked_and_readonly_paths(privileged, security);
    if !privileged && !inputs.rootless {
        // libcontainer binds a v1 container's own cgroup directories read-write whatever the
        // mount's options say; read-only paths are remounted after every mount.
        readonly.extend(security::cgroup_readonly_paths(inputs.cgroup_mounts));
    }

    let ns = inputs.namespaces;
    let mut namespaces = vec![namespace(LinuxNamespaceType::Mount, None)];
    if let Some(net) = &ns.net {
        namespaces.push(namespace(LinuxNamespaceType::Network, Some(net)));
    }
    if let Some(ipc) = &ns.ipc {
        namespaces.push(namespace(LinuxNamespaceType::Ipc, Some(ipc)));
    }
    if let Some(uts) = &ns.uts {
        namespaces.push(namespace(LinuxNamespaceType::Uts, Some(uts)));
    }
    match pid_mode(config) {
        api::NamespaceMode::Container => namespaces.push(namespace(LinuxNamespaceType::Pid, None)),
        api::NamespaceMode::Pod | api::NamespaceMode::Target => {
            let path = ns.pid_to_join.as_deref().ok_or_else(|| {
                RuntimeError::FailedPrecondition(
                    "the pod's pid namespace is not available (infra not running)".into(),
                )
            })?;
            namespaces.push(namespace(LinuxNamespaceType::Pid, Some(path)));
        }
        api::NamespaceMode::Node => {}
    }

    // Start from the type's defaults and set every field: the defaults carry a sample config.
    let mut linux = Linux::default();
    linux
        .set_namespaces(Some(namespaces))
        .set_masked_paths(Some(masked))
        .set_readonly_paths(Some(readonly))
        .set_resources(None)
        .set_devices((privileged && !inputs.rootless).then(security::host_devices))
        .set_cgroups_path(None)
        .set_seccomp(seccomp)
        .set_rootfs_propagation(mounts::rootfs_propagation(&config.mounts).map(str::to_string));
    let sysctls = inputs
        .sandbox
        .linux
        .as_ref()
        .map(|l| l.sysctls.clone())
        .unwrap_or_default();
    if !sysctls.is_empty() {
        linux.set_sysctl(Some(sysctls.into_iter().collect::<HashMap<_, _>>()));
    }
    if let Some(path) = &inputs.cgroups_path {
        linux.set_cgroups_path(Some(path.clone()));
        let mut resources = match &linux_cfg.resources {
            Some(res) => linux_resources(res)?,
            None => LinuxResources::default(),
        };
        resources.set_devices(Some(security::device_cgroup_rules(privileged)?));
        linux.set_resources(Some(resources));
    } else if linux_cfg
        .resources
        .as_ref()
        .is_some_and(|r| r.cpu_shares > 0 || r.cpu_quota > 0 || r.memory_limit_in_bytes > 0)
    {
        warnings
            .push("cgroups unavailable (rootless): cpu/memory/pids limits are not enforced".into());
    }

    let mut spec = Spec::default();
    spec.set_version("1.0.2".to_string())
        .set_root(Some(
            RootBuilder::default()
                .path(inputs.rootfs.to_path_buf())
                .readonly(readonly_rootfs)
                .build()
                .map_err(oci_err)?,
        ))
        // The container joins the pod's UTS namespace: its hostname is the pod's.
        .set_hostname(None)
        .set_domainname(None)
        .set_hooks(
            inputs
                .runp_exe
                .and_then(|exe| mounts::propagation_hook(exe, inputs.rootfs, &config.mounts))
                .map(|hook| {
                    let mut hooks = oci_spec::runtime::Hooks::default();
                    hooks.set_create_container(Some(vec![hook]));
                    hooks
                }),
        )
        .set_process(Some(proc))
        .set_mounts(Some(mounts))
        .set_linux(Some(linux))
        .set_annotations(Some(
            config
                .annotations
                .clone()
                .into_iter()
                .collect::<HashMap<_, _>>(),
        ));
    Ok(ContainerSpec {
        spec,
        user,
        warnings,
    })
}

/// Signal number for an image's StopSignal ("SIGQUIT", "QUIT", "3"); SIGTERM when unset.
pub fn stop_signal(image: Option<&oci_spec::image::Config>) -> Result<i32> {
    let Some(raw) = image
        .and_then(|i| i.stop_signal().as_deref())
        .filter(|s| !s.is_empty())
    else {
        return Ok(libc::SIGTERM);
    };
    if let Ok(n) = raw.parse::<i32>() {
        return nix::sys::signal::Signal::try_from(n)
            .map(|s| s as i32)
            .map_err(|_| RuntimeError::invalid(format!("bad StopSignal {raw:?}")));
    }
    let upper = raw.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<nix::sys::signal::Signal>()
        .map(|s| s as i32)
        .map_err(|_| RuntimeError::invalid(format!("bad StopSignal {raw:?}")))
}

#[cfg(test)]
mod tests;
