//! The default pod network as a CNI network configuration list, and the per-plugin configs the
//! CNI spec derives from it (name, cniVersion, runtimeConfig by capability, prevResult). Pure.

use super::NetworkError;
use crate::cri::api;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::Path;

/// The network's name: host-local keeps its leases in `<dataDir>/<name>/`, and the bridge
/// plugin names its iptables chains after it.
pub const NETWORK_NAME: &str = "runp";

/// The interface the pod sees.
pub const POD_IFNAME: &str = "eth0";

/// CNI spec versions runp speaks, preferred first (0.4.0 is the oldest with DEL prevResult).
const VERSIONS: [&str; 2] = ["1.0.0", "0.4.0"];

/// The highest version of ours the plugins support, from their VERSION reply.
pub fn choose_version(supported: &[String]) -> Option<&'static str> {
    VERSIONS
        .into_iter()
        .find(|v| supported.iter().any(|s| s == v))
}

/// Checks the pod CIDRs (at most one per family, no host bits, room for pods) and the bridge
/// name (a Linux interface name).
pub fn validate(pod_cidrs: &[IpNet], bridge: &str) -> Result<(), NetworkError> {
    let bad = |m: String| Err(NetworkError::InvalidConfig(m));
    if pod_cidrs.is_empty() {
        return bad("no pod CIDR".into());
    }
    let v4 = pod_cidrs
        .iter()
        .filter(|c| matches!(c, IpNet::V4(_)))
        .count();
    if v4 > 1 || pod_cidrs.len() - v4 > 1 {
        return bad("at most one IPv4 and one IPv6 pod CIDR".into());
    }
    for cidr in pod_cidrs {
        if cidr.trunc() != *cidr {
            return bad(format!(
                "pod CIDR {cidr} has host bits set (did you mean {}?)",
                cidr.trunc()
            ));
        }
        if cidr.max_prefix_len() - cidr.prefix_len() < 2 {
            return bad(format!(
                "pod CIDR {cidr} is too small for a gateway and a pod"
            ));
        }
    }
    let valid_name = !bridge.is_empty()
        && bridge.len() <= 15
        && bridge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !valid_name {
        return bad(format!("bridge name {bridge:?}: 1 to 15 of [A-Za-z0-9._-]"));
    }
    Ok(())
}

/// The network configuration list: bridge (pod gateway, masquerade, hairpin) with host-local
/// IPAM over `pod_cidrs`, then portmap for hostPorts. Call [`validate`] first.
pub fn render_conflist(version: &str, bridge: &str, pod_cidrs: &[IpNet], data_dir: &Path) -> Value {
    let ranges: Vec<Value> = pod_cidrs
        .iter()
        .map(|c| json!([{ "subnet": c.to_string() }]))
        .collect();
    let routes: Vec<Value> = pod_cidrs
        .iter()
        .map(|c| match c {
            IpNet::V4(_) => json!({ "dst": "0.0.0.0/0" }),
            IpNet::V6(_) => json!({ "dst": "::/0" }),
        })
        .collect();
    json!({
        "cniVersion": version,
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": ranges,
                    "routes": routes,
                    "dataDir": data_dir.display().to_string(),
                },
            },
            portmap_plugin(),
        ],
    })
}

/// The portmap plugin alone: hostPorts of the bridge network's pods (`--network=bridge`).
pub fn render_portmap_conflist(version: &str) -> Value {
    json!({
        "cniVersion": version,
        "name": NETWORK_NAME,
        "plugins": [portmap_plugin()],
    })
}

fn portmap_plugin() -> Value {
    json!({
        "type": "portmap",
        "capabilities": { "portMappings": true },
        // DNAT for 127.0.0.1:hostPort too (route_localnet on the bridge + masquerade).
        "snat": true,
    })
}

/// The plugins of a conflist, in order: (type, plugin object).
pub fn plugins(conflist: &Value) -> Result<Vec<(String, &Value)>, NetworkError> {
    let list = conflist["plugins"]
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| NetworkError::InvalidConfig("network config without plugins".into()))?;
    list.iter()
        .map(|p| {
            let ty = p["type"].as_str().filter(|t| valid_plugin_type(t));
            ty.map(|t| (t.to_string(), p)).ok_or_else(|| {
                NetworkError::InvalidConfig(format!("plugin without a valid type: {p}"))
            })
        })
        .collect()
}

/// A plugin type is a file name in the CNI bin dirs, nothing else.
fn valid_plugin_type(ty: &str) -> bool {
    !ty.is_empty()
        && ty != "."
        && ty != ".."
        && ty
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// What one plugin reads on stdin (the CNI spec's derivation from a conflist): its own object
/// plus the list's name and cniVersion, `runtimeConfig` entries for the capabilities it declares,
/// and the previous result.
pub fn plugin_config(
    conflist: &Value,
    plugin: &Value,
    runtime_config: &serde_json::Map<String, Value>,
    prev_result: Option<&Value>,
) -> Value {
    let mut conf = plugin.clone();
    let Some(obj) = conf.as_object_mut() else {
        return conf;
    };
    obj.insert("name".into(), conflist["name"].clone());
    obj.insert("cniVersion".into(), conflist["cniVersion"].clone());
    let wanted: serde_json::Map<String, Value> = plugin["capabilities"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, on)| on.as_bool() == Some(true))
        .filter_map(|(cap, _)| runtime_config.get(cap).map(|v| (cap.clone(), v.clone())))
        .collect();
    if !wanted.is_empty() {
        obj.insert("runtimeConfig".into(), Value::Object(wanted));
    }
    if let Some(prev) = prev_result {
        obj.insert("prevResult".into(), prev.clone());
    }
    conf
}

/// A hostPort mapping in the portmap plugin's `portMappings` form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    #[serde(rename = "hostPort")]
    pub host_port: u16,
    #[serde(rename = "containerPort")]
    pub container_port: u16,
    pub protocol: String,
    #[serde(rename = "hostIP", default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

/// The CRI port mappings that need the host side (a hostPort); the others are informational.
pub fn port_mappings(cri: &[api::PortMapping]) -> Result<Vec<PortMapping>, NetworkError> {
    let mut out = Vec::new();
    for m in cri {
        if m.host_port == 0 {
            continue;
        }
        let port = |what: &str, p: i32| {
            u16::try_from(p).ok().filter(|p| *p > 0).ok_or_else(|| {
                NetworkError::InvalidPortMapping(format!("{what} {p} is not in 1..=65535"))
            })
        };
        let protocol = match api::Protocol::try_from(m.protocol) {
            Ok(api::Protocol::Tcp) => "tcp",
            Ok(api::Protocol::Udp) => "udp",
            Ok(api::Protocol::Sctp) => "sctp",
            Err(_) => {
                return Err(NetworkError::InvalidPortMapping(format!(
                    "unknown protocol {}",
                    m.protocol
                )));
            }
        };
        if !m.host_ip.is_empty() && m.host_ip.parse::<std::net::IpAddr>().is_err() {
            return Err(NetworkError::InvalidPortMapping(format!(
                "hostIP {:?} is not an IP address",
                m.host_ip
            )));
        }
        out.push(PortMapping {
            host_port: port("hostPort", m.host_port)?,
            container_port: port("containerPort", m.container_port)?,
            protocol: protocol.to_string(),
            host_ip: m.host_ip.clone(),
        });
    }
    Ok(out)
}

/// The runtimeConfig offered to plugins by capability (only what this pod needs).
pub fn runtime_config(mappings: &[PortMapping]) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    if !mappings.is_empty() {
        out.insert("portMappings".into(), json!(mappings));
    }
    out
}

/// `CNI_ARGS`: the pod's identity the way kubelet-driven runtimes pass it; values a CNI_ARGS
/// parser cannot carry (`;`, `=`) are left out.
pub fn cni_args(meta: &api::PodSandboxMetadata, sandbox_id: &str) -> String {
    let mut args = vec!["IgnoreUnknown=1".to_string()];
    for (key, value) in [
        ("K8S_POD_NAMESPACE", meta.namespace.as_str()),
        ("K8S_POD_NAME", meta.name.as_str()),
        ("K8S_POD_INFRA_CONTAINER_ID", sandbox_id),
        ("K8S_POD_UID", meta.uid.as_str()),
    ] {
        if !value.is_empty() && !value.contains([';', '=']) {
            args.push(format!("{key}={value}"));
        }
    }
    args.join(";")
}

/// The PATH plugins get: ours plus the sbin dirs where iptables lives (a service manager's PATH
/// often lacks them).
pub fn plugin_path(current: Option<&str>) -> String {
    let mut dirs: Vec<&str> = current
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .collect();
    for d in [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ] {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn validation_table() {
        let cases: &[(&[&str], &str, Option<&str>)] = &[
            (&["10.88.0.0/16"], "runp0", None),
            (&["10.88.0.0/16", "fd00:88::/64"], "runp0", None),
            (&["10.88.0.0/30"], "br", None),
            (&[], "runp0", Some("no pod CIDR")),
            (
                &["10.88.0.0/16", "10.89.0.0/16"],
                "runp0",
                Some("at most one"),
            ),
            (
                &["10.88.0.1/16"],
                "runp0",
                Some("did you mean 10.88.0.0/16"),
            ),
            (&["10.88.0.0/31"], "runp0", Some("too small")),
            (&["10.88.0.0/16"], "", Some("bridge name")),
            (&["10.88.0.0/16"], "a-very-long-bridge", Some("bridge name")),
            (&["10.88.0.0/16"], "br/0", Some("bridge name")),
        ];
        for (list, bridge, want) in cases {
            let got = validate(&cidrs(list), bridge);
            match want {
                None => assert!(got.is_ok(), "{list:?} {bridge}: {got:?}"),
                Some(text) => {
                    let err = got.expect_err(&format!("{list:?} {bridge}")).to_string();
                    assert!(err.contains(text), "{list:?} {bridge}: {err}");
                }
            }
        }
    }

    #[test]
    fn conflist_for_single_and_dual_stack() {
        let v4 = render_conflist("1.0.0", "runp0", &cidrs(&["10.88.0.0/16"]), Path::new("/d"));
        assert_eq!(
            v4,
            json!({
                "cniVersion": "1.0.0",
                "name": "runp",
                "plugins": [
                    {"type": "bridge", "bridge": "runp0", "isGateway": true, "ipMasq": true,
                     "hairpinMode": true,
                     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]],
                              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "/d"}},
                    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
                ]
            })
        );
        let dual = render_conflist(
            "0.4.0",
            "br1",
            &cidrs(&["10.1.0.0/24", "fd00::/64"]),
            Path::new("/d"),
        );
        assert_eq!(dual["cniVersion"], "0.4.0");
        assert_eq!(
            dual["plugins"][0]["ipam"]["ranges"],
            json!([[{"subnet": "10.1.0.0/24"}], [{"subnet": "fd00::/64"}]])
        );
        assert_eq!(
            dual["plugins"][0]["ipam"]["routes"],
            json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}])
        );
        let types: Vec<String> = plugins(&dual).unwrap().into_iter().map(|p| p.0).collect();
        assert_eq!(types, ["bridge", "portmap"]);
    }

    #[test]
    fn plugin_types_must_be_file_names() {
        for bad in [
            json!({"plugins": []}),
            json!({}),
            json!({"plugins": [{"type": "../bin/sh"}]}),
            json!({"plugins": [{"type": ".."}]}),
            json!({"plugins": [{"notype": 1}]}),
        ] {
            assert!(plugins(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plugin_config_derivation() {
        let list = render_conflist("1.0.0", "runp0", &cidrs(&["10.88.0.0/16"]), Path::new("/d"));
        let maps = vec![PortMapping {
            host_port: 8080,
            container_port: 80,
            protocol: "tcp".into(),
            host_ip: String::new(),
        }];
        let rc = runtime_config(&maps);
        let prev = json!({"cniVersion": "1.0.0", "ips": []});
        // bridge: no capabilities -> no runtimeConfig; first plugin -> no prevResult.
        let bridge = plugin_config(&list, &list["plugins"][0], &rc, None);
        assert_eq!(bridge["name"], "runp");
        assert_eq!(bridge["cniVersion"], "1.0.0");
        assert!(bridge.get("runtimeConfig").is_none());
        assert!(bridge.get("prevResult").is_none());
        assert_eq!(bridge["bridge"], "runp0");
        // portmap: capability portMappings -> runtimeConfig, chained prevResult.
        let portmap = plugin_config(&list, &list["plugins"][1], &rc, Some(&prev));
        assert_eq!(
            portmap["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
        );
        assert_eq!(portmap["prevResult"], prev);
        // No mappings -> nothing offered.
        let none = plugin_config(&list, &list["plugins"][1], &runtime_config(&[]), None);
        assert!(none.get("runtimeConfig").is_none());
        // A capability declared false is not offered.
        let off = json!({"type": "portmap", "capabilities": {"portMappings": false}});
        assert!(
            plugin_config(&list, &off, &rc, None)
                .get("runtimeConfig")
                .is_none()
        );
    }

    #[test]
    fn cri_port_mappings_table() {
        let m = |protocol: api::Protocol, container: i32, host: i32, ip: &str| api::PortMapping {
            protocol: protocol as i32,
            container_port: container,
            host_port: host,
            host_ip: ip.to_string(),
        };
        let pm = |host: u16, container: u16, protocol: &str, ip: &str| PortMapping {
            host_port: host,
            container_port: container,
            protocol: protocol.to_string(),
            host_ip: ip.to_string(),
        };
        let ok: Vec<(Vec<api::PortMapping>, Vec<PortMapping>)> = vec![
            (vec![], vec![]),
            // containerPort only: nothing for the host side.
            (vec![m(api::Protocol::Tcp, 80, 0, "")], vec![]),
            (
                vec![
                    m(api::Protocol::Tcp, 80, 8080, ""),
                    m(api::Protocol::Udp, 53, 1053, "127.0.0.1"),
                    m(api::Protocol::Sctp, 9, 9999, "::1"),
                ],
                vec![
                    pm(8080, 80, "tcp", ""),
                    pm(1053, 53, "udp", "127.0.0.1"),
                    pm(9999, 9, "sctp", "::1"),
                ],
            ),
        ];
        for (input, want) in ok {
            assert_eq!(port_mappings(&input).unwrap(), want, "{input:?}");
        }
        let bad = [
            (m(api::Protocol::Tcp, 0, 8080, ""), "containerPort 0"),
            (m(api::Protocol::Tcp, 80, 70000, ""), "hostPort 70000"),
            (m(api::Protocol::Tcp, 80, -1, ""), "hostPort -1"),
            (m(api::Protocol::Tcp, 80, 8080, "localhost"), "not an IP"),
            (
                api::PortMapping {
                    protocol: 7,
                    ..m(api::Protocol::Tcp, 80, 8080, "")
                },
                "unknown protocol 7",
            ),
        ];
        for (input, text) in bad {
            let err = port_mappings(std::slice::from_ref(&input))
                .unwrap_err()
                .to_string();
            assert!(err.contains(text), "{input:?}: {err}");
        }
        let json = serde_json::to_value(pm(1053, 53, "udp", "127.0.0.1")).unwrap();
        assert_eq!(
            json,
            json!({"hostPort": 1053, "containerPort": 53, "protocol": "udp", "hostIP": "127.0.0.1"})
        );
    }

    #[test]
    fn versions_args_and_path() {
        let s = |l: &[&str]| l.iter().map(|v| v.to_string()).collect::<Vec<_>>();
        assert_eq!(
            choose_version(&s(&["0.3.1", "0.4.0", "1.0.0", "1.1.0"])),
            Some("1.0.0")
        );
        assert_eq!(choose_version(&s(&["0.3.1", "0.4.0"])), Some("0.4.0"));
        assert_eq!(choose_version(&s(&["0.1.0", "0.2.0"])), None);

        let meta = api::PodSandboxMetadata {
            name: "web".into(),
            uid: "u-1".into(),
            namespace: "default".into(),
            attempt: 0,
        };
        assert_eq!(
            cni_args(&meta, "abc"),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1"
        );
        let odd = api::PodSandboxMetadata {
            name: "a;b".into(),
            ..meta
        };
        assert!(!cni_args(&odd, "abc").contains("K8S_POD_NAME="));

        assert_eq!(
            plugin_path(Some("/usr/bin:/bin:/opt/x")),
            "/usr/bin:/bin:/opt/x:/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin"
        );
        assert_eq!(
            plugin_path(None),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        );
    }
}
