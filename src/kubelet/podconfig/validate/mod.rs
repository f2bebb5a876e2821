//! Validation of pod specs read from files, reporting every problem with its field path (what the
//! API server would refuse, plus what this agent cannot run).

mod container;
mod volumes;

use super::spec::names::{check_dns1123_label, check_dns1123_subdomain};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use std::collections::HashSet;
use std::net::IpAddr;
pub use volumes::check_relative_path;

#[derive(Default)]
pub(super) struct Errors(Vec<String>);

impl Errors {
    pub(super) fn add(&mut self, path: impl AsRef<str>, message: impl AsRef<str>) {
        self.0
            .push(format!("{}: {}", path.as_ref(), message.as_ref()));
    }

    pub(super) fn check(&mut self, path: impl AsRef<str>, result: Result<(), String>) {
        if let Err(message) = result {
            self.add(path, message);
        }
    }

    pub(super) fn one_of(&mut self, path: &str, value: Option<&str>, allowed: &[&str]) {
        if let Some(value) = value
            && !allowed.contains(&value)
        {
            self.add(
                path,
                format!("unsupported value {value:?}, expected one of {allowed:?}"),
            );
        }
    }
}

/// What the pod's source can provide beyond the pod itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodSourceAbilities {
    /// Projected `serviceAccountToken` volumes can be issued (an API server's TokenRequest is
    /// behind the source): true for pods from the API, false for manifest files.
    pub service_account_tokens: bool,
}

/// Checks a (defaulted) pod from a manifest file; `Err` lists every problem found.
pub fn validate_pod(pod: &Pod) -> Result<(), Vec<String>> {
    validate_pod_from(pod, PodSourceAbilities::default())
}

/// [`validate_pod`] for a source with `abilities`.
pub fn validate_pod_from(pod: &Pod, abilities: PodSourceAbilities) -> Result<(), Vec<String>> {
    let mut errs = Errors::default();
    match pod.metadata.name.as_deref() {
        None => errs.add("metadata.name", "required"),
        Some(name) => errs.check("metadata.name", check_dns1123_subdomain(name)),
    }
    if let Some(namespace) = pod.metadata.namespace.as_deref() {
        errs.check("metadata.namespace", check_dns1123_label(namespace));
    }
    match pod.spec.as_ref() {
        None => errs.add("spec", "required"),
        Some(spec) => validate_spec(spec, abilities, &mut errs),
    }
    if errs.0.is_empty() {
        Ok(())
    } else {
        Err(errs.0)
    }
}

/// Containers (init containers included) one pod may have here. The API has no such limit,
/// but each is a process tree, a log and a status entry: 10,000 of them in one manifest are
/// an accident or an attack, refused before anything is set up.
pub const MAX_CONTAINERS_PER_POD: usize = 500;

fn validate_spec(spec: &PodSpec, abilities: PodSourceAbilities, errs: &mut Errors) {
    if spec.containers.is_empty() {
        errs.add("spec.containers", "at least one container is required");
    }
    let count = spec.containers.len() + spec.init_containers.as_ref().map_or(0, Vec::len);
    if count > MAX_CONTAINERS_PER_POD {
        // One error, not one per container.
        return errs.add(
            "spec.containers",
            format!(
                "{count} containers (init containers included), more than the {MAX_CONTAINERS_PER_POD} a pod may have"
            ),
        );
    }
    errs.one_of(
        "spec.restartPolicy",
        spec.restart_policy.as_deref(),
        &["Always", "OnFailure", "Never"],
    );
    errs.one_of(
        "spec.dnsPolicy",
        spec.dns_policy.as_deref(),
        &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
    );
    for (path, value) in [
        ("spec.hostname", &spec.hostname),
        ("spec.subdomain", &spec.subdomain),
    ] {
        if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
            errs.check(path, check_dns1123_label(value));
        }
    }
    if spec.termination_grace_period_seconds.is_some_and(|s| s < 0) {
        errs.add("spec.terminationGracePeriodSeconds", "must be >= 0");
    }
    validate_dns_config(spec, errs);

    let volumes =
        volumes::validate_volumes(spec.volumes.as_deref().unwrap_or(&[]), abilities, errs);
    let mut names = HashSet::new();
    let init = spec.init_containers.as_deref().unwrap_or(&[]);
    let groups = [
        ("spec.initContainers", init, true),
        ("spec.containers", &spec.containers[..], false),
    ];
    for (group, containers, is_init) in groups {
        for (i, c) in containers.iter().enumerate() {
            let path = format!("{group}[{i}]");
            if !names.insert(c.name.as_str()) {
                errs.add(
                    format!("{path}.name"),
                    format!("duplicate container name {:?}", c.name),
                );
            }
            container::validate_container(
                c,
                &path,
                is_init,
                &volumes,
                spec.host_network.unwrap_or(false),
                errs,
            );
        }
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.add("spec.ephemeralContainers", "not supported");
    }
}

fn validate_dns_config(spec: &PodSpec, errs: &mut Errors) {
    let config = spec.dns_config.as_ref();
    let nameservers = config.and_then(|c| c.nameservers.as_deref()).unwrap_or(&[]);
    if spec.dns_policy.as_deref() == Some("None") && nameservers.is_empty() {
        errs.add(
            "spec.dnsConfig.nameservers",
            "must provide at least one nameserver when dnsPolicy is None",
        );
    }
    if nameservers.len() > 3 {
        errs.add(
            "spec.dnsConfig.nameservers",
            "must not have more than 3 nameservers",
        );
    }
    for (i, server) in nameservers.iter().enumerate() {
        if server.parse::<IpAddr>().is_err() {
            errs.add(
                format!("spec.dnsConfig.nameservers[{i}]"),
                format!("{server:?} is not an IP address"),
            );
        }
    }
    let searches = config.and_then(|c| c.searches.as_deref()).unwrap_or(&[]);
    if searches.len() > 32 {
        errs.add(
            "spec.dnsConfig.searches",
            "must not have more than 32 search paths",
        );
    }
    for (i, search) in searches.iter().enumerate() {
        let domain = search.strip_suffix('.').unwrap_or(search);
        errs.check(
            format!("spec.dnsConfig.searches[{i}]"),
            check_dns1123_subdomain(domain),
        );
    }
    for (i, option) in config
        .and_then(|c| c.options.as_deref())
        .unwrap_or(&[])
        .iter()
        .enumerate()
    {
        if option.name.as_deref().is_none_or(str::is_empty) {
            errs.add(format!("spec.dnsConfig.options[{i}].name"), "required");
        }
    }
}

/// Validates volumes; returns their names.
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors_of(spec: serde_json::Value) -> Vec<String> {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec
        }))
        .unwrap();
        validate_pod(&pod).err().unwrap_or_default()
    }

    #[test]
    fn service_account_tokens_only_from_a_source_that_issues_them() {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a", "image": "x"}], "volumes": [{"name": "v",
                "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]}
        }))
        .unwrap();
        for (tokens, ok) in [(false, false), (true, true)] {
            let abilities = PodSourceAbilities {
                service_account_tokens: tokens,
            };
            assert_eq!(
                validate_pod_from(&pod, abilities).is_ok(),
                ok,
                "{abilities:?}"
            );
        }
    }

    #[test]
    fn a_good_pod_passes() {
        let errors = errors_of(json!({
            "initContainers": [{"name": "init", "image": "busybox", "restartPolicy": "Always"}],
            "containers": [{"name": "web", "image": "busybox",
                "ports": [{"name": "http", "containerPort": 80, "hostPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "A", "value": "1"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data", "subPath": "a/b"}],
                "livenessProbe": {"exec": {"command": ["true"]}},
                "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "500m"}}}],
            "volumes": [{"name": "data", "emptyDir": {}},
                        {"name": "cfg", "configMap": {"name": "c", "items": [{"key": "k", "path": "d/k"}]}}]
        }));
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn reports_each_problem_with_its_path() {
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (
                json!({"containers": []}),
                "spec.containers: at least one container is required",
            ),
            (
                json!({"containers": [{"name": "Web", "image": "x"}]}),
                "spec.containers[0].name: \"Web\" is not a valid DNS-1123 label",
            ),
            (
                json!({"containers": [{"name": "a"}]}),
                "spec.containers[0].image: required",
            ),
            (
                json!({"containers": [{"name": "a", "image": " x"}]}),
                "leading or trailing whitespace",
            ),
            (
                json!({"initContainers": [{"name": "a", "image": "x"}], "containers": [{"name": "a", "image": "x"}]}),
                "spec.containers[0].name: duplicate container name \"a\"",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 0}]}]}),
                "spec.containers[0].ports[0].containerPort: 0 must be between 1 and 65535",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 70000}]}]}),
                "ports[0].hostPort: 70000 must be between 1 and 65535",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80, "protocol": "HTTP"}]}]}),
                "ports[0].protocol: unsupported value \"HTTP\"",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80, "name": "h"}, {"containerPort": 81, "name": "h"}]}]}),
                "duplicate port name \"h\"",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "volumeMounts": [{"name": "nope", "mountPath": "/x"}]}]}),
                "volumeMounts[0].name: volume \"nope\" is not defined in spec.volumes",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/x", "subPath": "../etc"}]}],
                    "volumes": [{"name": "v", "emptyDir": {}}]}),
                "subPath: must not contain '..'",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "volumeMounts": [{"name": "v", "mountPath": "/x", "subPath": "/etc"}]}],
                    "volumes": [{"name": "v", "emptyDir": {}}]}),
                "subPath: must be a relative path",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "volumeMounts": [
                        {"name": "v", "mountPath": "/x"}, {"name": "v", "mountPath": "/x/"}]}],
                    "volumes": [{"name": "v", "emptyDir": {}}]}),
                "is already mounted",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x"}], "volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]}),
                "spec.volumes[1].name: duplicate volume name \"v\"",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x"}], "volumes": [{"name": "v", "emptyDir": {}, "hostPath": {"path": "/x"}}]}),
                "may not specify more than one volume source",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x"}], "volumes": [{"name": "v", "nfs": {"server": "s", "path": "/"}}]}),
                "unsupported volume type",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x"}], "volumes": [{"name": "v", "hostPath": {"path": "rel"}}]}),
                "hostPath.path: must be an absolute path",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x"}], "volumes": [{"name": "v", "configMap": {"name": "c", "items": [{"key": "k", "path": "../k"}]}}]}),
                "item path \"../k\" must not contain '..'",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x"}], "volumes": [{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}),
                "serviceAccountToken is not supported",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "env": [{"name": "A=B", "value": "1"}]}]}),
                "env[0].name: \"A=B\" is not a valid environment variable name",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "env": [{"name": "A", "valueFrom": {}}]}]}),
                "env[0].valueFrom: must specify exactly one source",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "livenessProbe": {"periodSeconds": 5}}]}),
                "livenessProbe: must specify exactly one handler",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"cpu": "lots"}}}]}),
                "resources.limits.cpu: invalid quantity",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}]}),
                "resources.requests.cpu: must be less than or equal to the limit",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x"}], "restartPolicy": "Sometimes"}),
                "spec.restartPolicy: unsupported value",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x"}], "dnsPolicy": "None"}),
                "must provide at least one nameserver",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x"}], "hostname": "Bad_Host"}),
                "spec.hostname",
            ),
            (
                json!({"containers": [{"name": "a", "image": "x", "restartPolicy": "Always"}]}),
                "spec.containers[0].restartPolicy",
            ),
        ];
        for (spec, expected) in cases {
            let errors = errors_of(spec.clone());
            assert!(
                errors.iter().any(|e| e.contains(expected)),
                "spec {spec}: expected {expected:?} in {errors:?}"
            );
        }
    }

    #[test]
    fn relative_paths() {
        assert!(check_relative_path("a/b..c/d").is_ok());
        assert!(check_relative_path("..a").is_ok());
        for bad in ["", "/a", "a/../b", "..", "a/.."] {
            assert!(check_relative_path(bad).is_err(), "{bad}");
        }
    }
}
