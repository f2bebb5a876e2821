//! Referenced objects kept current by one watch each, as kubelet's watch-based ConfigMap and
//! Secret managers do: a list+watch with `fieldSelector=metadata.name=<name>` in the object's
//! namespace (what the Node authorizer allows for an object a pod of the node references),
//! started when the first pod references the object and stopped when the last one goes.

use crate::kubelet::apiclient::{ApiClient, describe};
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watch_object};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// The latest state of one watched object.
struct Slot<K> {
    /// `None`: not found (or not listed yet).
    value: Mutex<Option<K>>,
    /// True once the first list answered.
    synced: watch::Sender<bool>,
}

struct Entry<K> {
    slot: Arc<Slot<K>>,
    users: usize,
    task: JoinHandle<()>,
}

/// The watched objects of one kind (`configmaps` or `secrets`).
pub struct ObjectCache<K> {
    resource: &'static str,
    entries: Mutex<HashMap<(String, String), Entry<K>>>,
}

/// A short reason for a watch error, with the server's message where there is one.
pub fn describe_watch(err: &watcher::Error) -> String {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => describe(e),
        watcher::Error::WatchError(status) => {
            format!("{} ({} {})", status.message, status.code, status.reason)
        }
        other => other.to_string(),
    }
}

impl<K> ObjectCache<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + PartialEq
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    pub fn new(resource: &'static str) -> Self {
        ObjectCache {
            resource,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Entry<K>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The object as last seen, if it exists (and is referenced).
    pub fn get(&self, namespace: &str, name: &str) -> Option<K> {
        let entries = self.lock();
        let entry = entries.get(&(namespace.to_string(), name.to_string()))?;
        let value = entry.slot.value.lock().unwrap_or_else(|e| e.into_inner());
        value.clone()
    }

    /// One more user of `namespace/name`: starts its watch if it is the first. The receiver
    /// turns true once the first list answered (found or not).
    pub fn acquire(
        &self,
        api: &ApiClient,
        namespace: &str,
        name: &str,
        changed: &Arc<Notify>,
    ) -> watch::Receiver<bool> {
        let mut entries = self.lock();
        let key = (namespace.to_string(), name.to_string());
        if let Some(entry) = entries.get_mut(&key) {
            entry.users += 1;
            return entry.slot.synced.subscribe();
        }
        let slot = Arc::new(Slot {
            value: Mutex::new(None),
            synced: watch::channel(false).0,
        });
        let synced = slot.synced.subscribe();
        let objects: Api<K> = Api::namespaced(api.client.clone(), namespace);
        let task = tokio::spawn(watch_one(
            objects,
            format!("{} {namespace}/{name}", self.resource),
            name.to_string(),
            Arc::clone(&slot),
            Arc::clone(changed),
        ));
        entries.insert(
            key,
            Entry {
                slot,
                users: 1,
                task,
            },
        );
        synced
    }

    /// One user less of `namespace/name`: the last one stops the watch and forgets the object.
    pub fn release(&self, namespace: &str, name: &str) {
        let mut entries = self.lock();
        let key = (namespace.to_string(), name.to_string());
        let Some(entry) = entries.get_mut(&key) else {
            return;
        };
        entry.users = entry.users.saturating_sub(1);
        if entry.users == 0
            && let Some(entry) = entries.remove(&key)
        {
            entry.task.abort();
        }
    }

    /// Number of watched objects.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K> Drop for ObjectCache<K> {
    fn drop(&mut self) {
        let entries = self.entries.get_mut().unwrap_or_else(|e| e.into_inner());
        for entry in entries.values() {
            entry.task.abort();
        }
    }
}

/// Keeps `slot` current; notifies `changed` when the object changes after the first list (the
/// first one is awaited by whoever acquired it).
async fn watch_one<K>(
    api: Api<K>,
    what: String,
    name: String,
    slot: Arc<Slot<K>>,
    changed: Arc<Notify>,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + Debug
        + PartialEq
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let stream = watch_object(api, &name).backoff(crate::kubelet::apiclient::watch_backoff());
    futures::pin_mut!(stream);
    let mut failing = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(object) => {
                if failing {
                    tracing::info!("list/watch {what}: works again");
                    failing = false;
                }
                let differs = {
                    let mut value = slot.value.lock().unwrap_or_else(|e| e.into_inner());
                    let differs = *value != object;
                    *value = object;
                    differs
                };
                let first = !*slot.synced.borrow();
                slot.synced.send_replace(true);
                if differs && !first {
                    tracing::debug!("{what} changed");
                    changed.notify_one();
                }
            }
            Err(err) => {
                // Once per failing stretch; the watcher retries with back-off.
                if !failing {
                    tracing::warn!("list/watch {what}: {}", describe_watch(&err));
                }
                failing = true;
            }
        }
    }
}
