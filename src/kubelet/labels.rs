//! Label and annotation keys the sync loop puts on CRI sandboxes and containers, so it can map
//! runtime objects back to pods after a restart. Same keys as the kubelet's, so crictl output and
//! tools that read them keep working.

/// Pod name (sandbox and container label).
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// Pod namespace (sandbox and container label).
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Pod UID (sandbox and container label).
pub const POD_UID: &str = crate::cri::POD_UID_LABEL;
/// Container name within the pod (container label).
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Marks a sandbox created by the kubelet (label value "true").
pub const MANAGED: &str = "io.kubernetes.managed";

/// Hash of the container spec; a change means the container must be restarted (annotation).
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
/// Restart count of the container (annotation).
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
/// Termination message path (annotation).
pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
/// Termination message policy (annotation).
pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
/// Pod termination grace period in seconds (annotation).
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Pod deletion grace period in seconds (annotation).
pub const POD_DELETION_GRACE_PERIOD: &str = "io.kubernetes.pod.deletionGracePeriod";
/// JSON-encoded preStop handler (annotation).
pub const CONTAINER_PRESTOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";
/// JSON-encoded container ports (annotation).
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
/// Set on init containers (annotation, value "true"), so ordering survives an agent restart.
pub const INIT_CONTAINER: &str = "io.runp.container.init";
