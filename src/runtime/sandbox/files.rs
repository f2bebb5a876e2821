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

/// A DNS-1123-ish hostname check: what sethostname and resolvers accept.
pub fn valid_hostname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
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
        assert!(valid_hostname("web-0.sub"));
        assert!(!valid_hostname("bad name"));
        assert!(!valid_hostname(""));
        assert!(!valid_hostname(&"x".repeat(65)));
    }
}
