//! `compute_pod_actions`: what must happen to bring a pod's runtime state to its spec (pure).
//!
//! Follows the kubelet's `computePodActions`: (re)create the sandbox when there is none ready
//! (unless a restartPolicy=Never pod already ran), run init containers strictly one by one (each
//! must succeed; a failure restarts it, or fails the pod under restartPolicy=Never), then start
//! the main containers by restart policy, kill those whose spec hash changed or whose
//! liveness/startup probe failed, and kill the whole pod when nothing is left to run. Restarts of
//! containers that exited wait out their back-off ("CrashLoopBackOff").

use crate::kubelet::backoff::{Backoff, BackoffKey};
use crate::kubelet::podconfig::container_hash;
use crate::kubelet::prober::results::{ProbeKind, ProbeResults};
use crate::kubelet::runtime_pod::{ContainerView, RunState, RuntimePod, SandboxView};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use std::collections::HashSet;
use std::time::{Duration, SystemTime};

/// Waiting reason of a container held back by its restart back-off.
pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";

/// `spec.restartPolicy` (default Always).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    pub fn of(pod: &Pod) -> RestartPolicy {
        match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        }
    }
}

/// Why a container is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillReason {
    SpecChanged,
    LivenessFailed,
    StartupFailed,
    NotInSpec,
    /// An older instance still running next to a newer one.
    Superseded,
    /// The runtime does not know the state; stop it before starting a new instance.
    UnknownState,
}

impl KillReason {
    pub fn describe(self, name: &str) -> String {
        match self {
            KillReason::SpecChanged => format!("Container {name} definition changed"),
            KillReason::LivenessFailed => format!("Container {name} failed liveness probe"),
            KillReason::StartupFailed => format!("Container {name} failed startup probe"),
            KillReason::NotInSpec => format!("Container {name} is not in the pod spec"),
            KillReason::Superseded => format!("Container {name} has a newer instance"),
            KillReason::UnknownState => format!("Container {name} is in an unknown state"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillAction {
    pub container_id: String,
    pub name: String,
    pub reason: KillReason,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartAction {
    pub name: String,
    /// The previous instance exited: this start is a back-off retry.
    pub after_exit: bool,
}

/// A container that should run again but is in back-off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackingOff {
    pub name: String,
    pub is_init: bool,
    pub retry_in: Duration,
    pub message: String,
}

/// The plan for one pod; executed by [`crate::kubelet::executor`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every container and the sandbox (before re-creating it, or because the pod is done).
    pub kill_pod: bool,
    /// Create a new sandbox with this attempt number.
    pub create_sandbox: Option<u32>,
    /// The ready sandbox containers start in (when no new one is created).
    pub sandbox_id: Option<String>,
    pub next_init_container: Option<StartAction>,
    /// Main containers to start, in spec order.
    pub containers_to_start: Vec<StartAction>,
    pub containers_to_kill: Vec<KillAction>,
    pub backing_off: Vec<BackingOff>,
}

impl PodActions {
    /// When the pod must be synced again for a back-off to end.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.backing_off.iter().map(|b| b.retry_in).min()
    }

    pub fn is_noop(&self) -> bool {
        !self.kill_pod
            && self.create_sandbox.is_none()
            && self.next_init_container.is_none()
            && self.containers_to_start.is_empty()
            && self.containers_to_kill.is_empty()
    }
}

/// Whether the container `latest` is the newest instance of should run (again).
pub fn should_restart(pod: &Pod, latest: Option<&ContainerView>) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(latest) = latest else {
        return true;
    };
    match latest.state {
        RunState::Running => false,
        RunState::Created | RunState::Unknown => true,
        RunState::Exited => match RestartPolicy::of(pod) {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => latest.exit_code != 0,
            RestartPolicy::Always => true,
        },
    }
}

/// An init container that did not succeed.
pub fn is_init_failed(status: &ContainerView) -> bool {
    match status.state {
        RunState::Exited => status.exit_code != 0,
        RunState::Unknown => true,
        RunState::Created | RunState::Running => false,
    }
}

/// Progress of the init containers.
#[derive(Debug, PartialEq)]
pub enum InitProgress<'a> {
    /// All init containers succeeded (or there are none).
    Done,
    /// One is running.
    Running,
    /// `next` must run; `last_failed` is the newest failed instance, when one failed.
    Next {
        next: &'a Container,
        last_failed: Option<&'a ContainerView>,
    },
}

/// Which init container runs next (the kubelet's `findNextInitContainerToRun`).
pub fn init_progress<'a>(spec: &'a PodSpec, rt: &'a RuntimePod) -> InitProgress<'a> {
    let inits: &[Container] = spec.init_containers.as_deref().unwrap_or_default();
    if inits.is_empty() {
        return InitProgress::Done;
    }
    // A running main container means initialization completed earlier.
    if spec.containers.iter().any(|c| {
        rt.latest(&c.name)
            .is_some_and(|s| s.state == RunState::Running)
    }) {
        return InitProgress::Done;
    }
    for init in inits.iter().rev() {
        if let Some(status) = rt.latest(&init.name).filter(|s| is_init_failed(s)) {
            return InitProgress::Next {
                next: init,
                last_failed: Some(status),
            };
        }
    }
    for (index, init) in inits.iter().enumerate().rev() {
        match rt.latest(&init.name).map(|s| s.state) {
            Some(RunState::Running) => return InitProgress::Running,
            Some(RunState::Exited) => {
                return match inits.get(index + 1) {
                    None => InitProgress::Done,
                    Some(next) => InitProgress::Next {
                        next,
                        last_failed: None,
                    },
                };
            }
            _ => {}
        }
    }
    InitProgress::Next {
        next: &inits[0],
        last_failed: None,
    }
}

/// Whether the sandbox must be (re)created, with the attempt number of the new one.
fn sandbox_changed(pod: &Pod, rt: &RuntimePod) -> (bool, u32) {
    let Some(latest) = rt.latest_sandbox() else {
        return (true, 0);
    };
    let next = latest.attempt.saturating_add(1);
    let ready = rt.sandboxes.iter().filter(|s| s.ready).count();
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    if ready > 1 || !latest.ready || latest.host_network != host_network {
        return (true, next);
    }
    (false, latest.attempt)
}

fn has_live(rt: &RuntimePod) -> bool {
    rt.sandboxes.iter().any(|s: &SandboxView| s.ready)
        || rt
            .containers
            .iter()
            .any(|c| matches!(c.state, RunState::Running | RunState::Unknown))
}

enum Gate {
    Start(StartAction),
    Wait(BackingOff),
}

/// Starts `container` now, or reports it in back-off when its previous instance exited too
/// recently.
fn gate(
    pod: &Pod,
    uid: &str,
    container: &Container,
    is_init: bool,
    rt: &RuntimePod,
    now: SystemTime,
    backoff: &Backoff,
) -> Gate {
    let previous = rt
        .latest(&container.name)
        .filter(|c| c.state == RunState::Exited);
    let Some(previous) = previous else {
        return Gate::Start(StartAction {
            name: container.name.clone(),
            after_exit: false,
        });
    };
    let key = BackoffKey::new(
        uid,
        &container.name,
        container.image.as_deref().unwrap_or_default(),
    );
    let failed_at = previous
        .finished_at
        .or(previous.started_at)
        .or(previous.created_at)
        .unwrap_or(now);
    match backoff.remaining(&key, failed_at, now) {
        Some(retry_in) => {
            let delay = backoff.delay_for(&key, failed_at);
            let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            Gate::Wait(BackingOff {
                name: container.name.clone(),
                is_init,
                retry_in,
                message: format!(
                    "back-off {}s restarting failed container={} pod={pod_name}_{namespace}({uid})",
                    delay.as_secs(),
                    container.name
                ),
            })
        }
        None => Gate::Start(StartAction {
            name: container.name.clone(),
            after_exit: true,
        }),
    }
}

fn push_gate(gate: Gate, actions: &mut PodActions, init: bool) {
    match gate {
        Gate::Start(start) if init => actions.next_init_container = Some(start),
        Gate::Start(start) => actions.containers_to_start.push(start),
        Gate::Wait(wait) => actions.backing_off.push(wait),
    }
}

fn kill(status: &ContainerView, reason: KillReason) -> KillAction {
    KillAction {
        container_id: status.id.clone(),
        name: status.name.clone(),
        reason,
        message: reason.describe(&status.name),
    }
}

/// What to do to converge `pod` given what the runtime reports (`rt`), the time, the restart
/// back-off table and the probe results.
pub fn compute_pod_actions(
    pod: &Pod,
    rt: &RuntimePod,
    now: SystemTime,
    backoff: &Backoff,
    probes: &ProbeResults,
) -> PodActions {
    let default_spec = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&default_spec);
    let uid = pod.metadata.uid.as_deref().unwrap_or(&rt.uid);
    let policy = RestartPolicy::of(pod);
    let mut actions = PodActions::default();

    let (create_sandbox, attempt) = sandbox_changed(pod, rt);
    if create_sandbox {
        actions.kill_pod = has_live(rt);
        if policy == RestartPolicy::Never && attempt != 0 && !rt.containers.is_empty() {
            // A Never pod whose sandbox went away after it ran is finished, not restarted.
            return actions;
        }
        let to_start: Vec<&Container> = spec
            .containers
            .iter()
            .filter(|c| {
                !(policy == RestartPolicy::OnFailure
                    && rt
                        .latest(&c.name)
                        .is_some_and(|s| s.state == RunState::Exited && s.exit_code == 0))
            })
            .collect();
        if to_start.is_empty() && init_progress(spec, rt) == InitProgress::Done {
            return actions;
        }
        actions.create_sandbox = Some(attempt);
        if let Some(first) = spec.init_containers.as_deref().unwrap_or_default().first() {
            push_gate(
                gate(pod, uid, first, true, rt, now, backoff),
                &mut actions,
                true,
            );
            return actions;
        }
        for container in to_start {
            push_gate(
                gate(pod, uid, container, false, rt, now, backoff),
                &mut actions,
                false,
            );
        }
        return actions;
    }
    actions.sandbox_id = rt.ready_sandbox().map(|s| s.id.clone());

    // Running containers the spec no longer has, and stale duplicates.
    let names: HashSet<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    for running in rt.running() {
        if !names.contains(running.name.as_str()) {
            actions
                .containers_to_kill
                .push(kill(running, KillReason::NotInSpec));
        } else if rt.latest(&running.name).is_some_and(|l| l.id != running.id) {
            actions
                .containers_to_kill
                .push(kill(running, KillReason::Superseded));
        }
    }

    match init_progress(spec, rt) {
        InitProgress::Done => {}
        InitProgress::Running => return actions,
        InitProgress::Next { next, last_failed } => {
            if last_failed.is_some() && policy == RestartPolicy::Never {
                actions.kill_pod = has_live(rt);
            } else {
                if let Some(unknown) = last_failed.filter(|s| s.state == RunState::Unknown) {
                    actions
                        .containers_to_kill
                        .push(kill(unknown, KillReason::UnknownState));
                }
                push_gate(
                    gate(pod, uid, next, true, rt, now, backoff),
                    &mut actions,
                    true,
                );
            }
            return actions;
        }
    }

    let mut keep = 0usize;
    for container in &spec.containers {
        let latest = rt.latest(&container.name);
        let Some(running) = latest.filter(|s| s.state == RunState::Running) else {
            if should_restart(pod, latest) {
                if let Some(unknown) = latest.filter(|s| s.state == RunState::Unknown) {
                    actions
                        .containers_to_kill
                        .push(kill(unknown, KillReason::UnknownState));
                }
                push_gate(
                    gate(pod, uid, container, false, rt, now, backoff),
                    &mut actions,
                    false,
                );
            }
            continue;
        };
        let mut restart = policy != RestartPolicy::Never;
        let reason = if running
            .hash
            .as_ref()
            .is_some_and(|h| *h != container_hash(container))
        {
            restart = true;
            KillReason::SpecChanged
        } else if probes.is_failure(&running.id, ProbeKind::Liveness) {
            KillReason::LivenessFailed
        } else if probes.is_failure(&running.id, ProbeKind::Startup) {
            KillReason::StartupFailed
        } else {
            keep += 1;
            continue;
        };
        let mut action = kill(running, reason);
        if restart {
            action.message.push_str(", will be restarted");
            actions.containers_to_start.push(StartAction {
                name: container.name.clone(),
                after_exit: false,
            });
        }
        actions.containers_to_kill.push(action);
    }

    if keep == 0 && actions.containers_to_start.is_empty() && actions.backing_off.is_empty() {
        actions.kill_pod = has_live(rt);
    }
    actions
}

#[cfg(test)]
#[path = "actions_tests.rs"]
mod tests;
