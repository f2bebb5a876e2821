//! Pod events as kubelet records them (Pulling, Pulled, Created, Started, Failed, BackOff,
//! OutOfcpu...), behind [`PodEventSink`] so the sync loop stays free of the API: the default
//! only logs; a cluster node sends them to the API server. [`spam`] keeps a crash-looping pod
//! from flooding the API.

pub mod api;
pub mod spam;

use k8s_openapi::api::core::v1::Pod;
use std::sync::{Arc, OnceLock};

/// One event about a pod (or one of its containers, by `field_path`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    pub warning: bool,
    pub reason: String,
    pub note: String,
    /// `spec.containers{name}` for container events, as kubelet.
    pub field_path: Option<String>,
}

/// Where pod events go. Must not block: implementations queue.
pub trait PodEventSink: Send + Sync {
    fn record(&self, pod: &Pod, event: PodEvent);
}

/// The sink the agent's parts share; logs until a real sink is set (once).
#[derive(Default)]
pub struct PodEvents {
    sink: OnceLock<Arc<dyn PodEventSink>>,
}

impl PodEvents {
    /// False when a sink was set already.
    pub fn set_sink(&self, sink: Arc<dyn PodEventSink>) -> bool {
        self.sink.set(sink).is_ok()
    }

    pub fn normal(&self, pod: &Pod, container: Option<&str>, reason: &str, note: String) {
        self.emit(pod, container, false, reason, note);
    }

    pub fn warning(&self, pod: &Pod, container: Option<&str>, reason: &str, note: String) {
        self.emit(pod, container, true, reason, note);
    }

    fn emit(&self, pod: &Pod, container: Option<&str>, warning: bool, reason: &str, note: String) {
        tracing::debug!(pod = ?pod.metadata.name, container, reason, %note, "event");
        if let Some(sink) = self.sink.get() {
            sink.record(
                pod,
                PodEvent {
                    warning,
                    reason: reason.to_string(),
                    note,
                    field_path: container.map(|c| field_path(pod, c)),
                },
            );
        }
    }
}

/// kubelet's fieldPath of a container: `spec.initContainers{name}` for init containers.
fn field_path(pod: &Pod, container: &str) -> String {
    let is_init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|inits| inits.iter().any(|c| c.name == container));
    match is_init {
        true => format!("spec.initContainers{{{container}}}"),
        false => format!("spec.containers{{{container}}}"),
    }
}

/// The reasons kubelet's events carry (pkg/kubelet/events).
pub mod reason {
    pub const PULLING: &str = "Pulling";
    pub const PULLED: &str = "Pulled";
    pub const FAILED: &str = "Failed";
    pub const BACK_OFF: &str = "BackOff";
    pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
    pub const CREATED: &str = "Created";
    pub const STARTED: &str = "Started";
    pub const KILLING: &str = "Killing";
    pub const UNHEALTHY: &str = "Unhealthy";
    pub const FAILED_MOUNT: &str = "FailedMount";
    pub const SANDBOX_CHANGED: &str = "SandboxChanged";
    pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
    pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
    pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
}
