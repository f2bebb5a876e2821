//! The status manager: keeps the latest status of every pod and writes it, with the pod's
//! metadata and spec, to `<status_dir>/<namespace>_<name>.yaml` (atomically) when it changes;
//! a periodic flush rewrites files that are missing or stale (a failed write, a deleted file).

use crate::kubelet::podconfig::pod_identity;
use crate::util::atomic_file::write_atomic;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

struct Entry {
    path: PathBuf,
    pod: Pod,
    written: Option<Vec<u8>>,
}

/// Where pod statuses go besides the status files: the API server, for a cluster node. Calls
/// must not block (the sink queues and sends on its own).
pub trait StatusSink: Send + Sync {
    /// The status of `pod` changed.
    fn status_changed(&self, pod: &Pod, status: &PodStatus);
    /// The pod was stopped for good and its runtime objects removed; its final status went to
    /// [`status_changed`](Self::status_changed) first.
    fn pod_terminated(&self, pod: &Pod);
}

/// Latest pod statuses and their files.
pub struct StatusManager {
    dir: PathBuf,
    entries: Mutex<HashMap<String, Entry>>,
    sink: OnceLock<Arc<dyn StatusSink>>,
}

/// Status file name of a pod.
pub fn status_file_name(namespace: &str, name: &str) -> String {
    format!("{namespace}_{name}.yaml")
}

/// Reads a status file (a Pod with its status).
pub fn read_status_file(path: &Path) -> io::Result<Pod> {
    let text = std::fs::read_to_string(path)?;
    serde_yaml_ng::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

impl StatusManager {
    pub fn new(dir: PathBuf) -> Self {
        StatusManager {
            dir,
            entries: Mutex::new(HashMap::new()),
            sink: OnceLock::new(),
        }
    }

    /// Also sends statuses to `sink` (once; false when a sink was already set).
    pub fn set_sink(&self, sink: Arc<dyn StatusSink>) -> bool {
        self.sink.set(sink).is_ok()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The status last set for `uid`.
    pub fn status(&self, uid: &str) -> Option<PodStatus> {
        self.entries().get(uid).and_then(|e| e.pod.status.clone())
    }

    /// The status a previous agent run wrote for this pod (same uid), so start and transition
    /// times survive an agent restart.
    pub fn load_previous(&self, pod: &Pod) -> Option<PodStatus> {
        let (namespace, name, uid) = pod_identity(pod).ok()?;
        let path = self.dir.join(status_file_name(namespace, name));
        let previous = read_status_file(&path).ok()?;
        (previous.metadata.uid.as_deref() == Some(uid))
            .then_some(previous.status)
            .flatten()
    }

    /// Records the status of `pod`; writes its file when the content changed.
    pub fn set(&self, pod: &Pod, status: PodStatus) -> io::Result<bool> {
        let (namespace, name, uid) =
            pod_identity(pod).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let path = self.dir.join(status_file_name(namespace, name));
        let mut full = pod.clone();
        full.status = Some(status);
        let mut entries = self.entries();
        let uid = uid.to_string();
        // Every resync of every pod lands here: comparing the objects spares the YAML
        // emitter (the idle agent's largest cost when it ran each time).
        if entries
            .get(&uid)
            .is_some_and(|e| e.path == path && e.written.is_some() && e.pod == full)
        {
            return Ok(false);
        }
        let bytes = serde_yaml_ng::to_string(&full)
            .map_err(io::Error::other)?
            .into_bytes();
        if let Some(old) = entries.get(&uid)
            && old.path != path
        {
            // Renamed in its manifest: the old file is stale.
            let _ = std::fs::remove_file(&old.path);
        }
        let unchanged = entries
            .get(&uid)
            .is_some_and(|e| e.path == path && e.written.as_deref() == Some(&bytes[..]));
        let entry = entries.entry(uid).or_insert_with(|| Entry {
            path: path.clone(),
            pod: full.clone(),
            written: None,
        });
        entry.path = path;
        entry.pod = full;
        if unchanged {
            return Ok(false);
        }
        if let (Some(sink), Some(status)) = (self.sink.get(), entry.pod.status.as_ref()) {
            sink.status_changed(pod, status);
        }
        entry.written = None;
        std::fs::create_dir_all(&self.dir)?;
        write_atomic(&entry.path, &bytes)?;
        entry.written = Some(bytes);
        Ok(true)
    }

    /// Rewrites files that are missing, of another size than written, or were not written.
    /// A stat per file, not a read: with hundreds of pods this runs every few seconds.
    pub fn flush(&self) {
        let mut entries = self.entries();
        for entry in entries.values_mut() {
            let on_disk = std::fs::metadata(&entry.path).ok().map(|m| m.len());
            if let Some(written) = &entry.written
                && on_disk == Some(written.len() as u64)
            {
                continue;
            }
            let bytes = match serde_yaml_ng::to_string(&entry.pod) {
                Ok(text) => text.into_bytes(),
                Err(_) => continue,
            };
            let written =
                std::fs::create_dir_all(&self.dir).and_then(|()| write_atomic(&entry.path, &bytes));
            match written {
                Ok(()) => entry.written = Some(bytes),
                Err(err) => tracing::warn!(path = %entry.path.display(), error = %err,
                    "cannot write pod status file"),
            }
        }
    }

    /// The pod was stopped for good: forgets it and tells the sink.
    pub fn terminated(&self, pod: &Pod) {
        if let Some(uid) = pod.metadata.uid.as_deref() {
            self.remove(uid);
        }
        if let Some(sink) = self.sink.get() {
            sink.pod_terminated(pod);
        }
    }

    /// Forgets a pod and deletes its file.
    pub fn remove(&self, uid: &str) {
        if let Some(entry) = self.entries().remove(uid) {
            match std::fs::remove_file(&entry.path) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => tracing::warn!(path = %entry.path.display(), error = %err,
                    "cannot remove pod status file"),
            }
        }
    }

    /// Deletes status files of pods this manager does not know (left by an earlier run).
    pub fn remove_stray_files(&self) {
        let known: Vec<PathBuf> = self.entries().values().map(|e| e.path.clone()).collect();
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for item in dir.flatten() {
            let path = item.path();
            let is_status = path.extension().is_some_and(|e| e == "yaml");
            if is_status && !known.contains(&path) {
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    /// Every pod with a status, as last set (spec and status).
    pub fn pods(&self) -> Vec<Pod> {
        self.entries().values().map(|e| e.pod.clone()).collect()
    }

    /// Uids with a status.
    pub fn known(&self) -> Vec<String> {
        self.entries().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"containers": [{"name": "a", "image": "busybox"}]}
        }))
        .unwrap()
    }

    fn status(phase: &str) -> PodStatus {
        PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        }
    }

    #[test]
    fn writes_on_change_only_and_flush_repairs() {
        let dir = tempfile::tempdir().unwrap();
        let manager = StatusManager::new(dir.path().join("status"));
        let web = pod("web", "u1");
        assert!(manager.set(&web, status("Pending")).unwrap());
        assert!(!manager.set(&web, status("Pending")).unwrap());
        assert!(manager.set(&web, status("Running")).unwrap());
        let file = dir.path().join("status/ns_web.yaml");
        let read = read_status_file(&file).unwrap();
        assert_eq!(read.status.unwrap().phase.as_deref(), Some("Running"));
        assert_eq!(read.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(
            manager.load_previous(&web).unwrap().phase.as_deref(),
            Some("Running")
        );
        assert!(manager.load_previous(&pod("web", "other-uid")).is_none());

        std::fs::remove_file(&file).unwrap();
        manager.flush();
        assert!(file.exists());
    }

    #[test]
    fn rename_remove_and_strays() {
        let dir = tempfile::tempdir().unwrap();
        let manager = StatusManager::new(dir.path().to_path_buf());
        manager.set(&pod("web", "u1"), status("Running")).unwrap();
        manager.set(&pod("web2", "u1"), status("Running")).unwrap();
        assert!(!dir.path().join("ns_web.yaml").exists());
        assert!(dir.path().join("ns_web2.yaml").exists());
        std::fs::write(dir.path().join("ns_old.yaml"), "x").unwrap();
        manager.remove_stray_files();
        assert!(!dir.path().join("ns_old.yaml").exists());
        assert!(dir.path().join("ns_web2.yaml").exists());
        manager.remove("u1");
        assert!(!dir.path().join("ns_web2.yaml").exists());
        assert!(manager.known().is_empty());
    }
}
