//! API defaults for pods read from files (there is no API server to apply them): the same
//! values `k8s.io/kubernetes/pkg/apis/core/v1/defaults.go` sets, so the sync loop and the
//! conversion see what they would see for a pod from a cluster.

use super::imageref::parse_image_name;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, Pod, PodSecurityContext, PodSpec, Probe, Volume,
};

/// Mode of files in configMap/secret/downwardAPI/projected volumes unless told otherwise.
pub const DEFAULT_VOLUME_FILE_MODE: i32 = 0o644;

/// Fills every unset field the API server would default.
pub fn apply_pod_defaults(pod: &mut Pod) {
    if pod.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        pod.metadata.namespace = Some("default".to_string());
    }
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    default_spec(spec);
}

fn set_if_none<T>(field: &mut Option<T>, value: T) {
    if field.is_none() {
        *field = Some(value);
    }
}

fn default_spec(spec: &mut PodSpec) {
    set_if_none(&mut spec.restart_policy, "Always".to_string());
    set_if_none(&mut spec.dns_policy, "ClusterFirst".to_string());
    set_if_none(&mut spec.termination_grace_period_seconds, 30);
    set_if_none(&mut spec.scheduler_name, "default-scheduler".to_string());
    set_if_none(&mut spec.security_context, PodSecurityContext::default());
    set_if_none(&mut spec.enable_service_links, true);
    let host_network = spec.host_network.unwrap_or(false);
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        default_container(container, host_network);
    }
    for volume in spec.volumes.iter_mut().flatten() {
        default_volume(volume);
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    if c.image_pull_policy.is_none() {
        let latest = parse_image_name(c.image.as_deref().unwrap_or("")).is_latest();
        c.image_pull_policy = Some(if latest { "Always" } else { "IfNotPresent" }.to_string());
    }
    set_if_none(
        &mut c.termination_message_path,
        "/dev/termination-log".to_string(),
    );
    set_if_none(&mut c.termination_message_policy, "File".to_string());
    for port in c.ports.iter_mut().flatten() {
        set_if_none(&mut port.protocol, "TCP".to_string());
        if host_network && port.host_port.unwrap_or(0) == 0 {
            port.host_port = Some(port.container_port);
        }
    }
    for probe in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(lifecycle) = c.lifecycle.as_mut() {
        for handler in [&mut lifecycle.post_start, &mut lifecycle.pre_stop]
            .into_iter()
            .flatten()
        {
            if let Some(http) = handler.http_get.as_mut() {
                set_if_none(&mut http.path, "/".to_string());
                set_if_none(&mut http.scheme, "HTTP".to_string());
            }
        }
    }
    // Requests default to limits, per resource.
    if let Some(resources) = c.resources.as_mut()
        && let Some(limits) = resources.limits.clone()
    {
        let requests = resources.requests.get_or_insert_with(Default::default);
        for (name, value) in limits {
            requests.entry(name).or_insert(value);
        }
    }
    for var in c.env.iter_mut().flatten() {
        if let Some(field) = var.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            set_if_none(&mut field.api_version, "v1".to_string());
        }
    }
}

fn default_probe(probe: &mut Probe) {
    set_if_none(&mut probe.timeout_seconds, 1);
    set_if_none(&mut probe.period_seconds, 10);
    set_if_none(&mut probe.success_threshold, 1);
    set_if_none(&mut probe.failure_threshold, 3);
    if let Some(http) = probe.http_get.as_mut() {
        set_if_none(&mut http.path, "/".to_string());
        set_if_none(&mut http.scheme, "HTTP".to_string());
    }
}

/// Number of volume sources set (a valid volume has exactly one).
pub fn volume_source_count(volume: &Volume) -> usize {
    match serde_json::to_value(volume) {
        Ok(serde_json::Value::Object(map)) => map.keys().filter(|k| *k != "name").count(),
        _ => 0,
    }
}

fn default_volume(volume: &mut Volume) {
    if volume_source_count(volume) == 0 {
        volume.empty_dir = Some(EmptyDirVolumeSource::default());
    }
    if let Some(cm) = volume.config_map.as_mut() {
        set_if_none(&mut cm.default_mode, DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(secret) = volume.secret.as_mut() {
        set_if_none(&mut secret.default_mode, DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(downward) = volume.downward_api.as_mut() {
        set_if_none(&mut downward.default_mode, DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(projected) = volume.projected.as_mut() {
        set_if_none(&mut projected.default_mode, DEFAULT_VOLUME_FILE_MODE);
    }
    if let Some(host_path) = volume.host_path.as_mut() {
        set_if_none(&mut host_path.type_, String::new());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_what_the_api_server_would() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"hostNetwork": true, "containers": [
                {"name": "a", "image": "busybox", "ports": [{"containerPort": 80}],
                 "livenessProbe": {"httpGet": {"port": 80}},
                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "100m"}},
                 "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
                {"name": "b", "image": "busybox:1.36", "imagePullPolicy": "Never"},
                {"name": "c", "image": "busybox@sha256:abcd"}
            ], "volumes": [{"name": "v"}, {"name": "s", "secret": {"secretName": "x"}}]}
        }))
        .unwrap();
        apply_pod_defaults(&mut pod);
        let json = serde_json::to_value(&pod).unwrap();
        let spec = &json["spec"];
        assert_eq!(json["metadata"]["namespace"], "default");
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        let a = &spec["containers"][0];
        assert_eq!(a["imagePullPolicy"], "Always");
        assert_eq!(a["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(a["terminationMessagePolicy"], "File");
        assert_eq!(a["ports"][0]["protocol"], "TCP");
        assert_eq!(
            a["ports"][0]["hostPort"], 80,
            "hostNetwork pods publish ports"
        );
        assert_eq!(a["livenessProbe"]["periodSeconds"], 10);
        assert_eq!(a["livenessProbe"]["failureThreshold"], 3);
        assert_eq!(a["livenessProbe"]["httpGet"]["path"], "/");
        assert_eq!(
            a["resources"]["requests"]["cpu"], "100m",
            "explicit request kept"
        );
        assert_eq!(
            a["resources"]["requests"]["memory"], "1Gi",
            "request from limit"
        );
        assert_eq!(a["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(spec["containers"][1]["imagePullPolicy"], "Never");
        assert_eq!(spec["containers"][2]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(spec["volumes"][0]["emptyDir"], serde_json::json!({}));
        assert_eq!(spec["volumes"][1]["secret"]["defaultMode"], 0o644);
        // Idempotent.
        let mut again = pod.clone();
        apply_pod_defaults(&mut again);
        assert_eq!(again, pod);
    }
}
