//! The agent as a cluster Node, as kubelet: registration (create or adopt, standard labels,
//! `--node-labels`, `--register-with-taints`), the status (capacity and allocatable from real
//! measurements, conditions, nodeInfo, addresses, daemon endpoints) patched through the status
//! subresource when it changes and at least every 5 min, the `kube-node-lease` Lease renewed
//! every 10 s, and the node events (Starting, NodeReady/NodeNotReady, ...).
//!
//! Files: [`options`] (flags), [`info`] (host measurements), [`status`] (the pure status
//! builder), [`register`], [`lease`], [`events`], [`failure`] (error naming, back-off,
//! log-once), [`heartbeat`] (the loop). Readiness comes from the runtime's CRI `Status` only.

pub mod events;
pub mod failure;
pub mod heartbeat;
pub mod info;
pub mod lease;
pub mod options;
pub mod register;
pub mod status;

pub use options::{NodeOptions, OptionError, RawNodeFlags};

use crate::cri::RuntimeService;
use crate::kubelet::apiclient::{ApiClient, ApiClientError};
use crate::kubelet::clock::Clock;
use events::{NodeEvents, RecorderEvents};
use failure::Failure;
use heartbeat::Heartbeat;
use k8s_openapi::api::core::v1::Node;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The server refused the node (401/403/400/422): retrying would not help.
    #[error("{0} (the server refused it; not retried)")]
    Refused(ApiClientError),
}

/// Starts the node agent.
pub struct NodeAgent;

impl NodeAgent {
    /// Registers the Node and sends its first status and Lease, then keeps them up in the
    /// background. Returns an error only when the server refuses the node (bad identity,
    /// RBAC/Node-authorizer denial, invalid object); an unreachable server is retried in the
    /// background (the returned handle's `node()` is None until registration succeeds).
    pub async fn start(
        api: ApiClient,
        runtime: Arc<dyn RuntimeService>,
        opts: NodeOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<NodeHandle, NodeError> {
        let events = Arc::new(RecorderEvents::new(api.client.clone(), &opts.node_name));
        Self::start_with_events(api, runtime, opts, clock, events).await
    }

    /// [`NodeAgent::start`] with another event sink.
    pub async fn start_with_events(
        api: ApiClient,
        runtime: Arc<dyn RuntimeService>,
        opts: NodeOptions,
        clock: Arc<dyn Clock>,
        events: Arc<dyn NodeEvents>,
    ) -> Result<NodeHandle, NodeError> {
        let (node_tx, node_rx) = watch::channel(None);
        let mut heartbeat = Heartbeat::new(
            api.client.clone(),
            runtime,
            opts,
            clock,
            events,
            info::host_facts(),
            node_tx,
        );
        let refused = |failure: &Failure| {
            NodeError::Refused(ApiClientError::Request {
                server: api.server.clone(),
                verb: failure.verb,
                resource: failure.resource.clone(),
                reason: failure.reason(),
            })
        };
        match heartbeat.register().await {
            Ok(()) => {
                heartbeat.announce_start().await;
                for first in [heartbeat.sync_status().await, heartbeat.renew_lease().await] {
                    match first {
                        Err(failure) if failure.permanent() => return Err(refused(&failure)),
                        Err(failure) => {
                            tracing::warn!("{failure} (retrying)");
                        }
                        Ok(()) => {}
                    }
                }
            }
            Err(failure) if failure.permanent() => return Err(refused(&failure)),
            Err(failure) => {
                tracing::warn!(server = %api.server,
                    "registering the node failed (retrying with back-off): {failure}");
            }
        }
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(heartbeat.run(stopped));
        Ok(NodeHandle {
            stop,
            task: Some(task),
            node: node_rx,
        })
    }
}

/// The running node agent. Stopping (or dropping) it ends the heartbeat; the Node and the
/// pods stay.
pub struct NodeHandle {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    node: watch::Receiver<Option<Node>>,
}

impl NodeHandle {
    /// The latest Node the agent knows (after registration and each status patch).
    pub fn node(&self) -> Option<Node> {
        self.node.borrow().clone()
    }

    /// A receiver that sees each new Node (labels, allocatable) as the agent learns it.
    pub fn watch(&self) -> watch::Receiver<Option<Node>> {
        self.node.clone()
    }

    /// Stops the heartbeat and waits for it (an in-flight request finishes or times out).
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
