//! Pod spec → CRI config conversion and the pod-level inputs it needs (objects, volumes, env,
//! DNS, registry auth). Pure where possible; the sync loop calls these and talks to the runtime.
//!
//! CONTRACT (shared by the sync loop and this module; keep the signatures stable):
//! - [`ObjectSource`]: read access to ConfigMaps and Secrets known to the agent.
//! - [`PodEvent`]: what a pod source emits.
//! - [`sandbox_config`], [`container_config`], [`container_hash`].

pub mod auth;
pub mod objects;
pub mod spec;
pub mod store;
pub mod validate;
pub mod volumes;

pub use auth::{pull_auth, pull_auths};
pub use spec::convert::{
    container_config, container_hash, sandbox_config, sandbox_config_with_resolv_conf,
};
pub use spec::security::verify_run_as_non_root;
pub use store::{ObjectSet, ObjectStore};
pub use volumes::{MountHook, PodVolumes, VolumeError, VolumeManager};

use crate::cri::api;
use crate::kubelet::config::AgentConfig;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Pod, Secret, Service, ServiceAccountTokenProjection,
};

/// Errors of the conversion: all are problems of the pod spec or its referenced objects.
#[derive(Debug, thiserror::Error)]
pub enum PodConfigError {
    #[error("pod has no {0}")]
    Missing(&'static str),
    #[error("invalid pod spec: {0}")]
    Invalid(String),
    #[error("manifest directory {}: {reason}", path.display())]
    ManifestDir {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error(transparent)]
    Env(#[from] spec::env::EnvError),
}

/// Read access to the ConfigMaps and Secrets the agent knows about (and, with an API server,
/// service-account tokens and Services).
pub trait ObjectSource: Send + Sync {
    fn config_map(&self, namespace: &str, name: &str) -> Option<ConfigMap>;
    fn secret(&self, namespace: &str, name: &str) -> Option<Secret>;

    /// The token issued for a projected `serviceAccountToken` source of `pod`; `None` when none
    /// was issued (only an API server issues them).
    fn service_account_token(
        &self,
        _pod: &Pod,
        _source: &ServiceAccountTokenProjection,
    ) -> Option<String> {
        None
    }

    /// The Services of `namespace` (for the service environment variables); empty without an
    /// API server.
    fn services(&self, _namespace: &str) -> Vec<Service> {
        Vec::new()
    }
}

/// A change reported by a pod source. Pods are keyed by UID (static manifests get a stable one).
#[derive(Clone, Debug)]
pub enum PodEvent {
    /// A new pod, or a changed spec of a known pod.
    Upsert(Box<Pod>),
    /// The pod was removed from its source: terminate it gracefully and clean up.
    Remove { uid: String },
    /// A ConfigMap or Secret changed: pods that reference it may need a resync.
    ObjectsChanged,
}

/// Who the image runs as, from ImageStatus: kubelet's `getImageUser`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageUser {
    pub uid: Option<i64>,
    /// The image's user name when it names no uid.
    pub username: String,
}

impl ImageUser {
    /// The image's uid, else its user name, else root (an image that names no user runs as
    /// root, and kubelet says so to the runtime).
    pub fn of(image: Option<&crate::cri::api::Image>) -> ImageUser {
        match image {
            Some(i) if i.uid.is_some() => ImageUser {
                uid: i.uid.as_ref().map(|v| v.value),
                username: String::new(),
            },
            Some(i) if !i.username.is_empty() => ImageUser {
                uid: None,
                username: i.username.clone(),
            },
            _ => ImageUser {
                uid: Some(0),
                username: String::new(),
            },
        }
    }
}

/// Inputs of [`container_config`] besides the pod itself.
pub struct ContainerInputs<'a> {
    pub pod: &'a Pod,
    pub container: &'a Container,
    /// The image as resolved by the image service (an image id or normalized reference).
    pub image_ref: &'a str,
    /// Who the image runs as: the security context's default user, and what runAsNonRoot
    /// checks.
    pub image_user: ImageUser,
    pub restart_count: u32,
    pub is_init: bool,
    pub pod_ip: Option<&'a str>,
    pub mounts: Vec<api::Mount>,
    pub objects: &'a dyn ObjectSource,
    pub config: &'a AgentConfig,
}

/// `namespace`, `name`, `uid` of a pod, or an error naming what is missing.
pub fn pod_identity(pod: &Pod) -> Result<(&str, &str, &str), PodConfigError> {
    let meta = &pod.metadata;
    let name = meta
        .name
        .as_deref()
        .ok_or(PodConfigError::Missing("metadata.name"))?;
    let uid = meta
        .uid
        .as_deref()
        .ok_or(PodConfigError::Missing("metadata.uid"))?;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    Ok((namespace, name, uid))
}

/// In-memory objects for unit tests.
#[cfg(test)]
pub(crate) mod test_objects {
    use super::{ObjectSource, ObjectStore};
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMap, Pod, Secret, Service, ServiceAccountTokenProjection,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// Objects, Services (any namespace) and issued tokens (by projected path).
    #[derive(Default)]
    pub struct Objects(
        pub ObjectStore,
        pub Vec<Service>,
        pub std::collections::BTreeMap<String, String>,
    );

    fn meta(namespace: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        }
    }

    impl Objects {
        pub fn add_config_map(&mut self, namespace: &str, name: &str, data: &[(&str, &str)]) {
            self.0.insert_config_map(ConfigMap {
                metadata: meta(namespace, name),
                data: Some(
                    data.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            });
        }

        pub fn add_secret(&mut self, namespace: &str, name: &str, data: &[(&str, &str)]) {
            self.0.insert_secret(Secret {
                metadata: meta(namespace, name),
                data: Some(
                    data.iter()
                        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                        .collect(),
                ),
                ..Default::default()
            });
        }
    }

    impl ObjectSource for Objects {
        fn config_map(&self, namespace: &str, name: &str) -> Option<ConfigMap> {
            self.0.config_map(namespace, name)
        }
        fn secret(&self, namespace: &str, name: &str) -> Option<Secret> {
            self.0.secret(namespace, name)
        }
        fn service_account_token(
            &self,
            _pod: &Pod,
            source: &ServiceAccountTokenProjection,
        ) -> Option<String> {
            self.2.get(&source.path).cloned()
        }
        fn services(&self, namespace: &str) -> Vec<Service> {
            let in_namespace = |s: &&Service| s.metadata.namespace.as_deref() == Some(namespace);
            self.1.iter().filter(in_namespace).cloned().collect()
        }
    }
}
