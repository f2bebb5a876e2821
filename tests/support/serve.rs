//! `runp serve` as a separate process for the fault tests (it is SIGKILLed and started again on
//! the same roots) and checks that nothing of a test's pods remains afterwards.
#![allow(dead_code)]

use crate::support::*;
use runp::cri::client::RemoteRuntime;
use runp::cri::{RuntimeService, api};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const HANG_GUARD: Duration = Duration::from_secs(20);

/// `runp serve` on `<dir>/root`: [`Served::sigkill`] kills and reaps it; dropped, it is killed.
pub struct Served {
    pub pid: i32,
    pub rt: RemoteRuntime,
    pub log: PathBuf,
}

impl Served {
    pub async fn start(dir: &Path, run: usize) -> Served {
        Self::start_with(dir, run, &["--network", "loopback"]).await
    }

    /// Like [`Served::start`] with these arguments (network, registry, ...) instead of
    /// `--network loopback`.
    pub async fn start_with(dir: &Path, run: usize, args: &[&str]) -> Served {
        let socket = dir.join("cri.sock");
        let log = dir.join(format!("serve-{run}.log"));
        let file = std::fs::File::create(&log).unwrap();
        // Reaped by the test process's reaper (see `kill`), never by `Child::wait`.
        #[allow(clippy::zombie_processes)]
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_runp"))
            .arg("--root")
            .arg(dir.join("root"))
            .arg("serve")
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .args(args)
            .args(["--streaming-addr", "127.0.0.1:0"])
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start runp serve");
        let pid = child.id() as i32;
        let endpoint: runp::cri::endpoint::CriEndpoint =
            format!("unix://{}", socket.display()).parse().unwrap();
        let rt = match RemoteRuntime::connect(&endpoint, Default::default()).await {
            Ok(rt) => rt,
            Err(e) => {
                kill(pid).await;
                panic!(
                    "connect to runp serve: {e}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            }
        };
        Served { pid, rt, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn sigkill(mut self) {
        kill(self.pid).await;
        self.pid = 0;
    }
}

/// A test that failed midway leaves no server behind (the reaper collects it).
impl Drop for Served {
    fn drop(&mut self) {
        if self.pid > 0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

pub async fn kill(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = tokio::time::timeout(HANG_GUARD, reaper().wait(pid)).await;
}

/// A test directory with the busybox image in `<dir>/root/images`; `<dir>/rt` links to the
/// runtime's state so the leak guard finds it.
pub fn test_dir() -> (tempfile::TempDir, LeakGuard) {
    let _ = reaper();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("runtime")).unwrap();
    std::os::unix::fs::symlink(root.join("runtime"), dir.path().join("rt")).unwrap();
    let guard = LeakGuard::new(dir.path());
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("rootfs-fixtures/build");
    runp::image::ImageStore::open(root.join("images"))
        .unwrap()
        .import(&fixtures.join("busybox-oci"))
        .unwrap();
    (dir, guard)
}

pub async fn run_pod(
    rt: &RemoteRuntime,
    dir: &Path,
    name: &str,
) -> (String, api::PodSandboxConfig) {
    let config = pod_config(name, &dir.join("logs"));
    let id = rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("run pod sandbox")
        .pod_sandbox_id;
    (id, config)
}

pub async fn create_and_start(
    rt: &RemoteRuntime,
    pod: &(String, api::PodSandboxConfig),
    name: &str,
) -> Result<String, tonic::Status> {
    let id = rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: pod.0.clone(),
            config: Some(shell(name, "exec sleep 1000")),
            sandbox_config: Some(pod.1.clone()),
        })
        .await?
        .container_id;
    rt.start_container(api::StartContainerRequest {
        container_id: id.clone(),
    })
    .await?;
    Ok(id)
}

pub async fn containers(rt: &RemoteRuntime) -> Vec<api::Container> {
    rt.list_containers(api::ListContainersRequest { filter: None })
        .await
        .expect("list containers")
        .containers
}

pub async fn sandboxes(rt: &RemoteRuntime) -> Vec<api::PodSandbox> {
    rt.list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
        .await
        .expect("list pod sandboxes")
        .items
}

pub fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Stops and removes every pod; then nothing of them remains: no state, lease, process, mount.
pub async fn remove_everything_and_check(served: &Served, dir: &Path) {
    let rt = &served.rt;
    let pods = sandboxes(rt).await;
    let pod_ids: Vec<String> = pods.iter().map(|p| p.id.clone()).collect();
    for pod in pods {
        rt.stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: pod.id.clone(),
        })
        .await
        .expect("stop pod sandbox");
        rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
            pod_sandbox_id: pod.id,
        })
        .await
        .expect("remove pod sandbox");
    }
    assert!(sandboxes(rt).await.is_empty());
    assert!(containers(rt).await.is_empty());
    let root = dir.join("root");
    for sub in [
        "runtime/sandboxes",
        "runtime/containers",
        "run/runtime/sandboxes",
        "run/runtime/containers",
        "images/leases",
    ] {
        assert_eq!(entries(&root.join(sub)), Vec::<String>::new(), "{sub}");
    }
    assert_eq!(mounts_under(&root), Vec::<String>::new());
    // Killed processes may take a moment to leave /proc after their parent reaps them.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !processes_under(&root, served.pid).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(processes_under(&root, served.pid), Vec::<String>::new());
    // No pod cgroup (the default parent, /runp/<id>) is left in any hierarchy, nor a
    // container's below it.
    let cgroups_left: Vec<String> = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|h| pod_ids.iter().map(move |id| h.path().join("runp").join(id)))
        .filter(|d| d.exists())
        .map(|d| d.display().to_string())
        .collect();
    assert_eq!(cgroups_left, Vec::<String>::new());
}

pub async fn status_of(
    rt: &RemoteRuntime,
    id: &str,
) -> Result<api::ContainerStatus, tonic::Status> {
    Ok(rt
        .container_status(api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await?
        .status
        .unwrap_or_default())
}

/// Fills the filesystem of `dir` to the last block with `<dir>/filler`.
pub fn fill(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![0x5au8; 1 << 16];
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", dir.display()),
        }
    }
}
