//! Node-side admission, as kubelet's `generalPredicates` (pkg/kubelet/lifecycle/predicate.go):
//! a new pod is admitted only if it fits the node's allocatable (pods, cpu, memory) next to the
//! pods already admitted, matches the node's labels (nodeSelector, required nodeAffinity) and
//! asks for no host port already taken. Pure: [`admit`] decides, the agent acts on it.

pub mod affinity;
pub mod gate;
pub mod requests;

#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::{Node, Pod};
use requests::{PodRequests, pod_requests};
use std::collections::{BTreeMap, HashSet};

/// What admission needs to know of the node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub cpu_millis: i64,
    pub memory: i64,
    pub pods: i64,
}

impl NodeFacts {
    /// The facts of a Node object as the node agent last computed it (status.allocatable).
    pub fn from_node(node: &Node) -> NodeFacts {
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let get = |name: &str| allocatable.and_then(|a| a.get(name));
        let parse = |name: &str| requests::quantity(get(name));
        NodeFacts {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            cpu_millis: parse("cpu").milli_value(),
            memory: parse("memory").value(),
            pods: parse("pods").value(),
        }
    }
}

/// Where the agent reads the node's current facts; `None` while the node is not known yet
/// (pods are then admitted, as kubelet does before its node informer has synced).
pub trait NodeFactsSource: Send + Sync {
    fn facts(&self) -> Option<NodeFacts>;
}

impl NodeFactsSource for tokio::sync::watch::Receiver<Option<Node>> {
    fn facts(&self) -> Option<NodeFacts> {
        self.borrow().as_ref().map(NodeFacts::from_node)
    }
}

/// Why a pod was refused; `reason` and `message` are kubelet's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

fn out_of(resource: &str, requested: i64, used: i64, capacity: i64) -> Rejection {
    Rejection {
        reason: format!("OutOf{resource}"),
        message: format!(
            "Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, capacity: {capacity}"
        ),
    }
}

fn predicate(name: &str, description: &str) -> Rejection {
    Rejection {
        reason: name.to_string(),
        message: format!("Predicate {name} failed: {description}"),
    }
}

/// Decides for `pod` on `node` given the admitted, non-terminal pods; the first failing
/// predicate wins, in kubelet's order (resources, node affinity, node name, host ports).
pub fn admit(node: &NodeFacts, pod: &Pod, admitted: &[Pod]) -> Result<(), Rejection> {
    let used_pods = admitted.len() as i64;
    if used_pods + 1 > node.pods {
        return Err(out_of("pods", 1, used_pods, node.pods));
    }
    let wanted = pod_requests(pod);
    let used = admitted
        .iter()
        .map(pod_requests)
        .fold(PodRequests::default(), |a, b| a.plus(&b));
    // As the scheduler's Fits: a resource the pod does not request never fails.
    if wanted.cpu_millis > 0 && wanted.cpu_millis > node.cpu_millis - used.cpu_millis {
        return Err(out_of(
            "cpu",
            wanted.cpu_millis,
            used.cpu_millis,
            node.cpu_millis,
        ));
    }
    if wanted.memory > 0 && wanted.memory > node.memory - used.memory {
        return Err(out_of("memory", wanted.memory, used.memory, node.memory));
    }
    if !affinity::matches_node(pod, &node.labels, &node.name) {
        return Err(predicate(
            "NodeAffinity",
            "node(s) didn't match Pod's node affinity/selector",
        ));
    }
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if bound.is_some_and(|n| !n.is_empty() && n != node.name) {
        return Err(predicate(
            "NodeName",
            "node(s) didn't match the requested node name",
        ));
    }
    if host_ports_conflict(pod, admitted) {
        return Err(predicate(
            "NodePorts",
            "node(s) didn't have free ports for the requested pod ports",
        ));
    }
    Ok(())
}

/// (protocol, hostIP, hostPort) of the pod's containers asking for a host port.
fn host_ports(pod: &Pod) -> Vec<(String, String, i32)> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|&h| h > 0)?;
            let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            let ip = match p.host_ip.as_deref() {
                None | Some("") => "0.0.0.0".to_string(),
                Some(ip) => ip.to_string(),
            };
            Some((protocol, ip, port))
        })
        .collect()
}

fn host_ports_conflict(pod: &Pod, admitted: &[Pod]) -> bool {
    let wanted = host_ports(pod);
    if wanted.is_empty() {
        return false;
    }
    let taken: HashSet<(String, String, i32)> = admitted.iter().flat_map(host_ports).collect();
    // The wildcard address conflicts with every address of the same protocol and port.
    wanted.iter().any(|(protocol, ip, port)| {
        taken.iter().any(|(p, i, n)| {
            p == protocol && n == port && (i == ip || i == "0.0.0.0" || ip == "0.0.0.0")
        })
    })
}
