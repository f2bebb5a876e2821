//! Pod hostname and DNS configuration, following the kubelet (`GeneratePodHostNameAndDomain`,
//! `pkg/kubelet/network/dns`).

use super::names::check_dns1123_label;
use crate::cri::api;
use crate::kubelet::config::AgentConfig;
use k8s_openapi::api::core::v1::Pod;

/// Kernel limit of a hostname (64 bytes with the terminating NUL).
const HOSTNAME_MAX_LEN: usize = 63;
/// resolv.conf limits the kubelet enforces.
const MAX_NAMESERVERS: usize = 3;
const MAX_SEARCH_PATHS: usize = 32;
const MAX_SEARCH_CHARS: usize = 2048;
const MAX_SEARCH_DOMAIN_LEN: usize = 253;
const DEFAULT_OPTIONS: &[&str] = &["ndots:5"];

#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("pod hostname {0:?} is not a valid DNS label: {1}")]
    Hostname(String, String),
    #[error("pod subdomain {0:?} is not a valid DNS label: {1}")]
    Subdomain(String, String),
    #[error("hostname for pod {0:?} is invalid after truncation to 63 characters")]
    Truncated(String),
    #[error("pod FQDN {0:?} is longer than 64 characters (setHostnameAsFQDN)")]
    FqdnTooLong(String),
}

/// `(hostname, domain)`: spec.hostname or the pod name, truncated to 63 characters without a
/// trailing '-' or '.'; with a subdomain, the domain is `<subdomain>.<ns>.svc.<cluster domain>`.
pub fn pod_hostname_and_domain(
    pod: &Pod,
    cluster_domain: &str,
) -> Result<(String, Option<String>), DnsError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let spec = pod.spec.as_ref();
    let mut hostname = name.clone();
    if let Some(explicit) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        check_dns1123_label(explicit).map_err(|e| DnsError::Hostname(explicit.to_string(), e))?;
        hostname = explicit.to_string();
    }
    if hostname.len() > HOSTNAME_MAX_LEN {
        let cut = (0..=HOSTNAME_MAX_LEN)
            .rev()
            .find(|i| hostname.is_char_boundary(*i))
            .unwrap_or(0);
        let truncated = hostname[..cut].trim_end_matches(['-', '.']).to_string();
        if truncated.is_empty() {
            return Err(DnsError::Truncated(name));
        }
        tracing::warn!(pod = %name, %truncated, "hostname for pod was too long, truncated it");
        hostname = truncated;
    }
    let domain = match spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        None => None,
        Some(subdomain) => {
            check_dns1123_label(subdomain)
                .map_err(|e| DnsError::Subdomain(subdomain.to_string(), e))?;
            Some(format!("{subdomain}.{namespace}.svc.{cluster_domain}"))
        }
    };
    Ok((hostname, domain))
}

/// The hostname the sandbox gets: empty for hostNetwork pods (they keep the node's), else the
/// pod hostname, or its FQDN with setHostnameAsFQDN.
pub fn sandbox_hostname(pod: &Pod, cluster_domain: &str) -> Result<String, DnsError> {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.host_network).unwrap_or(false) {
        return Ok(String::new());
    }
    let (hostname, domain) = pod_hostname_and_domain(pod, cluster_domain)?;
    let as_fqdn = spec.and_then(|s| s.set_hostname_as_fqdn).unwrap_or(false);
    match domain {
        Some(domain) if as_fqdn => {
            let fqdn = format!("{hostname}.{domain}");
            if fqdn.len() > HOSTNAME_MAX_LEN + 1 {
                return Err(DnsError::FqdnTooLong(fqdn));
            }
            Ok(fqdn)
        }
        _ => Ok(hostname),
    }
}

/// Nameservers, searches and options of a resolv.conf (the last `search` line wins; options
/// merge by name).
pub fn parse_resolv_conf(text: &str) -> api::DnsConfig {
    let mut config = api::DnsConfig::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("nameserver") => config.servers.extend(fields.next().map(str::to_string)),
            Some("search") => {
                config.searches = fields
                    .filter(|s| *s != ".")
                    .map(|s| s.trim_end_matches('.').to_string())
                    .collect();
            }
            Some("options") => {
                let options: Vec<(String, Option<String>)> = fields.map(split_option).collect();
                config.options = merge_options(&config.options, &options);
            }
            _ => {}
        }
    }
    config
}

fn split_option(option: &str) -> (String, Option<String>) {
    match option.split_once(':') {
        Some((name, value)) => (name.to_string(), Some(value.to_string())),
        None => (option.to_string(), None),
    }
}

/// `existing` with `overrides` applied by option name (first-seen order kept).
fn merge_options(existing: &[String], overrides: &[(String, Option<String>)]) -> Vec<String> {
    let mut merged: Vec<(String, Option<String>)> =
        existing.iter().map(|o| split_option(o)).collect();
    for (name, value) in overrides {
        match merged.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value.clone(),
            None => merged.push((name.clone(), value.clone())),
        }
    }
    merged
        .into_iter()
        .map(|(name, value)| match value {
            Some(v) if !v.is_empty() => format!("{name}:{v}"),
            _ => name,
        })
        .collect()
}

fn omit_duplicates(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .filter(|i| seen.insert(i.clone()))
        .collect()
}

/// The DNS config of a pod, given the host's resolv.conf content (`None`: unreadable).
pub fn pod_dns_config(
    pod: &Pod,
    config: &AgentConfig,
    host_resolv_conf: Option<&str>,
) -> api::DnsConfig {
    let spec = pod.spec.as_ref();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let host = || match host_resolv_conf {
        Some(text) => parse_resolv_conf(text),
        // As the kubelet with no resolv.conf: the local resolver only.
        None => api::DnsConfig {
            servers: vec![local_resolver(config)],
            searches: vec![".".to_string()],
            options: Vec::new(),
        },
    };
    let wants_cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        _ => false,
    };
    let mut dns = if policy == "None" {
        api::DnsConfig::default()
    } else if wants_cluster && !config.cluster_dns.is_empty() {
        let host_searches = host().searches;
        let domain = &config.cluster_domain;
        let mut searches = Vec::new();
        if !domain.is_empty() {
            searches.push(format!("{namespace}.svc.{domain}"));
            searches.push(format!("svc.{domain}"));
            searches.push(domain.clone());
        }
        searches.extend(host_searches);
        api::DnsConfig {
            servers: config.cluster_dns.iter().map(ToString::to_string).collect(),
            searches: omit_duplicates(searches),
            options: DEFAULT_OPTIONS.iter().map(|o| o.to_string()).collect(),
        }
    } else {
        if wants_cluster {
            tracing::warn!(
                pod = pod.metadata.name.as_deref().unwrap_or(""),
                "no cluster DNS configured; pod with dnsPolicy {policy} falls back to Default"
            );
        }
        host()
    };
    if let Some(extra) = spec.and_then(|s| s.dns_config.as_ref()) {
        let mut servers = std::mem::take(&mut dns.servers);
        servers.extend(extra.nameservers.iter().flatten().cloned());
        dns.servers = omit_duplicates(servers);
        let mut searches = std::mem::take(&mut dns.searches);
        searches.extend(extra.searches.iter().flatten().cloned());
        dns.searches = omit_duplicates(searches);
        let overrides: Vec<(String, Option<String>)> = extra
            .options
            .iter()
            .flatten()
            .filter_map(|o| Some((o.name.clone()?, o.value.clone())))
            .collect();
        dns.options = merge_options(&dns.options, &overrides);
    }
    fit_limits(dns)
}

fn local_resolver(config: &AgentConfig) -> String {
    if config.node_ip.is_ipv6() {
        "::1"
    } else {
        "127.0.0.1"
    }
    .to_string()
}

/// Applies the kubelet's resolv.conf limits (3 nameservers, 32 search paths, 2048 characters
/// of search line, no search domain over 253 characters).
fn fit_limits(mut dns: api::DnsConfig) -> api::DnsConfig {
    if dns.servers.len() > MAX_NAMESERVERS {
        tracing::warn!(servers = ?dns.servers, "more than {MAX_NAMESERVERS} nameservers; the extra ones are dropped");
        dns.servers.truncate(MAX_NAMESERVERS);
    }
    let mut searches = std::mem::take(&mut dns.searches);
    if searches.len() > MAX_SEARCH_PATHS {
        searches.truncate(MAX_SEARCH_PATHS);
    }
    searches.retain(|s| s.len() <= MAX_SEARCH_DOMAIN_LEN);
    let mut line_len =
        searches.iter().map(String::len).sum::<usize>() + searches.len().saturating_sub(1);
    while line_len > MAX_SEARCH_CHARS {
        let Some(last) = searches.pop() else { break };
        line_len = line_len.saturating_sub(last.len() + 1);
    }
    dns.searches = searches;
    dns
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "x"}]);
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "prod"}, "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn hostnames() {
        let long = "a".repeat(62) + "-b";
        let cases: Vec<(serde_json::Value, Result<&str, &str>)> = vec![
            (json!({}), Ok("web-0")),
            (json!({"hostname": "db"}), Ok("db")),
            (json!({"hostname": "db", "subdomain": "svc1"}), Ok("db")),
            (
                json!({"hostname": "db", "subdomain": "svc1", "setHostnameAsFQDN": true}),
                Ok("db.svc1.prod.svc.cluster.local"),
            ),
            (json!({"hostname": long}), Err("not a valid DNS label")),
            (
                json!({"hostname": "Bad_Name"}),
                Err("not a valid DNS label"),
            ),
            (json!({"subdomain": "Bad.Sub"}), Err("subdomain")),
            (json!({"hostNetwork": true, "hostname": "db"}), Ok("")),
        ];
        for (spec, expected) in cases {
            let got =
                sandbox_hostname(&pod(spec.clone()), "cluster.local").map_err(|e| e.to_string());
            match expected {
                Ok(name) => assert_eq!(got.as_deref(), Ok(name), "{spec}"),
                Err(text) => assert!(
                    got.as_ref().is_err_and(|e| e.contains(text)),
                    "{spec}: {got:?}"
                ),
            }
        }
        let (_, domain) =
            pod_hostname_and_domain(&pod(json!({"subdomain": "svc1"})), "k.local").unwrap();
        assert_eq!(domain.as_deref(), Some("svc1.prod.svc.k.local"));
    }

    #[test]
    fn long_pod_names_are_truncated_without_trailing_dash_or_dot() {
        let mut p = pod(json!({}));
        // 62 chars then '-', '.', more: the cut at 63 ends in "-" and is trimmed.
        let name = format!("{}-.tail", "a".repeat(62));
        p.metadata.name = Some(name);
        assert_eq!(
            sandbox_hostname(&p, "cluster.local").unwrap(),
            "a".repeat(62)
        );
        p.metadata.name = Some("b".repeat(70));
        assert_eq!(
            sandbox_hostname(&p, "cluster.local").unwrap(),
            "b".repeat(63)
        );
    }

    const HOST: &str = "# generated\nnameserver 10.0.0.2\nnameserver 10.0.0.3 ; second\nsearch old.example\nsearch corp.example. lab.example\noptions ndots:2 timeout:1\noptions ndots:3 rotate\ndomain ignored\n";

    fn agent(cluster_dns: &[&str]) -> AgentConfig {
        let mut config = AgentConfig::with_root("/tmp/x");
        config.cluster_dns = cluster_dns.iter().map(|ip| ip.parse().unwrap()).collect();
        config
    }

    fn dns(
        spec: serde_json::Value,
        cluster_dns: &[&str],
        host: Option<&str>,
    ) -> (Vec<String>, Vec<String>, Vec<String>) {
        let c = pod_dns_config(&pod(spec), &agent(cluster_dns), host);
        (c.servers, c.searches, c.options)
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_resolv_conf() {
        let c = parse_resolv_conf(HOST);
        assert_eq!(c.servers, strings(&["10.0.0.2", "10.0.0.3"]));
        assert_eq!(c.searches, strings(&["corp.example", "lab.example"]));
        assert_eq!(c.options, strings(&["ndots:3", "timeout:1", "rotate"]));
    }

    #[test]
    fn policies() {
        let cluster_searches = [
            "prod.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "corp.example",
            "lab.example",
        ];
        let host = (
            strings(&["10.0.0.2", "10.0.0.3"]),
            strings(&["corp.example", "lab.example"]),
            strings(&["ndots:3", "timeout:1", "rotate"]),
        );
        let cluster = (
            strings(&["10.96.0.10"]),
            strings(&cluster_searches),
            strings(&["ndots:5"]),
        );
        let cases = vec![
            (
                json!({"dnsPolicy": "ClusterFirst"}),
                &["10.96.0.10"][..],
                cluster.clone(),
            ),
            (json!({}), &["10.96.0.10"][..], cluster.clone()),
            (
                json!({"dnsPolicy": "ClusterFirst", "hostNetwork": true}),
                &["10.96.0.10"][..],
                host.clone(),
            ),
            (
                json!({"dnsPolicy": "ClusterFirstWithHostNet", "hostNetwork": true}),
                &["10.96.0.10"][..],
                cluster.clone(),
            ),
            (json!({"dnsPolicy": "ClusterFirst"}), &[][..], host.clone()),
            (
                json!({"dnsPolicy": "Default"}),
                &["10.96.0.10"][..],
                host.clone(),
            ),
            (
                json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": ["a.example"],
                       "options": [{"name": "ndots", "value": "1"}, {"name": "edns0"}]}}),
                &["10.96.0.10"][..],
                (
                    strings(&["1.1.1.1"]),
                    strings(&["a.example"]),
                    strings(&["ndots:1", "edns0"]),
                ),
            ),
            (
                json!({"dnsPolicy": "ClusterFirst", "dnsConfig": {"nameservers": ["10.96.0.10", "8.8.8.8"],
                       "searches": ["cluster.local", "x.example"], "options": [{"name": "ndots", "value": "2"}]}}),
                &["10.96.0.10"][..],
                (
                    strings(&["10.96.0.10", "8.8.8.8"]),
                    strings(&[&cluster_searches[..], &["x.example"]].concat()),
                    strings(&["ndots:2"]),
                ),
            ),
        ];
        for (spec, cluster_dns, expected) in cases {
            assert_eq!(
                dns(spec.clone(), cluster_dns, Some(HOST)),
                expected,
                "{spec}"
            );
        }
        // No readable resolv.conf: the local resolver, search ".".
        assert_eq!(
            dns(json!({"dnsPolicy": "Default"}), &[], None),
            (strings(&["127.0.0.1"]), strings(&["."]), vec![])
        );
    }

    #[test]
    fn limits() {
        let servers: Vec<String> = (1..=5).map(|i| format!("10.0.0.{i}")).collect();
        let searches: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        let spec = json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": servers, "searches": searches}});
        let (s, search, _) = dns(spec, &[], None);
        assert_eq!(s.len(), 3);
        assert_eq!(search.len(), 32);
        assert_eq!(search[31], "d31.example");
        // 2048-character search line: the tail is cut.
        let long: Vec<String> = (0..20)
            .map(|i| format!("{}{i:02}.example", "x".repeat(140)))
            .collect();
        let spec = json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": long}});
        let (_, search, _) = dns(spec, &[], None);
        assert!(search.join(" ").len() <= 2048);
        assert_eq!(search.len(), 13);
        let too_long = "y".repeat(254);
        let spec = json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.1.1.1"], "searches": [too_long, "ok.example"]}});
        assert_eq!(dns(spec, &[], None).1, strings(&["ok.example"]));
    }
}
