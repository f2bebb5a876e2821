//! CRI over gRPC, message level: every RPC through `RemoteRuntime` → unix socket → server →
//! fake runtime and back must arrive field-exactly; statuses survive; events stream in order;
//! a stock generated tonic client (what crictl amounts to) works against the server.

#[path = "support/grpc.rs"]
mod support;

use futures::StreamExt;
use prost::Message;
use runp::cri::api::runtime_service_client::RuntimeServiceClient;
use runp::cri::api::{self, image_service_client::ImageServiceClient};
use runp::cri::client::RemoteRuntime;
use runp::cri::{CriResult, ImageService, RuntimeService};
use std::fmt::Debug;
use std::future::Future;
use support::{FakeCri, HANG_GUARD, TestServer, test_options};
use tonic::Code;

async fn connect(server: &TestServer) -> RemoteRuntime {
    RemoteRuntime::connect(&server.endpoint, test_options())
        .await
        .expect("connect to the test server")
}

/// Sends `req` through `send` and checks the fake received exactly `req` and the caller got
/// exactly what the fake answered.
async fn round_trip<Req, Resp, Fut>(
    fake: &FakeCri,
    method: &str,
    req: Req,
    send: impl FnOnce(Req) -> Fut,
) -> Resp
where
    Req: Message + Default + PartialEq + Clone + Debug,
    Resp: Message + Default + PartialEq + Debug,
    Fut: Future<Output = CriResult<Resp>>,
{
    let got = send(req.clone())
        .await
        .unwrap_or_else(|status| panic!("{method} failed: {status:?}"));
    let call = fake.last_call();
    assert_eq!(
        call.method, method,
        "the server forwarded to the wrong method"
    );
    assert_eq!(
        call.request::<Req>(),
        req,
        "{method}: request changed on the wire"
    );
    assert_eq!(
        got,
        call.response::<Resp>(),
        "{method}: response changed on the wire"
    );
    got
}

#[test]
fn the_filler_sets_deeply_nested_fields() {
    let filler = support::Filler::load();
    let status: api::ContainerStatusResponse = filler.fill(7);
    let inner = status.status.as_ref().expect("status set");
    let linux = inner
        .resources
        .as_ref()
        .and_then(|r| r.linux.as_ref())
        .expect("resources.linux set");
    assert_ne!(linux.cpu_period, 0);
    assert_eq!(linux.hugepage_limits.len(), 2);
    assert_eq!(inner.labels.len(), 2);
    assert_ne!(inner.state, 0, "enums get a non-zero value");
    assert_eq!(status.info.len(), 2);
    let exec: api::ExecSyncResponse = filler.fill(7);
    assert!(!exec.stdout.is_empty());
    assert_ne!(
        filler.fill::<api::ContainerStatusResponse>(8),
        status,
        "the seed matters"
    );
}

#[tokio::test]
async fn every_runtime_rpc_round_trips_field_exactly() {
    let server = TestServer::start().await;
    let remote = connect(&server).await;
    let fake = &*server.fake;
    let filler = fake.filler();

    let pod = round_trip(fake, "run_pod_sandbox", filler.fill(1), |r| {
        remote.run_pod_sandbox(r)
    })
    .await
    .pod_sandbox_id;
    let ids = [("pod_sandbox_id", pod.as_str())];
    let req = filler.fill_with::<api::CreateContainerRequest>(2, &ids);
    let ctr = round_trip(fake, "create_container", req, |r| {
        remote.create_container(r)
    })
    .await
    .container_id;
    let ids = [
        ("pod_sandbox_id", pod.as_str()),
        ("container_id", ctr.as_str()),
    ];

    let mut seed = 10;
    macro_rules! check {
        ($($method:ident($req:ident);)*) => {$(
            seed += 1;
            let req = filler.fill_with::<api::$req>(seed, &ids);
            round_trip(fake, stringify!($method), req, |r| remote.$method(r)).await;
        )*};
    }
    check! {
        version(VersionRequest);
        pod_sandbox_status(PodSandboxStatusRequest);
        list_pod_sandbox(ListPodSandboxRequest);
        start_container(StartContainerRequest);
        list_containers(ListContainersRequest);
        container_status(ContainerStatusRequest);
        update_container_resources(UpdateContainerResourcesRequest);
        reopen_container_log(ReopenContainerLogRequest);
        exec_sync(ExecSyncRequest);
        exec(ExecRequest);
        attach(AttachRequest);
        port_forward(PortForwardRequest);
        container_stats(ContainerStatsRequest);
        list_container_stats(ListContainerStatsRequest);
        pod_sandbox_stats(PodSandboxStatsRequest);
        list_pod_sandbox_stats(ListPodSandboxStatsRequest);
        update_runtime_config(UpdateRuntimeConfigRequest);
        status(StatusRequest);
        runtime_config(RuntimeConfigRequest);
        checkpoint_container(CheckpointContainerRequest);
        list_metric_descriptors(ListMetricDescriptorsRequest);
        list_pod_sandbox_metrics(ListPodSandboxMetricsRequest);
        stop_container(StopContainerRequest);
        remove_container(RemoveContainerRequest);
        stop_pod_sandbox(StopPodSandboxRequest);
        remove_pod_sandbox(RemovePodSandboxRequest);
    }
    // 2 + 26 unary RPCs, each exactly once: nothing was retried or duplicated on the way.
    assert_eq!(
        fake.calls().len(),
        28 + 1,
        "plus the Version call of connect()"
    );
}

#[tokio::test]
async fn every_image_rpc_round_trips_field_exactly() {
    let server = TestServer::start().await;
    let remote = connect(&server).await;
    let fake = &*server.fake;
    let filler = fake.filler();

    let pull: api::PullImageRequest = filler.fill(1);
    let image = pull.image.clone().expect("filled image spec");
    let pulled = round_trip(fake, "pull_image", pull, |r| remote.pull_image(r)).await;
    assert!(pulled.image_ref.starts_with("sha256:"));
    let status_req = api::ImageStatusRequest {
        image: Some(image.clone()),
        verbose: true,
    };
    let status = round_trip(fake, "image_status", status_req.clone(), |r| {
        remote.image_status(r)
    })
    .await;
    assert!(status.image.is_some(), "a pulled image has a status");
    round_trip(fake, "list_images", filler.fill(2), |r| {
        remote.list_images(r)
    })
    .await;
    round_trip(fake, "image_fs_info", filler.fill(3), |r| {
        remote.image_fs_info(r)
    })
    .await;
    let remove = api::RemoveImageRequest { image: Some(image) };
    round_trip(fake, "remove_image", remove, |r| remote.remove_image(r)).await;
    // CRI: an unknown image is an empty status, not an error; it crosses the wire as such.
    let gone = round_trip(fake, "image_status", status_req, |r| remote.image_status(r)).await;
    assert_eq!(gone, api::ImageStatusResponse::default());
}

#[tokio::test]
async fn status_codes_messages_and_details_survive_the_wire() {
    let server = TestServer::start().await;
    let remote = connect(&server).await;

    let unknown = api::ContainerStatusRequest {
        container_id: "no-such-container".into(),
        verbose: false,
    };
    let err = remote
        .container_status(unknown)
        .await
        .expect_err("unknown container");
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("no-such-container"), "{err:?}");
    let unknown = api::StopPodSandboxRequest {
        pod_sandbox_id: "no-such-pod".into(),
    };
    assert_eq!(
        remote
            .stop_pod_sandbox(unknown)
            .await
            .expect_err("unknown pod")
            .code(),
        Code::NotFound
    );

    let codes = [
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];
    for (i, code) in codes.into_iter().enumerate() {
        let message = format!("failure {i}: ünïcödé, 100% \"quoted\"\nsecond line");
        let details = vec![0, 1, 0xff, i as u8];
        server.fake.fail(
            "list_containers",
            tonic::Status::with_details(code, message.clone(), details.clone().into()),
        );
        let err = remote
            .list_containers(api::ListContainersRequest::default())
            .await
            .expect_err("injected failure");
        assert_eq!(
            (err.code(), err.message(), err.details()),
            (code, message.as_str(), &details[..])
        );
    }
}

#[tokio::test]
async fn container_events_stream_in_order_and_end_at_shutdown() {
    let mut server = TestServer::start().await;
    let remote = connect(&server).await;
    let mut events = remote
        .get_container_events(api::GetEventsRequest {})
        .await
        .expect("open the event stream");

    let fake = &*server.fake;
    let pod = remote
        .run_pod_sandbox(fake.filler().fill(1))
        .await
        .expect("run pod")
        .pod_sandbox_id;
    let req = fake
        .filler()
        .fill_with::<api::CreateContainerRequest>(2, &[("pod_sandbox_id", &pod)]);
    let ctr = remote
        .create_container(req)
        .await
        .expect("create")
        .container_id;
    remote
        .start_container(api::StartContainerRequest {
            container_id: ctr.clone(),
        })
        .await
        .expect("start");
    remote
        .stop_container(api::StopContainerRequest {
            container_id: ctr.clone(),
            timeout: 0,
        })
        .await
        .expect("stop");
    remote
        .remove_container(api::RemoveContainerRequest {
            container_id: ctr.clone(),
        })
        .await
        .expect("remove");

    let got: Vec<api::ContainerEventResponse> =
        tokio::time::timeout(HANG_GUARD, events.by_ref().take(4).collect::<Vec<_>>())
            .await
            .expect("four events arrive")
            .into_iter()
            .collect::<Result<_, _>>()
            .expect("no stream errors");
    assert_eq!(
        got,
        fake.emitted(),
        "events arrive field-exactly and in order"
    );
    let kinds: Vec<i32> = got.iter().map(|e| e.container_event_type).collect();
    use api::ContainerEventType::*;
    let want = [
        ContainerCreatedEvent,
        ContainerStartedEvent,
        ContainerStoppedEvent,
        ContainerDeletedEvent,
    ];
    assert_eq!(kinds, want.map(|k| k as i32));

    // Shutdown ends the stream cleanly (the server closes it), rather than waiting it out.
    server.shutdown().await.expect("clean shutdown");
    let end = tokio::time::timeout(HANG_GUARD, events.next())
        .await
        .expect("stream ends");
    assert!(end.is_none(), "stream ended with {end:?}");
}

#[tokio::test]
async fn a_stock_generated_tonic_client_speaks_to_the_server() {
    let server = TestServer::start().await;
    let target = format!("unix://{}", server.socket().display());

    let mut runtime = RuntimeServiceClient::connect(target.clone())
        .await
        .expect("connect");
    let version = runtime
        .version(api::VersionRequest {
            version: "0.1.0".into(),
        })
        .await
        .expect("version")
        .into_inner();
    assert_eq!(version, server.fake.last_call().response());
    let err = runtime
        .container_status(api::ContainerStatusRequest {
            container_id: "nope".into(),
            verbose: true,
        })
        .await
        .expect_err("unknown container");
    assert_eq!(err.code(), Code::NotFound);

    let mut events = runtime
        .get_container_events(api::GetEventsRequest {})
        .await
        .expect("open the event stream")
        .into_inner();
    let pod = runtime
        .run_pod_sandbox(server.fake.filler().fill::<api::RunPodSandboxRequest>(5))
        .await
        .expect("run pod")
        .into_inner()
        .pod_sandbox_id;
    let req = server
        .fake
        .filler()
        .fill_with::<api::CreateContainerRequest>(6, &[("pod_sandbox_id", &pod)]);
    runtime.create_container(req).await.expect("create");
    let event = tokio::time::timeout(HANG_GUARD, events.message())
        .await
        .expect("an event arrives")
        .expect("stream healthy")
        .expect("stream open");
    assert_eq!(event, server.fake.emitted()[0]);

    let mut images = ImageServiceClient::connect(target.clone())
        .await
        .expect("connect");
    let pulled = images
        .pull_image(server.fake.filler().fill::<api::PullImageRequest>(7))
        .await
        .expect("pull")
        .into_inner();
    assert!(pulled.image_ref.starts_with("sha256:"));

    use tonic_health::pb::{
        HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
    };
    let channel = tonic::transport::Endpoint::from_shared(target)
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut health = HealthClient::new(channel);
    for service in ["", "runtime.v1.RuntimeService", "runtime.v1.ImageService"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health check")
            .into_inner()
            .status;
        assert_eq!(
            status,
            ServingStatus::Serving as i32,
            "health of {service:?}"
        );
    }
}
