//! What the node's pods reference, from the API server: ConfigMaps, Secrets, service-account
//! tokens and Services, served to the sync loop through the synchronous [`ObjectSource`].
//!
//! The Node authorizer lets a node read only the objects its own pods reference, so
//! [`ApiObjects`] sits on the pod event stream: for each `Upsert` it starts watching what the
//! pod references and requests its tokens *before* passing the event on (so the first sync sees
//! them; what is missing or not yet readable is passed on anyway: the sync reports it and
//! retries), and on `Remove` it drops what no pod needs any more. A change of a watched object,
//! or a refreshed token, is announced with `PodEvent::ObjectsChanged`, on which the pods resync
//! and their volumes are rewritten (atomic `..data` swap).

pub mod cache;
pub mod refs;
pub mod services;
pub mod tokens;

use crate::kubelet::apiclient::ApiClient;
use crate::kubelet::clock::{Clock, SystemClock};
use crate::kubelet::podconfig::{ObjectSource, PodEvent};
use cache::ObjectCache;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccountTokenProjection};
use refs::{Kind, ObjectRef, PodRefs, TokenKey, references, token_key};
use services::ServiceCache;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokens::{IssuedToken, needs_refresh};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

/// How long an `Upsert` waits for the first list of what the pod references.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(5);
/// How often tokens are checked for refresh (and missing ones retried).
pub const TOKEN_CHECK_PERIOD: Duration = Duration::from_secs(5);

/// The API-backed [`ObjectSource`] of a cluster node.
pub struct ApiObjects {
    api: ApiClient,
    config_maps: ObjectCache<ConfigMap>,
    secrets: ObjectCache<Secret>,
    tokens: Mutex<HashMap<TokenKey, IssuedToken>>,
    services: ServiceCache,
    clock: Arc<dyn Clock>,
    /// Signalled on every change the pods must see; turned into `ObjectsChanged`.
    changed: Arc<Notify>,
}

/// Aborts the task when dropped (helpers of the middleware end with it).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ApiObjects {
    /// Starts the middleware between a pod source (`events_in`) and the agent (`events_out`).
    /// The task ends when `events_in` closes (then `events_out` is dropped).
    pub fn spawn(
        api: ApiClient,
        events_in: mpsc::Receiver<PodEvent>,
        events_out: mpsc::Sender<PodEvent>,
    ) -> (Arc<ApiObjects>, JoinHandle<()>) {
        Self::spawn_with_clock(api, events_in, events_out, Arc::new(SystemClock))
    }

    /// As [`spawn`](Self::spawn), with the clock token refreshes are decided by.
    pub fn spawn_with_clock(
        api: ApiClient,
        events_in: mpsc::Receiver<PodEvent>,
        events_out: mpsc::Sender<PodEvent>,
        clock: Arc<dyn Clock>,
    ) -> (Arc<ApiObjects>, JoinHandle<()>) {
        let (services, services_task) = ServiceCache::start(&api);
        let objects = Arc::new(ApiObjects {
            api,
            config_maps: ObjectCache::new("configmaps"),
            secrets: ObjectCache::new("secrets"),
            tokens: Mutex::new(HashMap::new()),
            services,
            clock,
            changed: Arc::new(Notify::new()),
        });
        let task = tokio::spawn(Arc::clone(&objects).run(
            events_in,
            events_out,
            AbortOnDrop(services_task),
        ));
        (objects, task)
    }

    fn lock_tokens(&self) -> std::sync::MutexGuard<'_, HashMap<TokenKey, IssuedToken>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn run(
        self: Arc<Self>,
        mut events_in: mpsc::Receiver<PodEvent>,
        events_out: mpsc::Sender<PodEvent>,
        _services: AbortOnDrop,
    ) {
        let notifier = {
            let (changed, out) = (Arc::clone(&self.changed), events_out.clone());
            AbortOnDrop(tokio::spawn(async move {
                loop {
                    changed.notified().await;
                    if out.send(PodEvent::ObjectsChanged).await.is_err() {
                        return;
                    }
                }
            }))
        };
        let mut pods: HashMap<String, PodRefs> = HashMap::new();
        let mut tick = tokio::time::interval(TOKEN_CHECK_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                event = events_in.recv() => {
                    let Some(event) = event else { break };
                    let remove = match &event {
                        PodEvent::Upsert(pod) => {
                            self.upsert(pod, &mut pods).await;
                            None
                        }
                        PodEvent::Remove { uid } => Some(uid.clone()),
                        PodEvent::ObjectsChanged => None,
                    };
                    if events_out.send(event).await.is_err() {
                        break;
                    }
                    if let Some(uid) = remove {
                        self.forget(&uid, &mut pods);
                    }
                }
                _ = tick.tick() => self.refresh_tokens(&pods).await,
            }
        }
        drop(notifier);
        // Stop every watch: nothing reads them any more.
        for uid in pods.keys().cloned().collect::<Vec<_>>() {
            self.forget(&uid, &mut pods);
        }
    }

    fn acquire(&self, object: &ObjectRef) -> tokio::sync::watch::Receiver<bool> {
        let (ns, name) = (&object.namespace, &object.name);
        match object.kind {
            Kind::ConfigMap => self.config_maps.acquire(&self.api, ns, name, &self.changed),
            Kind::Secret => self.secrets.acquire(&self.api, ns, name, &self.changed),
        }
    }

    fn release(&self, object: &ObjectRef) {
        let (ns, name) = (&object.namespace, &object.name);
        match object.kind {
            Kind::ConfigMap => self.config_maps.release(ns, name),
            Kind::Secret => self.secrets.release(ns, name),
        }
    }

    /// Starts watching what `pod` references now (and stops what it no longer does), requests
    /// its missing tokens, and waits (bounded) for the first answers.
    async fn upsert(&self, pod: &Pod, pods: &mut HashMap<String, PodRefs>) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let new = references(pod);
        let old = pods.remove(&uid).unwrap_or_default();
        let mut pending: Vec<_> = new
            .objects
            .difference(&old.objects)
            .map(|o| self.acquire(o))
            .filter(|rx| !*rx.borrow())
            .collect();
        for gone in old.objects.difference(&new.objects) {
            self.release(gone);
        }
        {
            let mut tokens = self.lock_tokens();
            for gone in old.tokens.difference(&new.tokens) {
                tokens.remove(gone);
            }
        }
        for key in &new.tokens {
            let have = self.lock_tokens().contains_key(key);
            if !have {
                self.issue(key).await;
            }
        }
        pods.insert(uid, new);
        let wait = async {
            // Service variables need the first list of Services (kubelet waits for it too).
            self.services.wait_ready(SYNC_TIMEOUT).await;
            for rx in pending.iter_mut() {
                let _ = rx.wait_for(|synced| *synced).await;
            }
        };
        if tokio::time::timeout(SYNC_TIMEOUT, wait).await.is_err() {
            tracing::warn!(
                pod = %pod.metadata.name.as_deref().unwrap_or_default(),
                "objects the pod references are not readable yet; it starts when they are"
            );
            // The first answer of a late object must still resync the pods.
            let changed = Arc::clone(&self.changed);
            tokio::spawn(async move {
                for mut rx in pending {
                    let _ = rx.wait_for(|synced| *synced).await;
                }
                changed.notify_one();
            });
        }
    }

    /// Requests a token for `key`; true when one was stored.
    async fn issue(&self, key: &TokenKey) -> bool {
        match tokens::request(&self.api, key).await {
            Ok(token) => {
                self.lock_tokens().insert(key.clone(), token);
                true
            }
            Err(message) => {
                tracing::warn!("{message}");
                false
            }
        }
    }

    /// Renews tokens that are due (and retries missing ones); announces new ones.
    async fn refresh_tokens(&self, pods: &HashMap<String, PodRefs>) {
        let now = self.clock.wall();
        let due: Vec<TokenKey> = {
            let tokens = self.lock_tokens();
            let keys = pods.values().flat_map(|refs| refs.tokens.iter());
            keys.filter(|key| {
                tokens
                    .get(*key)
                    .is_none_or(|t| needs_refresh(t.issued, t.expiry, now))
            })
            .cloned()
            .collect()
        };
        let mut renewed = false;
        for key in &due {
            renewed |= self.issue(key).await;
        }
        if renewed {
            self.changed.notify_one();
        }
    }

    fn forget(&self, uid: &str, pods: &mut HashMap<String, PodRefs>) {
        let Some(refs) = pods.remove(uid) else {
            return;
        };
        for object in &refs.objects {
            self.release(object);
        }
        let mut tokens = self.lock_tokens();
        for key in &refs.tokens {
            tokens.remove(key);
        }
    }

    /// Numbers of watched ConfigMaps and Secrets and of held tokens (for tests and status).
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.config_maps.len(),
            self.secrets.len(),
            self.lock_tokens().len(),
        )
    }
}

impl ObjectSource for ApiObjects {
    fn config_map(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
        self.config_maps.get(namespace, name)
    }

    fn secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        self.secrets.get(namespace, name)
    }

    fn service_account_token(
        &self,
        pod: &Pod,
        source: &ServiceAccountTokenProjection,
    ) -> Option<String> {
        let key = token_key(pod, source);
        let tokens = self.lock_tokens();
        let token = tokens.get(&key)?;
        // An expired token is worse than none: the volume keeps its last one meanwhile.
        (token.expiry > self.clock.wall()).then(|| token.token.clone())
    }

    fn services(&self, namespace: &str) -> Vec<Service> {
        self.services.in_namespace(namespace)
    }
}

/// Two sources, asked in order: the manifest directory's objects (static pods) first, then the
/// API's.
pub struct LayeredObjects {
    pub first: Arc<dyn ObjectSource>,
    pub then: Arc<dyn ObjectSource>,
}

impl ObjectSource for LayeredObjects {
    fn config_map(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
        let first = self.first.config_map(namespace, name);
        first.or_else(|| self.then.config_map(namespace, name))
    }

    fn secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        let first = self.first.secret(namespace, name);
        first.or_else(|| self.then.secret(namespace, name))
    }

    fn service_account_token(
        &self,
        pod: &Pod,
        source: &ServiceAccountTokenProjection,
    ) -> Option<String> {
        let first = self.first.service_account_token(pod, source);
        first.or_else(|| self.then.service_account_token(pod, source))
    }

    fn services(&self, namespace: &str) -> Vec<Service> {
        let first = self.first.services(namespace);
        if first.is_empty() {
            self.then.services(namespace)
        } else {
            first
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::podconfig::ObjectStore;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            data: Some([("k".to_string(), value.to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn layered_objects_ask_the_first_source_first() {
        let manifests = Arc::new(ObjectStore::new());
        manifests.insert_config_map(cm("both", "manifest"));
        let api = Arc::new(ObjectStore::new());
        api.insert_config_map(cm("both", "api"));
        api.insert_config_map(cm("api-only", "api"));
        let layered = LayeredObjects {
            first: manifests,
            then: api,
        };
        let value = |name: &str| {
            layered
                .config_map("ns", name)
                .and_then(|c| c.data)
                .map(|d| d["k"].clone())
        };
        assert_eq!(value("both").as_deref(), Some("manifest"));
        assert_eq!(value("api-only").as_deref(), Some("api"));
        assert_eq!(value("none"), None);
        assert!(layered.secret("ns", "x").is_none());
        assert!(layered.services("ns").is_empty());
    }
}
