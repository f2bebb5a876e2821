//! CRI over gRPC, transport level: the server's unix socket (mode, ownership, never stealing a
//! live socket, replacing a stale one, cleanup), client deadlines, connection retries and
//! reconnection, and the loopback TCP endpoint.

#[path = "support/grpc.rs"]
mod support;

use runp::cri::api;
use runp::cri::client::{RemoteError, RemoteOptions, RemoteRuntime};
use runp::cri::endpoint::CriEndpoint;
use runp::cri::server::{CriListener, ServeError};
use runp::cri::socket::SocketError;
use runp::cri::{ImageService, RuntimeService};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::sync::Arc;
use std::time::Duration;
use support::{FakeCri, HANG_GUARD, TestServer, test_options};
use tonic::Code;

async fn connect(endpoint: &CriEndpoint) -> RemoteRuntime {
    RemoteRuntime::connect(endpoint, test_options())
        .await
        .expect("connect")
}

async fn version_ok(remote: &RemoteRuntime) {
    remote
        .version(api::VersionRequest::default())
        .await
        .expect("the server answers");
}

#[tokio::test]
async fn the_socket_is_private_to_the_user_that_created_it() {
    let server = TestServer::start().await;
    let meta = std::fs::symlink_metadata(server.socket()).expect("socket exists");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());
    assert_eq!(meta.gid(), nix::unistd::getegid().as_raw());
    let parent = std::fs::metadata(server.dir.path().join("run")).expect("parent dir created");
    assert_eq!(parent.permissions().mode() & 0o7777, 0o700);
}

#[tokio::test]
async fn a_live_socket_is_not_stolen() {
    let server = TestServer::start().await;
    let inode = std::fs::metadata(server.socket()).expect("socket").ino();
    let err = CriListener::bind(&server.endpoint)
        .await
        .expect_err("second server refused");
    assert!(
        matches!(&err, ServeError::Socket(SocketError::InUse(path)) if *path == server.socket()),
        "{err:?}"
    );
    assert_eq!(
        std::fs::metadata(server.socket())
            .expect("socket kept")
            .ino(),
        inode
    );
    version_ok(&connect(&server.endpoint).await).await;
}

#[tokio::test]
async fn a_stale_socket_is_replaced() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("cri.sock");
    // A server that died without cleaning up: the file stays, nobody listens.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
    assert!(path.exists());
    let server = TestServer::start_on(
        dir,
        CriEndpoint::Unix(path.clone()),
        Arc::new(FakeCri::new()),
    )
    .await;
    assert_eq!(
        std::fs::metadata(&path)
            .expect("socket")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    version_ok(&connect(&server.endpoint).await).await;
}

#[tokio::test]
async fn a_file_that_is_not_a_socket_is_left_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("cri.sock");
    std::fs::write(&path, "precious").expect("write");
    let err = CriListener::bind(&CriEndpoint::Unix(path.clone()))
        .await
        .expect_err("refused");
    assert!(
        matches!(err, ServeError::Socket(SocketError::NotASocket(_))),
        "{err:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).expect("still there"),
        "precious"
    );
}

#[tokio::test]
async fn shutdown_removes_the_socket_but_not_a_successors() {
    let mut first = TestServer::start().await;
    let path = first.socket();
    first.shutdown().await.expect("clean shutdown");
    assert!(!path.exists(), "socket removed at shutdown");

    // A server whose socket path was taken over must not delete the successor's socket.
    let mut old = TestServer::start().await;
    let path = old.socket();
    std::fs::remove_file(&path).expect("unlink the old socket");
    let dir = tempfile::tempdir().expect("temp dir");
    let new = TestServer::start_on(dir, old.endpoint.clone(), Arc::new(FakeCri::new())).await;
    old.shutdown().await.expect("clean shutdown");
    assert!(path.exists(), "the successor's socket survives");
    version_ok(&connect(&new.endpoint).await).await;
}

#[tokio::test]
async fn the_call_deadline_fires_against_a_server_that_never_answers() {
    let server = TestServer::start().await;
    let options = RemoteOptions {
        call_timeout: Duration::from_millis(300),
        ..test_options()
    };
    let remote = RemoteRuntime::connect(&server.endpoint, options)
        .await
        .expect("connect");
    server.fake.hang("status");
    server.fake.hang("image_fs_info");

    let err = remote
        .status(api::StatusRequest::default())
        .await
        .expect_err("no answer");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    let err = remote
        .image_fs_info(api::ImageFsInfoRequest::default())
        .await
        .expect_err("no answer");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    // The abandoned calls are cancelled on the server too, and the channel still works.
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while server.fake.dropped_hung_calls() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "hung handlers never cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    version_ok(&remote).await;
}

#[tokio::test]
async fn connect_gives_up_on_a_socket_that_never_speaks_grpc() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("mute.sock");
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    // Accepts connections and holds them open without ever answering.
    let mute = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let options = RemoteOptions {
        call_timeout: Duration::from_millis(200),
        connect_timeout: Duration::from_secs(1),
        ..test_options()
    };
    let err = tokio::time::timeout(
        HANG_GUARD,
        RemoteRuntime::connect(&CriEndpoint::Unix(path), options),
    )
    .await
    .expect("connect gives up within its budget")
    .expect_err("no CRI there");
    assert!(
        matches!(err, RemoteError::Unreachable { attempts, .. } if attempts >= 2),
        "{err:?}"
    );
    mute.abort();
}

#[tokio::test]
async fn connect_retries_until_the_runtime_comes_up() {
    let dir = tempfile::tempdir().expect("temp dir");
    let endpoint = CriEndpoint::Unix(dir.path().join("late.sock"));
    let connecting = tokio::spawn({
        let endpoint = endpoint.clone();
        async move { RemoteRuntime::connect(&endpoint, test_options()).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!connecting.is_finished(), "connect waits for the runtime");
    let server = TestServer::start_on(dir, endpoint, Arc::new(FakeCri::new())).await;
    let remote = tokio::time::timeout(HANG_GUARD, connecting)
        .await
        .expect("connect finishes")
        .expect("no panic")
        .expect("connected once the server is up");
    version_ok(&remote).await;
    assert_eq!(
        server.fake.calls()[0].method,
        "version",
        "connect checked the API version"
    );
}

#[tokio::test]
async fn connect_rejects_a_grpc_server_without_the_cri() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("health-only.sock");
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health)
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
    let err = RemoteRuntime::connect(&CriEndpoint::Unix(path), test_options())
        .await
        .expect_err("not a CRI runtime");
    assert!(
        matches!(&err, RemoteError::NotCri { status, .. } if status.code() == Code::Unimplemented),
        "{err:?}"
    );
    server.abort();
}

#[tokio::test]
async fn calls_fail_unavailable_while_the_server_is_down_and_recover_after() {
    let mut server = TestServer::start().await;
    let remote = connect(&server.endpoint).await;
    server.shutdown().await.expect("clean shutdown");

    let err = remote
        .version(api::VersionRequest::default())
        .await
        .expect_err("server gone");
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");

    let dir = tempfile::tempdir().expect("temp dir");
    let _restarted =
        TestServer::start_on(dir, server.endpoint.clone(), Arc::new(FakeCri::new())).await;
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    // The channel reconnects by itself (its backoff may delay the first success).
    while let Err(err) = remote.list_images(api::ListImagesRequest::default()).await {
        assert_eq!(err.code(), Code::Unavailable, "{err:?}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "never reconnected: {err:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn loopback_tcp_serves_and_other_addresses_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let any_port: CriEndpoint = "tcp://127.0.0.1:0".parse().expect("endpoint");
    let server = TestServer::start_on(dir, any_port, Arc::new(FakeCri::new())).await;
    assert!(matches!(&server.endpoint, CriEndpoint::Tcp { port, .. } if *port != 0));
    version_ok(&connect(&server.endpoint).await).await;

    let wildcard: CriEndpoint = "tcp://0.0.0.0:0".parse().expect("endpoint");
    let err = CriListener::bind(&wildcard)
        .await
        .expect_err("not loopback");
    assert!(matches!(err, ServeError::NotLoopback(_)), "{err:?}");
}

#[tokio::test]
async fn a_socket_group_opens_the_socket_and_its_new_directory_to_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run/cri.sock");
    // Our own group: any user may give its files to it.
    let gid = nix::unistd::getegid().as_raw();
    let (_listener, _guard) = runp::cri::socket::bind_unix_for(&path, Some(gid))
        .await
        .expect("bind with a socket group");
    for (file, mode) in [(path.as_path(), 0o660), (path.parent().unwrap(), 0o710)] {
        let meta = std::fs::symlink_metadata(file).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, mode, "{file:?}");
        assert_eq!(meta.gid(), gid, "{file:?}");
    }
    assert_eq!(runp::cri::socket::resolve_group("4242").unwrap(), 4242);
    assert_eq!(runp::cri::socket::resolve_group("root").unwrap(), 0);
    assert!(matches!(
        runp::cri::socket::resolve_group("no-such-group-of-runp"),
        Err(SocketError::UnknownGroup(name)) if name == "no-such-group-of-runp"
    ));
    let tcp: CriEndpoint = "tcp://127.0.0.1:0".parse().unwrap();
    assert!(matches!(
        CriListener::bind_for(&tcp, Some(gid)).await,
        Err(ServeError::GroupOnTcp(_))
    ));
}

/// `runp health` against `endpoint` as uid/gid 65534, with or without `group` among its groups.
fn health_as_nobody(endpoint: &str, group: Option<u32>) -> std::process::Output {
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid", "65534", "--regid", "65534"]);
    match group {
        Some(gid) => cmd.arg(format!("--groups={gid}")),
        None => cmd.arg("--clear-groups"),
    };
    cmd.arg(env!("CARGO_BIN_EXE_runp"))
        .args(["health", "--timeout", "3", "--endpoint", endpoint])
        .output()
        .expect("run setpriv")
}

#[tokio::test]
async fn runp_serve_with_a_socket_group_lets_its_members_in_and_no_one_else() {
    let test = "runp_serve_with_a_socket_group_lets_its_members_in_and_no_one_else";
    let real_root = nix::unistd::geteuid().is_root()
        && std::fs::read_to_string("/proc/self/uid_map")
            .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]);
    if !real_root
        || std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_err()
    {
        eprintln!(
            "SKIP: {test}: needs real root and setpriv (util-linux) to connect as another user"
        );
        return;
    }
    const GID: u32 = 4242;
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .unwrap();
    // Others may traverse the test directory; the socket's own directory is runp's to make.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let socket = dir.path().join("sock/cri.sock");
    let endpoint = format!("unix://{}", socket.display());
    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(dir.path().join("root"))
        .args([
            "serve",
            "--network",
            "loopback",
            "--streaming-addr",
            "127.0.0.1:0",
        ])
        .args(["--listen", &endpoint, "--socket-group", &GID.to_string()])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start runp serve");
    let connected = RemoteRuntime::connect(&endpoint.parse().unwrap(), Default::default()).await;
    let outcome = (|| {
        connected.map_err(|e| format!("connect: {e}"))?;
        let meta = std::fs::symlink_metadata(&socket).unwrap();
        if (meta.permissions().mode() & 0o7777, meta.gid()) != (0o660, GID) {
            return Err(format!("socket {meta:?}"));
        }
        let member = health_as_nobody(&endpoint, Some(GID));
        if !member.status.success() {
            return Err(format!("a member was refused: {member:?}"));
        }
        let other = health_as_nobody(&endpoint, None);
        if other.status.success() {
            return Err(format!("a non-member got in: {other:?}"));
        }
        Ok(())
    })();
    let _ = serve.kill();
    let _ = serve.wait();
    if let Err(e) = outcome {
        let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
        panic!("{e}\n{log}");
    }
}
