//! SIGKILL of `runp agent --runtime=process` (the runtime inside it) while it starts pods, twice:
//! the restarted agent on the same root ends with each pod running once — no container started
//! twice, no second ready sandbox — and removing the manifests then leaves no process and no
//! mount behind.

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/image.rs"]
mod image;
#[path = "support/runtime.rs"]
mod runtime;

use daemon::{Daemon, HANG_GUARD, runp};
use runp::cri::client::{RemoteOptions, RemoteRuntime};
use runp::cri::endpoint::CriEndpoint;
use runp::cri::{RuntimeService, api};
use runp::kubelet::labels;
use runtime::{LeakGuard, is_root, mounts_under, processes_under, skip};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

const PODS: usize = 6;

fn sleeper(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sleep, "1000"]
"#
    )
}

fn start_agent(root: &Path, manifests: &Path, run: u32) -> Daemon {
    Daemon::spawn(
        "runp agent",
        root,
        &[
            "agent",
            "--manifests",
            manifests.to_str().unwrap(),
            "--network",
            "loopback",
        ],
        root.join(format!("agent-{run}.log")),
    )
}

async fn connect(root: &Path) -> RemoteRuntime {
    let endpoint = format!("unix://{}", root.join("runp.sock").display());
    RemoteRuntime::connect(
        &endpoint.parse::<CriEndpoint>().unwrap(),
        RemoteOptions {
            connect_timeout: HANG_GUARD,
            ..RemoteOptions::default()
        },
    )
    .await
    .expect("the agent answers on its socket")
}

/// Per pod name: (ready sandboxes, running containers).
async fn census(cri: &RemoteRuntime) -> HashMap<String, (usize, usize)> {
    let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
    let name = |labels: &HashMap<String, String>| {
        labels.get(labels::POD_NAME).cloned().unwrap_or_default()
    };
    let sandboxes = cri
        .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
        .await
        .map(|r| r.items)
        .unwrap_or_default();
    for s in sandboxes {
        if s.state == api::PodSandboxState::SandboxReady as i32 {
            counts.entry(name(&s.labels)).or_default().0 += 1;
        }
    }
    let containers = cri
        .list_containers(api::ListContainersRequest { filter: None })
        .await
        .map(|r| r.containers)
        .unwrap_or_default();
    for c in containers {
        if c.state == api::ContainerState::ContainerRunning as i32 {
            counts.entry(name(&c.labels)).or_default().1 += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_killed_while_starting_pods_restarts_each_pod_once() {
    const TEST: &str = "agent_killed_while_starting_pods_restarts_each_pod_once";
    if !is_root() {
        return skip(
            TEST,
            "root (real, or mapped root in a user namespace) for the process runtime",
        );
    }
    // Short paths: unix sockets live under it.
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .unwrap();
    let guard = LeakGuard::new(dir.path());
    let root = dir.path();
    let manifests = root.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let fixture = image::fixtures().join("busybox-oci.tar");
    let load = runp(root, &["image", "load", fixture.to_str().unwrap()]);
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );
    let names: Vec<String> = (0..PODS).map(|i| format!("p{i}")).collect();
    for name in &names {
        std::fs::write(manifests.join(format!("{name}.yaml")), sleeper(name)).unwrap();
    }

    // Killed twice: as soon as a first sandbox is ready (the other pods are in RunPodSandbox),
    // then, restarted, as soon as a first container runs (the rest are in their start).
    type Reached = fn(&(usize, usize)) -> bool;
    let kill_points: [(&str, Reached); 2] = [
        ("a ready sandbox", |&(ready, _)| ready > 0),
        ("a running container", |&(_, running)| running > 0),
    ];
    for (run, (what, reached)) in kill_points.into_iter().enumerate() {
        let agent = start_agent(root, &manifests, run as u32 + 1);
        let cri = connect(root).await;
        let started = Instant::now();
        while !census(&cri).await.values().any(reached) {
            assert!(started.elapsed() < HANG_GUARD, "hang guard: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!("killed at {what}: {:?}", census(&cri).await);
        drop(cri);
        agent.kill9();
    }

    let agent = start_agent(root, &manifests, 3);
    let cri = connect(root).await;
    let want: HashMap<String, (usize, usize)> = names.iter().map(|n| (n.clone(), (1, 1))).collect();
    let started = Instant::now();
    loop {
        let now = census(&cri).await;
        // Never two of anything, at any moment after the restart.
        assert!(
            now.values()
                .all(|&(ready, running)| ready <= 1 && running <= 1),
            "a pod duplicated: {now:?}"
        );
        if now == want {
            break;
        }
        assert!(
            started.elapsed() < HANG_GUARD,
            "hang guard: every pod running once: {now:?}\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The pods go with their manifests, and with them every process and mount.
    for name in &names {
        std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
    }
    let started = Instant::now();
    loop {
        let sandboxes = cri
            .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
            .await
            .unwrap()
            .items;
        if sandboxes.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < HANG_GUARD,
            "hang guard: every sandbox removed: {sandboxes:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(cri);
    agent.stop().await;
    // Containers' processes have their root under `root`; shims and infra name it.
    let started = Instant::now();
    let mut left = processes_under(root, 0);
    while !left.is_empty() && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = processes_under(root, 0);
    }
    assert!(left.is_empty(), "left running: {left:?}");
    let mounts = mounts_under(root);
    assert!(mounts.is_empty(), "left mounted: {mounts:?}");
    drop(guard);
}
