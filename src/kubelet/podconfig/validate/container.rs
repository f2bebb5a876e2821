//! Container validation.

use super::Errors;
use super::volumes::check_relative_path;
use crate::kubelet::podconfig::spec::names::{
    check_dns1123_label, check_port_name, is_env_var_name,
};
use crate::kubelet::podconfig::spec::quantity::Quantity;
use k8s_openapi::api::core::v1::{Container, Probe};
use std::collections::{BTreeMap, BTreeSet, HashSet};

pub(super) fn validate_container(
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
