//! `WithStreaming`: Exec/Attach/PortForward answer streaming URLs after containerd's checks,
//! every other RPC reaches the wrapped runtime, and the whole path works through the CRI gRPC
//! server and client.

#[path = "support/grpc.rs"]
mod grpc_support;
#[path = "support/streaming.rs"]
mod support;

use grpc_support::{FakeCri, test_options};
use runp::cri::client::RemoteRuntime;
use runp::cri::endpoint::CriEndpoint;
use runp::cri::server::CriListener;
use runp::cri::streaming::{StreamingConfig, StreamingServer, WithStreaming};
use runp::cri::{RuntimeService, api};
use std::sync::Arc;
use support::*;
use tonic::Code;

struct Fixture {
    fake: Arc<FakeCri>,
    wrapped: Arc<WithStreaming>,
    running: String,
    stopped: String,
    unready_pod: String,
}

/// The fake answers statuses filled from a hash of the request (never a zero enum, so never
/// SANDBOX_READY: the ready case is unit-tested in the library), so find ids whose status says
/// running / not running by asking it.
async fn fixture() -> Fixture {
    let fake = Arc::new(FakeCri::new());
    let (server, _) = start_server(StreamingConfig::default());
    let wrapped = Arc::new(WithStreaming::new(fake.clone(), Arc::new(server)));
    let unready_pod = fake
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: "p".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let (mut running, mut stopped) = (None, None);
    for i in 0..64 {
        let ctr = fake
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: unready_pod.clone(),
                config: Some(api::ContainerConfig {
                    metadata: Some(api::ContainerMetadata {
                        name: format!("c{i}"),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap()
            .container_id;
        let state = fake
            .container_status(api::ContainerStatusRequest {
                container_id: ctr.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .status
            .unwrap()
            .state;
        let slot = if state == api::ContainerState::ContainerRunning as i32 {
            &mut running
        } else {
            &mut stopped
        };
        slot.get_or_insert(ctr);
    }
    Fixture {
        fake,
        wrapped,
        running: running.expect("a running container"),
        stopped: stopped.expect("a stopped container"),
        unready_pod,
    }
}

fn exec_req(id: &str, tty: bool, stderr: bool) -> api::ExecRequest {
    api::ExecRequest {
        container_id: id.into(),
        cmd: vec!["echo".into(), "hi".into()],
        tty,
        stdin: false,
        stdout: true,
        stderr,
    }
}

#[tokio::test]
async fn streaming_rpcs_check_like_containerd_and_return_urls() {
    let f = fixture().await;
    let base = f.wrapped.server().base_url();
    let url = f
        .wrapped
        .exec(exec_req(&f.running, false, true))
        .await
        .unwrap()
        .url;
    assert!(url.starts_with(&format!("{base}exec/")), "{url}");
    let code = |r: Result<_, tonic::Status>| r.map(|_: api::ExecResponse| ()).unwrap_err().code();
    assert_eq!(
        code(f.wrapped.exec(exec_req("ctr-nope", false, false)).await),
        Code::NotFound
    );
    let stopped = f
        .wrapped
        .exec(exec_req(&f.stopped, false, false))
        .await
        .unwrap_err();
    assert_eq!(stopped.code(), Code::FailedPrecondition);
    assert!(
        stopped.message().starts_with("container is in CONTAINER_"),
        "{}",
        stopped.message()
    );
    assert_eq!(
        code(f.wrapped.exec(exec_req(&f.running, true, true)).await),
        Code::InvalidArgument
    );
    let mut nothing = exec_req(&f.running, false, false);
    nothing.stdout = false;
    assert_eq!(code(f.wrapped.exec(nothing).await), Code::InvalidArgument);
    let mut no_cmd = exec_req(&f.running, false, false);
    no_cmd.cmd.clear();
    assert_eq!(code(f.wrapped.exec(no_cmd).await), Code::InvalidArgument);
    assert_eq!(
        code(f.wrapped.exec(exec_req("", false, false)).await),
        Code::InvalidArgument
    );

    let attach = |id: &str| api::AttachRequest {
        container_id: id.into(),
        stdin: true,
        ..Default::default()
    };
    let url = f.wrapped.attach(attach(&f.running)).await.unwrap().url;
    assert!(url.starts_with(&format!("{base}attach/")));
    let err = f.wrapped.attach(attach(&f.stopped)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);

    let forward = |id: &str| api::PortForwardRequest {
        pod_sandbox_id: id.into(),
        port: vec![80],
    };
    let err = f
        .wrapped
        .port_forward(forward(&f.unready_pod))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(err.message(), "sandbox container is not running");
    let err = f
        .wrapped
        .port_forward(forward("pod-nope"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = f.wrapped.port_forward(forward("")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn every_other_rpc_reaches_the_wrapped_runtime() {
    let f = fixture().await;
    let before = f.fake.calls().len();
    f.wrapped.version(Default::default()).await.unwrap();
    f.wrapped.list_containers(Default::default()).await.unwrap();
    f.wrapped.status(Default::default()).await.unwrap();
    // Methods with trait defaults must still be forwarded, not answered by the default.
    f.wrapped
        .list_metric_descriptors(Default::default())
        .await
        .unwrap();
    f.wrapped
        .list_pod_sandbox_metrics(Default::default())
        .await
        .unwrap();
    let checkpoint = api::CheckpointContainerRequest {
        container_id: f.running.clone(),
        ..Default::default()
    };
    f.wrapped.checkpoint_container(checkpoint).await.unwrap();
    let err = f
        .wrapped
        .stop_container(api::StopContainerRequest {
            container_id: "ctr-nope".into(),
            timeout: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let methods: Vec<&str> = f.fake.calls()[before..].iter().map(|c| c.method).collect();
    assert_eq!(
        methods,
        [
            "version",
            "list_containers",
            "status",
            "list_metric_descriptors",
            "list_pod_sandbox_metrics",
            "checkpoint_container",
            "stop_container"
        ]
    );
}

#[tokio::test]
async fn exec_through_the_grpc_server_then_the_streaming_url() {
    let f = fixture().await;
    let dir = tempfile::tempdir().unwrap();
    let endpoint = CriEndpoint::Unix(dir.path().join("cri.sock"));
    let listener = CriListener::bind(&endpoint).await.unwrap();
    let endpoint = listener.local_endpoint();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(
        listener.serve(f.wrapped.clone(), f.fake.clone(), async move {
            let _ = stopped.await;
        }),
    );
    let client = RemoteRuntime::connect(&endpoint, test_options())
        .await
        .unwrap();
    let url = client
        .exec(exec_req(&f.running, false, false))
        .await
        .unwrap()
        .url;
    let outcome = spdy_exec(
        &url,
        &["v4.channel.k8s.io"],
        ExecInput {
            stdout: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(outcome.stdout, b"hi\n");
    assert_eq!(outcome.status()["status"], "Success");
    let err = client
        .exec(exec_req(&f.stopped, false, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_server_listens_on_loopback_by_default() {
    let server =
        StreamingServer::start(loopback(), Arc::new(TestRuntime::default())).expect("start");
    assert!(server.local_addr().ip().is_loopback());
    assert_ne!(server.local_addr().port(), 0);
    let taken = server.local_addr();
    assert!(StreamingServer::start(taken, Arc::new(TestRuntime::default())).is_err());
}
