//! The streaming server over SPDY/3.1 with a client that behaves like client-go's
//! (kubectl/crictl exec, attach, port-forward).

#[path = "support/streaming.rs"]
mod support;

use runp::cri::api;
use runp::cri::streaming::spdy::{Frame, FrameDecoder, HeaderDecompressor, Headers};
use runp::cri::streaming::{StreamingConfig, StreamingServer};
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::*;

fn server() -> (StreamingServer, std::sync::Arc<TestRuntime>) {
    start_server(StreamingConfig::default())
}

const V4: &[&str] = &[
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

#[tokio::test]
async fn exec_separates_stdout_and_stderr_and_reports_the_exit_code_as_a_v4_status() {
    let (server, runtime) = server();
    let url = server
        .exec_url(&exec_request(
            &["both", "out\n", "err\n", "3"],
            false,
            true,
            true,
            false,
        ))
        .unwrap();
    assert!(
        url.starts_with(&format!("http://{}/exec/", server.local_addr())),
        "{url}"
    );
    let outcome = spdy_exec(
        &url,
        V4,
        ExecInput {
            stdout: true,
            stderr: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(outcome.stdout, b"out\n");
    assert_eq!(outcome.stderr, b"err\n");
    let status = outcome.status();
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(
        status["details"]["causes"],
        serde_json::json!([{"reason": "ExitCode", "message": "3"}])
    );
    assert_eq!(
        status["message"],
        "command terminated with non-zero exit code: error executing command [both out\n err\n 3], exit code 3"
    );
    let seen = runtime.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].op, seen[0].target.as_str()), ("exec", "ctr-1"));
    assert!(seen[0].stdout && seen[0].stderr && !seen[0].stdin && !seen[0].resize);
}

#[tokio::test]
async fn exec_success_is_a_success_status_on_v4_and_silence_on_older_protocols() {
    let (server, _) = server();
    let request = exec_request(&["echo", "hi"], false, true, false, false);
    let v4 = spdy_exec(&server.exec_url(&request).unwrap(), V4, out_only()).await;
    assert_eq!(v4.stdout, b"hi\n");
    assert_eq!(
        v4.status(),
        serde_json::json!({"metadata": {}, "status": "Success"})
    );
    for protocol in ["v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"] {
        let url = server.exec_url(&request).unwrap();
        let old = spdy_exec(&url, &[protocol], out_only()).await;
        assert_eq!(old.stdout, b"hi\n", "{protocol}");
        assert!(old.error.is_empty(), "{protocol}: {:?}", old.error);
        let failing = exec_request(&["exit", "7"], false, true, false, false);
        let url = server.exec_url(&failing).unwrap();
        let old = spdy_exec(&url, &[protocol], out_only()).await;
        assert_eq!(
            String::from_utf8(old.error).unwrap(),
            "command terminated with non-zero exit code: error executing command [exit 7], exit code 7",
            "{protocol}"
        );
    }
}

fn out_only() -> ExecInput {
    ExecInput {
        stdout: true,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_runtime_error_is_an_internal_error_status() {
    let (server, _) = server();
    let url = server
        .exec_url(&exec_request(&["nonesuch"], false, true, false, false))
        .unwrap();
    let status = spdy_exec(&url, V4, out_only()).await.status();
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(status["code"], 500);
    let message = status["message"].as_str().unwrap();
    assert!(message.contains("no such command: nonesuch"), "{message}");
}

#[tokio::test]
async fn stdin_is_forwarded_and_its_close_reaches_the_command() {
    let (server, _) = server();
    let url = server
        .exec_url(&exec_request(&["cat"], true, true, false, false))
        .unwrap();
    let input: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
    let outcome = spdy_exec(
        &url,
        V4,
        ExecInput {
            stdin: Some(input.clone()),
            stdout: true,
            ..Default::default()
        },
    )
    .await;
    // `cat` ends only at stdin EOF, so a Success status proves the half-close arrived.
    assert_eq!(outcome.stdout.len(), input.len());
    assert!(outcome.stdout == input);
    assert_eq!(outcome.status()["status"], "Success");
}

#[tokio::test]
async fn large_output_flows_without_window_updates_from_the_client() {
    // client-go (spdystream) never sends WINDOW_UPDATE: 4 MiB must still arrive.
    let (server, _) = server();
    let len = 4 << 20;
    let url = server
        .exec_url(&exec_request(
            &["big", &len.to_string()],
            false,
            true,
            false,
            false,
        ))
        .unwrap();
    let outcome = spdy_exec(&url, V4, out_only()).await;
    assert_eq!(outcome.stdout.len(), len);
    assert!(
        outcome
            .stdout
            .iter()
            .enumerate()
            .all(|(i, b)| *b == (i % 251) as u8)
    );
}

#[tokio::test]
async fn tty_sessions_get_resize_events_and_no_stderr() {
    let (server, runtime) = server();
    let url = server
        .exec_url(&exec_request(&["sizes", "2"], false, true, false, true))
        .unwrap();
    let outcome = spdy_exec(
        &url,
        V4,
        ExecInput {
            stdout: true,
            tty: true,
            resize: vec![(80, 24), (132, 50)],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&outcome.stdout), "80x24\n132x50\n");
    assert_eq!(outcome.status()["status"], "Success");
    let seen = runtime.seen.lock().unwrap()[0].clone();
    assert!(seen.tty && seen.resize && !seen.stderr);
}

#[tokio::test]
async fn attach_runs_until_stdin_closes() {
    let (server, runtime) = server();
    let url = server
        .attach_url(&api::AttachRequest {
            container_id: "ctr-9".into(),
            stdin: true,
            stdout: true,
            ..Default::default()
        })
        .unwrap();
    assert!(url.contains("/attach/"));
    let outcome = spdy_exec(
        &url,
        V4,
        ExecInput {
            stdin: Some(b"typed\n".to_vec()),
            stdout: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(outcome.stdout, b"attached\ntyped\n");
    assert_eq!(outcome.status()["status"], "Success");
    assert_eq!(runtime.seen.lock().unwrap()[0].op, "attach");
}

#[tokio::test]
async fn urls_are_one_time_expire_and_belong_to_their_kind() {
    let (clock, offset) = manual_clock();
    let (server, runtime) = start_server(StreamingConfig {
        clock,
        ..StreamingConfig::default()
    });
    let request = exec_request(&["echo", "x"], false, true, false, false);
    let url = server.exec_url(&request).unwrap();
    let outcome = spdy_exec(&url, V4, out_only()).await;
    assert_eq!(outcome.stdout, b"x\n");
    let reused = SpdyClient::connect(&url, V4).await.err().expect("refused");
    assert_eq!(
        (reused.status, reused.body.as_str()),
        (404, "404 page not found\n")
    );

    let unknown = format!("{}exec/AAAAAAAA", server.base_url());
    assert_eq!(
        SpdyClient::connect(&unknown, V4)
            .await
            .err()
            .unwrap()
            .status,
        404
    );

    let expiring = server.exec_url(&request).unwrap();
    offset.store(61, Ordering::SeqCst);
    assert_eq!(
        SpdyClient::connect(&expiring, V4)
            .await
            .err()
            .unwrap()
            .status,
        404
    );

    offset.store(0, Ordering::SeqCst);
    let exec_token = server.exec_url(&request).unwrap();
    let misused = exec_token.replace("/exec/", "/attach/");
    assert_eq!(
        SpdyClient::connect(&misused, V4)
            .await
            .err()
            .unwrap()
            .status,
        404
    );
    // The misuse spent the token.
    assert_eq!(
        SpdyClient::connect(&exec_token, V4)
            .await
            .err()
            .unwrap()
            .status,
        404
    );
    assert_eq!(runtime.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn protocol_negotiation_fails_like_the_kubelet() {
    let (server, _) = server();
    let request = exec_request(&["echo"], false, true, false, false);

    let missing = SpdyClient::connect(&server.exec_url(&request).unwrap(), &[])
        .await
        .err()
        .unwrap();
    assert_eq!(missing.status, 400);
    assert!(
        missing
            .body
            .contains("X-Stream-Protocol-Version is required")
    );

    let unknown = SpdyClient::connect(&server.exec_url(&request).unwrap(), &["v9.channel.k8s.io"])
        .await
        .err()
        .unwrap();
    assert_eq!(unknown.status, 403);
    assert_eq!(unknown.header("x-accepted-stream-protocol-versions"), V4);

    // Comma-separated values in one header line are accepted too.
    let url = server.exec_url(&request).unwrap();
    let client = SpdyClient::connect(&url, &["v9.channel.k8s.io, v3.channel.k8s.io"])
        .await
        .unwrap();
    assert_eq!(client.protocol, "v3.channel.k8s.io");

    let url = server.exec_url(&request).unwrap();
    let (_, no_upgrade) = http_request(
        "POST",
        &url,
        &[("X-Stream-Protocol-Version", "v4.channel.k8s.io")],
    )
    .await;
    assert_eq!(no_upgrade.status, 400);
    assert!(no_upgrade.body.contains("missing upgrade headers"));

    let url = server.exec_url(&request).unwrap();
    let (_, put) = http_request("PUT", &url, &[]).await;
    assert_eq!(put.status, 405);
    // A refused method does not spend the token.
    let (_, get) = http_request("GET", &url, &[]).await;
    assert_eq!(get.status, 400);

    let (_, elsewhere) = http_request("GET", &format!("{}healthz", server.base_url()), &[]).await;
    assert_eq!(elsewhere.status, 404);
}

#[tokio::test]
async fn pings_are_echoed_and_missing_streams_time_out() {
    let (server, runtime) = start_server(StreamingConfig {
        stream_creation_timeout: Duration::from_millis(300),
        ..StreamingConfig::default()
    });
    let url = server
        .exec_url(&exec_request(&["echo"], true, true, false, false))
        .unwrap();
    let mut client = SpdyClient::connect(&url, V4).await.unwrap();
    client.send(Frame::Ping { id: 1 });
    // Only the error stream: stdin and stdout never come.
    let _error = client.typed_stream("error").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(client.pongs(), [1]);
    client.closed_by_server().await;
    assert!(runtime.seen.lock().unwrap().is_empty());
}

fn pf_headers(stream_type: &str, port: u16, request_id: &str) -> Headers {
    Headers::new()
        .with("streamType", stream_type)
        .with("port", &port.to_string())
        .with("requestID", request_id)
}

#[tokio::test]
async fn port_forward_carries_concurrent_connections_both_ways() {
    let (server, runtime) = server();
    let port = echo_server().await;
    let url = server
        .port_forward_url(&api::PortForwardRequest {
            pod_sandbox_id: "pod-1".into(),
            port: vec![i32::from(port)],
        })
        .unwrap();
    assert!(url.contains("/portforward/"));
    let mut client = SpdyClient::connect(&url, &["portforward.k8s.io"])
        .await
        .unwrap();
    assert_eq!(client.protocol, "portforward.k8s.io");
    // client-go: error stream first, then data, both with the port and the request id.
    let mut error_a = client
        .create_stream(pf_headers("error", port, "0"), true)
        .await;
    let mut data_a = client
        .create_stream(pf_headers("data", port, "0"), true)
        .await;
    let mut error_b = client
        .create_stream(pf_headers("error", port, "1"), true)
        .await;
    let mut data_b = client
        .create_stream(pf_headers("data", port, "1"), true)
        .await;
    data_a.write(b"ping-a");
    data_b.write(b"ping-b");
    assert_eq!(data_b.read_exactly(6).await, b"ping-b");
    assert_eq!(data_a.read_exactly(6).await, b"ping-a");
    // The client's half-close reaches the pod, whose answer and FIN come back.
    data_a.close();
    assert_eq!(data_a.read_to_end().await, b"bye\n");
    assert_eq!(error_a.read_to_end().await, b"");
    // The other connection is still open.
    data_b.write(b"again");
    assert_eq!(data_b.read_exactly(5).await, b"again");
    data_b.close();
    assert_eq!(data_b.read_to_end().await, b"bye\n");
    assert_eq!(error_b.read_to_end().await, b"");
    let seen = runtime.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|s| s.target == format!("pod-1:{port}")));
}

#[tokio::test]
async fn port_forward_reports_dial_errors_and_rejects_bad_streams() {
    let (server, _) = server();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = server
        .port_forward_url(&api::PortForwardRequest {
            pod_sandbox_id: "pod-2".into(),
            port: vec![],
        })
        .unwrap();
    let mut client = SpdyClient::connect(&url, &["portforward.k8s.io"])
        .await
        .unwrap();
    let mut error = client
        .create_stream(pf_headers("error", port, "0"), true)
        .await;
    let mut data = client
        .create_stream(pf_headers("data", port, "0"), true)
        .await;
    let message = String::from_utf8(error.read_to_end().await).unwrap();
    assert!(
        message.starts_with(&format!(
            "error forwarding port {port} to pod pod-2, uid : "
        )),
        "{message}"
    );
    assert_eq!(data.read_to_end().await, b"");

    // No port header, port 0, an unknown stream type: reset (RST_STREAM CANCEL = 5).
    let no_port = client
        .create_stream(Headers::new().with("streamType", "data"), false)
        .await;
    let zero = client
        .create_stream(pf_headers("data", 0, "2"), false)
        .await;
    let odd_type = client
        .create_stream(pf_headers("stdin", 80, "3"), false)
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resets = client.resets();
    for stream in [no_port.id, zero.id, odd_type.id] {
        assert!(resets.contains(&(stream, 5)), "{stream}: {resets:?}");
    }
}

#[tokio::test]
async fn port_forward_pairs_old_clients_by_stream_id() {
    // Clients without requestID: data stream id - 2 names the pair.
    let (server, _) = server();
    let port = echo_server().await;
    let url = server
        .port_forward_url(&api::PortForwardRequest {
            pod_sandbox_id: "pod-3".into(),
            port: vec![],
        })
        .unwrap();
    let mut client = SpdyClient::connect(&url, &["portforward.k8s.io"])
        .await
        .unwrap();
    let no_id = |t: &str| {
        Headers::new()
            .with("streamType", t)
            .with("port", &port.to_string())
    };
    let _error = client.create_stream(no_id("error"), true).await;
    let mut data = client.create_stream(no_id("data"), true).await;
    data.write(b"old");
    assert_eq!(data.read_exactly(3).await, b"old");
}

/// Header blocks another implementation compressed must inflate here: Python's zlib with the
/// SPDY/3 dictionary taken from the spdy-transport npm package (`zdict`, level 9, sync flush;
/// two blocks on one stream), and frames node's spdy-transport 3.0.0 wrote as a SPDY/3.1 client
/// (SETTINGS, SYN_STREAM, DATA, SYN_STREAM).
#[tokio::test]
async fn header_blocks_from_independent_implementations_decode() {
    let mut inflate = HeaderDecompressor::new();
    let first = hex("78f9e3c6a7c202a62346703a2b294a4dcc851625aca9a08006000000ffff");
    let second = hex("02a54748d15c04ce0516061606184a41a50e285370164122381394f019cd01000000ffff");
    assert_eq!(
        inflate.decompress(&first).unwrap(),
        Headers::new().with("streamtype", "error")
    );
    assert_eq!(
        inflate.decompress(&second).unwrap(),
        Headers::new()
            .with("port", "8080")
            .with("streamtype", "data")
            .with("requestid", "7")
    );

    let wire = hex(concat!(
        "800300040000000c0000000101000007000100008003000100000098000000010000000060003830e3c6a7c2",
        "007e0081ff000000060000000a73747265616d74797065000000056572726f72000000073a6d6574686f64",
        "00000004504f5354000000083a76657273696f6e00000008485454502f312e31000000053a70617468000000",
        "012f000000073a736368656d65000000056874747073000000053a686f7374000000096c6f63616c686f7374",
        "000000ffff00000001000000026869800300010000009300000003000000006000007f0080ff000000060000",
        "000a73747265616d74797065000000067374646f7574000000073a6d6574686f6400000004504f5354000000",
        "083a76657273696f6e00000008485454502f312e31000000053a70617468000000012f000000073a73636865",
        "6d65000000056874747073000000053a686f7374000000096c6f63616c686f7374000000ffff",
    ));
    let mut decoder = FrameDecoder::new();
    let mut reader = wire.as_slice();
    let mut frames = Vec::new();
    while let Some(frame) = decoder.read(&mut reader).await.unwrap() {
        frames.push(frame);
    }
    assert_eq!(frames.len(), 4, "{frames:?}");
    assert!(matches!(frames[0], Frame::Settings { .. }));
    let Frame::SynStream {
        stream_id: 1,
        headers,
        ..
    } = &frames[1]
    else {
        panic!("{:?}", frames[1]);
    };
    assert_eq!(headers.get("streamtype"), Some("error"));
    assert_eq!(headers.get(":method"), Some("POST"));
    assert_eq!(
        frames[2],
        Frame::Data {
            stream_id: 1,
            fin: false,
            data: b"hi".to_vec()
        }
    );
    let Frame::SynStream {
        stream_id: 3,
        headers,
        ..
    } = &frames[3]
    else {
        panic!("{:?}", frames[3]);
    };
    assert_eq!(headers.get("streamtype"), Some("stdout"));
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[tokio::test]
async fn shutdown_ends_sessions_and_stops_listening() {
    let (server, _) = server();
    let url = server
        .exec_url(&exec_request(&["cat"], true, true, false, false))
        .unwrap();
    let mut client = SpdyClient::connect(&url, V4).await.unwrap();
    let _error = client.typed_stream("error").await;
    let _stdin = client.typed_stream("stdin").await;
    let _stdout = client.typed_stream("stdout").await;
    server.shutdown().await;
    client.closed_by_server().await;
    assert!(
        tokio::net::TcpStream::connect(server.local_addr())
            .await
            .is_err()
    );
}
