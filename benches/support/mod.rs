//! Shared by the benchmark binaries: the benchmark pod and container, one pod start through any
//! `RuntimeService` (in process or over gRPC), statistics, `/proc` readings, and `runp serve`.
#![allow(dead_code)]

use runp::cri::client::{RemoteOptions, RemoteRuntime};
use runp::cri::endpoint::CriEndpoint;
use runp::cri::{RuntimeService, api};
use runp::runtime::Reaper;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const BUSYBOX: &str = "docker.io/library/busybox:latest";

/// `--name VALUE` from the command line.
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

pub fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// `cargo bench` passes `--bench`; `cargo test --all-targets` runs bench binaries without it,
/// and then they run a quick smoke version of themselves.
pub fn smoke() -> bool {
    !flag("--bench")
}

/// The process runtime needs root of some kind; without it a smoke run skips.
pub fn skip_without_root(bench: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return false;
    }
    eprintln!("SKIP: {bench}: needs root for the process runtime");
    true
}

pub fn fixtures() -> PathBuf {
    arg("--fixtures")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rootfs-fixtures/build"))
}

/// `sorted[p * (len - 1)]`.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// The median (mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn pod(i: usize, logs: &Path) -> api::PodSandboxConfig {
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: format!("bench-{i}"),
            uid: format!("uid-{i}"),
            namespace: "bench".into(),
            attempt: 0,
        }),
        hostname: format!("bench-{i}"),
        log_directory: logs.join(i.to_string()).display().to_string(),
        ..Default::default()
    }
}

pub fn container(image: &str) -> api::ContainerConfig {
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: "sleeper".into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: vec!["sleep".into(), "1000".into()],
        log_path: "sleeper.log".into(),
        ..Default::default()
    }
}

/// RunPodSandbox → CreateContainer → StartContainer of pod `i`: the time of each call.
pub async fn start_one(
    rt: &dyn RuntimeService,
    i: usize,
    logs: &Path,
) -> anyhow::Result<[Duration; 3]> {
    Ok(start_pod(rt, i, logs, BUSYBOX).await?.1)
}

/// [`start_one`] with a container of `image`: the pod's id and the time of each call.
pub async fn start_pod(
    rt: &dyn RuntimeService,
    i: usize,
    logs: &Path,
    image: &str,
) -> anyhow::Result<(String, [Duration; 3])> {
    let config = pod(i, logs);
    // As kubelet, which makes the pod's log directory before RunPodSandbox.
    std::fs::create_dir_all(&config.log_directory)?;
    let t0 = Instant::now();
    let pod_id = rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await?
        .pod_sandbox_id;
    let t1 = Instant::now();
    let container_id = rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: pod_id.clone(),
            config: Some(container(image)),
            sandbox_config: Some(config),
        })
        .await?
        .container_id;
    let t2 = Instant::now();
    rt.start_container(api::StartContainerRequest { container_id })
        .await?;
    Ok((pod_id, [t1 - t0, t2 - t1, t2.elapsed()]))
}

/// StopPodSandbox → RemovePodSandbox of one pod: the time of each call.
pub async fn stop_remove(rt: &dyn RuntimeService, pod_id: &str) -> anyhow::Result<[Duration; 2]> {
    let t0 = Instant::now();
    rt.stop_pod_sandbox(api::StopPodSandboxRequest {
        pod_sandbox_id: pod_id.to_string(),
    })
    .await?;
    let t1 = Instant::now();
    rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
        pod_sandbox_id: pod_id.to_string(),
    })
    .await?;
    Ok([t1 - t0, t1.elapsed()])
}

/// Removes every pod sandbox of `rt`; returns how many.
pub async fn remove_all(rt: &dyn RuntimeService) -> anyhow::Result<usize> {
    let all = rt
        .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
        .await?
        .items;
    let count = all.len();
    for p in all {
        rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
            pod_sandbox_id: p.id,
        })
        .await?;
    }
    Ok(count)
}

/// utime + stime of `pid` in clock ticks.
pub fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').ok_or_else(|| anyhow::anyhow!("bad stat"))? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat(5), counted from the state field (3).
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

/// VmRSS of `pid` in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or_else(|| anyhow::anyhow!("no VmRSS"))?;
    Ok(line.split_whitespace().nth(1).unwrap_or("0").parse()?)
}

/// The proportional set size (KiB) of `parent`'s shim zygote (`runp zygote`, a child of it), if
/// it has one: PSS, as the zygote shares its text with its parent.
pub fn zygote_pss_kib(parent: u32) -> Option<u64> {
    let parent = parent.to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let dir = entry.path();
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // The ppid is the second field after the parenthesised command name.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
            let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
            let is_zygote = runp::jail::is_zygote_cmdline(&cmdline);
            if ppid != parent || !is_zygote {
                return None;
            }
            let rollup = std::fs::read_to_string(dir.join("smaps_rollup")).ok()?;
            let line = rollup.lines().find(|l| l.starts_with("Pss:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
}

pub fn clock_ticks_per_sec() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}

/// CPU use of `pid` over `window` as a percentage of one core.
pub async fn idle_cpu_percent(pid: u32, window: Duration) -> anyhow::Result<f64> {
    let before = cpu_ticks(pid)?;
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let ticks = cpu_ticks(pid)? - before;
    Ok(ticks as f64 / clock_ticks_per_sec() / t0.elapsed().as_secs_f64() * 100.0)
}

/// A `runp` child process (a daemon), stopped with SIGTERM; its exit status comes from the
/// reaper, which owns every child's status in this process.
pub struct Daemon {
    pub pid: u32,
    reaper: Reaper,
    stopped: bool,
}

impl Drop for Daemon {
    /// A benchmark that failed half-way does not leave the daemon running.
    fn drop(&mut self) {
        if !self.stopped {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Daemon {
    pub fn spawn(
        reaper: &Reaper,
        root: &Path,
        args: &[&str],
        log: &Path,
    ) -> anyhow::Result<Daemon> {
        let child = Command::new(env!("CARGO_BIN_EXE_runp"))
            .arg("--root")
            .arg(root)
            .args(["--log-level", "warn"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .spawn()?;
        Ok(Daemon {
            pid: child.id(),
            reaper: reaper.clone(),
            stopped: false,
        })
    }

    /// SIGTERM and wait for the exit.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.stopped = true;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        let status =
            tokio::time::timeout(Duration::from_secs(120), self.reaper.wait(self.pid as i32))
                .await
                .map_err(|_| anyhow::anyhow!("runp (pid {}) did not stop", self.pid))?;
        anyhow::ensure!(
            status.is_some_and(|s| s.code() == 0),
            "runp (pid {}) exited {status:?}",
            self.pid
        );
        Ok(())
    }
}

/// `runp serve` on `<dir>/cri.sock` with its own root `<dir>/serve` holding the busybox fixture.
pub async fn start_serve(reaper: &Reaper, dir: &Path) -> anyhow::Result<(Daemon, RemoteRuntime)> {
    // Loopback network, as the in-process runtime it is compared with.
    start_serve_with(reaper, dir, &["--network", "loopback"]).await
}

/// [`start_serve`] with other network options.
pub async fn start_serve_with(
    reaper: &Reaper,
    dir: &Path,
    network: &[&str],
) -> anyhow::Result<(Daemon, RemoteRuntime)> {
    let root = dir.join("serve");
    let store = runp::image::ImageStore::open(root.join("images"))?;
    store.import(&fixtures().join("busybox-oci"))?;
    let endpoint = format!("unix://{}", dir.join("cri.sock").display());
    let mut args = vec!["serve", "--listen", &endpoint];
    args.extend_from_slice(network);
    let daemon = Daemon::spawn(reaper, &root, &args, &dir.join("serve.log"))?;
    let client = connect(&endpoint).await?;
    Ok((daemon, client))
}

/// The CRI client on `endpoint` (`unix://PATH`), waiting up to 30 s for the runtime to be up.
pub async fn connect(endpoint: &str) -> anyhow::Result<RemoteRuntime> {
    Ok(RemoteRuntime::connect(
        &endpoint.parse::<CriEndpoint>()?,
        RemoteOptions {
            connect_timeout: Duration::from_secs(30),
            ..RemoteOptions::default()
        },
    )
    .await?)
}
