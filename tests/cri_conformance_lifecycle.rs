//! CRI conformance through the gRPC socket of `runp serve`: Version and Status, pod and
//! container lifecycle with every status field, list filters (id prefix, state, labels),
//! NotFound for unknown ids, idempotent Stop/Remove. What critest's runtime_info, pod and
//! container specs check, as containerd answers them (ExecSync and logs: see
//! cri_conformance_streaming).

#[path = "support/conformance.rs"]
mod conformance;
#[path = "support/serve.rs"]
mod serve;
#[path = "support/runtime.rs"]
mod support;

use conformance::*;
use runp::cri::{RuntimeService, api};
use serve::status_of;
use std::collections::HashMap;
use support::*;
use tonic::Code;

const READY: i32 = api::PodSandboxState::SandboxReady as i32;
const NOTREADY: i32 = api::PodSandboxState::SandboxNotready as i32;
const CREATED: i32 = api::ContainerState::ContainerCreated as i32;
const RUNNING: i32 = api::ContainerState::ContainerRunning as i32;
const EXITED: i32 = api::ContainerState::ContainerExited as i32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_conformance_lifecycle() {
    let Some(s) = Suite::start("cri_conformance_lifecycle").await else {
        return;
    };
    s.run(vec![
        ("version_and_status", Box::pin(version_and_status(&s))),
        ("pod_lifecycle", Box::pin(pod_lifecycle(&s))),
        ("container_lifecycle", Box::pin(container_lifecycle(&s))),
        ("exit_reasons", Box::pin(exit_reasons(&s))),
        (
            "not_found_and_idempotent",
            Box::pin(not_found_and_idempotent(&s)),
        ),
    ])
    .await;
}

/// critest runtime_info: Version names the runtime and API v1; Status has both conditions true.
async fn version_and_status(s: &Suite) {
    let v = s
        .rt()
        .version(api::VersionRequest {
            version: "0.1.0".into(),
        })
        .await
        .unwrap();
    assert_eq!(v.version, "0.1.0");
    assert_eq!(v.runtime_name, "runp");
    assert!(!v.runtime_version.is_empty(), "{v:?}");
    assert_eq!(v.runtime_api_version, "v1");
    let status = s
        .rt()
        .status(api::StatusRequest { verbose: false })
        .await
        .unwrap()
        .status
        .expect("a runtime status");
    let conditions: HashMap<&str, bool> = status
        .conditions
        .iter()
        .map(|c| (c.r#type.as_str(), c.status))
        .collect();
    assert_eq!(conditions.get("RuntimeReady"), Some(&true), "{status:?}");
    assert_eq!(conditions.get("NetworkReady"), Some(&true), "{status:?}");
}

async fn list_pods(s: &Suite, filter: api::PodSandboxFilter) -> Vec<String> {
    let mut ids: Vec<String> = s
        .rt()
        .list_pod_sandbox(api::ListPodSandboxRequest {
            filter: Some(filter),
        })
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| p.id)
        .collect();
    ids.sort();
    ids
}

/// critest pod specs: status fields, list filters by id, id prefix, state and labels, stop
/// then remove (each twice).
async fn pod_lifecycle(s: &Suite) {
    let before = now_ns();
    let mut config = s.pod_config("lc-pod");
    config.labels = labels(&[("conformance", "pod"), ("which", "first")]);
    config.annotations = labels(&[("note", "kept as given")]);
    let (id, config) = s.pod(config).await;
    let mut other = s.pod_config("lc-pod-other");
    other.labels = labels(&[("conformance", "pod"), ("which", "second")]);
    let (other_id, _) = s.pod(other).await;

    let status = s.pod_status(&id).await;
    assert_eq!(status.id, id);
    assert_eq!(status.metadata, config.metadata);
    assert_eq!(status.state, READY);
    assert!(
        (before..=now_ns()).contains(&status.created_at),
        "created_at {} is not ns since the epoch",
        status.created_at
    );
    assert_eq!(status.labels, config.labels);
    assert_eq!(status.annotations, config.annotations);
    let ns = status
        .linux
        .and_then(|l| l.namespaces)
        .and_then(|n| n.options)
        .expect("namespace options");
    assert_eq!(ns.network, api::NamespaceMode::Pod as i32);
    assert_eq!(ns.pid, api::NamespaceMode::Pod as i32);

    let by = |f: api::PodSandboxFilter| list_pods(s, f);
    let both = {
        let mut v = vec![id.clone(), other_id.clone()];
        v.sort();
        v
    };
    let id_filter = |id: &str| api::PodSandboxFilter {
        id: id.to_string(),
        ..Default::default()
    };
    assert_eq!(by(id_filter(&id)).await, vec![id.clone()]);
    assert_eq!(
        by(id_filter(&id[..12])).await,
        vec![id.clone()],
        "id prefix"
    );
    let select = |pairs: &[(&str, &str)]| api::PodSandboxFilter {
        label_selector: labels(pairs),
        ..Default::default()
    };
    assert_eq!(by(select(&[("conformance", "pod")])).await, both);
    assert_eq!(
        by(select(&[("conformance", "pod"), ("which", "second")])).await,
        vec![other_id.clone()]
    );
    assert_eq!(
        by(select(&[("conformance", "none")])).await,
        Vec::<String>::new()
    );

    for _ in 0..2 {
        s.rt()
            .stop_pod_sandbox(api::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
            .expect("stop pod (again)");
    }
    let state = |state: i32| api::PodSandboxFilter {
        state: Some(api::PodSandboxStateValue { state }),
        label_selector: labels(&[("conformance", "pod")]),
        ..Default::default()
    };
    assert_eq!(by(state(NOTREADY)).await, vec![id.clone()]);
    assert_eq!(by(state(READY)).await, vec![other_id.clone()]);
    for pod in [&id, &id, &other_id] {
        s.rt()
            .remove_pod_sandbox(api::RemovePodSandboxRequest {
                pod_sandbox_id: pod.clone(),
            })
            .await
            .expect("remove pod (again)");
    }
    assert_eq!(
        by(select(&[("conformance", "pod")])).await,
        Vec::<String>::new()
    );
    let gone = s
        .rt()
        .pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: id.clone(),
            verbose: false,
        })
        .await
        .expect_err("status of a removed pod");
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
}

async fn list_containers(s: &Suite, filter: api::ContainerFilter) -> Vec<String> {
    let mut ids: Vec<String> = s
        .rt()
        .list_containers(api::ListContainersRequest {
            filter: Some(filter),
        })
        .await
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

/// critest container specs: created / running / exited with every status field, list filters.
async fn container_lifecycle(s: &Suite) {
    let pod = s.pod(s.pod_config("lc-ctr")).await;
    let host_file = s.dir.path().join("lc-ctr-mounted");
    std::fs::write(&host_file, "mounted\n").unwrap();
    // PID 1 has no default action for SIGTERM: the trap ends it.
    let script = "trap 'exit 42' TERM; while true; do sleep 0.1; done";
    let config = container("main", script, |c| {
        c.labels = labels(&[("conformance", "ctr"), ("which", "main")]);
        c.annotations = labels(&[("note", "ctr annotation")]);
        c.mounts = vec![api::Mount {
            container_path: "/mnt/file".into(),
            host_path: host_file.display().to_string(),
            readonly: true,
            ..Default::default()
        }];
        c.linux.get_or_insert_with(Default::default).resources =
            Some(api::LinuxContainerResources {
                cpu_shares: 512,
                memory_limit_in_bytes: 64 << 20,
                ..Default::default()
            });
    });
    let before = now_ns();
    let id = s.create(&pod, config.clone()).await.expect("create");
    let created = s.status(&id).await;
    assert_eq!(created.state, CREATED);
    assert!(
        (before..=now_ns()).contains(&created.created_at),
        "{created:?}"
    );
    assert_eq!((created.started_at, created.finished_at), (0, 0));

    let idle = s
        .create(
            &pod,
            container("idle", "exit 0", |c| {
                c.labels = labels(&[("conformance", "ctr")])
            }),
        )
        .await
        .expect("create idle");
    s.rt()
        .start_container(api::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .expect("start");
    let running = s.status(&id).await;
    assert_eq!(running.state, RUNNING);
    assert!(running.started_at >= running.created_at, "{running:?}");
    assert_eq!(running.finished_at, 0);
    assert_eq!(running.id, id);
    assert_eq!(running.metadata, config.metadata);
    assert_eq!(running.labels, config.labels);
    assert_eq!(running.annotations, config.annotations);
    assert_eq!(
        running.image.as_ref().map(|i| i.image.as_str()),
        Some(BUSYBOX)
    );
    let image = s.image(BUSYBOX).await.expect("busybox is there");
    assert!(
        running.image_ref == image.id || image.repo_digests.contains(&running.image_ref),
        "image_ref {:?} is neither the id nor a digest of {image:?}",
        running.image_ref
    );
    assert_eq!(
        running.log_path,
        format!("{}/main.log", pod.1.log_directory),
        "the log path is log_directory/log_path"
    );
    let mount = running.mounts.first().expect("the mount is reported");
    assert_eq!(
        (
            mount.container_path.as_str(),
            mount.host_path.as_str(),
            mount.readonly
        ),
        ("/mnt/file", host_file.to_str().unwrap(), true)
    );
    let resources = running
        .resources
        .and_then(|r| r.linux)
        .expect("linux resources");
    assert_eq!(resources.cpu_shares, 512);
    assert_eq!(resources.memory_limit_in_bytes, 64 << 20);
    assert_eq!(s.sh(&id, "cat /mnt/file").await, "mounted");

    let by = |f: api::ContainerFilter| list_containers(s, f);
    let id_filter = |id: &str| api::ContainerFilter {
        id: id.to_string(),
        ..Default::default()
    };
    assert_eq!(by(id_filter(&id)).await, vec![id.clone()]);
    assert_eq!(
        by(id_filter(&id[..12])).await,
        vec![id.clone()],
        "id prefix"
    );
    let state = |state: i32| api::ContainerFilter {
        state: Some(api::ContainerStateValue { state }),
        pod_sandbox_id: pod.0.clone(),
        ..Default::default()
    };
    assert_eq!(by(state(RUNNING)).await, vec![id.clone()]);
    assert_eq!(by(state(CREATED)).await, vec![idle.clone()]);
    let select = |pairs: &[(&str, &str)]| api::ContainerFilter {
        label_selector: labels(pairs),
        ..Default::default()
    };
    let mut both = vec![id.clone(), idle.clone()];
    both.sort();
    assert_eq!(by(select(&[("conformance", "ctr")])).await, both);
    assert_eq!(by(select(&[("which", "main")])).await, vec![id.clone()]);

    s.rt()
        .stop_container(api::StopContainerRequest {
            container_id: id.clone(),
            timeout: 10,
        })
        .await
        .expect("stop");
    let exited = s.status(&id).await;
    assert_eq!(exited.state, EXITED);
    assert!(exited.finished_at >= exited.started_at, "{exited:?}");
    assert_eq!(exited.exit_code, 42, "SIGTERM runs the trap: {exited:?}");
    assert_eq!(exited.reason, "Error");
    assert_eq!(by(state(EXITED)).await, vec![id.clone()]);
    for ctr in [&id, &idle] {
        s.rt()
            .remove_container(api::RemoveContainerRequest {
                container_id: ctr.clone(),
            })
            .await
            .expect("remove");
    }
    assert_eq!(
        by(select(&[("conformance", "ctr")])).await,
        Vec::<String>::new()
    );
}

/// containerd's reasons: Completed for exit 0, Error otherwise; the exit code as the process's.
async fn exit_reasons(s: &Suite) {
    let pod = s.pod(s.pod_config("lc-exit")).await;
    for (name, script, code, reason) in [
        ("zero", "exit 0", 0, "Completed"),
        ("three", "exit 3", 3, "Error"),
    ] {
        let id = s.run_container(&pod, container(name, script, |_| {})).await;
        let st = s.wait_exit(&id).await;
        assert_eq!(
            (st.exit_code, st.reason.as_str()),
            (code, reason),
            "{name}: {st:?}"
        );
        assert!(
            st.finished_at >= st.started_at && st.started_at > 0,
            "{st:?}"
        );
    }
}

/// Unknown ids are NotFound; Stop and Remove of removed containers and pods succeed.
async fn not_found_and_idempotent(s: &Suite) {
    let unknown = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let rt = s.rt();
    let codes = [
        status_of(rt, unknown).await.err().map(|e| e.code()),
        rt.start_container(api::StartContainerRequest {
            container_id: unknown.into(),
        })
        .await
        .err()
        .map(|e| e.code()),
        rt.exec_sync(api::ExecSyncRequest {
            container_id: unknown.into(),
            cmd: vec!["true".into()],
            timeout: 5,
        })
        .await
        .err()
        .map(|e| e.code()),
        rt.container_stats(api::ContainerStatsRequest {
            container_id: unknown.into(),
        })
        .await
        .err()
        .map(|e| e.code()),
        rt.create_container(api::CreateContainerRequest {
            pod_sandbox_id: unknown.into(),
            config: Some(shell("orphan", "true")),
            sandbox_config: Some(s.pod_config("nowhere")),
        })
        .await
        .err()
        .map(|e| e.code()),
    ];
    assert_eq!(codes, [Some(Code::NotFound); 5]);

    let pod = s.pod(s.pod_config("lc-idem")).await;
    let id = s
        .run_container(&pod, container("c", "exec sleep 1000", |_| {}))
        .await;
    for _ in 0..2 {
        rt.stop_container(api::StopContainerRequest {
            container_id: id.clone(),
            timeout: 0,
        })
        .await
        .expect("stop (again)");
    }
    // SIGKILLed: exit code 137, reason Error and, as containerd, no message (kubelet would
    // put it in front of the container's termination message).
    let killed = s.status(&id).await;
    assert_eq!(
        (
            killed.exit_code,
            killed.reason.as_str(),
            killed.message.as_str()
        ),
        (137, "Error", ""),
        "{killed:?}"
    );
    for _ in 0..2 {
        rt.remove_container(api::RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .expect("remove (again)");
    }
    assert_eq!(status_of(rt, &id).await.unwrap_err().code(), Code::NotFound);
    rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: pod.0.clone(),
    })
    .await
    .expect("remove a pod without stopping it first");
    rt.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: pod.0.clone(),
    })
    .await
    .expect("stop a removed pod");
}
