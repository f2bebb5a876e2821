//! Static pods of a cluster node against a real control plane: `runp agent --kubeconfig` (the
//! node's credentials) with `--manifests` runs the manifest pod as a static pod and keeps its
//! mirror pod in the API (`<name>-<node>`, annotation kubernetes.io/config.mirror, owned by the
//! Node) with the static pod's status; a deleted mirror pod is recreated without restarting
//! the static pod; an edited manifest makes it again with the new spec; removing the manifest
//! file stops the pod and deletes its mirror.

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
const NODE: &str = "mirror-node";
const MIRROR: &str = "web-mirror-node";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

const STATIC_POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "sleep 3600"]
"#;

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

fn spawn_agent(root: &Path, kubeconfig: &Path, manifests: &Path) -> Agent {
    let log = root.join("agent.log");
    let stderr = std::fs::File::create(&log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(root)
        .args(["agent", "--runtime", "process", "--node-name", NODE])
        .args(["--node-ip", "127.0.0.1"])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--manifests")
        .arg(manifests)
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

/// (restartCount, containerID) of the mirror's only container.
fn container_status(pod: &Pod) -> Option<(i32, String)> {
    let status = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    Some((status.restart_count, status.container_id.clone()?))
}

fn running_with_ip(pod: &Pod) -> bool {
    phase(pod) == Some("Running")
        && pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .is_some_and(|ip| !ip.is_empty())
}

async fn running_containers(cri: &RemoteRuntime, uid: &str) -> Vec<api::Container> {
    let selector = HashMap::from([(labels::POD_UID.to_string(), uid.to_string())]);
    cri.list_containers(api::ListContainersRequest {
        filter: Some(api::ContainerFilter {
            label_selector: selector,
            ..Default::default()
        }),
    })
    .await
    .unwrap()
    .containers
    .into_iter()
    .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_gets_a_mirror_pod_recreated_when_deleted_and_removed_with_the_file() {
    let test = "a_static_pod_gets_a_mirror_pod_recreated_when_deleted_and_removed_with_the_file";
    if !is_root() {
        skip(test, "root for the process runtime");
        return;
    }
    let Some(cluster) = Cluster::start(test) else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("rm")
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
    let manifests = root.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let manifest = manifests.join("web.yaml");
    std::fs::write(&manifest, STATIC_POD).unwrap();
    let agent = spawn_agent(root, &cluster.node_kubeconfig(NODE), &manifests);
    let rt = cri(root).await;

    // The mirror pod: annotated, bound, owned by the Node, Running with a pod IP.
    let mirror = wait_for("the mirror pod Running with a pod IP", || {
        get_pod(&cluster, MIRROR).filter(running_with_ip)
    })
    .await;
    let annotations = mirror.metadata.annotations.clone().unwrap_or_default();
    let static_uid = annotations
        .get(MIRROR_ANNOTATION)
        .cloned()
        .expect("the config.mirror annotation");
    assert_eq!(
        annotations
            .get("kubernetes.io/config.source")
            .map(String::as_str),
        Some("file")
    );
    assert_eq!(
        annotations.get("kubernetes.io/config.hash"),
        Some(&static_uid)
    );
    assert_eq!(
        mirror.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(NODE)
    );
    let node_uid = cluster.kubectl_ok(&["get", "node", NODE, "-o", "jsonpath={.metadata.uid}"]);
    let owners = mirror.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(
        (
            owners[0].kind.as_str(),
            owners[0].api_version.as_str(),
            owners[0].name.as_str()
        ),
        ("Node", "v1", NODE)
    );
    assert_eq!(owners[0].uid, node_uid.trim());
    assert_eq!(owners[0].controller, Some(true));
    // The static pod runs once: the mirror pod is not run as a second pod.
    assert_eq!(runtime_objects(&rt, &static_uid).await, (1, 1));
    let mirror_uid = mirror.metadata.uid.clone().unwrap();
    assert_eq!(runtime_objects(&rt, &mirror_uid).await, (0, 0));
    let (restarts, container_id) = container_status(&mirror).expect("a container status");
    assert_eq!(restarts, 0);

    // A deleted mirror pod comes back; the static pod goes on (same container, no restart).
    cluster.kubectl_ok(&["delete", "pod", MIRROR, "-n", "default", "--wait=false"]);
    let recreated = wait_for("the mirror pod recreated and Running", || {
        get_pod(&cluster, MIRROR).filter(|p| {
            p.metadata.uid.as_deref() != Some(mirror_uid.as_str())
                && p.metadata.deletion_timestamp.is_none()
                && running_with_ip(p)
                && container_status(p).is_some()
        })
    })
    .await;
    assert_eq!(
        container_status(&recreated),
        Some((0, container_id.clone())),
        "the static pod was not restarted"
    );
    let running = running_containers(&rt, &static_uid).await;
    assert_eq!(running.len(), 1);
    assert!(
        container_id.ends_with(&running[0].id),
        "{container_id} vs {}",
        running[0].id
    );
    assert_eq!(runtime_objects(&rt, &static_uid).await, (1, 1));

    // Nothing churns: the mirror stays the same object.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let steady = get_pod(&cluster, MIRROR).expect("the mirror pod");
    assert_eq!(
        steady.metadata.uid, recreated.metadata.uid,
        "mirror pod recreated again"
    );

    // An edited manifest: the mirror is made again with the new spec.
    std::fs::write(&manifest, STATIC_POD.replace("sleep 3600", "sleep 3601")).unwrap();
    wait_for("the mirror pod with the edited spec", || {
        get_pod(&cluster, MIRROR).filter(|p| {
            let command = p.spec.as_ref().map(|s| s.containers[0].command.clone());
            command
                .flatten()
                .is_some_and(|c| c.iter().any(|a| a == "sleep 3601"))
                && running_with_ip(p)
        })
    })
    .await;

    // Removing the manifest stops the pod and deletes the mirror.
    std::fs::remove_file(&manifest).unwrap();
    wait_for("the mirror pod gone", || {
        get_pod(&cluster, MIRROR).is_none().then_some(())
    })
    .await;
    let started = Instant::now();
    while !running_containers(&rt, &static_uid).await.is_empty() {
        assert!(
            started.elapsed() < HANG_GUARD,
            "hang guard: the container stopped"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(agent);
}
