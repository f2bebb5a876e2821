//! `generate_pod_status` (pure): the API `PodStatus` of a pod from what the runtime reports,
//! the waiting reasons of the last sync, probe results and the previous status (for transition
//! times and the start time). Follows the kubelet's `generateAPIPodStatus`/`getPhase`.

use crate::kubelet::actions::{RestartPolicy, init_progress, should_restart};
use crate::kubelet::podconfig::spec::resources::qos_class;
use crate::kubelet::prober::results::{ProbeKind, ProbeResult, ProbeResults};
use crate::kubelet::runtime_pod::{ContainerView, RunState, RuntimePod};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// Prefix of `containerID` in container statuses.
pub const CONTAINER_ID_SCHEME: &str = "runp://";

/// Why a container is waiting, from the last sync (the kubelet's "reason cache").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

/// Inputs of [`generate_pod_status`].
pub struct StatusInputs<'a> {
    pub pod: &'a Pod,
    pub runtime: &'a RuntimePod,
    /// container name → waiting reason (ErrImagePull, CrashLoopBackOff, ...).
    pub waiting: &'a HashMap<String, Waiting>,
    pub probes: &'a ProbeResults,
    pub previous: Option<&'a PodStatus>,
    pub host_ip: &'a str,
    pub now: SystemTime,
}

/// A Kubernetes `Time` (whole seconds, as the API serializes it).
pub fn k8s_time(time: SystemTime) -> Option<Time> {
    let secs = time.duration_since(UNIX_EPOCH).ok()?.as_secs();
    let secs = i64::try_from(secs).ok()?;
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .ok()
        .map(Time)
}

fn terminated(view: &ContainerView) -> ContainerState {
    let reason = if !view.reason.is_empty() {
        view.reason.clone()
    } else if view.exit_code == 0 {
        "Completed".to_string()
    } else {
        "Error".to_string()
    };
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            container_id: Some(format!("{CONTAINER_ID_SCHEME}{}", view.id)),
            exit_code: view.exit_code,
            reason: Some(reason),
            message: (!view.message.is_empty()).then(|| view.message.clone()),
            started_at: view.started_at.and_then(k8s_time),
            finished_at: view.finished_at.and_then(k8s_time),
            signal: None,
        }),
        ..Default::default()
    }
}

fn waiting(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_string()),
            message: (!message.is_empty()).then(|| message.to_string()),
        }),
        ..Default::default()
    }
}

fn probe_passes(probes: &ProbeResults, id: &str, kind: ProbeKind, defined: bool) -> bool {
    !defined || probes.get(id, kind) == Some(ProbeResult::Success)
}

fn container_status(
    inputs: &StatusInputs<'_>,
    container: &Container,
    default_waiting: &str,
) -> ContainerStatus {
    let rt = inputs.runtime;
    let mut instances = rt.instances(&container.name);
    let latest = instances.next();
    let previous = instances.find(|c| c.state == RunState::Exited);
    let mut status = ContainerStatus {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        image_id: latest.map(|l| l.image_ref.clone()).unwrap_or_default(),
        container_id: latest.map(|l| format!("{CONTAINER_ID_SCHEME}{}", l.id)),
        restart_count: latest.map_or(0, |l| l.restart_count.min(i32::MAX as u32) as i32),
        last_state: previous.map(terminated),
        ready: false,
        started: Some(false),
        ..Default::default()
    };
    status.state = Some(match latest {
        None => waiting(default_waiting, ""),
        Some(view) => match view.state {
            RunState::Running => {
                let started = probe_passes(
                    inputs.probes,
                    &view.id,
                    ProbeKind::Startup,
                    container.startup_probe.is_some(),
                );
                status.started = Some(started);
                status.ready = started
                    && probe_passes(
                        inputs.probes,
                        &view.id,
                        ProbeKind::Readiness,
                        container.readiness_probe.is_some(),
                    );
                ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: view.started_at.and_then(k8s_time),
                    }),
                    ..Default::default()
                }
            }
            RunState::Exited => terminated(view),
            RunState::Created => waiting("ContainerCreating", ""),
            RunState::Unknown => waiting("ContainerStatusUnknown", &view.message),
        },
    });
    // A container that will run again shows why it is not running yet.
    if should_restart(inputs.pod, latest)
        && let Some(reason) = inputs.waiting.get(&container.name)
    {
        if latest.is_some_and(|l| l.state == RunState::Exited) {
            status.last_state = status.state.take();
        }
        status.state = Some(waiting(&reason.reason, &reason.message));
    }
    status
}

fn is_terminated_with(status: &ContainerStatus, want_zero: bool) -> bool {
    let code = |s: &Option<ContainerState>| {
        s.as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code)
    };
    match code(&status.state) {
        Some(c) => (c == 0) == want_zero,
        None => false,
    }
}

fn last_terminated_nonzero(status: &ContainerStatus) -> bool {
    status
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.exit_code != 0)
}

fn state_kind(status: &ContainerStatus) -> (bool, bool, bool) {
    let state = status.state.as_ref();
    (
        state.is_some_and(|s| s.running.is_some()),
        state.is_some_and(|s| s.terminated.is_some()),
        state.is_some_and(|s| s.waiting.is_some()),
    )
}

/// Pod phase from the container statuses (the kubelet's `getPhase`).
pub fn pod_phase(
    policy: RestartPolicy,
    init: &[ContainerStatus],
    main: &[ContainerStatus],
    initialized: bool,
) -> &'static str {
    let mut pending_init = false;
    let mut failed_init = false;
    if !initialized {
        for status in init {
            let (running, _, waiting) = state_kind(status);
            if running {
                pending_init = true;
            } else if is_terminated_with(status, false) {
                pending_init = true;
                failed_init = true;
            } else if waiting {
                pending_init = true;
                failed_init |= last_terminated_nonzero(status);
            } else if !is_terminated_with(status, true) {
                pending_init = true;
            }
        }
    }
    if failed_init && policy == RestartPolicy::Never {
        return "Failed";
    }
    if pending_init {
        return "Pending";
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for status in main {
        let (is_running, is_terminated, is_waiting) = state_kind(status);
        if is_running {
            running += 1;
        } else if is_terminated {
            stopped += 1;
            if is_terminated_with(status, true) {
                succeeded += 1;
            }
        } else if is_waiting {
            let last_terminated = status
                .last_state
                .as_ref()
                .is_some_and(|s| s.terminated.is_some());
            if last_terminated {
                stopped += 1;
            } else {
                waiting += 1;
            }
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        match policy {
            RestartPolicy::Always => "Running",
            _ if stopped == succeeded => "Succeeded",
            RestartPolicy::Never => "Failed",
            RestartPolicy::OnFailure => "Running",
        }
    } else {
        "Pending"
    }
}

fn condition(
    previous: Option<&PodStatus>,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: SystemTime,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let previous = previous
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
        .filter(|c| c.status == status);
    PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: previous
            .and_then(|p| p.last_transition_time.clone())
            .or_else(|| k8s_time(now)),
        ..Default::default()
    }
}

fn names_where(statuses: &[ContainerStatus], pred: impl Fn(&ContainerStatus) -> bool) -> String {
    let names: Vec<&str> = statuses
        .iter()
        .filter(|s| pred(s))
        .map(|s| s.name.as_str())
        .collect();
    format!("[{}]", names.join(" "))
}

/// The pod's API status.
pub fn generate_pod_status(inputs: &StatusInputs<'_>) -> PodStatus {
    let default_spec = PodSpec::default();
    let spec = inputs.pod.spec.as_ref().unwrap_or(&default_spec);
    let policy = RestartPolicy::of(inputs.pod);
    let rt = inputs.runtime;

    let inits: &[Container] = spec.init_containers.as_deref().unwrap_or_default();
    let init_statuses: Vec<ContainerStatus> = inits
        .iter()
        .map(|c| container_status(inputs, c, "PodInitializing"))
        .collect();
    // Main containers that ever ran mean initialization finished, even if the init
    // containers' records were garbage-collected since.
    let initialized = init_progress(spec, rt) == crate::kubelet::actions::InitProgress::Done
        || spec.containers.iter().any(|c| rt.latest(&c.name).is_some());
    let main_waiting = if initialized {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let main_statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(inputs, c, main_waiting))
        .collect();

    let mut phase = pod_phase(policy, &init_statuses, &main_statuses, initialized);
    // A terminal phase is final.
    if let Some(previous) = inputs.previous.and_then(|p| p.phase.as_deref())
        && matches!(previous, "Succeeded" | "Failed")
    {
        phase = if previous == "Succeeded" {
            "Succeeded"
        } else {
            "Failed"
        };
    }

    let now = inputs.now;
    let previous = inputs.previous;
    let all_ready = main_statuses.iter().all(|s| s.ready);
    let (ready_reason, ready_message) = if phase == "Succeeded" {
        (Some("PodCompleted"), None)
    } else if all_ready {
        (None, None)
    } else {
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: {}",
                names_where(&main_statuses, |s| !s.ready)
            )),
        )
    };
    let ready = all_ready && phase != "Succeeded";
    let init_message = (!initialized).then(|| {
        format!(
            "containers with incomplete status: {}",
            names_where(&init_statuses, |s| !is_terminated_with(s, true))
        )
    });
    let conditions = vec![
        condition(previous, "PodScheduled", true, None, None, now),
        condition(
            previous,
            "Initialized",
            initialized,
            (!initialized).then_some("ContainersNotInitialized"),
            init_message,
            now,
        ),
        condition(
            previous,
            "ContainersReady",
            ready,
            ready_reason,
            ready_message.clone(),
            now,
        ),
        condition(previous, "Ready", ready, ready_reason, ready_message, now),
        // Kubelet's name for "the sandbox is up and its network configured".
        condition(
            previous,
            "PodReadyToStartContainers",
            rt.ready_sandbox().is_some(),
            None,
            None,
            now,
        ),
    ];

    let host_network = spec.host_network.unwrap_or(false);
    let pod_ips: Vec<String> = if host_network {
        vec![inputs.host_ip.to_string()]
    } else {
        rt.ready_sandbox()
            .or(rt.latest_sandbox())
            .map(|s| s.ips.clone())
            .unwrap_or_default()
    };
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        host_ip: Some(inputs.host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: inputs.host_ip.to_string(),
        }]),
        start_time: previous
            .and_then(|p| p.start_time.clone())
            .or_else(|| k8s_time(now)),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(main_statuses),
        qos_class: Some(qos_class(inputs.pod).as_str().to_string()),
        ..Default::default()
    }
}

/// The phase of a pod whose containers were all stopped for good (deleted, or its source
/// removed it): as kubelet does for a terminal pod, `Succeeded` when every container exited 0,
/// else `Failed`, whatever the restart policy. A pod already terminal keeps its phase.
pub fn set_terminal_phase(status: &mut PodStatus) {
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return;
    }
    let main = status.container_statuses.as_deref().unwrap_or_default();
    let succeeded = !main.is_empty() && main.iter().all(|s| is_terminated_with(s, true));
    status.phase = Some(if succeeded { "Succeeded" } else { "Failed" }.to_string());
}

#[cfg(test)]
#[path = "generate_tests.rs"]
mod tests;
