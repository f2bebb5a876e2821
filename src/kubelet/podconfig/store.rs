//! The live store of ConfigMaps and Secrets: filled by the manifest source, read by env and
//! volume code through [`ObjectSource`].

use super::ObjectSource;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::sync::RwLock;

/// `(namespace, name)`; a missing namespace is "default".
pub type ObjectKey = (String, String);

/// Key of an object, or `None` when it has no name.
pub fn object_key(meta: &ObjectMeta) -> Option<ObjectKey> {
    let name = meta.name.clone().filter(|n| !n.is_empty())?;
    let namespace = meta
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string());
    Some((namespace, name))
}

/// All ConfigMaps and Secrets known at one point in time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObjectSet {
    pub config_maps: BTreeMap<ObjectKey, ConfigMap>,
    pub secrets: BTreeMap<ObjectKey, Secret>,
}

impl ObjectSet {
    /// Adds a ConfigMap (replacing one with the same key); unnamed objects are ignored.
    pub fn insert_config_map(&mut self, mut cm: ConfigMap) {
        if let Some(key) = object_key(&cm.metadata) {
            cm.metadata.namespace = Some(key.0.clone());
            self.config_maps.insert(key, cm);
        }
    }

    /// Adds a Secret (replacing one with the same key); unnamed objects are ignored.
    pub fn insert_secret(&mut self, mut secret: Secret) {
        if let Some(key) = object_key(&secret.metadata) {
            secret.metadata.namespace = Some(key.0.clone());
            self.secrets.insert(key, secret);
        }
    }
}

/// A shareable, updatable [`ObjectSet`].
#[derive(Debug, Default)]
pub struct ObjectStore {
    inner: RwLock<ObjectSet>,
}

impl ObjectStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the whole content; returns whether anything changed.
    pub fn replace(&self, set: ObjectSet) -> bool {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if *inner == set {
            return false;
        }
        *inner = set;
        true
    }

    pub fn insert_config_map(&self, cm: ConfigMap) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.insert_config_map(cm);
    }

    pub fn insert_secret(&self, secret: Secret) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.insert_secret(secret);
    }

    pub fn snapshot(&self) -> ObjectSet {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl ObjectSource for ObjectStore {
    fn config_map(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner
            .config_maps
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    fn secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner
            .secrets
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(namespace: Option<&str>, name: &str, value: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: namespace.map(Into::into),
                ..Default::default()
            },
            data: Some([("k".to_string(), value.to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn keys_default_the_namespace_and_replace_reports_changes() {
        let store = ObjectStore::new();
        let mut set = ObjectSet::default();
        set.insert_config_map(cm(None, "a", "1"));
        set.insert_config_map(cm(Some("x"), "a", "2"));
        set.insert_config_map(ConfigMap::default()); // unnamed: ignored
        assert!(store.replace(set.clone()));
        assert!(!store.replace(set));
        let got = store.config_map("default", "a").expect("stored");
        assert_eq!(got.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(store.config_map("x", "a").unwrap().data.unwrap()["k"], "2");
        assert!(store.config_map("y", "a").is_none());
        assert!(store.secret("default", "a").is_none());
    }
}
