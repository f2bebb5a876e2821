//! The shared test pod network (bridge, CIDR, lease dir), its last-out cleanup, CNI DEL of
//! what a failed test left attached, and host commands run through the test reaper.

use super::{is_real_root, reaper};
use runp::runtime::network::{NetworkAttachment, NetworkOptions, PluginExec, detach};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The pod network every test runtime shares (as real root): one bridge, one CIDR and one
/// host-local lease directory, so that runtimes of parallel tests never hand out the same IP.
/// The bridge is removed by the last test to finish (see [`NetLease`]).
pub const TEST_BRIDGE: &str = "runptest0";
pub const TEST_POD_CIDR: &str = "10.213.0.0/16";
pub const TEST_NET_DIR: &str = "/tmp/runp-test-net";

pub fn network_options() -> NetworkOptions {
    NetworkOptions {
        bridge: TEST_BRIDGE.to_string(),
        pod_cidrs: vec![TEST_POD_CIDR.parse().unwrap()],
        data_dir: Some(Path::new(TEST_NET_DIR).join("ipam")),
        ..NetworkOptions::default()
    }
}

/// Whether the CNI network can run here (`--network=cni`, and hostPorts in either mode): real
/// root and the plugins installed.
pub fn cni_available() -> bool {
    let dirs = NetworkOptions::default().cni_bin_dirs;
    is_real_root()
        && ["bridge", "host-local", "portmap"]
            .iter()
            .all(|p| dirs.iter().any(|d| d.join(p).is_file()))
}

/// The lease files of the test network: `<dataDir>/runp/<ip>`.
pub fn test_lease_dir() -> PathBuf {
    Path::new(TEST_NET_DIR).join("ipam").join("runp")
}

/// Runs a host command through the test process's reaper (which owns every child's exit
/// status, so std's `Command::output` cannot be used): (exit code, stdout, stderr). Usable from
/// Drop and from inside a tokio runtime (it runs on its own thread).
pub fn host_command(argv: &[&str]) -> (i32, String, String) {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let reaper = reaper();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut child = match std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => return (127, String::new(), format!("{}: {e}", argv[0])),
        };
        let mut stderr = child.stderr.take().unwrap();
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let mut out = String::new();
        let _ = child.stdout.take().unwrap().read_to_string(&mut out);
        let err = err_reader.join().unwrap_or_default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let code = rt
            .block_on(reaper.wait(child.id() as i32))
            .map(|s| s.code())
            .unwrap_or(-1);
        (code, out, err)
    })
    .join()
    .unwrap()
}

/// Runs `future` to completion on a fresh thread (for Drop, which may run inside a runtime).
fn block_on_thread<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    })
    .join()
    .unwrap()
}

/// A test runtime's hold on the shared test network: a shared flock on `<TEST_NET_DIR>/lock`.
/// Whoever drops the last one (an exclusive lock is then free) deletes the test bridge and the
/// host-port chains portmap created, if no pod uses them.
pub struct NetLease(std::fs::File);

impl NetLease {
    /// None when tests cannot use CNI here (not real root).
    pub fn acquire() -> Option<NetLease> {
        if !is_real_root() {
            return None;
        }
        std::fs::create_dir_all(TEST_NET_DIR).unwrap();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(Path::new(TEST_NET_DIR).join("lock"))
            .unwrap();
        file.lock_shared().unwrap();
        Some(NetLease(file))
    }
}

impl Drop for NetLease {
    fn drop(&mut self) {
        // Converting to exclusive drops our shared lock first; failing means others hold it.
        if self.0.try_lock().is_err() {
            return;
        }
        let leases: Vec<String> = std::fs::read_dir(test_lease_dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect();
        if !leases.is_empty() {
            eprintln!(
                "test network: leases left in {}: {leases:?}",
                test_lease_dir().display()
            );
        }
        host_command(&["ip", "link", "del", TEST_BRIDGE]);
        // The bridge network's masquerade rule (one per network; it outlives runtimes).
        let subnet = TEST_POD_CIDR.parse().unwrap();
        let mut rule = vec!["iptables", "-t", "nat", "-D", "POSTROUTING"];
        let masquerade = runp::runtime::network::bridge::masquerade_rule(TEST_BRIDGE, subnet);
        rule.extend(masquerade.iter().map(String::as_str));
        for _ in 0..16 {
            if host_command(&rule).0 != 0 {
                break;
            }
        }
        // portmap's shared chains, when no pod (of any runtime) has a hostPort any more.
        let (_, dnat, _) = host_command(&["iptables", "-t", "nat", "-S", "CNI-HOSTPORT-DNAT"]);
        if dnat.lines().all(|l| l.starts_with("-N")) {
            let jumps: [&[&str]; 3] = [
                &[
                    "PREROUTING",
                    "-m",
                    "addrtype",
                    "--dst-type",
                    "LOCAL",
                    "-j",
                    "CNI-HOSTPORT-DNAT",
                ],
                &[
                    "OUTPUT",
                    "-m",
                    "addrtype",
                    "--dst-type",
                    "LOCAL",
                    "-j",
                    "CNI-HOSTPORT-DNAT",
                ],
                &[
                    "POSTROUTING",
                    "-m",
                    "comment",
                    "--comment",
                    "CNI portfwd requiring masquerade",
                    "-j",
                    "CNI-HOSTPORT-MASQ",
                ],
            ];
            for jump in jumps {
                let mut argv = vec!["iptables", "-t", "nat", "-D"];
                argv.extend_from_slice(jump);
                // Concurrent portmap ADDs (of parallel test processes) can insert a jump twice.
                for _ in 0..16 {
                    if host_command(&argv).0 != 0 {
                        break;
                    }
                }
            }
            for chain in [
                "CNI-HOSTPORT-DNAT",
                "CNI-HOSTPORT-SETMARK",
                "CNI-HOSTPORT-MASQ",
            ] {
                host_command(&["iptables", "-t", "nat", "-F", chain]);
                host_command(&["iptables", "-t", "nat", "-X", chain]);
            }
        }
    }
}

/// CNI DEL for every attachment the sandbox records under `rt` still hold (a test that
/// failed before removing its pods).
pub(super) fn release_leftover_networks(rt: &Path) {
    let Ok(dirs) = std::fs::read_dir(rt.join("sandboxes")) else {
        return;
    };
    let attachments: Vec<NetworkAttachment> = dirs
        .flatten()
        .filter_map(|d| std::fs::read_to_string(d.path().join("sandbox.json")).ok())
        .filter_map(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .filter_map(|record| serde_json::from_value(record["network"].clone()).ok())
        .collect();
    if attachments.is_empty() {
        return;
    }
    let exec = PluginExec::new(
        network_options().cni_bin_dirs,
        reaper(),
        Duration::from_secs(60),
    );
    block_on_thread(async move {
        for a in attachments {
            if let Err(e) = detach(&exec, &a).await {
                eprintln!("leak guard: network DEL of {}: {e}", a.container_id);
            }
        }
    });
}

/// An HTTP server on port 8080 serving `body` at /index.html.
pub fn web(name: &str, body: &str) -> runp::cri::api::ContainerConfig {
    super::shell(
        name,
        &format!(
            "mkdir -p /tmp/www && echo {body} > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"
        ),
    )
}

/// GET /index.html from `addr`, retried until the server answers (hang guard 20 s).
pub async fn http_get(addr: std::net::SocketAddr) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(addr).await?;
            s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").await?;
            let mut out = String::new();
            s.read_to_string(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        };
        match tokio::time::timeout(Duration::from_secs(3), attempt).await {
            Ok(Ok(out)) if out.contains("200 OK") => return out,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "no HTTP answer from {addr}: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pod IP PodSandboxStatus reports.
pub async fn pod_ip(env: &super::Env, id: &str) -> String {
    env.pod_status(id, false)
        .await
        .status
        .unwrap()
        .network
        .unwrap()
        .ip
}

/// The container id holding the host-local lease of `ip`, if any.
pub fn lease_holder(ip: &str) -> Option<String> {
    let text = std::fs::read_to_string(test_lease_dir().join(ip)).ok()?;
    text.lines().next().map(|l| l.trim().to_string())
}

pub fn nat_rules() -> String {
    let (code, out, err) = host_command(&["iptables", "-t", "nat", "-S"]);
    assert_eq!(code, 0, "iptables -t nat -S: {err}");
    out
}

pub fn in_test_cidr(ip: &str) -> bool {
    let net: ipnet::IpNet = TEST_POD_CIDR.parse().unwrap();
    ip.parse::<std::net::IpAddr>()
        .is_ok_and(|a| net.contains(&a))
}

/// Nothing of the pod's network is left: no lease, no iptables rule naming it, no veth of the
/// bridge network's.
pub fn assert_network_released(id: &str, ip: &str) {
    assert_eq!(lease_holder(ip), None, "lease of {ip} still held");
    // The bridge network's veth goes with the pod's namespace, which the kernel tears down
    // asynchronously once stop released it.
    let veth = Path::new("/sys/class/net").join(runp::runtime::network::bridge::host_veth_name(id));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while veth.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!veth.exists(), "{} left", veth.display());
    let rules = nat_rules();
    assert!(!rules.contains(id), "rules for {id} left:\n{rules}");
    assert!(
        !rules.contains(&format!("{ip}:")),
        "DNAT to {ip} left:\n{rules}"
    );
}
