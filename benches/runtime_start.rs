//! Pod start latency: RunPodSandbox → CreateContainer → StartContainer (returns once the
//! container runs) for N pods in sequence, then StopPodSandbox → RemovePodSandbox of each, through
//! the RuntimeService trait of the in-process runtime. Run by scripts/bench-runtime.sh, which
//! compares it with `crun run` of an equivalent bundle.
//!
//! `--grpc` also starts `runp serve` and times the same calls through its CRI socket (the Rust
//! gRPC client), interleaved pod by pod with the in-process ones, and prints the ratio of the
//! medians.
//!
//! `--endpoint unix://SOCK` instead times another CRI runtime already serving SOCK (containerd,
//! from scripts/bench-containerd.sh) against `runp serve` with its CNI bridge network (the
//! `--network` options after `--runp-network`, comma-separated), both through the same gRPC
//! client, interleaved pod by pod. `--image` names the peer's busybox image.
//! `--runp-bridge-network ARG,ARG...` adds a second `runp serve` (root under `--dir`/bridge)
//! with those options, the bridge network made in process, interleaved with the other two.
//!
//! `runp serve` then keeps its root and socket in `--dir`; `--endpoint SOCK --remove-all` only
//! removes every pod of SOCK (the script's clean-up after a bench that died).
//!
//! `--state-base DIR` puts runp's state dir (bundles, shim and pod files) in a temporary
//! directory under DIR, as the script does on tmpfs; records and writable layers stay in /tmp.
//!
//! Usage: runtime_start [--pods N] [--fixtures DIR] [--grpc] [--state-base DIR]
//!        runtime_start [--pods N] [--fixtures DIR] --endpoint unix://SOCK --dir DIR
//!                      [--image NAME] [--runp-network ARG,ARG...]
//!                      [--runp-bridge-network ARG,ARG...]
//!        runtime_start --endpoint unix://SOCK --remove-all

#[path = "support/mod.rs"]
mod support;

use runp::cri::RuntimeService;
use runp::image::ImageStore;
use runp::runtime::{ProcessRuntime, Reaper, RuntimeOptions};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::{BUSYBOX, arg, fixtures, flag, ms, percentile, remove_all, start_pod, stop_remove};

/// Sorted pod start times, sorted per-call times, and the same for stop + remove.
#[derive(Default)]
struct Samples {
    total: Vec<Duration>,
    calls: [Vec<Duration>; 3],
    stop: Vec<Duration>,
    stop_calls: [Vec<Duration>; 2],
}

impl Samples {
    fn add(&mut self, total: Duration, calls: [Duration; 3]) {
        self.total.push(total);
        for (phase, took) in self.calls.iter_mut().zip(calls) {
            phase.push(took);
        }
    }

    fn add_stop(&mut self, calls: [Duration; 2]) {
        self.stop.push(calls.iter().sum());
        for (phase, took) in self.stop_calls.iter_mut().zip(calls) {
            phase.push(took);
        }
    }

    fn sort(&mut self) {
        self.total.sort();
        self.stop.sort();
        for phase in self.calls.iter_mut().chain(self.stop_calls.iter_mut()) {
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
        let s = &self.stop;
        println!(
            "{who}: StopPodSandbox+RemovePodSandbox: median {:.1} ms, p90 {:.1} ms, min {:.1} ms, max {:.1} ms",
            ms(percentile(s, 0.5)),
            ms(percentile(s, 0.9)),
            ms(s[0]),
            ms(s[s.len() - 1])
        );
        println!(
            "{who}: medians by call: StopPodSandbox {:.1} ms, RemovePodSandbox {:.1} ms",
            ms(percentile(&self.stop_calls[0], 0.5)),
            ms(percentile(&self.stop_calls[1], 0.5))
        );
    }

    /// Machine-readable lines for the scripts: `<PREFIX>_MEDIAN_MS=` and so on.
    fn figures(&self, prefix: &str) {
        println!("{prefix}_MEDIAN_MS={:.3}", ms(percentile(&self.total, 0.5)));
        println!("{prefix}_P90_MS={:.3}", ms(percentile(&self.total, 0.9)));
        println!(
            "{prefix}_STOP_MEDIAN_MS={:.3}",
            ms(percentile(&self.stop, 0.5))
        );
        println!(
            "{prefix}_STOP_P90_MS={:.3}",
            ms(percentile(&self.stop, 0.9))
        );
    }
}

/// One runtime under test.
struct Subject<'a> {
    name: &'static str,
    rt: &'a dyn RuntimeService,
    logs: PathBuf,
    image: String,
    samples: Samples,
}

impl<'a> Subject<'a> {
    fn new(name: &'static str, rt: &'a dyn RuntimeService, logs: PathBuf, image: &str) -> Self {
        Subject {
            name,
            rt,
            logs,
            image: image.to_string(),
            samples: Samples::default(),
        }
    }
}

/// Starts `pods` pods on each subject, then stops and removes them, interleaved pod by pod so
/// every subject sees the same machine load over the run.
async fn measure(subjects: &mut [Subject<'_>], pods: usize) -> anyhow::Result<()> {
    // Warm-up (page cache, first overlay mount, first connection, first teardown) is not
    // measured: two pods each, started and then stopped and removed before the measured ones.
    let mut started: Vec<Vec<String>> = vec![Vec::new(); subjects.len()];
    for i in 0..pods + 2 {
        let warm_up = i < 2;
        let index = if warm_up { pods + i } else { i - 2 };
        for (s, ids) in subjects.iter_mut().zip(started.iter_mut()) {
            let t0 = Instant::now();
            let (id, calls) = start_pod(s.rt, index, &s.logs, &s.image).await?;
            if !warm_up {
                s.samples.add(t0.elapsed(), calls);
            }
            ids.push(id);
        }
    }
    for i in 0..pods + 2 {
        for (s, ids) in subjects.iter_mut().zip(started.iter()) {
            let calls = stop_remove(s.rt, &ids[i]).await?;
            if i >= 2 {
                s.samples.add_stop(calls);
            }
        }
    }
    for s in subjects.iter_mut() {
        s.samples.sort();
        s.samples.report(s.name);
    }
    Ok(())
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
    // Only when asked: the smoke run has no peer runtime to talk to.
    if let Some(endpoint) = arg("--endpoint") {
        if flag("--remove-all") {
            let removed = remove_all(&support::connect(&endpoint).await?).await?;
            println!("removed {removed} pods from {endpoint}");
            return Ok(());
        }
        // The script's own directory, so that it can clean up after a bench that died.
        let dir = PathBuf::from(arg("--dir").ok_or_else(|| anyhow::anyhow!("--dir is needed"))?);
        std::fs::create_dir_all(&dir)?;
        return peer(&Reaper::start()?, &dir, &endpoint, pods).await;
    }
    let dir = tempfile::Builder::new().prefix("rpb").tempdir_in("/tmp")?;
    let state = match arg("--state-base") {
        Some(base) => tempfile::Builder::new().prefix("rpb").tempdir_in(base)?,
        None => tempfile::Builder::new().prefix("rps").tempdir_in("/tmp")?,
    };
    let reaper = Reaper::start()?;
    // The smoke run (under `cargo test`) goes through both paths so both keep working.
    let grpc = flag("--grpc") || smoke;
    let images = ImageStore::open(dir.path().join("images"))?;
    images.import(&fixtures().join("busybox-oci"))?;
    let mut options = RuntimeOptions::new(
        dir.path().join("rt"),
        env!("CARGO_BIN_EXE_runp"),
        images,
        reaper.clone(),
    );
    options.state = state.path().join("rt");
    // The peer (`crun run`) gets a bare network namespace: compare like with like.
    options.network.mode = runp::runtime::network::NetworkMode::Loopback;
    let rt = ProcessRuntime::start(options).await?;
    let remote = match grpc {
        true => {
            let serve_state = state.path().join("serve");
            let args = ["--network", "loopback", "--state-dir"];
            let args = [&args[..], &[serve_state.to_str().unwrap_or_default()]].concat();
            Some(support::start_serve_with(&reaper, dir.path(), &args).await?)
        }
        false => None,
    };
    let logs = dir.path().join("logs");
    let mut subjects = vec![Subject::new("runp", rt.as_ref(), logs.clone(), BUSYBOX)];
    if let Some((_, client)) = &remote {
        subjects.push(Subject::new(
            "runp serve over gRPC",
            client,
            logs.join("grpc"),
            BUSYBOX,
        ));
    }
    measure(&mut subjects, pods).await?;
    let local = &subjects[0].samples;
    local.figures("RUNP");
    // RunPodSandbox, CreateContainer, StartContainer medians, for scripts/bench-all.sh.
    println!(
        "RUNP_CALLS_MS={:.3} {:.3} {:.3}",
        ms(percentile(&local.calls[0], 0.5)),
        ms(percentile(&local.calls[1], 0.5)),
        ms(percentile(&local.calls[2], 0.5))
    );
    if let Some(over_grpc) = subjects.get(1) {
        let median = percentile(&local.total, 0.5);
        let grpc_median = percentile(&over_grpc.samples.total, 0.5);
        println!("GRPC_MEDIAN_MS={:.3}", ms(grpc_median));
        println!(
            "ratio gRPC (runp serve) / in-process (median pod start): {:.2}x  ({:.1} ms vs {:.1} ms, {pods} pods each)",
            grpc_median.as_secs_f64() / median.as_secs_f64(),
            ms(grpc_median),
            ms(median)
        );
    }
    drop(subjects);
    // Whatever a failed run left.
    remove_all(rt.as_ref()).await?;
    if let Some((daemon, client)) = remote {
        remove_all(&client).await?;
        drop(client);
        daemon.stop().await?;
    }
    Ok(())
}

/// runp serve with the CNI bridge against the CRI runtime on `endpoint`, both over gRPC.
async fn peer(
    reaper: &Reaper,
    dir: &std::path::Path,
    endpoint: &str,
    pods: usize,
) -> anyhow::Result<()> {
    let image = arg("--image").unwrap_or_else(|| BUSYBOX.to_string());
    let network = arg("--runp-network").unwrap_or_else(|| "--network,cni".to_string());
    let network: Vec<&str> = network.split(',').collect();
    let (daemon, runp) = support::start_serve_with(reaper, dir, &network).await?;
    let bridged = match arg("--runp-bridge-network") {
        Some(args) => {
            let bridge_dir = dir.join("bridge");
            std::fs::create_dir_all(&bridge_dir)?;
            let args: Vec<&str> = args.split(',').collect();
            Some(support::start_serve_with(reaper, &bridge_dir, &args).await?)
        }
        None => None,
    };
    let other = support::connect(endpoint).await?;
    let logs = dir.join("logs");
    let mut subjects = vec![
        Subject::new("runp serve (CNI bridge)", &runp, logs.join("runp"), BUSYBOX),
        Subject::new("containerd", &other, logs.join("peer"), &image),
    ];
    if let Some((_, client)) = &bridged {
        let logs = logs.join("bridge");
        subjects.push(Subject::new(
            "runp serve (bridge in process)",
            client,
            logs,
            BUSYBOX,
        ));
    }
    let measured = measure(&mut subjects, pods).await;
    if measured.is_ok() {
        subjects[0].samples.figures("RUNP_CNI");
        subjects[1].samples.figures("PEER");
        if let Some(bridge) = subjects.get(2) {
            bridge.samples.figures("RUNP_BRIDGE");
        }
    }
    drop(subjects);
    // Whatever a failed run left, on each.
    let mut cleaned = vec![remove_all(&runp).await, remove_all(&other).await];
    drop(runp);
    daemon.stop().await?;
    if let Some((daemon, client)) = bridged {
        cleaned.push(remove_all(&client).await);
        drop(client);
        daemon.stop().await?;
    }
    measured?;
    cleaned.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(())
}
