//! Pod and container lifecycle through the RuntimeService trait, with real processes.

#[path = "support/runtime.rs"]
mod support;

use futures::StreamExt;
use runp::cri::{RuntimeService, api};
use std::time::{Duration, Instant};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_pod_lifecycle_with_logs_and_events() {
    let Some(env) = Env::for_test("full_pod_lifecycle_with_logs_and_events").await else {
        return;
    };
    let mut events = env
        .rt
        .get_container_events(api::GetEventsRequest {})
        .await
        .unwrap();
    let pod = env.pod("life").await;

    let status = env.pod_status(&pod.0, true).await;
    let s = status.status.unwrap();
    assert_eq!(s.state, api::PodSandboxState::SandboxReady as i32);
    // Real root: an IP on the test bridge (the bridge network, auto's default); rootless:
    // loopback only.
    let ip = s.network.unwrap().ip;
    if is_real_root() {
        let cidr: ipnet::IpNet = TEST_POD_CIDR.parse().unwrap();
        assert!(
            cidr.contains(&ip.parse::<std::net::IpAddr>().unwrap()),
            "{ip}"
        );
    } else {
        assert_eq!(ip, "127.0.0.1");
    }
    assert!(
        s.created_at > 1_600_000_000_000_000_000,
        "created_at in ns: {}",
        s.created_at
    );
    let network = if is_real_root() {
        "bridge network runp"
    } else {
        "loopback only"
    };
    assert!(status.info["info"].contains(network), "{:?}", status.info);

    let id = env
        .run(
            &pod,
            shell("talker", "echo out-line; echo err-line >&2; exit 3"),
        )
        .await;
    let st = env.wait_exit(&id).await;
    assert_eq!(st.exit_code, 3);
    assert_eq!(st.reason, "Error");
    assert!(st.started_at > 0 && st.finished_at >= st.started_at);
    assert_eq!(st.image.as_ref().unwrap().image, BUSYBOX);
    assert!(st.image_ref.starts_with("sha256:"), "{}", st.image_ref);
    let log_path = env.logs().join("life").join("talker.log");
    assert_eq!(st.log_path, log_path.display().to_string());
    let lines = read_log(&log_path, 2).await;
    let mut got: Vec<(String, String, String)> = lines;
    got.sort();
    assert_eq!(
        got,
        vec![
            ("stderr".into(), "F".into(), "err-line".into()),
            ("stdout".into(), "F".into(), "out-line".into())
        ]
    );

    // created, started, stopped: in order, for this container.
    let mut kinds = Vec::new();
    while kinds.len() < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("event in time")
            .unwrap()
            .unwrap();
        if ev.container_id == id {
            kinds.push(ev.container_event_type);
        }
    }
    assert_eq!(
        kinds,
        vec![
            api::ContainerEventType::ContainerCreatedEvent as i32,
            api::ContainerEventType::ContainerStartedEvent as i32,
            api::ContainerEventType::ContainerStoppedEvent as i32,
        ]
    );

    let ok = env.run(&pod, shell("fine", "exit 0")).await;
    let st = env.wait_exit(&ok).await;
    assert_eq!((st.exit_code, st.reason.as_str()), (0, "Completed"));

    let listed = env
        .rt
        .list_containers(api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                pod_sandbox_id: pod.0.clone(),
                label_selector: [("container".to_string(), "fine".to_string())].into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .containers;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, ok);

    // The infra dying outside the runtime's doing is published for the sandbox id (the sync
    // loop's PLEG follows these events) and leaves the sandbox not ready.
    let info = env.pod_status(&pod.0, true).await.info;
    let info: serde_json::Value = serde_json::from_str(&info["info"]).unwrap();
    let infra = info["infraPid"].as_i64().expect("infra pid") as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(infra), nix::sys::signal::SIGKILL).unwrap();
    let stopped = loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the infra's event in time")
            .unwrap()
            .unwrap();
        if ev.container_id == pod.0 {
            break ev;
        }
    };
    assert_eq!(
        stopped.container_event_type,
        api::ContainerEventType::ContainerStoppedEvent as i32
    );
    let in_event = stopped.pod_sandbox_status.expect("the sandbox's status");
    assert_eq!(in_event.state, api::PodSandboxState::SandboxNotready as i32);
    assert_eq!(in_event.metadata.unwrap().name, "life");

    // Stop and remove are idempotent.
    for _ in 0..2 {
        env.rt
            .stop_pod_sandbox(api::StopPodSandboxRequest {
                pod_sandbox_id: pod.0.clone(),
            })
            .await
            .unwrap();
    }
    let s = env.pod_status(&pod.0, false).await.status.unwrap();
    assert_eq!(s.state, api::PodSandboxState::SandboxNotready as i32);
    for _ in 0..2 {
        env.rt
            .remove_pod_sandbox(api::RemovePodSandboxRequest {
                pod_sandbox_id: pod.0.clone(),
            })
            .await
            .unwrap();
    }
    let err = env
        .rt
        .container_status(api::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    for kind in ["rt/containers", "rt/run/containers", "rt/run/lc"] {
        assert!(
            !env.dir.path().join(kind).join(&id).exists(),
            "{kind}/{id} left"
        );
    }
    let zombies = lasting_zombies();
    assert!(zombies.is_empty(), "zombies: {zombies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_deaths_report_128_plus_signal() {
    let Some(env) = Env::for_test("signal_deaths_report_128_plus_signal").await else {
        return;
    };
    let pod = env.pod("sig").await;
    // In the pod's pid namespace the shell is not pid 1 (the infra is), so it can be killed
    // from inside.
    let mut config = shell("selfkill", "kill -9 $$");
    config.linux = Some(api::LinuxContainerConfig {
        resources: None,
        security_context: Some(api::LinuxContainerSecurityContext {
            namespace_options: Some(api::NamespaceOption {
                pid: api::NamespaceMode::Pod as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
    });
    let id = env.run(&pod, config).await;
    let st = env.wait_exit(&id).await;
    assert_eq!(st.exit_code, 137);
    assert_eq!(st.reason, "Error");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_grace_trapped_and_ignored() {
    let Some(env) = Env::for_test("stop_grace_trapped_and_ignored").await else {
        return;
    };
    let pod = env.pod("grace").await;
    // Traps SIGTERM: exits early with its own code.
    let trapped = env
        .run(
            &pod,
            shell(
                "trapper",
                "trap 'echo got-term; exit 42' TERM; echo ready; while true; do sleep 0.1; done",
            ),
        )
        .await;
    // pid 1 without a handler: SIGTERM is ignored, only SIGKILL ends it.
    let ignoring = env
        .run(&pod, shell("stubborn", "echo ready; exec sleep 1000"))
        .await;
    env.log_lines("grace", "trapper", 1).await;
    env.log_lines("grace", "stubborn", 1).await;

    let t0 = Instant::now();
    env.stop(&trapped, 20).await;
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "trapped SIGTERM should end early"
    );
    let st = env.status(&trapped).await;
    assert_eq!(st.exit_code, 42);

    let t0 = Instant::now();
    env.stop(&ignoring, 1).await;
    assert!(
        t0.elapsed() >= Duration::from_secs(1),
        "SIGKILL only after the timeout"
    );
    let st = env.status(&ignoring).await;
    assert_eq!(st.exit_code, 137, "{st:?}");
    // Idempotent.
    env.stop(&ignoring, 1).await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_signal_comes_from_the_image() {
    let Some(env) = Env::for_test("stop_signal_comes_from_the_image").await else {
        return;
    };
    let pod = env.pod("stopsig").await;
    // The extra image's StopSignal is SIGUSR1; its entrypoint is `/bin/sh -c`.
    let mut config = shell("usr1", "");
    config.command = vec![];
    config.args = vec![
        "trap 'exit 7' USR1; trap 'exit 9' TERM; echo ready; while true; do sleep 0.1; done".into(),
    ];
    config.image.as_mut().unwrap().image = EXTRA.to_string();
    // Root instead of the image's `app`, which does not exist as mapped root (rootless runs).
    config.linux = Some(api::LinuxContainerConfig {
        resources: None,
        security_context: Some(api::LinuxContainerSecurityContext {
            run_as_user: Some(api::Int64Value { value: 0 }),
            ..Default::default()
        }),
    });
    let id = env.run(&pod, config).await;
    env.log_lines("stopsig", "usr1", 1).await;
    env.stop(&id, 20).await;
    assert_eq!(env.status(&id).await.exit_code, 7);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_container_log_after_rotation() {
    let Some(env) = Env::for_test("reopen_container_log_after_rotation").await else {
        return;
    };
    let pod = env.pod("rotate").await;
    let id = env
        .run(
            &pod,
            shell(
                "ticker",
                "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.05; done",
            ),
        )
        .await;
    let log = env.logs().join("rotate/ticker.log");
    read_log(&log, 1).await;
    std::fs::rename(&log, log.with_extension("log.1")).unwrap();
    env.rt
        .reopen_container_log(api::ReopenContainerLogRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
    assert!(log.exists());
    let fresh = read_log(&log, 2).await;
    assert!(
        fresh.len() >= 2 && fresh[0].2.starts_with("tick-"),
        "{fresh:?}"
    );
    env.stop(&id, 0).await;
    let err = env
        .rt
        .reopen_container_log(api::ReopenContainerLogRequest { container_id: id })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    env.cleanup().await;
}
