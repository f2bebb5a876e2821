//! Pods from a real API server: `runp agent --runtime=process --kubeconfig` with a node identity
//! runs the pods bound to its node, reports their status through pods/status, stops deleted
//! pods within their grace period and deletes the objects, and after a SIGKILL and restart
//! cleans up what was deleted meanwhile without restarting what still exists. One control
//! plane and one node for the whole binary; pods get `spec.nodeName` directly (no scheduler
//! needed); the agent registers its Node itself. The API server killed and restarted for a
//! while: running pods keep running, a status that changed meanwhile reaches the API, and the
//! watch resumes.

#[path = "support/image.rs"]
mod image;
#[path = "support/k8s.rs"]
mod k8s;
#[path = "support/runtime.rs"]
mod runtime;

use k8s::Cluster;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use runp::cri::client::{RemoteOptions, RemoteRuntime};
use runp::cri::endpoint::CriEndpoint;
use runp::cri::{RuntimeService, api};
use runp::kubelet::labels;
use runtime::{LeakGuard, is_root, skip};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HANG_GUARD: Duration = Duration::from_secs(60);
const NODE: &str = "apipods-node";

/// The agent as a child process, SIGKILLed if the test ends without stopping it.
struct AgentProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl AgentProcess {
    fn spawn(root: &Path, kubeconfig: &Path, log: PathBuf) -> AgentProcess {
        let ipam = Path::new(runtime::TEST_NET_DIR).join("ipam");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
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
            .arg(ipam)
            .args(["--log-level", "info,runp::kubelet::source=debug"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        AgentProcess {
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill9(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM and a clean exit.
    async fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(started.elapsed() < HANG_GUARD, "the agent did not stop");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(status.success(), "agent exit {status}: {}", self.log());
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("agent log:\n{}", self.log());
        }
    }
}

fn pod_yaml(name: &str, restart: &str, grace: u32, script: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {NODE}
  # Projected service-account tokens come with the API object source (not this test's part).
  automountServiceAccountToken: false
  restartPolicy: {restart}
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: main
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "{script}"]
"#
    )
}

/// A pod that ignores SIGTERM (a shell as pid 1 has no handler): only the kill after the grace
/// period stops it.
fn stubborn(name: &str, grace: u32) -> String {
    pod_yaml(name, "Always", grace, "while true; do sleep 1; done")
}

fn get_pod(cluster: &Cluster, name: &str) -> Option<Pod> {
    let out = cluster.kubectl(&["get", "pod", name, "-n", "default", "-o", "json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("pod JSON"))
}

fn main_status(pod: &Pod) -> Option<ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "main")
        .cloned()
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
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

/// The pod once Running and ready with its main container started.
async fn wait_running(cluster: &Cluster, name: &str) -> Pod {
    wait_for(&format!("{name} Running and Ready in the API"), || {
        get_pod(cluster, name).filter(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && condition(p, "Ready").as_deref() == Some("True")
        })
    })
    .await
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

/// Running containers of the pod `uid`.
async fn running_containers(cri: &RemoteRuntime, uid: &str) -> Vec<api::Container> {
    cri.list_containers(api::ListContainersRequest {
        filter: Some(api::ContainerFilter {
            label_selector: HashMap::from([(labels::POD_UID.to_string(), uid.to_string())]),
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

async fn sandboxes(cri: &RemoteRuntime, uid: &str) -> usize {
    cri.list_pod_sandbox(api::ListPodSandboxRequest {
        filter: Some(api::PodSandboxFilter {
            label_selector: HashMap::from([(labels::POD_UID.to_string(), uid.to_string())]),
            ..Default::default()
        }),
    })
    .await
    .unwrap()
    .items
    .len()
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_pods_run_report_status_and_are_deleted() {
    let test = "api_pods_run_report_status_and_are_deleted";
    if !is_root() {
        skip(test, "root for the process runtime");
        return;
    }
    let Some(cluster) = Cluster::start(test) else {
        return;
    };
    let fixtures = image::fixtures();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .unwrap();
    let guard = LeakGuard::new(dir.path());
    let root = dir.path();
    let load = Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(root)
        .args(["image", "load"])
        .arg(fixtures.join("busybox-oci.tar"))
        .output()
        .unwrap();
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );
    let kubeconfig = cluster.node_kubeconfig(NODE);
    let log = root.join("agent.log");
    let agent = AgentProcess::spawn(root, &kubeconfig, log.clone());
    let rt = cri(root).await;

    // A pod bound to the node runs and its status reaches the API.
    cluster.apply(&stubborn("web", 30));
    cluster.apply(&pod_yaml("fail", "Never", 5, "echo bye; exit 3"));
    let web = wait_running(&cluster, "web").await;
    let status = web.status.clone().unwrap();
    assert!(
        status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty()),
        "{status:?}"
    );
    assert!(status.pod_ips.as_ref().is_some_and(|ips| !ips.is_empty()));
    assert!(
        status.host_ip.is_some() && status.start_time.is_some(),
        "{status:?}"
    );
    assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
    for type_ in [
        "PodScheduled",
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ] {
        assert_eq!(condition(&web, type_).as_deref(), Some("True"), "{type_}");
    }
    let main = main_status(&web).unwrap();
    let container_id = main.container_id.clone().unwrap();
    let id = container_id
        .strip_prefix("runp://")
        .expect("runp:// container id");
    assert!(main.ready && main.started == Some(true), "{main:?}");
    assert!(main.state.as_ref().unwrap().running.is_some(), "{main:?}");
    assert_eq!(main.restart_count, 0);
    assert!(!main.image_id.is_empty(), "{main:?}");
    let live = running_containers(&rt, &uid(&web)).await;
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].id, id, "the API names the runtime's container");

    // A container exiting 3 with restartPolicy Never: Failed, with its exit code and reason.
    let failed = wait_for("fail Failed in the API", || {
        get_pod(&cluster, "fail")
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
    })
    .await;
    let terminated = main_status(&failed)
        .and_then(|s| s.state)
        .and_then(|s| s.terminated)
        .expect("terminated state");
    assert_eq!(terminated.exit_code, 3);
    assert_eq!(terminated.reason.as_deref(), Some("Error"));
    assert!(
        terminated
            .container_id
            .is_some_and(|id| id.starts_with("runp://"))
    );

    // kubectl delete: stopped within its grace period (it ignores SIGTERM, so it takes the
    // whole period), then the object is gone.
    let deleted_at = Instant::now();
    cluster.kubectl_ok(&["delete", "pod", "web", "--grace-period=3", "--wait=false"]);
    wait_for("web gone from the API", || {
        get_pod(&cluster, "web").is_none().then_some(())
    })
    .await;
    let took = deleted_at.elapsed();
    assert!(
        took >= Duration::from_secs(2),
        "killed before its grace period: {took:?}"
    );
    assert!(took < Duration::from_secs(15), "deletion took {took:?}");
    assert!(running_containers(&rt, &uid(&web)).await.is_empty());
    assert_eq!(sandboxes(&rt, &uid(&web)).await, 0, "sandbox removed");

    // The kubelet's events about web, as `kubectl get events` lists them (web names its node,
    // so there is no Scheduled): Pulled, Created, Started and, on deletion, Killing.
    let events = wait_for("web's Killing event", || {
        let out = cluster.kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=web",
            "-o",
            "jsonpath={range .items[*]}{.type} {.reason} {.reportingComponent} {.involvedObject.fieldPath}|{.message}{\"\\n\"}{end}",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.contains(" Killing ").then_some(text)
    })
    .await;
    for line in [
        "Normal Pulled kubelet spec.containers{main}|Container image",
        "Normal Created kubelet spec.containers{main}|Created container: main",
        "Normal Started kubelet spec.containers{main}|Started container main",
        "Normal Killing kubelet spec.containers{main}|Stopping container main",
    ] {
        assert!(
            events.lines().any(|l| l.starts_with(line)),
            "{line} in {events}"
        );
    }

    // The agent SIGKILLed; meanwhile one pod is deleted gracefully (the object waits for the
    // node), one forcibly (the object is gone at once); a third stays.
    for name in ["keep", "graceful", "forced"] {
        cluster.apply(&stubborn(name, 2));
    }
    let keep = wait_running(&cluster, "keep").await;
    let graceful = wait_running(&cluster, "graceful").await;
    let forced = wait_running(&cluster, "forced").await;
    let keep_id = main_status(&keep).unwrap().container_id;
    drop(rt);
    agent.kill9();
    cluster.kubectl_ok(&["delete", "pod", "graceful", "--wait=false"]);
    cluster.kubectl_ok(&["delete", "pod", "forced", "--grace-period=0", "--force"]);
    assert!(
        get_pod(&cluster, "graceful").is_some_and(|p| p.metadata.deletion_timestamp.is_some()),
        "a graceful deletion waits for the node"
    );
    let agent = AgentProcess::spawn(root, &kubeconfig, log.clone());
    let rt = cri(root).await;
    wait_for("graceful gone from the API", || {
        get_pod(&cluster, "graceful").is_none().then_some(())
    })
    .await;
    for (name, pod) in [("graceful", &graceful), ("forced", &forced)] {
        let started = Instant::now();
        while sandboxes(&rt, &uid(pod)).await > 0 {
            assert!(
                started.elapsed() < HANG_GUARD,
                "hang guard: {name} cleaned up"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(
            running_containers(&rt, &uid(pod)).await.is_empty(),
            "{name}"
        );
    }
    // The pod that stayed was adopted, not restarted.
    let keep_now = get_pod(&cluster, "keep").unwrap();
    let main = main_status(&keep_now).unwrap();
    assert_eq!(main.container_id, keep_id, "same container");
    assert_eq!(main.restart_count, 0);
    assert_eq!(running_containers(&rt, &uid(&keep)).await.len(), 1);

    // The API server killed and down for a while: the pod keeps running, a container that
    // exits meanwhile is reported once the server is back, and new pods arrive again.
    cluster.apply(&pod_yaml("outage", "Never", 1, "sleep 6; exit 4"));
    let outage = wait_running(&cluster, "outage").await;
    cluster.restart_apiserver(Duration::from_secs(15));
    let reported = wait_for("outage's exit reported after the restart", || {
        get_pod(&cluster, "outage")
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
    })
    .await;
    let exit = main_status(&reported)
        .and_then(|s| s.state)
        .and_then(|s| s.terminated)
        .map(|t| t.exit_code);
    assert_eq!(exit, Some(4));
    let main = main_status(&get_pod(&cluster, "keep").unwrap()).unwrap();
    assert_eq!(
        main.container_id, keep_id,
        "kept running through the outage"
    );
    assert_eq!(main.restart_count, 0);
    cluster.apply(&pod_yaml("after", "Never", 1, "exit 0"));
    wait_for("a pod created after the restart ran", || {
        get_pod(&cluster, "after")
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
    })
    .await;
    wait_for("the node Ready again after the restart", || {
        let out = cluster.kubectl(&[
            "get",
            "node",
            NODE,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        ]);
        (String::from_utf8_lossy(&out.stdout) == "True").then_some(())
    })
    .await;
    let after = get_pod(&cluster, "after").unwrap();

    // Clean up through the agent.
    for name in ["keep", "fail", "outage", "after"] {
        cluster.kubectl_ok(&["delete", "pod", name, "--grace-period=1", "--wait=false"]);
    }
    for name in ["keep", "fail", "outage", "after"] {
        wait_for(&format!("{name} gone"), || {
            get_pod(&cluster, name).is_none().then_some(())
        })
        .await;
    }
    let started = Instant::now();
    while sandboxes(&rt, &uid(&keep)).await > 0
        || sandboxes(&rt, &uid(&failed)).await > 0
        || sandboxes(&rt, &uid(&outage)).await > 0
        || sandboxes(&rt, &uid(&after)).await > 0
    {
        assert!(
            started.elapsed() < HANG_GUARD,
            "hang guard: sandboxes removed"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(rt);
    agent.stop().await;
    drop(guard);
}
