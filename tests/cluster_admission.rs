//! Node-side admission against a real control plane: `runp agent --kubeconfig` as a node
//! refuses a pod bound to it (spec.nodeName set directly, bypassing the scheduler) that asks
//! for more cpu than the node has: phase Failed, reason OutOfcpu with kubelet's message, a
//! Warning event from the kubelet saying why, and no sandbox or container for it ever exists;
//! a pod that fits, sent alongside, runs.

#[path = "support/image.rs"]
mod image;
#[path = "support/k8s.rs"]
mod k8s;
#[path = "support/runtime.rs"]
mod runtime;

use k8s::Cluster;
use k8s_openapi::api::core::v1::Pod;
use runp::cri::client::{RemoteOptions, RemoteRuntime};
use runp::cri::endpoint::CriEndpoint;
use runp::cri::{RuntimeService, api};
use runp::kubelet::labels;
use runtime::{LeakGuard, is_root, skip};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HANG_GUARD: Duration = Duration::from_secs(60);
const NODE: &str = "admission-node";

/// The agent child process; killed (and its log printed) when the test ends.
struct Agent {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "agent log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

fn spawn_agent(root: &Path, kubeconfig: &Path) -> Agent {
    let log = root.join("agent.log");
    let stderr = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(root)
        .args(["agent", "--runtime", "process", "--node-name", NODE])
        .args(["--node-ip", "127.0.0.1"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--pod-bridge", runtime::TEST_BRIDGE])
        .args(["--pod-cidr", runtime::TEST_POD_CIDR])
        .arg("--cni-data-dir")
        .arg(Path::new(runtime::TEST_NET_DIR).join("ipam"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    Agent { child, log }
}

fn pod_yaml(name: &str, cpu: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {NODE}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "sleep 3600"]
    resources: {{requests: {{cpu: "{cpu}"}}}}
"#
    )
}

fn get_pod(cluster: &Cluster, name: &str) -> Option<Pod> {
    let out = cluster.kubectl(&["get", "pod", name, "-n", "default", "-o", "json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("pod JSON"))
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

async fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(started.elapsed() < HANG_GUARD, "hang guard: {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn cri(root: &Path) -> RemoteRuntime {
    let endpoint: CriEndpoint = format!("unix://{}", root.join("runp.sock").display())
        .parse()
        .unwrap();
    let started = Instant::now();
    loop {
        match RemoteRuntime::connect(&endpoint, RemoteOptions::default()).await {
            Ok(rt) => return rt,
            Err(err) => assert!(started.elapsed() < HANG_GUARD, "CRI socket: {err}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sandboxes and containers the runtime has (or had, not yet removed) for the pod `uid`.
async fn runtime_objects(cri: &RemoteRuntime, uid: &str) -> (usize, usize) {
    let selector = HashMap::from([(labels::POD_UID.to_string(), uid.to_string())]);
    let sandboxes = cri
        .list_pod_sandbox(api::ListPodSandboxRequest {
            filter: Some(api::PodSandboxFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .items
        .len();
    let containers = cri
        .list_containers(api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .containers
        .len();
    (sandboxes, containers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_does_not_fit_fails_out_of_cpu_and_never_starts() {
    let test = "a_pod_that_does_not_fit_fails_out_of_cpu_and_never_starts";
    if !is_root() {
        skip(test, "root for the process runtime");
        return;
    }
    let Some(cluster) = Cluster::start(test) else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("ra")
        .tempdir_in("/tmp")
        .unwrap();
    let _guard = LeakGuard::new(dir.path());
    let root = dir.path();
    let load = Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(root)
        .args(["image", "load"])
        .arg(image::fixtures().join("busybox-oci.tar"))
        .output()
        .unwrap();
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );
    let agent = spawn_agent(root, &cluster.node_kubeconfig(NODE));
    let rt = cri(root).await;
    // The node's allocatable must be known before the pods arrive.
    let allocatable = wait_for("the Node with its allocatable cpu", || {
        let out = cluster.kubectl(&[
            "get",
            "node",
            NODE,
            "-o",
            "jsonpath={.status.allocatable.cpu}",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    })
    .await;

    cluster.apply(&pod_yaml("huge", "64"));
    cluster.apply(&pod_yaml("small", "10m"));
    let huge = wait_for("huge Failed in the API", || {
        get_pod(&cluster, "huge").filter(|p| phase(p) == Some("Failed"))
    })
    .await;
    let status = huge.status.clone().unwrap();
    assert_eq!(status.reason.as_deref(), Some("OutOfcpu"), "{status:?}");
    let message = status.message.clone().unwrap_or_default();
    assert!(
        message.starts_with("Node didn't have enough resource: cpu, requested: 64000, used: "),
        "{message}"
    );
    assert!(
        message.ends_with(&format!(
            "capacity: {}",
            millicores(&allocatable).expect("cpu quantity")
        )),
        "{message} vs allocatable {allocatable}"
    );
    // The rejection is also a Warning event from the kubelet, as `kubectl describe` shows it.
    let event = wait_for("an OutOfcpu event for huge", || {
        let out = cluster.kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=huge,reason=OutOfcpu",
            "-o",
            "jsonpath={range .items[*]}{.type} {.reportingComponent}|{.message}{end}",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !text.is_empty()).then_some(text)
    })
    .await;
    assert!(
        event.starts_with(&format!("Warning kubelet|{message}")),
        "{event}"
    );
    wait_for("small Running (the node admits what fits)", || {
        get_pod(&cluster, "small").filter(|p| phase(p) == Some("Running"))
    })
    .await;
    let uid = huge.metadata.uid.clone().unwrap();
    assert_eq!(
        runtime_objects(&rt, &uid).await,
        (0, 0),
        "a rejected pod gets no sandbox and no container"
    );
    // Still Failed and never started a while later (no retry of the admission).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(phase(&get_pod(&cluster, "huge").unwrap()), Some("Failed"));
    assert_eq!(runtime_objects(&rt, &uid).await, (0, 0));

    // Deleting the rejected pod removes the object (nothing to stop).
    cluster.kubectl_ok(&["delete", "pod", "huge", "--wait=false"]);
    wait_for("huge gone from the API", || {
        get_pod(&cluster, "huge").is_none().then_some(())
    })
    .await;
    cluster.kubectl_ok(&["delete", "pod", "small", "--grace-period=1", "--wait=false"]);
    wait_for("small gone from the API", || {
        get_pod(&cluster, "small").is_none().then_some(())
    })
    .await;
    drop(agent);
}

/// "2" → 2000, "1500m" → 1500.
fn millicores(q: &str) -> Option<i64> {
    match q.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => q.parse::<i64>().ok().map(|c| c * 1000),
    }
}
