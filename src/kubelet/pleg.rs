//! Pod lifecycle event generator. Container start/death events come straight from the runtime's
//! `GetContainerEvents` stream (no polling delay); a periodic relist (1 s) is the safety net:
//! its pure [`diff`] of two snapshots yields the events a missed stream message would have.
//! Health: unhealthy when no relist completed for 3 minutes.

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

/// The PLEG: forwards events for pods to `sink`.
pub struct Pleg {
    runtime: Arc<dyn RuntimeService>,
    clock: Arc<dyn Clock>,
    relist_period: Duration,
    health: PlegHealth,
    last: Arc<Mutex<Snapshot>>,
    metrics: Arc<KubeletMetrics>,
}

impl Pleg {
    pub fn new(
        runtime: Arc<dyn RuntimeService>,
        clock: Arc<dyn Clock>,
        relist_period: Duration,
        unhealthy_after: Duration,
        metrics: Arc<KubeletMetrics>,
    ) -> Self {
        let health = PlegHealth::new(clock.now(), unhealthy_after);
        Pleg {
            runtime,
            clock,
            relist_period,
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
        let ready = new.sandboxes.values().filter(|(_, ready)| *ready).count();
        self.metrics
            .set_running(ready, new.containers.values().map(|(_, state)| state));
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
        let mut ticker = tokio::time::interval(self.relist_period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
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
                }
                Err(status) => {
                    tracing::warn!(error = %status, "cannot follow container events; relist only")
                }
            }
            if sink.is_closed() {
                return;
            }
            tokio::time::sleep(self.relist_period).await;
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
mod tests {
    use super::*;
    use PlegEventKind::*;
    use RunState::*;

    fn snap(containers: &[(&str, RunState)], sandboxes: &[(&str, bool)]) -> Snapshot {
        Snapshot {
            containers: containers
                .iter()
                .map(|(id, s)| (id.to_string(), ("pod".to_string(), *s)))
                .collect(),
            sandboxes: sandboxes
                .iter()
                .map(|(id, r)| (id.to_string(), ("pod".to_string(), *r)))
                .collect(),
        }
    }

    fn ev(id: &str, kind: PlegEventKind) -> PlegEvent {
        PlegEvent {
            pod_uid: "pod".into(),
            id: id.into(),
            kind,
        }
    }

    #[test]
    fn relist_diff() {
        let cases = vec![
            (
                "nothing changed",
                snap(&[("c", Running)], &[]),
                snap(&[("c", Running)], &[]),
                vec![],
            ),
            (
                "new running container",
                snap(&[], &[]),
                snap(&[("c", Running)], &[]),
                vec![ev("c", ContainerStarted)],
            ),
            (
                "created then started",
                snap(&[("c", Created)], &[]),
                snap(&[("c", Running)], &[]),
                vec![ev("c", ContainerStarted)],
            ),
            (
                "died",
                snap(&[("c", Running)], &[]),
                snap(&[("c", Exited)], &[]),
                vec![ev("c", ContainerDied)],
            ),
            (
                "started and died between relists",
                snap(&[], &[]),
                snap(&[("c", Exited)], &[]),
                vec![ev("c", ContainerDied)],
            ),
            (
                "exited one removed",
                snap(&[("c", Exited)], &[]),
                snap(&[], &[]),
                vec![ev("c", ContainerRemoved)],
            ),
            (
                "running one vanished: died and removed",
                snap(&[("c", Running)], &[]),
                snap(&[], &[]),
                vec![ev("c", ContainerDied), ev("c", ContainerRemoved)],
            ),
            (
                "unknown state",
                snap(&[("c", Running)], &[]),
                snap(&[("c", Unknown)], &[]),
                vec![ev("c", ContainerChanged)],
            ),
            (
                "new created container",
                snap(&[], &[]),
                snap(&[("c", Created)], &[]),
                vec![ev("c", ContainerChanged)],
            ),
            (
                "sandbox stopped",
                snap(&[], &[("s", true)]),
                snap(&[], &[("s", false)]),
                vec![ev("s", SandboxChanged)],
            ),
            (
                "sandbox removed",
                snap(&[], &[("s", false)]),
                snap(&[], &[]),
                vec![ev("s", SandboxChanged)],
            ),
            (
                "sandbox unchanged",
                snap(&[], &[("s", true)]),
                snap(&[], &[("s", true)]),
                vec![],
            ),
            (
                "several, sorted by id",
                snap(&[("b", Running), ("a", Running)], &[]),
                snap(&[("b", Exited), ("a", Running), ("c", Running)], &[]),
                vec![ev("b", ContainerDied), ev("c", ContainerStarted)],
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(diff(&old, &new), want, "{name}");
        }
    }

    #[test]
    fn health_threshold() {
        let start = Instant::now();
        let health = PlegHealth::new(start, Duration::from_secs(180));
        assert!(health.check(start + Duration::from_secs(180)).is_ok());
        let err = health.check(start + Duration::from_secs(181)).unwrap_err();
        assert!(err.contains("181s ago"), "{err}");
        health.record(start + Duration::from_secs(200));
        assert!(health.check(start + Duration::from_secs(300)).is_ok());
        assert!(health.check(start + Duration::from_secs(381)).is_err());
    }
}
