//! What the node registers with, parsed from kubelet's flags (`--node-labels`,
//! `--register-with-taints`, `--system-reserved`, ...): bad input is refused at start with the
//! flag and the offending item named.

use crate::kubelet::podconfig::spec::quantity::Quantity;
use k8s_openapi::api::core::v1::Taint;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {item:?}: {reason}")]
pub struct OptionError {
    pub flag: &'static str,
    pub item: String,
    pub reason: String,
}

fn bad(flag: &'static str, item: &str, reason: impl Into<String>) -> OptionError {
    OptionError {
        flag,
        item: item.to_string(),
        reason: reason.into(),
    }
}

/// Resources held back from pods (`--system-reserved`); zero when not given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reserved {
    pub cpu_millis: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pids: i64,
}

/// The node's registration and heartbeat settings.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub node_name: String,
    /// `--node-labels` (added to the standard labels at registration).
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub max_pods: u32,
    pub reserved: Reserved,
    /// InternalIP address.
    pub node_ip: IpAddr,
    /// daemonEndpoints.kubeletEndpoint.Port.
    pub kubelet_port: i32,
    /// The agent's root directory: its filesystem is the node's ephemeral storage.
    pub root: PathBuf,
}

/// Raw flag values, as the CLI holds them.
#[derive(Clone, Debug, Default)]
pub struct RawNodeFlags<'a> {
    pub node_name: &'a str,
    pub node_labels: &'a [String],
    pub register_with_taints: &'a [String],
    pub max_pods: u32,
    pub system_reserved: &'a [String],
    pub node_ip: Option<IpAddr>,
    pub kubelet_port: u16,
    pub root: PathBuf,
}

impl NodeOptions {
    pub fn parse(raw: &RawNodeFlags<'_>) -> Result<NodeOptions, OptionError> {
        let node_name = raw.node_name.trim();
        if !is_dns_subdomain(node_name) {
            return Err(bad(
                "--node-name",
                node_name,
                "must be a lower-case DNS subdomain (a-z, 0-9, '-', '.'; at most 253 characters)",
            ));
        }
        if raw.max_pods == 0 {
            return Err(bad("--max-pods", "0", "must be at least 1"));
        }
        if raw.kubelet_port == 0 {
            return Err(bad(
                "--kubelet-port",
                "0",
                "must be a port number (1-65535)",
            ));
        }
        Ok(NodeOptions {
            node_name: node_name.to_string(),
            labels: parse_labels(raw.node_labels)?,
            taints: raw
                .register_with_taints
                .iter()
                .filter(|t| !t.trim().is_empty())
                .map(|t| parse_taint(t))
                .collect::<Result<_, _>>()?,
            max_pods: raw.max_pods,
            reserved: parse_reserved(raw.system_reserved)?,
            node_ip: raw.node_ip.unwrap_or(IpAddr::from([127, 0, 0, 1])),
            kubelet_port: i32::from(raw.kubelet_port),
            root: raw.root.clone(),
        })
    }
}

/// `key=value` items of `--node-labels`. Like kubelet, labels in the kubernetes.io and k8s.io
/// namespaces are refused unless they are ones a node may set (NodeRestriction would refuse them
/// at registration anyway, with a less helpful message).
pub fn parse_labels(items: &[String]) -> Result<BTreeMap<String, String>, OptionError> {
    const FLAG: &str = "--node-labels";
    let mut labels = BTreeMap::new();
    for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| bad(FLAG, item, "expected key=value"))?;
        validate_label_key(key).map_err(|reason| bad(FLAG, item, reason))?;
        validate_label_value(value).map_err(|reason| bad(FLAG, item, reason))?;
        if !node_may_set(key) {
            return Err(bad(
                FLAG,
                item,
                "labels in the kubernetes.io and k8s.io namespaces are reserved (allowed: \
                 kubelet.kubernetes.io/*, node.kubernetes.io/*, and the well-known topology, \
                 instance-type, os, arch and hostname labels)",
            ));
        }
        labels.insert(key.to_string(), value.to_string());
    }
    Ok(labels)
}

/// kubelet's `KubeletLabels` / `KubeletLabelNamespaces` rule.
fn node_may_set(key: &str) -> bool {
    const ALLOWED: &[&str] = &[
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    ];
    let Some((prefix, _)) = key.split_once('/') else {
        return true;
    };
    let reserved = |ns: &str| prefix == ns || prefix.ends_with(&format!(".{ns}"));
    if !reserved("kubernetes.io") && !reserved("k8s.io") {
        return true;
    }
    ALLOWED.contains(&key)
        || ["kubelet.kubernetes.io", "node.kubernetes.io"]
            .iter()
            .any(|ns| prefix == *ns || prefix.ends_with(&format!(".{ns}")))
}

/// `key=value:Effect` or `key:Effect` (kubelet's `--register-with-taints`).
pub fn parse_taint(item: &str) -> Result<Taint, OptionError> {
    const FLAG: &str = "--register-with-taints";
    let item = item.trim();
    let (key_value, effect) = item
        .rsplit_once(':')
        .ok_or_else(|| bad(FLAG, item, "expected key=value:Effect or key:Effect"))?;
    let effect = match effect {
        "NoSchedule" | "PreferNoSchedule" | "NoExecute" => effect.to_string(),
        _ => {
            return Err(bad(
                FLAG,
                item,
                format!("effect {effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"),
            ));
        }
    };
    let (key, value) = match key_value.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (key_value, None),
    };
    validate_label_key(key).map_err(|reason| bad(FLAG, item, format!("key: {reason}")))?;
    if let Some(value) = value {
        validate_label_value(value)
            .map_err(|reason| bad(FLAG, item, format!("value: {reason}")))?;
    }
    Ok(Taint {
        key: key.to_string(),
        value: value.filter(|v| !v.is_empty()).map(str::to_string),
        effect,
        time_added: None,
    })
}

/// `cpu=500m,memory=1Gi,ephemeral-storage=1Gi,pid=1000`.
pub fn parse_reserved(items: &[String]) -> Result<Reserved, OptionError> {
    const FLAG: &str = "--system-reserved";
    let mut reserved = Reserved::default();
    for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| bad(FLAG, item, "expected resource=quantity"))?;
        let quantity: Quantity = value.parse().map_err(
            |err: crate::kubelet::podconfig::spec::quantity::QuantityError| {
                bad(FLAG, item, err.to_string())
            },
        )?;
        if quantity < Quantity::default() {
            return Err(bad(FLAG, item, "must not be negative"));
        }
        match name.trim() {
            "cpu" => reserved.cpu_millis = quantity.milli_value(),
            "memory" => reserved.memory = quantity.value(),
            "ephemeral-storage" => reserved.ephemeral_storage = quantity.value(),
            "pid" => reserved.pids = quantity.value(),
            other => {
                return Err(bad(
                    FLAG,
                    item,
                    format!("unknown resource {other:?} (cpu, memory, ephemeral-storage or pid)"),
                ));
            }
        }
    }
    Ok(reserved)
}

/// A label key: optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
fn validate_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(format!("prefix {prefix:?} is not a DNS subdomain"));
    }
    if name.is_empty() || name.len() > 63 || !is_label_token(name) {
        return Err(format!(
            "name {name:?} must be 1-63 alphanumerics, '-', '_' or '.', \
             starting and ending with an alphanumeric"
        ));
    }
    Ok(())
}

fn validate_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 || !is_label_token(value) {
        return Err(format!(
            "value {value:?} must be at most 63 alphanumerics, '-', '_' or '.', \
             starting and ending with an alphanumeric"
        ));
    }
    Ok(())
}

fn is_label_token(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: &u8| b.is_ascii_alphanumeric();
    bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// The default node name: the machine's hostname, lower-cased (as kubelet).
pub fn default_node_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn taints_parse_as_kubelet() {
        let ok: &[(&str, &str, Option<&str>, &str)] = &[
            (
                "dedicated=runp:NoSchedule",
                "dedicated",
                Some("runp"),
                "NoSchedule",
            ),
            (
                "example.com/gpu:NoExecute",
                "example.com/gpu",
                None,
                "NoExecute",
            ),
            ("k=:PreferNoSchedule", "k", None, "PreferNoSchedule"),
            (" spaced=v:NoSchedule ", "spaced", Some("v"), "NoSchedule"),
        ];
        for (input, key, value, effect) in ok {
            let taint = parse_taint(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(taint.key, *key, "{input}");
            assert_eq!(taint.value.as_deref(), *value, "{input}");
            assert_eq!(taint.effect, *effect, "{input}");
        }
        let bad: &[(&str, &str)] = &[
            ("dedicated=runp", "expected key=value:Effect"),
            ("k=v:Sometimes", "effect \"Sometimes\""),
            ("=v:NoSchedule", "name \"\""),
            ("bad key=v:NoSchedule", "bad key"),
            ("k=bad value!:NoSchedule", "value"),
            (":NoSchedule", "key"),
        ];
        for (input, needle) in bad {
            let err = parse_taint(input).expect_err(input).to_string();
            assert!(err.contains("--register-with-taints"), "{err}");
            assert!(err.contains(needle), "{input}: {err}");
        }
    }

    #[test]
    fn labels_parse_and_reserved_namespaces_are_refused() {
        let labels = parse_labels(&strings(&[
            "a=b",
            "example.com/team=x",
            "node.kubernetes.io/pool=blue",
            "topology.kubernetes.io/zone=z1",
            "empty=",
            "",
        ]))
        .unwrap();
        assert_eq!(labels.len(), 5);
        assert_eq!(labels["a"], "b");
        assert_eq!(labels["empty"], "");
        let bad: &[(&str, &str)] = &[
            ("novalue", "expected key=value"),
            ("node-role.kubernetes.io/master=", "reserved"),
            ("kubernetes.io/custom=x", "reserved"),
            ("foo.k8s.io/x=y", "reserved"),
            ("a=b c", "value"),
            ("Upper.Prefix/a=b", "prefix"),
        ];
        for (input, needle) in bad {
            let err = parse_labels(&strings(&[input]))
                .expect_err(input)
                .to_string();
            assert!(err.contains("--node-labels"), "{err}");
            assert!(err.contains(needle), "{input}: {err}");
        }
        let long = format!("{}=v", "k".repeat(64));
        assert!(parse_labels(&[long]).is_err());
    }

    #[test]
    fn system_reserved_uses_quantities() {
        let reserved = parse_reserved(&strings(&[
            "cpu=500m",
            "memory=1Gi",
            "ephemeral-storage=2G",
            "pid=1000",
        ]))
        .unwrap();
        assert_eq!(
            reserved,
            Reserved {
                cpu_millis: 500,
                memory: 1 << 30,
                ephemeral_storage: 2_000_000_000,
                pids: 1000,
            }
        );
        assert_eq!(parse_reserved(&[]).unwrap(), Reserved::default());
        let bad: &[(&str, &str)] = &[
            ("gpu=1", "unknown resource"),
            ("cpu", "expected resource=quantity"),
            ("memory=lots", "invalid quantity"),
            ("memory=-1Gi", "negative"),
        ];
        for (input, needle) in bad {
            let err = parse_reserved(&strings(&[input]))
                .expect_err(input)
                .to_string();
            assert!(err.contains("--system-reserved"), "{err}");
            assert!(err.contains(needle), "{input}: {err}");
        }
    }

    #[test]
    fn node_options_check_name_and_counts() {
        let base = RawNodeFlags {
            node_name: "worker-1",
            max_pods: 110,
            kubelet_port: 10250,
            ..Default::default()
        };
        let opts = NodeOptions::parse(&base).unwrap();
        assert_eq!(opts.node_name, "worker-1");
        assert_eq!(opts.node_ip, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(opts.kubelet_port, 10250);
        for (name, ok) in [
            ("Worker", false),
            ("a_b", false),
            ("", false),
            ("-a", false),
            ("a.b-c", true),
        ] {
            let raw = RawNodeFlags {
                node_name: name,
                ..base.clone()
            };
            assert_eq!(NodeOptions::parse(&raw).is_ok(), ok, "{name}");
        }
        let zero = RawNodeFlags {
            max_pods: 0,
            ..base.clone()
        };
        assert!(
            NodeOptions::parse(&zero)
                .unwrap_err()
                .to_string()
                .contains("--max-pods")
        );
    }

    #[test]
    fn default_node_name_is_lower_case() {
        let name = default_node_name();
        assert!(!name.is_empty());
        assert_eq!(name, name.to_lowercase());
    }
}
