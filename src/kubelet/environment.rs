//! What the sync loop needs from the pod-config layer besides the pure spec conversion: volume
//! set-up/teardown and registry credentials. [`PodConfigEnvironment`] binds it to podconfig's
//! volume manager (whose `MountHook` is the mount extension point) and `pull_auth`; tests bind
//! it to doubles.

use crate::cri::api;
use crate::kubelet::config::AgentConfig;
use crate::kubelet::podconfig::{ObjectSource, VolumeManager, pull_auth};
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;

/// Container name → the mounts its volumeMounts resolve to.
pub type ContainerMounts = HashMap<String, Vec<api::Mount>>;

pub trait PodEnvironment: Send + Sync + 'static {
    /// Prepares the pod's volumes (idempotent; refreshes configMap/secret/downwardAPI content)
    /// and returns every container's mounts (init containers included). `Err` explains why the
    /// pod cannot start yet.
    fn setup_volumes(
        &self,
        pod: &Pod,
        objects: &dyn ObjectSource,
    ) -> Result<ContainerMounts, String>;

    /// Unmounts and removes the pod's volumes (idempotent).
    fn teardown_volumes(&self, pod_uid: &str) -> Result<(), String>;

    /// Credentials for pulling `image` for `pod`, if any are configured.
    fn pull_auth(
        &self,
        pod: &Pod,
        image: &str,
        objects: &dyn ObjectSource,
    ) -> Option<api::AuthConfig>;
}

/// The agent's environment: podconfig's volume manager (with its mount hook, if any) and
/// registry credentials from imagePullSecrets and the agent configuration.
pub struct PodConfigEnvironment {
    volumes: VolumeManager,
    config: AgentConfig,
}

impl PodConfigEnvironment {
    pub fn new(volumes: VolumeManager, config: AgentConfig) -> Self {
        PodConfigEnvironment { volumes, config }
    }
}

impl PodEnvironment for PodConfigEnvironment {
    fn setup_volumes(
        &self,
        pod: &Pod,
        objects: &dyn ObjectSource,
    ) -> Result<ContainerMounts, String> {
        let volumes = self
            .volumes
            .setup(pod, objects)
            .map_err(|e| e.to_string())?;
        let mut mounts = ContainerMounts::new();
        for container in pod.spec.iter().flat_map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(s.containers.iter())
        }) {
            let container_mounts = volumes.mounts_for(container).map_err(|e| e.to_string())?;
            mounts.insert(container.name.clone(), container_mounts);
        }
        Ok(mounts)
    }

    fn teardown_volumes(&self, pod_uid: &str) -> Result<(), String> {
        self.volumes.teardown(pod_uid).map_err(|e| e.to_string())
    }

    fn pull_auth(
        &self,
        pod: &Pod,
        image: &str,
        objects: &dyn ObjectSource,
    ) -> Option<api::AuthConfig> {
        pull_auth(pod, image, objects, &self.config)
    }
}
