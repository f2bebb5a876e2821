//! `runp agent --kubeconfig`: the pods bound to the node, from the API server.

use super::cluster::ClusterArgs;
use anyhow::Context;
use runp::kubelet::apiclient::{ApiClient, ClientSource, client_source};
use runp::kubelet::podconfig::PodEvent;
use runp::kubelet::source::apiserver::NodePods;
use tokio::sync::mpsc;

/// Connects to the API server when the node joins a cluster (`--kubeconfig`, `KUBECONFIG` or
/// `--in-cluster`) and starts its pod source and status sink; None without a cluster.
pub async fn start(
    cluster: &ClusterArgs,
    node_name: &str,
    tx: &mpsc::Sender<PodEvent>,
) -> anyhow::Result<Option<NodePods>> {
    let source = match (&cluster.kubeconfig, cluster.in_cluster) {
        (_, true) => ClientSource::InCluster,
        (Some(path), false) => client_source(Some(path)),
        (None, false) => return Ok(None),
    };
    let api = ApiClient::connect(&source)
        .await
        .context("connecting to the API server")?;
    Ok(Some(NodePods::start(api, node_name, tx.clone())))
}
