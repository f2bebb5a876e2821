//! Container log rotation (the kubelet's container log manager): when a running container's live
//! log exceeds the maximum size it is renamed to `<name>.<timestamp>` and the runtime reopens it
//! (ReopenContainerLog); rotated files except the newest are gzip-compressed; the oldest are
//! deleted so that at most `max_files` files (the live one included) remain.

use crate::cri::{RuntimeService, api};
use crate::kubelet::config::AgentConfig;
use crate::kubelet::labels;
use crate::kubelet::podconfig::spec::convert::pod_log_directory;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

const TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";
pub(crate) const TMP_SUFFIX: &str = ".tmp";
pub(crate) const GZ_SUFFIX: &str = ".gz";

/// What to do with one container's log files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RotationPlan {
    /// Rotated files to delete (oldest first).
    pub remove: Vec<String>,
    /// Rotated files to compress.
    pub compress: Vec<String>,
    /// Rotate the live file.
    pub rotate: bool,
}

/// Decides from the live file size and the rotated files (names, any order) what to do.
pub fn plan_rotation(
    live_size: u64,
    max_size: u64,
    rotated: &[String],
    max_files: usize,
) -> RotationPlan {
    let mut rotated: Vec<&String> = rotated
        .iter()
        .filter(|n| !n.ends_with(TMP_SUFFIX))
        .collect();
    // Names end with the timestamp (then maybe .gz): sorting by the timestamp part orders them.
    rotated.sort_by_key(|n| n.trim_end_matches(GZ_SUFFIX).to_string());
    // Leave room for the live file and the one a rotation now adds.
    let keep = max_files.saturating_sub(2);
    let excess = rotated.len().saturating_sub(keep);
    let remove: Vec<String> = rotated.iter().take(excess).map(|s| s.to_string()).collect();
    let kept = &rotated[excess..];
    // The newest rotated file stays plain: the runtime may still flush into it until it has
    // reopened the log.
    let compress = kept
        .iter()
        .take(kept.len().saturating_sub(1))
        .filter(|n| !n.ends_with(GZ_SUFFIX))
        .map(|s| s.to_string())
        .collect();
    RotationPlan {
        remove,
        compress,
        rotate: max_size > 0 && live_size > max_size,
    }
}

fn compress(path: &Path) -> io::Result<()> {
    let gz = PathBuf::from(format!("{}{GZ_SUFFIX}", path.display()));
    let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", gz.display()));
    let result = (|| {
        let mut input = std::fs::File::open(path)?;
        let output = std::fs::File::create(&tmp)?;
        let mut encoder = flate2::write::GzEncoder::new(output, flate2::Compression::default());
        io::copy(&mut input, &mut encoder)?;
        encoder.finish()?.sync_all()?;
        std::fs::rename(&tmp, &gz)?;
        std::fs::remove_file(path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Rotates the log of one container. Returns whether the live file was rotated.
pub async fn rotate_container_log(
    runtime: &dyn RuntimeService,
    container_id: &str,
    live: &Path,
    max_size: u64,
    max_files: usize,
    now: SystemTime,
) -> io::Result<bool> {
    let (Some(dir), Some(base)) = (live.parent(), live.file_name()) else {
        return Ok(false);
    };
    let base = base.to_string_lossy().into_owned();
    let prefix = format!("{base}.");
    let mut rotated = Vec::new();
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(TMP_SUFFIX) && name.starts_with(&prefix) {
            // Left by an interrupted compression.
            let _ = std::fs::remove_file(entry.path());
        } else if name.starts_with(&prefix) {
            rotated.push(name);
        }
    }
    let live_size = match std::fs::metadata(live) {
        Ok(meta) => meta.len(),
        Err(err) if err.kind() == io::ErrorKind::NotFound => 0,
        Err(err) => return Err(err),
    };
    let plan = plan_rotation(live_size, max_size, &rotated, max_files);
    for name in &plan.remove {
        std::fs::remove_file(dir.join(name))?;
    }
    for name in &plan.compress {
        compress(&dir.join(name))?;
    }
    if !plan.rotate {
        return Ok(false);
    }
    let Some(target) = rotated_name(dir, &prefix, now) else {
        // Rotated already this millisecond: the live file waits for the next check.
        return Ok(false);
    };
    std::fs::rename(live, &target)?;
    if let Err(status) = runtime
        .reopen_container_log(api::ReopenContainerLogRequest {
            container_id: container_id.to_string(),
        })
        .await
    {
        // The runtime still writes to the renamed file: put it back so nothing is lost.
        std::fs::rename(&target, live)?;
        return Err(io::Error::other(format!(
            "ReopenContainerLog {container_id}: {}",
            status.message()
        )));
    }
    Ok(true)
}

/// The live log of each running container, as its status gave it: a container's log path
/// never changes, so rotation asks the runtime only about containers it has not seen (with
/// hundreds of containers, a ContainerStatus each per check was most of the rotation's work).
#[derive(Default)]
pub struct LogPaths(std::sync::Mutex<std::collections::HashMap<String, Option<PathBuf>>>);

impl LogPaths {
    fn get(&self, id: &str) -> Option<Option<PathBuf>> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    fn insert(&self, id: &str, path: Option<PathBuf>) {
        let mut paths = self.0.lock().unwrap_or_else(|e| e.into_inner());
        paths.insert(id.to_string(), path);
    }

    /// Forgets the containers not in `running`.
    fn keep(&self, running: &[api::Container]) {
        let ids: std::collections::HashSet<&str> = running.iter().map(|c| c.id.as_str()).collect();
        let mut paths = self.0.lock().unwrap_or_else(|e| e.into_inner());
        paths.retain(|id, _| ids.contains(id.as_str()));
    }
}

/// The live log of a container: its status's log path, under its pod's log directory when
/// relative; `Some(None)` when it has none, None when its status could not be read.
async fn live_log(
    runtime: &dyn RuntimeService,
    config: &AgentConfig,
    container: &api::Container,
) -> Option<Option<PathBuf>> {
    let status = runtime
        .container_status(api::ContainerStatusRequest {
            container_id: container.id.clone(),
            verbose: false,
        })
        .await
        .ok()?
        .status
        .unwrap_or_default();
    if status.log_path.is_empty() {
        return Some(None);
    }
    if Path::new(&status.log_path).is_absolute() {
        return Some(Some(PathBuf::from(&status.log_path)));
    }
    let label = |key: &str| container.labels.get(key).cloned().unwrap_or_default();
    Some(Some(
        PathBuf::from(pod_log_directory(
            config,
            &label(labels::POD_NAMESPACE),
            &label(labels::POD_NAME),
            &label(labels::POD_UID),
        ))
        .join(&status.log_path),
    ))
}

/// Rotates the logs of every running container.
pub async fn rotate_all(
    runtime: &dyn RuntimeService,
    config: &AgentConfig,
    paths: &LogPaths,
    now: SystemTime,
) -> crate::cri::CriResult<usize> {
    let running = runtime
        .list_containers(api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                state: Some(api::ContainerStateValue {
                    state: api::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await?
        .containers;
    paths.keep(&running);
    let mut rotated = 0;
    for container in running {
        let live = match paths.get(&container.id) {
            Some(known) => known,
            None => match live_log(runtime, config, &container).await {
                Some(live) => {
                    paths.insert(&container.id, live.clone());
                    live
                }
                None => continue,
            },
        };
        let Some(live) = live else {
            continue;
        };
        let (max_size, max_files) = (
            config.container_log_max_size,
            config.container_log_max_files,
        );
        match rotate_container_log(runtime, &container.id, &live, max_size, max_files, now).await {
            Ok(true) => rotated += 1,
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(container = %container.id, log = %live.display(), error = %err,
                    "log rotation failed")
            }
        }
    }
    Ok(rotated)
}

/// `<prefix><timestamp>` as kubelet names a rotated log (second resolution); when that name (or
/// its `.gz`) is taken, because a flood rotates more than once a second, the milliseconds are
/// appended: `X` sorts before `X.123`, and renaming over `X` would lose it. None when both are
/// taken.
fn rotated_name(dir: &Path, prefix: &str, now: SystemTime) -> Option<PathBuf> {
    let at = chrono::DateTime::<chrono::Utc>::from(now);
    let stamp = at.format(TIMESTAMP_FORMAT);
    let millis = at.timestamp_subsec_millis();
    [
        format!("{prefix}{stamp}"),
        format!("{prefix}{stamp}.{millis:03}"),
    ]
    .into_iter()
    .map(|name| dir.join(name))
    .find(|path| {
        let gz = format!("{}{GZ_SUFFIX}", path.display());
        !path.exists() && !Path::new(&gz).exists()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::clock::FakeClock;
    use crate::kubelet::fake::FakeRuntime;
    use std::sync::Arc;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn plans() {
        let cases = [
            (
                "small, nothing rotated",
                10,
                vec![],
                5,
                RotationPlan::default(),
            ),
            (
                "too big: rotate",
                200,
                vec![],
                5,
                RotationPlan {
                    rotate: true,
                    ..Default::default()
                },
            ),
            (
                "compress all rotated but the newest",
                10,
                vec![
                    "0.log.20240101-000002",
                    "0.log.20240101-000001.gz",
                    "0.log.20240101-000003",
                ],
                5,
                RotationPlan {
                    compress: names(&["0.log.20240101-000002"]),
                    ..Default::default()
                },
            ),
            (
                "too many: oldest removed, max 5 incl. live and the next rotation",
                200,
                vec![
                    "0.log.20240101-000004",
                    "0.log.20240101-000001.gz",
                    "0.log.20240101-000003.gz",
                    "0.log.20240101-000002.gz",
                    "0.log.20240101-000005",
                ],
                5,
                RotationPlan {
                    remove: names(&["0.log.20240101-000001.gz", "0.log.20240101-000002.gz"]),
                    compress: names(&["0.log.20240101-000004"]),
                    rotate: true,
                },
            ),
        ];
        for (name, size, rotated, max_files, want) in cases {
            let got = plan_rotation(size, 100, &names(&rotated), max_files);
            assert_eq!(got, want, "{name}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rotates_reopens_compresses_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("0.log");
        let runtime = FakeRuntime::new(Arc::new(FakeClock::new()));
        let mut now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        for round in 0..6 {
            std::fs::write(&live, format!("round {round} ").repeat(20)).unwrap();
            let rotated = rotate_container_log(runtime.as_ref(), "ctr1", &live, 100, 4, now)
                .await
                .unwrap();
            assert!(rotated, "round {round}");
            now += std::time::Duration::from_secs(60);
        }
        let mut files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        // At most 4 files with the live one (which the real runtime recreates on reopen): the
        // three newest rotations, all but the newest compressed.
        assert_eq!(
            files,
            vec![
                "0.log.20231114-221620.gz",
                "0.log.20231114-221720",
                "0.log.20231114-221820"
            ]
        );
        assert_eq!(runtime.calls_starting("ReopenContainerLog").len(), 6);
        let gz = std::fs::File::open(dir.path().join("0.log.20231114-221620.gz")).unwrap();
        let mut text = String::new();
        io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut text).unwrap();
        assert!(text.starts_with("round 3"), "{text}");
    }

    /// Rotations within one second (a log flood with a short check period) take names with
    /// milliseconds and overwrite nothing; a third within the same millisecond waits.
    #[tokio::test(start_paused = true)]
    async fn rotations_within_a_second_keep_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("0.log");
        let runtime = FakeRuntime::new(Arc::new(FakeClock::new()));
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let mut got = Vec::new();
        for (round, at) in [
            (0, now),
            (1, now),
            (2, now),
            (3, now + std::time::Duration::from_secs(1)),
        ] {
            // Appended: what did not rotate stays in the live file.
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&live)
                .unwrap();
            io::Write::write_all(&mut file, format!("round {round} ").repeat(20).as_bytes())
                .unwrap();
            got.push(
                rotate_container_log(runtime.as_ref(), "ctr1", &live, 100, 5, at)
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(got, [true, true, false, true]);
        // Plain, or compressed by a later round.
        let read = |name: &str| {
            let path = dir.path().join(name);
            std::fs::read_to_string(&path).unwrap_or_else(|_| {
                let gz = std::fs::File::open(format!("{}.gz", path.display())).unwrap();
                let mut text = String::new();
                io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut text).unwrap();
                text
            })
        };
        assert!(read("0.log.20231114-221320").starts_with("round 0"));
        assert!(read("0.log.20231114-221320.000").starts_with("round 1"));
        let waited = read("0.log.20231114-221321");
        assert!(waited.starts_with("round 2"), "rotated later: {waited}");
        // Oldest first, whatever got compressed.
        let plan = plan_rotation(
            0,
            100,
            &[
                "0.log.20231114-221320.000".into(),
                "0.log.20231114-221321".into(),
                "0.log.20231114-221320.gz".into(),
            ],
            3,
        );
        assert_eq!(
            plan.remove,
            ["0.log.20231114-221320.gz", "0.log.20231114-221320.000"]
        );
    }
}
