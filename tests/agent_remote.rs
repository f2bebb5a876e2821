//! The binaries end to end: `runp serve` (the process runtime over the CRI socket) with the
//! busybox fixture loaded by `runp image load`, and `runp agent --runtime=remote` on a manifest
//! directory; then `runp pods`/`ps`/`logs`/`exec`, a manifest change, a removal, and an agent
//! restart that adopts the running pod. Real time; every wait is a hang guard only.

#[path = "support/daemon.rs"]
mod daemon;
#[path = "support/image.rs"]
mod image;
#[path = "support/runtime.rs"]
mod runtime;

use daemon::{Daemon, HANG_GUARD, runp, stdout};
use runp::cri::client::{RemoteOptions, RemoteRuntime};
use runp::cri::endpoint::CriEndpoint;
use runp::cri::{RuntimeService, api};
use runp::kubelet::labels;
use runtime::{LeakGuard, is_root, skip};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `runp ARGS` with `input` on its stdin.
fn runp_with_stdin(root: &Path, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// `runp ARGS` on a fresh terminal of `rows` x `cols`: what it printed there, and its exit code.
fn runp_on_terminal(root: &Path, args: &[&str], rows: u16, cols: u16) -> (String, Option<i32>) {
    use std::io::Read;
    let size = nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).unwrap();
    let terminal = || Stdio::from(pty.slave.try_clone().unwrap());
    let mut child = Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(terminal())
        .stdout(terminal())
        .stderr(terminal())
        .spawn()
        .unwrap();
    drop(pty.slave);
    let code = child.wait().unwrap().code();
    // Everything written is in the master's buffer; EIO once it is drained (no slave left).
    let mut master = std::fs::File::from(pty.master);
    let mut printed = Vec::new();
    let _ = master.read_to_end(&mut printed);
    (String::from_utf8_lossy(&printed).into_owned(), code)
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < HANG_GUARD, "hang guard: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pod; `version` goes into its env, so changing it changes the container spec. SIGTERM
/// ends it at once (the shell traps it).
fn app_pod(name: &str, version: u32) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: main
    image: busybox
    imagePullPolicy: IfNotPresent
    env:
    - {{name: VERSION, value: "{version}"}}
    - name: POD_NAME
      valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
    command: [sh, -c]
    args:
    - |
      echo "hello from $POD_NAME v$VERSION"
      trap 'exit 0' TERM
      while true; do sleep 0.1; done
"#
    )
}

/// Containers of pod `name` in the runtime: (id, state, pod sandbox id), oldest first.
async fn containers(cri: &RemoteRuntime, name: &str) -> Vec<api::Container> {
    let mut found = cri
        .list_containers(api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                label_selector: HashMap::from([(labels::POD_NAME.to_string(), name.to_string())]),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .containers;
    found.sort_by_key(|c| c.created_at);
    found
}

fn running(containers: &[api::Container]) -> Vec<&api::Container> {
    containers
        .iter()
        .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
        .collect()
}

async fn sandboxes(cri: &RemoteRuntime) -> Vec<api::PodSandbox> {
    cri.list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .items
}

/// Blocks (polling) until `check` of the runtime's containers of `pod` holds.
async fn wait_containers(
    cri: &RemoteRuntime,
    pod: &str,
    what: &str,
    check: impl Fn(&[api::Container]) -> bool,
) -> Vec<api::Container> {
    let started = Instant::now();
    loop {
        let found = containers(cri, pod).await;
        if check(&found) {
            return found;
        }
        assert!(
            started.elapsed() < HANG_GUARD,
            "hang guard: {what}: {found:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pod_line(root: &Path, name: &str) -> Option<String> {
    stdout(&runp(root, &["pods"]))
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .map(str::to_string)
}

fn restart_count(root: &Path, pod: &str) -> i32 {
    let path = root.join(format!("var/status/default_{pod}.yaml"));
    let pod = runp::kubelet::status::manager::read_status_file(&path).unwrap();
    pod.status.unwrap().container_statuses.unwrap()[0].restart_count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_over_runp_serve_end_to_end() {
    if !is_root() {
        skip(
            "agent_over_runp_serve_end_to_end",
            "root (real, or mapped root in a user namespace) for the process runtime",
        );
        return;
    }
    let fixtures = image::fixtures();
    // Short paths: unix sockets live under it.
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .unwrap();
    let guard = LeakGuard::new(dir.path());
    let base = dir.path();
    let agent_root = base.join("agent");
    let manifests = base.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let socket = base.join("cri.sock");
    let endpoint = format!("unix://{}", socket.display());

    let load = runp(
        base,
        &[
            "image",
            "load",
            fixtures.join("busybox-oci.tar").to_str().unwrap(),
        ],
    );
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );
    let ipam_dir = Path::new(runtime::TEST_NET_DIR)
        .join("ipam")
        .display()
        .to_string();
    let serve = Daemon::spawn(
        "runp serve",
        base,
        &[
            "serve",
            "--listen",
            &endpoint,
            "--node-ip",
            "127.0.0.1",
            // The shared test network (bridge, CIDR, leases) that the guard holds a lease on.
            "--pod-bridge",
            runtime::TEST_BRIDGE,
            "--pod-cidr",
            runtime::TEST_POD_CIDR,
            "--cni-data-dir",
            &ipam_dir,
        ],
        base.join("serve.log"),
    );
    let cri = RemoteRuntime::connect(
        &endpoint.parse::<CriEndpoint>().unwrap(),
        RemoteOptions {
            connect_timeout: HANG_GUARD,
            ..RemoteOptions::default()
        },
    )
    .await
    .expect("runp serve answers on its socket");

    std::fs::write(manifests.join("app.yaml"), app_pod("app", 1)).unwrap();
    std::fs::write(manifests.join("extra.yaml"), app_pod("extra", 1)).unwrap();
    let agent_args = [
        "agent",
        "--runtime",
        "remote",
        "--runtime-endpoint",
        &endpoint,
        "--manifests",
        manifests.to_str().unwrap(),
    ];
    let agent = Daemon::spawn(
        "runp agent",
        &agent_root,
        &agent_args,
        base.join("agent.log"),
    );

    // Both pods run: `runp pods` and `runp ps` (from the agent's status files).
    wait_for("both pods Running 1/1", || {
        ["app", "extra"].iter().all(|name| {
            pod_line(&agent_root, name).is_some_and(|l| l.contains("Running") && l.contains("1/1"))
        })
    })
    .await;
    let first = running(&containers(&cri, "app").await)
        .first()
        .map(|c| (*c).clone())
        .expect("app's container runs in runp serve");
    let ps = stdout(&runp(&agent_root, &["ps"]));
    let line = ps
        .lines()
        .find(|l| l.starts_with("default/app "))
        .expect(&ps);
    assert!(line.contains("main") && line.contains("Running"), "{ps}");
    assert!(
        line.contains(&first.id[..12]),
        "ps shows the runtime's container id: {ps}"
    );

    // Logs the runtime wrote, read by `runp logs`.
    wait_for("app logged its greeting", || {
        stdout(&runp(&agent_root, &["logs", "app"])).contains("hello from app v1")
    })
    .await;

    // Exec through the socket of runp serve; the exit code is passed on.
    let exec = runp(
        &agent_root,
        &[
            "exec",
            "app",
            "--runtime-endpoint",
            &endpoint,
            "--",
            "sh",
            "-c",
            "echo version $VERSION; exit 3",
        ],
    );
    assert_eq!(stdout(&exec), "version 1\n");
    assert_eq!(exec.status.code(), Some(3));

    // An interactive exec (-i) over the streaming URL: stdin goes in, its end closes the
    // command's stdin, stdout and stderr stay apart, the exit code is passed on.
    let exec = runp_with_stdin(
        &agent_root,
        &[
            "exec",
            "-i",
            "app",
            "--runtime-endpoint",
            &endpoint,
            "--",
            "sh",
            "-c",
            "cat; echo to-stderr >&2; exit 4",
        ],
        b"piped input\n",
    );
    let stderr = String::from_utf8_lossy(&exec.stderr);
    assert_eq!(stdout(&exec), "piped input\n", "{stderr}");
    assert!(stderr.contains("to-stderr"), "{stderr}");
    assert_eq!(exec.status.code(), Some(4), "{stderr}");

    // With -t the command runs on the container's terminal, sized as the caller's.
    let (printed, code) = runp_on_terminal(
        &agent_root,
        &[
            "exec",
            "-t",
            "app",
            "--runtime-endpoint",
            &endpoint,
            "--",
            "sh",
            "-c",
            // The first resize comes just after the start, as kubectl's does.
            "tty; for i in $(seq 50); do [ \"$(stty size)\" = \"33 111\" ] && break; sleep 0.1; done; stty size; exit 5",
        ],
        33,
        111,
    );
    assert!(printed.contains("/dev/pts/"), "{printed:?}");
    assert!(printed.contains("33 111"), "{printed:?}");
    assert_eq!(code, Some(5), "{printed:?}");

    // A changed spec replaces the container in the same sandbox.
    std::fs::write(manifests.join("app.yaml"), app_pod("app", 2)).unwrap();
    let after = wait_containers(&cri, "app", "a new app container runs", |all| {
        let live = running(all);
        live.len() == 1 && live[0].id != first.id
    })
    .await;
    let second = running(&after)[0].clone();
    assert_eq!(second.pod_sandbox_id, first.pod_sandbox_id, "same sandbox");
    assert!(
        after
            .iter()
            .all(|c| c.id == second.id || c.state == api::ContainerState::ContainerExited as i32),
        "the old container stopped: {after:#?}"
    );
    // `runp exec` finds the container in the agent's status file: wait until it names the new
    // one (the runtime runs it before the agent's next status write).
    wait_for("status shows the new container", || {
        stdout(&runp(&agent_root, &["ps"])).contains(&second.id[..12])
    })
    .await;
    let exec = runp(
        &agent_root,
        &[
            "exec",
            "app",
            "--runtime-endpoint",
            &endpoint,
            "--",
            "sh",
            "-c",
            "echo $VERSION",
        ],
    );
    assert_eq!(stdout(&exec), "2\n");

    // Removing a manifest stops its pod and removes it from the runtime.
    std::fs::remove_file(manifests.join("extra.yaml")).unwrap();
    wait_for("extra gone from runp pods", || {
        pod_line(&agent_root, "extra").is_none()
    })
    .await;
    wait_containers(&cri, "extra", "extra's containers removed", |all| {
        all.is_empty()
    })
    .await;
    assert!(
        sandboxes(&cri)
            .await
            .iter()
            .all(|s| s.metadata.as_ref().unwrap().name != "extra"),
        "extra's sandbox removed"
    );

    // Restarting the agent adopts the running pod: same container, same restartCount.
    let restarts_before = restart_count(&agent_root, "app");
    agent.stop().await;
    let status_file = agent_root.join("var/status/default_app.yaml");
    let written = std::fs::metadata(&status_file).unwrap().modified().unwrap();
    assert_eq!(
        running(&containers(&cri, "app").await)
            .iter()
            .map(|c| c.id.clone())
            .collect::<Vec<_>>(),
        vec![second.id.clone()],
        "the pod runs on without the agent"
    );
    let agent = Daemon::spawn(
        "runp agent",
        &agent_root,
        &agent_args,
        base.join("agent2.log"),
    );
    wait_for("the new agent synced the pod", || {
        std::fs::metadata(&status_file)
            .and_then(|m| m.modified())
            .is_ok_and(|m| m > written)
            && pod_line(&agent_root, "app").is_some_and(|l| l.contains("Running"))
    })
    .await;
    let adopted = containers(&cri, "app").await;
    let live = running(&adopted);
    assert_eq!(live.len(), 1, "{adopted:#?}");
    assert_eq!(live[0].id, second.id, "adopted, not restarted");
    assert_eq!(live[0].created_at, second.created_at);
    assert_eq!(restart_count(&agent_root, "app"), restarts_before);
    let status = cri
        .container_status(api::ContainerStatusRequest {
            container_id: second.id.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(status.finished_at, 0, "never stopped");
    let log = agent.log();
    assert!(
        !log.contains("started container") && !log.contains("killing container"),
        "the new agent neither started nor killed a container:\n{log}"
    );

    // Clean up through the agent: removing the manifest stops the pod.
    std::fs::remove_file(manifests.join("app.yaml")).unwrap();
    let started = Instant::now();
    while !sandboxes(&cri).await.is_empty() {
        assert!(started.elapsed() < HANG_GUARD, "hang guard: pods removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    agent.stop().await;
    serve.stop().await;
    drop(guard);
}
