//! Which pod network a runtime gets and how it says so: auto as real root is the bridge
//! network made in process (no plugins needed but portmap for hostPorts); where no network
//! can be made (rootless; as real root, an IPv6 pod CIDR without the CNI plugins) pods get
//! loopback only and the runtime says why; `--network=cni` refuses to start instead.

#[path = "support/runtime.rs"]
mod support;

use runp::cri::{RuntimeService, api};
use runp::runtime::ProcessRuntime;
use runp::runtime::network::NetworkMode;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_cni_degrades_to_loopback_and_says_why() {
    if !is_root() {
        skip(
            "unusable_cni_degrades_to_loopback_and_says_why",
            "root (real or mapped)",
        );
        return;
    }
    // Rootless (the user-namespace run): the default options. Real root: an IPv6 pod CIDR,
    // which auto gives to CNI (the bridge network is IPv4 only), and no plugins.
    let empty = tempfile::tempdir().unwrap();
    let (env, why) = if is_real_root() {
        let dirs = vec![empty.path().to_path_buf()];
        let env = Env::with(|o| {
            o.network.cni_bin_dirs = dirs;
            o.network.pod_cidrs = vec!["fd00:213::/64".parse().unwrap()];
        })
        .await;
        (env, "CNI plugins bridge, host-local, portmap not found")
    } else {
        (Env::new().await, "rootless")
    };
    let pod = env.pod("degraded").await;
    assert_eq!(pod_ip(&env, &pod.0).await, "127.0.0.1");
    let status = env.pod_status(&pod.0, true).await;
    let info: serde_json::Value = serde_json::from_str(&status.info["info"]).unwrap();
    let network = info["network"].as_str().unwrap();
    assert!(
        network.contains("loopback only") && network.contains(why),
        "{network}"
    );
    assert_eq!(info["cniAttached"], false);

    let rt_status = env
        .rt
        .status(api::StatusRequest { verbose: true })
        .await
        .unwrap();
    let rt_info: serde_json::Value = serde_json::from_str(&rt_status.info["info"]).unwrap();
    assert_eq!(rt_info["network"]["mode"], "loopback", "{rt_info}");
    assert!(
        rt_info["network"]["reason"].as_str().unwrap().contains(why),
        "{rt_info}"
    );
    let ready = rt_status
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.r#type == "NetworkReady")
        .unwrap();
    assert_eq!(ready.reason, "LoopbackOnly");
    assert!(ready.message.contains(why), "{}", ready.message);

    // The pod still has its own loopback: a server in it is reachable from inside only.
    let srv = env.run(&pod, web("srv", "inside-only")).await;
    let mut body = String::new();
    for _ in 0..100 {
        let r = env
            .exec(
                &srv,
                &["wget", "-q", "-O", "-", "http://127.0.0.1:8080/index.html"],
            )
            .await;
        body = String::from_utf8_lossy(&r.stdout).into_owned();
        if !body.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(body, "inside-only\n");

    // --network=cni refuses to start instead of degrading.
    let other = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .unwrap();
    let mut opts = options(other.path(), &env.images);
    opts.network.mode = NetworkMode::Cni;
    opts.network.cni_bin_dirs = vec![empty.path().to_path_buf()];
    if is_real_root() {
        opts.network.pod_cidrs = vec!["fd00:213::/64".parse().unwrap()];
    }
    let err = match ProcessRuntime::start(opts).await {
        Ok(_) => panic!("--network=cni started without a usable CNI"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("--network=cni: the CNI pod network is unusable"),
        "{err}"
    );
    assert!(err.contains(why), "{err}");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_network_cni_fails_loudly_when_unusable() {
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .unwrap();
    let root = dir.path().join("root");
    let listen = format!("unix://{}", dir.path().join("s.sock").display());
    let missing = dir.path().join("no-plugins");
    // `runp serve` with `args` must refuse to start; its stderr.
    let refused = |args: &[&str]| {
        let root = root.to_str().unwrap();
        let mut argv = vec!["timeout", "60", env!("CARGO_BIN_EXE_runp"), "--root", root];
        argv.extend(["serve", "--listen", &listen]);
        argv.extend(args);
        // `timeout`: were the check missing, serve would run until killed.
        let (code, _, stderr) = host_command(&argv);
        assert_ne!(code, 0, "{args:?}");
        stderr
    };
    let stderr = refused(&[
        "--network",
        "cni",
        "--cni-bin-dir",
        missing.to_str().unwrap(),
    ]);
    assert!(
        stderr.contains("--network=cni: the CNI pod network is unusable"),
        "{stderr}"
    );
    let stderr = refused(&["--pod-cidr", "10.88.0.1/16"]);
    assert!(stderr.contains("did you mean 10.88.0.0/16"), "{stderr}");
}

/// auto as real root is the bridge network, which needs no plugin: pods get IPs on the
/// bridge; only hostPorts need portmap, and a pod asking for one fails, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_is_the_bridge_network_even_without_plugins() {
    const TEST: &str = "auto_is_the_bridge_network_even_without_plugins";
    if !is_real_root() {
        return skip(TEST, "real root (a bridge in the host network namespace)");
    }
    let empty = tempfile::tempdir().unwrap();
    let dirs = vec![empty.path().to_path_buf()];
    let env = Env::with(|o| o.network.cni_bin_dirs = dirs).await;
    let rt_status = env
        .rt
        .status(api::StatusRequest { verbose: true })
        .await
        .unwrap();
    let rt_info: serde_json::Value = serde_json::from_str(&rt_status.info["info"]).unwrap();
    assert_eq!(rt_info["network"]["mode"], "bridge", "{rt_info}");
    assert_eq!(rt_info["network"]["hostPorts"], false, "{rt_info}");
    let pod = env.pod("plain").await;
    let ip = pod_ip(&env, &pod.0).await;
    assert!(in_test_cidr(&ip), "{ip} not in {TEST_POD_CIDR}");
    env.run(&pod, web("srv", "no-plugins")).await;
    let addr = SocketAddr::new(ip.parse().unwrap(), 8080);
    assert!(http_get(addr).await.contains("no-plugins"));

    let mut config = pod_config("with-host-port", &env.logs());
    config.port_mappings = vec![api::PortMapping {
        protocol: api::Protocol::Tcp as i32,
        container_port: 8080,
        host_port: 18080,
        host_ip: String::new(),
    }];
    let err = env
        .rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_err();
    assert!(
        err.message().contains("hostPorts need the portmap plugin"),
        "{err:?}"
    );
    env.cleanup().await;
    assert_network_released(&pod.0, &ip);
}

/// A bridge deleted under a running runtime (by hand, or by another runtime's cleanup) is made
/// again at the next pod, as the CNI bridge plugin ensures it on every ADD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_deleted_under_the_runtime_is_made_again() {
    const TEST: &str = "a_bridge_deleted_under_the_runtime_is_made_again";
    if !is_real_root() {
        return skip(TEST, "real root (a bridge in the host network namespace)");
    }
    // Its own bridge and CIDR: deleting the shared test bridge would cut other tests' pods off.
    const BRIDGE: &str = "runptest9";
    const CIDR: &str = "10.214.0.0/24";
    let env = Env::with(|o| {
        o.network.mode = NetworkMode::Bridge;
        o.network.bridge = BRIDGE.to_string();
        o.network.pod_cidrs = vec![CIDR.parse().unwrap()];
        o.network.data_dir = Some(o.root.join("leases"));
    })
    .await;
    let first = env.pod("before").await;
    assert_eq!(host_command(&["ip", "link", "del", BRIDGE]).0, 0);
    let second = env.pod("after").await;
    let ip = pod_ip(&env, &second.0).await;
    let cidr: ipnet::IpNet = CIDR.parse().unwrap();
    assert!(
        cidr.contains(&ip.parse::<std::net::IpAddr>().unwrap()),
        "{ip}"
    );
    assert!(std::path::Path::new("/sys/class/net").join(BRIDGE).exists());
    env.run(&second, web("srv", "after-the-bridge")).await;
    let addr = SocketAddr::new(ip.parse().unwrap(), 8080);
    assert!(http_get(addr).await.contains("after-the-bridge"));
    drop(first);
    env.cleanup().await;
    host_command(&["ip", "link", "del", BRIDGE]);
    let mut rule = vec!["iptables", "-t", "nat", "-D", "POSTROUTING"];
    let masquerade = runp::runtime::network::bridge::masquerade_rule(BRIDGE, CIDR.parse().unwrap());
    rule.extend(masquerade.iter().map(String::as_str));
    host_command(&rule);
}
