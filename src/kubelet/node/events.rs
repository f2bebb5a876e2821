//! Node events as kubelet emits them (Starting, NodeReady/NodeNotReady, NodeHas...), behind a
//! small trait so a shared, rate-limited event recorder can replace this one later.

use super::status::condition;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::{NodeStatus, ObjectReference};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// One event about the Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

impl NodeEvent {
    fn normal(reason: &str, note: String) -> NodeEvent {
        NodeEvent {
            warning: false,
            reason: reason.to_string(),
            note,
        }
    }
}

/// Where node events go.
#[async_trait]
pub trait NodeEvents: Send + Sync {
    async fn publish(&self, event: &NodeEvent) -> Result<(), kube::Error>;
}

/// Events through the API (`events.k8s.io/v1`, reporting controller "kubelet", the node name
/// as instance), about the Node (referenced as kubelet does: kind Node, uid = its name).
pub struct RecorderEvents {
    recorder: Recorder,
    reference: ObjectReference,
}

impl RecorderEvents {
    pub fn new(client: kube::Client, node_name: &str) -> RecorderEvents {
        RecorderEvents {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: "kubelet".to_string(),
                    instance: Some(node_name.to_string()),
                },
            ),
            reference: ObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("Node".to_string()),
                name: Some(node_name.to_string()),
                uid: Some(node_name.to_string()),
                ..Default::default()
            },
        }
    }
}

#[async_trait]
impl NodeEvents for RecorderEvents {
    async fn publish(&self, event: &NodeEvent) -> Result<(), kube::Error> {
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
        self.recorder.publish(&ev, &self.reference).await
    }
}

/// kubelet's "Starting kubelet." event.
pub fn starting() -> NodeEvent {
    NodeEvent::normal("Starting", "Starting kubelet.".to_string())
}

/// Events for the conditions that flipped between `before` (None at registration: every
/// condition is new) and `after`, as kubelet's status setters record them.
pub fn transitions(node: &str, before: Option<&NodeStatus>, after: &NodeStatus) -> Vec<NodeEvent> {
    const KINDS: &[(&str, &str, &str)] = &[
        // type, reason when True, reason when False
        (
            "MemoryPressure",
            "NodeHasInsufficientMemory",
            "NodeHasSufficientMemory",
        ),
        (
            "DiskPressure",
            "NodeHasDiskPressure",
            "NodeHasNoDiskPressure",
        ),
        (
            "PIDPressure",
            "NodeHasInsufficientPID",
            "NodeHasSufficientPID",
        ),
        ("Ready", "NodeReady", "NodeNotReady"),
    ];
    let mut events = Vec::new();
    for (kind, on, off) in KINDS {
        let Some(now) = condition(after, kind) else {
            continue;
        };
        let was = before
            .and_then(|b| condition(b, kind))
            .map(|c| c.status.as_str());
        if was == Some(now.status.as_str()) {
            continue;
        }
        let reason = if now.status == "True" { on } else { off };
        events.push(NodeEvent::normal(
            reason,
            format!("Node {node} status is now: {reason}"),
        ));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeCondition;

    fn status(conditions: &[(&str, &str)]) -> NodeStatus {
        NodeStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, s)| NodeCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn reasons(events: Vec<NodeEvent>) -> Vec<String> {
        events.into_iter().map(|e| e.reason).collect()
    }

    #[test]
    fn events_follow_condition_flips() {
        let healthy = status(&[
            ("MemoryPressure", "False"),
            ("DiskPressure", "False"),
            ("PIDPressure", "False"),
            ("Ready", "True"),
        ]);
        assert_eq!(
            reasons(transitions("n1", None, &healthy)),
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID",
                "NodeReady"
            ]
        );
        assert!(transitions("n1", Some(&healthy), &healthy).is_empty());
        let not_ready = status(&[
            ("MemoryPressure", "True"),
            ("DiskPressure", "False"),
            ("PIDPressure", "False"),
            ("Ready", "False"),
        ]);
        let events = transitions("n1", Some(&healthy), &not_ready);
        assert_eq!(
            reasons(events.clone()),
            ["NodeHasInsufficientMemory", "NodeNotReady"]
        );
        assert_eq!(events[1].note, "Node n1 status is now: NodeNotReady");
        assert_eq!(
            reasons(transitions("n1", Some(&not_ready), &healthy)),
            ["NodeHasSufficientMemory", "NodeReady"]
        );
        assert_eq!(starting().note, "Starting kubelet.");
    }
}
