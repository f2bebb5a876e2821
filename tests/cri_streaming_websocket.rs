//! The streaming server over the WebSocket channel protocols (channel.k8s.io, base64, v4, v5).

#[path = "support/streaming.rs"]
mod support;

use futures::SinkExt;
use runp::cri::api;
use runp::cri::streaming::StreamingConfig;
use support::*;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn v4_binary_exec_announces_itself_then_separates_output_and_reports_json() {
    let (server, _) = start_server(StreamingConfig::default());
    let url = server
        .exec_url(&exec_request(
            &["both", "o", "e", "2"],
            false,
            true,
            true,
            false,
        ))
        .unwrap();
    let (mut ws, chosen) = ws_connect(&url, "v4.channel.k8s.io").await.unwrap();
    assert_eq!(chosen.as_deref(), Some("v4.channel.k8s.io"));
    let messages = ws_read_all(&mut ws).await;
    // The first message is the empty "ready" message on stdout, the lowest writable channel.
    assert_eq!(messages[0], (1, Vec::new()));
    assert_eq!(channel_data(&messages, 1), b"o");
    assert_eq!(channel_data(&messages, 2), b"e");
    let status: serde_json::Value = serde_json::from_slice(&channel_data(&messages, 3)).unwrap();
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "2");
}

#[tokio::test]
async fn base64_and_pre_v4_protocols_use_text_frames_and_text_statuses() {
    let (server, _) = start_server(StreamingConfig::default());
    let url = server
        .exec_url(&exec_request(&["exit", "4"], false, false, true, false))
        .unwrap();
    let (mut ws, chosen) = ws_connect(&url, "base64.channel.k8s.io").await.unwrap();
    assert_eq!(chosen.as_deref(), Some("base64.channel.k8s.io"));
    let messages = ws_read_all(&mut ws).await;
    // Only stderr was requested: the ready message goes there.
    assert_eq!(messages[0], (2, Vec::new()));
    assert_eq!(
        String::from_utf8(channel_data(&messages, 3)).unwrap(),
        "command terminated with non-zero exit code: error executing command [exit 4], exit code 4"
    );

    // No subprotocol at all is binary channel.k8s.io; success writes nothing on the error channel.
    let url = server
        .exec_url(&exec_request(&["echo", "plain"], false, true, false, false))
        .unwrap();
    let (mut ws, chosen) = ws_connect(&url, "").await.unwrap();
    assert_eq!(chosen, None);
    let messages = ws_read_all(&mut ws).await;
    assert_eq!(channel_data(&messages, 1), b"plain\n");
    assert!(channel_data(&messages, 3).is_empty());
}

#[tokio::test]
async fn v5_close_signal_ends_stdin_and_resize_works_with_a_tty() {
    let (server, runtime) = start_server(StreamingConfig::default());
    let url = server
        .exec_url(&exec_request(&["cat"], true, true, false, false))
        .unwrap();
    let (mut ws, chosen) = ws_connect(&url, "v5.channel.k8s.io").await.unwrap();
    assert_eq!(chosen.as_deref(), Some("v5.channel.k8s.io"));
    ws.send(Message::binary(b"\x00hello ".to_vec()))
        .await
        .unwrap();
    ws.send(Message::binary(b"\x00world".to_vec()))
        .await
        .unwrap();
    ws.send(Message::binary(vec![255, 0])).await.unwrap();
    let messages = ws_read_all(&mut ws).await;
    assert_eq!(channel_data(&messages, 1), b"hello world");
    let status: serde_json::Value = serde_json::from_slice(&channel_data(&messages, 3)).unwrap();
    assert_eq!(status["status"], "Success");

    let url = server
        .exec_url(&exec_request(&["sizes", "1"], false, true, false, true))
        .unwrap();
    let (mut ws, _) = ws_connect(&url, "v4.channel.k8s.io").await.unwrap();
    ws.send(Message::binary(
        b"\x04{\"Width\":100,\"Height\":40}".to_vec(),
    ))
    .await
    .unwrap();
    let messages = ws_read_all(&mut ws).await;
    assert_eq!(channel_data(&messages, 1), b"100x40\n");
    assert!(runtime.seen.lock().unwrap()[1].tty);
}

#[tokio::test]
async fn handshake_refusals_match_the_kubelet() {
    let (server, _) = start_server(StreamingConfig::default());
    let request = exec_request(&["echo"], false, true, false, false);
    let url = server.exec_url(&request).unwrap();
    let err = ws_connect(&url, "v9.channel.k8s.io").await.unwrap_err();
    let tokio_tungstenite::tungstenite::Error::Http(response) = err else {
        panic!("{err:?}");
    };
    assert_eq!(response.status(), 403);

    // x/net/websocket serves GET only.
    let url = server.exec_url(&request).unwrap();
    let (_, post) = http_request(
        "POST",
        &url,
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13"),
        ],
    )
    .await;
    assert_eq!(post.status, 405);
    let url = server.exec_url(&request).unwrap();
    let (_, old) = http_request(
        "GET",
        &url,
        &[
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "8"),
        ],
    )
    .await;
    assert_eq!(old.status, 400);
    assert_eq!(old.header("sec-websocket-version"), ["13"]);
}

#[tokio::test]
async fn port_forward_over_websocket_opens_channels_with_the_port() {
    let (server, _) = start_server(StreamingConfig::default());
    let port = echo_server().await;
    let url = server
        .port_forward_url(&api::PortForwardRequest {
            pod_sandbox_id: "pod-ws".into(),
            port: vec![i32::from(port)],
        })
        .unwrap();
    let (mut ws, chosen) = ws_connect(&url, "v4.channel.k8s.io").await.unwrap();
    assert_eq!(chosen.as_deref(), Some("v4.channel.k8s.io"));
    let mut data_frame = vec![0u8];
    data_frame.extend_from_slice(b"over ws");
    ws.send(Message::binary(data_frame)).await.unwrap();
    let mut seen = Vec::new();
    use futures::StreamExt;
    while channel_data(&seen, 0).len() < 2 + 7 {
        let next = tokio::time::timeout(HANG_GUARD, ws.next()).await.unwrap();
        let Some(Ok(Message::Binary(data))) = next else {
            panic!("{next:?}");
        };
        seen.push((data[0], data[1..].to_vec()));
    }
    let port_bytes = port.to_le_bytes().to_vec();
    // Data channel 0 and error channel 1 each start with the port, little-endian.
    assert_eq!(seen[0], (0, port_bytes.clone()));
    assert_eq!(seen[1], (1, port_bytes.clone()));
    assert_eq!(&channel_data(&seen, 0)[2..], b"over ws");
    // Ports are checked before the upgrade: a bad query is a 400.
    let url = server
        .port_forward_url(&api::PortForwardRequest {
            pod_sandbox_id: "pod-ws".into(),
            port: vec![],
        })
        .unwrap();
    let err = ws_connect(&format!("{url}?port=0"), "").await.unwrap_err();
    let tokio_tungstenite::tungstenite::Error::Http(response) = err else {
        panic!("{err:?}");
    };
    assert_eq!(response.status(), 400);
}
