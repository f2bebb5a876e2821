//! Pod start latency: RunPodSandbox → CreateContainer → StartContainer (returns once the
//! container runs) for N pods in sequence, through the RuntimeService trait. Run by
//! scripts/bench-runtime.sh, which compares it with `crun run` of an equivalent bundle.
//!
//! Usage: runtime_start [--pods N] [--fixtures DIR]

use runp::cri::{RuntimeService, api};
use runp::image::ImageStore;
use runp::runtime::{ProcessRuntime, Reaper, RuntimeOptions};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn pod(i: usize, logs: &std::path::Path) -> api::PodSandboxConfig {
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

fn container() -> api::ContainerConfig {
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: "sleeper".into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: "docker.io/library/busybox:latest".into(),
            ..Default::default()
        }),
        command: vec!["sleep".into(), "1000".into()],
        log_path: "sleeper.log".into(),
        ..Default::default()
    }
}

/// Times of the three calls.
async fn start_one(
    rt: &ProcessRuntime,
    i: usize,
    logs: &std::path::Path,
) -> anyhow::Result<[Duration; 3]> {
    let config = pod(i, logs);
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
            pod_sandbox_id: pod_id,
            config: Some(container()),
            sandbox_config: Some(config),
        })
        .await?
        .container_id;
    let t2 = Instant::now();
    rt.start_container(api::StartContainerRequest { container_id })
        .await?;
    Ok([t1 - t0, t2 - t1, t2.elapsed()])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let pods: usize = arg("--pods").and_then(|v| v.parse().ok()).unwrap_or(50);
    let fixtures = arg("--fixtures")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rootfs-fixtures/build"));
    let dir = tempfile::Builder::new().prefix("rpb").tempdir_in("/tmp")?;
    let images = ImageStore::open(dir.path().join("images"))?;
    images.import(&fixtures.join("busybox-oci"))?;
    let reaper = Reaper::start()?;
    let mut options = RuntimeOptions::new(
        dir.path().join("rt"),
        env!("CARGO_BIN_EXE_runp"),
        images,
        reaper,
    );
    // The peer (`crun run`) gets a bare network namespace: compare like with like.
    options.network.mode = runp::runtime::network::NetworkMode::Loopback;
    let rt = ProcessRuntime::start(options).await?;
    let logs = dir.path().join("logs");
    // Warm-up (page cache, first overlay mount) is not measured.
    for i in 0..2 {
        start_one(&rt, pods + i, &logs).await?;
    }
    let mut times = Vec::with_capacity(pods);
    let mut phases: [Vec<Duration>; 3] = Default::default();
    for i in 0..pods {
        let t0 = Instant::now();
        let parts = start_one(&rt, i, &logs).await?;
        times.push(t0.elapsed());
        for (phase, took) in phases.iter_mut().zip(parts) {
            phase.push(took);
        }
    }
    times.sort();
    for phase in phases.iter_mut() {
        phase.sort();
    }
    let median = percentile(&times, 0.5);
    println!(
        "runp: {pods} pods, RunPodSandbox+CreateContainer+StartContainer: median {:.1} ms, p90 {:.1} ms, min {:.1} ms, max {:.1} ms",
        ms(median),
        ms(percentile(&times, 0.9)),
        ms(times[0]),
        ms(times[times.len() - 1])
    );
    println!(
        "runp: medians by call: RunPodSandbox {:.1} ms, CreateContainer {:.1} ms, StartContainer {:.1} ms",
        ms(percentile(&phases[0], 0.5)),
        ms(percentile(&phases[1], 0.5)),
        ms(percentile(&phases[2], 0.5))
    );
    println!("RUNP_MEDIAN_MS={:.3}", ms(median));
    let t0 = Instant::now();
    let all = rt
        .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
        .await?
        .items;
    for p in all {
        rt.remove_pod_sandbox(api::RemovePodSandboxRequest {
            pod_sandbox_id: p.id,
        })
        .await?;
    }
    println!(
        "runp: removed {} pods in {:.0} ms",
        pods + 2,
        ms(t0.elapsed())
    );
    Ok(())
}
