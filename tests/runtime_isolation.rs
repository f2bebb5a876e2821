//! What a container can see and do, checked from inside it.

#[path = "support/runtime.rs"]
mod support;

use runp::cri::client::{RemoteOptions, RemoteRuntime};
use runp::cri::endpoint::CriEndpoint;
use runp::cri::server::CriListener;
use runp::cri::{RuntimeService, api};
use std::sync::Arc;
use support::*;

fn with_security(
    mut config: api::ContainerConfig,
    f: impl FnOnce(&mut api::LinuxContainerSecurityContext),
) -> api::ContainerConfig {
    let mut sc = api::LinuxContainerSecurityContext::default();
    f(&mut sc);
    config.linux = Some(api::LinuxContainerConfig {
        resources: None,
        security_context: Some(sc),
    });
    config
}

fn stdout(r: &api::ExecSyncResponse) -> String {
    String::from_utf8_lossy(&r.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_is_isolated() {
    let Some(env) = Env::for_test("container_is_isolated").await else {
        return;
    };
    let pod = env.pod("iso").await;
    let id = env
        .run(&pod, shell("box", "echo up; exec sleep 1000"))
        .await;
    env.log_lines("iso", "box", 1).await;

    // Own pid namespace: only its own processes (sleep as pid 1, the exec'd command).
    let ps = env
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '",
            ],
        )
        .await;
    let pids: Vec<i32> = stdout(&ps)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(pids.first(), Some(&1), "{pids:?}");
    // sleep, the exec'd sh and its pipeline: a handful, where the host has hundreds.
    assert!(pids.len() <= 8, "container sees host pids: {pids:?}");
    let comm = env.exec(&id, &["cat", "/proc/1/comm"]).await;
    assert_eq!(stdout(&comm), "sleep");

    // The pod's hostname and hosts files.
    assert_eq!(stdout(&env.exec(&id, &["hostname"]).await), "iso-host");
    assert_eq!(
        stdout(&env.exec(&id, &["cat", "/etc/hostname"]).await),
        "iso-host"
    );
    assert!(stdout(&env.exec(&id, &["cat", "/etc/hosts"]).await).contains("iso-host"));

    // Docker's default capability set: 14 caps, no CAP_SYS_ADMIN (bit 21).
    let status = stdout(&env.exec(&id, &["cat", "/proc/1/status"]).await);
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(cap_eff.count_ones(), 14, "CapEff {cap_eff:x}");
    assert_eq!(cap_eff & (1 << 21), 0, "CAP_SYS_ADMIN granted: {cap_eff:x}");

    // A write to a host path that is not mounted lands in the container's rootfs only.
    let marker = format!("/tmp/runp-iso-{}", std::process::id());
    let w = env
        .exec(
            &id,
            &["sh", "-c", &format!("echo x > {marker} && cat {marker}")],
        )
        .await;
    assert_eq!(w.exit_code, 0, "{w:?}");
    assert!(
        !std::path::Path::new(&marker).exists(),
        "container wrote the host's {marker}"
    );
    // Host-only paths are not there at all.
    let here = env.dir.path().display().to_string();
    let r = env.exec(&id, &["ls", &here]).await;
    assert_ne!(r.exit_code, 0, "host dir visible in the container");

    // Masked /proc paths (/proc/interrupts has content on the host).
    let masked = env
        .exec(&id, &["sh", "-c", "wc -c < /proc/interrupts"])
        .await;
    assert_eq!(stdout(&masked), "0", "{masked:?}");
    // Read-only /proc/sys.
    let sys = env
        .exec(&id, &["sh", "-c", "echo 1 > /proc/sys/kernel/ns_last_pid"])
        .await;
    assert_ne!(sys.exit_code, 0);

    // No fd of the runtime leaks into the container: pid 1 has only 0, 1, 2.
    let fds = env.exec(&id, &["ls", "/proc/1/fd"]).await;
    let mut fds: Vec<i32> = stdout(&fds)
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    fds.sort();
    assert_eq!(fds, vec![0, 1, 2], "leaked fds in the container");
    // Nor into an exec'd process (ls opens its own directory fd, 3).
    let fds = env.exec(&id, &["ls", "/proc/self/fd"]).await;
    let fds: Vec<i32> = stdout(&fds)
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    assert!(fds.iter().all(|f| *f <= 3), "leaked fds in exec: {fds:?}");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_context_is_honoured() {
    let Some(env) = Env::for_test("security_context_is_honoured").await else {
        return;
    };
    let pod = env.pod("secctx").await;

    let ro = with_security(shell("ro", "touch /newfile; echo rc=$?"), |sc| {
        sc.readonly_rootfs = true
    });
    let ro = env.run(&pod, ro).await;
    env.wait_exit(&ro).await;
    let lines = env.log_lines("secctx", "ro", 1).await;
    assert!(
        lines.iter().any(|l| l == "rc=1"),
        "read-only rootfs written: {lines:?}"
    );

    let caps = with_security(shell("caps", "grep CapEff /proc/self/status"), |sc| {
        sc.capabilities = Some(api::Capability {
            drop_capabilities: vec!["ALL".into()],
            add_capabilities: vec!["NET_ADMIN".into()],
            ..Default::default()
        });
        sc.no_new_privs = true;
    });
    let caps = env.run(&pod, caps).await;
    env.wait_exit(&caps).await;
    let lines = env.log_lines("secctx", "caps", 1).await;
    // CAP_NET_ADMIN is bit 12.
    assert!(
        lines.iter().any(|l| l.ends_with("0000000000001000")),
        "{lines:?}"
    );

    let user = with_security(shell("user", "id -u; id -g; id -G"), |sc| {
        sc.run_as_user = Some(api::Int64Value { value: 1000 });
        sc.supplemental_groups = vec![4242];
    });
    let mut extra = shell("extra", "");
    extra.image.as_mut().unwrap().image = EXTRA.to_string();
    extra.command = vec![];
    extra.args = vec!["id -un; pwd; cat /opt/extra/hello".into()];
    if !is_real_root() {
        // As mapped root only uid/gid 0 exist: a clear InvalidArgument, not a failed start.
        for config in [user, extra] {
            let err = env.create(&pod, config).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
            assert!(err.message().contains("not mapped"), "{err}");
        }
        env.cleanup().await;
        return;
    }
    let user = env.run(&pod, user).await;
    env.wait_exit(&user).await;
    let lines = env.log_lines("secctx", "user", 3).await;
    assert_eq!(lines[0], "1000");
    assert_eq!(lines[1], "1000", "primary group from /etc/passwd");
    assert!(
        lines[2].split_whitespace().any(|g| g == "4242"),
        "{lines:?}"
    );
    let st = env.status(&user).await;
    let linux_user = st.user.unwrap().linux.unwrap();
    assert_eq!((linux_user.uid, linux_user.gid), (1000, 1000));

    // The image's User (app) and WorkingDir, and command/args merging with its entrypoint.
    let extra = env.run(&pod, extra).await;
    env.wait_exit(&extra).await;
    let lines = env.log_lines("secctx", "extra", 3).await;
    assert_eq!(lines, vec!["app", "/home/app", "hello from extra"]);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_env_and_shared_pod_files() {
    let Some(env) = Env::for_test("mounts_env_and_shared_pod_files").await else {
        return;
    };
    let host_rw = env.dir.path().join("vol-rw");
    let host_ro = env.dir.path().join("vol-ro");
    std::fs::create_dir_all(&host_ro).unwrap();
    std::fs::write(host_ro.join("seed"), "seeded\n").unwrap();
    let mut pod_cfg = pod_config("mnt", &env.logs());
    pod_cfg.dns_config = Some(api::DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["default.svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    let pod_id = env
        .rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(pod_cfg.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let pod = (pod_id, pod_cfg);
    let mut cfg = shell(
        "mnt",
        "echo hi > /rw/out; cat /ro/seed; touch /ro/x 2>/dev/null || echo ro-denied; \
         echo \"$GREETING\"; cat /etc/resolv.conf; echo shm > /dev/shm/pod-file",
    );
    cfg.mounts = vec![
        api::Mount {
            container_path: "/rw".into(),
            // Missing on the host: created as a directory, as containerd does.
            host_path: host_rw.display().to_string(),
            ..Default::default()
        },
        api::Mount {
            container_path: "/ro".into(),
            host_path: host_ro.display().to_string(),
            readonly: true,
            ..Default::default()
        },
    ];
    cfg.envs = vec![api::KeyValue {
        key: "GREETING".into(),
        value: "hello env".into(),
    }];
    let id = env.run(&pod, cfg).await;
    assert_eq!(env.wait_exit(&id).await.exit_code, 0);
    let lines = env.log_lines("mnt", "mnt", 6).await;
    assert_eq!(
        std::fs::read_to_string(host_rw.join("out")).unwrap(),
        "hi\n"
    );
    assert!(!host_ro.join("x").exists());
    assert_eq!(
        &lines[..3],
        &["seeded", "ro-denied", "hello env"],
        "{lines:?}"
    );
    assert!(
        lines.contains(&"nameserver 10.96.0.10".to_string()),
        "{lines:?}"
    );
    assert!(lines.contains(&"options ndots:5".to_string()), "{lines:?}");
    // /dev/shm is the pod's: a second container sees the first one's file.
    let reader = env
        .run(&pod, shell("shm-reader", "cat /dev/shm/pod-file"))
        .await;
    env.wait_exit(&reader).await;
    let lines = env.log_lines("mnt", "shm-reader", 1).await;
    assert_eq!(lines[0], "shm");
    env.cleanup().await;
}

/// critest's sandboxes have no hostname and names longer than a hostname may be: they get the
/// node's hostname, as containerd gives it (RunPodSandbox through the CRI socket).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_without_a_hostname_gets_the_nodes_through_the_socket() {
    let Some(env) =
        Env::for_test("a_pod_without_a_hostname_gets_the_nodes_through_the_socket").await
    else {
        return;
    };
    let endpoint = CriEndpoint::Unix(env.dir.path().join("cri.sock"));
    let listener = CriListener::bind(&endpoint).await.expect("bind the socket");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server =
        tokio::spawn(
            listener.serve(env.rt.clone(), Arc::new(env.images.clone()), async move {
                let _ = stopped.await;
            }),
        );
    let cri = RemoteRuntime::connect(&endpoint, RemoteOptions::default())
        .await
        .expect("connect to the socket");

    let uuid: [u32; 4] = rand::random();
    let name = format!(
        "PodSandbox-with-log-directory-{:08x}-{:04x}-{:04x}-{:04x}-{:08x}{:04x}",
        uuid[0],
        uuid[1] >> 16,
        uuid[1] & 0xffff,
        uuid[2] >> 16,
        uuid[3],
        uuid[2] & 0xffff
    );
    assert_eq!(name.len(), 66, "{name}");
    let mut config = pod_config(&name, &env.logs());
    config.hostname = String::new();
    let pod_id = cri
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("RunPodSandbox without a hostname")
        .pod_sandbox_id;
    let id = cri
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: pod_id.clone(),
            config: Some(shell("hn", "exec sleep 1000")),
            sandbox_config: Some(config),
        })
        .await
        .expect("CreateContainer")
        .container_id;
    cri.start_container(api::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .expect("StartContainer");
    let node = nix::unistd::gethostname().expect("node hostname");
    let node = node.to_string_lossy();
    for cmd in [&["hostname"][..], &["cat", "/etc/hostname"]] {
        let out = cri
            .exec_sync(api::ExecSyncRequest {
                container_id: id.clone(),
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                timeout: 20,
            })
            .await
            .expect("ExecSync");
        assert_eq!(stdout(&out), node, "{cmd:?}");
    }
    cri.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: pod_id,
    })
    .await
    .expect("RemovePodSandbox");
    let _ = stop.send(());
    let _ = server.await;
    env.cleanup().await;
}
