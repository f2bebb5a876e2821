//! Pod start latency: RunPodSandbox → CreateContainer → StartContainer (returns once the
//! container runs) for N pods in sequence, through the RuntimeService trait of the in-process
//! runtime. Run by scripts/bench-runtime.sh, which compares it with `crun run` of an equivalent
//! bundle.
//!
//! `--grpc` also starts `runp serve` and times the same calls through its CRI socket (the Rust
//! gRPC client), interleaved pod by pod with the in-process ones, and prints the ratio of the
//! medians.
//!
//! Usage: runtime_start [--pods N] [--fixtures DIR] [--grpc]

#[path = "support/mod.rs"]
mod support;

use runp::cri::RuntimeService;
use runp::image::ImageStore;
use runp::runtime::{ProcessRuntime, Reaper, RuntimeOptions};
use std::time::{Duration, Instant};
use support::{arg, fixtures, flag, ms, percentile, remove_all, start_one};

/// Sorted pod start times and sorted per-call times.
#[derive(Default)]
struct Samples {
    total: Vec<Duration>,
    calls: [Vec<Duration>; 3],
}

impl Samples {
    fn add(&mut self, total: Duration, calls: [Duration; 3]) {
        self.total.push(total);
        for (phase, took) in self.calls.iter_mut().zip(calls) {
            phase.push(took);
        }
    }

    fn sort(&mut self) {
        self.total.sort();
        for phase in self.calls.iter_mut() {
            phase.sort();
        }
    }

    fn report(&self, who: &str) {
        let t = &self.total;
        println!(
            "{who}: {} pods, RunPodSandbox+CreateContainer+StartContainer: median {:.1} ms, p90 {:.1} ms, min {:.1} ms, max {:.1} ms",
            t.len(),
            ms(percentile(t, 0.5)),
            ms(percentile(t, 0.9)),
            ms(t[0]),
            ms(t[t.len() - 1])
        );
        println!(
            "{who}: medians by call: RunPodSandbox {:.1} ms, CreateContainer {:.1} ms, StartContainer {:.1} ms",
            ms(percentile(&self.calls[0], 0.5)),
            ms(percentile(&self.calls[1], 0.5)),
            ms(percentile(&self.calls[2], 0.5))
        );
    }
}

async fn timed(rt: &dyn RuntimeService, i: usize, logs: &std::path::Path, into: &mut Samples) {
    let t0 = Instant::now();
    let calls = start_one(rt, i, logs).await.expect("pod start");
    into.add(t0.elapsed(), calls);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let smoke = support::smoke();
    if smoke && support::skip_without_root("runtime_start") {
        return Ok(());
    }
    let pods: usize = arg("--pods")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if smoke { 3 } else { 50 });
    // The smoke run (under `cargo test`) goes through both paths so both keep working.
    let grpc = flag("--grpc") || smoke;
    let dir = tempfile::Builder::new().prefix("rpb").tempdir_in("/tmp")?;
    let images = ImageStore::open(dir.path().join("images"))?;
    images.import(&fixtures().join("busybox-oci"))?;
    let reaper = Reaper::start()?;
    let mut options = RuntimeOptions::new(
        dir.path().join("rt"),
        env!("CARGO_BIN_EXE_runp"),
        images,
        reaper.clone(),
    );
    // The peer (`crun run`) gets a bare network namespace: compare like with like.
    options.network.mode = runp::runtime::network::NetworkMode::Loopback;
    let rt = ProcessRuntime::start(options).await?;
    let remote = match grpc {
        true => Some(support::start_serve(&reaper, dir.path()).await?),
        false => None,
    };
    let logs = dir.path().join("logs");
    // Warm-up (page cache, first overlay mount, first connection) is not measured.
    for i in 0..2 {
        start_one(rt.as_ref(), pods + i, &logs).await?;
        if let Some((_, client)) = &remote {
            start_one(client, pods + i, &logs.join("grpc")).await?;
        }
    }
    let mut local = Samples::default();
    let mut over_grpc = Samples::default();
    for i in 0..pods {
        // Interleaved, so both paths see the same machine load over the run.
        timed(rt.as_ref(), i, &logs, &mut local).await;
        if let Some((_, client)) = &remote {
            timed(client, i, &logs.join("grpc"), &mut over_grpc).await;
        }
    }
    local.sort();
    local.report("runp");
    let median = percentile(&local.total, 0.5);
    println!("RUNP_MEDIAN_MS={:.3}", ms(median));
    println!("RUNP_P90_MS={:.3}", ms(percentile(&local.total, 0.9)));
    // RunPodSandbox, CreateContainer, StartContainer medians, for scripts/bench-all.sh.
    println!(
        "RUNP_CALLS_MS={:.3} {:.3} {:.3}",
        ms(percentile(&local.calls[0], 0.5)),
        ms(percentile(&local.calls[1], 0.5)),
        ms(percentile(&local.calls[2], 0.5))
    );
    if remote.is_some() {
        over_grpc.sort();
        over_grpc.report("runp serve over gRPC");
        let grpc_median = percentile(&over_grpc.total, 0.5);
        println!("GRPC_MEDIAN_MS={:.3}", ms(grpc_median));
        println!(
            "ratio gRPC (runp serve) / in-process (median pod start): {:.2}x  ({:.1} ms vs {:.1} ms, {pods} pods each)",
            grpc_median.as_secs_f64() / median.as_secs_f64(),
            ms(grpc_median),
            ms(median)
        );
    }
    let t0 = Instant::now();
    let removed = remove_all(rt.as_ref()).await?;
    println!("runp: removed {removed} pods in {:.0} ms", ms(t0.elapsed()));
    if let Some((daemon, client)) = remote {
        let removed = remove_all(&client).await?;
        println!("runp serve: removed {removed} pods");
        drop(client);
        daemon.stop().await?;
    }
    Ok(())
}
