//! Downward API values: pod fields (`fieldRef`) and container resources (`resourceFieldRef`),
//! shared by env vars and downwardAPI volumes. Formats follow the kubelet's `fieldpath` package.

use super::quantity::{Quantity, QuantityError};
use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum FieldError {
    #[error("unsupported fieldPath {0:?}")]
    UnsupportedField(String),
    #[error("unsupported container resource {0:?}")]
    UnsupportedResource(String),
    #[error("resourceFieldRef: container {0:?} not found in the pod")]
    NoSuchContainer(String),
    #[error("resourceFieldRef {resource:?}: {source}")]
    Quantity {
        resource: String,
        source: QuantityError,
    },
    #[error("resourceFieldRef {0:?}: divisor must not be zero")]
    ZeroDivisor(String),
}

/// Runtime facts about a pod that are not in its spec.
#[derive(Clone, Debug, Default)]
pub struct PodRuntimeInfo {
    pub node_name: String,
    pub host_ips: Vec<String>,
    pub pod_ips: Vec<String>,
}

/// What the node can give a container whose limit is unset (the kubelet's "node allocatable").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeResources {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
}

impl NodeResources {
    /// Reads the host's CPU count, memory and the capacity of the filesystem holding `root`;
    /// what cannot be read is reported as 0 (no limit known).
    pub fn detect(root: &Path) -> NodeResources {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| parse_mem_total(&text))
            .unwrap_or(0);
        let ephemeral_storage_bytes = nix::sys::statvfs::statvfs(root)
            .map(|s| {
                let total = u128::from(s.blocks()) * u128::from(s.fragment_size());
                i64::try_from(total).unwrap_or(i64::MAX)
            })
            .unwrap_or(0);
        NodeResources {
            cpu_millis: i64::try_from(cpus).unwrap_or(1).saturating_mul(1000),
            memory_bytes,
            ephemeral_storage_bytes,
        }
    }
}

fn parse_mem_total(meminfo: &str) -> Option<i64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `path['key']` → `(path, key)`.
fn split_subscript(field_path: &str) -> Option<(&str, &str)> {
    let inner = field_path.strip_suffix("']")?;
    let (path, key) = inner.split_once("['")?;
    (!path.is_empty()).then_some((path, key))
}

/// Metadata fields, as accepted by downwardAPI volumes (`fieldpath.ExtractFieldPathAsString`).
pub fn metadata_field(pod: &Pod, field_path: &str) -> Result<String, FieldError> {
    let meta = &pod.metadata;
    if let Some((path, key)) = split_subscript(field_path) {
        let map = match path {
            "metadata.annotations" => &meta.annotations,
            "metadata.labels" => &meta.labels,
            _ => return Err(FieldError::UnsupportedField(field_path.to_string())),
        };
        return Ok(map
            .as_ref()
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default());
    }
    let value = match field_path {
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string()),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        _ => return Err(FieldError::UnsupportedField(field_path.to_string())),
    };
    Ok(value)
}

/// Pod fields as accepted by env vars (`podFieldSelectorRuntimeValue`): the metadata fields
/// plus node, service account and IPs.
pub fn env_field(pod: &Pod, field_path: &str, info: &PodRuntimeInfo) -> Result<String, FieldError> {
    let spec = pod.spec.as_ref();
    let value = match field_path {
        "spec.nodeName" => spec
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| info.node_name.clone()),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" => info.host_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => info.host_ips.join(","),
        "status.podIP" => info.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => info.pod_ips.join(","),
        _ => return metadata_field(pod, field_path),
    };
    Ok(value)
}

/// `key="value"` lines sorted by key, values quoted as Go's `%q` does.
pub fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    let mut out = String::new();
    for (key, value) in map.into_iter().flatten() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(key);
        out.push('=');
        out.push_str(&go_quote(value));
    }
    out
}

/// Go's `strconv.Quote`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            ' ' => out.push(' '),
            c if !c.is_control() && !c.is_whitespace() => out.push(c),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// The value of a `resourceFieldRef` for a container of the pod; unset cpu/memory/ephemeral
/// limits report the node's capacity, as the kubelet does.
pub fn resource_field(
    pod: &Pod,
    default_container: &str,
    selector: &ResourceFieldSelector,
    node: &NodeResources,
) -> Result<String, FieldError> {
    let name = selector
        .container_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(default_container);
    let container = find_container(pod, name)?;
    let resource = selector.resource.as_str();
    let quantity_err = |source| FieldError::Quantity {
        resource: resource.to_string(),
        source,
    };
    let divisor = Quantity::parse_opt(selector.divisor.as_ref()).map_err(quantity_err)?;
    let divisor = if divisor.is_zero() {
        Quantity::from_units(1)
    } else {
        divisor
    };
    let (kind, resource_name) = resource
        .split_once('.')
        .ok_or_else(|| FieldError::UnsupportedResource(resource.to_string()))?;
    let resources = container.resources.as_ref();
    let map = match kind {
        "limits" => resources.and_then(|r| r.limits.as_ref()),
        "requests" => resources.and_then(|r| r.requests.as_ref()),
        _ => return Err(FieldError::UnsupportedResource(resource.to_string())),
    };
    let mut value =
        Quantity::parse_opt(map.and_then(|m| m.get(resource_name))).map_err(quantity_err)?;
    if kind == "limits" && value.is_zero() {
        value = match resource_name {
            "cpu" => Quantity::from_millis(node.cpu_millis),
            "memory" => Quantity::from_units(node.memory_bytes),
            "ephemeral-storage" => Quantity::from_units(node.ephemeral_storage_bytes),
            _ => value,
        };
    }
    match resource_name {
        "cpu" => {
            let div = divisor.milli_value();
            if div <= 0 {
                return Err(FieldError::ZeroDivisor(resource.to_string()));
            }
            Ok(ceil_div(value.milli_value(), div).to_string())
        }
        "memory" | "ephemeral-storage" => bytes_over(value, divisor, resource),
        name if name.starts_with("hugepages-") => bytes_over(value, divisor, resource),
        _ => Err(FieldError::UnsupportedResource(resource.to_string())),
    }
}

fn bytes_over(value: Quantity, divisor: Quantity, resource: &str) -> Result<String, FieldError> {
    let div = divisor.value();
    if div <= 0 {
        return Err(FieldError::ZeroDivisor(resource.to_string()));
    }
    Ok(ceil_div(value.value(), div).to_string())
}

fn ceil_div(n: i64, d: i64) -> i64 {
    let q = n / d;
    if n % d > 0 { q + 1 } else { q }
}

fn find_container<'a>(pod: &'a Pod, name: &str) -> Result<&'a Container, FieldError> {
    let spec = pod.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == name)
        .ok_or_else(|| FieldError::NoSuchContainer(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "prod", "uid": "u-1",
                         "labels": {"app": "web", "tier": "front"},
                         "annotations": {"note": "say \"hi\"\n", "a": "b"}},
            "spec": {"serviceAccountName": "builder", "nodeName": "n1", "containers": [
                {"name": "main", "image": "busybox", "resources": {
                    "limits": {"cpu": "1500m", "memory": "256Mi"},
                    "requests": {"cpu": "250m", "memory": "64Mi", "ephemeral-storage": "1Gi"}}},
                {"name": "side", "image": "busybox"}
            ]}
        }))
        .expect("valid pod")
    }

    fn info() -> PodRuntimeInfo {
        PodRuntimeInfo {
            node_name: "fallback".into(),
            host_ips: vec!["10.0.0.1".into(), "fd00::1".into()],
            pod_ips: vec!["10.1.0.5".into(), "fd01::5".into()],
        }
    }

    #[test]
    fn env_fields() {
        let pod = pod();
        let cases: &[(&str, &str)] = &[
            ("metadata.name", "web"),
            ("metadata.namespace", "prod"),
            ("metadata.uid", "u-1"),
            ("metadata.labels['app']", "web"),
            ("metadata.labels['missing']", ""),
            ("metadata.annotations['a']", "b"),
            ("metadata.labels", "app=\"web\"\ntier=\"front\""),
            (
                "metadata.annotations",
                "a=\"b\"\nnote=\"say \\\"hi\\\"\\n\"",
            ),
            ("spec.nodeName", "n1"),
            ("spec.serviceAccountName", "builder"),
            ("status.hostIP", "10.0.0.1"),
            ("status.hostIPs", "10.0.0.1,fd00::1"),
            ("status.podIP", "10.1.0.5"),
            ("status.podIPs", "10.1.0.5,fd01::5"),
        ];
        for (path, expected) in cases {
            assert_eq!(
                env_field(&pod, path, &info()).expect(path),
                *expected,
                "{path}"
            );
        }
        for bad in [
            "spec.containers",
            "metadata.labels[app]",
            "['x']",
            "status.phase",
        ] {
            assert!(env_field(&pod, bad, &info()).is_err(), "{bad} accepted");
        }
        // Volumes only see metadata.
        assert!(metadata_field(&pod, "spec.nodeName").is_err());
    }

    #[test]
    fn node_name_falls_back_to_the_agent() {
        let mut pod = pod();
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = None;
        }
        assert_eq!(
            env_field(&pod, "spec.nodeName", &info()).unwrap(),
            "fallback"
        );
    }

    #[test]
    fn resource_fields() {
        let pod = pod();
        let node = NodeResources {
            cpu_millis: 4000,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 100 << 30,
        };
        let cases: &[(&str, Option<&str>, Option<&str>, &str)] = &[
            // container, resource, divisor → value
            ("limits.cpu", None, None, "2"),
            ("limits.cpu", None, Some("1m"), "1500"),
            ("requests.cpu", None, Some("1m"), "250"),
            ("requests.cpu", None, None, "1"),
            ("limits.memory", None, None, "268435456"),
            ("limits.memory", None, Some("1Mi"), "256"),
            ("requests.memory", None, Some("1M"), "68"),
            ("requests.ephemeral-storage", None, Some("1Gi"), "1"),
            ("limits.ephemeral-storage", None, Some("1Gi"), "100"),
            ("limits.cpu", Some("side"), None, "4"),
            ("limits.memory", Some("side"), Some("1Gi"), "8"),
            ("requests.memory", Some("side"), None, "0"),
        ];
        for (resource, container, divisor, expected) in cases {
            let selector = ResourceFieldSelector {
                container_name: container.map(str::to_string),
                divisor: divisor.map(|d| ApiQuantity(d.to_string())),
                resource: resource.to_string(),
            };
            let got = resource_field(&pod, "main", &selector, &node).expect(resource);
            assert_eq!(got, *expected, "{resource} {container:?} {divisor:?}");
        }
        let bad = ResourceFieldSelector {
            resource: "limits.gpu".into(),
            ..Default::default()
        };
        assert!(resource_field(&pod, "main", &bad, &node).is_err());
        let missing = ResourceFieldSelector {
            resource: "limits.cpu".into(),
            container_name: Some("nope".into()),
            ..Default::default()
        };
        assert!(matches!(
            resource_field(&pod, "main", &missing, &node),
            Err(FieldError::NoSuchContainer(_))
        ));
    }

    #[test]
    fn quotes_like_go() {
        assert_eq!(go_quote("plain"), "\"plain\"");
        assert_eq!(go_quote("tab\there"), "\"tab\\there\"");
        assert_eq!(go_quote("\u{1}"), "\"\\x01\"");
        assert_eq!(go_quote("é ü"), "\"é ü\"");
        assert_eq!(go_quote("back\\slash"), "\"back\\\\slash\"");
    }

    #[test]
    fn reads_meminfo() {
        assert_eq!(
            parse_mem_total("MemTotal:       16318504 kB\nMemFree: 1 kB\n"),
            Some(16_318_504 * 1024)
        );
        assert_eq!(parse_mem_total("nothing"), None);
    }
}
