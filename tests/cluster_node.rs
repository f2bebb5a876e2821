//! The agent as a Node of a real cluster: `runp agent --runtime=process --kubeconfig` with a
//! node identity registers its Node (standard and `--node-labels` labels, taints, capacity and
//! allocatable from the host minus `--system-reserved`, nodeInfo, addresses, daemon endpoint,
//! Ready and the pressure conditions), renews its Lease, runs a pod the scheduler places on it,
//! and with a bad kubeconfig fails (or logs) with an error naming what failed, never hanging.
//! One control plane; the cases run in order in one test.

#[path = "support/image.rs"]
mod image;
#[path = "support/k8s.rs"]
mod k8s;
#[path = "support/runtime.rs"]
mod runtime;

use k8s::Cluster;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use runp::runtime::Reaper;
use runp::runtime::reaper::ExitStatus;
use runtime::{LeakGuard, is_root, skip};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HANG_GUARD: Duration = Duration::from_secs(60);
const NODE: &str = "runp-node-test";
const MAX_PODS: u32 = 37;
const KUBELET_PORT: u16 = 10251;
/// --system-reserved memory, and kubelet's hard eviction threshold (memory.available 100Mi).
const RESERVED_MEMORY: i64 = 256 << 20;
const EVICTION_MEMORY: i64 = 100 << 20;

/// The agent as a child process, SIGKILLed (log printed) if the test ends without stopping it.
/// The test process runs a reaper (the leak guard's CNI cleanup needs one), which owns every
/// child's exit status: the agent's exit is read from it, not from std.
struct AgentProcess {
    pid: Option<i32>,
    log: PathBuf,
    reaper: Reaper,
}

impl AgentProcess {
    // The reaper waits for the child (std's wait would get ECHILD).
    #[allow(clippy::zombie_processes)]
    fn spawn(root: &Path, kubeconfig: &Path, extra: &[&str]) -> AgentProcess {
        let log = root.join("agent.log");
        let stderr = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_runp"))
            .arg("--root")
            .arg(root)
            .args(["--log-level", "info"])
            .args(["agent", "--runtime", "process", "--node-name", NODE])
            .args(["--node-ip", "127.0.0.1"])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--pod-bridge", runtime::TEST_BRIDGE])
            .args(["--pod-cidr", runtime::TEST_POD_CIDR])
            .arg("--cni-data-dir")
            .arg(Path::new(runtime::TEST_NET_DIR).join("ipam"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        AgentProcess {
            pid: Some(child.id() as i32),
            log,
            reaper: runtime::reaper(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The exit status once the agent exited, waiting at most `limit`.
    async fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let pid = self.pid?;
        let status = tokio::time::timeout(limit, self.reaper.wait(pid))
            .await
            .ok()
            .flatten()?;
        self.pid = None;
        Some(status)
    }

    /// SIGTERM and a clean exit.
    async fn stop(mut self) {
        let pid = self.pid.unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = self.wait(HANG_GUARD).await;
        assert!(status.is_some(), "the agent did not stop: {}", self.log());
        assert_eq!(
            status,
            Some(ExitStatus::Exited(0)),
            "agent exit: {}",
            self.log()
        );
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            self.reaper.forget(pid);
            eprintln!("agent log ({}):\n{}", self.log.display(), self.log());
        }
    }
}

async fn wait_for<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(started.elapsed() < limit, "hang guard: {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn get<T: serde::de::DeserializeOwned>(cluster: &Cluster, args: &[&str]) -> Option<T> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = cluster.kubectl(&all);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("object JSON"))
}

fn condition<'a>(
    node: &'a Node,
    kind: &str,
) -> Option<&'a k8s_openapi::api::core::v1::NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

/// Bytes of a binary-suffixed quantity as the agent writes them ("8148452Ki", "1Gi", "1000").
fn bytes(q: &str) -> i64 {
    for (suffix, shift) in [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50)] {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<i64>().expect(q) << shift;
        }
    }
    q.parse().expect(q)
}

fn millicores(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().expect(q),
        None => q.parse::<i64>().expect(q) * 1000,
    }
}

fn meminfo_total() -> i64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text.lines().find(|l| l.starts_with("MemTotal:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<i64>()
        .unwrap()
        * 1024
}

fn lease_renew_time(cluster: &Cluster) -> Option<(Lease, String)> {
    let lease: Lease = get(cluster, &["lease", NODE, "-n", "kube-node-lease"])?;
    let renew = lease.spec.as_ref()?.renew_time.as_ref()?.0.to_string();
    Some((lease, renew))
}

/// The registered Node: labels, taints, capacity, allocatable, nodeInfo, addresses, endpoint,
/// conditions.
fn check_node(node: &Node) {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    for (key, value) in [
        ("kubernetes.io/hostname", NODE),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", arch),
        ("runp.dev/role", "test"),
        ("node.kubernetes.io/pool", "blue"),
    ] {
        assert_eq!(
            labels.get(key).map(String::as_str),
            Some(value),
            "{key}: {labels:?}"
        );
    }
    let spec = node.spec.clone().unwrap();
    let taints = spec.taints.unwrap_or_default();
    let dedicated = taints
        .iter()
        .find(|t| t.key == "dedicated")
        .unwrap_or_else(|| panic!("registered taint missing: {taints:?}"));
    assert_eq!(dedicated.value.as_deref(), Some("runp"));
    assert_eq!(dedicated.effect, "NoSchedule");

    let status = node.status.clone().unwrap();
    let capacity = status.capacity.unwrap();
    let allocatable = status.allocatable.unwrap();
    for resource in ["cpu", "memory", "ephemeral-storage", "pods"] {
        assert!(
            capacity.contains_key(resource),
            "capacity {resource}: {capacity:?}"
        );
        assert!(allocatable.contains_key(resource), "allocatable {resource}");
    }
    let cpus = std::thread::available_parallelism().unwrap().get() as i64;
    assert_eq!(millicores(&capacity["cpu"].0), cpus * 1000);
    assert_eq!(
        millicores(&allocatable["cpu"].0),
        cpus * 1000 - 500,
        "cpu=500m reserved"
    );
    let memory = bytes(&capacity["memory"].0);
    assert_eq!(memory, meminfo_total(), "capacity memory is MemTotal");
    assert_eq!(
        bytes(&allocatable["memory"].0),
        memory - RESERVED_MEMORY - EVICTION_MEMORY,
        "allocatable memory: capacity - system-reserved - eviction threshold"
    );
    let storage = bytes(&capacity["ephemeral-storage"].0);
    let storage_alloc = bytes(&allocatable["ephemeral-storage"].0);
    assert!(
        storage > 0 && storage_alloc > 0,
        "{capacity:?} {allocatable:?}"
    );
    assert!(
        storage_alloc <= storage - (1 << 30),
        "ephemeral-storage=1Gi reserved: {storage_alloc} of {storage}"
    );
    assert_eq!(capacity["pods"].0, MAX_PODS.to_string());
    assert_eq!(allocatable["pods"].0, MAX_PODS.to_string());

    let info = status.node_info.unwrap();
    assert!(
        info.container_runtime_version.starts_with("runp://"),
        "{info:?}"
    );
    assert!(info.kubelet_version.starts_with("v1."), "{info:?}");
    assert!(
        !info.machine_id.is_empty() && !info.boot_id.is_empty(),
        "{info:?}"
    );
    assert_eq!(
        info.boot_id,
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .unwrap()
            .trim()
    );
    assert_eq!(info.operating_system, "linux");
    assert_eq!(info.architecture, arch);
    assert!(!info.kernel_version.is_empty() && !info.os_image.is_empty());

    let addresses = status.addresses.unwrap();
    let address = |kind: &str| {
        addresses
            .iter()
            .find(|a| a.type_ == kind)
            .map(|a| a.address.clone())
    };
    assert_eq!(address("InternalIP").as_deref(), Some("127.0.0.1"));
    assert_eq!(address("Hostname").as_deref(), Some(NODE));
    let port = status
        .daemon_endpoints
        .and_then(|d| d.kubelet_endpoint)
        .map(|e| e.port);
    assert_eq!(port, Some(i32::from(KUBELET_PORT)));

    let ready = condition(node, "Ready").unwrap();
    assert_eq!(ready.status, "True", "{ready:?}");
    assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
    for kind in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = condition(node, kind).unwrap_or_else(|| panic!("{kind} missing"));
        assert_eq!(c.status, "False", "{c:?}");
        assert!(
            c.last_heartbeat_time.is_some() && c.reason.is_some(),
            "{c:?}"
        );
    }
}

/// A Deployment-less pod with no nodeName: the scheduler must pick the node (it tolerates
/// the node's taint; no other node exists).
const SCHEDULED_POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: scheduled, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  tolerations:
  - {key: dedicated, operator: Equal, value: runp, effect: NoSchedule}
  containers:
  - name: main
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
"#;

/// A kubeconfig like `from` whose server is `server`.
fn with_server(from: &Path, to: &Path, server: &str) {
    let text = std::fs::read_to_string(from).unwrap();
    let rewritten: Vec<String> = text
        .lines()
        .map(|l| match l.trim_start().strip_prefix("server: ") {
            Some(_) => format!("    server: {server}"),
            None => l.to_string(),
        })
        .collect();
    std::fs::write(to, rewritten.join("\n") + "\n").unwrap();
}

fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A bad kubeconfig: the agent exits non-zero or logs an error containing every `needles`
/// item within 20 s; it never panics.
async fn bad_kubeconfig(case: &str, kubeconfig: &Path, needles: &[&str]) {
    let dir = tempfile::Builder::new()
        .prefix("rb")
        .tempdir_in("/tmp")
        .unwrap();
    let _guard = LeakGuard::new(dir.path());
    let mut agent = AgentProcess::spawn(dir.path(), kubeconfig, &["--listen", "none"]);
    let started = Instant::now();
    let explained = |log: &str| needles.iter().all(|n| log.contains(n));
    let exit = loop {
        if let Some(status) = agent.wait(Duration::from_millis(100)).await {
            break Some(status);
        }
        if explained(&agent.log()) {
            break None;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{case}: neither an exit nor an error naming {needles:?} within 20 s:\n{}",
            agent.log()
        );
    };
    let log = agent.log();
    assert!(!log.contains("panicked"), "{case}: panic:\n{log}");
    assert!(
        explained(&log),
        "{case}: the error names {needles:?}:\n{log}"
    );
    match exit {
        Some(status) => assert!(
            matches!(status, ExitStatus::Exited(code) if code != 0),
            "{case}: exit {status:?}"
        ),
        None => agent.stop().await,
    }
    eprintln!(
        "{case}: {} after {:?}: {}",
        if exit.is_some() { "exited" } else { "logged" },
        started.elapsed(),
        log.lines()
            .find(|l| needles.iter().all(|n| l.contains(n)))
            .unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_is_a_ready_node_with_a_lease_and_runs_scheduled_pods() {
    let test = "the_agent_is_a_ready_node_with_a_lease_and_runs_scheduled_pods";
    if !is_root() {
        skip(test, "root for the process runtime");
        return;
    }
    let Some(cluster) = Cluster::start(test) else {
        return;
    };
    let fixtures = image::fixtures();
    // Before any child the test waits for: the reaper owns exit statuses from here on.
    let _reaper = runtime::reaper();
    let dir = tempfile::Builder::new()
        .prefix("rn")
        .tempdir_in("/tmp")
        .unwrap();
    let guard = LeakGuard::new(dir.path());
    let root = dir.path();
    let tar = fixtures.join("busybox-oci.tar");
    let load = k8s::run_command(
        env!("CARGO_BIN_EXE_runp"),
        &[
            "--root",
            &root.to_string_lossy(),
            "image",
            "load",
            &tar.to_string_lossy(),
        ],
        &[],
        b"",
    );
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );
    let kubeconfig = cluster.node_kubeconfig(NODE);
    let max_pods = MAX_PODS.to_string();
    let port = KUBELET_PORT.to_string();
    let started = Instant::now();
    let agent = AgentProcess::spawn(
        root,
        &kubeconfig,
        &[
            "--node-labels",
            "runp.dev/role=test,node.kubernetes.io/pool=blue",
            "--register-with-taints",
            "dedicated=runp:NoSchedule",
            "--max-pods",
            &max_pods,
            "--system-reserved",
            "cpu=500m,memory=256Mi,ephemeral-storage=1Gi",
            "--kubelet-port",
            &port,
        ],
    );

    // Registered and Ready.
    let node: Node = wait_for("the Node Ready", HANG_GUARD, || {
        get::<Node>(&cluster, &["node", NODE])
            .filter(|n| condition(n, "Ready").is_some_and(|c| c.status == "True"))
    })
    .await;
    eprintln!("node Ready {:?} after the agent started", started.elapsed());
    check_node(&node);

    // The Lease: held by the node, 40 s, renewed (every 10 s).
    let (lease, first) = wait_for("the Lease", HANG_GUARD, || lease_renew_time(&cluster)).await;
    let spec = lease.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(NODE));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let owner = &lease.metadata.owner_references.clone().unwrap_or_default();
    assert!(
        owner
            .iter()
            .any(|o| o.kind == "Node" && Some(&o.uid) == node.metadata.uid.as_ref()),
        "the Lease is owned by the Node: {owner:?}"
    );
    let renewed = wait_for("the Lease renewed", Duration::from_secs(25), || {
        lease_renew_time(&cluster).filter(|(_, t)| *t != first)
    })
    .await
    .1;
    let parse = |t: &str| t.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
    let step = parse(&renewed).duration_since(parse(&first));
    assert!(
        step.as_secs() >= 5 && step.as_secs() <= 15,
        "renewed every ~10 s: {first} -> {renewed}"
    );

    // A pod with no nodeName: scheduled onto the node, Running with a pod IP in the API.
    cluster.apply(SCHEDULED_POD);
    let pod: Pod = wait_for("the scheduled pod Running", HANG_GUARD, || {
        get::<Pod>(&cluster, &["pod", "scheduled", "-n", "default"]).filter(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.status
                    .as_ref()
                    .and_then(|s| s.pod_ip.as_deref())
                    .is_some_and(|ip| !ip.is_empty())
        })
    })
    .await;
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(NODE)
    );
    let status = pod.status.unwrap();
    assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
    eprintln!("pod scheduled and Running, podIP {:?}", status.pod_ip);
    cluster.kubectl_ok(&["delete", "pod", "scheduled", "--wait=false"]);
    wait_for("the pod gone", HANG_GUARD, || {
        get::<Pod>(&cluster, &["pod", "scheduled", "-n", "default"])
            .is_none()
            .then_some(())
    })
    .await;
    agent.stop().await;
    drop(guard);

    // Bad kubeconfigs: a file that does not exist, a server on a closed port.
    let missing = cluster.dir.path().join("no-such.kubeconfig");
    bad_kubeconfig("missing kubeconfig", &missing, &["no-such.kubeconfig"]).await;
    let port = closed_port();
    let closed = cluster.dir.path().join("closed-port.kubeconfig");
    with_server(&kubeconfig, &closed, &format!("https://127.0.0.1:{port}"));
    let server = format!("127.0.0.1:{port}");
    bad_kubeconfig(
        "server on a closed port",
        &closed,
        &[server.as_str(), "nodes/", "onnect"],
    )
    .await;
}
