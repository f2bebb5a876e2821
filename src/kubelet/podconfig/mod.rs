//! Pod spec → CRI config conversion and the pod-level inputs it needs (objects, volumes, env,
//! DNS, registry auth). Pure where possible; the sync loop calls these and talks to the runtime.
//!
//! CONTRACT (shared by the sync loop and this module; keep the signatures stable):
//! - [`ObjectSource`]: read access to ConfigMaps and Secrets known to the agent.
//! - [`PodEvent`]: what a pod source emits.
//! - [`sandbox_config`], [`container_config`], [`container_hash`].

pub mod defaults;
pub mod env;
pub mod expansion;
pub mod fieldpath;
pub mod imageref;
pub mod names;
pub mod objects;
pub mod quantity;
pub mod source;
pub mod store;
pub mod validate;
pub mod volumes;

pub use source::{ManifestProblem, ManifestSource, Severity, SourceOptions};
pub use store::{ObjectSet, ObjectStore};
pub use volumes::{MountHook, PodVolumes, VolumeError, VolumeManager};

use crate::cri::api;
use crate::kubelet::config::AgentConfig;
use crate::kubelet::labels;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

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
    Env(#[from] env::EnvError),
}

/// Read access to the ConfigMaps and Secrets the agent knows about.
pub trait ObjectSource: Send + Sync {
    fn config_map(&self, namespace: &str, name: &str) -> Option<ConfigMap>;
    fn secret(&self, namespace: &str, name: &str) -> Option<Secret>;
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

/// Inputs of [`container_config`] besides the pod itself.
pub struct ContainerInputs<'a> {
    pub pod: &'a Pod,
    pub container: &'a Container,
    /// The image as resolved by the image service (an image id or normalized reference).
    pub image_ref: &'a str,
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

/// Labels every CRI object of a pod carries.
fn pod_labels(pod: &Pod) -> Result<HashMap<String, String>, PodConfigError> {
    let (namespace, name, uid) = pod_identity(pod)?;
    let mut out: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    out.insert(labels::POD_NAME.into(), name.into());
    out.insert(labels::POD_NAMESPACE.into(), namespace.into());
    out.insert(labels::POD_UID.into(), uid.into());
    Ok(out)
}

/// The sandbox config of a pod; `attempt` counts sandbox re-creations.
pub fn sandbox_config(
    pod: &Pod,
    config: &AgentConfig,
    attempt: u32,
) -> Result<api::PodSandboxConfig, PodConfigError> {
    let (namespace, name, uid) = pod_identity(pod)?;
    let mut sandbox_labels = pod_labels(pod)?;
    sandbox_labels.insert(labels::MANAGED.into(), "true".into());
    Ok(api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: namespace.into(),
            attempt,
        }),
        hostname: name.chars().take(63).collect(),
        log_directory: config
            .log_root
            .join("pods")
            .join(format!("{namespace}_{name}_{uid}"))
            .to_string_lossy()
            .into_owned(),
        labels: sandbox_labels,
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        ..Default::default()
    })
}

/// The container config of one container of a pod.
pub fn container_config(
    inputs: &ContainerInputs<'_>,
) -> Result<api::ContainerConfig, PodConfigError> {
    let container = inputs.container;
    let mut container_labels = pod_labels(inputs.pod)?;
    container_labels.insert(labels::CONTAINER_NAME.into(), container.name.clone());
    let mut annotations = HashMap::new();
    annotations.insert(labels::CONTAINER_HASH.into(), container_hash(container));
    annotations.insert(
        labels::CONTAINER_RESTART_COUNT.into(),
        inputs.restart_count.to_string(),
    );
    if inputs.is_init {
        annotations.insert(labels::INIT_CONTAINER.into(), "true".into());
    }
    Ok(api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: container.name.clone(),
            attempt: inputs.restart_count,
        }),
        image: Some(api::ImageSpec {
            image: inputs.image_ref.to_string(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: container.command.clone().unwrap_or_default(),
        args: container.args.clone().unwrap_or_default(),
        working_dir: container.working_dir.clone().unwrap_or_default(),
        labels: container_labels,
        annotations,
        mounts: inputs.mounts.clone(),
        log_path: format!("{}/{}.log", container.name, inputs.restart_count),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        ..Default::default()
    })
}

/// Stable hash of a container spec: a change means the running container must be replaced.
pub fn container_hash(container: &Container) -> String {
    let json = serde_json::to_vec(container).unwrap_or_default();
    hex::encode(&Sha256::digest(&json)[..8])
}

/// In-memory objects for unit tests.
#[cfg(test)]
pub(crate) mod test_objects {
    use super::{ObjectSource, ObjectStore};
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[derive(Default)]
    pub struct Objects(pub ObjectStore);

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
    }
}
