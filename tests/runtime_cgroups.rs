//! cgroup limits when cgroups are writable (real root), a clear degrade when not; host network.

#[path = "support/runtime.rs"]
mod support;

use runp::cri::{RuntimeService, api};
use std::path::{Path, PathBuf};
use support::*;

fn limited(name: &str) -> api::ContainerConfig {
    let mut c = shell(name, "echo up; exec sleep 1000");
    c.linux = Some(api::LinuxContainerConfig {
        resources: Some(api::LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            cpu_quota: 50_000,
            cpu_period: 100_000,
            cpu_shares: 512,
            ..Default::default()
        }),
        security_context: None,
    });
    c
}

/// The container's directory in a v1 controller or the unified hierarchy.
fn cgroup_file(cgroups_path: &str, controller: &str, file: &str) -> PathBuf {
    let rel = cgroups_path.trim_start_matches('/');
    let v1 = Path::new("/sys/fs/cgroup")
        .join(controller)
        .join(rel)
        .join(file);
    if v1.exists() {
        v1
    } else {
        Path::new("/sys/fs/cgroup").join(rel).join(file)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_apply_with_cgroups_or_degrade_clearly() {
    let Some(env) = Env::for_test("limits_apply_with_cgroups_or_degrade_clearly").await else {
        return;
    };
    let pod = env.pod("limits").await;
    let id = env.run(&pod, limited("capped")).await;
    env.log_lines("limits", "capped", 1).await;
    let verbose = env
        .rt
        .container_status(api::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: true,
        })
        .await
        .unwrap();
    let info: serde_json::Value = serde_json::from_str(&verbose.info["info"]).unwrap();
    let status = env
        .rt
        .status(api::StatusRequest { verbose: true })
        .await
        .unwrap();
    let runtime_info = &status.info["info"];
    let st = verbose.status.unwrap();
    assert_eq!(
        st.resources.unwrap().linux.unwrap().memory_limit_in_bytes,
        64 << 20
    );

    if !is_real_root() {
        // Rootless: no cgroup, and the runtime says why.
        assert!(info["cgroupsPath"].is_null(), "{info}");
        assert!(runtime_info.contains("not real root"), "{runtime_info}");
        env.cleanup().await;
        return;
    }
    let path = info["cgroupsPath"]
        .as_str()
        .expect("cgroups path as root")
        .to_string();
    assert!(path.contains(&id), "{path}");
    let read = |controller: &str, file: &str| {
        std::fs::read_to_string(cgroup_file(&path, controller, file))
            .unwrap_or_else(|e| panic!("{controller}/{file}: {e}"))
            .trim()
            .to_string()
    };
    let mem = if cgroup_file(&path, "memory", "memory.limit_in_bytes").exists() {
        read("memory", "memory.limit_in_bytes")
    } else {
        read("memory", "memory.max")
    };
    assert_eq!(mem, (64u64 << 20).to_string());
    if cgroup_file(&path, "cpu", "cpu.cfs_quota_us").exists() {
        assert_eq!(read("cpu", "cpu.cfs_quota_us"), "50000");
        assert_eq!(read("cpu", "cpu.shares"), "512");
    }
    // The container's process is in that cgroup.
    let pid = info["pid"].as_i64().unwrap();
    let procs = read("memory", "cgroup.procs");
    assert!(procs.lines().any(|p| p == pid.to_string()), "{procs}");

    env.rt
        .update_container_resources(api::UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(api::LinuxContainerResources {
                memory_limit_in_bytes: 128 << 20,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let mem = if cgroup_file(&path, "memory", "memory.limit_in_bytes").exists() {
        read("memory", "memory.limit_in_bytes")
    } else {
        read("memory", "memory.max")
    };
    assert_eq!(mem, (128u64 << 20).to_string());
    let pod_cgroup = Path::new(&path).parent().unwrap().to_path_buf();
    env.cleanup().await;
    assert!(
        !cgroup_file(pod_cgroup.to_str().unwrap(), "memory", "").exists(),
        "pod cgroup left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_network_pod_uses_the_node() {
    let Some(env) = Env::for_test("host_network_pod_uses_the_node").await else {
        return;
    };
    let mut config = pod_config("hostnet", &env.logs());
    config.linux = Some(api::LinuxPodSandboxConfig {
        security_context: Some(api::LinuxSandboxSecurityContext {
            namespace_options: Some(api::NamespaceOption {
                network: api::NamespaceMode::Node as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let pod_id = env
        .rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let status = env.pod_status(&pod_id, false).await.status.unwrap();
    let ip = status.network.unwrap().ip;
    assert!(!ip.is_empty());
    assert_eq!(
        status
            .linux
            .unwrap()
            .namespaces
            .unwrap()
            .options
            .unwrap()
            .network,
        api::NamespaceMode::Node as i32
    );
    let pod = (pod_id, config);
    let id = env.run(&pod, shell("hn", "hostname")).await;
    env.wait_exit(&id).await;
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(env.log_lines("hostnet", "hn", 1).await, vec![host]);
    env.cleanup().await;
}
