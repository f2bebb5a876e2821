//! Housekeeping (every 5 s): pods the runtime still runs but no source knows are killed and
//! removed (after the sources had time to report every pod, so an agent restart adopts instead);
//! pod directories and log directories of unknown pods with nothing left in the runtime are
//! removed; status files of unknown pods are deleted.

use crate::cri::api;
use crate::kubelet::labels;
use crate::kubelet::podconfig::spec::convert::pod_log_directory;
use crate::kubelet::runtime_pod::inspect_pod;
use crate::kubelet::worker::{PodWorkers, SyncDeps, cleanup_pod_files};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Orphans being terminated, so a slow termination is not started twice.
#[derive(Clone, Default)]
pub struct Orphans(Arc<Mutex<HashSet<String>>>);

impl Orphans {
    fn claim(&self, uid: &str) -> bool {
        self.0
            .lock()
            .map(|mut set| set.insert(uid.to_string()))
            .unwrap_or(false)
    }

    fn release(&self, uid: &str) {
        if let Ok(mut set) = self.0.lock() {
            set.remove(uid);
        }
    }

    fn contains(&self, uid: &str) -> bool {
        self.0.lock().map(|set| set.contains(uid)).unwrap_or(true)
    }
}

/// uid → log directory of every pod the runtime has objects for.
async fn runtime_pods(deps: &SyncDeps) -> crate::cri::CriResult<HashMap<String, Option<PathBuf>>> {
    let mut pods: HashMap<String, Option<PathBuf>> = HashMap::new();
    let sandboxes = deps
        .runtime
        .list_pod_sandbox(api::ListPodSandboxRequest::default())
        .await?
        .items;
    for sandbox in sandboxes {
        let Some(uid) = sandbox.labels.get(labels::POD_UID) else {
            continue;
        };
        let log_dir = match (
            sandbox.labels.get(labels::POD_NAMESPACE),
            sandbox.labels.get(labels::POD_NAME),
        ) {
            (Some(ns), Some(name)) => Some(PathBuf::from(pod_log_directory(
                &deps.config,
                ns,
                name,
                uid,
            ))),
            _ => None,
        };
        pods.insert(uid.clone(), log_dir);
    }
    let containers = deps
        .runtime
        .list_containers(api::ListContainersRequest::default())
        .await?
        .containers;
    for container in containers {
        if let Some(uid) = container.labels.get(labels::POD_UID) {
            pods.entry(uid.clone()).or_insert(None);
        }
    }
    Ok(pods)
}

/// Kills and removes a pod no source knows, from what its containers recorded.
async fn terminate_orphan(deps: Arc<SyncDeps>, uid: String, log_dir: Option<PathBuf>) {
    tracing::info!(pod = %uid, "killing a pod that no source knows");
    match inspect_pod(deps.runtime.as_ref(), &uid).await {
        Ok(rt) => {
            let results = deps.executor.kill_pod(None, &rt, None).await;
            if results.iter().all(|r| r.error.is_none()) {
                deps.executor.remove_pod(&rt).await;
                cleanup_pod_files(&deps, &uid, log_dir.as_deref());
            } else {
                tracing::warn!(pod = %uid, ?results, "cannot kill an orphaned pod; will retry");
            }
        }
        Err(status) => {
            tracing::warn!(pod = %uid, error = %status, "cannot inspect an orphaned pod")
        }
    }
}

/// Stops every pod the runtime runs, all at once (each container within its recorded grace
/// period, then the sandbox), keeping their records so that a restarted agent starts them again.
pub async fn stop_all(deps: &SyncDeps) {
    let pods = match runtime_pods(deps).await {
        Ok(pods) => pods,
        Err(status) => {
            tracing::warn!(error = %status, "cannot list the pods to stop");
            return;
        }
    };
    let stops = pods.into_keys().map(|uid| async move {
        match inspect_pod(deps.runtime.as_ref(), &uid).await {
            Ok(rt) => {
                let results = deps.executor.kill_pod(None, &rt, None).await;
                let failed: Vec<_> = results.iter().filter_map(|r| r.error.as_ref()).collect();
                if failed.is_empty() {
                    tracing::info!(pod = %uid, "pod stopped");
                } else {
                    tracing::warn!(pod = %uid, errors = ?failed, "cannot stop the pod");
                }
            }
            Err(status) => tracing::warn!(pod = %uid, error = %status, "cannot inspect the pod"),
        }
    });
    futures::future::join_all(stops).await;
}

/// One housekeeping pass. `sources_ready` says whether every source reported its pods.
pub async fn run_once(
    deps: &Arc<SyncDeps>,
    workers: &PodWorkers,
    orphans: &Orphans,
    sources_ready: bool,
) {
    if !sources_ready {
        return;
    }
    let in_runtime = match runtime_pods(deps).await {
        Ok(pods) => pods,
        Err(status) => {
            tracing::warn!(error = %status, "housekeeping: cannot list runtime pods");
            return;
        }
    };
    for (uid, log_dir) in &in_runtime {
        if workers.is_known(uid) || !orphans.claim(uid) {
            continue;
        }
        let deps = Arc::clone(deps);
        let orphans = orphans.clone();
        let (uid, log_dir) = (uid.clone(), log_dir.clone());
        tokio::spawn(async move {
            terminate_orphan(deps, uid.clone(), log_dir).await;
            orphans.release(&uid);
        });
    }
    let gone = |uid: &str| {
        !workers.is_known(uid) && !in_runtime.contains_key(uid) && !orphans.contains(uid)
    };
    if let Ok(dir) = std::fs::read_dir(deps.config.root_dir.join("var/pods")) {
        for entry in dir.flatten() {
            let uid = entry.file_name().to_string_lossy().into_owned();
            if gone(&uid) {
                tracing::info!(pod = %uid, "removing the directory of an orphaned pod");
                cleanup_pod_files(deps, &uid, None);
            }
        }
    }
    if let Ok(dir) = std::fs::read_dir(&deps.config.pod_logs_dir) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((_, uid)) = name.rsplit_once('_') else {
                continue;
            };
            if gone(uid)
                && let Err(err) = crate::kubelet::cleanup::remove_dir_same_fs(&entry.path())
            {
                tracing::warn!(dir = %entry.path().display(), error = %err, "cannot remove orphaned logs");
            }
        }
    }
    deps.status.remove_stray_files();
}
