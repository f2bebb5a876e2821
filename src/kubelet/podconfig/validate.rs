//! Validation of pod specs read from files, reporting every problem with its field path (what the
//! API server would refuse, plus what this agent cannot run).

use super::defaults::volume_source_count;
use super::names::{
    check_dns1123_label, check_dns1123_subdomain, check_port_name, is_env_var_name,
};
use super::quantity::Quantity;
use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, KeyToPath, Pod, PodSpec, Probe, Volume,
};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;

/// Volume sources this agent implements.
const SUPPORTED_VOLUMES: &str = "hostPath, emptyDir, configMap, secret, downwardAPI, projected";

#[derive(Default)]
struct Errors(Vec<String>);

impl Errors {
    fn add(&mut self, path: impl AsRef<str>, message: impl AsRef<str>) {
        self.0
            .push(format!("{}: {}", path.as_ref(), message.as_ref()));
    }

    fn check(&mut self, path: impl AsRef<str>, result: Result<(), String>) {
        if let Err(message) = result {
            self.add(path, message);
        }
    }

    fn one_of(&mut self, path: &str, value: Option<&str>, allowed: &[&str]) {
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

/// Checks a (defaulted) pod; `Err` lists every problem found.
pub fn validate_pod(pod: &Pod) -> Result<(), Vec<String>> {
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
        Some(spec) => validate_spec(spec, &mut errs),
    }
    if errs.0.is_empty() {
        Ok(())
    } else {
        Err(errs.0)
    }
}

fn validate_spec(spec: &PodSpec, errs: &mut Errors) {
    if spec.containers.is_empty() {
        errs.add("spec.containers", "at least one container is required");
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

    let volumes = validate_volumes(spec.volumes.as_deref().unwrap_or(&[]), errs);
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
            validate_container(
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
fn validate_volumes(volumes: &[Volume], errs: &mut Errors) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}]");
        errs.check(format!("{path}.name"), check_dns1123_label(&v.name));
        if !names.insert(v.name.clone()) {
            errs.add(
                format!("{path}.name"),
                format!("duplicate volume name {:?}", v.name),
            );
        }
        match volume_source_count(v) {
            1 => {}
            0 => errs.add(&path, "must specify a volume source"),
            _ => errs.add(&path, "may not specify more than one volume source"),
        }
        let supported = v.host_path.is_some()
            || v.empty_dir.is_some()
            || v.config_map.is_some()
            || v.secret.is_some()
            || v.downward_api.is_some()
            || v.projected.is_some();
        if !supported {
            errs.add(
                &path,
                format!(
                    "volume {:?}: unsupported volume type (supported: {SUPPORTED_VOLUMES})",
                    v.name
                ),
            );
        }
        if let Some(host) = &v.host_path {
            if !host.path.starts_with('/') {
                errs.add(format!("{path}.hostPath.path"), "must be an absolute path");
            }
            errs.one_of(
                &format!("{path}.hostPath.type"),
                host.type_.as_deref(),
                &[
                    "",
                    "DirectoryOrCreate",
                    "Directory",
                    "FileOrCreate",
                    "File",
                    "Socket",
                    "CharDevice",
                    "BlockDevice",
                ],
            );
        }
        if let Some(empty) = &v.empty_dir {
            errs.one_of(
                &format!("{path}.emptyDir.medium"),
                empty.medium.as_deref(),
                &["", "Memory"],
            );
            if let Err(e) = Quantity::parse_opt(empty.size_limit.as_ref()) {
                errs.add(format!("{path}.emptyDir.sizeLimit"), e.to_string());
            }
        }
        // (item path, mode) of API-data volumes; default modes have no path.
        let mut items: Vec<Item> = Vec::new();
        if let Some(cm) = &v.config_map {
            items.extend(key_items(&cm.items));
            items.push((None, cm.default_mode));
        }
        if let Some(secret) = &v.secret {
            if secret.secret_name.as_deref().is_none_or(str::is_empty) {
                errs.add(format!("{path}.secret.secretName"), "required");
            }
            items.extend(key_items(&secret.items));
            items.push((None, secret.default_mode));
        }
        if let Some(downward) = &v.downward_api {
            items.extend(file_items(&downward.items));
            items.push((None, downward.default_mode));
        }
        if let Some(projected) = &v.projected {
            items.push((None, projected.default_mode));
            for source in projected.sources.iter().flatten() {
                if let Some(cm) = &source.config_map {
                    items.extend(key_items(&cm.items));
                }
                if let Some(secret) = &source.secret {
                    items.extend(key_items(&secret.items));
                }
                if let Some(downward) = &source.downward_api {
                    items.extend(file_items(&downward.items));
                }
                if source.service_account_token.is_some() {
                    errs.add(&path, "projected serviceAccountToken is not supported (no API server issues tokens)");
                }
                if source.cluster_trust_bundle.is_some() || source.pod_certificate.is_some() {
                    errs.add(
                        &path,
                        "projected clusterTrustBundle/podCertificate sources are not supported",
                    );
                }
            }
        }
        for (item, mode) in items {
            // `..`-prefixed names are the atomic writer's own.
            let result = item.map(|item| {
                check_relative_path(item).and_then(|()| match item.starts_with("..") {
                    true => Err("must not start with '..'".to_string()),
                    false => Ok(()),
                })
            });
            if let Some(Err(e)) = result {
                errs.add(
                    &path,
                    format!("item path {:?} {e}", item.unwrap_or_default()),
                );
            }
            if mode.is_some_and(|m| !(0..=0o777).contains(&m)) {
                errs.add(
                    &path,
                    format!("mode {:o} must be between 0 and 0777", mode.unwrap_or(0)),
                );
            }
        }
    }
    names
}

type Item<'a> = (Option<&'a str>, Option<i32>);

fn key_items(list: &Option<Vec<KeyToPath>>) -> Vec<Item<'_>> {
    let items = list.iter().flatten();
    items.map(|i| (Some(i.path.as_str()), i.mode)).collect()
}

fn file_items(list: &Option<Vec<DownwardAPIVolumeFile>>) -> Vec<Item<'_>> {
    let items = list.iter().flatten();
    items.map(|i| (Some(i.path.as_str()), i.mode)).collect()
}

/// A path that stays below its base: relative, no `..` component, not empty.
pub fn check_relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("must not be empty".into());
    }
    if path.starts_with('/') {
        return Err("must be a relative path".into());
    }
    if path.split('/').any(|part| part == "..") {
        return Err("must not contain '..'".into());
    }
    Ok(())
}

fn validate_container(
    c: &Container,
    path: &str,
    is_init: bool,
    volumes: &BTreeSet<String>,
    host_network: bool,
    errs: &mut Errors,
) {
    errs.check(format!("{path}.name"), check_dns1123_label(&c.name));
    match c.image.as_deref() {
        None | Some("") => errs.add(format!("{path}.image"), "required"),
        Some(image) if image.trim() != image => errs.add(
            format!("{path}.image"),
            "must not have leading or trailing whitespace",
        ),
        Some(_) => {}
    }
    errs.one_of(
        &format!("{path}.imagePullPolicy"),
        c.image_pull_policy.as_deref(),
        &["Always", "IfNotPresent", "Never"],
    );
    errs.one_of(
        &format!("{path}.terminationMessagePolicy"),
        c.termination_message_policy.as_deref(),
        &["File", "FallbackToLogsOnError"],
    );
    let allowed_restart: &[&str] = if is_init { &["Always"] } else { &[] };
    errs.one_of(
        &format!("{path}.restartPolicy"),
        c.restart_policy.as_deref(),
        allowed_restart,
    );

    let mut port_names = HashSet::new();
    for (i, port) in c.ports.iter().flatten().enumerate() {
        let ppath = format!("{path}.ports[{i}]");
        if !(1..=65535).contains(&port.container_port) {
            errs.add(
                format!("{ppath}.containerPort"),
                format!("{} must be between 1 and 65535", port.container_port),
            );
        }
        if let Some(host_port) = port.host_port.filter(|p| *p != 0) {
            if !(1..=65535).contains(&host_port) {
                errs.add(
                    format!("{ppath}.hostPort"),
                    format!("{host_port} must be between 1 and 65535"),
                );
            }
            if host_network && host_port != port.container_port {
                errs.add(
                    format!("{ppath}.hostPort"),
                    "must match containerPort when hostNetwork is true",
                );
            }
        }
        errs.one_of(
            &format!("{ppath}.protocol"),
            port.protocol.as_deref(),
            &["TCP", "UDP", "SCTP"],
        );
        if let Some(name) = port.name.as_deref() {
            errs.check(format!("{ppath}.name"), check_port_name(name));
            if !port_names.insert(name) {
                errs.add(
                    format!("{ppath}.name"),
                    format!("duplicate port name {name:?}"),
                );
            }
        }
    }

    for (i, var) in c.env.iter().flatten().enumerate() {
        let epath = format!("{path}.env[{i}]");
        if !is_env_var_name(&var.name) {
            errs.add(
                format!("{epath}.name"),
                format!("{:?} is not a valid environment variable name", var.name),
            );
        }
        if let Some(from) = &var.value_from {
            let sources = [
                from.field_ref.is_some(),
                from.resource_field_ref.is_some(),
                from.config_map_key_ref.is_some(),
                from.secret_key_ref.is_some(),
                from.file_key_ref.is_some(),
            ];
            if sources.iter().filter(|s| **s).count() != 1 {
                errs.add(
                    format!("{epath}.valueFrom"),
                    "must specify exactly one source",
                );
            }
            if var.value.as_deref().is_some_and(|v| !v.is_empty()) {
                errs.add(&epath, "may not have both value and valueFrom");
            }
        }
    }
    for (i, from) in c.env_from.iter().flatten().enumerate() {
        if from.config_map_ref.is_some() == from.secret_ref.is_some() {
            errs.add(
                format!("{path}.envFrom[{i}]"),
                "must specify exactly one of configMapRef or secretRef",
            );
        }
    }

    let mut mount_paths = HashSet::new();
    for (i, mount) in c.volume_mounts.iter().flatten().enumerate() {
        let mpath = format!("{path}.volumeMounts[{i}]");
        if !volumes.contains(&mount.name) {
            errs.add(
                format!("{mpath}.name"),
                format!("volume {:?} is not defined in spec.volumes", mount.name),
            );
        }
        if !mount.mount_path.starts_with('/') {
            errs.add(
                format!("{mpath}.mountPath"),
                format!("{:?} must be an absolute path", mount.mount_path),
            );
        }
        if !mount_paths.insert(mount.mount_path.trim_end_matches('/')) {
            errs.add(
                format!("{mpath}.mountPath"),
                format!("{:?} is already mounted", mount.mount_path),
            );
        }
        let sub_path = mount.sub_path.as_deref().filter(|s| !s.is_empty());
        let sub_path_expr = mount.sub_path_expr.as_deref().filter(|s| !s.is_empty());
        if sub_path.is_some() && sub_path_expr.is_some() {
            errs.add(&mpath, "subPath and subPathExpr are mutually exclusive");
        }
        if let Some(sub) = sub_path.or(sub_path_expr) {
            errs.check(format!("{mpath}.subPath"), check_relative_path(sub));
        }
        errs.one_of(
            &format!("{mpath}.mountPropagation"),
            mount.mount_propagation.as_deref(),
            &["None", "HostToContainer", "Bidirectional"],
        );
        errs.one_of(
            &format!("{mpath}.recursiveReadOnly"),
            mount.recursive_read_only.as_deref(),
            &["Disabled", "IfPossible", "Enabled"],
        );
    }

    for (name, probe) in [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ] {
        if let Some(probe) = probe {
            validate_probe(probe, &format!("{path}.{name}"), errs);
        }
    }

    let resources = c.resources.as_ref();
    let mut parsed = BTreeMap::new();
    for (kind, map) in [
        ("limits", resources.and_then(|r| r.limits.as_ref())),
        ("requests", resources.and_then(|r| r.requests.as_ref())),
    ] {
        for (name, value) in map.into_iter().flatten() {
            match value.0.parse::<Quantity>() {
                Ok(q) if q < Quantity::default() => errs.add(
                    format!("{path}.resources.{kind}.{name}"),
                    "must not be negative",
                ),
                Ok(q) => {
                    parsed.insert((kind, name.as_str()), q);
                }
                Err(e) => errs.add(format!("{path}.resources.{kind}.{name}"), e.to_string()),
            }
        }
    }
    for ((kind, name), request) in &parsed {
        if *kind == "requests"
            && let Some(limit) = parsed.get(&("limits", name))
            && request > limit
        {
            errs.add(
                format!("{path}.resources.requests.{name}"),
                "must be less than or equal to the limit",
            );
        }
    }
}

fn validate_probe(probe: &Probe, path: &str, errs: &mut Errors) {
    let handlers = [
        probe.exec.is_some(),
        probe.http_get.is_some(),
        probe.tcp_socket.is_some(),
        probe.grpc.is_some(),
    ];
    if handlers.iter().filter(|h| **h).count() != 1 {
        errs.add(
            path,
            "must specify exactly one handler (exec, httpGet, tcpSocket or grpc)",
        );
    }
    for (field, value, min) in [
        ("periodSeconds", probe.period_seconds, 1),
        ("timeoutSeconds", probe.timeout_seconds, 1),
        ("successThreshold", probe.success_threshold, 1),
        ("failureThreshold", probe.failure_threshold, 1),
        ("initialDelaySeconds", probe.initial_delay_seconds, 0),
    ] {
        if value.is_some_and(|v| v < min) {
            errs.add(format!("{path}.{field}"), format!("must be >= {min}"));
        }
    }
}

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
