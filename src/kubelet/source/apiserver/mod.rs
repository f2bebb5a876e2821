//! The API server pod source of a cluster node: watches the pods bound to the node
//! (`fieldSelector spec.nodeName=<node>`, `kube::runtime::watcher`: relists on 410 Gone and
//! retries with back-off) and feeds them to the sync loop as [`PodEvent`]s; [`status`] sends
//! their statuses back and deletes the objects of deleted pods once they are stopped; [`mirror`]
//! keeps the mirror pods of the node's static pods.

pub mod mirror;
pub mod patch;
pub mod state;
pub mod status;

use crate::kubelet::agent::{Agent, SourcesReady};
use crate::kubelet::apiclient::{ApiClient, describe};
use crate::kubelet::podconfig::PodEvent;
use crate::kubelet::status::manager::StatusSink;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use mirror::MirrorSink;
use state::PodSet;
pub use status::ApiStatusSink;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Starts watching the pods bound to a node.
pub struct ApiPodSource;

/// A running API pod source; dropping it does not stop it, [`stop`](Self::stop) does.
pub struct ApiPodSourceHandle {
    listed: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl ApiPodSource {
    /// Watches the pods bound to `node_name` and sends their events on `tx` (the initial list
    /// first; [`ApiPodSourceHandle::listed`] turns true once it was sent).
    pub fn spawn(
        api: ApiClient,
        node_name: String,
        tx: mpsc::Sender<PodEvent>,
    ) -> ApiPodSourceHandle {
        let listed = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(run(api, node_name, tx, Arc::clone(&listed)));
        ApiPodSourceHandle { listed, task }
    }
}

impl ApiPodSourceHandle {
    /// Whether the first full list of the node's pods was handed to the sync loop.
    pub fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }

    /// For [`Agent::with_sources_ready`](crate::kubelet::Agent::with_sources_ready).
    pub fn sources_ready(&self) -> SourcesReady {
        let listed = Arc::clone(&self.listed);
        Arc::new(move || listed.load(Ordering::Acquire))
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

async fn run(
    api: ApiClient,
    node_name: String,
    tx: mpsc::Sender<PodEvent>,
    listed: Arc<AtomicBool>,
) {
    let selector = format!("spec.nodeName={node_name}");
    let pods: Api<Pod> = Api::all(api.client.clone());
    let config = watcher::Config::default().fields(&selector);
    let mut stream = watcher::watcher(pods, config)
        .backoff(crate::kubelet::apiclient::watch_backoff())
        .boxed();
    let mut set = PodSet::default();
    let mut failing = false;
    tracing::info!(server = %api.server, node = %node_name, "watching the pods bound to the node");
    while let Some(item) = stream.next().await {
        let events = match item {
            Ok(Event::Init) => {
                set.begin_list();
                Vec::new()
            }
            Ok(Event::InitApply(pod)) => {
                set.list_item(pod);
                Vec::new()
            }
            Ok(Event::InitDone) => set.end_list(),
            Ok(Event::Apply(pod)) => set.apply(pod),
            Ok(Event::Delete(pod)) => set.delete(&pod),
            Err(err) => {
                failing = true;
                tracing::warn!(server = %api.server, "list/watch pods ({selector}): {}", watch_error(&err));
                continue;
            }
        };
        if failing {
            failing = false;
            tracing::info!(server = %api.server, "watching pods again");
        }
        for event in events {
            if tx.send(event).await.is_err() {
                return;
            }
        }
        if set.listed() && !listed.swap(true, Ordering::AcqRel) {
            tracing::info!(node = %node_name, pods = set.sent().len(), "the node's pods are listed");
        }
    }
}

fn watch_error(err: &watcher::Error) -> String {
    match err {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => describe(e),
        other => other.to_string(),
    }
}

/// The API side of a node's pods: the source, the status sink and the mirror pods, started
/// together.
pub struct NodePods {
    pub source: ApiPodSourceHandle,
    pub status: Arc<ApiStatusSink>,
    /// In front of `status`: static pods' statuses go to their mirror pods.
    pub mirror: Arc<MirrorSink>,
}

impl NodePods {
    /// Starts the source, the status sink and the mirror pods for `node_name`; pod events go
    /// to `tx`.
    pub fn start(api: ApiClient, node_name: &str, tx: mpsc::Sender<PodEvent>) -> NodePods {
        let status = ApiStatusSink::spawn(api.clone(), node_name.to_string());
        let mirror = MirrorSink::spawn(
            api.clone(),
            node_name.to_string(),
            Arc::clone(&status) as Arc<dyn StatusSink>,
        );
        NodePods {
            source: ApiPodSource::spawn(api, node_name.to_string(), tx),
            status,
            mirror,
        }
    }

    /// The agent with housekeeping waiting for the first list and statuses sent to the API.
    pub fn attach(&self, agent: Agent) -> Agent {
        agent
            .with_sources_ready(self.source.sources_ready())
            .with_status_sink(Arc::clone(&self.mirror) as Arc<dyn StatusSink>)
    }

    pub fn stop(&self) {
        self.source.stop();
        self.mirror.stop();
        self.status.stop();
    }
}
