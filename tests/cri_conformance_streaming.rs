//! CRI conformance through the gRPC socket of `runp serve`: a container's I/O. Exec, Attach
//! and PortForward as critest's streaming specs use them: the URL from the gRPC call, then
//! client-go's SPDY protocol (exec and attach, with and without a TTY, stdin, resize) or the
//! WebSocket one (port forward), against real containers; ExecSync (exit codes, timeout) and
//! logs (log path, exited containers, ReopenContainerLog).

#[path = "support/conformance.rs"]
mod conformance;
#[path = "support/serve.rs"]
mod serve;
#[path = "support/streaming.rs"]
mod streaming;
#[path = "support/runtime.rs"]
mod support;

use conformance::*;
use futures::{SinkExt, StreamExt};
use runp::cri::{RuntimeService, api};
use streaming::{ExecInput, SpdyClient, spdy_exec, ws_connect};
use support::*;
use tokio_tungstenite::tungstenite::Message;
use tonic::Code;

const V4: &[&str] = &["v4.channel.k8s.io"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_conformance_streaming() {
    let Some(s) = Suite::start("cri_conformance_streaming").await else {
        return;
    };
    s.run(vec![
        ("exec", Box::pin(exec(&s))),
        ("attach", Box::pin(attach(&s))),
        ("port_forward", Box::pin(port_forward(&s))),
        ("exec_sync", Box::pin(exec_sync(&s))),
        ("logs", Box::pin(logs(&s))),
    ])
    .await;
}

async fn exec_url(s: &Suite, id: &str, cmd: &[&str], stdin: bool, tty: bool) -> String {
    s.rt()
        .exec(api::ExecRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|c| c.to_string()).collect(),
            tty,
            stdin,
            stdout: true,
            stderr: !tty,
        })
        .await
        .expect("exec url")
        .url
}

/// Exec: stdout and stderr apart with the exit code in the v4 status; stdin reaches the
/// command; with a TTY, one output stream and the client's window size.
async fn exec(s: &Suite) {
    let pod = s.pod(s.pod_config("st-exec")).await;
    let id = s
        .run_container(&pod, container("c", "exec sleep 1000", |_| {}))
        .await;
    let script = ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"];
    let url = exec_url(s, &id, &script, false, false).await;
    let input = ExecInput {
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    let outcome = spdy_exec(&url, V4, input).await;
    assert_eq!(
        (outcome.stdout.as_slice(), outcome.stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..])
    );
    let status = outcome.status();
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(
        status["details"]["causes"],
        serde_json::json!([{"reason": "ExitCode", "message": "3"}])
    );

    let url = exec_url(s, &id, &["cat"], true, false).await;
    let input = ExecInput {
        stdin: Some(b"through stdin\n".to_vec()),
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    let outcome = spdy_exec(&url, V4, input).await;
    assert_eq!(outcome.stdout, b"through stdin\n");
    assert_eq!(outcome.status()["status"], "Success");

    // The line is read after the resize was sent (streams are independent; the resize stream
    // is opened and written first).
    let script = ["/bin/sh", "-c", "read x; stty size; tty"];
    let url = exec_url(s, &id, &script, true, true).await;
    let input = ExecInput {
        stdin: Some(b"go\n".to_vec()),
        stdout: true,
        tty: true,
        resize: vec![(100, 40)],
        ..Default::default()
    };
    let outcome = spdy_exec(&url, V4, input).await;
    let out = String::from_utf8_lossy(&outcome.stdout);
    assert!(out.contains("40 100"), "{out:?}");
    assert!(out.contains("/dev/pts/"), "{out:?}");
    assert!(outcome.stderr.is_empty());
}

/// Attach to a container that reads its stdin, without and with a TTY: what is sent arrives,
/// its output comes back, and the session ends with the container.
async fn attach(s: &Suite) {
    let pod = s.pod(s.pod_config("st-attach")).await;
    let script = "read line; echo got:$line; echo bye >&2";
    let id = s
        .run_container(
            &pod,
            container("c", script, |c| {
                c.stdin = true;
                c.stdin_once = true;
            }),
        )
        .await;
    let url = s
        .rt()
        .attach(api::AttachRequest {
            container_id: id.clone(),
            stdin: true,
            tty: false,
            stdout: true,
            stderr: true,
        })
        .await
        .expect("attach url")
        .url;
    let input = ExecInput {
        stdin: Some(b"ping\n".to_vec()),
        stdout: true,
        stderr: true,
        ..Default::default()
    };
    let outcome = spdy_exec(&url, V4, input).await;
    assert_eq!(outcome.stdout, b"got:ping\n");
    assert_eq!(outcome.stderr, b"bye\n");
    let status = s.wait_exit(&id).await;
    assert_eq!(status.exit_code, 0);

    // With a TTY: one stream, the terminal echoes the input and the output is the container's.
    let script = "read line; echo got:$line; tty";
    let id = s
        .run_container(
            &pod,
            container("tty", script, |c| {
                c.stdin = true;
                c.stdin_once = true;
                c.tty = true;
            }),
        )
        .await;
    let url = s
        .rt()
        .attach(api::AttachRequest {
            container_id: id.clone(),
            stdin: true,
            tty: true,
            stdout: true,
            stderr: false,
        })
        .await
        .expect("attach url")
        .url;
    // As containerd, a TTY attach ends when the client's stdin ends (kubectl attach -it keeps
    // it open): client-go's streams, stdin left open, the output read until the container exits.
    let mut client = SpdyClient::connect(&url, V4)
        .await
        .expect("upgrade to SPDY");
    let _error = client.typed_stream("error").await;
    let stdin = client.typed_stream("stdin").await;
    let mut stdout = client.typed_stream("stdout").await;
    let _resize = client.typed_stream("resize").await;
    stdin.write(b"pong\n");
    let out = stdout.read_to_end().await;
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("got:pong"), "{out:?}");
    assert!(out.contains("/dev/pts/"), "{out:?}");
    assert_eq!(s.wait_exit(&id).await.exit_code, 0);
}

/// PortForward reaches a port of the pod's network namespace (a server in a container).
async fn port_forward(s: &Suite) {
    let pod = s.pod(s.pod_config("st-pf")).await;
    let id = s
        .run_container(
            &pod,
            container("srv", "exec nc -ll -p 8080 -e /bin/cat", |_| {}),
        )
        .await;
    // Listening once netstat shows it (the container is in the pod's network namespace).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !s.sh(&id, "netstat -ltn; true").await.contains(":8080") {
        assert!(tokio::time::Instant::now() < deadline, "nc never listened");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let url = s
        .rt()
        .port_forward(api::PortForwardRequest {
            pod_sandbox_id: pod.0.clone(),
            port: vec![8080],
        })
        .await
        .expect("port forward url")
        .url;
    let (mut ws, chosen) = ws_connect(&format!("{url}?port=8080"), "v4.channel.k8s.io")
        .await
        .expect("websocket");
    assert_eq!(chosen.as_deref(), Some("v4.channel.k8s.io"));
    ws.send(Message::binary(b"\x00echo me\n".to_vec()))
        .await
        .unwrap();
    let mut data = Vec::new();
    // Channel 0 (data) starts with the port, little-endian, then the echoed bytes.
    while data.len() < 2 + 8 {
        let next = tokio::time::timeout(std::time::Duration::from_secs(20), ws.next())
            .await
            .expect("an answer in time");
        match next {
            Some(Ok(Message::Binary(frame))) if frame.first() == Some(&0) => {
                data.extend_from_slice(&frame[1..])
            }
            Some(Ok(Message::Binary(_))) => {}
            other => panic!("port forward ended: {other:?} after {data:?}"),
        }
    }
    assert_eq!(&data[..2], &8080u16.to_le_bytes());
    assert_eq!(&data[2..], b"echo me\n");
}

/// ExecSync: output and exit codes as given; a timeout fails the call and kills the process.
async fn exec_sync(s: &Suite) {
    let pod = s.pod(s.pod_config("lc-exec")).await;
    let id = s
        .run_container(&pod, container("c", "exec sleep 1000", |_| {}))
        .await;
    let r = s.exec(&id, &["echo", "hello"]).await;
    assert_eq!((r.stdout.as_slice(), r.exit_code), (&b"hello\n"[..], 0));
    let r = s
        .exec(&id, &["/bin/sh", "-c", "echo oops >&2; exit 7"])
        .await;
    assert_eq!((r.stderr.as_slice(), r.exit_code), (&b"oops\n"[..], 7));
    let err = s
        .rt()
        .exec_sync(api::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sleep".into(), "717".into()],
            timeout: 1,
        })
        .await
        .expect_err("the exec times out");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    let ps = s.sh(&id, "ps -o args").await;
    assert!(
        !ps.contains("sleep 717"),
        "the timed-out process lives on:\n{ps}"
    );
    let missing = s
        .rt()
        .exec_sync(api::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["/no/such/binary".into()],
            timeout: 5,
        })
        .await;
    match missing {
        Ok(r) => assert_ne!(r.exit_code, 0, "{r:?}"),
        Err(e) => assert_ne!(e.code(), Code::Ok),
    }
}

/// Logs: CRI format at log_directory/log_path, kept after exit; ReopenContainerLog starts a new
/// file for a running container and is refused for a stopped one.
async fn logs(s: &Suite) {
    let pod = s.pod(s.pod_config("lc-logs")).await;
    let dir = std::path::PathBuf::from(&pod.1.log_directory);
    let id = s
        .run_container(&pod, container("once", "echo out; echo err >&2", |_| {}))
        .await;
    s.wait_exit(&id).await;
    let mut lines = read_log(&dir.join("once.log"), 2).await;
    lines.sort();
    assert_eq!(
        lines,
        vec![
            ("stderr".into(), "F".into(), "err".into()),
            ("stdout".into(), "F".into(), "out".into())
        ]
    );

    let script = "i=0; while true; do echo line$i; i=$((i+1)); sleep 0.1; done";
    let id = s
        .run_container(&pod, container("loop", script, |_| {}))
        .await;
    let log = dir.join("loop.log");
    read_log(&log, 1).await;
    let rotated = dir.join("loop.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    s.rt()
        .reopen_container_log(api::ReopenContainerLogRequest {
            container_id: id.clone(),
        })
        .await
        .expect("reopen");
    let fresh = read_log(&log, 1).await;
    assert!(!fresh.is_empty(), "nothing written to the reopened log");
    assert!(fresh[0].2.starts_with("line"), "{fresh:?}");
    s.rt()
        .stop_container(api::StopContainerRequest {
            container_id: id.clone(),
            timeout: 0,
        })
        .await
        .unwrap();
    let err = s
        .rt()
        .reopen_container_log(api::ReopenContainerLogRequest {
            container_id: id.clone(),
        })
        .await
        .expect_err("reopen of a stopped container");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
}
