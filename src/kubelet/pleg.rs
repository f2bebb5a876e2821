//! Pod lifecycle event generator. Container start/death events come straight from the runtime's
//! `GetContainerEvents` stream (no polling delay); a periodic relist is the safety net: its pure
//! [`diff`] of two snapshots yields the events a missed stream message would have. As kubelet's
//! Evented PLEG, it relists rarely while the stream is followed and every second while it is
//! not; connecting or losing the stream relists at once. Health: unhealthy when no relist
//! completed for 3 minutes.

use crate::cri::{RuntimeService, api};
use crate::kubelet::clock::Clock;
use crate::kubelet::labels;
use crate::kubelet::metrics::KubeletMetrics;
use crate::kubelet::runtime_pod::RunState;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What happened to a pod's container or sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlegEventKind {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    ContainerChanged,
    SandboxChanged,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlegEvent {
    pub pod_uid: String,
    /// Container or sandbox id.
    pub id: String,
    pub kind: PlegEventKind,
}

/// States of every container and sandbox at one relist.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// container id → (pod uid, state)
    pub containers: HashMap<String, (String, RunState)>,
    /// sandbox id → (pod uid, ready)
    pub sandboxes: HashMap<String, (String, bool)>,
}

impl Snapshot {
    /// Pod uid of a container or sandbox.
    pub fn pod_of(&self, id: &str) -> Option<&str> {
        self.containers
            .get(id)
            .map(|(uid, _)| uid.as_str())
            .or_else(|| self.sandboxes.get(id).map(|(uid, _)| uid.as_str()))
    }
}

fn container_events(
    uid: &str,
    id: &str,
    old: Option<RunState>,
    new: Option<RunState>,
) -> Vec<PlegEvent> {
    use PlegEventKind::*;
    let kinds: &[PlegEventKind] = match (old, new) {
        (a, b) if a == b => &[],
        (_, Some(RunState::Running)) => &[ContainerStarted],
        (_, Some(RunState::Exited)) => &[ContainerDied],
        (_, Some(RunState::Created | RunState::Unknown)) => &[ContainerChanged],
        (Some(RunState::Exited), None) => &[ContainerRemoved],
        (_, None) => &[ContainerDied, ContainerRemoved],
    };
    kinds
        .iter()
        .map(|kind| PlegEvent {
            pod_uid: uid.to_string(),
            id: id.to_string(),
            kind: *kind,
        })
        .collect()
}

/// Events explaining the change from `old` to `new` (sorted by id for stable output).
pub fn diff(old: &Snapshot, new: &Snapshot) -> Vec<PlegEvent> {
    let mut events = Vec::new();
    let mut ids: Vec<&String> = old.containers.keys().chain(new.containers.keys()).collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        let before = old.containers.get(id);
        let after = new.containers.get(id);
        let uid = after
            .or(before)
            .map(|(uid, _)| uid.as_str())
            .unwrap_or_default();
        events.extend(container_events(
            uid,
            id,
            before.map(|b| b.1),
            after.map(|a| a.1),
        ));
    }
    let mut ids: Vec<&String> = old.sandboxes.keys().chain(new.sandboxes.keys()).collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        let before = old.sandboxes.get(id);
        let after = new.sandboxes.get(id);
        if before.map(|b| b.1) != after.map(|a| a.1) {
            let uid = after
                .or(before)
                .map(|(uid, _)| uid.clone())
                .unwrap_or_default();
            events.push(PlegEvent {
                pod_uid: uid,
                id: id.clone(),
                kind: PlegEventKind::SandboxChanged,
            });
        }
    }
    events
}

/// Sets `kubelet_running_pods` and `kubelet_running_containers` from what the runtime runs now.
/// /metrics calls it before every scrape: while the PLEG follows the event stream it relists
/// only every minute, and these gauges must not be that old.
pub async fn refresh_running_gauges(
    runtime: &dyn RuntimeService,
    metrics: &KubeletMetrics,
) -> crate::cri::CriResult<()> {
    set_running_gauges(metrics, &snapshot(runtime).await?);
    Ok(())
}

fn set_running_gauges(metrics: &KubeletMetrics, snap: &Snapshot) {
    let ready = snap.sandboxes.values().filter(|(_, ready)| *ready).count();
    metrics.set_running(ready, snap.containers.values().map(|(_, state)| state));
}

/// Lists every container and sandbox the runtime has.
pub async fn snapshot(runtime: &dyn RuntimeService) -> crate::cri::CriResult<Snapshot> {
    let mut snap = Snapshot::default();
    for sandbox in runtime
        .list_pod_sandbox(api::ListPodSandboxRequest::default())
        .await?
        .items
    {
        let uid = sandbox
            .labels
            .get(labels::POD_UID)
            .cloned()
            .or_else(|| sandbox.metadata.as_ref().map(|m| m.uid.clone()))
            .unwrap_or_default();
        let ready = sandbox.state == api::PodSandboxState::SandboxReady as i32;
        snap.sandboxes.insert(sandbox.id, (uid, ready));
    }
    for container in runtime
        .list_containers(api::ListContainersRequest::default())
        .await?
        .containers
    {
        let uid = container
            .labels
            .get(labels::POD_UID)
            .cloned()
            .unwrap_or_default();
        snap.containers
            .insert(container.id, (uid, RunState::from_cri(container.state)));
    }
    Ok(snap)
}

fn event_kind(event_type: i32) -> PlegEventKind {
    match api::ContainerEventType::try_from(event_type) {
        Ok(api::ContainerEventType::ContainerStartedEvent) => PlegEventKind::ContainerStarted,
        Ok(api::ContainerEventType::ContainerStoppedEvent) => PlegEventKind::ContainerDied,
        Ok(api::ContainerEventType::ContainerDeletedEvent) => PlegEventKind::ContainerRemoved,
        _ => PlegEventKind::ContainerChanged,
    }
}

/// Relist health, shared with the agent's status output.
#[derive(Clone)]
pub struct PlegHealth {
    started: Instant,
    last_relist: Arc<Mutex<Option<Instant>>>,
    threshold: Duration,
}

impl PlegHealth {
    pub fn new(started: Instant, threshold: Duration) -> Self {
        PlegHealth {
            started,
            last_relist: Arc::new(Mutex::new(None)),
            threshold,
        }
    }

    fn record(&self, at: Instant) {
        if let Ok(mut last) = self.last_relist.lock() {
            *last = Some(at);
        }
    }

    /// Time since the last completed relist (since start when none completed yet).
    pub fn since_relist(&self, now: Instant) -> Duration {
        let last = self.last_relist.lock().ok().and_then(|l| *l);
        now.saturating_duration_since(last.unwrap_or(self.started))
    }

    /// `Err(message)` when relisting stalled longer than the threshold.
    pub fn check(&self, now: Instant) -> Result<(), String> {
        let since = self.since_relist(now);
        if since > self.threshold {
            Err(format!(
                "PLEG is not healthy: pleg was last seen active {}s ago; threshold is {}s",
                since.as_secs(),
                self.threshold.as_secs()
            ))
        } else {
            Ok(())
        }
    }
}

/// How often the PLEG relists: every `plain` while it does not follow the runtime's event
/// stream, every `evented` while it does.
#[derive(Clone, Copy, Debug)]
pub struct RelistPeriods {
    pub plain: Duration,
    pub evented: Duration,
}

/// The PLEG: forwards events for pods to `sink`.
pub struct Pleg {
    runtime: Arc<dyn RuntimeService>,
    clock: Arc<dyn Clock>,
    periods: RelistPeriods,
    /// The event stream is connected.
    following: std::sync::atomic::AtomicBool,
    /// Wakes the relist loop when the stream connects (a baseline taken after subscribing)
    /// or is lost (the gap).
    relist_now: tokio::sync::Notify,
    health: PlegHealth,
    last: Arc<Mutex<Snapshot>>,
    metrics: Arc<KubeletMetrics>,
}

impl Pleg {
    pub fn new(
        runtime: Arc<dyn RuntimeService>,
        clock: Arc<dyn Clock>,
        periods: RelistPeriods,
        unhealthy_after: Duration,
        metrics: Arc<KubeletMetrics>,
    ) -> Self {
        let health = PlegHealth::new(clock.now(), unhealthy_after);
        Pleg {
            runtime,
            clock,
            periods,
            following: Default::default(),
            relist_now: Default::default(),
            health,
            last: Arc::new(Mutex::new(Snapshot::default())),
            metrics,
        }
    }

    pub fn health(&self) -> PlegHealth {
        self.health.clone()
    }

    /// One relist: new snapshot, events for what changed.
    pub async fn relist(&self) -> crate::cri::CriResult<Vec<PlegEvent>> {
        let started = std::time::Instant::now();
        let new = snapshot(self.runtime.as_ref()).await?;
        self.metrics.observe_pleg_relist(started.elapsed());
        set_running_gauges(&self.metrics, &new);
        let events = match self.last.lock() {
            Ok(mut last) => {
                let events = diff(&last, &new);
                *last = new;
                events
            }
            Err(_) => Vec::new(),
        };
        self.health.record(self.clock.now());
        Ok(events)
    }

    /// Runs the relist loop and the event-stream reader until `sink` closes.
    pub async fn run(self: Arc<Self>, sink: mpsc::Sender<PlegEvent>) {
        let stream_task = tokio::spawn(Arc::clone(&self).follow_events(sink.clone()));
        loop {
            match self.relist().await {
                Ok(events) => {
                    for event in events {
                        if sink.send(event).await.is_err() {
                            stream_task.abort();
                            return;
                        }
                    }
                }
                Err(status) => tracing::warn!(error = %status, "PLEG relist failed"),
            }
            let period = if self.following.load(std::sync::atomic::Ordering::Acquire) {
                self.periods.evented
            } else {
                self.periods.plain
            };
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = self.relist_now.notified() => {}
            }
        }
    }

    fn set_following(&self, following: bool) {
        use std::sync::atomic::Ordering;
        if self.following.swap(following, Ordering::AcqRel) != following {
            self.relist_now.notify_one();
        }
    }

    /// Reads `GetContainerEvents`, reconnecting after errors (relist covers the gap).
    async fn follow_events(self: Arc<Self>, sink: mpsc::Sender<PlegEvent>) {
        loop {
            match self
                .runtime
                .get_container_events(api::GetEventsRequest {})
                .await
            {
                Ok(mut stream) => {
                    self.set_following(true);
                    while let Some(item) = stream.next().await {
                        let event = match item {
                            Ok(event) => event,
                            Err(status) => {
                                tracing::warn!(error = %status, "container event stream error");
                                break;
                            }
                        };
                        let Some(uid) = self.event_pod(&event) else {
                            continue;
                        };
                        let pleg_event = PlegEvent {
                            pod_uid: uid,
                            id: event.container_id,
                            kind: event_kind(event.container_event_type),
                        };
                        if sink.send(pleg_event).await.is_err() {
                            return;
                        }
                    }
                    self.set_following(false);
                }
                Err(status) => {
                    tracing::warn!(error = %status, "cannot follow container events; relist only")
                }
            }
            if sink.is_closed() {
                return;
            }
            tokio::time::sleep(self.periods.plain).await;
        }
    }

    fn event_pod(&self, event: &api::ContainerEventResponse) -> Option<String> {
        let from_sandbox = event
            .pod_sandbox_status
            .as_ref()
            .and_then(|s| s.metadata.as_ref())
            .map(|m| m.uid.clone())
            .filter(|uid| !uid.is_empty());
        let from_status = event
            .containers_statuses
            .iter()
            .find_map(|s| s.labels.get(labels::POD_UID).cloned());
        from_sandbox.or(from_status).or_else(|| {
            self.last
                .lock()
                .ok()
                .and_then(|snap| snap.pod_of(&event.container_id).map(str::to_string))
        })
    }
}

#[cfg(test)]
#[path = "pleg_tests.rs"]
mod tests;
