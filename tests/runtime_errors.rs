//! Error codes at the CRI boundary: unknown ids, bad configs, duplicates, wrong states.

#[path = "support/runtime.rs"]
mod support;

use runp::cri::{RuntimeService, api};
use support::*;

fn code<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> tonic::Code {
    r.unwrap_err().code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_ids_bad_configs_and_duplicates() {
    let Some(env) = Env::for_test("unknown_ids_bad_configs_and_duplicates").await else {
        return;
    };
    let rt = &env.rt;
    let missing = "f".repeat(64);
    assert_eq!(
        code(
            rt.container_status(api::ContainerStatusRequest {
                container_id: missing.clone(),
                verbose: false
            })
            .await
        ),
        tonic::Code::NotFound
    );
    assert_eq!(
        code(
            rt.pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: missing.clone(),
                verbose: false
            })
            .await
        ),
        tonic::Code::NotFound
    );
    assert_eq!(
        code(
            rt.start_container(api::StartContainerRequest {
                container_id: missing.clone()
            })
            .await
        ),
        tonic::Code::NotFound
    );
    assert_eq!(
        code(
            rt.container_stats(api::ContainerStatsRequest {
                container_id: missing.clone()
            })
            .await
        ),
        tonic::Code::NotFound
    );
    // Stop/remove of unknown pods and remove of unknown containers are idempotent successes.
    rt.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: missing.clone(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: missing.clone(),
    })
    .await
    .unwrap();
    rt.remove_container(api::RemoveContainerRequest {
        container_id: missing.clone(),
    })
    .await
    .unwrap();

    assert_eq!(
        code(
            rt.run_pod_sandbox(api::RunPodSandboxRequest::default())
                .await
        ),
        tonic::Code::InvalidArgument
    );
    let mut bad_host = pod_config("badhost", &env.logs());
    // Longer than the kernel's 64 bytes (other names go to the kernel as they are).
    bad_host.hostname = "h".repeat(65);
    assert_eq!(
        code(
            rt.run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(bad_host),
                runtime_handler: String::new()
            })
            .await
        ),
        tonic::Code::InvalidArgument
    );

    let pod = env.pod("errs").await;
    // Same metadata while the first exists.
    assert_eq!(
        code(
            rt.run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(pod.1.clone()),
                runtime_handler: String::new()
            })
            .await
        ),
        tonic::Code::AlreadyExists
    );
    let first = env.create(&pod, shell("dup", "true")).await.unwrap();
    assert_eq!(
        env.create(&pod, shell("dup", "true"))
            .await
            .unwrap_err()
            .code(),
        tonic::Code::AlreadyExists
    );
    // A prefix of the id works where crictl uses short ids.
    let st = env.status(&first[..12]).await;
    assert_eq!(st.id, first);

    let mut no_image = shell("noimg", "true");
    no_image.image.as_mut().unwrap().image = "docker.io/library/absent:1".into();
    assert_eq!(
        env.create(&pod, no_image).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let mut rel = shell("relwd", "true");
    rel.working_dir = "relative/dir".into();
    assert_eq!(
        env.create(&pod, rel).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    let mut caps = shell("badcap", "true");
    caps.linux = Some(api::LinuxContainerConfig {
        resources: None,
        security_context: Some(api::LinuxContainerSecurityContext {
            capabilities: Some(api::Capability {
                add_capabilities: vec!["CAP_FLY".into()],
                ..Default::default()
            }),
            ..Default::default()
        }),
    });
    assert_eq!(
        env.create(&pod, caps).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    let mut mount = shell("badmount", "true");
    mount.mounts = vec![api::Mount {
        container_path: "rel".into(),
        host_path: "/tmp".into(),
        ..Default::default()
    }];
    assert_eq!(
        env.create(&pod, mount).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    // Failed creates leave no state behind and no name reserved.
    for kind in ["rt/containers", "rt/run/containers"] {
        let dirs = std::fs::read_dir(env.dir.path().join(kind))
            .unwrap()
            .count();
        assert_eq!(dirs, 1, "only the first container's state in {kind}");
    }
    env.create(&pod, shell("badmount", "true")).await.unwrap();

    // Starting twice is a wrong state.
    rt.start_container(api::StartContainerRequest {
        container_id: first.clone(),
    })
    .await
    .unwrap();
    assert_eq!(
        code(
            rt.start_container(api::StartContainerRequest {
                container_id: first.clone()
            })
            .await
        ),
        tonic::Code::FailedPrecondition
    );
    let v = rt.version(api::VersionRequest::default()).await.unwrap();
    assert_eq!(
        (v.runtime_name.as_str(), v.runtime_api_version.as_str()),
        ("runp", "v1")
    );
    let cfg = rt
        .runtime_config(api::RuntimeConfigRequest {})
        .await
        .unwrap();
    assert_eq!(
        cfg.linux.unwrap().cgroup_driver,
        api::CgroupDriver::Cgroupfs as i32
    );
    env.cleanup().await;
}

/// A shim whose start report does not come within the runtime's hang guard is killed; what it
/// had started by then (the infra process, libcontainer's waiting init, the container's
/// process) must go with it. The guard is set to a few milliseconds, so the kill lands at a
/// different step of the start each round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_past_the_hang_guard_leaves_no_process_behind() {
    const TEST: &str = "a_start_past_the_hang_guard_leaves_no_process_behind";
    if !is_root() {
        return skip(TEST, "root (real or mapped)");
    }
    let mut timed_out = 0;
    for ms in [2, 5, 10, 15, 20, 25, 30, 40, 50, 60, 80] {
        let env = Env::with(|o| o.shim_start_timeout = std::time::Duration::from_millis(ms)).await;
        let dir = env.dir.path().to_path_buf();
        let pod = env
            .rt
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(pod_config("guard", &env.logs())),
                runtime_handler: String::new(),
            })
            .await;
        match pod {
            Err(e) => {
                timed_out += 1;
                eprintln!("{ms} ms: RunPodSandbox failed");
                assert_no_leftover(&dir, None, &format!("{ms} ms, RunPodSandbox: {e}"));
            }
            Ok(r) => {
                let pod = (r.pod_sandbox_id, pod_config("guard", &env.logs()));
                let id = env.create(&pod, shell("c", "exec sleep 1000")).await;
                let started = env
                    .rt
                    .start_container(api::StartContainerRequest {
                        container_id: id.unwrap(),
                    })
                    .await;
                if let Err(e) = started {
                    timed_out += 1;
                    eprintln!("{ms} ms: StartContainer failed");
                    // The pod's infra and shim stay; only the container's processes must go.
                    let when = format!("{ms} ms, StartContainer: {e}");
                    assert_no_leftover(&dir, Some("/sandboxes/"), &when);
                }
            }
        }
        env.cleanup().await;
        assert_no_leftover(&dir, None, &format!("{ms} ms, after removing the pods"));
    }
    assert!(timed_out > 0, "no start ran past the hang guard");
}

/// Fails on processes under `dir` (but `except`) still there after 2 s (SIGKILL takes a
/// moment); kills them first, so a failure leaks nothing.
fn assert_no_leftover(dir: &std::path::Path, except: Option<&str>, when: &str) {
    let found = || {
        processes_under(dir, 0)
            .into_iter()
            .filter(|p| !except.is_some_and(|x| p.contains(x)))
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut left = found();
    while !left.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = found();
    }
    for p in &left {
        if let Some(pid) = p.split(':').next().and_then(|pid| pid.parse().ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    assert!(left.is_empty(), "{when}: left running: {left:?}");
}
