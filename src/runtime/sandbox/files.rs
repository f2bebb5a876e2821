//! The pod's /etc/hostname, /etc/hosts and /etc/resolv.conf contents (pure; written by run.rs).

use crate::cri::api;

pub fn hostname_file(hostname: &str) -> String {
    format!("{hostname}\n")
}

/// A pod-local hosts file: loopback names plus the pod's own name on its IP.
pub fn hosts_file(hostname: &str, ip: &str) -> String {
    let mut out = String::from(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    if !hostname.is_empty() {
        out.push_str(&format!("{ip}\t{hostname}\n"));
    }
    out
}

/// resolv.conf from the CRI DNS config; None when the config has none (the host's is used).
pub fn resolv_conf(dns: Option<&api::DnsConfig>) -> Option<String> {
    let dns = dns?;
    if dns.servers.is_empty() && dns.searches.is_empty() && dns.options.is_empty() {
        return None;
    }
    let mut out = String::new();
    for server in &dns.servers {
        out.push_str(&format!("nameserver {server}\n"));
    }
    if !dns.searches.is_empty() {
        out.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    if !dns.options.is_empty() {
        out.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    Some(out)
}

/// The kernel's limit on a hostname (`HOST_NAME_MAX`), in bytes.
pub const HOSTNAME_MAX_BYTES: usize = 64;

/// The hostname a pod's UTS namespace gets, as containerd decides it: the config's as it is,
/// else the node's. Only what the kernel cannot hold is refused (more than 64 bytes, or a NUL
/// that would cut it short); naming rules are the kubelet's business, not the runtime's.
pub fn pod_hostname(configured: &str, node: &str) -> Result<String, String> {
    let hostname = if configured.is_empty() {
        node
    } else {
        configured
    };
    if hostname.is_empty() {
        return Err("the node has no hostname to give the pod".into());
    }
    if hostname.len() > HOSTNAME_MAX_BYTES {
        return Err(format!(
            "pod hostname {hostname:?} is {} bytes; the kernel allows {HOSTNAME_MAX_BYTES}",
            hostname.len()
        ));
    }
    if hostname.contains('\0') {
        return Err(format!("pod hostname {hostname:?} contains a NUL byte"));
    }
    Ok(hostname.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_from_dns_config() {
        assert_eq!(resolv_conf(None), None);
        assert_eq!(resolv_conf(Some(&api::DnsConfig::default())), None);
        let dns = api::DnsConfig {
            servers: vec!["10.0.0.10".into(), "8.8.8.8".into()],
            searches: vec!["ns.svc.cluster.local".into(), "svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(Some(&dns)).unwrap(),
            "nameserver 10.0.0.10\nnameserver 8.8.8.8\nsearch ns.svc.cluster.local svc.cluster.local\noptions ndots:5\n"
        );
    }

    #[test]
    fn hosts_and_hostname() {
        let hosts = hosts_file("web-0", "127.0.0.1");
        assert!(hosts.starts_with("127.0.0.1\tlocalhost\n"));
        assert!(hosts.ends_with("127.0.0.1\tweb-0\n"));
        assert_eq!(hostname_file("a"), "a\n");
    }

    #[test]
    fn pod_hostnames_as_containerd_gives_them() {
        let sixty_four = "h".repeat(64);
        let suite_name = format!("PodSandbox-with-log-directory-{}", "0".repeat(36));
        let table: Vec<(&str, &str, Result<&str, &str>)> = vec![
            // (configured, node's, result or part of the error)
            ("", "node-1", Ok("node-1")),
            ("web-0", "node-1", Ok("web-0")),
            // Given names reach the kernel as they are, DNS-1123 or not.
            ("Bad_Name with space", "node-1", Ok("Bad_Name with space")),
            (
                "web-0.svc.cluster.local",
                "n",
                Ok("web-0.svc.cluster.local"),
            ),
            (&sixty_four, "node-1", Ok(&sixty_four)),
            ("", &sixty_four, Ok(&sixty_four)),
            (&suite_name, "node-1", Err("66 bytes; the kernel allows 64")),
            ("a\0b", "node-1", Err("NUL")),
            ("", "", Err("no hostname")),
        ];
        for (configured, node, want) in table {
            let got = pod_hostname(configured, node);
            match want {
                Ok(name) => assert_eq!(got.as_deref(), Ok(name), "{configured:?}"),
                Err(part) => assert!(
                    got.as_ref().is_err_and(|e| e.contains(part)),
                    "{configured:?}: {got:?}"
                ),
            }
        }
    }
}
