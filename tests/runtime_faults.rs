//! Faults under `runp serve`: SIGKILL of the server in the middle of running pods and starting
//! containers, SIGKILL of a container's shim, truncated or garbage state files at start, a full
//! state root. After each, every pod and container is either fully there or cleanly gone,
//! nothing is duplicated, and everything can be stopped and removed without leaving processes
//! or mounts behind.

#[path = "support/serve.rs"]
mod serve;
#[path = "support/runtime.rs"]
mod support;

use runp::cri::{RuntimeService, api};
use serve::*;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_while_starting_containers_restarts_consistent() {
    const TEST: &str = "serve_killed_while_starting_containers_restarts_consistent";
    if !is_root() {
        return skip(TEST, "root (real or mapped)");
    }
    let (dir, _guard) = test_dir();
    let dir = dir.path();
    let served = Served::start(dir, 1).await;
    let pods = [
        run_pod(&served.rt, dir, "alpha").await,
        run_pod(&served.rt, dir, "beta").await,
    ];
    let names: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
    // Creates and starts race each other and the kill: each lands at its own step.
    let mut tasks = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (rt, pod, name) = (served.rt.clone(), pods[i % 2].clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            create_and_start(&rt, &pod, &name).await
        }));
    }
    // Killed once the first container runs, while the others are on their way.
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while !containers(&served.rt)
        .await
        .iter()
        .any(|c| c.state == api::ContainerState::ContainerRunning as i32)
    {
        assert!(std::time::Instant::now() < deadline, "no container started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    served.sigkill().await;
    for t in tasks {
        let _ = t.await;
    }

    let served = Served::start(dir, 2).await;
    let listed = sandboxes(&served.rt).await;
    let ids: HashSet<&str> = listed.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids.len(), 2, "{listed:?}");
    for pod in &pods {
        assert!(ids.contains(pod.0.as_str()), "{listed:?}");
    }
    let listed = containers(&served.rt).await;
    let mut seen = HashSet::new();
    for c in &listed {
        let name = c.metadata.as_ref().unwrap().name.clone();
        assert!(
            seen.insert((c.pod_sandbox_id.clone(), name.clone())),
            "duplicated {name}: {listed:?}"
        );
        let st = served
            .rt
            .container_status(api::ContainerStatusRequest {
                container_id: c.id.clone(),
                verbose: false,
            })
            .await
            .expect("container status")
            .status
            .unwrap();
        assert_eq!(st.state, c.state, "{st:?}");
        if st.state == api::ContainerState::ContainerExited as i32 {
            assert!(!st.reason.is_empty(), "{st:?}");
        }
    }
    // What the kill cut short can be done again under the same names: nothing stale holds
    // them. Created-only containers start.
    for (i, name) in names.iter().enumerate() {
        let pod = &pods[i % 2];
        match listed
            .iter()
            .find(|c| c.metadata.as_ref().unwrap().name == *name)
        {
            None => {
                create_and_start(&served.rt, pod, name)
                    .await
                    .unwrap_or_else(|e| panic!("{name} again: {e}\n{}", served.log_text()));
            }
            Some(c) if c.state == api::ContainerState::ContainerCreated as i32 => {
                served
                    .rt
                    .start_container(api::StartContainerRequest {
                        container_id: c.id.clone(),
                    })
                    .await
                    .unwrap_or_else(|e| panic!("start {name}: {e}\n{}", served.log_text()));
            }
            Some(_) => {}
        }
    }
    assert_eq!(containers(&served.rt).await.len(), names.len());
    remove_everything_and_check(&served, dir).await;
    served.sigkill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shim_reports_the_container_exited_and_it_can_be_removed() {
    const TEST: &str = "a_killed_shim_reports_the_container_exited_and_it_can_be_removed";
    if !is_root() {
        return skip(TEST, "root (real or mapped)");
    }
    let (dir, _guard) = test_dir();
    let dir = dir.path();
    let served = Served::start(dir, 1).await;
    let pod = run_pod(&served.rt, dir, "shimless").await;
    let id = create_and_start(&served.rt, &pod, "victim").await.unwrap();
    let st = served
        .rt
        .container_status(api::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: true,
        })
        .await
        .unwrap();
    let info: serde_json::Value = serde_json::from_str(&st.info["info"]).unwrap();
    let (shim, pid) = (
        info["shimPid"].as_i64().expect("shimPid") as i32,
        info["pid"].as_i64().expect("pid") as i32,
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(shim),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + HANG_GUARD;
    let st = loop {
        let st = served
            .rt
            .container_status(api::ContainerStatusRequest {
                container_id: id.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .status
            .unwrap();
        if st.state == api::ContainerState::ContainerExited as i32 {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "still {st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(st.exit_code, 0, "{st:?}");
    assert!(!st.reason.is_empty() && !st.message.is_empty(), "{st:?}");
    // The container's process does not outlive its shim.
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while Path::new(&format!("/proc/{pid}/cmdline")).exists()
        && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty())
    {
        assert!(std::time::Instant::now() < deadline, "pid {pid} lives on");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The runtime stays responsive and the pod usable.
    let other = create_and_start(&served.rt, &pod, "survivor")
        .await
        .unwrap();
    served
        .rt
        .remove_container(api::RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .expect("remove the shimless container");
    let left: Vec<String> = containers(&served.rt)
        .await
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(left, vec![other]);
    remove_everything_and_check(&served, dir).await;
    served.sigkill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_state_files_are_reported_by_name_and_do_not_block_the_rest() {
    const TEST: &str = "unreadable_state_files_are_reported_by_name_and_do_not_block_the_rest";
    if !is_root() {
        return skip(TEST, "root (real or mapped)");
    }
    let (dir, _guard) = test_dir();
    let dir = dir.path();
    let state = dir.join("root/runtime");
    let served = Served::start(dir, 1).await;
    let mut pods = Vec::new();
    for name in ["truncated", "garbage", "intact"] {
        let pod = run_pod(&served.rt, dir, name).await;
        let id = create_and_start(&served.rt, &pod, "main").await.unwrap();
        pods.push((pod, id));
    }
    served.sigkill().await;

    // A sandbox record cut in half, a container record overwritten with garbage, and the
    // directories a RunPodSandbox and a CreateContainer killed before their records leave.
    let truncated = state
        .join("sandboxes")
        .join(&pods[0].0.0)
        .join("sandbox.json");
    let text = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let garbage = state
        .join("containers")
        .join(&pods[1].1)
        .join("container.json");
    std::fs::write(&garbage, b"\x00\xffnot json at all").unwrap();
    // The run dirs are in the state dir (`<root>/run` by default); one of them, left by a
    // removal cut short, has no record dir at all.
    let run = dir.join("root/run/runtime");
    let half_pod = state.join("sandboxes").join("a".repeat(64));
    std::fs::create_dir_all(&half_pod).unwrap();
    let half_pod_run = run.join("sandboxes").join("a".repeat(64));
    std::fs::create_dir_all(half_pod_run.join("ns")).unwrap();
    let half_container = state.join("containers").join("b".repeat(64));
    std::fs::create_dir_all(&half_container).unwrap();
    let half_container_run = run.join("containers").join("b".repeat(64));
    std::fs::create_dir_all(half_container_run.join("bundle")).unwrap();
    let stray_run = run.join("containers").join("c".repeat(64));
    std::fs::create_dir_all(stray_run.join("bundle")).unwrap();

    let served = Served::start(dir, 2).await;
    let log = served.log_text();
    for file in [&truncated, &garbage] {
        assert!(log.contains(&file.display().to_string()), "{log}");
    }
    for left in [
        &half_pod,
        &half_pod_run,
        &half_container,
        &half_container_run,
        &stray_run,
    ] {
        assert!(!left.exists(), "{} is left\n{log}", left.display());
    }
    // The rest loads and works.
    let listed: HashSet<String> = sandboxes(&served.rt)
        .await
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(
        listed,
        HashSet::from([pods[1].0.0.clone(), pods[2].0.0.clone()])
    );
    let intact = status_of(&served.rt, &pods[2].1).await.unwrap();
    assert_eq!(intact.state, api::ContainerState::ContainerRunning as i32);
    let r = served
        .rt
        .exec_sync(api::ExecSyncRequest {
            container_id: pods[2].1.clone(),
            cmd: vec!["echo".into(), "alive".into()],
            timeout: 10,
        })
        .await
        .unwrap();
    assert_eq!(r.stdout, b"alive\n");
    assert_eq!(
        status_of(&served.rt, &pods[1].1).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    create_and_start(&served.rt, &pods[2].0, "second")
        .await
        .unwrap();
    // The unreadable entries are removed by their ids, with what ran for them.
    served
        .rt
        .remove_container(api::RemoveContainerRequest {
            container_id: pods[1].1.clone(),
        })
        .await
        .expect("remove the container with the garbage record");
    served
        .rt
        .remove_pod_sandbox(api::RemovePodSandboxRequest {
            pod_sandbox_id: pods[0].0.0.clone(),
        })
        .await
        .expect("remove the sandbox with the truncated record");
    assert!(!garbage.parent().unwrap().exists());
    assert!(!truncated.parent().unwrap().exists());
    remove_everything_and_check(&served, dir).await;
    served.sigkill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_state_root_fails_creation_cleanly_and_it_succeeds_after_freeing_space() {
    const TEST: &str =
        "a_full_state_root_fails_creation_cleanly_and_it_succeeds_after_freeing_space";
    if !is_real_root() {
        return skip(TEST, "real root (mounts a tmpfs as the state root)");
    }
    // The runtime's root is a small tmpfs (the leak guard detaches it).
    let env = Env::with(|opts| {
        std::fs::create_dir_all(&opts.root).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            &opts.root,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=8m,mode=0700"),
        )
        .expect("mount a tmpfs");
    })
    .await;
    let root = env.dir.path().join("rt");
    let pod = env.pod("roomy").await;
    fill(&root);
    let leases = env.dir.path().join("images/leases");
    let before = (
        entries(&root.join("sandboxes")).len(),
        entries(&root.join("containers")),
        entries(&leases),
        mounts_under(&root),
    );
    let err = env
        .rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(pod_config("cramped", &env.logs())),
            runtime_handler: String::new(),
        })
        .await
        .unwrap_err();
    assert!(err.message().contains("No space left on device"), "{err:?}");
    let err = env
        .create(&pod, shell("cramped", "exec sleep 1000"))
        .await
        .unwrap_err();
    assert!(err.message().contains("No space left on device"), "{err:?}");
    // Nothing half-created: no state, rootfs lease or mount, nothing listed.
    let after = (
        entries(&root.join("sandboxes")).len(),
        entries(&root.join("containers")),
        entries(&leases),
        mounts_under(&root),
    );
    assert_eq!(after, before);
    let listed = env
        .rt
        .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .items;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let listed = env
        .rt
        .list_containers(api::ListContainersRequest { filter: None })
        .await
        .unwrap()
        .containers;
    assert!(listed.is_empty(), "{listed:?}");
    // With room again the same calls succeed.
    std::fs::remove_file(root.join("filler")).unwrap();
    env.pod("cramped").await;
    let id = env.run(&pod, shell("cramped", "exec sleep 1000")).await;
    assert_eq!(
        env.status(&id).await.state,
        api::ContainerState::ContainerRunning as i32
    );
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_killed_while_running_pods_restarts_consistent() {
    const TEST: &str = "serve_killed_while_running_pods_restarts_consistent";
    if !is_root() {
        return skip(TEST, "root (real or mapped)");
    }
    let (dir, _guard) = test_dir();
    let dir = dir.path();
    let served = Served::start(dir, 1).await;
    let names: Vec<String> = (0..4).map(|i| format!("pod{i}")).collect();
    // Each pod is run and gets a container; the kill lands somewhere in the middle.
    let mut tasks = Vec::new();
    for name in &names {
        let (rt, name, dir) = (served.rt.clone(), name.clone(), dir.to_path_buf());
        tasks.push(tokio::spawn(async move {
            let config = pod_config(&name, &dir.join("logs"));
            let id = rt
                .run_pod_sandbox(api::RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: String::new(),
                })
                .await?
                .pod_sandbox_id;
            create_and_start(&rt, &(id, config), "main").await
        }));
    }
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while sandboxes(&served.rt).await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "no sandbox ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    served.sigkill().await;
    for t in tasks {
        let _ = t.await;
    }

    let served = Served::start(dir, 2).await;
    let listed = sandboxes(&served.rt).await;
    let mut seen = HashSet::new();
    for pod in &listed {
        let name = pod.metadata.as_ref().unwrap().name.clone();
        assert!(seen.insert(name.clone()), "duplicated {name}: {listed:?}");
        let status = served
            .rt
            .pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: pod.id.clone(),
                verbose: false,
            })
            .await
            .expect("pod sandbox status")
            .status
            .unwrap();
        assert_eq!(status.state, pod.state, "{status:?}");
        // A pod cut short before it was ready is stopped and removed, as a kubelet would.
        if pod.state != api::PodSandboxState::SandboxReady as i32 {
            served
                .rt
                .remove_pod_sandbox(api::RemovePodSandboxRequest {
                    pod_sandbox_id: pod.id.clone(),
                })
                .await
                .expect("remove a not-ready pod");
        }
    }
    for c in containers(&served.rt).await {
        status_of(&served.rt, &c.id)
            .await
            .expect("container status");
    }
    // Every pod and container can be had again under its name.
    let ready: Vec<api::PodSandbox> = sandboxes(&served.rt).await;
    for name in &names {
        let existing = ready
            .iter()
            .find(|p| p.metadata.as_ref().unwrap().name == *name);
        let pod = match existing {
            Some(p) => (p.id.clone(), pod_config(name, &dir.join("logs"))),
            None => run_pod(&served.rt, dir, name).await,
        };
        let has_main = containers(&served.rt)
            .await
            .iter()
            .any(|c| c.pod_sandbox_id == pod.0);
        if !has_main {
            create_and_start(&served.rt, &pod, "main")
                .await
                .unwrap_or_else(|e| panic!("{name} main: {e}\n{}", served.log_text()));
        }
    }
    assert_eq!(sandboxes(&served.rt).await.len(), names.len());
    assert_eq!(containers(&served.rt).await.len(), names.len());
    remove_everything_and_check(&served, dir).await;
    served.sigkill().await;
}

/// Children of `parent` started as `runp zygote`.
fn zygotes_of(parent: i32) -> Vec<i32> {
    children_where(parent, |pid, _| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        runp::jail::is_zygote_cmdline(&cmdline)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_shim_zygote_is_replaced_and_its_shims_run_on() {
    const TEST: &str = "a_killed_shim_zygote_is_replaced_and_its_shims_run_on";
    if !is_root() {
        return skip(TEST, "root (real or mapped)");
    }
    let (dir, _guard) = test_dir();
    let dir = dir.path();
    let served = Served::start(dir, 1).await;
    let pod = run_pod(&served.rt, dir, "first").await;
    let first = create_and_start(&served.rt, &pod, "before").await.unwrap();
    let zygotes = zygotes_of(served.pid);
    assert_eq!(zygotes.len(), 1, "one zygote forks the shims: {zygotes:?}");
    // Not `kill`: the zygote is the server's child, not ours to reap.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(zygotes[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while zygotes_of(served.pid).contains(&zygotes[0]) {
        assert!(std::time::Instant::now() < deadline, "the zygote lives on");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The next start notices, and a new zygote forks its shims.
    let other = run_pod(&served.rt, dir, "second").await;
    let second = create_and_start(&served.rt, &other, "after").await.unwrap();
    let replaced = zygotes_of(served.pid);
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    assert_ne!(replaced[0], zygotes[0]);
    for id in [&first, &second] {
        let st = status_of(&served.rt, id).await.unwrap();
        assert_eq!(
            st.state,
            api::ContainerState::ContainerRunning as i32,
            "{st:?}"
        );
    }
    remove_everything_and_check(&served, dir).await;
    served.sigkill().await;
}
