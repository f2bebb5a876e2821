//! What the sync loop needs from the pod-config layer besides the pure spec conversion: volume
//! set-up/teardown and registry credentials. The agent binds it to podconfig's volume manager
//! and `pull_auth`; it is also the mount hook point (a wrapper may rewrite a mount's host path or
//! add mounts before containers are created).

use crate::cri::api;
use crate::kubelet::podconfig::ObjectSource;
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
