//! CRI conformance through the gRPC socket of `runp serve --network cni`: the pod IP in the
//! status and reachable from the host, port mappings with a hostPort (reachable on the host)
//! and without one (no rule: containerd's portmap ignores them), and a stopped pod's hostPort
//! gone, as critest's networking specs check them. Needs real root and the CNI plugins.

#[path = "support/conformance.rs"]
mod conformance;
#[path = "support/serve.rs"]
mod serve;
#[path = "support/runtime.rs"]
mod support;

use conformance::*;
use runp::cri::{RuntimeService, api};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_conformance_network() {
    network_suite("cri_conformance_network", "cni").await
}

/// The same through `runp serve --network bridge` (the bridge made in process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_conformance_network_bridge() {
    network_suite("cri_conformance_network_bridge", "bridge").await
}

async fn network_suite(test: &str, mode: &str) {
    // Both need real root; the plugins serve CNI, and hostPorts in both.
    if !is_real_root() || !cni_available() {
        return skip(
            test,
            "real root and the CNI plugins (containernetworking-plugins)",
        );
    }
    let ipam = format!("{TEST_NET_DIR}/ipam");
    let network = [
        "--network",
        mode,
        "--pod-bridge",
        TEST_BRIDGE,
        "--pod-cidr",
        TEST_POD_CIDR,
        "--cni-data-dir",
        &ipam,
    ];
    let Some(s) = Suite::start_with(test, &network).await else {
        return;
    };
    s.run(vec![("pod_ip_and_ports", Box::pin(pod_ip_and_ports(&s)))])
        .await;
}

fn nat_rules() -> String {
    let (code, out, err) = host_command(&["iptables", "-t", "nat", "-S"]);
    assert_eq!(code, 0, "iptables -t nat -S: {err}");
    out
}

async fn pod_ip_and_ports(s: &Suite) {
    let host_port = {
        let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut config = s.pod_config("net-ports");
    let mapping = |container_port: i32, host_port: i32| api::PortMapping {
        protocol: api::Protocol::Tcp as i32,
        container_port,
        host_port,
        host_ip: String::new(),
    };
    config.port_mappings = vec![mapping(8080, i32::from(host_port)), mapping(8081, 0)];
    let pod = s.pod(config).await;
    let status = s.pod_status(&pod.0).await;
    let ip: IpAddr = status
        .network
        .expect("a pod network status")
        .ip
        .parse()
        .expect("the pod IP");
    let cidr: ipnet::IpNet = TEST_POD_CIDR.parse().unwrap();
    assert!(cidr.contains(&ip), "{ip} not in {cidr}");
    s.run_container(&pod, web("srv", "conformance-web")).await;
    // The pod IP from the host.
    let direct = http_get(SocketAddr::new(ip, 8080)).await;
    assert!(direct.contains("conformance-web"), "{direct}");
    // The hostPort on the host (portmap sets route_localnet: 127.0.0.1 works).
    let localhost = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), host_port);
    assert!(http_get(localhost).await.contains("conformance-web"));
    let rules = nat_rules();
    assert!(
        rules.contains(&format!("--to-destination {ip}:8080")),
        "{rules}"
    );
    assert!(
        !rules.contains(&format!("{ip}:8081")),
        "a rule without a hostPort:\n{rules}"
    );

    s.rt()
        .stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .unwrap();
    let rules = nat_rules();
    assert!(
        !rules.contains(&format!("{ip}:")),
        "DNAT to {ip} left:\n{rules}"
    );
    let refused = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(localhost),
    )
    .await;
    assert!(
        !matches!(refused, Ok(Ok(_))),
        "hostPort still forwarded after stop"
    );
}
