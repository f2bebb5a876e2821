//! Service environment variables, as the kubelet's `getServiceEnvVarMap` and
//! `envvars.FromServices` make them: the `kubernetes` Service of the `default` namespace always,
//! the Services of the pod's namespace when `enableServiceLinks` (default true); only Services
//! with a cluster IP. Per Service `<SVC>_SERVICE_HOST`, `<SVC>_SERVICE_PORT`,
//! `<SVC>_SERVICE_PORT_<NAME>` per named port, and Docker link variables (`<SVC>_PORT`,
//! `<SVC>_PORT_<port>_<PROTO>` with `_PROTO`, `_PORT`, `_ADDR`).

use k8s_openapi::api::core::v1::Service;
use std::collections::BTreeMap;

/// Services whose variables are always given, from the `default` namespace.
const MASTER_SERVICES: [&str; 1] = ["kubernetes"];

/// `my-svc` → `MY_SVC`.
fn env_name(name: &str) -> String {
    name.replace('-', "_").to_uppercase()
}

/// The cluster IP, unless the Service is headless or has none.
fn cluster_ip(service: &Service) -> Option<&str> {
    let ip = service.spec.as_ref()?.cluster_ip.as_deref()?;
    (!ip.is_empty() && ip != "None").then_some(ip)
}

/// `ip:port`, bracketing IPv6 as Go's `net.JoinHostPort`.
fn host_port(ip: &str, port: i32) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// The variables of one Service (`envvars.FromServices` for one item).
fn service_vars(service: &Service, out: &mut Vec<(String, String)>) {
    let Some(ip) = cluster_ip(service) else {
        return;
    };
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or(&[]);
    // Validation gives every Service with a cluster IP a port; without one there is nothing
    // meaningful to link to.
    let Some(first) = ports.first() else {
        return;
    };
    let prefix = env_name(service.metadata.name.as_deref().unwrap_or_default());
    out.push((format!("{prefix}_SERVICE_HOST"), ip.to_string()));
    let port_var = format!("{prefix}_SERVICE_PORT");
    out.push((port_var.clone(), first.port.to_string()));
    for port in ports {
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            out.push((
                format!("{port_var}_{}", env_name(name)),
                port.port.to_string(),
            ));
        }
    }
    for (i, port) in ports.iter().enumerate() {
        let protocol = port.protocol.as_deref().filter(|p| !p.is_empty());
        let protocol = protocol.unwrap_or("TCP");
        let (lower, upper) = (protocol.to_lowercase(), protocol.to_uppercase());
        let url = format!("{lower}://{}", host_port(ip, port.port));
        if i == 0 {
            out.push((format!("{prefix}_PORT"), url.clone()));
        }
        let port_prefix = format!("{prefix}_PORT_{}_{upper}", port.port);
        out.push((port_prefix.clone(), url));
        out.push((format!("{port_prefix}_PROTO"), lower));
        out.push((format!("{port_prefix}_PORT"), port.port.to_string()));
        out.push((format!("{port_prefix}_ADDR"), ip.to_string()));
    }
}

/// The service variables of a pod in `namespace`. `services` may hold Services of any
/// namespace (those of `namespace` and `default` are used); the pod's namespace wins a name
/// clash with the master services. Ordered by Service name.
pub fn service_env(
    namespace: &str,
    enable_service_links: bool,
    services: &[Service],
) -> Vec<(String, String)> {
    let mut chosen: BTreeMap<&str, &Service> = BTreeMap::new();
    for service in services {
        if cluster_ip(service).is_none() {
            continue;
        }
        let name = service.metadata.name.as_deref().unwrap_or_default();
        let ns = service.metadata.namespace.as_deref().unwrap_or("default");
        if ns == namespace && enable_service_links {
            chosen.insert(name, service);
        } else if ns == "default" && MASTER_SERVICES.contains(&name) {
            chosen.entry(name).or_insert(service);
        }
    }
    let mut out = Vec::new();
    for service in chosen.values() {
        service_vars(service, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(namespace: &str, name: &str, ip: &str, ports: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterIP": ip, "ports": ports}
        }))
        .unwrap()
    }

    fn vars(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cluster() -> Vec<Service> {
        vec![
            service(
                "default",
                "kubernetes",
                "10.0.0.1",
                json!([{"name": "https", "port": 443, "protocol": "TCP"}]),
            ),
            service(
                "web",
                "my-svc",
                "10.0.0.7",
                json!([{"name": "http", "port": 80}, {"name": "dns-udp", "port": 53, "protocol": "UDP"}]),
            ),
            service("web", "headless", "None", json!([{"port": 80}])),
            service("web", "pending", "", json!([{"port": 80}])),
            service("other", "elsewhere", "10.0.0.9", json!([{"port": 80}])),
        ]
    }

    const KUBERNETES: [(&str, &str); 8] = [
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
        ("KUBERNETES_PORT", "tcp://10.0.0.1:443"),
        ("KUBERNETES_PORT_443_TCP", "tcp://10.0.0.1:443"),
        ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
        ("KUBERNETES_PORT_443_TCP_PORT", "443"),
        ("KUBERNETES_PORT_443_TCP_ADDR", "10.0.0.1"),
    ];

    #[test]
    fn service_env_table() {
        let kubernetes = vars(&KUBERNETES);
        let mut web = kubernetes.clone();
        web.extend(vars(&[
            ("MY_SVC_SERVICE_HOST", "10.0.0.7"),
            ("MY_SVC_SERVICE_PORT", "80"),
            ("MY_SVC_SERVICE_PORT_HTTP", "80"),
            ("MY_SVC_SERVICE_PORT_DNS_UDP", "53"),
            ("MY_SVC_PORT", "tcp://10.0.0.7:80"),
            ("MY_SVC_PORT_80_TCP", "tcp://10.0.0.7:80"),
            ("MY_SVC_PORT_80_TCP_PROTO", "tcp"),
            ("MY_SVC_PORT_80_TCP_PORT", "80"),
            ("MY_SVC_PORT_80_TCP_ADDR", "10.0.0.7"),
            ("MY_SVC_PORT_53_UDP", "udp://10.0.0.7:53"),
            ("MY_SVC_PORT_53_UDP_PROTO", "udp"),
            ("MY_SVC_PORT_53_UDP_PORT", "53"),
            ("MY_SVC_PORT_53_UDP_ADDR", "10.0.0.7"),
        ]));
        let cases = [
            ("web", true, web),
            // Links off: the master service only.
            ("web", false, kubernetes.clone()),
            // Nothing of its own in the namespace.
            ("empty", true, kubernetes.clone()),
            ("default", false, kubernetes.clone()),
        ];
        for (namespace, links, expected) in cases {
            assert_eq!(
                service_env(namespace, links, &cluster()),
                expected,
                "{namespace} links={links}"
            );
        }
        assert!(service_env("web", true, &[]).is_empty());
    }

    #[test]
    fn namespace_service_wins_over_the_master_service_and_ipv6_is_bracketed() {
        let services = vec![
            service("default", "kubernetes", "10.0.0.1", json!([{"port": 443}])),
            service("web", "kubernetes", "fd00::5", json!([{"port": 8443}])),
        ];
        let env = service_env("web", true, &services);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("fd00::5"));
        assert_eq!(get("KUBERNETES_PORT"), Some("tcp://[fd00::5]:8443"));
        // Without links the namespace's own Service is not used: the master one is.
        let env = service_env("web", false, &services);
        assert_eq!(
            env[0],
            ("KUBERNETES_SERVICE_HOST".into(), "10.0.0.1".into())
        );
    }
}
