//! Container lifecycle events for `GetContainerEvents` (the sync loop's evented PLEG), published
//! by the operations and the exit watchers as things happen.

use crate::cri::{EventStream, api};
use futures::StreamExt;
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

/// Same capacity as kubelet's PLEG event channel.
pub const EVENT_CAPACITY: usize = 1000;

#[derive(Clone)]
pub struct Events {
    tx: broadcast::Sender<api::ContainerEventResponse>,
}

impl Default for Events {
    fn default() -> Self {
        Events {
            tx: broadcast::channel(EVENT_CAPACITY).0,
        }
    }
}

impl Events {
    /// Sends to current subscribers; no subscriber is not an error.
    pub fn publish(&self, event: api::ContainerEventResponse) {
        let _ = self.tx.send(event);
    }

    /// A stream of events from now on. A subscriber that falls more than the capacity behind
    /// gets an Aborted error in place of the lost events: the sync loop relists at once to
    /// cover the gap, a gRPC client sees the call end.
    pub fn subscribe(&self) -> EventStream {
        BroadcastStream::new(self.tx.subscribe())
            .map(|item| match item {
                Ok(event) => Ok(event),
                Err(BroadcastStreamRecvError::Lagged(n)) => {
                    tracing::warn!(
                        lost = n,
                        "container event subscriber lagged; events dropped"
                    );
                    Err(tonic::Status::aborted(format!(
                        "{n} container events lost: the subscriber fell behind"
                    )))
                }
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_see_events_published_after_subscribing() {
        let events = Events::default();
        events.publish(api::ContainerEventResponse::default());
        let mut stream = events.subscribe();
        events.publish(api::ContainerEventResponse {
            container_id: "c1".into(),
            ..Default::default()
        });
        let got = stream.next().await.unwrap().unwrap();
        assert_eq!(got.container_id, "c1");
    }

    #[tokio::test]
    async fn a_subscriber_that_fell_behind_gets_an_error_for_the_lost_events() {
        let events = Events::default();
        let mut stream = events.subscribe();
        // The channel rounds its capacity up to a power of two.
        for i in 0..EVENT_CAPACITY * 3 {
            events.publish(api::ContainerEventResponse {
                container_id: format!("c{i}"),
                ..Default::default()
            });
        }
        let lost = stream.next().await.unwrap().unwrap_err();
        assert_eq!(lost.code(), tonic::Code::Aborted, "{lost:?}");
        let count: usize = lost.message().split(' ').next().unwrap().parse().unwrap();
        assert!(count >= EVENT_CAPACITY, "{lost:?}");
        // What is still buffered follows.
        let next = stream.next().await.unwrap().unwrap();
        assert_eq!(next.container_id, format!("c{count}"));
    }
}
