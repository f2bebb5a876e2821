//! `runp agent` options for joining a cluster (`--kubeconfig`): the node's identity,
//! registration and capacity, named as kubelet's flags.

use clap::Args;
use std::path::PathBuf;

#[derive(Args, Clone, Debug, Default)]
pub struct ClusterArgs {
    /// Join the cluster of this kubeconfig as a node (in a pod: `--in-cluster`).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Use the in-cluster service-account config (when running as a pod).
    #[arg(long, conflicts_with = "kubeconfig")]
    pub in_cluster: bool,
    /// Labels added to the Node at registration (`key=value,...`; repeatable).
    #[arg(long, value_delimiter = ',')]
    pub node_labels: Vec<String>,
    /// Taints the Node registers with (`key=value:Effect,...`; repeatable).
    #[arg(long, value_delimiter = ',')]
    pub register_with_taints: Vec<String>,
    /// Pods this node accepts (status.capacity/allocatable pods).
    #[arg(long, default_value_t = 110)]
    pub max_pods: u32,
    /// Resources held back from pods (`cpu=500m,memory=1Gi,ephemeral-storage=1Gi,pid=1000`).
    #[arg(long, value_delimiter = ',')]
    pub system_reserved: Vec<String>,
    /// Port of the kubelet API, announced as the Node's kubelet endpoint
    /// (status.daemonEndpoints); 0 serves no kubelet API.
    #[arg(long, default_value_t = 10250)]
    pub kubelet_port: u16,
    // The kubelet API's address, TLS and authentication.
    #[command(flatten)]
    pub api: super::kubelet_api::KubeletApiArgs,
}

impl ClusterArgs {
    /// Whether the agent joins a cluster (a kubeconfig or the in-cluster config is given).
    pub fn enabled(&self) -> bool {
        self.kubeconfig.is_some() || self.in_cluster
    }
}
