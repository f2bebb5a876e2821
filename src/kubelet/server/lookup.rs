//! Finding a request's pod sandbox and container through the CRI (by the labels the sync loop
//! puts on them): the kubelet API names pods by namespace/name (and optionally uid) and
//! containers by name.

use crate::cri::{RuntimeService, api};
use crate::kubelet::labels;
use std::collections::HashMap;

#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("pod {namespace}/{pod} not found")]
    PodNotFound { namespace: String, pod: String },
    #[error("container {container:?} in pod {namespace}/{pod} not found")]
    ContainerNotFound {
        namespace: String,
        pod: String,
        container: String,
    },
    #[error("previous terminated container {container:?} in pod {namespace}/{pod} not found")]
    NoPrevious {
        namespace: String,
        pod: String,
        container: String,
    },
    #[error("the container runtime: {0}")]
    Runtime(#[from] tonic::Status),
}

/// Which pod a request names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl PodRef {
    fn selector(&self) -> HashMap<String, String> {
        let mut selector = HashMap::from([
            (labels::POD_NAMESPACE.to_string(), self.namespace.clone()),
            (labels::POD_NAME.to_string(), self.name.clone()),
        ]);
        if let Some(uid) = &self.uid {
            selector.insert(labels::POD_UID.to_string(), uid.clone());
        }
        selector
    }
}

/// The sandbox to use among a pod's: the newest ready one, else the newest.
pub fn pick_sandbox(mut sandboxes: Vec<api::PodSandbox>) -> Option<api::PodSandbox> {
    sandboxes.sort_by_key(|s| {
        (
            s.state == api::PodSandboxState::SandboxReady as i32,
            s.created_at,
        )
    });
    sandboxes.pop()
}

/// The current instance of a container (the newest), or with `previous` the one before it.
pub fn pick_container(
    mut containers: Vec<api::Container>,
    previous: bool,
) -> Option<api::Container> {
    containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    containers.into_iter().nth(usize::from(previous))
}

pub async fn sandbox(
    runtime: &dyn RuntimeService,
    pod: &PodRef,
) -> Result<api::PodSandbox, LookupError> {
    let items = runtime
        .list_pod_sandbox(api::ListPodSandboxRequest {
            filter: Some(api::PodSandboxFilter {
                label_selector: pod.selector(),
                ..Default::default()
            }),
        })
        .await?
        .items;
    pick_sandbox(items).ok_or_else(|| LookupError::PodNotFound {
        namespace: pod.namespace.clone(),
        pod: pod.name.clone(),
    })
}

pub async fn container(
    runtime: &dyn RuntimeService,
    pod: &PodRef,
    name: &str,
    previous: bool,
) -> Result<api::Container, LookupError> {
    let mut selector = pod.selector();
    selector.insert(labels::CONTAINER_NAME.to_string(), name.to_string());
    let containers = runtime
        .list_containers(api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }),
        })
        .await?
        .containers;
    let none = containers.is_empty();
    pick_container(containers, previous).ok_or_else(|| {
        let (namespace, pod, container) = (pod.namespace.clone(), pod.name.clone(), name.into());
        if previous && !none {
            LookupError::NoPrevious {
                namespace,
                pod,
                container,
            }
        } else {
            LookupError::ContainerNotFound {
                namespace,
                pod,
                container,
            }
        }
    })
}

/// The container's status (its log path and state).
pub async fn status(
    runtime: &dyn RuntimeService,
    id: &str,
) -> Result<Option<api::ContainerStatus>, LookupError> {
    Ok(runtime
        .container_status(api::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        })
        .await?
        .status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, created_at: i64) -> api::Container {
        api::Container {
            id: id.into(),
            created_at,
            ..Default::default()
        }
    }

    fn s(id: &str, ready: bool, created_at: i64) -> api::PodSandbox {
        api::PodSandbox {
            id: id.into(),
            state: if ready {
                api::PodSandboxState::SandboxReady as i32
            } else {
                api::PodSandboxState::SandboxNotready as i32
            },
            created_at,
            ..Default::default()
        }
    }

    #[test]
    fn current_is_newest_previous_the_one_before() {
        let table: [(Vec<api::Container>, bool, Option<&str>); 5] = [
            (vec![c("a", 1), c("b", 3), c("c", 2)], false, Some("b")),
            (vec![c("a", 1), c("b", 3), c("c", 2)], true, Some("c")),
            (vec![c("a", 1)], true, None),
            (vec![c("a", 1)], false, Some("a")),
            (vec![], false, None),
        ];
        for (containers, previous, want) in table {
            let got = pick_container(containers, previous).map(|c| c.id);
            assert_eq!(got.as_deref(), want, "previous={previous}");
        }
    }

    #[test]
    fn ready_sandbox_wins_over_a_newer_stopped_one() {
        let got = pick_sandbox(vec![s("old", true, 1), s("new", false, 2)]);
        assert_eq!(got.map(|s| s.id).as_deref(), Some("old"));
        let got = pick_sandbox(vec![s("a", false, 1), s("b", false, 2)]);
        assert_eq!(got.map(|s| s.id).as_deref(), Some("b"));
        assert!(pick_sandbox(vec![]).is_none());
    }
}
