//! Executes a [`PodActions`] plan against the CRI services and reports one [`SyncResult`] per
//! action: kill (preStop hook, grace period), sandbox creation, image pulls by pull policy with
//! pull back-off, container creation and start, postStart hooks.

use crate::cri::{ImageService, RuntimeService, api};
use crate::kubelet::actions::PodActions;
use crate::kubelet::backoff::{Backoff, BackoffKey};
use crate::kubelet::clock::Clock;
use crate::kubelet::config::AgentConfig;
use crate::kubelet::environment::{ContainerMounts, PodEnvironment};
use crate::kubelet::events::{PodEvents, reason as event};
use crate::kubelet::podconfig::volumes::termination::termination_log_mount;
use crate::kubelet::podconfig::{
    ContainerInputs, ImageUser, ObjectSource, container_config, pod_identity, sandbox_config,
};
use crate::kubelet::prober::handlers::{Handlers, Target};
use crate::kubelet::runtime_pod::{ContainerView, RunState, RuntimePod};
use k8s_openapi::api::core::v1::{Container, Pod};
use std::sync::Arc;
use std::time::Duration;

/// Waiting reasons and sync error reasons (the kubelet's names).
pub mod reason {
    pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
    pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
    pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
    pub const INVALID_IMAGE_NAME: &str = "InvalidImageName";
    pub const CREATE_CONTAINER_CONFIG_ERROR: &str = "CreateContainerConfigError";
    pub const CREATE_CONTAINER_ERROR: &str = "CreateContainerError";
    pub const RUN_CONTAINER_ERROR: &str = "RunContainerError";
    pub const POST_START_HOOK_ERROR: &str = "PostStartHookError";
    pub const KILL_CONTAINER_ERROR: &str = "KillContainerError";
    pub const CREATE_POD_SANDBOX_ERROR: &str = "CreatePodSandboxError";
    pub const KILL_POD_SANDBOX_ERROR: &str = "KillPodSandboxError";
    pub const FAILED_MOUNT: &str = "FailedMount";
}

/// postStart hooks get the kubelet's default timeout.
const POST_START_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncAction {
    KillPod,
    KillContainer,
    CreatePodSandbox,
    SetupVolumes,
    StartContainer,
}

/// Why an action failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct SyncError {
    pub reason: &'static str,
    pub message: String,
}

pub(crate) fn sync_error(reason: &'static str, message: impl Into<String>) -> SyncError {
    SyncError {
        reason,
        message: message.into(),
    }
}

/// The result of one action: what, on which target (container name or sandbox), and how it went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncResult {
    pub action: SyncAction,
    pub target: String,
    pub error: Option<SyncError>,
}

impl SyncResult {
    pub(crate) fn new(action: SyncAction, target: &str, outcome: Result<(), SyncError>) -> Self {
        SyncResult {
            action,
            target: target.to_string(),
            error: outcome.err(),
        }
    }
}

/// Default image pull policy: Always for `:latest` or untagged images, else IfNotPresent.
pub fn pull_policy(container: &Container) -> &str {
    if let Some(policy) = container.image_pull_policy.as_deref() {
        return policy;
    }
    let image = container.image.as_deref().unwrap_or_default();
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

/// Executes plans; one per agent, shared by the pod workers.
pub struct Executor {
    pub runtime: Arc<dyn RuntimeService>,
    pub images: Arc<dyn ImageService>,
    pub environment: Arc<dyn PodEnvironment>,
    pub objects: Arc<dyn ObjectSource>,
    pub config: Arc<AgentConfig>,
    pub clock: Arc<dyn Clock>,
    pub handlers: Handlers,
    /// Pulling, Created, Started, Killing... as kubelet records them.
    pub events: Arc<PodEvents>,
}

/// The sandbox containers are started in.
struct SandboxContext {
    id: String,
    config: api::PodSandboxConfig,
    pod_ip: Option<String>,
}

impl Executor {
    /// Rewrites the volumes of a running pod from the current objects (unchanged files stay).
    pub fn refresh_volumes(&self, pod: &Pod) {
        if let Err(message) = self.environment.setup_volumes(pod, self.objects.as_ref()) {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            tracing::warn!(pod = %uid, "cannot refresh the pod's volumes: {message}");
        }
    }

    /// Runs `actions` for `pod` whose runtime state is `rt`. Pull failures and retries are
    /// recorded in `pull_backoff`.
    pub async fn execute(
        &self,
        pod: &Pod,
        rt: &RuntimePod,
        actions: &PodActions,
        pull_backoff: &mut Backoff,
    ) -> Vec<SyncResult> {
        let mut results = Vec::new();
        if actions.kill_pod {
            results.extend(self.kill_pod(Some(pod), rt, None).await);
            if results.iter().any(|r| r.error.is_some()) {
                return results;
            }
        } else {
            let host = rt.probe_host(Some(pod), &self.config.node_ip.to_string());
            let host = host.as_str();
            let kills = actions.containers_to_kill.iter().filter_map(|kill| {
                let view = rt.containers.iter().find(|c| c.id == kill.container_id)?;
                let grace = crate::kubelet::kill::probe_grace_period(pod, kill);
                Some(async move {
                    let outcome = self
                        .kill_container(Some(pod), host, view, &kill.message, grace)
                        .await;
                    SyncResult::new(SyncAction::KillContainer, &kill.name, outcome)
                })
            });
            results.extend(futures::future::join_all(kills).await);
        }
        if actions.create_sandbox.is_none()
            && actions.next_init_container.is_none()
            && actions.containers_to_start.is_empty()
        {
            return results;
        }

        let mounts = match self.environment.setup_volumes(pod, self.objects.as_ref()) {
            Ok(mounts) => mounts,
            Err(message) => {
                self.events
                    .warning(pod, None, event::FAILED_MOUNT, message.clone());
                results.push(SyncResult::new(
                    SyncAction::SetupVolumes,
                    pod.metadata.name.as_deref().unwrap_or_default(),
                    Err(sync_error(reason::FAILED_MOUNT, message)),
                ));
                return results;
            }
        };
        let sandbox = match self.sandbox_for(pod, rt, actions).await {
            Ok(sandbox) => sandbox,
            Err(error) => {
                self.events.warning(
                    pod,
                    None,
                    event::FAILED_CREATE_POD_SANDBOX,
                    format!("Failed to create pod sandbox: {}", error.message),
                );
                results.push(SyncResult {
                    action: SyncAction::CreatePodSandbox,
                    target: pod.metadata.name.clone().unwrap_or_default(),
                    error: Some(error),
                });
                return results;
            }
        };
        if actions.create_sandbox.is_some() {
            results.push(SyncResult::new(
                SyncAction::CreatePodSandbox,
                &sandbox.id,
                Ok(()),
            ));
        }

        let spec = pod.spec.as_ref();
        if let Some(init) = &actions.next_init_container {
            let container = spec
                .and_then(|s| s.init_containers.as_ref())
                .and_then(|inits| inits.iter().find(|c| c.name == init.name));
            if let Some(container) = container {
                let outcome = self
                    .start_container(pod, container, true, &sandbox, rt, &mounts, pull_backoff)
                    .await;
                self.record_start_failure(pod, &container.name, &outcome);
                results.push(SyncResult::new(
                    SyncAction::StartContainer,
                    &init.name,
                    outcome,
                ));
            }
            return results;
        }
        for start in &actions.containers_to_start {
            let Some(container) =
                spec.and_then(|s| s.containers.iter().find(|c| c.name == start.name))
            else {
                continue;
            };
            let outcome = self
                .start_container(pod, container, false, &sandbox, rt, &mounts, pull_backoff)
                .await;
            self.record_start_failure(pod, &container.name, &outcome);
            results.push(SyncResult::new(
                SyncAction::StartContainer,
                &start.name,
                outcome,
            ));
        }
        results
    }

    async fn sandbox_for(
        &self,
        pod: &Pod,
        rt: &RuntimePod,
        actions: &PodActions,
    ) -> Result<SandboxContext, SyncError> {
        let config_error = |e: crate::kubelet::podconfig::PodConfigError| {
            sync_error(reason::CREATE_POD_SANDBOX_ERROR, e.to_string())
        };
        let Some(attempt) = actions.create_sandbox else {
            let ready = rt
                .ready_sandbox()
                .filter(|s| Some(&s.id) == actions.sandbox_id.as_ref())
                .ok_or_else(|| {
                    sync_error(
                        reason::CREATE_POD_SANDBOX_ERROR,
                        "the pod sandbox is not ready",
                    )
                })?;
            return Ok(SandboxContext {
                id: ready.id.clone(),
                config: sandbox_config(pod, &self.config, ready.attempt).map_err(config_error)?,
                pod_ip: ready.ips.first().cloned(),
            });
        };
        let config = sandbox_config(pod, &self.config, attempt).map_err(config_error)?;
        let (_, _, uid) = pod_identity(pod).map_err(config_error)?;
        if attempt > 0 {
            self.events.normal(
                pod,
                None,
                event::SANDBOX_CHANGED,
                "Pod sandbox changed, it will be killed and re-created.".into(),
            );
        }
        for dir in [
            self.config.pod_dir(uid),
            config.log_directory.clone().into(),
        ] {
            std::fs::create_dir_all(&dir).map_err(|e| {
                sync_error(
                    reason::CREATE_POD_SANDBOX_ERROR,
                    format!("creating {}: {e}", dir.display()),
                )
            })?;
        }
        let id = self
            .runtime
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .map_err(|s| sync_error(reason::CREATE_POD_SANDBOX_ERROR, s.message()))?
            .pod_sandbox_id;
        tracing::info!(pod = %uid, sandbox = %id, attempt, "created pod sandbox");
        let pod_ip = self
            .runtime
            .pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: id.clone(),
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.status)
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .filter(|ip| !ip.is_empty());
        Ok(SandboxContext { id, config, pod_ip })
    }

    /// Resolves the image of `container` by its pull policy; returns the image reference to run.
    async fn ensure_image(
        &self,
        pod: &Pod,
        container: &Container,
        pull_backoff: &mut Backoff,
    ) -> Result<String, SyncError> {
        let image = container
            .image
            .as_deref()
            .filter(|i| !i.trim().is_empty())
            .ok_or_else(|| sync_error(reason::INVALID_IMAGE_NAME, "the container has no image"))?;
        let spec = api::ImageSpec {
            image: image.to_string(),
            ..Default::default()
        };
        let present = self
            .images
            .image_status(api::ImageStatusRequest {
                image: Some(spec.clone()),
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.image)
            .map(|i| i.id);
        let policy = pull_policy(container);
        let name = Some(container.name.as_str());
        match (policy, present) {
            ("Never", Some(id)) | ("IfNotPresent", Some(id)) => {
                self.events.normal(
                    pod,
                    name,
                    event::PULLED,
                    format!("Container image {image:?} already present on machine"),
                );
                return Ok(id);
            }
            ("Never", None) => {
                let message =
                    format!("Container image {image:?} is not present with pull policy of Never");
                self.events
                    .warning(pod, name, event::ERR_IMAGE_NEVER_PULL, message.clone());
                return Err(sync_error(reason::ERR_IMAGE_NEVER_PULL, message));
            }
            _ => {}
        }
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let key = BackoffKey::new(uid, &container.name, image);
        let now = self.clock.wall();
        if let Some(failed_at) = pull_backoff.last_failure(&key) {
            if pull_backoff.remaining(&key, failed_at, now).is_some() {
                self.events.normal(
                    pod,
                    name,
                    event::BACK_OFF,
                    format!("Back-off pulling image {image:?}"),
                );
                return Err(sync_error(
                    reason::IMAGE_PULL_BACK_OFF,
                    format!("Back-off pulling image {image:?}"),
                ));
            }
            pull_backoff.record_retry(&key, failed_at, now);
        }
        let auth = self
            .environment
            .pull_auth(pod, image, self.objects.as_ref());
        self.events.normal(
            pod,
            name,
            event::PULLING,
            format!("Pulling image {image:?}"),
        );
        let pull_started = self.clock.now();
        match self
            .images
            .pull_image(api::PullImageRequest {
                image: Some(spec),
                auth,
                sandbox_config: None,
            })
            .await
        {
            Ok(resp) => {
                pull_backoff.reset(&key);
                tracing::info!(pod = %uid, image, "pulled image");
                let took = self.clock.now().saturating_duration_since(pull_started);
                self.events.normal(
                    pod,
                    name,
                    event::PULLED,
                    format!("Successfully pulled image {image:?} in {took:.3?}"),
                );
                Ok(resp.image_ref)
            }
            Err(status) => {
                pull_backoff.record_failure(&key, self.clock.wall());
                self.events.warning(
                    pod,
                    name,
                    event::FAILED,
                    format!("Failed to pull image {image:?}: {}", status.message()),
                );
                Err(sync_error(
                    reason::ERR_IMAGE_PULL,
                    format!("failed to pull image {image:?}: {}", status.message()),
                ))
            }
        }
    }

    /// Records a failed start as kubelet's `Failed` event ("Error: ...").
    fn record_start_failure(&self, pod: &Pod, container: &str, outcome: &Result<(), SyncError>) {
        let Err(error) = outcome else { return };
        let note = match error.reason {
            // The pull's own events said more already; kubelet adds the reason.
            reason::ERR_IMAGE_PULL | reason::IMAGE_PULL_BACK_OFF => {
                format!("Error: {}", error.reason)
            }
            _ => format!("Error: {}", error.message),
        };
        self.events
            .warning(pod, Some(container), event::FAILED, note);
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_container(
        &self,
        pod: &Pod,
        container: &Container,
        is_init: bool,
        sandbox: &SandboxContext,
        rt: &RuntimePod,
        mounts: &ContainerMounts,
        pull_backoff: &mut Backoff,
    ) -> Result<(), SyncError> {
        let image_ref = self.ensure_image(pod, container, pull_backoff).await?;
        let config_error =
            |message: String| sync_error(reason::CREATE_CONTAINER_CONFIG_ERROR, message);
        let (_, _, uid) = pod_identity(pod).map_err(|e| config_error(e.to_string()))?;
        let restart_count = rt
            .latest(&container.name)
            .map_or(0, |c| c.restart_count.saturating_add(1));
        let mut container_mounts = mounts.get(&container.name).cloned().unwrap_or_default();
        if let Some((mount, _)) = termination_log_mount(&self.config, uid, container, restart_count)
            .map_err(|e| config_error(e.to_string()))?
        {
            container_mounts.push(mount);
        }
        let image_user = self
            .images
            .image_status(api::ImageStatusRequest {
                image: Some(api::ImageSpec {
                    image: image_ref.clone(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .map(|r| ImageUser::of(r.image.as_ref()))
            .map_err(|s| config_error(format!("image status of {image_ref}: {}", s.message())))?;
        let inputs = ContainerInputs {
            pod,
            container,
            image_ref: &image_ref,
            image_user,
            restart_count,
            is_init,
            pod_ip: sandbox.pod_ip.as_deref(),
            mounts: container_mounts,
            objects: self.objects.as_ref(),
            config: &self.config,
        };
        let config = container_config(&inputs).map_err(|e| config_error(e.to_string()))?;
        let log_dir = std::path::Path::new(&sandbox.config.log_directory).join(&container.name);
        std::fs::create_dir_all(&log_dir)
            .map_err(|e| config_error(format!("creating {}: {e}", log_dir.display())))?;

        let id = self
            .runtime
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: sandbox.id.clone(),
                config: Some(config),
                sandbox_config: Some(sandbox.config.clone()),
            })
            .await
            .map_err(|s| sync_error(reason::CREATE_CONTAINER_ERROR, s.message()))?
            .container_id;
        let name = Some(container.name.as_str());
        self.events.normal(
            pod,
            name,
            event::CREATED,
            format!("Created container: {}", container.name),
        );
        self.runtime
            .start_container(api::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .map_err(|s| sync_error(reason::RUN_CONTAINER_ERROR, s.message()))?;
        tracing::info!(pod = %uid, container = %container.name, id = %id, restart_count, "started container");
        self.events.normal(
            pod,
            name,
            event::STARTED,
            format!("Started container {}", container.name),
        );

        if let Some(hook) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
        {
            let target = Target {
                container_id: &id,
                host: sandbox.pod_ip.as_deref().unwrap_or("127.0.0.1"),
                ports: container.ports.as_deref().unwrap_or_default(),
            };
            if let Err(message) = self
                .handlers
                .hook(self.runtime.as_ref(), hook, &target, POST_START_TIMEOUT)
                .await
            {
                let view = ContainerView {
                    id: id.clone(),
                    name: container.name.clone(),
                    state: RunState::Running,
                    ..Default::default()
                };
                self.events.warning(
                    pod,
                    name,
                    event::FAILED_POST_START_HOOK,
                    format!("PostStartHook failed: {message}"),
                );
                let kill_message = format!("FailedPostStartHook: {message}");
                let _ = self
                    .kill_container(Some(pod), target.host, &view, &kill_message, None)
                    .await;
                return Err(sync_error(reason::POST_START_HOOK_ERROR, message));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(image: &str, policy: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn default_pull_policy() {
        let cases = [
            ("busybox", None, "Always"),
            ("busybox:latest", None, "Always"),
            ("busybox:1.36", None, "IfNotPresent"),
            ("localhost:5000/busybox", None, "Always"),
            ("localhost:5000/busybox:1", None, "IfNotPresent"),
            ("busybox@sha256:abcd", None, "IfNotPresent"),
            ("busybox", Some("Never"), "Never"),
        ];
        for (image, policy, want) in cases {
            assert_eq!(pull_policy(&container(image, policy)), want, "{image}");
        }
    }
}
