//! How fast `runp agent --runtime=process` converges: the time from starting the agent, with N
//! pod manifests already in its directory, until every pod's status file says Running; and the
//! agent's idle CPU and RSS holding the largest N. Peer, measured in the same run: the same N
//! pods started directly through the in-process CRI (RunPodSandbox → CreateContainer →
//! StartContainer, as benches/runtime_start.rs), one after another and all at once (the agent
//! runs one worker per pod); the idle peer is this process holding those pods in its runtime.
//! Run by scripts/bench-agent.sh.
//!
//! Usage: agent_start [--pods 1,50,200] [--runs 3] [--idle-secs 30] [--fixtures DIR]

#[path = "support/mod.rs"]
mod support;

use runp::cri::RuntimeService;
use runp::image::ImageStore;
use runp::runtime::{ProcessRuntime, Reaper, RuntimeOptions};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{
    Daemon, arg, fixtures, idle_cpu_percent, median, ms, remove_all, rss_kib, start_one,
    zygote_pss_kib,
};

const POLL: Duration = Duration::from_millis(20);
const HANG_GUARD: Duration = Duration::from_secs(600);

fn manifest(i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: bench-{i}, namespace: bench}}\nspec:\n  \
         terminationGracePeriodSeconds: 1\n  containers:\n  - name: sleeper\n    image: busybox\n    \
         imagePullPolicy: IfNotPresent\n    command: [sleep, \"1000\"]\n"
    )
}

/// Status files of `dir` that say Running, added to `done`.
fn count_running(dir: &Path, done: &mut HashSet<String>) -> usize {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if done.contains(&name) || !name.ends_with(".yaml") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if text.contains("\n  phase: Running\n") {
            done.insert(name);
        }
    }
    done.len()
}

async fn wait_until(what: &str, mut check: impl FnMut() -> bool) -> anyhow::Result<()> {
    let t0 = Instant::now();
    while !check() {
        anyhow::ensure!(t0.elapsed() < HANG_GUARD, "hang guard: {what}");
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Idle CPU (% of a core) and RSS (KiB) of a process holding the pods, and the proportional
/// set size (KiB) of its shim zygote, a child that shares most of its pages with it.
struct Idle {
    cpu: f64,
    rss: u64,
    zygote_pss: Option<u64>,
}

async fn measure_idle(pid: u32, window: Duration) -> anyhow::Result<Idle> {
    // Let start-up work (status flushes, first probes of GC and log rotation) pass.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let cpu = idle_cpu_percent(pid, window).await?;
    Ok(Idle {
        cpu,
        rss: rss_kib(pid)?,
        zygote_pss: zygote_pss_kib(pid),
    })
}

/// One agent run: time to N Running pods, optionally the idle figures; then every pod removed
/// through the agent (by deleting the manifests) and the agent stopped.
async fn agent_run(
    reaper: &Reaper,
    pods: usize,
    idle: Option<Duration>,
) -> anyhow::Result<(Duration, Duration, Option<Idle>)> {
    let dir = tempfile::Builder::new().prefix("rpa").tempdir_in("/tmp")?;
    let root = dir.path().join("agent");
    let store = ImageStore::open(root.join("images"))?;
    store.import(&fixtures().join("busybox-oci"))?;
    drop(store);
    let manifests = dir.path().join("manifests");
    std::fs::create_dir_all(&manifests)?;
    for i in 0..pods {
        std::fs::write(manifests.join(format!("pod-{i}.yaml")), manifest(i))?;
    }
    let status_dir = root.join("var/status");
    let t0 = Instant::now();
    let agent = Daemon::spawn(
        reaper,
        &root,
        &[
            "agent",
            "--runtime",
            "process",
            "--manifests",
            manifests.to_str().unwrap(),
            "--network",
            "loopback",
        ],
        &dir.path().join("agent.log"),
    )?;
    let mut done = HashSet::new();
    wait_until(&format!("{pods} pods Running"), || {
        count_running(&status_dir, &mut done) == pods
    })
    .await?;
    let took = t0.elapsed();
    let idle = match idle {
        Some(window) => Some(measure_idle(agent.pid, window).await?),
        None => None,
    };
    let t0 = Instant::now();
    for i in 0..pods {
        std::fs::remove_file(manifests.join(format!("pod-{i}.yaml")))?;
    }
    let sandboxes = root.join("runtime/sandboxes");
    wait_until("every pod removed", || {
        let empty = |d: &Path| std::fs::read_dir(d).map_or(true, |mut e| e.next().is_none());
        empty(&status_dir) && empty(&sandboxes)
    })
    .await?;
    let teardown = t0.elapsed();
    agent.stop().await?;
    Ok((took, teardown, idle))
}

/// The peer: N pods through the in-process CRI, in sequence and then all at once.
async fn direct_run(
    rt: &Arc<ProcessRuntime>,
    logs: &Path,
    pods: usize,
    idle: Option<Duration>,
) -> anyhow::Result<(Duration, Duration, Duration, Option<Idle>)> {
    let t0 = Instant::now();
    for i in 0..pods {
        start_one(rt.as_ref(), i, logs).await?;
    }
    let sequential = t0.elapsed();
    let t0 = Instant::now();
    remove_all(rt.as_ref()).await?;
    let teardown = t0.elapsed();
    let t0 = Instant::now();
    let starts = (0..pods).map(|i| start_one(rt.as_ref() as &dyn RuntimeService, i, logs));
    for result in futures::future::join_all(starts).await {
        result?;
    }
    let concurrent = t0.elapsed();
    let idle = match idle {
        Some(window) => Some(measure_idle(std::process::id(), window).await?),
        None => None,
    };
    remove_all(rt.as_ref()).await?;
    Ok((sequential, concurrent, teardown, idle))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let smoke = support::smoke();
    if smoke && support::skip_without_root("agent_start") {
        return Ok(());
    }
    let counts: Vec<usize> = arg("--pods")
        .unwrap_or_else(|| if smoke { "2" } else { "1,50,200" }.into())
        .split(',')
        .map(|n| n.trim().parse())
        .collect::<Result<_, _>>()?;
    let runs: usize = arg("--runs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if smoke { 1 } else { 3 });
    let idle_secs: u64 = arg("--idle-secs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if smoke { 1 } else { 30 });
    let largest = counts.iter().copied().max().unwrap_or(0);

    let reaper = Reaper::start()?;
    let dir = tempfile::Builder::new().prefix("rpd").tempdir_in("/tmp")?;
    let images = ImageStore::open(dir.path().join("images"))?;
    images.import(&fixtures().join("busybox-oci"))?;
    let mut options = RuntimeOptions::new(
        dir.path().join("rt"),
        env!("CARGO_BIN_EXE_runp"),
        images,
        reaper.clone(),
    );
    // Loopback for both sides: the bench measures the agent's own cost, and 500 concurrent CNI
    // ADDs (iptables under one lock) outlast the plugin timeout on a 2-core machine.
    options.network.mode = runp::runtime::network::NetworkMode::Loopback;
    let rt = ProcessRuntime::start(options).await?;
    let logs = dir.path().join("logs");
    // Warm-up of both paths (page cache, first overlay mounts) is not measured.
    agent_run(&reaper, 2, None).await?;
    direct_run(&rt, &logs, 2, None).await?;

    let mut idle_figures = None;
    for &pods in &counts {
        let (mut agent, mut sequential, mut concurrent) = (Vec::new(), Vec::new(), Vec::new());
        let (mut agent_down, mut direct_down) = (Vec::new(), Vec::new());
        for run in 0..runs {
            let window = (pods == largest && run + 1 == runs && idle_secs > 0)
                .then(|| Duration::from_secs(idle_secs));
            let (took, down, agent_idle) = agent_run(&reaper, pods, window).await?;
            let (seq, conc, direct_teardown, direct_idle) =
                direct_run(&rt, &logs, pods, window).await?;
            agent_down.push(ms(down));
            direct_down.push(ms(direct_teardown));
            eprintln!(
                "  N={pods} run {}: agent {:.0} ms, direct CRI {:.0} ms in sequence, {:.0} ms at once",
                run + 1,
                ms(took),
                ms(seq),
                ms(conc)
            );
            agent.push(ms(took));
            sequential.push(ms(seq));
            concurrent.push(ms(conc));
            if let (Some(a), Some(d)) = (agent_idle, direct_idle) {
                idle_figures = Some((pods, a, d));
            }
        }
        let (a, s, c) = (median(&agent), median(&sequential), median(&concurrent));
        println!(
            "N={pods:<4} agent to all Running {a:8.0} ms | direct CRI: in sequence {s:8.0} ms, at once {c:8.0} ms | \
             agent/direct {:.2}x (sequence), {:.2}x (at once)   [medians of {runs}]",
            a / s,
            a / c
        );
        let (ad, dd) = (median(&agent_down), median(&direct_down));
        println!(
            "N={pods:<4} teardown: agent (manifests removed to every pod gone) {ad:8.0} ms | \
             direct CRI stop+remove in sequence {dd:8.0} ms | {:.2}x",
            ad / dd
        );
        println!(
            "AGENT_MS_{pods}={a:.1} DIRECT_SEQ_MS_{pods}={s:.1} DIRECT_CONC_MS_{pods}={c:.1} \
             AGENT_DOWN_MS_{pods}={ad:.1} DIRECT_DOWN_MS_{pods}={dd:.1}"
        );
    }
    if let Some((pods, agent, direct)) = idle_figures {
        // One clock tick is the resolution: a peer that used none has no ratio.
        let cpu_ratio = match direct.cpu > 0.0 {
            true => format!("{:.2}x CPU", agent.cpu / direct.cpu),
            false => "CPU ratio n/a (the runtime alone used no clock tick)".to_string(),
        };
        println!(
            "idle with {pods} pods over {idle_secs} s: agent CPU {:.2}% of a core, RSS {:.1} MiB | \
             runtime alone (in-process CRI): CPU {:.2}%, RSS {:.1} MiB | agent/runtime {cpu_ratio}, {:.2}x RSS",
            agent.cpu,
            agent.rss as f64 / 1024.0,
            direct.cpu,
            direct.rss as f64 / 1024.0,
            agent.rss as f64 / direct.rss as f64
        );
        let pss = |idle: &Idle| match idle.zygote_pss {
            Some(kib) => format!("{:.1} MiB", kib as f64 / 1024.0),
            None => "none found".to_string(),
        };
        println!(
            "shim zygote PSS (not in the RSS above): agent's {} | runtime alone's {}",
            pss(&agent),
            pss(&direct)
        );
        println!(
            "IDLE_PODS={pods} AGENT_CPU={:.3} AGENT_RSS_MIB={:.1} DIRECT_CPU={:.3} DIRECT_RSS_MIB={:.1}",
            agent.cpu,
            agent.rss as f64 / 1024.0,
            direct.cpu,
            direct.rss as f64 / 1024.0
        );
    }
    Ok(())
}
