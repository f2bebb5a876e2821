//! Test support for the sync loop: an agent on the fake runtime with paused tokio time.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use runp::cri::{ImageService, RuntimeService, api};
use runp::kubelet::clock::{Clock, FakeClock};
use runp::kubelet::config::AgentConfig;
use runp::kubelet::environment::{ContainerMounts, PodConfigEnvironment, PodEnvironment};
use runp::kubelet::fake::FakeRuntime;
use runp::kubelet::gc::images::ImageGcPolicy;
use runp::kubelet::podconfig::VolumeManager;
use runp::kubelet::podconfig::{ObjectSource, PodEvent};
use runp::kubelet::status::manager::{read_status_file, status_file_name};
use runp::kubelet::{Agent, AgentHandle, AgentParts};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// No ConfigMaps or Secrets.
pub struct NoObjects;

impl ObjectSource for NoObjects {
    fn config_map(&self, _namespace: &str, _name: &str) -> Option<ConfigMap> {
        None
    }
    fn secret(&self, _namespace: &str, _name: &str) -> Option<Secret> {
        None
    }
}

/// Pods without volumes; records set-ups and teardowns.
#[derive(Default)]
pub struct RecordingEnvironment {
    pub calls: Mutex<Vec<String>>,
}

impl PodEnvironment for RecordingEnvironment {
    fn setup_volumes(
        &self,
        pod: &Pod,
        _objects: &dyn ObjectSource,
    ) -> Result<ContainerMounts, String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.calls.lock().unwrap().push(format!("setup {uid}"));
        Ok(ContainerMounts::new())
    }
    fn teardown_volumes(&self, pod_uid: &str) -> Result<(), String> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("teardown {pod_uid}"));
        Ok(())
    }
    fn pull_auth(
        &self,
        _pod: &Pod,
        _image: &str,
        _objects: &dyn ObjectSource,
    ) -> Option<api::AuthConfig> {
        None
    }
}

/// Pod events the agent recorded, with the name of their pod.
#[derive(Default)]
pub struct RecordedEvents(pub Mutex<Vec<(String, PodEventRecord)>>);

pub use runp::kubelet::events::PodEvent as PodEventRecord;

impl runp::kubelet::events::PodEventSink for RecordedEvents {
    fn record(&self, pod: &Pod, event: PodEventRecord) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.0.lock().unwrap().push((name, event));
    }
}

impl RecordedEvents {
    /// The events with `reason`, as (note, fieldPath).
    pub fn with_reason(&self, reason: &str) -> Vec<(String, Option<String>)> {
        self.all()
            .into_iter()
            .filter(|e| e.reason == reason)
            .map(|e| (e.note, e.field_path))
            .collect()
    }

    pub fn reasons(&self) -> Vec<String> {
        self.all().into_iter().map(|e| e.reason).collect()
    }

    pub fn all(&self) -> Vec<PodEventRecord> {
        self.0.lock().unwrap().iter().map(|e| e.1.clone()).collect()
    }
}

/// A running agent.
pub struct RunningAgent {
    pub events: mpsc::Sender<PodEvent>,
    pub handle: AgentHandle,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningAgent {
    /// Stops the agent (pods keep running in the runtime).
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// A temporary root, a fake runtime and its clock; agents are started on them.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub config: AgentConfig,
    pub runtime: Arc<FakeRuntime>,
    pub clock: Arc<FakeClock>,
    pub environment: Arc<RecordingEnvironment>,
    /// Use podconfig's real volume manager instead of the recording double.
    pub real_volumes: bool,
    /// What the agent records as pod events.
    pub pod_events: Arc<RecordedEvents>,
}

impl Harness {
    /// Call inside a `#[tokio::test(start_paused = true)]`.
    pub fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let config = AgentConfig::with_root(dir.path());
        let clock = Arc::new(FakeClock::new());
        let runtime = FakeRuntime::new(clock.clone() as Arc<dyn Clock>);
        runtime.add_image("busybox:1.36", 4 << 20);
        Harness {
            dir,
            config,
            runtime,
            clock,
            environment: Arc::new(RecordingEnvironment::default()),
            real_volumes: false,
            pod_events: Arc::default(),
        }
    }

    pub fn start(&self) -> RunningAgent {
        let (events_tx, events_rx) = mpsc::channel(64);
        let agent = Agent::new(AgentParts {
            runtime: self.runtime.clone() as Arc<dyn RuntimeService>,
            images: self.runtime.clone() as Arc<dyn ImageService>,
            config: self.config.clone(),
            events: events_rx,
            objects: Arc::new(NoObjects),
            environment: if self.real_volumes {
                Arc::new(PodConfigEnvironment::new(
                    VolumeManager::new(self.config.clone()),
                    self.config.clone(),
                ))
            } else {
                self.environment.clone()
            },
            clock: self.clock.clone(),
            image_gc: ImageGcPolicy::default(),
            metrics: Default::default(),
        })
        .with_pod_event_sink(self.pod_events.clone());
        let handle = agent.handle();
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            agent
                .run(async {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
        });
        RunningAgent {
            events: events_tx,
            handle,
            stop: Some(stop_tx),
            task,
        }
    }

    /// The pod as its status file shows it.
    pub fn status(&self, name: &str) -> Option<Pod> {
        read_status_file(
            &self
                .config
                .status_dir
                .join(status_file_name("default", name)),
        )
        .ok()
    }

    pub fn phase(&self, name: &str) -> Option<String> {
        self.status(name)?.status?.phase
    }

    /// (state summary, restartCount) of container `container` in the status file.
    pub fn container(&self, pod: &str, container: &str) -> Option<(String, i32)> {
        let status = self.status(pod)?.status?;
        let all = status
            .container_statuses
            .into_iter()
            .flatten()
            .chain(status.init_container_statuses.into_iter().flatten());
        let found = all.into_iter().find(|c| c.name == container)?;
        let state = found.state?;
        let summary = if state.running.is_some() {
            "running".to_string()
        } else if let Some(t) = state.terminated {
            format!("terminated:{}", t.exit_code)
        } else {
            format!("waiting:{}", state.waiting?.reason.unwrap_or_default())
        };
        Some((summary, found.restart_count))
    }

    pub fn condition(&self, pod: &str, type_: &str) -> Option<String> {
        self.status(pod)?
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status)
    }
}

/// Parses a pod from YAML and gives it a uid.
pub fn pod(yaml: &str, uid: &str) -> Pod {
    let mut pod: Pod = serde_yaml_ng::from_str(yaml).unwrap();
    pod.metadata.uid = Some(uid.to_string());
    pod.metadata
        .namespace
        .get_or_insert_with(|| "default".to_string());
    pod
}

pub async fn apply(agent: &RunningAgent, pod: Pod) {
    agent
        .events
        .send(PodEvent::Upsert(Box::new(pod)))
        .await
        .unwrap();
}

pub async fn remove(agent: &RunningAgent, uid: &str) {
    agent
        .events
        .send(PodEvent::Remove {
            uid: uid.to_string(),
        })
        .await
        .unwrap();
}

/// Waits (virtual time) until `check` holds; panics with `what` after `limit` of virtual time.
pub async fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out (virtual {limit:?}) waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lets virtual time pass.
pub async fn pass(duration: Duration) {
    tokio::time::sleep(duration).await;
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
