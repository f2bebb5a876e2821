//! Reading what plugins print: the ADD result (the pod's IPs), the CNI error JSON of a failure,
//! and the VERSION reply. Pure.

use super::NetworkError;
use serde_json::Value;
use std::net::IpAddr;

/// The pod's addresses from an ADD result: IPv4 first (the primary pod IP), then IPv6.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodIps {
    pub primary: String,
    pub additional: Vec<String>,
}

/// The IPs the result assigns to the pod's interface `ifname`: those whose `interface` index
/// names an interface inside a sandbox (or named `ifname`), or that carry no index at all.
pub fn pod_ips(result: &Value, ifname: &str) -> Result<PodIps, NetworkError> {
    let interfaces = result["interfaces"].as_array();
    let ours = |index: &Value| -> bool {
        let Some(i) = index.as_u64() else {
            return true;
        };
        interfaces
            .and_then(|l| l.get(i as usize))
            .is_some_and(|iface| {
                iface["sandbox"].as_str().is_some_and(|s| !s.is_empty())
                    || iface["name"].as_str() == Some(ifname)
            })
    };
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for entry in result["ips"].as_array().into_iter().flatten() {
        if !ours(&entry["interface"]) {
            continue;
        }
        let Some(address) = entry["address"].as_str() else {
            continue;
        };
        // "10.88.0.5/16": the address without its prefix length.
        let ip = address.split('/').next().unwrap_or_default();
        match ip.parse::<IpAddr>() {
            Ok(IpAddr::V4(a)) => v4.push(a.to_string()),
            Ok(IpAddr::V6(a)) => v6.push(a.to_string()),
            Err(_) => {
                return Err(NetworkError::NoPodIp(format!(
                    "unparsable address {address:?}"
                )));
            }
        }
    }
    let mut all = v4.into_iter().chain(v6);
    let primary = all
        .next()
        .ok_or_else(|| NetworkError::NoPodIp(format!("no address for {ifname} in {result}")))?;
    Ok(PodIps {
        primary,
        additional: all.collect(),
    })
}

/// A plugin that exited non-zero: its CNI error (`{"code", "msg", "details"}` on stdout) when
/// it printed one, else its raw output.
pub fn failure(
    plugin: &str,
    command: &'static str,
    status: String,
    stdout: &[u8],
    stderr: &[u8],
) -> NetworkError {
    if let Ok(err) = serde_json::from_slice::<Value>(stdout)
        && let Some(code) = err["code"].as_u64()
    {
        return NetworkError::Plugin {
            plugin: plugin.to_string(),
            command,
            code: code as u32,
            msg: err["msg"].as_str().unwrap_or("(no message)").to_string(),
            details: err["details"].as_str().unwrap_or_default().to_string(),
        };
    }
    let mut output = String::from_utf8_lossy(stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(stderr);
    if !stderr.trim().is_empty() {
        if !output.is_empty() {
            output.push_str("; ");
        }
        output.push_str(stderr.trim());
    }
    const MAX: usize = 2000;
    if output.len() > MAX {
        let cut = (0..=MAX)
            .rev()
            .find(|i| output.is_char_boundary(*i))
            .unwrap_or(0);
        output.truncate(cut);
        output.push_str("...");
    }
    NetworkError::Failed {
        plugin: plugin.to_string(),
        command,
        status,
        output,
    }
}

/// `supportedVersions` of a VERSION reply.
pub fn supported_versions(reply: &[u8]) -> Option<Vec<String>> {
    let v: Value = serde_json::from_slice(reply).ok()?;
    v["supportedVersions"]
        .as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ips(primary: &str, additional: &[&str]) -> PodIps {
        PodIps {
            primary: primary.into(),
            additional: additional.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn pod_ips_table() {
        // The bridge plugin's real 1.0.0 result shape.
        let bridge = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "runp0", "mac": "12:b4:b5:47:1d:8d"},
                {"name": "veth51f85c89", "mac": "9a:2c:4f:4c:7f:f9"},
                {"name": "eth0", "mac": "46:b1:05:f6:18:fb", "sandbox": "/run/netns/x"}
            ],
            "ips": [{"interface": 2, "address": "10.88.0.2/16", "gateway": "10.88.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {}
        });
        let dual = json!({
            "interfaces": [{"name": "br"}, {"name": "eth0", "sandbox": "/ns"}],
            "ips": [
                {"interface": 1, "address": "fd00::5/64"},
                {"interface": 0, "address": "10.0.0.1/24"},
                {"interface": 1, "address": "10.1.0.5/24"}
            ]
        });
        // 0.4.0 style without interface indexes.
        let old = json!({"ips": [{"version": "4", "address": "192.168.1.9/24"}]});
        let cases = [
            (bridge, ips("10.88.0.2", &[])),
            (dual, ips("10.1.0.5", &["fd00::5"])),
            (old, ips("192.168.1.9", &[])),
        ];
        for (result, want) in cases {
            assert_eq!(pod_ips(&result, "eth0").unwrap(), want, "{result}");
        }
        for bad in [
            json!({}),
            json!({"ips": []}),
            json!({"interfaces": [{"name": "br"}], "ips": [{"interface": 0, "address": "10.0.0.1/24"}]}),
            json!({"ips": [{"address": "not-an-ip/24"}]}),
        ] {
            assert!(
                matches!(pod_ips(&bad, "eth0"), Err(NetworkError::NoPodIp(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn failures_become_clear_errors() {
        let cni = failure(
            "bridge",
            "ADD",
            "exit status 1".into(),
            br#"{"cniVersion":"1.0.0","code":7,"msg":"failed to allocate","details":"range full"}"#,
            b"",
        );
        assert_eq!(
            cni.to_string(),
            "CNI plugin bridge ADD failed: failed to allocate (CNI error code 7): range full"
        );
        let raw = failure(
            "portmap",
            "DEL",
            "killed by signal 9".into(),
            b"",
            b"panic: boom\n",
        );
        assert_eq!(
            raw.to_string(),
            "CNI plugin portmap DEL failed (killed by signal 9): panic: boom"
        );
        let nothing = failure("x", "ADD", "exit status 2".into(), b"", b"");
        assert_eq!(
            nothing.to_string(),
            "CNI plugin x ADD failed (exit status 2): no output"
        );
        let long = failure("x", "ADD", "exit status 2".into(), &vec![b'a'; 5000], b"");
        assert!(long.to_string().len() < 2100);
    }

    #[test]
    fn version_replies() {
        assert_eq!(
            supported_versions(br#"{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}"#),
            Some(vec!["0.4.0".to_string(), "1.0.0".to_string()])
        );
        assert_eq!(supported_versions(b"CNI bridge plugin v1"), None);
        assert_eq!(supported_versions(br#"{"supportedVersions":[1]}"#), None);
    }
}
