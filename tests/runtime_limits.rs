//! Resource abuse stays inside its pod (real root with cgroups): a fork bomb meets the pod's
//! pids limit (`--pod-max-pids`) and dies with the pod; a memory limit that is hit is reported
//! as kubelet and containerd report it (reason OOMKilled, exit code 137).

#[path = "support/runtime.rs"]
mod support;

use runp::cri::{RuntimeService, api};
use std::path::PathBuf;
use std::time::Duration;
use support::*;

const MAX_PIDS: i64 = 48;

/// `<controller dir>/<cgroup>/<file>` in cgroup v1, else in the unified hierarchy.
fn cgroup_file(cgroup: &str, controller: &str, file: &str) -> PathBuf {
    let rel = cgroup.trim_start_matches('/');
    let v1 = PathBuf::from("/sys/fs/cgroup")
        .join(controller)
        .join(rel)
        .join(file);
    if v1.exists() {
        v1
    } else {
        PathBuf::from("/sys/fs/cgroup").join(rel).join(file)
    }
}

fn read(cgroup: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(cgroup_file(cgroup, "pids", file))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Processes on the host whose pids cgroup is `cgroup` or below it.
fn processes_in(cgroup: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            continue;
        };
        if text.lines().any(|l| {
            let path = l.rsplit(':').next().unwrap_or_default();
            path == cgroup || path.starts_with(&format!("{cgroup}/"))
        }) {
            found.push(pid);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_pids_limit_contains_a_fork_bomb_and_stopping_the_pod_ends_it() {
    let test = "pod_pids_limit_contains_a_fork_bomb_and_stopping_the_pod_ends_it";
    if !is_real_root() {
        skip(test, "real root (cgroups)");
        return;
    }
    let env = Env::with(|o| o.pod_max_pids = Some(MAX_PIDS)).await;
    let pod = env.pod("bomb").await;
    let info = env.pod_status(&pod.0, true).await.info["info"].clone();
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    let Some(cgroup) = info["cgroupParent"].as_str().map(str::to_string) else {
        // Real root without usable cgroups: nothing can hold the bomb, so it is not started.
        skip(test, &format!("usable cgroups ({})", info["cgroups"]));
        env.cleanup().await;
        return;
    };
    // The limit is in place before anything runs in the pod.
    assert_eq!(
        read(&cgroup, "pids.max").as_deref(),
        Some(MAX_PIDS.to_string().as_str())
    );
    // pid 1 stays (sleep), the bomb forks until the kernel refuses.
    env.run(&pod, shell("bomb", "f() { f | f & }; f; exec sleep 1000"))
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut peak = 0i64;
    loop {
        let current: i64 = read(&cgroup, "pids.current")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        peak = peak.max(current);
        assert!(current <= MAX_PIDS, "{current} processes in the pod");
        if current >= MAX_PIDS - 4 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bomb never reached the limit (peak {peak})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Refused forks are counted by the kernel, in pids.events of the pod cgroup or (older
    // kernels) of the forking task's, the container's, below it.
    let refused: u64 = walkdir::WalkDir::new(cgroup_file(&cgroup, "pids", ""))
        .into_iter()
        .flatten()
        .filter(|e| e.file_name() == "pids.events")
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|l| l.strip_prefix("max ")?.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum();
    assert!(refused > 0, "no fork was refused (peak {peak})");
    env.rt
        .stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .expect("stop pod");
    let left = processes_in(&cgroup);
    assert!(left.is_empty(), "processes left after stop: {left:?}");
    env.cleanup().await;
    assert!(
        !cgroup_file(&cgroup, "pids", "").exists(),
        "pod cgroup left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_limit_hit_is_oom_killed_with_exit_code_137() {
    let test = "a_memory_limit_hit_is_oom_killed_with_exit_code_137";
    if !is_real_root() {
        skip(test, "real root (cgroups)");
        return;
    }
    let env = Env::new().await;
    let pod = env.pod("oom").await;
    // The shell (the container's pid 1) holds 200 MB in a variable against a 32 MiB limit.
    let mut hog = shell(
        "hog",
        "v=$(head -c 200000000 /dev/zero | tr '\\0' x); echo survived ${#v}",
    );
    hog.linux = Some(api::LinuxContainerConfig {
        resources: Some(api::LinuxContainerResources {
            memory_limit_in_bytes: 32 << 20,
            ..Default::default()
        }),
        security_context: None,
    });
    let id = env.run(&pod, hog).await;
    let status = env.wait_exit(&id).await;
    let info = env.pod_status(&pod.0, true).await.info["info"].clone();
    if info.contains("\"cgroupParent\":null") {
        skip(test, "usable cgroups");
        env.cleanup().await;
        return;
    }
    assert_eq!(status.exit_code, 137, "{status:?}");
    assert_eq!(status.reason, "OOMKilled", "{status:?}");
    env.cleanup().await;
}
