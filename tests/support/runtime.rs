//! Shared fixtures for the runtime tests: one reaper per test process, a runtime on a fresh
//! root with the busybox fixture images imported, CRI config builders and small helpers.
#![allow(dead_code)]

use runp::cri::{RuntimeService, api};
use runp::image::ImageStore;
use runp::runtime::{ProcessRuntime, Reaper, RuntimeOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

#[path = "net.rs"]
mod net;
pub use net::*;

pub const BUSYBOX: &str = "docker.io/library/busybox:latest";
/// Entrypoint `/bin/sh -c`, Cmd `cat /opt/extra/hello`, User app, StopSignal SIGUSR1.
pub const EXTRA: &str = "runp.test/busybox-extra:1";

/// Real root: euid 0 and the identity uid map (not mapped root in a user namespace).
pub fn is_real_root() -> bool {
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let fields: Vec<&str> = map.split_whitespace().collect();
    nix::unistd::geteuid().is_root() && fields == ["0", "0", "4294967295"]
}

/// Root of some kind (real, or mapped root in a user namespace): what the runtime needs.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

pub fn skip(test: &str, what: &str) {
    eprintln!("SKIP: {test}: needs {what}");
}

struct ProcessFixtures {
    fixtures: PathBuf,
    reaper: Reaper,
}

/// Fixture images are built (a child process, waited for by std) BEFORE the reaper starts:
/// once the reaper runs it owns every child's exit status.
fn process_fixtures() -> &'static ProcessFixtures {
    static ONCE: OnceLock<ProcessFixtures> = OnceLock::new();
    ONCE.get_or_init(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = std::process::Command::new(repo.join("scripts/build-fixtures.sh"))
            .status()
            .expect("running scripts/build-fixtures.sh");
        assert!(status.success(), "scripts/build-fixtures.sh failed");
        ProcessFixtures {
            fixtures: repo.join("rootfs-fixtures/build"),
            reaper: Reaper::start().expect("start the reaper"),
        }
    })
}

pub fn reaper() -> Reaper {
    process_fixtures().reaper.clone()
}

/// A runtime on a fresh root, with the fixture images imported.
pub struct Env {
    /// Declared first: dropped before `dir`, so a failed test leaves no process or mount behind.
    pub guard: LeakGuard,
    pub dir: tempfile::TempDir,
    pub images: ImageStore,
    pub rt: Arc<ProcessRuntime>,
}

pub fn options(dir: &Path, images: &ImageStore) -> RuntimeOptions {
    let mut opts = RuntimeOptions::new(
        dir.join("rt"),
        env!("CARGO_BIN_EXE_runp"),
        images.clone(),
        reaper(),
    );
    opts.shim_start_timeout = Duration::from_secs(30);
    opts.network = network_options();
    opts
}

impl Env {
    /// A fresh runtime, or None (after printing SKIP) without root of some kind.
    pub async fn for_test(test: &str) -> Option<Env> {
        if !is_root() {
            skip(test, "root (real or mapped)");
            return None;
        }
        Some(Env::new().await)
    }

    pub async fn new() -> Env {
        Env::with(|_| {}).await
    }

    /// A fresh runtime whose options `adjust` changed.
    pub async fn with(adjust: impl FnOnce(&mut RuntimeOptions)) -> Env {
        let fx = process_fixtures();
        // Short paths: libcontainer puts unix sockets under the runtime root.
        let dir = tempfile::Builder::new()
            .prefix("rp")
            .tempdir_in("/tmp")
            .unwrap();
        let images = ImageStore::open(dir.path().join("images")).expect("open image store");
        images
            .import(&fx.fixtures.join("busybox-oci"))
            .expect("import busybox");
        images
            .import(&fx.fixtures.join("busybox-extra-oci"))
            .expect("import busybox-extra");
        let mut opts = options(dir.path(), &images);
        adjust(&mut opts);
        // The test network's lease before the runtime starts: a runtime finds (or makes) the
        // bridge at start, and the last test out deletes it.
        let guard = LeakGuard::new(dir.path());
        let rt = ProcessRuntime::start(opts).await.expect("start runtime");
        Env {
            guard,
            dir,
            images,
            rt,
        }
    }

    pub fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    /// Runs a pod sandbox named `name`.
    pub async fn pod(&self, name: &str) -> (String, api::PodSandboxConfig) {
        let config = pod_config(name, &self.logs());
        let id = self
            .rt
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .expect("run pod sandbox")
            .pod_sandbox_id;
        (id, config)
    }

    pub async fn create(
        &self,
        pod: &(String, api::PodSandboxConfig),
        config: api::ContainerConfig,
    ) -> Result<String, tonic::Status> {
        create_container_in(self.rt.as_ref(), pod, config).await
    }

    /// Create + start.
    pub async fn run(
        &self,
        pod: &(String, api::PodSandboxConfig),
        config: api::ContainerConfig,
    ) -> String {
        let id = self.create(pod, config).await.expect("create container");
        self.rt
            .start_container(api::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .expect("start container");
        id
    }

    pub async fn status(&self, id: &str) -> api::ContainerStatus {
        self.rt
            .container_status(api::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            })
            .await
            .expect("container status")
            .status
            .expect("status present")
    }

    /// Polls until the container exited (hang guard: 30 s).
    pub async fn wait_exit(&self, id: &str) -> api::ContainerStatus {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.status(id).await;
            if s.state == api::ContainerState::ContainerExited as i32 {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "container {id} did not exit: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn stop(&self, id: &str, timeout: i64) {
        self.rt
            .stop_container(api::StopContainerRequest {
                container_id: id.to_string(),
                timeout,
            })
            .await
            .expect("stop container");
    }

    pub async fn pod_status(&self, id: &str, verbose: bool) -> api::PodSandboxStatusResponse {
        self.rt
            .pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose,
            })
            .await
            .expect("pod sandbox status")
    }

    /// The contents of the first `want` lines of `<logs>/<pod>/<container>.log`.
    pub async fn log_lines(&self, pod: &str, container: &str, want: usize) -> Vec<String> {
        let path = self.logs().join(pod).join(format!("{container}.log"));
        read_log(&path, want)
            .await
            .into_iter()
            .map(|l| l.2)
            .collect()
    }

    pub async fn exec(&self, id: &str, cmd: &[&str]) -> api::ExecSyncResponse {
        self.rt
            .exec_sync(api::ExecSyncRequest {
                container_id: id.to_string(),
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                timeout: 20,
            })
            .await
            .expect("exec sync")
    }

    /// Stops and removes every pod (tests end clean: no processes left behind).
    pub async fn cleanup(&self) {
        remove_all_pods(self.rt.as_ref()).await;
    }
}

/// CreateContainer of `config` in the pod `pod` (id and config): its id.
pub async fn create_container_in(
    rt: &dyn RuntimeService,
    pod: &(String, api::PodSandboxConfig),
    config: api::ContainerConfig,
) -> Result<String, tonic::Status> {
    rt.create_container(api::CreateContainerRequest {
        pod_sandbox_id: pod.0.clone(),
        config: Some(config),
        sandbox_config: Some(pod.1.clone()),
    })
    .await
    .map(|r| r.container_id)
}

/// RemovePodSandbox of every pod the runtime lists.
pub async fn remove_all_pods(rt: &dyn RuntimeService) {
    let pods = rt
        .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .items;
    for p in pods {
        rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
            pod_sandbox_id: p.id,
        })
        .await
        .expect("remove pod sandbox");
    }
}

pub fn pod_config(name: &str, logs: &Path) -> api::PodSandboxConfig {
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.to_string(),
            uid: format!("uid-{name}"),
            namespace: "default".to_string(),
            attempt: 0,
        }),
        hostname: format!("{name}-host"),
        log_directory: logs.join(name).display().to_string(),
        labels: [("app".to_string(), name.to_string())].into(),
        ..Default::default()
    }
}

/// A busybox container running `sh -c script`, logging to `<name>.log`.
pub fn shell(name: &str, script: &str) -> api::ContainerConfig {
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: BUSYBOX.to_string(),
            ..Default::default()
        }),
        command: vec!["/bin/sh".into(), "-c".into(), script.to_string()],
        log_path: format!("{name}.log"),
        labels: [("container".to_string(), name.to_string())].into(),
        ..Default::default()
    }
}

/// Parses CRI log lines: (stream, tag, content).
pub fn parse_cri_log(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .map(|line| {
            let mut parts = line.splitn(4, ' ');
            let ts = parts.next().unwrap_or_default();
            chrono::DateTime::parse_from_rfc3339(ts)
                .unwrap_or_else(|e| panic!("bad timestamp in {line:?}: {e}"));
            let stream = parts.next().unwrap_or_default().to_string();
            let tag = parts.next().unwrap_or_default().to_string();
            let content = parts.next().unwrap_or_default().to_string();
            (stream, tag, content)
        })
        .collect()
}

/// Reads a container's log once it has `want` lines (hang guard 20 s).
pub async fn read_log(path: &Path, want: usize) -> Vec<(String, String, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines = parse_cri_log(&text);
        if lines.len() >= want || tokio::time::Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Children of `parent` whose `/proc/PID/status` satisfies `wanted` (given the pid and a
/// field reader: `field("State:")`).
pub fn children_where(
    parent: i32,
    wanted: impl Fn(i32, &dyn Fn(&str) -> String) -> bool,
) -> Vec<i32> {
    let parent = parent.to_string();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
                .unwrap_or_default()
        };
        if field("PPid:") == parent && wanted(pid, &field) {
            out.push(pid);
        }
    }
    out
}

/// Zombie children of this process (there must be none: the reaper reaps).
pub fn zombie_children() -> Vec<i32> {
    children_where(std::process::id() as i32, |_, field| {
        field("State:").starts_with('Z')
    })
}

/// Zombie children that stay zombies: tests in one binary run in parallel and the runtime's
/// reaper collects asynchronously, so a zombie seen once may be another test's child a moment
/// before its reap. One that is still unreaped after 3 s is a leak.
pub fn lasting_zombies() -> Vec<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let now = zombie_children();
        if now.is_empty() || std::time::Instant::now() >= deadline {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Processes (other than `except`, e.g. a `runp serve` that is expected to run) whose command
/// line or root mentions `dir`: shims, pod infra, containers, as `PID: CMDLINE`.
pub fn processes_under(dir: &Path, except: i32) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.parse::<i32>().map_or(true, |pid| pid == except) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let root = std::fs::read_link(entry.path().join("root")).unwrap_or_default();
        if cmdline.contains(&needle) || root.starts_with(dir) {
            out.push(format!("{name}: {cmdline}"));
        }
    }
    out
}

/// Mount points under `dir` (from /proc/self/mountinfo).
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_string))
        .filter(|m| m.starts_with(&prefix))
        .collect()
}

/// After a test (panicked or not): SIGKILL every process the runtime's records (under `rt/` or
/// `runtime/`) say runs (when its start time still matches), CNI DEL what the records still have
/// attached (while the namespace files still hold the netns), and detach every mount under the
/// test's directory.
/// A passing test has cleaned up already and this finds nothing. Holds the test's
/// [`NetLease`], released after all that.
pub struct LeakGuard {
    pub dir: PathBuf,
    _net: Option<NetLease>,
}

impl LeakGuard {
    pub fn new(dir: &Path) -> LeakGuard {
        LeakGuard {
            dir: dir.to_path_buf(),
            _net: NetLease::acquire(),
        }
    }
}

fn start_time(pid: i64) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

impl Drop for LeakGuard {
    fn drop(&mut self) {
        // `rt/` in the runtime tests, `runtime/` under a `runp --root`.
        let roots = [self.dir.join("rt"), self.dir.join("runtime")];
        for (rt, (kind, file, key)) in roots.iter().flat_map(|rt| {
            [
                ("containers", "container.json", "process"),
                ("sandboxes", "sandbox.json", "infra"),
            ]
            .map(|k| (rt, k))
        }) {
            let Ok(dirs) = std::fs::read_dir(rt.join(kind)) else {
                continue;
            };
            for d in dirs.flatten() {
                let Ok(text) = std::fs::read_to_string(d.path().join(file)) else {
                    continue;
                };
                let Ok(record) = serde_json::from_str::<serde_json::Value>(&text) else {
                    continue;
                };
                let p = &record[key];
                for (pid, start) in [("pid", "pid_start_time"), ("shim_pid", "shim_start_time")] {
                    if let (Some(pid), Some(start)) = (p[pid].as_i64(), p[start].as_u64())
                        && start_time(pid) == Some(start)
                    {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid as i32),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
            }
        }
        for rt in &roots {
            release_leftover_networks(rt);
        }
        let mut mounts = mounts_under(&self.dir);
        mounts.sort_by(|a, b| b.cmp(a));
        for m in mounts {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}
