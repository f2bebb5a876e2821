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
    /// skips the lost events (logged): the sync loop's periodic relist covers the gap.
    pub fn subscribe(&self) -> EventStream {
        BroadcastStream::new(self.tx.subscribe())
            .filter_map(|item| async move {
                match item {
                    Ok(event) => Some(Ok(event)),
                    Err(BroadcastStreamRecvError::Lagged(n)) => {
                        tracing::warn!(
                            lost = n,
                            "container event subscriber lagged; events dropped"
                        );
                        None
                    }
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
}
