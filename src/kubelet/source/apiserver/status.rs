//! Pod statuses to the API server: `PATCH pods/<name>/status` (merge patch, the pod's uid as a
//! precondition) when a status changed, and after a deleted pod was stopped the final status,
//! then `DELETE` of the object (grace 0, uid precondition), as kubelet's status manager does.
//!
//! One task sends; the sync loop only records the latest status per pod (no queue grows while
//! the API server is unreachable: the newest status wins and is sent when it is back). Pods the
//! node does not own (another node's, static pods) are not patched.

use super::patch::status_patch;
use crate::kubelet::apiclient::{ApiClient, status_code};
use crate::kubelet::source::manifest::CONFIG_SOURCE_ANNOTATION;
use crate::kubelet::status::manager::StatusSink;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Retry delays while the API server fails.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(10);

struct Entry {
    namespace: String,
    name: String,
    /// What the API server has (the last answer, or the pod as the watch showed it).
    base: Value,
    /// The agent's latest status; sent when it is not `acked`.
    latest: Option<Value>,
    /// The last status the server took. Compared with `latest` rather than `base`: the server
    /// fills what the agent leaves out (`lastState: {}`...), so `base` never equals it.
    acked: Option<Value>,
    /// Stopped for good: delete the object once the final status is in.
    delete: bool,
}

#[derive(Default)]
struct Shared {
    pods: HashMap<String, Entry>,
}

/// A [`StatusSink`] writing to the API server.
pub struct ApiStatusSink {
    node_name: String,
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
    task: JoinHandle<()>,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl ApiStatusSink {
    /// Starts the sender for the pods bound to `node_name`.
    pub fn spawn(api: ApiClient, node_name: String) -> Arc<ApiStatusSink> {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let wake = Arc::new(Notify::new());
        let task = tokio::spawn(send_loop(api, Arc::clone(&shared), Arc::clone(&wake)));
        Arc::new(ApiStatusSink {
            node_name,
            shared,
            wake,
            task,
        })
    }

    /// Whether every recorded status was sent (for tests and shutdown).
    pub fn idle(&self) -> bool {
        lock(&self.shared).pods.values().all(|e| !pending(e))
    }

    /// Stops sending.
    pub fn stop(&self) {
        self.task.abort();
    }

    /// Pods of this node from the API (not static pods, which get mirror pods).
    fn owns(&self, pod: &Pod) -> bool {
        let static_pod = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
            .is_some_and(|s| s != "api");
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        !static_pod && bound == Some(self.node_name.as_str())
    }

    fn entry<'a>(shared: &'a mut Shared, pod: &Pod, uid: &str) -> &'a mut Entry {
        shared.pods.entry(uid.to_string()).or_insert_with(|| Entry {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            base: pod
                .status
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or_else(|| json!({})),
            latest: None,
            acked: None,
            delete: false,
        })
    }
}

impl Drop for ApiStatusSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StatusSink for ApiStatusSink {
    fn status_changed(&self, pod: &Pod, status: &PodStatus) {
        let Some(uid) = pod.metadata.uid.as_deref().filter(|_| self.owns(pod)) else {
            return;
        };
        let Ok(value) = serde_json::to_value(status) else {
            return;
        };
        let mut shared = lock(&self.shared);
        let entry = Self::entry(&mut shared, pod, uid);
        entry.latest = Some(value);
        drop(shared);
        self.wake.notify_one();
    }

    fn pod_terminated(&self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.as_deref().filter(|_| self.owns(pod)) else {
            return;
        };
        let mut shared = lock(&self.shared);
        let entry = Self::entry(&mut shared, pod, uid);
        // Only a pod deleted in the API is deleted; one that vanished from it is gone already.
        entry.delete = pod.metadata.deletion_timestamp.is_some();
        if !entry.delete {
            shared.pods.remove(uid);
        }
        drop(shared);
        self.wake.notify_one();
    }
}

fn pending(entry: &Entry) -> bool {
    entry.delete || entry.latest != entry.acked
}

/// What one round does for one pod.
enum Work {
    /// Send this patch, which takes the server to this status.
    Patch(Value, Value),
    /// The server has this status already.
    Ack(Value),
    Delete,
}

/// The outcome of one request.
enum Outcome {
    /// The API server has this status now.
    Patched(Value),
    /// The object is gone, or is another pod of the same name: forget it.
    Gone,
    Deleted,
    /// Refetch the base (a conflict).
    Refresh(Option<Value>),
    Retry,
}

impl Outcome {
    fn name(&self) -> &'static str {
        match self {
            Outcome::Patched(_) => "patched",
            Outcome::Gone => "gone",
            Outcome::Deleted => "deleted",
            Outcome::Refresh(_) => "refresh",
            Outcome::Retry => "retry",
        }
    }
}

async fn send_loop(api: ApiClient, shared: Arc<Mutex<Shared>>, wake: Arc<Notify>) {
    let mut delay = RETRY_MIN;
    let mut failing = false;
    loop {
        let work: Vec<(String, String, String, Work)> = {
            let shared = lock(&shared);
            shared
                .pods
                .iter()
                .filter_map(|(uid, e)| {
                    let work = match (&e.latest, e.delete) {
                        (Some(latest), _) if e.acked.as_ref() != Some(latest) => {
                            match status_patch(&e.base, latest) {
                                Some(patch) => Work::Patch(patch, latest.clone()),
                                None => Work::Ack(latest.clone()),
                            }
                        }
                        (_, true) => Work::Delete,
                        _ => return None,
                    };
                    Some((uid.clone(), e.namespace.clone(), e.name.clone(), work))
                })
                .collect()
        };
        let mut retry = false;
        for (uid, namespace, name, work) in work {
            let pods: Api<Pod> = Api::namespaced(api.client.clone(), &namespace);
            let (outcome, sent) = match work {
                Work::Patch(patch, latest) => (
                    patch_status(&api, &pods, &uid, &name, patch).await,
                    Some(latest),
                ),
                Work::Ack(latest) => {
                    if let Some(entry) = lock(&shared).pods.get_mut(&uid) {
                        entry.acked = Some(latest);
                    }
                    continue;
                }
                Work::Delete => (delete_pod(&api, &pods, &uid, &name).await, None),
            };
            tracing::debug!(pod = %name, %uid, outcome = outcome.name(), "pod status round");
            let mut guard = lock(&shared);
            match outcome {
                Outcome::Patched(status) => {
                    if let Some(entry) = guard.pods.get_mut(&uid) {
                        entry.base = status;
                        entry.acked = sent;
                    }
                }
                Outcome::Refresh(Some(status)) => {
                    if let Some(entry) = guard.pods.get_mut(&uid) {
                        entry.base = status;
                        entry.acked = None;
                    }
                    retry = true;
                }
                Outcome::Gone | Outcome::Deleted => {
                    guard.pods.remove(&uid);
                }
                Outcome::Refresh(None) | Outcome::Retry => retry = true,
            }
        }
        if retry {
            failing = true;
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(RETRY_MAX);
        } else if lock(&shared).pods.values().any(pending) {
            // A deletion waits for its final status: the next round sends it.
            continue;
        } else {
            if failing {
                tracing::info!(server = %api.server, "pod statuses sent again");
                failing = false;
            }
            delay = RETRY_MIN;
            wake.notified().await;
        }
    }
}

async fn patch_status(
    api: &ApiClient,
    pods: &Api<Pod>,
    uid: &str,
    name: &str,
    patch: Value,
) -> Outcome {
    // The uid in the patch is a precondition: a new pod of the same name is not touched.
    let body = json!({"metadata": {"uid": uid}, "status": patch});
    match pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(pod) => Outcome::Patched(
            pod.status
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or_else(|| json!({})),
        ),
        Err(err) => match status_code(&err) {
            Some(404) => Outcome::Gone,
            Some(code @ (409 | 422)) => {
                // A conflict, or a refused change (such as another pod's uid): compare again
                // with what the server has.
                if code == 422 {
                    tracing::warn!(pod = %name, "{}", api.request_error("patch", format!("pods/{name}/status"), &err));
                }
                refetch(api, pods, uid, name).await
            }
            _ => {
                tracing::warn!(pod = %name, "{}", api.request_error("patch", format!("pods/{name}/status"), &err));
                Outcome::Retry
            }
        },
    }
}

/// After a conflict: the pod as the API server has it now (GET of the pod is allowed to the
/// node; GET of pods/status is not).
async fn refetch(api: &ApiClient, pods: &Api<Pod>, uid: &str, name: &str) -> Outcome {
    match pods.get(name).await {
        Ok(pod) if pod.metadata.uid.as_deref() == Some(uid) => Outcome::Refresh(Some(
            pod.status
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or_else(|| json!({})),
        )),
        Ok(_) => Outcome::Gone,
        Err(err) if status_code(&err) == Some(404) => Outcome::Gone,
        Err(err) => {
            tracing::warn!(pod = %name, "{}", api.request_error("get", format!("pods/{name}"), &err));
            Outcome::Refresh(None)
        }
    }
}

async fn delete_pod(api: &ApiClient, pods: &Api<Pod>, uid: &str, name: &str) -> Outcome {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match pods.delete(name, &params).await {
        Ok(_) => {
            tracing::info!(pod = %name, %uid, "pod deleted from the API server");
            Outcome::Deleted
        }
        // Gone already, or a new pod of that name (the precondition failed).
        Err(err) if matches!(status_code(&err), Some(404 | 409)) => Outcome::Gone,
        Err(err) => {
            tracing::warn!(pod = %name, "{}", api.request_error("delete", format!("pods/{name}"), &err));
            Outcome::Retry
        }
    }
}
