//! Stopping containers and pods: the preStop hook within the grace period, then StopContainer
//! with what is left of it; sandboxes after their containers.

use crate::cri::api;
use crate::kubelet::actions::{KillAction, KillReason};
use crate::kubelet::executor::{Executor, SyncAction, SyncError, SyncResult, reason, sync_error};
use crate::kubelet::prober::handlers::Target;
use crate::kubelet::runtime_pod::{ContainerView, RunState, RuntimePod};
use k8s_openapi::api::core::v1::Pod;
use std::time::Duration;

/// The kubelet never gives a container less than this after its preStop hook.
const MIN_GRACE_SECONDS: i64 = 2;
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Grace period to kill a container with: an explicit override, the pod's deletion grace
/// period, its terminationGracePeriodSeconds, what the container recorded, or 30 s.
pub fn grace_period(pod: Option<&Pod>, view: &ContainerView, explicit: Option<i64>) -> i64 {
    explicit
        .or_else(|| pod.and_then(|p| p.metadata.deletion_grace_period_seconds))
        .or_else(|| {
            pod.and_then(|p| p.spec.as_ref())
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .or(view.grace_period)
        .unwrap_or(DEFAULT_GRACE_SECONDS)
        .max(0)
}

/// A failed liveness/startup probe may shorten the grace period
/// (`probe.terminationGracePeriodSeconds`).
pub(crate) fn probe_grace_period(pod: &Pod, kill: &KillAction) -> Option<i64> {
    let container = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == kill.name)?;
    let probe = match kill.reason {
        KillReason::LivenessFailed => container.liveness_probe.as_ref(),
        KillReason::StartupFailed => container.startup_probe.as_ref(),
        _ => None,
    };
    probe.and_then(|p| p.termination_grace_period_seconds)
}

impl Executor {
    /// Stops one container: its preStop hook first (within the grace period), then
    /// StopContainer with what is left of the grace period (at least 2 s).
    pub async fn kill_container(
        &self,
        pod: Option<&Pod>,
        host: &str,
        view: &ContainerView,
        message: &str,
        grace_override: Option<i64>,
    ) -> Result<(), SyncError> {
        let mut grace = grace_period(pod, view, grace_override);
        let spec_container = pod.and_then(|p| p.spec.as_ref()).and_then(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == view.name)
        });
        let pre_stop = spec_container
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.clone())
            .or_else(|| view.pre_stop.clone());
        tracing::info!(container = %view.name, id = %view.id, grace, %message, "killing container");
        if let Some(pod) = pod.filter(|_| view.state == RunState::Running) {
            let note = match message {
                "" | "Stopping pod" => format!("Stopping container {}", view.name),
                message => message.to_string(),
            };
            self.events.normal(
                pod,
                Some(&view.name),
                crate::kubelet::events::reason::KILLING,
                note,
            );
        }
        if let Some(hook) = pre_stop.filter(|_| view.state == RunState::Running && grace > 0) {
            let started = self.clock.now();
            let ports = spec_container
                .and_then(|c| c.ports.clone())
                .unwrap_or_else(|| view.ports.clone());
            let target = Target {
                container_id: &view.id,
                host,
                ports: &ports,
            };
            let timeout = Duration::from_secs(grace.unsigned_abs());
            if let Err(err) = self
                .handlers
                .hook(self.runtime.as_ref(), &hook, &target, timeout)
                .await
            {
                tracing::warn!(container = %view.name, error = %err, "preStop hook failed");
                if let Some(pod) = pod {
                    self.events.warning(
                        pod,
                        Some(&view.name),
                        crate::kubelet::events::reason::FAILED_PRE_STOP_HOOK,
                        format!("PreStopHook failed: {err}"),
                    );
                }
            }
            let spent = self
                .clock
                .now()
                .saturating_duration_since(started)
                .as_secs();
            grace = (grace - i64::try_from(spent).unwrap_or(i64::MAX)).max(MIN_GRACE_SECONDS);
        }
        match self
            .runtime
            .stop_container(api::StopContainerRequest {
                container_id: view.id.clone(),
                timeout: grace,
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(status) if status.code() == tonic::Code::NotFound => Ok(()),
            Err(status) => Err(sync_error(reason::KILL_CONTAINER_ERROR, status.message())),
        }
    }

    /// Stops every running container of the pod (concurrently) and then its ready sandboxes.
    pub async fn kill_pod(
        &self,
        pod: Option<&Pod>,
        rt: &RuntimePod,
        grace_override: Option<i64>,
    ) -> Vec<SyncResult> {
        let host = rt.probe_host(pod, &self.config.node_ip.to_string());
        let host = host.as_str();
        let kills = rt
            .containers
            .iter()
            .filter(|c| matches!(c.state, RunState::Running | RunState::Unknown))
            .map(|view| async move {
                let outcome = self
                    .kill_container(pod, host, view, "Stopping pod", grace_override)
                    .await;
                SyncResult::new(SyncAction::KillContainer, &view.name, outcome)
            });
        let mut results = futures::future::join_all(kills).await;
        if results.iter().any(|r| r.error.is_some()) {
            return results;
        }
        for sandbox in rt.sandboxes.iter().filter(|s| s.ready) {
            let outcome = self
                .runtime
                .stop_pod_sandbox(api::StopPodSandboxRequest {
                    pod_sandbox_id: sandbox.id.clone(),
                })
                .await
                .map(|_| ())
                .or_else(|s| match s.code() {
                    tonic::Code::NotFound => Ok(()),
                    _ => Err(sync_error(reason::KILL_POD_SANDBOX_ERROR, s.message())),
                });
            results.push(SyncResult::new(SyncAction::KillPod, &sandbox.id, outcome));
        }
        results
    }

    /// Removes every container and sandbox of a killed pod (best effort; errors are logged).
    pub async fn remove_pod(&self, rt: &RuntimePod) {
        for container in &rt.containers {
            if let Err(status) = self
                .runtime
                .remove_container(api::RemoveContainerRequest {
                    container_id: container.id.clone(),
                })
                .await
            {
                tracing::warn!(id = %container.id, error = %status, "cannot remove container");
            }
        }
        for sandbox in &rt.sandboxes {
            if let Err(status) = self
                .runtime
                .remove_pod_sandbox(api::RemovePodSandboxRequest {
                    pod_sandbox_id: sandbox.id.clone(),
                })
                .await
            {
                tracing::warn!(id = %sandbox.id, error = %status, "cannot remove pod sandbox");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_period_precedence() {
        let view = ContainerView {
            grace_period: Some(7),
            ..Default::default()
        };
        let pod = |deletion: Option<i64>, termination: Option<i64>| -> Pod {
            let mut pod = Pod::default();
            pod.metadata.deletion_grace_period_seconds = deletion;
            pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
                termination_grace_period_seconds: termination,
                ..Default::default()
            });
            pod
        };
        assert_eq!(grace_period(None, &ContainerView::default(), None), 30);
        assert_eq!(grace_period(None, &view, None), 7);
        assert_eq!(grace_period(Some(&pod(None, Some(12))), &view, None), 12);
        assert_eq!(grace_period(Some(&pod(Some(3), Some(12))), &view, None), 3);
        assert_eq!(
            grace_period(Some(&pod(Some(3), Some(12))), &view, Some(1)),
            1
        );
        assert_eq!(grace_period(None, &view, Some(-5)), 0);
    }

    #[test]
    fn failed_probes_may_shorten_the_grace_period() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "spec": {"containers": [{"name": "c", "livenessProbe": {
                "exec": {"command": ["x"]}, "terminationGracePeriodSeconds": 4}}]}
        }))
        .unwrap();
        let kill = |reason| KillAction {
            container_id: "id".into(),
            name: "c".into(),
            reason,
            message: String::new(),
        };
        assert_eq!(
            probe_grace_period(&pod, &kill(KillReason::LivenessFailed)),
            Some(4)
        );
        assert_eq!(
            probe_grace_period(&pod, &kill(KillReason::StartupFailed)),
            None
        );
        assert_eq!(
            probe_grace_period(&pod, &kill(KillReason::SpecChanged)),
            None
        );
    }
}
