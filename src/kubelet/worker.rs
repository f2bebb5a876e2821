//! Pod workers: one task per pod UID. Updates are coalesced (the latest spec wins, a pending sync
//! is never queued twice); each sync inspects the runtime, computes the pod's actions, executes
//! them, regenerates the status and (re)starts probe workers. Pods resync every 60 s, at once on
//! a PLEG event, a probe result or an object change, and when a back-off ends. Removal
//! terminates gracefully: kill (preStop, grace period) → sandbox stop/remove → volume teardown →
//! pod directory and status removed.

use crate::cri::RuntimeService;
use crate::kubelet::actions::{CRASH_LOOP_BACK_OFF, compute_pod_actions};
use crate::kubelet::backoff::{Backoff, BackoffKey};
use crate::kubelet::cleanup::remove_dir_same_fs;
use crate::kubelet::clock::Clock;
use crate::kubelet::config::AgentConfig;
use crate::kubelet::environment::PodEnvironment;
use crate::kubelet::executor::{Executor, SyncAction};
use crate::kubelet::podconfig::pod_identity;
use crate::kubelet::podconfig::spec::convert::pod_log_directory;
use crate::kubelet::prober::manager::ProbeManager;
use crate::kubelet::runtime_pod::{RuntimePod, inspect_pod};
use crate::kubelet::status::generate::set_terminal_phase;
use crate::kubelet::status::{StatusInputs, StatusManager, Waiting, generate_pod_status};
use crate::kubelet::termination::fill_messages;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// What every worker uses.
pub struct SyncDeps {
    pub runtime: Arc<dyn RuntimeService>,
    pub executor: Arc<Executor>,
    pub environment: Arc<dyn PodEnvironment>,
    pub probes: Arc<ProbeManager>,
    pub status: Arc<StatusManager>,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<AgentConfig>,
    pub metrics: Arc<crate::kubelet::metrics::KubeletMetrics>,
}

#[derive(Default)]
struct Pending {
    pod: Option<Pod>,
    sync: bool,
    /// Terminate, with an optional grace period override.
    terminate: Option<Option<i64>>,
    /// The worker took a termination request: later updates of a deleted pod must not
    /// start it again.
    terminating: bool,
    /// The worker exited; updates must start a new one.
    closed: bool,
}

struct Slot {
    pending: Mutex<Pending>,
    notify: Notify,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Handle {
    slot: Arc<Slot>,
    task: JoinHandle<()>,
}

/// The set of pod workers.
pub struct PodWorkers {
    deps: Arc<SyncDeps>,
    workers: Mutex<HashMap<String, Handle>>,
}

impl PodWorkers {
    pub fn new(deps: Arc<SyncDeps>) -> Self {
        PodWorkers {
            deps,
            workers: Mutex::new(HashMap::new()),
        }
    }

    fn workers(&self) -> MutexGuard<'_, HashMap<String, Handle>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new pod or a new spec of a known one. A pod with a `deletionTimestamp` (deleted in
    /// the API server) is terminated within its `deletionGracePeriodSeconds`.
    pub fn update(&self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            tracing::warn!(pod = ?pod.metadata.name, "ignoring a pod without a uid");
            return;
        };
        let deleted = pod
            .metadata
            .deletion_timestamp
            .is_some()
            .then_some(pod.metadata.deletion_grace_period_seconds);
        let mut workers = self.workers();
        if let Some(handle) = workers.get(&uid) {
            let mut pending = handle.slot.lock();
            if !pending.closed {
                if deleted.is_some() && pending.terminating {
                    // Already stopping: a deleted pod never comes back under its uid.
                    return;
                }
                pending.pod = Some(pod);
                // Re-added before its termination started: keep it (unless deleted).
                pending.terminate = deleted;
                drop(pending);
                handle.slot.notify.notify_one();
                return;
            }
            if deleted.is_some() {
                // Terminated already; its deletion finished with it.
                return;
            }
        }
        let slot = Arc::new(Slot {
            pending: Mutex::new(Pending {
                terminate: deleted,
                ..Pending::default()
            }),
            notify: Notify::new(),
        });
        let task = tokio::spawn(run(Arc::clone(&self.deps), Arc::clone(&slot), pod));
        workers.insert(uid, Handle { slot, task });
    }

    /// Requests a sync of `uid` (runtime event, probe change). Unknown pods are ignored.
    pub fn sync(&self, uid: &str) {
        if let Some(handle) = self.workers().get(uid) {
            handle.slot.lock().sync = true;
            handle.slot.notify.notify_one();
        }
    }

    /// Requests a sync of every pod (ConfigMap/Secret changes).
    pub fn sync_all(&self) {
        for handle in self.workers().values() {
            handle.slot.lock().sync = true;
            handle.slot.notify.notify_one();
        }
    }

    /// Terminates the pod `uid`; false when no worker knows it.
    pub fn terminate(&self, uid: &str, grace: Option<i64>) -> bool {
        let workers = self.workers();
        let Some(handle) = workers.get(uid) else {
            return false;
        };
        let mut pending = handle.slot.lock();
        if pending.closed {
            return false;
        }
        pending.terminate = Some(grace);
        drop(pending);
        handle.slot.notify.notify_one();
        true
    }

    /// Uids of pods with a live worker (terminating ones included).
    pub fn uids(&self) -> Vec<String> {
        self.reap();
        self.workers().keys().cloned().collect()
    }

    pub fn is_known(&self, uid: &str) -> bool {
        self.reap();
        self.workers().contains_key(uid)
    }

    /// Drops the handles of workers that finished.
    fn reap(&self) {
        self.workers().retain(|_, h| !h.task.is_finished());
    }

    /// Stops every worker task without touching the pods (agent shutdown: pods keep running).
    pub fn shutdown(&self) {
        for (_, handle) in self.workers().drain() {
            handle.task.abort();
        }
    }
}

/// Per-pod state of a worker.
struct WorkerState {
    pod: Pod,
    uid: String,
    restart_backoff: Backoff,
    pull_backoff: Backoff,
    waiting: HashMap<String, Waiting>,
    previous: Option<PodStatus>,
    /// When this worker first saw the pod; None once its start was recorded.
    first_seen: Option<tokio::time::Instant>,
}

impl WorkerState {
    fn new(deps: &SyncDeps, pod: Pod) -> Self {
        let timings = &deps.config.timings;
        WorkerState {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            previous: deps.status.load_previous(&pod),
            pod,
            restart_backoff: Backoff::new(timings.backoff_initial, timings.backoff_max),
            pull_backoff: Backoff::new(timings.backoff_initial, timings.backoff_max),
            waiting: HashMap::new(),
            first_seen: Some(deps.clock.now()),
        }
    }
}

async fn run(deps: Arc<SyncDeps>, slot: Arc<Slot>, pod: Pod) {
    let mut state = WorkerState::new(&deps, pod);
    let mut next_sync = deps.clock.now();
    loop {
        tokio::select! {
            _ = slot.notify.notified() => {}
            _ = tokio::time::sleep_until(next_sync) => {}
        }
        let (pod, terminate) = {
            let mut pending = slot.lock();
            pending.sync = false;
            let terminate = pending.terminate.take();
            pending.terminating |= terminate.is_some();
            (pending.pod.take(), terminate)
        };
        if let Some(pod) = pod {
            state.pod = pod;
        }
        if let Some(grace) = terminate {
            terminate_pod(&deps, &state.pod, grace).await;
            let mut pending = slot.lock();
            match pending.pod.take() {
                // Re-added while terminating: start over with the new spec.
                Some(pod) if pod.metadata.deletion_timestamp.is_none() => {
                    pending.terminating = false;
                    drop(pending);
                    state = WorkerState::new(&deps, pod);
                    next_sync = deps.clock.now();
                    continue;
                }
                _ => {
                    pending.closed = true;
                    return;
                }
            }
        }
        let requeue = sync_pod(&deps, &mut state).await;
        let resync = deps.config.timings.resync;
        next_sync = deps.clock.now() + requeue.map_or(resync, |r| r.min(resync));
    }
}

fn log_dir(deps: &SyncDeps, pod: &Pod) -> PathBuf {
    pod_identity(pod)
        .map(|(ns, name, uid)| PathBuf::from(pod_log_directory(&deps.config, ns, name, uid)))
        .unwrap_or_default()
}

async fn inspect(deps: &SyncDeps, pod: &Pod, uid: &str) -> Option<RuntimePod> {
    match inspect_pod(deps.runtime.as_ref(), uid).await {
        Ok(mut rt) => {
            fill_messages(&mut rt, &log_dir(deps, pod));
            Some(rt)
        }
        Err(status) => {
            tracing::warn!(pod = %uid, error = %status, "cannot read the pod's runtime state");
            None
        }
    }
}

/// One sync; returns how soon the pod wants another one (a back-off ending).
async fn sync_pod(deps: &SyncDeps, state: &mut WorkerState) -> Option<Duration> {
    let uid = state.uid.clone();
    // A failed step (or runtime read) is retried as kubelet's pod workers retry a failed sync:
    // after the back-off period, not at the next resync a minute later.
    let retry_failed = deps.config.timings.backoff_initial;
    let Some(rt) = inspect(deps, &state.pod, &uid).await else {
        return Some(retry_failed);
    };
    let mut step_failed = false;
    let now = deps.clock.wall();
    let probes = deps.probes.results();
    let actions = compute_pod_actions(&state.pod, &rt, now, &state.restart_backoff, &probes);
    for waiting in &actions.backing_off {
        let pod = &state.pod;
        deps.executor.events.warning(
            pod,
            Some(&waiting.name),
            crate::kubelet::events::reason::BACK_OFF,
            format!(
                "Back-off restarting failed container {} in pod {}_{}({uid})",
                waiting.name,
                pod.metadata.name.as_deref().unwrap_or_default(),
                pod.metadata.namespace.as_deref().unwrap_or_default(),
            ),
        );
        state.waiting.insert(
            waiting.name.clone(),
            Waiting {
                reason: CRASH_LOOP_BACK_OFF.to_string(),
                message: waiting.message.clone(),
            },
        );
    }
    let mut rt_now = rt.clone();
    if !actions.is_noop() {
        tracing::debug!(pod = %uid, ?actions, "syncing pod");
        let results = deps
            .executor
            .execute(&state.pod, &rt, &actions, &mut state.pull_backoff)
            .await;
        let image_of = |name: &str| {
            state
                .pod
                .spec
                .iter()
                .flat_map(|s| {
                    s.containers
                        .iter()
                        .chain(s.init_containers.iter().flatten())
                })
                .find(|c| c.name == name)
                .and_then(|c| c.image.clone())
                .unwrap_or_default()
        };
        for start in actions
            .next_init_container
            .iter()
            .chain(&actions.containers_to_start)
            .filter(|s| s.after_exit)
        {
            let failed_at = rt
                .latest(&start.name)
                .and_then(|c| c.finished_at)
                .unwrap_or(now);
            let key = BackoffKey::new(&uid, &start.name, &image_of(&start.name));
            state.restart_backoff.record_retry(&key, failed_at, now);
        }
        step_failed = results.iter().any(|r| r.error.is_some());
        for result in &results {
            match (&result.error, result.action) {
                (Some(error), SyncAction::StartContainer) => {
                    tracing::warn!(pod = %uid, container = %result.target, %error, "cannot start container");
                    state.waiting.insert(
                        result.target.clone(),
                        Waiting {
                            reason: error.reason.to_string(),
                            message: error.message.clone(),
                        },
                    );
                }
                (None, SyncAction::StartContainer) => {
                    state.waiting.remove(&result.target);
                }
                (Some(error), action) => {
                    tracing::warn!(pod = %uid, target = %result.target, ?action, %error, "pod sync step failed");
                }
                (None, _) => {}
            }
        }
        rt_now = inspect(deps, &state.pod, &uid).await.unwrap_or(rt);
    }
    // A running pod's configMap/secret/token files follow their objects (kubelet remounts
    // them on every sync); a sync that starts something set them up already.
    let set_up = actions.create_sandbox.is_some()
        || actions.next_init_container.is_some()
        || !actions.containers_to_start.is_empty();
    if !actions.kill_pod && !set_up && rt_now.ready_sandbox().is_some() {
        deps.executor.refresh_volumes(&state.pod);
    }
    state.restart_backoff.gc(now, |_| true);
    state.pull_backoff.gc(now, |_| true);

    let status = generate_pod_status(&StatusInputs {
        pod: &state.pod,
        runtime: &rt_now,
        waiting: &state.waiting,
        probes: &deps.probes.results(),
        previous: state.previous.as_ref(),
        host_ip: &deps.config.node_ip.to_string(),
        now: deps.clock.wall(),
    });
    if let Err(err) = deps.status.set(&state.pod, status.clone()) {
        tracing::warn!(pod = %uid, error = %err, "cannot write the pod status");
    }
    if all_running(&status)
        && let Some(seen) = state.first_seen.take()
    {
        let took = deps.clock.now().saturating_duration_since(seen);
        deps.metrics.observe_pod_start(took);
    }
    state.previous = Some(status);
    deps.probes.sync_pod(&state.pod, &rt_now);
    [
        actions.requeue_after(),
        state.pull_backoff.next_retry(now),
        step_failed.then_some(retry_failed),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// kubelet's "started" for the pod start metric: Running, every container running.
fn all_running(status: &PodStatus) -> bool {
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    status.phase.as_deref() == Some("Running")
        && !containers.is_empty()
        && containers
            .iter()
            .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// Kills and removes everything of a pod, then its volumes, directory, logs and status.
pub async fn terminate_pod(deps: &SyncDeps, pod: &Pod, grace: Option<i64>) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    tracing::info!(pod = %uid, name = ?pod.metadata.name, "terminating pod");
    deps.probes.remove_pod(&uid);
    let mut delay = Duration::from_secs(1);
    for attempt in 1..=5 {
        let Some(rt) = inspect(deps, pod, &uid).await else {
            tokio::time::sleep(delay).await;
            continue;
        };
        let results = deps.executor.kill_pod(Some(pod), &rt, grace).await;
        let failed: Vec<_> = results.iter().filter_map(|r| r.error.as_ref()).collect();
        if failed.is_empty() {
            break;
        }
        tracing::warn!(pod = %uid, attempt, errors = ?failed, "killing the pod failed; retrying");
        tokio::time::sleep(delay).await;
        delay *= 2;
    }
    if let Some(rt) = inspect(deps, pod, &uid).await {
        // The final status (containers terminated, terminal phase) before the records go.
        let mut status = generate_pod_status(&StatusInputs {
            pod,
            runtime: &rt,
            waiting: &HashMap::new(),
            probes: &deps.probes.results(),
            previous: deps.status.status(&uid).as_ref(),
            host_ip: &deps.config.node_ip.to_string(),
            now: deps.clock.wall(),
        });
        set_terminal_phase(&mut status);
        if let Err(err) = deps.status.set(pod, status) {
            tracing::warn!(pod = %uid, error = %err, "cannot write the pod status");
        }
        deps.executor.remove_pod(&rt).await;
    }
    cleanup_pod_files(deps, &uid, Some(&log_dir(deps, pod)));
    deps.status.terminated(pod);
    tracing::info!(pod = %uid, "pod terminated");
}

/// Tears the volumes of `uid` down and removes its directory (and log directory).
pub fn cleanup_pod_files(deps: &SyncDeps, uid: &str, log_dir: Option<&std::path::Path>) {
    match deps.environment.teardown_volumes(uid) {
        Ok(()) => {
            if let Err(err) = remove_dir_same_fs(&deps.config.pod_dir(uid)) {
                tracing::warn!(pod = %uid, error = %err, "cannot remove the pod directory");
            }
        }
        Err(err) => tracing::warn!(pod = %uid, error = %err, "cannot tear the pod's volumes down"),
    }
    if let Some(dir) = log_dir.filter(|d| !d.as_os_str().is_empty())
        && let Err(err) = remove_dir_same_fs(dir)
    {
        tracing::warn!(pod = %uid, error = %err, "cannot remove the pod's logs");
    }
}
