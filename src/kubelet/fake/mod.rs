//! A fake CRI runtime: a TEST DOUBLE for the sync loop, not a product runtime.
//!
//! In-memory sandboxes, containers and images implementing both [`RuntimeService`] and
//! [`ImageService`], with knobs to make containers exit with a code after a while, make exec
//! (probes, hooks) fail, make image pulls fail, and with a container event stream. Timestamps
//! come from the injected [`Clock`], so under `tokio::time::pause` everything is deterministic.
//! Every call is recorded ([`FakeRuntime::calls`]) so tests can assert what the agent did.

mod images;
mod service;

use crate::cri::api;
use crate::kubelet::clock::{Clock, to_unix_nanos};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::broadcast;

/// How a started container behaves (by container name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// Runs until stopped.
    RunForever,
    /// Exits by itself `after` its start, with `code`.
    ExitAfter { after: Duration, code: i32 },
}

#[derive(Clone, Debug)]
pub(crate) struct FakeSandbox {
    pub config: api::PodSandboxConfig,
    pub ready: bool,
    pub created_at: i64,
}

#[derive(Clone, Debug)]
pub(crate) struct FakeContainer {
    pub sandbox_id: String,
    pub config: api::ContainerConfig,
    pub state: api::ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub image_ref: String,
}

impl FakeContainer {
    pub fn name(&self) -> &str {
        self.config
            .metadata
            .as_ref()
            .map(|m| m.name.as_str())
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug)]
pub(crate) struct FakeImage {
    pub id: String,
    pub tags: Vec<String>,
    pub size: u64,
}

#[derive(Default)]
pub(crate) struct State {
    pub next_id: u64,
    pub sandboxes: HashMap<String, FakeSandbox>,
    pub containers: HashMap<String, FakeContainer>,
    pub behaviors: HashMap<String, Behavior>,
    pub exec_exit_codes: HashMap<String, i32>,
    pub stop_exit_code: i32,
    pub failing_pulls: HashSet<String>,
    /// GetContainerEvents fails (a runtime without an event stream).
    pub no_event_stream: bool,
    pub images: Vec<FakeImage>,
    pub image_fs_mountpoint: String,
    pub pod_ip: String,
    pub calls: Vec<String>,
    /// (container name, wall time in ns) of every start.
    pub starts: Vec<(String, i64)>,
}

/// The fake runtime (see the module docs).
pub struct FakeRuntime {
    pub(crate) state: Mutex<State>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) events: broadcast::Sender<api::ContainerEventResponse>,
    pub(crate) this: Weak<FakeRuntime>,
}

impl FakeRuntime {
    /// A fake runtime with no images; pods get IP 127.0.0.1 (a loopback-only pod network).
    pub fn new(clock: Arc<dyn Clock>) -> Arc<FakeRuntime> {
        let (events, _) = broadcast::channel(1024);
        Arc::new_cyclic(|this| FakeRuntime {
            state: Mutex::new(State {
                stop_exit_code: 143,
                image_fs_mountpoint: "/".to_string(),
                pod_ip: "127.0.0.1".to_string(),
                ..Default::default()
            }),
            clock,
            events,
            this: this.clone(),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock only happens in a failing test; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn now_nanos(&self) -> i64 {
        to_unix_nanos(self.clock.wall())
    }

    /// Containers named `name` started from now on behave so.
    pub fn set_behavior(&self, name: &str, behavior: Behavior) {
        self.lock().behaviors.insert(name.to_string(), behavior);
    }

    /// ExecSync in containers named `name` exits with `code` (default 0).
    pub fn set_exec_exit_code(&self, name: &str, code: i32) {
        self.lock().exec_exit_codes.insert(name.to_string(), code);
    }

    /// GetContainerEvents works (the default) or fails.
    pub fn set_event_stream(&self, available: bool) {
        self.lock().no_event_stream = !available;
    }

    /// A container `c` (image busybox, made known here) of pod `ns/p` (uid `u`) running in a
    /// new sandbox; `labels` on both, the container's also naming it; logging to `log_path`.
    /// Its id.
    pub async fn start_sample_container(
        &self,
        labels: HashMap<String, String>,
        log_path: &str,
    ) -> String {
        use crate::cri::RuntimeService;
        self.add_image("busybox", 1);
        let sandbox_config = api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: "p".into(),
                namespace: "ns".into(),
                uid: "u".into(),
                attempt: 0,
            }),
            labels: labels.clone(),
            ..Default::default()
        };
        let sandbox = self
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(sandbox_config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .expect("the fake runs a sandbox")
            .pod_sandbox_id;
        let mut container_labels = labels;
        container_labels.insert(
            crate::kubelet::labels::CONTAINER_NAME.to_string(),
            "c".into(),
        );
        let id = self
            .create_container(api::CreateContainerRequest {
                pod_sandbox_id: sandbox,
                config: Some(api::ContainerConfig {
                    metadata: Some(api::ContainerMetadata {
                        name: "c".into(),
                        attempt: 0,
                    }),
                    image: Some(api::ImageSpec {
                        image: "busybox".into(),
                        ..Default::default()
                    }),
                    labels: container_labels,
                    log_path: log_path.to_string(),
                    ..Default::default()
                }),
                sandbox_config: Some(sandbox_config),
            })
            .await
            .expect("the fake creates a container")
            .container_id;
        self.start_container(api::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .expect("the fake starts a container");
        id
    }

    /// Pulls of `image` fail (or succeed again).
    pub fn set_pull_failure(&self, image: &str, fail: bool) {
        let mut state = self.lock();
        if fail {
            state.failing_pulls.insert(image.to_string());
        } else {
            state.failing_pulls.remove(image);
        }
    }

    /// Makes `image` present, as if imported; returns its id.
    pub fn add_image(&self, image: &str, size: u64) -> String {
        let mut state = self.lock();
        images::insert(&mut state, image, size)
    }

    /// Where ImageFsInfo says images live.
    pub fn set_image_fs_mountpoint(&self, path: &str) {
        self.lock().image_fs_mountpoint = path.to_string();
    }

    /// The exit code of containers stopped with StopContainer (default 143, SIGTERM).
    pub fn set_stop_exit_code(&self, code: i32) {
        self.lock().stop_exit_code = code;
    }

    /// Every call made so far, as `Method arg…` lines.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// Calls whose line starts with `prefix`.
    pub fn calls_starting(&self, prefix: &str) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.starts_with(prefix))
            .collect()
    }

    /// Ids of running containers named `name`.
    pub fn running(&self, name: &str) -> Vec<String> {
        let state = self.lock();
        let mut ids: Vec<(i64, String)> = state
            .containers
            .iter()
            .filter(|(_, c)| c.name() == name && c.state == api::ContainerState::ContainerRunning)
            .map(|(id, c)| (c.created_at, id.clone()))
            .collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// How many containers (any state) named `name` exist.
    pub fn count(&self, name: &str) -> usize {
        self.lock()
            .containers
            .values()
            .filter(|c| c.name() == name)
            .count()
    }

    /// Wall-clock start times (ns since the epoch) of every container named `name`, in order,
    /// including instances removed since.
    pub fn start_times(&self, name: &str) -> Vec<i64> {
        self.lock()
            .starts
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .collect()
    }

    /// Names of started containers in start order.
    pub fn start_order(&self) -> Vec<String> {
        self.lock().starts.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The config a container was created with.
    pub fn container_config(&self, id: &str) -> Option<api::ContainerConfig> {
        self.lock().containers.get(id).map(|c| c.config.clone())
    }

    /// Number of sandboxes that are ready.
    pub fn ready_sandboxes(&self) -> usize {
        self.lock().sandboxes.values().filter(|s| s.ready).count()
    }

    /// Makes a running container exit now with `code` (a crash from outside).
    pub fn exit_container(&self, id: &str, code: i32) {
        self.finish(id, code, "");
    }

    pub(crate) fn record(&self, call: String) {
        self.lock().calls.push(call);
    }

    pub(crate) fn fresh_id(state: &mut State, prefix: &str) -> String {
        state.next_id += 1;
        format!("{prefix}{:04}", state.next_id)
    }

    /// Marks a running container exited and emits the event.
    pub(crate) fn finish(&self, id: &str, code: i32, reason: &str) {
        let now = self.now_nanos();
        let event = {
            let mut state = self.lock();
            let Some(container) = state.containers.get_mut(id) else {
                return;
            };
            if container.state != api::ContainerState::ContainerRunning {
                return;
            }
            container.state = api::ContainerState::ContainerExited;
            container.finished_at = now;
            container.exit_code = code;
            container.reason = reason.to_string();
            service::event(
                &state,
                id,
                api::ContainerEventType::ContainerStoppedEvent,
                now,
            )
        };
        if let Some(event) = event {
            let _ = self.events.send(event);
        }
    }

    /// Applies the behavior of a container just started.
    pub(crate) fn schedule_exit(&self, id: &str, behavior: Behavior) {
        let Behavior::ExitAfter { after, code } = behavior else {
            return;
        };
        let Some(this) = self.this.upgrade() else {
            return;
        };
        let id = id.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            this.finish(&id, code, "");
        });
    }
}
