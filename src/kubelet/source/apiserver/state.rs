//! The pods bound to the node as the API watch reports them, and the [`PodEvent`]s they imply.
//! Pure: fed watch events, returns pod events.
//!
//! A pod is sent again only when something but its status changed (the agent's own status
//! patches come back through the watch and must not resync the pod). A pod first seen in a
//! terminal phase (Succeeded/Failed) is not run again: it is sent only once it is deleted, so
//! its termination deletes the API object. A pod sent with a `deletionTimestamp` is not sent
//! again: its worker is terminating it.

use crate::kubelet::podconfig::PodEvent;
use crate::kubelet::podconfig::spec::defaults::apply_pod_defaults;
use crate::kubelet::podconfig::validate::{PodSourceAbilities, validate_pod_from};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{HashMap, HashSet};

/// What the source knows of the node's pods.
#[derive(Default)]
pub struct PodSet {
    /// Pods sent to the sync loop, by uid, as compared (see [`comparable`]).
    sent: HashMap<String, Pod>,
    /// Terminal pods not run, and pods refused by validation (with the spec refused).
    held: HashMap<String, Pod>,
    /// Pods of a relist in progress.
    relist: Option<Vec<Pod>>,
    /// The first list was applied.
    listed: bool,
}

/// The pod without what changes on every status patch or write.
fn comparable(pod: &Pod) -> Pod {
    let mut pod = pod.clone();
    pod.status = None;
    pod.metadata.resource_version = None;
    pod.metadata.managed_fields = None;
    pod
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn label(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

impl PodSet {
    /// Whether the first full list was applied (housekeeping may then remove unknown pods).
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// Uids sent to the sync loop and not removed since.
    pub fn sent(&self) -> HashSet<String> {
        self.sent.keys().cloned().collect()
    }

    /// A (re)list starts: the pods that follow replace what is known.
    pub fn begin_list(&mut self) {
        self.relist = Some(Vec::new());
    }

    /// A pod of the list in progress.
    pub fn list_item(&mut self, pod: Pod) {
        self.relist.get_or_insert_with(Vec::new).push(pod);
    }

    /// The list is complete: pods not in it are gone.
    pub fn end_list(&mut self) -> Vec<PodEvent> {
        let mut pods = self.relist.take().unwrap_or_default();
        // Oldest first, as kubelet admits them: which pods fit must not depend on list order.
        pods.sort_by(|a, b| {
            let key = |p: &Pod| {
                (
                    p.metadata.creation_timestamp.clone(),
                    p.metadata.uid.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        let present: HashSet<&str> = pods
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        let mut events: Vec<PodEvent> = self
            .sent
            .keys()
            .filter(|uid| !present.contains(uid.as_str()))
            .map(|uid| PodEvent::Remove { uid: uid.clone() })
            .collect();
        events.sort_by_key(|e| match e {
            PodEvent::Remove { uid } => uid.clone(),
            _ => String::new(),
        });
        self.sent.retain(|uid, _| present.contains(uid.as_str()));
        self.held.retain(|uid, _| present.contains(uid.as_str()));
        for pod in pods {
            events.extend(self.upsert(pod));
        }
        self.listed = true;
        events
    }

    /// A pod added or changed.
    pub fn apply(&mut self, pod: Pod) -> Vec<PodEvent> {
        if let Some(relist) = self.relist.as_mut() {
            relist.push(pod);
            return Vec::new();
        }
        self.upsert(pod).into_iter().collect()
    }

    /// A pod deleted from the API.
    pub fn delete(&mut self, pod: &Pod) -> Vec<PodEvent> {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return Vec::new();
        };
        self.held.remove(uid);
        match self.sent.remove(uid) {
            Some(_) => vec![PodEvent::Remove {
                uid: uid.to_string(),
            }],
            None => Vec::new(),
        }
    }

    fn upsert(&mut self, mut pod: Pod) -> Option<PodEvent> {
        let Some(uid) = pod.metadata.uid.clone().filter(|u| !u.is_empty()) else {
            tracing::warn!(pod = %label(&pod), "ignoring an API pod without a uid");
            return None;
        };
        if super::mirror::is_mirror_pod(&pod) {
            // A static pod's reflection in the API: the node runs the static pod, not this.
            return None;
        }
        let key = comparable(&pod);
        let deleted = pod.metadata.deletion_timestamp.is_some();
        if let Some(sent) = self.sent.get(&uid) {
            if sent.metadata.deletion_timestamp.is_some() || *sent == key {
                return None;
            }
        } else if let Some(held) = self.held.get(&uid) {
            if *held == key || !deleted {
                return None;
            }
        } else if is_terminal(&pod) && !deleted {
            tracing::debug!(pod = %label(&pod), "terminal pod; not run again");
            self.held.insert(uid, key);
            return None;
        }
        // The API server defaulted the pod already; this fills what older servers leave out.
        apply_pod_defaults(&mut pod);
        // The agent's ApiObjects issues the tokens of the service-account volume the API
        // server's ServiceAccount admission adds to every pod.
        let abilities = PodSourceAbilities {
            service_account_tokens: true,
        };
        if let Err(problems) = validate_pod_from(&pod, abilities)
            && !deleted
        {
            tracing::warn!(pod = %label(&pod), ?problems, "pod refused: the agent cannot run it");
            self.sent.remove(&uid);
            self.held.insert(uid, key);
            return None;
        }
        self.held.remove(&uid);
        self.sent.insert(uid, key);
        Some(PodEvent::Upsert(Box::new(pod)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str, image: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": "1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": image}]},
            "status": {"phase": "Pending"}
        }))
        .unwrap()
    }

    fn with_phase(mut pod: Pod, phase: &str) -> Pod {
        pod.status.as_mut().unwrap().phase = Some(phase.into());
        pod.metadata.resource_version = Some("2".into());
        pod
    }

    fn deleted(mut pod: Pod) -> Pod {
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1000).unwrap(),
            ));
        pod.metadata.deletion_grace_period_seconds = Some(5);
        pod
    }

    fn summary(events: &[PodEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                PodEvent::Upsert(p) => format!("+{}", p.metadata.name.clone().unwrap_or_default()),
                PodEvent::Remove { uid } => format!("-{uid}"),
                PodEvent::ObjectsChanged => "objects".into(),
            })
            .collect()
    }

    #[test]
    fn mirror_pods_are_never_run() {
        let mut set = PodSet::default();
        let mut mirror = pod("web-n1", "um", "busybox");
        mirror.metadata.annotations = Some(
            [(
                super::super::mirror::CONFIG_MIRROR_ANNOTATION.to_string(),
                "h".to_string(),
            )]
            .into(),
        );
        set.begin_list();
        set.list_item(mirror.clone());
        set.list_item(pod("a", "ua", "busybox"));
        assert_eq!(summary(&set.end_list()), ["+a"]);
        assert!(set.apply(mirror.clone()).is_empty());
        assert!(set.apply(deleted(mirror.clone())).is_empty());
        assert!(set.delete(&mirror).is_empty());
        assert!(!set.sent().contains("um"));
    }

    #[test]
    fn watch_events_become_minimal_pod_events() {
        let mut set = PodSet::default();
        let a = pod("a", "ua", "busybox");
        let b = pod("b", "ub", "busybox");
        let done = pod("done", "ud", "busybox");
        set.begin_list();
        set.list_item(a.clone());
        set.list_item(b.clone());
        set.list_item(with_phase(done.clone(), "Succeeded"));
        assert!(!set.listed());
        assert_eq!(summary(&set.end_list()), ["+a", "+b"]);
        assert!(set.listed());
        // Status-only changes (our own patches) and replays: nothing.
        assert!(set.apply(with_phase(a.clone(), "Running")).is_empty());
        assert!(set.apply(a.clone()).is_empty());
        // A spec change: sent again, with its defaults.
        let a2 = pod("a", "ua", "busybox:1.36");
        let events = set.apply(a2.clone());
        assert_eq!(summary(&events), ["+a"]);
        let PodEvent::Upsert(sent) = &events[0] else {
            unreachable!()
        };
        assert_eq!(
            sent.spec.as_ref().unwrap().restart_policy.as_deref(),
            Some("Always")
        );
        // Deleted: sent once with its deletionTimestamp, then never again.
        assert_eq!(summary(&set.apply(deleted(a2.clone()))), ["+a"]);
        let mut later = deleted(a2.clone());
        later.metadata.deletion_grace_period_seconds = Some(0);
        assert!(set.apply(later.clone()).is_empty());
        assert_eq!(summary(&set.delete(&later)), ["-ua"]);
        assert!(set.delete(&later).is_empty());
        // The terminal pod is run only to be deleted.
        assert!(set.apply(with_phase(done.clone(), "Failed")).is_empty());
        assert_eq!(
            summary(&set.apply(deleted(with_phase(done.clone(), "Succeeded")))),
            ["+done"]
        );
        // A relist without b: b is removed; events during the relist wait for its end.
        set.begin_list();
        assert!(set.apply(pod("c", "uc", "busybox")).is_empty());
        set.list_item(deleted(with_phase(done, "Succeeded")));
        assert_eq!(summary(&set.end_list()), ["-ub", "+c"]);
        assert_eq!(
            set.sent(),
            HashSet::from(["ud".to_string(), "uc".to_string()])
        );
    }

    #[test]
    fn invalid_pods_and_pods_without_uid_are_not_run() {
        let mut set = PodSet::default();
        let bad = pod("Bad_Name", "ux", "busybox");
        assert!(set.apply(bad.clone()).is_empty());
        assert!(set.apply(with_phase(bad, "Pending")).is_empty());
        assert!(set.sent().is_empty());
        let mut no_uid = pod("n", "", "busybox");
        no_uid.metadata.uid = None;
        assert!(set.apply(no_uid).is_empty());
    }
}
