//! `runp agent` end to end against a CRI server on a unix socket (the fake runtime served with
//! runp's gRPC server), then `runp pods`, `runp ps`, `runp logs`, `runp exec`. Real time; the
//! waits are hang guards only.

use runp::cri::endpoint::CriEndpoint;
use runp::cri::server::CriListener;
use runp::cri::{ImageService, RuntimeService};
use runp::kubelet::clock::SystemClock;
use runp::kubelet::fake::FakeRuntime;
use runp::kubelet::status::manager::read_status_file;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const HANG_GUARD: Duration = Duration::from_secs(60);

fn runp(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < HANG_GUARD,
            "hang guard: waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

const WEB: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: app
    image: "busybox:1.36"
"#;

const JOB: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: other}
spec:
  containers:
  - name: side
    image: "busybox:1.36"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_cli_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::write(manifests.join("web.yaml"), WEB).unwrap();
    std::fs::write(manifests.join("other.yaml"), JOB).unwrap();
    std::fs::write(manifests.join("broken.yaml"), "kind: Pod\nmetadata: [").unwrap();

    let fake = FakeRuntime::new(Arc::new(SystemClock));
    fake.add_image("busybox:1.36", 1 << 20);
    let socket = dir.path().join("cri.sock");
    let listener = CriListener::bind(&CriEndpoint::Unix(socket.clone()))
        .await
        .unwrap();
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(listener.serve(
        fake.clone() as Arc<dyn RuntimeService>,
        fake.clone() as Arc<dyn ImageService>,
        async {
            let _ = server_stopped.await;
        },
    ));

    // The settings come from a configuration file (kubelet's staticPodPath), the runtime from
    // a flag that overrides the file's.
    let endpoint = format!("unix://{}", socket.display());
    let config = dir.path().join("agent.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: runp.io/v1alpha1\nkind: AgentConfiguration\nstaticPodPath: {}\n\
             runtime: process\nruntimeEndpoint: {endpoint}\n",
            manifests.display()
        ),
    )
    .unwrap();
    let mut agent = Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(&root)
        .args(["agent", "--config"])
        .arg(&config)
        .args(["--runtime", "remote"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // The health check asks the CRI socket; a socket nobody serves is unhealthy.
    let health = runp(&root, &["health", "--endpoint", &endpoint]);
    assert!(health.status.success(), "{}", stdout(&health));
    assert!(
        stdout(&health).starts_with("healthy"),
        "{}",
        stdout(&health)
    );
    let missing = format!("unix://{}", dir.path().join("none.sock").display());
    let health = runp(&root, &["health", "--endpoint", &missing, "--timeout", "1"]);
    assert_eq!(health.status.code(), Some(1));
    assert!(
        stdout(&health).starts_with("unhealthy"),
        "{}",
        stdout(&health)
    );

    wait_for("both pods running", || {
        let out = stdout(&runp(&root, &["pods"]));
        out.lines().filter(|l| l.contains("Running")).count() == 2
    })
    .await;
    let table = stdout(&runp(&root, &["pods"]));
    assert!(table.starts_with("NAMESPACE"), "{table}");
    let web_line = table.lines().find(|l| l.contains(" web ")).unwrap();
    assert!(web_line.contains("1/1"), "{web_line}");
    assert!(web_line.contains("127.0.0.1"), "{web_line}");

    let yaml = stdout(&runp(&root, &["pods", "-o", "yaml", "web"]));
    assert!(yaml.contains("phase: Running"), "{yaml}");
    let ps = stdout(&runp(&root, &["ps"]));
    assert!(
        ps.contains("default/web") && ps.contains("app") && ps.contains("Running"),
        "{ps}"
    );

    // Logs: the runtime writes CRI lines; `runp logs` prints the plain output.
    let status = read_status_file(&root.join("var/status/default_web.yaml")).unwrap();
    let uid = status.metadata.uid.clone().unwrap();
    let log_dir = root.join(format!("var/log/pods/default_web_{uid}/app"));
    assert!(log_dir.is_dir(), "the agent creates the container log dir");
    std::fs::write(
        log_dir.join("0.log"),
        "2024-01-01T00:00:00Z stdout P hel\n2024-01-01T00:00:00Z stdout F lo\n2024-01-01T00:00:01Z stderr F world\n",
    )
    .unwrap();
    let logs = runp(&root, &["logs", "web"]);
    assert_eq!(stdout(&logs), "hello\nworld\n");

    // Following survives a rotation (rename + a new live file).
    let mut follow = Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(&root)
        .args(["logs", "-f", "web"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    let follow_out = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(follow_out).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let next_line = || {
        lines_rx
            .recv_timeout(HANG_GUARD)
            .expect("hang guard: follow output")
    };
    assert_eq!(next_line(), "hello");
    assert_eq!(next_line(), "world");
    {
        use std::io::Write;
        let mut live = std::fs::OpenOptions::new()
            .append(true)
            .open(log_dir.join("0.log"))
            .unwrap();
        writeln!(live, "2024-01-01T00:00:02Z stdout F before rotation").unwrap();
    }
    assert_eq!(next_line(), "before rotation");
    std::fs::rename(log_dir.join("0.log"), log_dir.join("0.log.20240101-000003")).unwrap();
    std::fs::write(
        log_dir.join("0.log"),
        "2024-01-01T00:00:04Z stdout F after rotation\n",
    )
    .unwrap();
    assert_eq!(next_line(), "after rotation");
    follow.kill().unwrap();
    let _ = follow.wait();

    // Exec through the CRI endpoint.
    let exec = runp(
        &root,
        &["exec", "web", "--runtime-endpoint", &endpoint, "--", "true"],
    );
    assert!(
        exec.status.success(),
        "{}",
        String::from_utf8_lossy(&exec.stderr)
    );
    fake.set_exec_exit_code("app", 3);
    let exec = runp(
        &root,
        &[
            "exec",
            "web",
            "--runtime-endpoint",
            &endpoint,
            "--",
            "false",
        ],
    );
    assert_eq!(exec.status.code(), Some(3));
    assert!(fake.calls().iter().any(|c| c.ends_with(" false")));

    // Removing a manifest terminates its pod; the other keeps running.
    std::fs::remove_file(manifests.join("other.yaml")).unwrap();
    wait_for("other removed", || fake.count("side") == 0).await;
    wait_for("other's status removed", || {
        !root.join("var/status/default_other.yaml").exists()
    })
    .await;
    let running = fake.running("app");
    assert_eq!(running.len(), 1);

    // Stopping the agent leaves pods running.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = agent.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < HANG_GUARD, "agent did not stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(agent.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "agent exit {status}: {stderr}");
    assert!(
        stderr.contains("broken.yaml"),
        "manifest problems are reported: {stderr}"
    );
    assert_eq!(fake.running("app"), running, "pods survive the agent");
    let _ = stop_server.send(());
    let _ = server.await;
}

#[test]
fn the_default_configuration_and_a_broken_one() {
    let dir = tempfile::tempdir().unwrap();
    let default = runp(dir.path(), &["config", "default"]);
    assert!(default.status.success());
    let text = stdout(&default);
    assert!(
        text.contains("maxPods: 110") && text.contains("staticPodPath"),
        "{text}"
    );
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, format!("{text}maxPodz: 3\n")).unwrap();
    let out = runp(
        dir.path(),
        &[
            "agent",
            "--config",
            broken.to_str().unwrap(),
            "--manifests",
            "/nonexistent",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let line = text.lines().count() + 1;
    assert!(
        stderr.contains("maxPodz") && stderr.contains(&format!("line {line}")),
        "{stderr}"
    );
    assert!(stderr.contains("broken.yaml"), "{stderr}");
}

#[test]
fn completions_man_page_and_service_unit() {
    let dir = tempfile::tempdir().unwrap();
    for (shell, marker) in [
        ("bash", "complete"),
        ("zsh", "#compdef runp"),
        ("fish", "complete -c runp"),
    ] {
        let out = runp(dir.path(), &["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let text = stdout(&out);
        assert!(
            text.contains(marker) && text.contains("agent"),
            "{shell}: {text}"
        );
    }
    let man = stdout(&runp(dir.path(), &["man"]));
    assert!(man.starts_with(".ie") || man.contains(".TH runp"), "{man}");
    assert!(man.contains("agent") && man.contains("serve"), "{man}");
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/packaging/runp.service"),
    )
    .unwrap();
    for line in [
        "Delegate=yes",
        "KillMode=process",
        "Restart=on-failure",
        "ExecStart=/usr/local/bin/runp --root /var/lib/runp agent --runtime=process --config /etc/runp/agent.yaml",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line}");
    }
}
