//! Probe workers: one task per (container instance, probe kind), started for running containers
//! that declare the probe and stopped when the container stops. Settled results go to the shared
//! [`ProbeResults`]; every change is reported so the pod is synced (liveness/startup failure →
//! restart through `compute_pod_actions`, readiness → the Ready condition).

use super::handlers::{Handlers, Target};
use super::results::{ProbeKind, ProbeResult, ProbeResults};
use super::state::{ProbeOutcome, ProbeSettings, ProbeState, Step};
use crate::cri::RuntimeService;
use crate::kubelet::clock::Clock;
use crate::kubelet::events::{PodEvents, reason as event};
use crate::kubelet::runtime_pod::{RunState, RuntimePod};
use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, Probe};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// A settled probe result changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeUpdate {
    pub pod_uid: String,
    pub container_id: String,
    pub kind: ProbeKind,
    pub result: ProbeResult,
}

type WorkerKey = (String, ProbeKind);

struct Worker {
    pod_uid: String,
    abort: AbortHandle,
}

struct Shared {
    runtime: Arc<dyn RuntimeService>,
    clock: Arc<dyn Clock>,
    handlers: Handlers,
    results: Mutex<ProbeResults>,
    updates: mpsc::UnboundedSender<ProbeUpdate>,
    events: Arc<PodEvents>,
}

impl Shared {
    fn results(&self) -> MutexGuard<'_, ProbeResults> {
        self.results.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Owns the probe workers.
pub struct ProbeManager {
    shared: Arc<Shared>,
    host_ip: String,
    workers: Mutex<HashMap<WorkerKey, Worker>>,
}

/// What one worker probes.
struct Job {
    pod_uid: String,
    /// The pod's metadata only: what its Unhealthy events reference.
    pod_ref: Pod,
    container_id: String,
    container_name: String,
    kind: ProbeKind,
    probe: Probe,
    settings: ProbeSettings,
    started_at: SystemTime,
    has_startup_probe: bool,
    host: String,
    ports: Vec<ContainerPort>,
}

fn probe_of(container: &Container, kind: ProbeKind) -> Option<&Probe> {
    match kind {
        ProbeKind::Liveness => container.liveness_probe.as_ref(),
        ProbeKind::Readiness => container.readiness_probe.as_ref(),
        ProbeKind::Startup => container.startup_probe.as_ref(),
    }
}

impl ProbeManager {
    pub fn new(
        runtime: Arc<dyn RuntimeService>,
        clock: Arc<dyn Clock>,
        host_ip: String,
        updates: mpsc::UnboundedSender<ProbeUpdate>,
        events: Arc<PodEvents>,
    ) -> Self {
        ProbeManager {
            shared: Arc::new(Shared {
                runtime,
                clock,
                handlers: Handlers::new(),
                results: Mutex::new(ProbeResults::default()),
                updates,
                events,
            }),
            host_ip,
            workers: Mutex::new(HashMap::new()),
        }
    }

    /// A copy of the current results.
    pub fn results(&self) -> ProbeResults {
        self.shared.results().clone()
    }

    /// The probe-and-hook runner (shared HTTP client).
    pub fn handlers(&self) -> Handlers {
        self.shared.handlers.clone()
    }

    fn workers(&self) -> MutexGuard<'_, HashMap<WorkerKey, Worker>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts workers for the running containers of `pod` that declare probes and stops the
    /// workers (and drops the results) of its containers that no longer run.
    pub fn sync_pod(&self, pod: &Pod, rt: &RuntimePod) {
        let uid = rt.uid.clone();
        let host = rt.probe_host(Some(pod), &self.host_ip);
        let mut wanted: Vec<Job> = Vec::new();
        for container in pod.spec.iter().flat_map(|s| s.containers.iter()) {
            let Some(view) = rt
                .latest(&container.name)
                .filter(|v| v.state == RunState::Running)
            else {
                continue;
            };
            for kind in [
                ProbeKind::Startup,
                ProbeKind::Liveness,
                ProbeKind::Readiness,
            ] {
                let Some(probe) = probe_of(container, kind) else {
                    continue;
                };
                wanted.push(Job {
                    pod_uid: uid.clone(),
                    pod_ref: Pod {
                        metadata: pod.metadata.clone(),
                        spec: None,
                        status: None,
                    },
                    container_id: view.id.clone(),
                    container_name: container.name.clone(),
                    kind,
                    probe: probe.clone(),
                    settings: ProbeSettings::from_probe(probe, kind),
                    started_at: view.started_at.unwrap_or_else(|| self.shared.clock.wall()),
                    has_startup_probe: container.startup_probe.is_some(),
                    host: host.clone(),
                    ports: container.ports.clone().unwrap_or_default(),
                });
            }
        }
        let mut workers = self.workers();
        let keep: std::collections::HashSet<WorkerKey> = wanted
            .iter()
            .map(|j| (j.container_id.clone(), j.kind))
            .collect();
        let mut results = self.shared.results();
        workers.retain(|key, worker| {
            if worker.pod_uid != uid || keep.contains(key) {
                return true;
            }
            worker.abort.abort();
            results.remove(&key.0, key.1);
            false
        });
        for job in wanted {
            let key = (job.container_id.clone(), job.kind);
            if workers.contains_key(&key) {
                continue;
            }
            results.set(
                &job.container_id,
                job.kind,
                ProbeState::new(job.kind).result,
            );
            let pod_uid = job.pod_uid.clone();
            let task = tokio::spawn(run(Arc::clone(&self.shared), job));
            workers.insert(
                key,
                Worker {
                    pod_uid,
                    abort: task.abort_handle(),
                },
            );
        }
    }

    /// Stops every worker of the pod and forgets its results.
    pub fn remove_pod(&self, uid: &str) {
        let mut results = self.shared.results();
        self.workers().retain(|key, worker| {
            if worker.pod_uid != uid {
                return true;
            }
            worker.abort.abort();
            results.remove(&key.0, key.1);
            false
        });
    }

    /// Number of running probe workers.
    pub fn worker_count(&self) -> usize {
        self.workers().len()
    }
}

impl Drop for ProbeManager {
    fn drop(&mut self) {
        for worker in self.workers().values() {
            worker.abort.abort();
        }
    }
}

async fn run(shared: Arc<Shared>, job: Job) {
    let mut state = ProbeState::new(job.kind);
    let target = Target {
        container_id: &job.container_id,
        host: &job.host,
        ports: &job.ports,
    };
    loop {
        let since_start = shared
            .clock
            .wall()
            .duration_since(job.started_at)
            .unwrap_or_default();
        let started = !job.has_startup_probe
            || shared.results().get(&job.container_id, ProbeKind::Startup)
                == Some(ProbeResult::Success);
        match state.step(&job.settings, started, since_start) {
            Step::Stop => return,
            Step::Wait if since_start < job.settings.initial_delay => {
                tokio::time::sleep(job.settings.initial_delay - since_start).await;
                continue;
            }
            Step::Wait => {
                tokio::time::sleep(job.settings.period).await;
                continue;
            }
            Step::Probe => {}
        }
        let outcome = shared
            .handlers
            .probe(
                shared.runtime.as_ref(),
                &job.probe,
                &target,
                job.settings.timeout,
            )
            .await;
        if let ProbeOutcome::Failure(message) = &outcome {
            tracing::debug!(
                pod = %job.pod_uid, container = %job.container_name,
                probe = job.kind.as_str(), %message, "probe failed"
            );
            // kubelet records every failed probe; the event recorder aggregates repeats.
            shared.events.warning(
                &job.pod_ref,
                Some(&job.container_name),
                event::UNHEALTHY,
                format!("{} probe failed: {message}", job.kind.title()),
            );
        }
        if let Some(result) = state.observe(&outcome, &job.settings) {
            if let ProbeOutcome::Failure(message) = &outcome {
                tracing::info!(
                    pod = %job.pod_uid, container = %job.container_name,
                    probe = job.kind.as_str(), %message, "probe failed (threshold reached)"
                );
            }
            shared.results().set(&job.container_id, job.kind, result);
            let _ = shared.updates.send(ProbeUpdate {
                pod_uid: job.pod_uid.clone(),
                container_id: job.container_id.clone(),
                kind: job.kind,
                result,
            });
        }
        tokio::time::sleep(job.settings.period).await;
    }
}
