//! The agent: wires the pod source, pod workers, PLEG, probes, status manager, GC and log
//! rotation together over the CRI traits.
//!
//! Restart-safe by construction: a pod's sync compares its spec with what the runtime reports,
//! so containers that a previous agent started (same spec hash) are adopted, not restarted.
//! Shutdown stops the agent's tasks only; pods keep running (unless `stopping_pods_on_shutdown`).

use crate::cri::{ImageService, RuntimeService, api};
use crate::kubelet::admission::NodeFactsSource;
use crate::kubelet::admission::gate::{AdmissionGate, Verdict};
use crate::kubelet::clock::Clock;
use crate::kubelet::config::AgentConfig;
use crate::kubelet::environment::PodEnvironment;
use crate::kubelet::executor::Executor;
use crate::kubelet::gc::containers::{GcPolicy, collect};
use crate::kubelet::gc::images::{ImageGc, ImageGcPolicy};
use crate::kubelet::gc::logs::{LogPaths, rotate_all};
use crate::kubelet::housekeeping::{self, Orphans};
use crate::kubelet::labels;
use crate::kubelet::metrics::KubeletMetrics;
use crate::kubelet::pleg::{Pleg, PlegHealth, RelistPeriods};
use crate::kubelet::podconfig::spec::resources::qos_class;
use crate::kubelet::podconfig::{ObjectSource, PodEvent};
use crate::kubelet::prober::manager::ProbeManager;
use crate::kubelet::status::StatusManager;
use crate::kubelet::status::manager::StatusSink;
use crate::kubelet::worker::{PodWorkers, SyncDeps};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Errors that stop the agent from starting.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("the container runtime does not answer: {0}")]
    Runtime(tonic::Status),
    #[error("cannot create {path}: {source}")]
    Directory {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// What an agent is built from.
pub struct AgentParts {
    pub runtime: Arc<dyn RuntimeService>,
    pub images: Arc<dyn ImageService>,
    pub config: AgentConfig,
    /// Pod source events (Upsert/Remove/ObjectsChanged).
    pub events: mpsc::Receiver<PodEvent>,
    pub objects: Arc<dyn ObjectSource>,
    pub environment: Arc<dyn PodEnvironment>,
    pub clock: Arc<dyn Clock>,
    pub image_gc: ImageGcPolicy,
    /// Where the sync loop records pod start latency and PLEG figures.
    pub metrics: Arc<KubeletMetrics>,
}

/// A running view of the agent for callers (CLI status output, tests).
#[derive(Clone)]
pub struct AgentHandle {
    workers: Arc<PodWorkers>,
    pleg: PlegHealth,
    clock: Arc<dyn Clock>,
    status: Arc<StatusManager>,
}

impl AgentHandle {
    /// Uids of the pods the agent manages.
    pub fn pods(&self) -> Vec<String> {
        self.workers.uids()
    }

    /// The pods the agent runs, with their latest status (the kubelet API's `/pods`).
    pub fn pod_objects(&self) -> Vec<Pod> {
        let live: std::collections::HashSet<String> = self.workers.uids().into_iter().collect();
        self.status
            .pods()
            .into_iter()
            .filter(|p| p.metadata.uid.as_ref().is_some_and(|u| live.contains(u)))
            .collect()
    }

    /// `Err(reason)` when the PLEG stopped relisting.
    pub fn health(&self) -> Result<(), String> {
        self.pleg.check(self.clock.now())
    }
}

pub struct Agent {
    deps: Arc<SyncDeps>,
    workers: Arc<PodWorkers>,
    pleg: Arc<Pleg>,
    images: Arc<dyn ImageService>,
    events: Option<mpsc::Receiver<PodEvent>>,
    probe_updates: mpsc::UnboundedReceiver<crate::kubelet::prober::manager::ProbeUpdate>,
    image_gc: ImageGcPolicy,
    sources_ready: Option<SourcesReady>,
    admission: Option<AdmissionGate>,
    pod_events: Arc<crate::kubelet::events::PodEvents>,
    stop_pods_on_shutdown: bool,
}

/// Whether the pod sources have reported every pod they have (the API source once its first
/// list is in): until then housekeeping must not take a pod the runtime runs for an orphan.
pub type SourcesReady = Arc<dyn Fn() -> bool + Send + Sync>;

/// One periodic background job that never runs twice at once.
#[derive(Default)]
struct Job(Option<JoinHandle<()>>);

impl Job {
    fn start(&mut self, future: impl Future<Output = ()> + Send + 'static) {
        if self.0.as_ref().is_none_or(|t| t.is_finished()) {
            self.0 = Some(tokio::spawn(future));
        }
    }

    fn abort(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

fn interval(period: std::time::Duration) -> tokio::time::Interval {
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker
}

impl Agent {
    pub fn new(parts: AgentParts) -> Agent {
        let config = Arc::new(parts.config);
        let (probe_tx, probe_updates) = mpsc::unbounded_channel();
        // One recorder for the whole sync loop; a sink (the API server) is set on it later.
        let pod_events = Arc::new(crate::kubelet::events::PodEvents::default());
        let probes = Arc::new(ProbeManager::new(
            Arc::clone(&parts.runtime),
            Arc::clone(&parts.clock),
            config.node_ip.to_string(),
            probe_tx,
            Arc::clone(&pod_events),
        ));
        let executor = Arc::new(Executor {
            runtime: Arc::clone(&parts.runtime),
            images: Arc::clone(&parts.images),
            environment: Arc::clone(&parts.environment),
            objects: parts.objects,
            config: Arc::clone(&config),
            clock: Arc::clone(&parts.clock),
            handlers: probes.handlers(),
            events: Arc::clone(&pod_events),
        });
        let deps = Arc::new(SyncDeps {
            runtime: Arc::clone(&parts.runtime),
            executor,
            environment: parts.environment,
            probes,
            status: Arc::new(StatusManager::new(config.status_dir.clone())),
            clock: Arc::clone(&parts.clock),
            config: Arc::clone(&config),
            metrics: Arc::clone(&parts.metrics),
        });
        let pleg = Arc::new(Pleg::new(
            parts.runtime,
            parts.clock,
            RelistPeriods {
                plain: config.timings.pleg_relist,
                evented: config.timings.pleg_relist_evented,
            },
            config.timings.pleg_unhealthy_after,
            parts.metrics,
        ));
        Agent {
            workers: Arc::new(PodWorkers::new(Arc::clone(&deps))),
            deps,
            pleg,
            images: parts.images,
            events: Some(parts.events),
            probe_updates,
            image_gc: parts.image_gc,
            sources_ready: None,
            admission: None,
            pod_events,
            stop_pods_on_shutdown: false,
        }
    }

    /// At shutdown, stop every pod (containers within their grace periods, then sandboxes)
    /// before returning: for an agent whose exit kills the pods anyway (PID 1 of a container,
    /// whose exit SIGKILLs its PID namespace), as kubelet's graceful node shutdown does.
    pub fn stopping_pods_on_shutdown(mut self) -> Agent {
        self.stop_pods_on_shutdown = true;
        self
    }

    /// New pods are admitted against the node `node` describes (kubelet's generalPredicates);
    /// a pod that does not fit is not started and its status becomes Failed.
    pub fn with_admission(mut self, node: Arc<dyn NodeFactsSource>) -> Agent {
        self.admission = Some(AdmissionGate::new(node));
        self
    }

    /// Pod events also go to `sink` (the API server); without one they are only logged.
    pub fn with_pod_event_sink(self, sink: Arc<dyn crate::kubelet::events::PodEventSink>) -> Agent {
        if !self.pod_events.set_sink(sink) {
            tracing::warn!("a pod event sink was already set; keeping the first");
        }
        self
    }

    /// Housekeeping also waits for `ready` before it removes pods no source knows.
    pub fn with_sources_ready(mut self, ready: SourcesReady) -> Agent {
        self.sources_ready = Some(ready);
        self
    }

    /// Statuses also go to `sink` (the API server), and so do terminations.
    pub fn with_status_sink(self, sink: Arc<dyn StatusSink>) -> Agent {
        if !self.deps.status.set_sink(sink) {
            tracing::warn!("a status sink was already set; keeping the first");
        }
        self
    }

    pub fn handle(&self) -> AgentHandle {
        AgentHandle {
            workers: Arc::clone(&self.workers),
            pleg: self.pleg.health(),
            clock: Arc::clone(&self.deps.clock),
            status: Arc::clone(&self.deps.status),
        }
    }

    async fn prepare(&self) -> Result<(), AgentError> {
        let config = &self.deps.config;
        // Pod volumes hold Secret files: kubelet's 0750 for its pods directory.
        let pods = config.root_dir.join("var/pods");
        crate::util::private_dir::ensure_private_dir(&pods, 0o750)
            .map_err(|source| AgentError::Directory { path: pods, source })?;
        for path in [
            config.root_dir.join("var/pods"),
            config.pod_logs_dir.clone(),
            config.status_dir.clone(),
        ] {
            std::fs::create_dir_all(&path)
                .map_err(|source| AgentError::Directory { path, source })?;
        }
        // For `runp logs`, which knows only the root.
        let record = config.pod_logs_dir_record();
        std::fs::write(&record, config.pod_logs_dir.as_os_str().as_encoded_bytes()).map_err(
            |source| AgentError::Directory {
                path: record,
                source,
            },
        )?;
        let version = self
            .deps
            .runtime
            .version(api::VersionRequest::default())
            .await
            .map_err(AgentError::Runtime)?;
        let existing = self
            .deps
            .runtime
            .list_pod_sandbox(api::ListPodSandboxRequest {
                filter: Some(api::PodSandboxFilter {
                    label_selector: HashMap::from([(labels::MANAGED.to_string(), "true".into())]),
                    ..Default::default()
                }),
            })
            .await
            .map_err(AgentError::Runtime)?
            .items;
        let running = existing
            .iter()
            .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
            .count();
        tracing::info!(
            runtime = %version.runtime_name, version = %version.runtime_version,
            sandboxes = existing.len(), running,
            "agent starting; pods from a previous run are adopted as their manifests are read"
        );
        Ok(())
    }

    /// Runs until `shutdown` completes; pods keep running afterwards.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
        self.prepare().await?;
        let deps = Arc::clone(&self.deps);
        let timings = deps.config.timings.clone();
        let started = deps.clock.now();
        let (pleg_tx, mut pleg_events) = mpsc::channel(1000);
        let pleg_task = tokio::spawn(Arc::clone(&self.pleg).run(pleg_tx));
        let orphans = Orphans::default();
        let mut housekeeping_job = Job::default();
        let mut container_gc_job = Job::default();
        let mut image_gc_job = Job::default();
        let mut log_job = Job::default();
        let image_gc_state = Arc::new(tokio::sync::Mutex::new(ImageGc::default()));
        let mut housekeeping_tick = interval(timings.housekeeping);
        let mut status_tick = interval(timings.status_sync);
        let mut container_gc_tick = interval(timings.container_gc);
        let mut image_gc_tick = interval(self.image_gc.period);
        let mut log_tick = interval(timings.log_rotation);
        let log_paths = Arc::new(LogPaths::default());
        let mut pleg_was_healthy = true;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                event = recv(&mut self.events) => match event {
                    Some(event) => self.handle_event(event),
                    None => {
                        tracing::warn!("the pod source closed; pods keep running as they are");
                        self.events = None;
                    }
                },
                Some(event) = pleg_events.recv() => self.workers.sync(&event.pod_uid),
                Some(update) = self.probe_updates.recv() => self.workers.sync(&update.pod_uid),
                _ = housekeeping_tick.tick() => {
                    let now = deps.clock.now();
                    let sources_ready = now.saturating_duration_since(started) >= timings.housekeeping
                        && self.events.as_ref().is_none_or(|rx| rx.is_empty())
                        && self.sources_ready.as_ref().is_none_or(|ready| ready());
                    let (deps, workers, orphans) =
                        (Arc::clone(&deps), Arc::clone(&self.workers), orphans.clone());
                    housekeeping_job.start(async move {
                        housekeeping::run_once(&deps, &workers, &orphans, sources_ready).await;
                    });
                    match (self.pleg.health().check(now), pleg_was_healthy) {
                        (Err(message), true) => {
                            tracing::error!(%message, "PLEG unhealthy");
                            pleg_was_healthy = false;
                        }
                        (Ok(()), false) => {
                            tracing::info!("PLEG healthy again");
                            pleg_was_healthy = true;
                        }
                        _ => {}
                    }
                }
                _ = status_tick.tick() => deps.status.flush(),
                _ = container_gc_tick.tick() => {
                    let (deps, workers) = (Arc::clone(&deps), Arc::clone(&self.workers));
                    let policy = GcPolicy {
                        min_age: timings.container_gc_min_age,
                        max_per_container: timings.container_gc_max_per_container,
                    };
                    container_gc_job.start(async move {
                        let known = |uid: &str| workers.is_known(uid);
                        let now = deps.clock.wall();
                        if let Err(status) = collect(deps.runtime.as_ref(), &known, policy, now).await {
                            tracing::warn!(error = %status, "container GC failed");
                        }
                    });
                }
                _ = image_gc_tick.tick() => {
                    let (deps, images, state) =
                        (Arc::clone(&deps), Arc::clone(&self.images), Arc::clone(&image_gc_state));
                    let policy = self.image_gc;
                    image_gc_job.start(async move {
                        let now = deps.clock.wall();
                        let mut gc = state.lock().await;
                        if let Err(status) =
                            gc.collect(deps.runtime.as_ref(), images.as_ref(), &policy, now).await
                        {
                            tracing::warn!(error = %status, "image GC failed");
                        }
                    });
                }
                _ = log_tick.tick() => {
                    let (deps, log_paths) = (Arc::clone(&deps), Arc::clone(&log_paths));
                    log_job.start(async move {
                        let (runtime, now) = (deps.runtime.as_ref(), deps.clock.wall());
                        if let Err(status) = rotate_all(runtime, &deps.config, &log_paths, now).await
                        {
                            tracing::warn!(error = %status, "log rotation failed");
                        }
                    });
                }
            }
        }
        if self.stop_pods_on_shutdown {
            tracing::info!("agent stopping; stopping every pod first");
        } else {
            tracing::info!("agent stopping; pods keep running");
        }
        pleg_task.abort();
        for job in [
            &mut housekeeping_job,
            &mut container_gc_job,
            &mut image_gc_job,
            &mut log_job,
        ] {
            job.abort();
        }
        self.workers.shutdown();
        if self.stop_pods_on_shutdown {
            // After the workers: none restarts a container being stopped.
            housekeeping::stop_all(&deps).await;
        }
        deps.status.flush();
        Ok(())
    }

    fn handle_event(&mut self, event: PodEvent) {
        match event {
            PodEvent::Upsert(pod) => self.admit(*pod),
            PodEvent::Remove { uid } => {
                if let Some(rejected) = self.admission.as_mut().and_then(|a| a.removed(&uid)) {
                    self.deps.status.remove(&uid);
                    tracing::debug!(pod = ?rejected.metadata.name, "rejected pod removed");
                    return;
                }
                if !self.workers.terminate(&uid, None) {
                    tracing::debug!(pod = %uid, "removal of an unknown pod; housekeeping cleans up");
                }
            }
            PodEvent::ObjectsChanged => self.workers.sync_all(),
        }
    }
}

impl Agent {
    fn admit(&mut self, pod: Pod) {
        let Some(gate) = self.admission.as_mut() else {
            return self.workers.update(pod);
        };
        let (workers, status) = (&self.workers, &self.deps.status);
        let active = |uid: &str| {
            workers.is_known(uid)
                && !matches!(
                    status.status(uid).and_then(|s| s.phase).as_deref(),
                    Some("Succeeded" | "Failed")
                )
        };
        match gate.check(&pod, &active) {
            Verdict::Run => self.workers.update(pod),
            Verdict::Ignore => {}
            // Never started: nothing to stop; the API object can go.
            Verdict::Forget => self.deps.status.terminated(&pod),
            Verdict::Reject(rejection) => {
                tracing::warn!(pod = ?pod.metadata.name, reason = %rejection.reason,
                    message = %rejection.message, "pod rejected by admission");
                self.pod_events
                    .warning(&pod, None, &rejection.reason, rejection.message.clone());
                let status = PodStatus {
                    phase: Some("Failed".into()),
                    reason: Some(rejection.reason),
                    message: Some(rejection.message),
                    qos_class: Some(qos_class(&pod).as_str().to_string()),
                    ..PodStatus::default()
                };
                if let Err(err) = self.deps.status.set(&pod, status) {
                    tracing::warn!(pod = ?pod.metadata.name, error = %err, "cannot record the rejection");
                }
            }
        }
    }
}

/// Receives from the pod source, or waits forever once it closed.
async fn recv(events: &mut Option<mpsc::Receiver<PodEvent>>) -> Option<PodEvent> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
