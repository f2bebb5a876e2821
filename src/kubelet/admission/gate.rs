//! The agent's admission state: which pods were admitted (and still count against the node)
//! and which were rejected (never started; only their deletion matters).

use super::{NodeFactsSource, Rejection, admit};
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::sync::Arc;

/// What the agent does with a pod update.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to its worker.
    Run,
    /// A new pod that does not fit: set its status Failed, do not start it.
    Reject(Rejection),
    /// An update of a rejected pod: nothing to run.
    Ignore,
    /// A rejected pod deleted in the API: its object may be deleted now.
    Forget,
}

pub struct AdmissionGate {
    node: Arc<dyn NodeFactsSource>,
    admitted: HashMap<String, Pod>,
    rejected: HashMap<String, Pod>,
}

impl AdmissionGate {
    pub fn new(node: Arc<dyn NodeFactsSource>) -> AdmissionGate {
        AdmissionGate {
            node,
            admitted: HashMap::new(),
            rejected: HashMap::new(),
        }
    }

    /// Decides for an update of `pod`; `active(uid)` tells whether an admitted pod still
    /// counts (its worker lives and it is not terminal).
    pub fn check(&mut self, pod: &Pod, active: &dyn Fn(&str) -> bool) -> Verdict {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return Verdict::Run;
        };
        let deleted = pod.metadata.deletion_timestamp.is_some();
        if self.rejected.contains_key(uid) {
            if deleted {
                self.rejected.remove(uid);
                return Verdict::Forget;
            }
            return Verdict::Ignore;
        }
        if self.admitted.contains_key(uid) || deleted {
            // Known pods keep running through spec updates; a deleted new pod is terminated.
            self.admitted.insert(uid.to_string(), pod.clone());
            return Verdict::Run;
        }
        self.admitted.retain(|uid, _| active(uid));
        let Some(facts) = self.node.facts() else {
            self.admitted.insert(uid.to_string(), pod.clone());
            return Verdict::Run;
        };
        let mut others: Vec<&Pod> = self.admitted.values().collect();
        others.sort_by_key(|p| p.metadata.uid.clone());
        let others: Vec<Pod> = others.into_iter().cloned().collect();
        match admit(&facts, pod, &others) {
            Ok(()) => {
                self.admitted.insert(uid.to_string(), pod.clone());
                Verdict::Run
            }
            Err(rejection) => {
                self.rejected.insert(uid.to_string(), pod.clone());
                Verdict::Reject(rejection)
            }
        }
    }

    /// The pod left its source.
    pub fn removed(&mut self, uid: &str) -> Option<Pod> {
        self.admitted.remove(uid);
        self.rejected.remove(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::admission::NodeFacts;
    use serde_json::json;

    struct Fixed(Option<NodeFacts>);
    impl NodeFactsSource for Fixed {
        fn facts(&self) -> Option<NodeFacts> {
            self.0.clone()
        }
    }

    fn pod(uid: &str, cpu: &str, deleted: bool) -> Pod {
        let mut meta = json!({"name": uid, "uid": uid});
        if deleted {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({"metadata": meta, "spec": {"containers": [
            {"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}}))
        .expect("pod")
    }

    fn gate() -> AdmissionGate {
        AdmissionGate::new(Arc::new(Fixed(Some(NodeFacts {
            name: "n".into(),
            cpu_millis: 1000,
            memory: 1 << 30,
            pods: 10,
            ..NodeFacts::default()
        }))))
    }

    #[test]
    fn admitted_pods_count_until_inactive_and_rejected_ones_are_only_forgotten() {
        let mut gate = gate();
        let alive = |_: &str| true;
        assert_eq!(gate.check(&pod("a", "600m", false), &alive), Verdict::Run);
        let verdict = gate.check(&pod("b", "600m", false), &alive);
        assert!(matches!(verdict, Verdict::Reject(r) if r.reason == "OutOfcpu"));
        assert_eq!(
            gate.check(&pod("b", "600m", false), &alive),
            Verdict::Ignore
        );
        assert_eq!(gate.check(&pod("b", "600m", true), &alive), Verdict::Forget);
        // A spec update of an admitted pod is not admitted again.
        assert_eq!(gate.check(&pod("a", "900m", false), &alive), Verdict::Run);
        // Once "a" finished, its cpu is free.
        let gone = |uid: &str| uid != "a";
        assert_eq!(gate.check(&pod("c", "600m", false), &gone), Verdict::Run);
    }

    #[test]
    fn without_node_facts_pods_are_admitted() {
        let mut gate = AdmissionGate::new(Arc::new(Fixed(None)));
        assert_eq!(gate.check(&pod("a", "64", false), &|_| true), Verdict::Run);
    }
}
