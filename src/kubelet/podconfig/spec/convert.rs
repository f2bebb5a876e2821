//! Pod → CRI sandbox config and container config, field for field as the kubelet's
//! `generatePodSandboxConfig` / `generateContainerConfig` produce them.

use super::dns::{pod_dns_config, sandbox_hostname};
use super::env::{EnvContext, container_env, expand_command_and_args};
use super::fieldpath::{NodeResources, PodRuntimeInfo};
use super::resources::{cgroup_parent, container_resources, overhead_resources, sandbox_resources};
use super::security::{container_security_context, sandbox_security_context};
use crate::cri::api;
use crate::kubelet::config::AgentConfig;
use crate::kubelet::labels;
use crate::kubelet::podconfig::{ContainerInputs, PodConfigError, pod_identity};
use k8s_openapi::api::core::v1::{Container, Pod};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Labels of the sandbox: the pod's labels plus its identity.
fn sandbox_labels(pod: &Pod) -> Result<HashMap<String, String>, PodConfigError> {
    let (namespace, name, uid) = pod_identity(pod)?;
    let mut out: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    out.insert(labels::POD_NAME.into(), name.into());
    out.insert(labels::POD_NAMESPACE.into(), namespace.into());
    out.insert(labels::POD_UID.into(), uid.into());
    out.insert(labels::MANAGED.into(), "true".into());
    Ok(out)
}

fn protocol(name: Option<&str>) -> i32 {
    match name {
        Some("UDP") => api::Protocol::Udp as i32,
        Some("SCTP") => api::Protocol::Sctp as i32,
        _ => api::Protocol::Tcp as i32,
    }
}

/// Port mappings of the regular containers' ports that have a hostPort.
fn port_mappings(pod: &Pod) -> Vec<api::PortMapping> {
    let containers = pod.spec.iter().flat_map(|s| &s.containers);
    let ports = containers.flat_map(|c| c.ports.iter().flatten());
    ports
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| api::PortMapping {
            protocol: protocol(p.protocol.as_deref()),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect()
}

/// `<pod_logs_dir>/<namespace>_<name>_<uid>`
pub fn pod_log_directory(config: &AgentConfig, namespace: &str, name: &str, uid: &str) -> String {
    let dir = config
        .pod_logs_dir
        .join(format!("{namespace}_{name}_{uid}"));
    dir.to_string_lossy().into_owned()
}

/// The sandbox config of a pod; `attempt` counts sandbox re-creations. Reads the host
/// resolv.conf (`config.resolv_conf`) for dnsPolicy Default.
pub fn sandbox_config(
    pod: &Pod,
    config: &AgentConfig,
    attempt: u32,
) -> Result<api::PodSandboxConfig, PodConfigError> {
    let host_resolv_conf = std::fs::read_to_string(&config.resolv_conf).ok();
    sandbox_config_with_resolv_conf(pod, config, attempt, host_resolv_conf.as_deref())
}

/// [`sandbox_config`] with the host resolv.conf content given (pure).
pub fn sandbox_config_with_resolv_conf(
    pod: &Pod,
    config: &AgentConfig,
    attempt: u32,
    host_resolv_conf: Option<&str>,
) -> Result<api::PodSandboxConfig, PodConfigError> {
    let (namespace, name, uid) = pod_identity(pod)?;
    let hostname = sandbox_hostname(pod, &config.cluster_domain)
        .map_err(|e| PodConfigError::Invalid(e.to_string()))?;
    let sysctls = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    Ok(api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: namespace.into(),
            attempt,
        }),
        hostname,
        log_directory: pod_log_directory(config, namespace, name, uid),
        dns_config: Some(pod_dns_config(pod, config, host_resolv_conf)),
        port_mappings: port_mappings(pod),
        labels: sandbox_labels(pod)?,
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent(pod),
            security_context: Some(sandbox_security_context(pod, config)?),
            sysctls,
            overhead: overhead_resources(pod),
            resources: Some(sandbox_resources(pod)),
        }),
        ..Default::default()
    })
}

/// Facts of the node and pod runtime the container config depends on.
fn runtime_info(pod: &Pod, inputs: &ContainerInputs<'_>) -> PodRuntimeInfo {
    let host_ip = inputs.config.node_ip.to_string();
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let pod_ips = match inputs.pod_ip {
        Some(ip) if !ip.is_empty() => vec![ip.to_string()],
        _ if host_network => vec![host_ip.clone()],
        _ => Vec::new(),
    };
    PodRuntimeInfo {
        node_name: inputs.config.node_name.clone(),
        host_ips: vec![host_ip],
        pod_ips,
    }
}

/// Annotations the kubelet puts on a container (`newContainerAnnotations`).
fn container_annotations(pod: &Pod, inputs: &ContainerInputs<'_>) -> HashMap<String, String> {
    let c = inputs.container;
    let mut out = HashMap::new();
    out.insert(labels::CONTAINER_HASH.into(), container_hash(c));
    out.insert(
        labels::CONTAINER_RESTART_COUNT.into(),
        inputs.restart_count.to_string(),
    );
    out.insert(
        labels::TERMINATION_MESSAGE_PATH.into(),
        c.termination_message_path.clone().unwrap_or_default(),
    );
    out.insert(
        labels::TERMINATION_MESSAGE_POLICY.into(),
        c.termination_message_policy.clone().unwrap_or_default(),
    );
    if let Some(seconds) = pod.metadata.deletion_grace_period_seconds {
        out.insert(
            labels::POD_DELETION_GRACE_PERIOD.into(),
            seconds.to_string(),
        );
    }
    if let Some(seconds) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        out.insert(
            labels::POD_TERMINATION_GRACE_PERIOD.into(),
            seconds.to_string(),
        );
    }
    if let Some(pre_stop) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
        && let Ok(json) = serde_json::to_string(pre_stop)
    {
        out.insert(labels::CONTAINER_PRESTOP_HANDLER.into(), json);
    }
    if let Some(ports) = c.ports.as_ref().filter(|p| !p.is_empty())
        && let Ok(json) = serde_json::to_string(ports)
    {
        out.insert(labels::CONTAINER_PORTS.into(), json);
    }
    if inputs.is_init {
        out.insert(labels::INIT_CONTAINER.into(), "true".into());
    }
    out
}

/// The container config of one container of a pod: environment (envFrom, env, downward API,
/// `$(VAR)` expansion), expanded command and args, security context and resources.
pub fn container_config(
    inputs: &ContainerInputs<'_>,
) -> Result<api::ContainerConfig, PodConfigError> {
    let pod = inputs.pod;
    let container = inputs.container;
    let (namespace, name, uid) = pod_identity(pod)?;
    let node = NodeResources::detect(&inputs.config.root_dir);
    let info = runtime_info(pod, inputs);
    let env = container_env(&EnvContext {
        pod,
        container,
        objects: inputs.objects,
        info: &info,
        node: &node,
    })?;
    let (command, args) = expand_command_and_args(container, &env);
    let mut container_labels = HashMap::new();
    container_labels.insert(labels::POD_NAME.to_string(), name.to_string());
    container_labels.insert(labels::POD_NAMESPACE.to_string(), namespace.to_string());
    container_labels.insert(labels::POD_UID.to_string(), uid.to_string());
    container_labels.insert(labels::CONTAINER_NAME.to_string(), container.name.clone());
    Ok(api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: container.name.clone(),
            attempt: inputs.restart_count,
        }),
        image: Some(api::ImageSpec {
            image: inputs.image_ref.to_string(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: env
            .vars()
            .iter()
            .map(|(key, value)| api::KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        mounts: inputs.mounts.clone(),
        labels: container_labels,
        annotations: container_annotations(pod, inputs),
        log_path: format!("{}/{}.log", container.name, inputs.restart_count),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(container_resources(pod, container, node.memory_bytes)),
            security_context: Some(container_security_context(
                pod,
                container,
                inputs.config,
                &inputs.image_user,
            )?),
        }),
        ..Default::default()
    })
}

/// Stable hash of a container spec: a change means the running container must be replaced.
/// Resources are left out (as the kubelet hashes without them): changing them alone does not
/// restart the container.
pub fn container_hash(container: &Container) -> String {
    let mut value = serde_json::to_value(container).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.remove("resources");
        map.remove("resizePolicy");
    }
    let json = serde_json::to_vec(&value).unwrap_or_default();
    hex::encode(&Sha256::digest(&json)[..8])
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
