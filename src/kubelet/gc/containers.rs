//! Container and sandbox garbage collection (the kubelet's container GC): dead containers older
//! than the minimum age are removed, keeping the newest N per (pod, container name); every dead
//! container and non-ready sandbox of deleted pods goes. Selection is pure.

use crate::cri::{CriResult, RuntimeService, api};
use crate::kubelet::clock::from_unix_nanos;
use crate::kubelet::labels;
use crate::kubelet::runtime_pod::RunState;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

/// A container as GC sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcContainer {
    pub id: String,
    pub pod_uid: String,
    pub name: String,
    pub sandbox_id: String,
    pub state: RunState,
    pub created_at: Option<SystemTime>,
}

/// A sandbox as GC sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcSandbox {
    pub id: String,
    pub pod_uid: String,
    pub ready: bool,
    pub created_at: Option<SystemTime>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcPolicy {
    pub min_age: Duration,
    pub max_per_container: usize,
}

fn old_enough(created: Option<SystemTime>, min_age: Duration, now: SystemTime) -> bool {
    created
        .and_then(|c| now.duration_since(c).ok())
        .is_some_and(|age| age >= min_age)
}

/// Containers to remove.
pub fn select_containers(
    containers: &[GcContainer],
    pod_known: &(dyn Fn(&str) -> bool + Sync),
    policy: GcPolicy,
    now: SystemTime,
) -> Vec<String> {
    let mut groups: HashMap<(&str, &str), Vec<&GcContainer>> = HashMap::new();
    for container in containers
        .iter()
        .filter(|c| c.state != RunState::Running && old_enough(c.created_at, policy.min_age, now))
    {
        groups
            .entry((container.pod_uid.as_str(), container.name.as_str()))
            .or_default()
            .push(container);
    }
    let mut remove = Vec::new();
    for ((uid, _), mut group) in groups {
        group.sort_by_key(|c| std::cmp::Reverse((c.created_at, c.id.clone())));
        let keep = if pod_known(uid) {
            policy.max_per_container
        } else {
            0
        };
        remove.extend(group.into_iter().skip(keep).map(|c| c.id.clone()));
    }
    remove.sort();
    remove
}

/// Sandboxes to remove: not ready, without containers (after the container GC), and not the
/// newest sandbox of a known pod.
pub fn select_sandboxes(
    sandboxes: &[GcSandbox],
    containers: &[GcContainer],
    removed_containers: &[String],
    pod_known: &(dyn Fn(&str) -> bool + Sync),
) -> Vec<String> {
    let removed: HashSet<&str> = removed_containers.iter().map(String::as_str).collect();
    let in_use: HashSet<&str> = containers
        .iter()
        .filter(|c| !removed.contains(c.id.as_str()))
        .map(|c| c.sandbox_id.as_str())
        .collect();
    let mut newest: HashMap<&str, &GcSandbox> = HashMap::new();
    for sandbox in sandboxes {
        let entry = newest.entry(sandbox.pod_uid.as_str()).or_insert(sandbox);
        if (sandbox.created_at, &sandbox.id) > (entry.created_at, &entry.id) {
            *entry = sandbox;
        }
    }
    let mut remove: Vec<String> = sandboxes
        .iter()
        .filter(|s| !s.ready && !in_use.contains(s.id.as_str()))
        .filter(|s| {
            !pod_known(&s.pod_uid) || newest.get(s.pod_uid.as_str()).is_none_or(|n| n.id != s.id)
        })
        .map(|s| s.id.clone())
        .collect();
    remove.sort();
    remove
}

/// Lists what the runtime has, for GC.
pub async fn list(runtime: &dyn RuntimeService) -> CriResult<(Vec<GcContainer>, Vec<GcSandbox>)> {
    let containers = runtime
        .list_containers(api::ListContainersRequest::default())
        .await?
        .containers
        .into_iter()
        .filter_map(|c| {
            let uid = c.labels.get(labels::POD_UID)?.clone();
            Some(GcContainer {
                pod_uid: uid,
                name: c
                    .labels
                    .get(labels::CONTAINER_NAME)
                    .cloned()
                    .unwrap_or_default(),
                sandbox_id: c.pod_sandbox_id,
                state: RunState::from_cri(c.state),
                created_at: from_unix_nanos(c.created_at),
                id: c.id,
            })
        })
        .collect();
    let sandboxes = runtime
        .list_pod_sandbox(api::ListPodSandboxRequest::default())
        .await?
        .items
        .into_iter()
        .filter_map(|s| {
            let uid = s.labels.get(labels::POD_UID)?.clone();
            Some(GcSandbox {
                pod_uid: uid,
                ready: s.state == api::PodSandboxState::SandboxReady as i32,
                created_at: from_unix_nanos(s.created_at),
                id: s.id,
            })
        })
        .collect();
    Ok((containers, sandboxes))
}

/// One GC pass; returns (containers removed, sandboxes removed).
pub async fn collect(
    runtime: &dyn RuntimeService,
    pod_known: &(dyn Fn(&str) -> bool + Sync),
    policy: GcPolicy,
    now: SystemTime,
) -> CriResult<(usize, usize)> {
    let (containers, sandboxes) = list(runtime).await?;
    let dead = select_containers(&containers, pod_known, policy, now);
    let mut removed = Vec::new();
    for id in &dead {
        match runtime
            .remove_container(api::RemoveContainerRequest {
                container_id: id.clone(),
            })
            .await
        {
            Ok(_) => removed.push(id.clone()),
            Err(status) => tracing::warn!(%id, error = %status, "container GC: cannot remove"),
        }
    }
    let mut sandboxes_removed = 0;
    for id in select_sandboxes(&sandboxes, &containers, &removed, pod_known) {
        match runtime
            .remove_pod_sandbox(api::RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
        {
            Ok(_) => sandboxes_removed += 1,
            Err(status) => tracing::warn!(%id, error = %status, "sandbox GC: cannot remove"),
        }
    }
    if !removed.is_empty() || sandboxes_removed > 0 {
        tracing::info!(
            containers = removed.len(),
            sandboxes = sandboxes_removed,
            "garbage-collected dead containers"
        );
    }
    Ok((removed.len(), sandboxes_removed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn c(id: &str, uid: &str, name: &str, state: RunState, created: u64) -> GcContainer {
        GcContainer {
            id: id.into(),
            pod_uid: uid.into(),
            name: name.into(),
            sandbox_id: format!("sb-{uid}"),
            state,
            created_at: Some(at(created)),
        }
    }

    const POLICY: GcPolicy = GcPolicy {
        min_age: Duration::from_secs(60),
        max_per_container: 1,
    };

    #[test]
    fn containers() {
        use RunState::*;
        let known = |uid: &str| uid == "live";
        let cases: Vec<(&str, Vec<GcContainer>, Vec<&str>)> = vec![
            (
                "nothing dead",
                vec![c("a", "live", "app", Running, 0)],
                vec![],
            ),
            (
                "keeps the newest dead one per container",
                vec![
                    c("a1", "live", "app", Exited, 0),
                    c("a2", "live", "app", Exited, 10),
                    c("a3", "live", "app", Exited, 20),
                    c("a4", "live", "app", Running, 30),
                    c("b1", "live", "side", Exited, 0),
                ],
                vec!["a1", "a2"],
            ),
            (
                "too young to collect",
                vec![
                    c("a1", "live", "app", Exited, 950),
                    c("a2", "live", "app", Exited, 960),
                ],
                vec![],
            ),
            (
                "young ones count as kept only when old enough",
                vec![
                    c("a1", "live", "app", Exited, 0),
                    c("a2", "live", "app", Exited, 990),
                ],
                vec![],
            ),
            (
                "deleted pod: all dead ones go, running ones stay",
                vec![
                    c("x1", "gone", "app", Exited, 0),
                    c("x2", "gone", "app", Exited, 10),
                    c("x3", "gone", "side", Running, 0),
                    c("x4", "gone", "init", Created, 0),
                ],
                vec!["x1", "x2", "x4"],
            ),
        ];
        for (name, containers, want) in cases {
            let got = select_containers(&containers, &known, POLICY, at(1000));
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn sandboxes() {
        let s = |id: &str, uid: &str, ready: bool, created: u64| GcSandbox {
            id: id.into(),
            pod_uid: uid.into(),
            ready,
            created_at: Some(at(created)),
        };
        let known = |uid: &str| uid == "live";
        let sandboxes = vec![
            s("l-old", "live", false, 0),
            s("l-new", "live", true, 10),
            s("g1", "gone", false, 0),
            s("g2", "gone", false, 5),
            s("g3", "gone", true, 6),
        ];
        let containers = vec![
            c("c1", "gone", "app", RunState::Exited, 0),
            c("c2", "live", "app", RunState::Running, 0),
        ];
        let mut containers = containers;
        containers[0].sandbox_id = "g1".into();
        containers[1].sandbox_id = "l-new".into();
        // g1 still holds a container that was not removed.
        assert_eq!(
            select_sandboxes(&sandboxes, &containers, &[], &known),
            vec!["g2", "l-old"]
        );
        assert_eq!(
            select_sandboxes(&sandboxes, &containers, &["c1".to_string()], &known),
            vec!["g1", "g2", "l-old"]
        );
        // The newest sandbox of a known pod stays even when stopped and empty.
        let stopped = vec![s("only", "live", false, 0)];
        assert!(select_sandboxes(&stopped, &[], &[], &known).is_empty());
    }
}
