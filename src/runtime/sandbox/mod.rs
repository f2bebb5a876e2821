//! Pod sandboxes: the infra shim holding the pod's namespaces, the pod's shared files
//! (hostname, hosts, resolv.conf, /dev/shm) and its cgroup.

pub(crate) mod files;
pub(crate) mod list;
mod remove;
mod run;
pub(crate) mod status;
mod stop;

use crate::cri::api;

/// The pod's namespace options as requested (defaults: pod-level network/ipc, container pid).
pub(crate) fn namespace_options(config: &api::PodSandboxConfig) -> api::NamespaceOption {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|sc| sc.namespace_options.clone())
        .unwrap_or_default()
}
