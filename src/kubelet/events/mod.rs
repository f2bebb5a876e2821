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
                    field_path: container.map(|c| format!("spec.containers{{{c}}}")),
                },
            );
        }
    }
}
