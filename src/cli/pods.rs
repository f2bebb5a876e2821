//! `runp pods`, `runp ps`, `runp logs`: what the agent runs, read from the status files it
//! writes and the CRI log files.

use super::GlobalOpts;
use anyhow::{Context, bail};
use clap::Args;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use runp::kubelet::config::AgentConfig;
use runp::kubelet::crilog;
use runp::kubelet::podconfig::spec::convert::pod_log_directory;
use runp::kubelet::status::generate::CONTAINER_ID_SCHEME;
use runp::kubelet::status::manager::read_status_file;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

#[derive(Args, Debug)]
pub struct PodsArgs {
    /// Show only this pod.
    pub name: Option<String>,
    /// Namespace (all namespaces when not given).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Output format: `yaml` (the pod with its status) or `wide`.
    #[arg(short, long)]
    pub output: Option<String>,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    pub pod: String,
    /// Container (required when the pod has several).
    #[arg(short, long)]
    pub container: Option<String>,
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Keep printing new output (follows log rotation).
    #[arg(short, long)]
    pub follow: bool,
    /// The previous instance of the container.
    #[arg(short, long)]
    pub previous: bool,
}

pub(super) fn config(global: &GlobalOpts) -> AgentConfig {
    AgentConfig::recorded(&global.root)
}

/// Every pod with a status file, sorted by namespace and name.
fn load_pods(config: &AgentConfig) -> anyhow::Result<Vec<Pod>> {
    let dir = &config.status_dir;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err).with_context(|| format!("reading {}", dir.display())),
    };
    let mut pods = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            match read_status_file(&path) {
                Ok(pod) => pods.push(pod),
                Err(err) => eprintln!("runp: skipping {}: {err}", path.display()),
            }
        }
    }
    pods.sort_by_key(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()));
    Ok(pods)
}

pub(super) fn find_pod(
    config: &AgentConfig,
    namespace: Option<&str>,
    name: &str,
) -> anyhow::Result<Pod> {
    let matches: Vec<Pod> = load_pods(config)?
        .into_iter()
        .filter(|p| p.metadata.name.as_deref() == Some(name))
        .filter(|p| namespace.is_none_or(|ns| p.metadata.namespace.as_deref() == Some(ns)))
        .collect();
    match matches.len() {
        0 => bail!(
            "pod {name:?} not found (status files in {})",
            config.status_dir.display()
        ),
        1 => Ok(matches.into_iter().next().unwrap_or_default()),
        _ => bail!("pod {name:?} exists in several namespaces; choose one with -n"),
    }
}

fn statuses(pod: &Pod) -> (Vec<ContainerStatus>, Vec<ContainerStatus>) {
    let status = pod.status.clone().unwrap_or_default();
    (
        status.init_container_statuses.unwrap_or_default(),
        status.container_statuses.unwrap_or_default(),
    )
}

/// The STATUS column, as kubectl computes it.
pub fn display_status(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let mut reason = status
        .reason
        .clone()
        .or(status.phase.clone())
        .unwrap_or_else(|| "Unknown".into());
    let (inits, containers) = statuses(pod);
    let mut initializing = false;
    for (index, init) in inits.iter().enumerate() {
        let state = init.state.clone().unwrap_or_default();
        if let Some(t) = &state.terminated {
            if t.exit_code == 0 {
                continue;
            }
            reason = format!(
                "Init:{}",
                t.reason
                    .clone()
                    .unwrap_or_else(|| format!("ExitCode:{}", t.exit_code))
            );
        } else if let Some(w) = state
            .waiting
            .as_ref()
            .and_then(|w| w.reason.clone())
            .filter(|r| r != "PodInitializing")
        {
            reason = format!("Init:{w}");
        } else {
            reason = format!("Init:{index}/{}", inits.len());
        }
        initializing = true;
        break;
    }
    if !initializing {
        for container in containers.iter().rev() {
            let state = container.state.clone().unwrap_or_default();
            if let Some(w) = state.waiting.and_then(|w| w.reason) {
                reason = w;
            } else if let Some(t) = state.terminated {
                reason = t
                    .reason
                    .unwrap_or_else(|| format!("ExitCode:{}", t.exit_code));
            }
        }
    }
    reason
}

fn age(pod: &Pod, now: SystemTime) -> String {
    let Some(start) = pod.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
        return "<unknown>".into();
    };
    let start = SystemTime::UNIX_EPOCH
        + Duration::from_secs(u64::try_from(start.0.as_second()).unwrap_or(0));
    let secs = now.duration_since(start).unwrap_or_default().as_secs();
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

pub fn pods(global: &GlobalOpts, args: PodsArgs) -> anyhow::Result<ExitCode> {
    let config = config(global);
    let pods: Vec<Pod> = match &args.name {
        Some(name) => vec![find_pod(&config, args.namespace.as_deref(), name)?],
        None => load_pods(&config)?
            .into_iter()
            .filter(|p| {
                args.namespace
                    .as_deref()
                    .is_none_or(|ns| p.metadata.namespace.as_deref() == Some(ns))
            })
            .collect(),
    };
    let mut out = std::io::stdout().lock();
    match args.output.as_deref() {
        Some("yaml") => {
            for (index, pod) in pods.iter().enumerate() {
                if index > 0 {
                    writeln!(out, "---")?;
                }
                write!(out, "{}", serde_yaml_ng::to_string(pod)?)?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        None | Some("wide") => {}
        Some(other) => bail!("unknown output format {other:?} (yaml or wide)"),
    }
    let wide = args.output.is_some();
    let now = SystemTime::now();
    let mut rows = vec![
        vec![
            "NAMESPACE",
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
        ]
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>(),
    ];
    if wide {
        rows[0].push("NODE".into());
    }
    for pod in &pods {
        let (_, containers) = statuses(pod);
        let ready = containers.iter().filter(|c| c.ready).count();
        let restarts: i32 = containers.iter().map(|c| c.restart_count).sum();
        let mut row = vec![
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
            format!("{ready}/{}", containers.len()),
            display_status(pod),
            restarts.to_string(),
            age(pod, now),
            pod.status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .unwrap_or_else(|| "<none>".into()),
        ];
        if wide {
            row.push(
                pod.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default(),
            );
        }
        rows.push(row);
    }
    print_table(&mut out, &rows)?;
    Ok(ExitCode::SUCCESS)
}

fn print_table(out: &mut impl Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(String::len)
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        writeln!(out, "{}", line.join("   ").trim_end())?;
    }
    Ok(())
}

pub fn ps(global: &GlobalOpts) -> anyhow::Result<ExitCode> {
    let config = config(global);
    let mut rows = vec![
        [
            "POD",
            "CONTAINER",
            "STATE",
            "RESTARTS",
            "CONTAINER ID",
            "IMAGE",
        ]
        .map(str::to_string)
        .to_vec(),
    ];
    for pod in load_pods(&config)? {
        let pod_name = format!(
            "{}/{}",
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default()
        );
        let (inits, containers) = statuses(&pod);
        for container in inits.iter().chain(&containers) {
            let state = container.state.clone().unwrap_or_default();
            let state = if state.running.is_some() {
                "Running".to_string()
            } else if let Some(t) = state.terminated {
                format!("Exited ({})", t.exit_code)
            } else {
                state
                    .waiting
                    .and_then(|w| w.reason)
                    .unwrap_or_else(|| "Waiting".into())
            };
            let id = container
                .container_id
                .as_deref()
                .map(|id| id.trim_start_matches(CONTAINER_ID_SCHEME))
                .map(|id| id.chars().take(13).collect())
                .unwrap_or_default();
            rows.push(vec![
                pod_name.clone(),
                container.name.clone(),
                state,
                container.restart_count.to_string(),
                id,
                container.image.clone(),
            ]);
        }
    }
    print_table(&mut std::io::stdout().lock(), &rows)?;
    Ok(ExitCode::SUCCESS)
}

/// The container of `pod` the user means.
pub(super) fn pick_container(pod: &Pod, wanted: Option<&str>) -> anyhow::Result<ContainerStatus> {
    let (inits, containers) = statuses(pod);
    let all: Vec<ContainerStatus> = containers.into_iter().chain(inits).collect();
    match wanted {
        Some(name) => all.into_iter().find(|c| c.name == name).with_context(|| {
            format!(
                "pod {:?} has no container {name:?}",
                pod.metadata.name.as_deref().unwrap_or_default()
            )
        }),
        None => {
            let main: Vec<&ContainerStatus> = pod
                .spec
                .iter()
                .flat_map(|s| s.containers.iter())
                .filter_map(|c| all.iter().find(|s| s.name == c.name))
                .collect();
            match main.as_slice() {
                [only] => Ok((*only).clone()),
                _ => bail!(
                    "pod has several containers, choose one with -c: {}",
                    main.iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    }
}

fn log_file(
    config: &AgentConfig,
    pod: &Pod,
    container: &ContainerStatus,
    previous: bool,
) -> anyhow::Result<PathBuf> {
    let meta = &pod.metadata;
    let dir = pod_log_directory(
        config,
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or_default(),
        meta.uid.as_deref().unwrap_or_default(),
    );
    let restart = if previous {
        if container.restart_count == 0 {
            bail!("container {:?} has no previous instance", container.name);
        }
        container.restart_count - 1
    } else {
        container.restart_count
    };
    Ok(Path::new(&dir)
        .join(&container.name)
        .join(format!("{restart}.log")))
}

fn print_plain(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(crilog::to_plain(&String::from_utf8_lossy(bytes)).as_bytes())
}

pub async fn logs(global: &GlobalOpts, args: LogsArgs) -> anyhow::Result<ExitCode> {
    let config = config(global);
    let pod = find_pod(&config, args.namespace.as_deref(), &args.pod)?;
    let container = pick_container(&pod, args.container.as_deref())?;
    let path = log_file(&config, &pod, &container, args.previous)?;
    let mut file = std::fs::File::open(&path).with_context(|| {
        format!(
            "no logs for container {:?} ({})",
            container.name,
            path.display()
        )
    })?;
    let mut out = std::io::stdout().lock();
    let mut pending = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut inode = file.metadata()?.ino();
    loop {
        let n = file.read(&mut buf)?;
        if n > 0 {
            pending.extend_from_slice(&buf[..n]);
            // Only whole lines: a follower may read a line half-written.
            if let Some(end) = pending.iter().rposition(|b| *b == b'\n') {
                print_plain(&mut out, &pending[..=end])?;
                pending.drain(..=end);
            }
            continue;
        }
        if !args.follow {
            if !pending.is_empty() {
                print_plain(&mut out, &pending)?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        out.flush()?;
        tokio::time::sleep(Duration::from_millis(250)).await;
        match std::fs::metadata(&path) {
            // Rotated: finish the old file (written until the runtime reopened), then go on
            // with the new one.
            Ok(meta) if meta.ino() != inode => {
                file.read_to_end(&mut pending)?;
                file = std::fs::File::open(&path)?;
                inode = meta.ino();
            }
            // Truncated in place.
            Ok(meta) if meta.len() < file.stream_position()? => {
                file.seek(SeekFrom::Start(0))?;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn status_column() {
        let cases = [
            (
                serde_json::json!({"phase": "Running", "containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                 "state": {"running": {}}}]}),
                "Running",
            ),
            (
                serde_json::json!({"phase": "Running", "containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": false, "restartCount": 3,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
                "CrashLoopBackOff",
            ),
            (
                serde_json::json!({"phase": "Succeeded", "containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
                "Completed",
            ),
            (
                serde_json::json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "i1", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0}}},
                {"name": "i2", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"running": {}}}]}),
                "Init:1/2",
            ),
            (
                serde_json::json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "i1", "image": "i", "imageID": "", "ready": false, "restartCount": 2,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
                "Init:CrashLoopBackOff",
            ),
            (
                serde_json::json!({"phase": "Pending", "containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}),
                "ImagePullBackOff",
            ),
        ];
        for (status, want) in cases {
            assert_eq!(display_status(&pod(status.clone())), want, "{status}");
        }
    }
}
