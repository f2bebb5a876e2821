//! Exec and Attach against the real process runtime, through the streaming server
//! (`WithStreaming`: the CRI's URL, then a client-go-like SPDY client): exec with stdin, exit
//! codes, tty execs and resizes; attach to the shim's stdin/stdout (stdin_once, tty containers,
//! after a runtime restart); the error codes. Port-forward and `runp serve`:
//! tests/runtime_port_forward.rs.

#[path = "support/streaming.rs"]
mod streaming;
#[path = "support/runtime.rs"]
mod support;

use runp::cri::streaming::{StreamingServer, WithStreaming};
use runp::cri::{RuntimeService, StreamIo, StreamingRuntime, api};
use std::sync::Arc;
use streaming::{ClientStream, ExecInput, HANG_GUARD, SpdyClient, loopback, spdy_exec};
use support::*;

const V4: &[&str] = &["v4.channel.k8s.io", "v3.channel.k8s.io"];

/// The runtime behind a streaming server, as `runp serve` wires it.
fn with_streaming(env: &Env) -> Arc<WithStreaming> {
    let server = StreamingServer::start(loopback(), env.rt.clone()).expect("streaming server");
    Arc::new(WithStreaming::new(env.rt.clone(), Arc::new(server)))
}

async fn exec_url(cri: &WithStreaming, id: &str, cmd: &[&str], stdin: bool, tty: bool) -> String {
    cri.exec(api::ExecRequest {
        container_id: id.to_string(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty,
        stdin,
        stdout: true,
        stderr: !tty,
    })
    .await
    .expect("exec url")
    .url
}

async fn attach_url(cri: &WithStreaming, id: &str, stdin: bool, tty: bool) -> String {
    cri.attach(api::AttachRequest {
        container_id: id.to_string(),
        stdin,
        tty,
        stdout: true,
        stderr: !tty,
    })
    .await
    .expect("attach url")
    .url
}

/// The exit code in a v4 status (0 for Success).
/// Execs `cmd` without stdin or a terminal over SPDY v4, collecting stdout and stderr.
async fn exec_output(cri: &WithStreaming, id: &str, cmd: &[&str]) -> streaming::ExecOutcome {
    let url = exec_url(cri, id, cmd, false, false).await;
    let output = ExecInput {
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    spdy_exec(&url, V4, output).await
}

fn exit_code(outcome: &streaming::ExecOutcome) -> i64 {
    let status = outcome.status();
    match status["status"].as_str() {
        Some("Success") => 0,
        _ => status["details"]["causes"][0]["message"]
            .as_str()
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("no exit code in {status}")),
    }
}

/// Reads `stream` until its output contains `want`; returns everything read.
async fn read_until(stream: &mut ClientStream, want: &str) -> String {
    let mut all = String::new();
    while !all.contains(want) {
        let chunk = stream.read_exactly(1).await;
        all.push_str(&String::from_utf8_lossy(&chunk));
    }
    all
}

/// An attach session's streams (client-go order: error, stdin, stdout, stderr, resize).
struct Attached {
    client: SpdyClient,
    error: ClientStream,
    stdin: Option<ClientStream>,
    stdout: ClientStream,
    stderr: Option<ClientStream>,
    resize: Option<ClientStream>,
}

async fn attach(url: &str, stdin: bool, tty: bool) -> Attached {
    let mut client = SpdyClient::connect(url, V4).await.expect("upgrade");
    let error = client.typed_stream("error").await;
    let stdin = match stdin {
        true => Some(client.typed_stream("stdin").await),
        false => None,
    };
    let stdout = client.typed_stream("stdout").await;
    let stderr = match tty {
        false => Some(client.typed_stream("stderr").await),
        true => None,
    };
    let resize = match tty {
        true => Some(client.typed_stream("resize").await),
        false => None,
    };
    Attached {
        client,
        error,
        stdin,
        stdout,
        stderr,
        resize,
    }
}

fn stdin_container(name: &str, script: &str, stdin_once: bool, tty: bool) -> api::ContainerConfig {
    let mut config = shell(name, script);
    config.stdin = true;
    config.stdin_once = stdin_once;
    config.tty = tty;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_streams_stdin_and_output_and_reports_exit_codes() {
    let Some(env) = Env::for_test("exec_streams_stdin_and_output_and_reports_exit_codes").await
    else {
        return;
    };
    let cri = with_streaming(&env);
    let pod = env.pod("sexec").await;
    let id = env.run(&pod, shell("target", "exec sleep 1000")).await;

    // `cat` echoes what is sent and ends at the client's EOF.
    let input = b"hello\nworld\n".repeat(5000);
    let url = exec_url(&cri, &id, &["cat"], true, false).await;
    let outcome = spdy_exec(
        &url,
        V4,
        ExecInput {
            stdin: Some(input.clone()),
            stdout: true,
            stderr: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(outcome.stdout.len(), input.len());
    assert!(outcome.stdout == input, "cat changed its input");
    assert_eq!(exit_code(&outcome), 0, "{:?}", outcome.status());

    // Separate stdout and stderr, and the exit code.
    let outcome = exec_output(&cri, &id, &["sh", "-c", "echo out; echo err >&2; exit 3"]).await;
    assert_eq!(outcome.stdout, b"out\n");
    assert_eq!(outcome.stderr, b"err\n");
    assert_eq!(exit_code(&outcome), 3);

    // A signal death is 128+signal; the command runs in the container (its hostname).
    let outcome = exec_output(&cri, &id, &["sh", "-c", "hostname; kill -9 $$"]).await;
    assert_eq!(outcome.stdout, b"sexec-host\n");
    assert_eq!(exit_code(&outcome), 137);

    // A command that does not exist fails the exec (the status says why).
    let outcome = exec_output(&cri, &id, &["/no/such/binary"]).await;
    assert_ne!(outcome.status()["status"], "Success");

    // A client that hangs up mid-exec: the command is killed, not left running.
    let url = exec_url(
        &cri,
        &id,
        &["sh", "-c", "echo started; exec sleep 987"],
        false,
        false,
    )
    .await;
    let mut client = SpdyClient::connect(&url, V4).await.expect("upgrade");
    let error = client.typed_stream("error").await;
    let mut stdout = client.typed_stream("stdout").await;
    let stderr = client.typed_stream("stderr").await;
    read_until(&mut stdout, "started").await;
    let running = |ps: &[u8]| String::from_utf8_lossy(ps).contains("sleep 987");
    assert!(running(&env.exec(&id, &["ps"]).await.stdout));
    drop((client, error, stdout, stderr));
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while running(&env.exec(&id, &["ps"]).await.stdout) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the exec outlived its client"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    env.cleanup().await;
    let zombies = lasting_zombies();
    assert!(zombies.is_empty(), "zombies: {zombies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tty_exec_runs_on_the_containers_terminal_and_follows_resizes() {
    let Some(env) =
        Env::for_test("tty_exec_runs_on_the_containers_terminal_and_follows_resizes").await
    else {
        return;
    };
    let cri = with_streaming(&env);
    let pod = env.pod("stty").await;
    let id = env.run(&pod, shell("target", "exec sleep 1000")).await;

    let url = exec_url(&cri, &id, &["tty"], false, true).await;
    let outcome = spdy_exec(
        &url,
        V4,
        ExecInput {
            stdout: true,
            tty: true,
            ..Default::default()
        },
    )
    .await;
    let text = String::from_utf8_lossy(&outcome.stdout).into_owned();
    assert!(text.starts_with("/dev/pts/"), "{text:?}");
    assert!(text.ends_with("\r\n"), "terminal line discipline: {text:?}");
    assert_eq!(exit_code(&outcome), 0);

    // The resize reaches the terminal (the loop ends once `stty size` says so), and a signal
    // death on a terminal is still 128+signal.
    let script = "until [ \"$(stty size 2>/dev/null)\" = '40 100' ]; do sleep 0.05; done; stty size; kill -15 $$";
    let url = exec_url(&cri, &id, &["sh", "-c", script], false, true).await;
    let outcome = spdy_exec(
        &url,
        V4,
        ExecInput {
            stdout: true,
            tty: true,
            resize: vec![(100, 40)],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(outcome.stdout, b"40 100\r\n");
    assert_eq!(exit_code(&outcome), 143);

    // Interactive: input through the terminal, echoed by it.
    let url = exec_url(&cri, &id, &["sh"], true, true).await;
    let mut client = SpdyClient::connect(&url, V4).await.unwrap();
    let mut error = client.typed_stream("error").await;
    let stdin = client.typed_stream("stdin").await;
    let mut stdout = client.typed_stream("stdout").await;
    let _resize = client.typed_stream("resize").await;
    stdin.write(b"echo $((6*7))x\n");
    read_until(&mut stdout, "42x").await;
    stdin.write(b"exit 4\n");
    stdout.read_to_end().await;
    let status: serde_json::Value = serde_json::from_slice(&error.read_to_end().await).unwrap();
    assert_eq!(status["details"]["causes"][0]["message"], "4", "{status}");
    // Each tty exec's console socket, and libcontainer's link to it, are gone.
    let lc_dir = env.dir.path().join("rt/run/lc").join(&id);
    let left: Vec<String> = std::fs::read_dir(&lc_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("tenant-tty-") || name.starts_with("runp-exec-"))
        .collect();
    assert!(left.is_empty(), "left in {}: {left:?}", lc_dir.display());
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_round_trips_through_the_shim_and_keeps_stdin_open() {
    let Some(env) = Env::for_test("attach_round_trips_through_the_shim_and_keeps_stdin_open").await
    else {
        return;
    };
    let cri = with_streaming(&env);
    let pod = env.pod("sattach").await;
    let id = env
        .run(&pod, stdin_container("cat", "exec cat", false, false))
        .await;

    for word in ["first", "second"] {
        let url = attach_url(&cri, &id, true, false).await;
        let mut a = attach(&url, true, false).await;
        let stdin = a.stdin.take().unwrap();
        stdin.write(format!("{word}\n").as_bytes());
        assert_eq!(
            a.stdout.read_exactly(word.len() + 1).await,
            format!("{word}\n").as_bytes()
        );
        // The client's EOF ends this attach (not stdin_once: the container's stdin stays open).
        stdin.close();
        let status: serde_json::Value =
            serde_json::from_slice(&a.error.read_to_end().await).unwrap();
        assert_eq!(status["status"], "Success", "{status}");
        a.stdout.read_to_end().await;
        a.stderr.take().unwrap().read_to_end().await;
    }
    assert_eq!(
        env.status(&id).await.state,
        api::ContainerState::ContainerRunning as i32
    );
    // The CRI log got the output as well.
    assert_eq!(
        env.log_lines("sattach", "cat", 2).await,
        ["first", "second"]
    );
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_once_closes_the_containers_stdin_when_the_first_attach_ends() {
    let Some(env) =
        Env::for_test("stdin_once_closes_the_containers_stdin_when_the_first_attach_ends").await
    else {
        return;
    };
    let cri = with_streaming(&env);
    let pod = env.pod("sonce").await;
    let id = env
        .run(
            &pod,
            stdin_container("once", "cat; echo cat-ended; exit 7", true, false),
        )
        .await;
    let url = attach_url(&cri, &id, true, false).await;
    let mut a = attach(&url, true, false).await;
    let stdin = a.stdin.take().unwrap();
    stdin.write(b"only\n");
    assert_eq!(a.stdout.read_exactly(5).await, b"only\n");
    stdin.close();
    // cat sees EOF; the attach follows the output to the container's end.
    assert_eq!(a.stdout.read_to_end().await, b"cat-ended\n");
    a.error.read_to_end().await;
    let status = env.wait_exit(&id).await;
    assert_eq!(status.exit_code, 7);
    assert_eq!(
        env.log_lines("sonce", "once", 2).await,
        ["only", "cat-ended"]
    );
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_follows_the_output_of_a_running_container_until_it_stops() {
    let Some(env) =
        Env::for_test("attach_follows_the_output_of_a_running_container_until_it_stops").await
    else {
        return;
    };
    let cri = with_streaming(&env);
    let pod = env.pod("sfollow").await;
    let script = "i=0; while true; do echo tick $i; echo tock $i >&2; i=$((i+1)); sleep 0.1; done";
    let id = env.run(&pod, shell("ticker", script)).await;
    env.log_lines("sfollow", "ticker", 1).await;

    // Output only (no stdin requested, and the container has none).
    let url = attach_url(&cri, &id, false, false).await;
    let mut a = attach(&url, false, false).await;
    let out = read_until(&mut a.stdout, "\ntick").await;
    assert!(out.starts_with("tick "), "{out:?}");
    let mut stderr = a.stderr.take().unwrap();
    let err = read_until(&mut stderr, "\ntock").await;
    assert!(err.starts_with("tock "), "{err:?}");

    // A second runtime on the same root (an agent restart) attaches to the same shim.
    let reopened = runp::runtime::ProcessRuntime::start(options(env.dir.path(), &env.images))
        .await
        .expect("second runtime");
    let (tx, mut rx) = tokio::io::duplex(1 << 16);
    let io = StreamIo {
        stdin: None,
        stdout: Some(Box::new(tx)),
        stderr: None,
        resize: None,
    };
    let second = {
        let reopened = reopened.clone();
        let id = id.clone();
        tokio::spawn(async move { reopened.attach_stream(&id, false, io).await })
    };
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("\ntick") {
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(HANG_GUARD, tokio::io::AsyncReadExt::read(&mut rx, &mut buf))
            .await
            .expect("output in time")
            .unwrap();
        assert!(n > 0, "attach ended early");
        seen.extend_from_slice(&buf[..n]);
    }

    // Stopping the container ends both attaches.
    env.stop(&id, 10).await;
    a.stdout.read_to_end().await;
    a.error.read_to_end().await;
    let result = tokio::time::timeout(HANG_GUARD, second)
        .await
        .expect("ended");
    assert!(result.unwrap().is_ok());
    drop(reopened);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tty_container_attach_echoes_input_and_resizes() {
    let Some(env) = Env::for_test("tty_container_attach_echoes_input_and_resizes").await else {
        return;
    };
    let cri = with_streaming(&env);
    let pod = env.pod("sttyc").await;
    let script = "tty; while read line; do echo \"got $line\"; stty size; done";
    let id = env
        .run(&pod, stdin_container("term", script, false, true))
        .await;
    // The terminal's output is logged as stdout.
    let log = read_log(&env.logs().join("sttyc").join("term.log"), 1).await;
    assert_eq!(log[0].0, "stdout");
    assert!(log[0].2.starts_with("/dev/pts/"), "{log:?}");

    let url = attach_url(&cri, &id, true, true).await;
    let mut a = attach(&url, true, true).await;
    let resize = a.resize.take().unwrap();
    resize.write(br#"{"Width":100,"Height":40}"#);
    let stdin = a.stdin.take().unwrap();
    // The resize and the input travel on different streams: repeat the line until the size
    // printed after it is the new one.
    let mut all = String::new();
    while !all.contains("40 100") {
        stdin.write(b"x\n");
        let chunk = a.stdout.read_exactly(1).await;
        all.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(all.contains("got x"), "{all:?}");
    // stdin's end detaches (a tty container keeps its terminal).
    stdin.close();
    a.stdout.read_to_end().await;
    a.error.read_to_end().await;
    drop(a.client);
    assert_eq!(
        env.status(&id).await.state,
        api::ContainerState::ContainerRunning as i32
    );
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_errors_name_what_is_missing_or_not_running() {
    let Some(env) = Env::for_test("streaming_errors_name_what_is_missing_or_not_running").await
    else {
        return;
    };
    let cri = with_streaming(&env);
    let unknown = "0".repeat(64);
    let no_io = || StreamIo {
        stdin: None,
        stdout: None,
        stderr: None,
        resize: None,
    };
    // Through the CRI (the URL is refused) and through the runtime behind a URL alike.
    let err = cri
        .exec(api::ExecRequest {
            container_id: unknown.clone(),
            cmd: vec!["true".into()],
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    let err = env
        .rt
        .exec_stream(&unknown, vec!["true".into()], false, no_io())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    let err = env
        .rt
        .attach_stream(&unknown, false, no_io())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    let err = env.rt.port_forward_stream(&unknown, 80).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");

    let pod = env.pod("serr").await;
    let created = env.create(&pod, shell("idle", "sleep 1000")).await.unwrap();
    let err = cri
        .attach(api::AttachRequest {
            container_id: created.clone(),
            stdout: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    let err = env
        .rt
        .exec_stream(&created, vec!["true".into()], false, no_io())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    let err = env
        .rt
        .attach_stream(&created, false, no_io())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    // Nothing listens on the port: the dial error says so.
    let err = env.rt.port_forward_stream(&pod.0, 1).await.unwrap_err();
    assert!(err.message().contains("localhost:1"), "{err}");

    env.rt
        .stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .unwrap();
    let err = env.rt.port_forward_stream(&pod.0, 80).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    let err = cri
        .port_forward(api::PortForwardRequest {
            pod_sandbox_id: pod.0.clone(),
            port: vec![80],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    env.cleanup().await;
}
