//! Pod events to the API server (`events.k8s.io/v1`, reporting controller "kubelet", the node
//! name as instance). The sync loop only queues: a bounded queue drops (and counts) when full,
//! one task filters spam and publishes. Aggregation of repeats into a series is kube's
//! `Recorder` cache (same reason, note, object within 6 minutes: one Event, `series.count`).

use super::spam::SpamFilter;
use super::{PodEvent, PodEventSink};
use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Events waiting for the publisher; past this the sync loop's events are dropped.
pub const QUEUE_CAPACITY: usize = 1000;

/// Publishes one event about `regarding` (the seam tests replace).
#[async_trait]
pub trait Publisher: Send + Sync + 'static {
    async fn publish(
        &self,
        event: &PodEvent,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error>;
}

/// The kube `Recorder` as kubelet's recorder.
pub struct RecorderPublisher(Recorder);

impl RecorderPublisher {
    pub fn new(client: kube::Client, node_name: &str) -> RecorderPublisher {
        RecorderPublisher(Recorder::new(
            client,
            Reporter {
                controller: "kubelet".to_string(),
                instance: Some(node_name.to_string()),
            },
        ))
    }
}

#[async_trait]
impl Publisher for RecorderPublisher {
    async fn publish(
        &self,
        event: &PodEvent,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let ev = Event {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: event.reason.clone(),
            note: Some(event.note.clone()),
            action: event.reason.clone(),
            secondary: None,
        };
        self.0.publish(&ev, regarding).await
    }
}

/// The pod (or its container, by `field_path`) as events reference it.
pub fn regarding(pod: &Pod, field_path: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Pod".to_string()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: field_path.map(str::to_string),
    }
}

/// The [`PodEventSink`] of a cluster node.
pub struct ApiSink {
    queue: mpsc::Sender<(ObjectReference, PodEvent)>,
    dropped: AtomicU64,
}

impl ApiSink {
    /// The sink and its publishing task (which ends once the sink is dropped).
    pub fn start(publisher: Arc<dyn Publisher>, capacity: usize) -> (Arc<ApiSink>, JoinHandle<()>) {
        let (queue, rx) = mpsc::channel(capacity.max(1));
        let task = tokio::spawn(publish_all(publisher, rx));
        (
            Arc::new(ApiSink {
                queue,
                dropped: AtomicU64::new(0),
            }),
            task,
        )
    }

    /// Events dropped because the queue was full (or the publisher gone).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl PodEventSink for ApiSink {
    fn record(&self, pod: &Pod, event: PodEvent) {
        let reference = regarding(pod, event.field_path.as_deref());
        if self.queue.try_send((reference, event)).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // Log the first and then every 100th: a full queue is itself a flood.
            if dropped == 1 || dropped.is_multiple_of(100) {
                tracing::warn!(dropped, "pod event queue full; dropping events");
            }
        }
    }
}

/// The spam filter's key: one bucket per involved object (client-go keys by source and object;
/// this sink has one source).
fn spam_key(reference: &ObjectReference) -> String {
    format!(
        "{}/{}/{}",
        reference.namespace.as_deref().unwrap_or_default(),
        reference.name.as_deref().unwrap_or_default(),
        reference.uid.as_deref().unwrap_or_default()
    )
}

async fn publish_all(
    publisher: Arc<dyn Publisher>,
    mut rx: mpsc::Receiver<(ObjectReference, PodEvent)>,
) {
    let mut spam = SpamFilter::default();
    while let Some((reference, event)) = rx.recv().await {
        if !spam.allow(&spam_key(&reference), Instant::now()) {
            tracing::debug!(pod = ?reference.name, reason = %event.reason, "event throttled");
            continue;
        }
        if let Err(error) = publisher.publish(&event, &reference).await {
            tracing::warn!(pod = ?reference.name, reason = %event.reason, %error,
                "cannot publish pod event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::events::PodEvents;
    use crate::kubelet::events::spam::BURST;
    use std::sync::Mutex;
    use tokio::sync::Semaphore;

    /// Records what it publishes; waits for a permit per event when `gate` is set.
    #[derive(Default)]
    struct Fake {
        published: Mutex<Vec<(ObjectReference, PodEvent)>>,
        gate: Option<Semaphore>,
    }

    #[async_trait]
    impl Publisher for Fake {
        async fn publish(
            &self,
            event: &PodEvent,
            regarding: &ObjectReference,
        ) -> Result<(), kube::Error> {
            if let Some(gate) = &self.gate {
                gate.acquire().await.map(|p| p.forget()).ok();
            }
            if let Ok(mut published) = self.published.lock() {
                published.push((regarding.clone(), event.clone()));
            }
            Ok(())
        }
    }

    fn pod(name: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some(format!("uid-{name}"));
        pod
    }

    async fn drain(sink: Arc<ApiSink>, task: JoinHandle<()>) {
        drop(sink);
        task.await.expect("publisher task");
    }

    #[tokio::test]
    async fn container_events_reference_the_container_and_spam_is_filtered_per_pod() {
        let fake = Arc::new(Fake::default());
        let (sink, task) = ApiSink::start(fake.clone(), 100);
        let events = PodEvents::default();
        assert!(events.set_sink(sink.clone()));
        let (a, b) = (pod("a"), pod("b"));
        for _ in 0..30 {
            events.warning(&a, Some("app"), "BackOff", "Back-off".into());
        }
        events.normal(&b, None, "Scheduled", "x".into());
        drop(events); // holds the sink too: the task ends when both are gone
        drain(sink, task).await;
        let published = fake.published.lock().unwrap();
        let of_a = published
            .iter()
            .filter(|(r, _)| r.name.as_deref() == Some("a"))
            .count();
        assert_eq!(of_a, BURST as usize, "the burst, then throttled");
        let (reference, event) = &published[0];
        assert_eq!(reference.kind.as_deref(), Some("Pod"));
        assert_eq!(reference.api_version.as_deref(), Some("v1"));
        assert_eq!(reference.uid.as_deref(), Some("uid-a"));
        assert_eq!(reference.namespace.as_deref(), Some("ns"));
        assert_eq!(
            reference.field_path.as_deref(),
            Some("spec.containers{app}")
        );
        assert!(event.warning);
        let (reference, _) = published.last().unwrap();
        assert_eq!(reference.name.as_deref(), Some("b"), "b has its own bucket");
        assert_eq!(reference.field_path, None);
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_without_blocking() {
        let fake = Arc::new(Fake {
            gate: Some(Semaphore::new(0)),
            ..Default::default()
        });
        let (sink, task) = ApiSink::start(fake.clone(), 2);
        let p = pod("a");
        for i in 0..10 {
            sink.record(
                &p,
                PodEvent {
                    warning: false,
                    reason: format!("R{i}"),
                    note: String::new(),
                    field_path: None,
                },
            );
        }
        // At most one in the publisher, two queued: the rest dropped.
        assert!(sink.dropped() >= 7, "dropped {}", sink.dropped());
        let dropped = sink.dropped();
        fake.gate.as_ref().unwrap().add_permits(100);
        drain(sink, task).await;
        assert_eq!(
            fake.published.lock().unwrap().len() as u64,
            10 - dropped,
            "everything not dropped is published"
        );
    }
}
