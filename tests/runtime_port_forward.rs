//! PortForward against the real process runtime (into a pod's network namespace, and a
//! host-network pod's), and the whole streaming path through `runp serve`: gRPC Exec, the URL
//! it answers, SPDY.

#[path = "support/streaming.rs"]
mod streaming;
#[path = "support/runtime.rs"]
mod support;

use runp::cri::streaming::spdy::Headers;
use runp::cri::streaming::{StreamingServer, WithStreaming};
use runp::cri::{RuntimeService, api};
use std::sync::Arc;
use std::time::Duration;
use streaming::{ExecInput, HANG_GUARD, SpdyClient, loopback, spdy_exec};
use support::*;

const V4: &[&str] = &["v4.channel.k8s.io", "v3.channel.k8s.io"];

/// The runtime behind a streaming server, as `runp serve` wires it.
fn with_streaming(env: &Env) -> Arc<WithStreaming> {
    let server = StreamingServer::start(loopback(), env.rt.clone()).expect("streaming server");
    Arc::new(WithStreaming::new(env.rt.clone(), Arc::new(server)))
}

/// Serves `body` with busybox httpd on 127.0.0.1:`port` in a container of `pod`; waits until
/// it answers there.
async fn httpd(env: &Env, pod: &(String, api::PodSandboxConfig), port: u16, body: &str) {
    let script = format!(
        "mkdir -p /www && echo {body} > /www/index.html && exec httpd -f -p 127.0.0.1:{port} -h /www"
    );
    let id = env.run(pod, shell("httpd", &script)).await;
    let probe = format!("wget -q -O - http://127.0.0.1:{port}/");
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while env.exec(&id, &["sh", "-c", &probe]).await.exit_code != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "httpd did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An HTTP GET through a port-forward session.
async fn forwarded_get(cri: &WithStreaming, pod_id: &str, port: u16) -> String {
    let url = cri
        .port_forward(api::PortForwardRequest {
            pod_sandbox_id: pod_id.to_string(),
            port: vec![i32::from(port)],
        })
        .await
        .expect("port-forward url")
        .url;
    let mut client = SpdyClient::connect(&url, &["portforward.k8s.io"])
        .await
        .unwrap();
    let headers = |kind: &str| {
        Headers::new()
            .with("streamType", kind)
            .with("port", &port.to_string())
            .with("requestID", "0")
    };
    let mut error = client.create_stream(headers("error"), true).await;
    let mut data = client.create_stream(headers("data"), true).await;
    data.write(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let answer = String::from_utf8_lossy(&data.read_to_end().await).into_owned();
    assert_eq!(error.read_to_end().await, b"");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_reaches_the_pods_loopback() {
    let Some(env) = Env::for_test("port_forward_reaches_the_pods_loopback").await else {
        return;
    };
    let cri = with_streaming(&env);
    // Nothing listens on this port on the host: only the pod's loopback has it.
    let pod = env.pod("spf").await;
    httpd(&env, &pod, 8080, "hello-from-the-pod").await;
    let answer = forwarded_get(&cri, &pod.0, 8080).await;
    assert!(
        answer.starts_with("HTTP/1.") && answer.contains(" 200 OK"),
        "{answer}"
    );
    assert!(answer.ends_with("hello-from-the-pod\n"), "{answer}");

    // A host-network pod's loopback is the host's: a port free here.
    let mut config = pod_config("spfhost", &env.logs());
    config.linux = Some(api::LinuxPodSandboxConfig {
        security_context: Some(api::LinuxSandboxSecurityContext {
            namespace_options: Some(api::NamespaceOption {
                network: api::NamespaceMode::Node as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let host_pod_id = env
        .rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host_pod = (host_pod_id, config);
    httpd(&env, &host_pod, port, "hello-from-the-host-pod").await;
    let answer = forwarded_get(&cri, &host_pod.0, port).await;
    assert!(answer.ends_with("hello-from-the-host-pod\n"), "{answer}");
    env.cleanup().await;
}

/// `runp serve`, killed (SIGTERM, then reaped by the test's reaper) when dropped.
struct Served {
    pid: i32,
}

impl Drop for Served {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.pid);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let reaper = reaper();
        let waited = self.pid;
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    if tokio::time::timeout(HANG_GUARD, reaper.wait(waited))
                        .await
                        .is_err()
                    {
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                    }
                })
        })
        .join();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runp_serve_answers_exec_with_a_streaming_url() {
    if !is_root() {
        skip(
            "runp_serve_answers_exec_with_a_streaming_url",
            "root (real or mapped)",
        );
        return;
    }
    // Fixtures are built (and the reaper started) before anything is spawned.
    let _ = reaper();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .unwrap();
    let root = dir.path().join("root");
    // The leak guard reads the runtime's records under <dir>/rt.
    std::fs::create_dir_all(root.join("runtime")).unwrap();
    std::os::unix::fs::symlink(root.join("runtime"), dir.path().join("rt")).unwrap();
    let _guard = LeakGuard::new(dir.path());
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rootfs-fixtures/build");
    runp::image::ImageStore::open(root.join("images"))
        .unwrap()
        .import(&fixtures.join("busybox-oci"))
        .unwrap();
    let socket = dir.path().join("cri.sock");
    let serve_log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    // Reaped by the test process's reaper (see `Served`), never by `Child::wait`.
    #[allow(clippy::zombie_processes)]
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(&root)
        .arg("serve")
        .arg("--listen")
        .arg(format!("unix://{}", socket.display()))
        .args(["--network", "loopback", "--streaming-addr", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stdout(serve_log.try_clone().unwrap())
        .stderr(serve_log)
        .spawn()
        .expect("start runp serve");
    let _served = Served {
        pid: child.id() as i32,
    };
    let endpoint: runp::cri::endpoint::CriEndpoint =
        format!("unix://{}", socket.display()).parse().unwrap();
    let cri = runp::cri::client::RemoteRuntime::connect(&endpoint, Default::default())
        .await
        .unwrap_or_else(|e| {
            let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
            panic!("connect to runp serve: {e}\n{log}")
        });
    let config = pod_config("served", &dir.path().join("logs"));
    let pod_id = cri
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let id = cri
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: pod_id.clone(),
            config: Some(shell("c", "exec sleep 1000")),
            sandbox_config: Some(config),
        })
        .await
        .unwrap()
        .container_id;
    cri.start_container(api::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();

    // gRPC Exec -> a loopback URL -> SPDY.
    let url = cri
        .exec(api::ExecRequest {
            container_id: id.clone(),
            cmd: vec!["sh".into(), "-c".into(), "cat; hostname".into()],
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        })
        .await
        .expect("Exec over gRPC")
        .url;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let outcome = spdy_exec(
        &url,
        V4,
        ExecInput {
            stdin: Some(b"through serve\n".to_vec()),
            stdout: true,
            stderr: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(outcome.stdout, b"through serve\nserved-host\n");
    assert_eq!(
        outcome.status()["status"],
        "Success",
        "{:?}",
        outcome.status()
    );
    cri.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: pod_id,
    })
    .await
    .unwrap();
}
