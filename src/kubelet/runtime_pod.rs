//! What the runtime says about one pod: its sandboxes and containers, newest first, read back
//! through the CRI and the labels/annotations the sync loop put on them (so it survives an agent
//! restart). This is the `pod_status_from_runtime` input of the pure decision functions.

use crate::cri::{CriResult, RuntimeService, api};
use crate::kubelet::clock::from_unix_nanos;
use crate::kubelet::labels;
use k8s_openapi::api::core::v1::{ContainerPort, LifecycleHandler, Pod};
use std::collections::HashMap;
use std::time::SystemTime;

/// State of a container as the runtime reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunState {
    Created,
    Running,
    Exited,
    #[default]
    Unknown,
}

impl RunState {
    pub fn from_cri(state: i32) -> RunState {
        match api::ContainerState::try_from(state) {
            Ok(api::ContainerState::ContainerCreated) => RunState::Created,
            Ok(api::ContainerState::ContainerRunning) => RunState::Running,
            Ok(api::ContainerState::ContainerExited) => RunState::Exited,
            _ => RunState::Unknown,
        }
    }
}

/// One pod sandbox.
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxView {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    pub created_at: Option<SystemTime>,
    /// Primary pod IP, then additional ones.
    pub ips: Vec<String>,
    pub host_network: bool,
}

/// One container instance (a restart makes a new instance).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerView {
    pub id: String,
    pub name: String,
    pub sandbox_id: String,
    pub state: RunState,
    pub created_at: Option<SystemTime>,
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    pub exit_code: i32,
    /// Runtime reason for the exit (e.g. `OOMKilled`, `Error`, `Completed`).
    pub reason: String,
    /// Runtime message, replaced by the termination message when there is one.
    pub message: String,
    /// Image as requested in the spec.
    pub image: String,
    /// Image id the container runs.
    pub image_ref: String,
    /// Spec hash at creation ([`crate::kubelet::podconfig::container_hash`]).
    pub hash: Option<String>,
    pub restart_count: u32,
    pub is_init: bool,
    /// Log path relative to the sandbox log directory.
    pub log_path: String,
    /// Host path of the file mounted at terminationMessagePath, and the policy.
    pub termination_message_file: Option<String>,
    pub termination_message_policy: Option<String>,
    /// What the agent recorded at creation, to stop the container properly even when its pod
    /// is no longer known (removed while the agent was down): grace period, preStop hook, ports.
    pub grace_period: Option<i64>,
    pub pre_stop: Option<LifecycleHandler>,
    pub ports: Vec<ContainerPort>,
}

/// A pod as seen by the runtime.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimePod {
    pub uid: String,
    /// Newest first.
    pub sandboxes: Vec<SandboxView>,
    /// Newest first.
    pub containers: Vec<ContainerView>,
}

impl RuntimePod {
    /// The newest instance of the container called `name`.
    pub fn latest(&self, name: &str) -> Option<&ContainerView> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// Every instance of the container called `name`, newest first.
    pub fn instances<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a ContainerView> + 'a {
        self.containers.iter().filter(move |c| c.name == name)
    }

    pub fn running(&self) -> impl Iterator<Item = &ContainerView> {
        self.containers
            .iter()
            .filter(|c| c.state == RunState::Running)
    }

    /// The newest sandbox.
    pub fn latest_sandbox(&self) -> Option<&SandboxView> {
        self.sandboxes.first()
    }

    /// The sandbox containers run in: the newest, when it is ready.
    pub fn ready_sandbox(&self) -> Option<&SandboxView> {
        self.latest_sandbox().filter(|s| s.ready)
    }

    pub fn is_empty(&self) -> bool {
        self.sandboxes.is_empty() && self.containers.is_empty()
    }

    /// Where probes and hooks reach the pod: the node IP for hostNetwork pods, else the pod IP
    /// the runtime reported (127.0.0.1 for a loopback-only pod network), else the node IP.
    pub fn probe_host(&self, pod: Option<&Pod>, node_ip: &str) -> String {
        let host_network = pod
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        if host_network {
            return node_ip.to_string();
        }
        self.ready_sandbox()
            .or(self.latest_sandbox())
            .and_then(|s| s.ips.first().cloned())
            .unwrap_or_else(|| node_ip.to_string())
    }
}

fn uid_selector(uid: &str) -> HashMap<String, String> {
    HashMap::from([(labels::POD_UID.to_string(), uid.to_string())])
}

/// Reads the runtime's view of the pod `uid`.
pub async fn inspect_pod(runtime: &dyn RuntimeService, uid: &str) -> CriResult<RuntimePod> {
    let sandboxes = runtime
        .list_pod_sandbox(api::ListPodSandboxRequest {
            filter: Some(api::PodSandboxFilter {
                label_selector: uid_selector(uid),
                ..Default::default()
            }),
        })
        .await?
        .items;
    let mut sandbox_views = Vec::with_capacity(sandboxes.len());
    for sandbox in sandboxes {
        sandbox_views.push(inspect_sandbox(runtime, sandbox).await?);
    }
    sandbox_views.sort_by_key(|s| std::cmp::Reverse((s.created_at, s.attempt)));

    let containers = runtime
        .list_containers(api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                label_selector: uid_selector(uid),
                ..Default::default()
            }),
        })
        .await?
        .containers;
    let mut views = Vec::with_capacity(containers.len());
    for container in containers {
        let status = match runtime
            .container_status(api::ContainerStatusRequest {
                container_id: container.id.clone(),
                verbose: false,
            })
            .await
        {
            Ok(resp) => resp.status,
            // Removed between list and status: it is gone, not an error.
            Err(status) if status.code() == tonic::Code::NotFound => continue,
            Err(status) => return Err(status),
        };
        if let Some(status) = status {
            views.push(container_view(&container.pod_sandbox_id, status));
        }
    }
    views.sort_by(|a, b| {
        (b.created_at, b.restart_count, &b.id).cmp(&(a.created_at, a.restart_count, &a.id))
    });
    Ok(RuntimePod {
        uid: uid.to_string(),
        sandboxes: sandbox_views,
        containers: views,
    })
}

async fn inspect_sandbox(
    runtime: &dyn RuntimeService,
    sandbox: api::PodSandbox,
) -> CriResult<SandboxView> {
    let mut view = SandboxView {
        attempt: sandbox.metadata.as_ref().map_or(0, |m| m.attempt),
        ready: sandbox.state == api::PodSandboxState::SandboxReady as i32,
        created_at: from_unix_nanos(sandbox.created_at),
        ips: Vec::new(),
        host_network: false,
        id: sandbox.id,
    };
    match runtime
        .pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: view.id.clone(),
            verbose: false,
        })
        .await
    {
        Ok(resp) => {
            if let Some(status) = resp.status {
                view.ready = status.state == api::PodSandboxState::SandboxReady as i32;
                if let Some(network) = status.network {
                    view.ips = std::iter::once(network.ip)
                        .chain(network.additional_ips.into_iter().map(|ip| ip.ip))
                        .filter(|ip| !ip.is_empty())
                        .collect();
                }
                view.host_network = status
                    .linux
                    .and_then(|l| l.namespaces)
                    .and_then(|n| n.options)
                    .is_some_and(|o| o.network == api::NamespaceMode::Node as i32);
            }
        }
        Err(status) if status.code() == tonic::Code::NotFound => view.ready = false,
        Err(status) => return Err(status),
    }
    Ok(view)
}

/// Builds the view of one container from its CRI status.
pub fn container_view(sandbox_id: &str, status: api::ContainerStatus) -> ContainerView {
    let annotations = &status.annotations;
    let name = status
        .labels
        .get(labels::CONTAINER_NAME)
        .cloned()
        .or_else(|| status.metadata.as_ref().map(|m| m.name.clone()))
        .unwrap_or_default();
    let restart_count = annotations
        .get(labels::CONTAINER_RESTART_COUNT)
        .and_then(|v| v.parse().ok())
        .or_else(|| status.metadata.as_ref().map(|m| m.attempt))
        .unwrap_or(0);
    let termination_path = annotations.get(labels::TERMINATION_MESSAGE_PATH);
    let termination_message_file = termination_path.and_then(|path| {
        status
            .mounts
            .iter()
            .find(|m| &m.container_path == path)
            .map(|m| m.host_path.clone())
    });
    ContainerView {
        name,
        sandbox_id: sandbox_id.to_string(),
        state: RunState::from_cri(status.state),
        created_at: from_unix_nanos(status.created_at),
        started_at: from_unix_nanos(status.started_at),
        finished_at: from_unix_nanos(status.finished_at),
        exit_code: status.exit_code,
        reason: status.reason,
        message: status.message,
        image: status
            .image
            .as_ref()
            .map(|i| {
                if i.user_specified_image.is_empty() {
                    i.image.clone()
                } else {
                    i.user_specified_image.clone()
                }
            })
            .unwrap_or_default(),
        image_ref: if status.image_id.is_empty() {
            status.image_ref
        } else {
            status.image_id
        },
        hash: annotations.get(labels::CONTAINER_HASH).cloned(),
        restart_count,
        is_init: annotations
            .get(labels::INIT_CONTAINER)
            .is_some_and(|v| v == "true"),
        log_path: status.log_path,
        termination_message_file,
        termination_message_policy: annotations.get(labels::TERMINATION_MESSAGE_POLICY).cloned(),
        grace_period: annotations
            .get(labels::POD_DELETION_GRACE_PERIOD)
            .or_else(|| annotations.get(labels::POD_TERMINATION_GRACE_PERIOD))
            .and_then(|v| v.parse().ok()),
        pre_stop: annotations
            .get(labels::CONTAINER_PRESTOP_HANDLER)
            .and_then(|v| serde_json::from_str(v).ok()),
        ports: annotations
            .get(labels::CONTAINER_PORTS)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default(),
        id: status.id,
    }
}
