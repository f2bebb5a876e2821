//! Mirror pods of static pods, as kubelet's mirror client and `syncPod` keep them: each
//! static (manifest) pod of a cluster node has a pod in the API named `<name>-<node>`, bound
//! to the node, annotated `kubernetes.io/config.mirror` with the static pod's config hash and
//! owned by the Node (NodeRestriction requires it), carrying the static pod's status.
//!
//! [`decide`] is the pure part (desired against observed); [`MirrorSink`] is the
//! [`StatusSink`] in front of [`ApiStatusSink`](super::ApiStatusSink) that learns the static
//! pods from their statuses, and [`run`] the task that creates, deletes and recreates mirror
//! pods and hands their statuses to the status path under the mirror's name and uid. API
//! failures are logged and retried on the next round; nothing here is fatal.

use crate::kubelet::apiclient::{ApiClient, ApiClientError, status_code};
use crate::kubelet::source::manifest::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION};
use crate::kubelet::status::manager::StatusSink;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The annotation that makes a pod a mirror pod; its value is the static pod's config hash.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// runp's digest of what the mirror copies from the static pod (spec, labels), so an edited
/// manifest (same uid and config hash here) recreates the mirror with the new spec.
pub const MIRROR_SPEC_ANNOTATION: &str = "runp.io/mirror-spec";

/// Rounds run at least this often (retries after API failures).
const RESYNC: Duration = Duration::from_secs(5);

/// After a start, mirror pods of unknown static pods are left this long: the static pods
/// announce themselves with their first status.
const ORPHAN_GRACE: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error(transparent)]
    Api(#[from] ApiClientError),
    #[error("node {0} has no uid yet")]
    NodeUid(String),
}

/// Whether `pod` is a mirror pod (never run as an API pod).
pub fn is_mirror_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_MIRROR_ANNOTATION).is_some()
}

/// Whether `pod` is a static pod (from a file, not the API).
pub fn is_static_pod(pod: &Pod) -> bool {
    annotation(pod, CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s != "api") && !is_mirror_pod(pod)
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The mirror pod's name: the static pod's name and the node's.
pub fn mirror_name(static_name: &str, node_name: &str) -> String {
    format!("{static_name}-{node_name}")
}

/// The static pod's config hash (its uid when it has no hash annotation).
pub fn config_hash(pod: &Pod) -> String {
    annotation(pod, CONFIG_HASH_ANNOTATION)
        .map(str::to_string)
        .or_else(|| pod.metadata.uid.clone())
        .unwrap_or_default()
}

/// The mirror pod a static pod needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted {
    /// The static pod's config hash.
    pub hash: String,
    /// [`spec_digest`] of the static pod.
    pub spec: String,
}

impl Wanted {
    pub fn of(static_pod: &Pod) -> Wanted {
        Wanted {
            hash: config_hash(static_pod),
            spec: spec_digest(static_pod),
        }
    }
}

/// A digest of the static pod's spec and labels.
pub fn spec_digest(pod: &Pod) -> String {
    use sha2::{Digest, Sha256};
    let value = serde_json::json!({"spec": pod.spec, "labels": pod.metadata.labels});
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    hex::encode(&Sha256::digest(&bytes)[..12])
}

/// A mirror pod as the API shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub uid: String,
    /// Its `kubernetes.io/config.mirror` value.
    pub hash: String,
    /// Its [`MIRROR_SPEC_ANNOTATION`], if any.
    pub spec: Option<String>,
    /// It has a `deletionTimestamp`.
    pub deleting: bool,
}

/// What one mirror pod needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Create,
    /// Delete the mirror of this uid (the static pod is gone).
    Delete(String),
    /// Delete the mirror of this uid, then create it again (another hash, or being deleted).
    Recreate(String),
}

/// kubelet's `syncPod` for mirror pods: `desired` is what the static pod needs, if the
/// static pod exists; a mirror without one is deleted only when `orphans` may be (once the
/// static pods are known).
pub fn decide(desired: Option<&Wanted>, observed: Option<&Observed>, orphans: bool) -> Action {
    match (desired, observed) {
        (None, None) => Action::None,
        (None, Some(o)) if orphans => Action::Delete(o.uid.clone()),
        (None, Some(_)) => Action::None,
        (Some(_), None) => Action::Create,
        (Some(want), Some(o))
            if o.deleting || o.hash != want.hash || o.spec.as_deref() != Some(&want.spec) =>
        {
            Action::Recreate(o.uid.clone())
        }
        (Some(_), Some(_)) => Action::None,
    }
}

/// The mirror pod of `static_pod` on `node` (`node_uid` for the owner reference): the static
/// pod's labels, annotations and spec, without what NodeRestriction refuses a mirror pod.
pub fn mirror_pod(static_pod: &Pod, node_name: &str, node_uid: &str) -> Pod {
    let name = mirror_name(
        static_pod.metadata.name.as_deref().unwrap_or_default(),
        node_name,
    );
    let mut annotations: BTreeMap<String, String> =
        static_pod.metadata.annotations.clone().unwrap_or_default();
    let hash = config_hash(static_pod);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), hash.clone());
    annotations.insert(CONFIG_MIRROR_ANNOTATION.into(), hash);
    annotations.insert(MIRROR_SPEC_ANNOTATION.into(), spec_digest(static_pod));
    let mut spec: PodSpec = static_pod.spec.clone().unwrap_or_default();
    spec.node_name = Some(node_name.to_string());
    // Mirror pods may not use service accounts (ServiceAccount admission, NodeRestriction).
    spec.service_account_name = None;
    #[allow(deprecated)]
    {
        spec.service_account = None;
    }
    spec.automount_service_account_token = Some(false);
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace(static_pod)),
            labels: static_pod.metadata.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node_name.to_string(),
                uid: node_uid.to_string(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

fn namespace(pod: &Pod) -> String {
    pod.metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// What the status path is given for a mirror pod: its name and uid, the static pod's status.
fn status_view(
    namespace: &str,
    name: &str,
    uid: &str,
    node_name: &str,
    base: Option<PodStatus>,
) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            uid: Some(uid.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node_name.to_string()),
            ..PodSpec::default()
        }),
        status: base,
    }
}

/// A static pod the node runs.
struct Desired {
    pod: Pod,
    status: Option<PodStatus>,
    /// The (mirror uid, status) last handed to the status path.
    forwarded: Option<(String, PodStatus)>,
}

/// A mirror pod in the API, with its status as the watch showed it.
struct Seen {
    observed: Observed,
    status: Option<PodStatus>,
}

#[derive(Default)]
struct Shared {
    /// Static pods by (namespace, mirror name).
    desired: HashMap<(String, String), Desired>,
    /// Mirror pods in the API by (namespace, name).
    seen: HashMap<(String, String), Seen>,
    /// The mirror pods were listed once.
    listed: bool,
    /// Mirror pods whose static pod stopped in this run (deleted without waiting for
    /// [`ORPHAN_GRACE`]).
    stopped: BTreeSet<(String, String)>,
}

fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// The status sink of a cluster node: API pods' statuses go to `inner`; static pods get
/// mirror pods, whose statuses go to `inner` under the mirror's name and uid.
pub struct MirrorSink {
    inner: Arc<dyn StatusSink>,
    node_name: String,
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
    task: JoinHandle<()>,
}

impl MirrorSink {
    pub fn spawn(api: ApiClient, node_name: String, inner: Arc<dyn StatusSink>) -> Arc<MirrorSink> {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let wake = Arc::new(Notify::new());
        let task = tokio::spawn(run(
            api,
            node_name.clone(),
            Arc::clone(&inner),
            Arc::clone(&shared),
            Arc::clone(&wake),
        ));
        Arc::new(MirrorSink {
            inner,
            node_name,
            shared,
            wake,
            task,
        })
    }

    pub fn stop(&self) {
        self.task.abort();
    }

    fn key(&self, pod: &Pod) -> (String, String) {
        (
            namespace(pod),
            mirror_name(
                pod.metadata.name.as_deref().unwrap_or_default(),
                &self.node_name,
            ),
        )
    }
}

impl Drop for MirrorSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StatusSink for MirrorSink {
    fn status_changed(&self, pod: &Pod, status: &PodStatus) {
        if !is_static_pod(pod) {
            self.inner.status_changed(pod, status);
            return;
        }
        let key = self.key(pod);
        let mut shared = lock(&self.shared);
        let desired = shared
            .desired
            .entry(key.clone())
            .or_insert_with(|| Desired {
                pod: pod.clone(),
                status: None,
                forwarded: None,
            });
        desired.pod = pod.clone();
        desired.status = Some(status.clone());
        shared.stopped.remove(&key);
        drop(shared);
        self.wake.notify_one();
    }

    fn pod_terminated(&self, pod: &Pod) {
        if !is_static_pod(pod) {
            self.inner.pod_terminated(pod);
            return;
        }
        let key = self.key(pod);
        let mut shared = lock(&self.shared);
        let forwarded = match shared.desired.get(&key) {
            Some(d) if d.pod.metadata.uid == pod.metadata.uid => {
                shared.stopped.insert(key.clone());
                shared.desired.remove(&key).and_then(|d| d.forwarded)
            }
            _ => None,
        };
        drop(shared);
        if let Some((uid, _)) = forwarded {
            // The status path forgets the mirror; the mirror task deletes it.
            let view = status_view(&key.0, &key.1, &uid, &self.node_name, None);
            self.inner.pod_terminated(&view);
        }
        self.wake.notify_one();
    }
}

fn observe(pod: &Pod) -> Option<((String, String), Seen)> {
    let hash = annotation(pod, CONFIG_MIRROR_ANNOTATION)?.to_string();
    let key = (namespace(pod), pod.metadata.name.clone()?);
    let observed = Observed {
        uid: pod.metadata.uid.clone()?,
        hash,
        spec: annotation(pod, MIRROR_SPEC_ANNOTATION).map(str::to_string),
        deleting: pod.metadata.deletion_timestamp.is_some(),
    };
    Some((
        key,
        Seen {
            observed,
            status: pod.status.clone(),
        },
    ))
}

/// Watches the node's mirror pods and reconciles them with the static pods.
async fn run(
    api: ApiClient,
    node_name: String,
    inner: Arc<dyn StatusSink>,
    shared: Arc<Mutex<Shared>>,
    wake: Arc<Notify>,
) {
    let selector = format!("spec.nodeName={node_name}");
    let pods: Api<Pod> = Api::all(api.client.clone());
    let config = watcher::Config::default().fields(&selector);
    let mut stream = watcher::watcher(pods, config)
        .backoff(crate::kubelet::apiclient::watch_backoff())
        .boxed();
    let mut relist: Option<HashMap<(String, String), Seen>> = None;
    let mut node_uid: Option<String> = None;
    let mut tick = tokio::time::interval(RESYNC);
    let started = tokio::time::Instant::now();
    loop {
        tokio::select! {
            item = stream.next() => {
                let Some(item) = item else { return };
                let mut guard = lock(&shared);
                match item {
                    Ok(Event::Init) => relist = Some(HashMap::new()),
                    Ok(Event::InitApply(pod)) => {
                        if let Some((key, seen)) = observe(&pod) {
                            relist.get_or_insert_with(HashMap::new).insert(key, seen);
                        }
                    }
                    Ok(Event::InitDone) => {
                        guard.seen = relist.take().unwrap_or_default();
                        guard.listed = true;
                    }
                    Ok(Event::Apply(pod)) => {
                        if let Some((key, seen)) = observe(&pod) {
                            guard.seen.insert(key, seen);
                        }
                    }
                    Ok(Event::Delete(pod)) => {
                        if let Some((key, seen)) = observe(&pod)
                            && guard.seen.get(&key).is_some_and(|s| s.observed.uid == seen.observed.uid)
                        {
                            guard.seen.remove(&key);
                        }
                    }
                    Err(err) => {
                        tracing::debug!(server = %api.server, "watch of mirror pods: {err}");
                        continue;
                    }
                }
            }
            _ = wake.notified() => {}
            _ = tick.tick() => {}
        }
        let orphans = started.elapsed() >= ORPHAN_GRACE;
        reconcile(
            &api,
            &node_name,
            &mut node_uid,
            inner.as_ref(),
            &shared,
            orphans,
        )
        .await;
    }
}

/// One round over every static and mirror pod.
async fn reconcile(
    api: &ApiClient,
    node_name: &str,
    node_uid: &mut Option<String>,
    inner: &dyn StatusSink,
    shared: &Mutex<Shared>,
    orphans: bool,
) {
    let plan: Vec<((String, String), Action, Option<Pod>)> = {
        let guard = lock(shared);
        if !guard.listed {
            return;
        }
        let keys: BTreeSet<&(String, String)> =
            guard.desired.keys().chain(guard.seen.keys()).collect();
        keys.into_iter()
            .map(|key| {
                let desired = guard.desired.get(key);
                let want = desired.map(|d| Wanted::of(&d.pod));
                let orphans = orphans || guard.stopped.contains(key);
                let action = decide(
                    want.as_ref(),
                    guard.seen.get(key).map(|s| &s.observed),
                    orphans,
                );
                (key.clone(), action, desired.map(|d| d.pod.clone()))
            })
            .collect()
    };
    for ((namespace, name), action, static_pod) in plan {
        let pods: Api<Pod> = Api::namespaced(api.client.clone(), &namespace);
        let result = match action {
            Action::None => Ok(()),
            Action::Delete(uid) => {
                let deleted = delete(api, &pods, &name, &uid).await;
                if deleted.is_ok() {
                    let mut guard = lock(shared);
                    let key = (namespace.clone(), name.clone());
                    guard.seen.remove(&key);
                    guard.stopped.remove(&key);
                }
                deleted
            }
            Action::Recreate(uid) => match delete(api, &pods, &name, &uid).await {
                Ok(()) => {
                    lock(shared).seen.remove(&(namespace.clone(), name.clone()));
                    create(api, &pods, node_name, node_uid, static_pod.as_ref(), shared).await
                }
                Err(err) => Err(err),
            },
            Action::Create => {
                create(api, &pods, node_name, node_uid, static_pod.as_ref(), shared).await
            }
        };
        if let Err(err) = result {
            tracing::warn!(pod = %format!("{namespace}/{name}"), "mirror pod: {err}");
        }
    }
    forward_statuses(node_name, inner, shared);
}

/// Hands each static pod's latest status to the status path as its mirror's.
fn forward_statuses(node_name: &str, inner: &dyn StatusSink, shared: &Mutex<Shared>) {
    let mut guard = lock(shared);
    let Shared { desired, seen, .. } = &mut *guard;
    for ((namespace, name), d) in desired.iter_mut() {
        let (Some(seen), Some(status)) = (seen.get(&(namespace.clone(), name.clone())), &d.status)
        else {
            continue;
        };
        if decide(Some(&Wanted::of(&d.pod)), Some(&seen.observed), false) != Action::None {
            continue;
        }
        let uid = &seen.observed.uid;
        if d.forwarded
            .as_ref()
            .is_some_and(|(u, s)| u == uid && s == status)
        {
            continue;
        }
        if let Some((old, _)) = d.forwarded.as_ref().filter(|(u, _)| u != uid) {
            // Recreated: the status path forgets the old mirror.
            inner.pod_terminated(&status_view(namespace, name, old, node_name, None));
        }
        let view = status_view(namespace, name, uid, node_name, seen.status.clone());
        inner.status_changed(&view, status);
        d.forwarded = Some((uid.clone(), status.clone()));
    }
}

async fn node_uid(api: &ApiClient, node_name: &str) -> Result<String, MirrorError> {
    let nodes: Api<Node> = Api::all(api.client.clone());
    let node = nodes
        .get(node_name)
        .await
        .map_err(|e| api.request_error("get", format!("nodes/{node_name}"), &e))?;
    node.metadata
        .uid
        .ok_or_else(|| MirrorError::NodeUid(node_name.to_string()))
}

async fn create(
    api: &ApiClient,
    pods: &Api<Pod>,
    node_name: &str,
    cached_uid: &mut Option<String>,
    static_pod: Option<&Pod>,
    shared: &Mutex<Shared>,
) -> Result<(), MirrorError> {
    let Some(static_pod) = static_pod else {
        return Ok(());
    };
    let uid = match cached_uid {
        Some(uid) => uid.clone(),
        None => {
            let uid = node_uid(api, node_name).await?;
            *cached_uid = Some(uid.clone());
            uid
        }
    };
    let mirror = mirror_pod(static_pod, node_name, &uid);
    let name = mirror.metadata.name.clone().unwrap_or_default();
    match pods.create(&PostParams::default(), &mirror).await {
        Ok(created) => {
            tracing::info!(pod = %name, uid = created.metadata.uid.as_deref().unwrap_or(""), "mirror pod created");
            if let Some((key, seen)) = observe(&created) {
                lock(shared).seen.insert(key, seen);
            }
            Ok(())
        }
        // The watch shows it soon; the next round compares again.
        Err(err) if status_code(&err) == Some(409) => Ok(()),
        Err(err) => {
            if matches!(status_code(&err), Some(403 | 422)) {
                // The Node was recreated (another uid), or the cache is stale.
                *cached_uid = None;
            }
            Err(api
                .request_error("create", format!("pods/{name}"), &err)
                .into())
        }
    }
}

async fn delete(
    api: &ApiClient,
    pods: &Api<Pod>,
    name: &str,
    uid: &str,
) -> Result<(), MirrorError> {
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
            tracing::info!(pod = %name, %uid, "mirror pod deleted");
            Ok(())
        }
        Err(err) if matches!(status_code(&err), Some(404 | 409)) => Ok(()),
        Err(err) => Err(api
            .request_error("delete", format!("pods/{name}"), &err)
            .into()),
    }
}

#[cfg(test)]
#[path = "mirror_tests.rs"]
mod tests;
