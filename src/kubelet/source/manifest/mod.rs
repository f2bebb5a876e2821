//! The manifest directory source: watches a directory of Pod/ConfigMap/Secret files (inotify via
//! `notify`, plus a periodic rescan as a safety net) and emits [`PodEvent`]s.
//!
//! Files: regular files (symlinks followed) named `*.yaml`, `*.yml` or `*.json`, not hidden,
//! directly in the directory. Parsing and the event diff are pure ([`state`], [`parse`]); this
//! file only reads the directory and runs the watcher thread.

pub mod parse;
pub mod state;

use crate::kubelet::config::AgentConfig;
use crate::kubelet::podconfig::store::ObjectStore;
use crate::kubelet::podconfig::{ObjectSource, PodConfigError, PodEvent};
pub use parse::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, static_pod_uid};
use state::{Changes, FileRead, SourceState};
pub use state::{ManifestProblem, Severity};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::Sender;

/// Files larger than this are refused (a manifest is a few KiB).
const MAX_MANIFEST_BYTES: u64 = 8 * 1024 * 1024;

/// Tunables of the manifest source.
#[derive(Clone, Debug)]
pub struct SourceOptions {
    /// `spec.nodeName` given to pods without one.
    pub node_name: Option<String>,
    /// Full rescan period, the safety net behind inotify.
    pub rescan_interval: Duration,
    /// Quiet time after a change before scanning, so an editor's burst of writes is one scan.
    pub debounce: Duration,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            node_name: None,
            rescan_interval: Duration::from_secs(20),
            debounce: Duration::from_millis(100),
        }
    }
}

impl SourceOptions {
    pub fn from_config(config: &AgentConfig) -> Self {
        SourceOptions {
            node_name: Some(config.node_name.clone()),
            ..Default::default()
        }
    }
}

enum Control {
    Changed,
    Rescan,
    Stop,
}

/// What the watcher thread shares with the handle.
#[derive(Default)]
struct Shared {
    problems: Vec<ManifestProblem>,
    pod_files: BTreeMap<String, PathBuf>,
}

/// A running manifest directory source. Dropping it stops the watcher.
pub struct ManifestSource {
    dir: PathBuf,
    control: mpsc::Sender<Control>,
    shared: Arc<Mutex<Shared>>,
}

impl ManifestSource {
    /// Watches `dir` with default options (pods keep an unset `spec.nodeName`).
    pub fn spawn(
        dir: PathBuf,
        tx: Sender<PodEvent>,
    ) -> Result<(ManifestSource, Arc<dyn ObjectSource>), PodConfigError> {
        Self::spawn_with(dir, tx, SourceOptions::default())
    }

    /// Scans `dir` once (so the object store and [`problems`](Self::problems) are filled on
    /// return), then watches it on a thread that sends the events, the initial ones first.
    pub fn spawn_with(
        dir: PathBuf,
        tx: Sender<PodEvent>,
        options: SourceOptions,
    ) -> Result<(ManifestSource, Arc<dyn ObjectSource>), PodConfigError> {
        let source_err = |reason: String| PodConfigError::ManifestDir {
            path: dir.clone(),
            reason,
        };
        // Canonical, so static pod UIDs (which hash the file path) survive a different cwd.
        let dir = dir.canonicalize().map_err(|e| source_err(e.to_string()))?;
        if !dir.is_dir() {
            return Err(source_err("not a directory".into()));
        }
        let (control_tx, control_rx) = mpsc::channel();
        let notify_tx = control_tx.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.as_ref().is_ok_and(|e| !changes_files(&e.kind)) {
                return;
            }
            let _ = notify_tx.send(Control::Changed);
        });
        let mut watcher = match watcher {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "inotify unavailable ({e}); relying on periodic rescans");
                None
            }
        };
        if let Some(w) = watcher.as_mut()
            && let Err(e) = notify::Watcher::watch(w, &dir, notify::RecursiveMode::NonRecursive)
        {
            tracing::warn!(dir = %dir.display(), "cannot watch manifest directory ({e}); relying on periodic rescans");
        }
        let store = Arc::new(ObjectStore::new());
        let shared = Arc::new(Mutex::new(Shared::default()));
        let mut worker = Worker {
            dir: dir.clone(),
            options,
            state: SourceState::default(),
            store: store.clone(),
            shared: shared.clone(),
            tx,
            watched_dir: dir_identity(&dir),
            _watcher: watcher,
        };
        let initial = worker.scan();
        std::thread::Builder::new()
            .name("manifest-source".into())
            .spawn(move || worker.run(initial, control_rx))
            .map_err(|e| source_err(format!("cannot start watcher thread: {e}")))?;
        tracing::info!(dir = %dir.display(), "watching manifest directory");
        let source = ManifestSource {
            dir,
            control: control_tx,
            shared,
        };
        Ok((source, store))
    }

    /// The watched directory (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Current problems of manifest files (refused files, ignored fields).
    pub fn problems(&self) -> Vec<ManifestProblem> {
        self.lock().problems.clone()
    }

    /// The manifest file a pod (by UID) comes from.
    pub fn pod_file(&self, uid: &str) -> Option<PathBuf> {
        self.lock().pod_files.get(uid).cloned()
    }

    /// Asks for a rescan now.
    pub fn rescan(&self) {
        let _ = self.control.send(Control::Rescan);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for ManifestSource {
    fn drop(&mut self) {
        let _ = self.control.send(Control::Stop);
    }
}

struct Worker {
    dir: PathBuf,
    options: SourceOptions,
    state: SourceState,
    store: Arc<ObjectStore>,
    shared: Arc<Mutex<Shared>>,
    tx: Sender<PodEvent>,
    /// (dev, inode) of the directory being watched, to re-watch a replaced directory.
    watched_dir: Option<(u64, u64)>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl Worker {
    fn run(mut self, initial: Vec<PodEvent>, control: mpsc::Receiver<Control>) {
        if !self.send(initial) {
            return;
        }
        loop {
            match control.recv_timeout(self.options.rescan_interval) {
                Ok(Control::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(Control::Changed | Control::Rescan) => {
                    if !self.debounce(&control) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            let events = self.scan();
            if !self.send(events) {
                return;
            }
        }
    }

    /// Waits for a quiet period (at most 10 debounce periods); false when told to stop.
    fn debounce(&self, control: &mpsc::Receiver<Control>) -> bool {
        let deadline = Instant::now() + self.options.debounce * 10;
        loop {
            match control.recv_timeout(self.options.debounce) {
                Ok(Control::Stop) | Err(RecvTimeoutError::Disconnected) => return false,
                Ok(_) if Instant::now() < deadline => continue,
                Ok(_) | Err(RecvTimeoutError::Timeout) => return true,
            }
        }
    }

    /// Sends events; false when the receiver is gone.
    fn send(&self, events: Vec<PodEvent>) -> bool {
        events
            .into_iter()
            .all(|event| self.tx.blocking_send(event).is_ok())
    }

    fn scan(&mut self) -> Vec<PodEvent> {
        let scan = match read_manifest_dir(&self.dir) {
            Ok(scan) => scan,
            Err(reason) => {
                // Keep everything: a directory that vanished for a moment must not kill pods.
                tracing::warn!(dir = %self.dir.display(), "cannot read manifest directory: {reason}");
                return Vec::new();
            }
        };
        self.rewatch_if_replaced();
        let Changes { events, objects } = self
            .state
            .apply_scan(scan, self.options.node_name.as_deref());
        if let Some(objects) = objects {
            self.store.replace(objects);
        }
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        shared.problems = self.state.problems();
        shared.pod_files = self
            .state
            .pods()
            .keys()
            .filter_map(|uid| Some((uid.clone(), self.state.pod_file(uid)?.to_path_buf())))
            .collect();
        events
    }

    fn rewatch_if_replaced(&mut self) {
        let current = dir_identity(&self.dir);
        if current == self.watched_dir {
            return;
        }
        self.watched_dir = current;
        if let Some(watcher) = self._watcher.as_mut() {
            use notify::Watcher as _;
            let _ = watcher.unwatch(&self.dir);
            match watcher.watch(&self.dir, notify::RecursiveMode::NonRecursive) {
                Ok(()) => {
                    tracing::info!(dir = %self.dir.display(), "manifest directory replaced; watching the new one")
                }
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), "cannot re-watch manifest directory: {e}")
                }
            }
        }
    }
}

fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether an inotify event can change what the directory holds. Opens and reads are not:
/// the rescan itself reads every file, and reacting to that kept the source rescanning all the
/// time (most of the agent's idle CPU with 200 manifests). A file closed after writing is.
fn changes_files(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Whether a directory entry name is a manifest file name.
pub fn is_manifest_name(name: &str) -> bool {
    !name.starts_with('.')
        && [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| name.len() > ext.len() && name.ends_with(ext))
}

/// Reads every manifest file of `dir`.
fn read_manifest_dir(dir: &Path) -> Result<BTreeMap<PathBuf, FileRead>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| e.to_string())?;
    let mut scan = BTreeMap::new();
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|n| is_manifest_name(n)) else {
            continue;
        };
        let path = dir.join(name);
        let read = match std::fs::metadata(&path) {
            Ok(meta) if !meta.is_file() => continue,
            Ok(meta) if meta.len() > MAX_MANIFEST_BYTES => FileRead::Unreadable(format!(
                "file is {} bytes, more than the {MAX_MANIFEST_BYTES} allowed",
                meta.len()
            )),
            // A dangling symlink or a file removed since the listing: not there.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => FileRead::Unreadable(e.to_string()),
            Ok(_) => match std::fs::read(&path) {
                Ok(bytes) => FileRead::Content(bytes),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => FileRead::Unreadable(e.to_string()),
            },
        };
        scan.insert(path, read);
    }
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_events_that_change_files_rescan() {
        use notify::event::{
            AccessKind, AccessMode, CreateKind, EventKind, ModifyKind, RemoveKind, RenameMode,
        };
        let cases = [
            (EventKind::Access(AccessKind::Open(AccessMode::Any)), false),
            (EventKind::Access(AccessKind::Read), false),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Read)),
                false,
            ),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                true,
            ),
            (EventKind::Create(CreateKind::File), true),
            (EventKind::Modify(ModifyKind::Name(RenameMode::To)), true),
            (EventKind::Modify(ModifyKind::Any), true),
            (EventKind::Remove(RemoveKind::File), true),
            (EventKind::Any, true),
        ];
        for (kind, want) in cases {
            assert_eq!(changes_files(&kind), want, "{kind:?}");
        }
    }

    #[test]
    fn manifest_names() {
        for ok in ["pod.yaml", "a.yml", "x.json", "my.pod.yaml"] {
            assert!(is_manifest_name(ok), "{ok}");
        }
        for bad in [
            ".pod.yaml",
            "pod.yaml~",
            "pod.yaml.swp",
            "README",
            ".yaml",
            "pod.txt",
        ] {
            assert!(!is_manifest_name(bad), "{bad}");
        }
    }
}
