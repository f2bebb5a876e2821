//! The pod network: as real root every pod gets an IP on the test bridge through the CNI
//! plugins, or through the bridge network made in process (reachable from the host and from
//! other pods, hostPorts through portmap, released by stop even after a runtime restart);
//! elsewhere pods get loopback only and say why.

#[path = "support/runtime.rs"]
mod support;

use runp::cri::{RuntimeService, api};
use runp::runtime::ProcessRuntime;
use runp::runtime::network::NetworkMode;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;
use support::*;

const CNI_DIRS: [&str; 2] = ["/opt/cni/bin", "/usr/lib/cni"];

/// A runtime whose pod network is `mode` (CNI, or the bridge network made in process), or
/// None after printing SKIP. Both need real root; the plugins are checked for both, since the
/// bridge network's hostPorts take portmap.
async fn net_env(test: &str, mode: NetworkMode) -> Option<Env> {
    if !is_real_root() {
        skip(
            test,
            "real root (CNI needs a bridge in the host network namespace)",
        );
        return None;
    }
    if !cni_available() {
        skip(test, "the CNI plugins (containernetworking-plugins)");
        return None;
    }
    Some(Env::with(|o| o.network.mode = mode).await)
}

/// What PodSandboxStatus and Status say of a pod's network in `mode`.
fn summary_and_mode(mode: NetworkMode) -> (&'static str, &'static str) {
    match mode {
        NetworkMode::Bridge => ("bridge network runp: eth0 on bridge", "bridge"),
        _ => ("CNI network runp: eth0 on bridge", "cni"),
    }
}

async fn pod_with(env: &Env, config: api::PodSandboxConfig) -> (String, api::PodSandboxConfig) {
    let id = env
        .rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("run pod sandbox")
        .pod_sandbox_id;
    (id, config)
}

/// The host's address on its default route (where a hostPort is reachable from the outside).
fn node_ip() -> Option<IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_distinct_reachable_ips() {
    distinct_reachable_ips("pods_get_distinct_reachable_ips", NetworkMode::Cni).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_pods_get_distinct_reachable_ips() {
    distinct_reachable_ips(
        "bridge_pods_get_distinct_reachable_ips",
        NetworkMode::Bridge,
    )
    .await
}

async fn distinct_reachable_ips(test: &str, mode: NetworkMode) {
    let Some(env) = net_env(test, mode).await else {
        return;
    };
    let (summary, mode_name) = summary_and_mode(mode);
    let a = env.pod("net-a").await;
    let b = env.pod("net-b").await;
    let (ip_a, ip_b) = (pod_ip(&env, &a.0).await, pod_ip(&env, &b.0).await);
    assert_ne!(ip_a, ip_b);
    for (ip, id) in [(&ip_a, &a.0), (&ip_b, &b.0)] {
        assert!(in_test_cidr(ip), "{ip} not in {TEST_POD_CIDR}");
        assert_eq!(lease_holder(ip).as_deref(), Some(id.as_str()));
    }
    let status = env.pod_status(&a.0, true).await;
    let info: serde_json::Value = serde_json::from_str(&status.info["info"]).unwrap();
    assert!(
        info["network"].as_str().unwrap().contains(summary),
        "{info}"
    );
    assert_eq!(info["cniAttached"], true);
    let rt_status = env
        .rt
        .status(api::StatusRequest { verbose: true })
        .await
        .unwrap();
    let rt_info: serde_json::Value = serde_json::from_str(&rt_status.info["info"]).unwrap();
    assert_eq!(rt_info["network"]["mode"], mode_name, "{rt_info}");
    assert_eq!(rt_info["network"]["bridge"], TEST_BRIDGE);

    if mode == NetworkMode::Bridge {
        // As the bridge plugin's hairpinMode: a pod reaches itself through a service VIP.
        let veth = runp::runtime::network::bridge::host_veth_name(&a.0);
        let hairpin = format!("/sys/class/net/{veth}/brport/hairpin_mode");
        assert_eq!(
            std::fs::read_to_string(&hairpin).unwrap().trim(),
            "1",
            "{hairpin}"
        );
    }

    // Host -> pod, at the pod IP.
    env.run(&a, web("srv", "hello-from-a")).await;
    let addr = SocketAddr::new(ip_a.parse().unwrap(), 8080);
    assert!(http_get(addr).await.contains("hello-from-a"));

    // Pod -> pod; the pod's hosts file names it on its own IP.
    let client = env.run(&b, shell("client", "exec sleep 1000")).await;
    let r = env
        .exec(
            &client,
            &[
                "wget",
                "-q",
                "-O",
                "-",
                &format!("http://{ip_a}:8080/index.html"),
            ],
        )
        .await;
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "hello-from-a\n",
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let hosts = env.exec(&client, &["cat", "/etc/hosts"]).await;
    let hosts = String::from_utf8_lossy(&hosts.stdout).into_owned();
    assert!(hosts.contains(&format!("{ip_b}\tnet-b-host")), "{hosts}");
    let route = env.exec(&client, &["ip", "route"]).await;
    assert!(
        String::from_utf8_lossy(&route.stdout).contains("default via"),
        "the pod routes through the bridge gateway"
    );

    env.cleanup().await;
    assert_network_released(&a.0, &ip_a);
    assert_network_released(&b.0, &ip_b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_port_reaches_the_pod_until_stop() {
    host_port_until_stop("host_port_reaches_the_pod_until_stop", NetworkMode::Cni).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_host_port_reaches_the_pod_until_stop() {
    host_port_until_stop(
        "bridge_host_port_reaches_the_pod_until_stop",
        NetworkMode::Bridge,
    )
    .await
}

async fn host_port_until_stop(test: &str, mode: NetworkMode) {
    let Some(env) = net_env(test, mode).await else {
        return;
    };
    let host_port = {
        let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut config = pod_config("hostport", &env.logs());
    config.port_mappings = vec![api::PortMapping {
        protocol: api::Protocol::Tcp as i32,
        container_port: 8080,
        host_port: host_port as i32,
        host_ip: String::new(),
    }];
    let pod = pod_with(&env, config).await;
    let ip = pod_ip(&env, &pod.0).await;
    env.run(&pod, web("srv", "via-host-port")).await;
    assert!(
        http_get(SocketAddr::new(ip.parse().unwrap(), 8080))
            .await
            .contains("via-host-port")
    );
    let rules = nat_rules();
    assert!(
        rules.contains(&format!("--to-destination {ip}:8080")),
        "{rules}"
    );
    // portmap's snat option sets route_localnet on the bridge: 127.0.0.1 works too.
    let localhost = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), host_port);
    assert!(http_get(localhost).await.contains("via-host-port"));
    match node_ip() {
        Some(node) => {
            let at_node = SocketAddr::new(node, host_port);
            assert!(http_get(at_node).await.contains("via-host-port"));
        }
        None => eprintln!("note: no default route: hostPort checked on 127.0.0.1 only"),
    }

    env.rt
        .stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .unwrap();
    assert_network_released(&pod.0, &ip);
    let refused = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(localhost),
    )
    .await;
    assert!(
        !matches!(refused, Ok(Ok(_))),
        "hostPort still forwarded after stop"
    );
    let s = env.pod_status(&pod.0, true).await;
    let info: serde_json::Value = serde_json::from_str(&s.info["info"]).unwrap();
    assert_eq!(info["cniAttached"], false);
    // Stop is idempotent (DEL is not run twice), remove too.
    env.rt
        .stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .unwrap();
    env.cleanup().await;
    assert_network_released(&pod.0, &ip);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_without_stop_and_stop_after_restart_release_the_ip() {
    release_after_restart(
        "remove_without_stop_and_stop_after_restart_release_the_ip",
        NetworkMode::Cni,
    )
    .await
}

/// Attached by the bridge network, stopped by a runtime restarted in CNI mode: the attachment
/// says how to undo it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_attachments_are_released_after_a_restart_in_cni_mode() {
    release_after_restart(
        "bridge_attachments_are_released_after_a_restart_in_cni_mode",
        NetworkMode::Bridge,
    )
    .await
}

async fn release_after_restart(test: &str, mode: NetworkMode) {
    let Some(env) = net_env(test, mode).await else {
        return;
    };
    // RemovePodSandbox alone detaches the network.
    let gone = env.pod("removed").await;
    let gone_ip = pod_ip(&env, &gone.0).await;
    env.rt
        .remove_pod_sandbox(api::RemovePodSandboxRequest {
            pod_sandbox_id: gone.0.clone(),
        })
        .await
        .unwrap();
    assert_network_released(&gone.0, &gone_ip);

    let pod = env.pod("restarted").await;
    let ip = pod_ip(&env, &pod.0).await;
    assert_eq!(lease_holder(&ip).as_deref(), Some(pod.0.as_str()));
    let Env {
        guard,
        dir,
        images,
        rt,
    } = env;
    drop(rt);
    let mut opts = options(dir.path(), &images);
    opts.network.mode = NetworkMode::Cni;
    let rt = ProcessRuntime::start(opts).await.unwrap();
    let env = Env {
        guard,
        dir,
        images,
        rt,
    };
    assert_eq!(
        pod_ip(&env, &pod.0).await,
        ip,
        "the IP survives the restart"
    );
    assert_eq!(lease_holder(&ip).as_deref(), Some(pod.0.as_str()));
    env.rt
        .stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .unwrap();
    assert_network_released(&pod.0, &ip);
    env.cleanup().await;
}

/// A plugin dir whose portmap fails every ADD (with a CNI error) and records the container id;
/// bridge and host-local are the real ones, so the failure comes after an IP was leased.
fn failing_portmap_dir(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("cni-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real = |p: &str| {
        CNI_DIRS
            .iter()
            .map(|d| Path::new(d).join(p))
            .find(|p| p.is_file())
            .unwrap()
    };
    for p in ["bridge", "host-local"] {
        std::os::unix::fs::symlink(real(p), bin.join(p)).unwrap();
    }
    let script = format!(
        "#!/bin/sh\nif [ \"$CNI_COMMAND\" = ADD ]; then\n  cat >/dev/null\n  echo \"$CNI_CONTAINERID\" >> {ids}\n  echo '{{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"injected failure\",\"details\":\"test\"}}'\n  exit 1\nfi\nexec {real}\n",
        ids = dir.join("ids").display(),
        real = real("portmap").display(),
    );
    let path = bin.join("portmap");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_add_fails_run_pod_sandbox_cleanly() {
    if !cni_available() {
        skip(
            "failed_add_fails_run_pod_sandbox_cleanly",
            "real root and the CNI plugins",
        );
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let bin = failing_portmap_dir(scratch.path());
    let env = Env::with(|o| {
        o.network.mode = NetworkMode::Cni;
        o.network.cni_bin_dirs = vec![bin];
    })
    .await;
    let err = env
        .rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(pod_config("doomed", &env.logs())),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Internal);
    assert!(
        err.message()
            .contains("CNI plugin portmap ADD failed: injected failure (CNI error code 11): test"),
        "{}",
        err.message()
    );
    let id = std::fs::read_to_string(scratch.path().join("ids")).unwrap();
    let id = id.trim();
    assert!(!id.is_empty());
    // Nothing left: no sandbox, no state dir, no mount, no lease, no rule, no process.
    let listed = env
        .rt
        .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .items;
    assert!(listed.is_empty(), "{listed:?}");
    for dir in ["rt/sandboxes", "rt/run/sandboxes"] {
        let sandbox_dir = env.dir.path().join(dir).join(id);
        assert!(!sandbox_dir.exists(), "{} left", sandbox_dir.display());
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(id), "mounts of {id} left");
    let leases: Vec<String> = std::fs::read_dir(test_lease_dir())
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.lines().next() == Some(id)))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(leases.is_empty(), "leases of {id} left: {leases:?}");
    assert!(!nat_rules().contains(id));
    let (_, ps, _) = host_command(&["ps", "-eo", "args"]);
    assert!(!ps.contains(id), "a process of {id} left:\n{ps}");
    let zombies = lasting_zombies();
    assert!(zombies.is_empty(), "zombies: {zombies:?}");
}
