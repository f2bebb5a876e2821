//! The agent as `runp agent --runtime=process` wires it (manifest directory source, real volume
//! manager, system clock) over the real ProcessRuntime and image store, on a fresh root with the
//! busybox fixture images. Real time: the waits are hang guards only.
#![allow(dead_code)]

#[path = "runtime.rs"]
pub mod runtime;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use runp::cri::{ImageService, RuntimeService, api};
use runp::image::ImageStore;
use runp::kubelet::clock::SystemClock;
use runp::kubelet::config::AgentConfig;
use runp::kubelet::environment::PodConfigEnvironment;
use runp::kubelet::gc::images::ImageGcPolicy;
use runp::kubelet::labels;
use runp::kubelet::podconfig::VolumeManager;
use runp::kubelet::source::manifest::{ManifestSource, SourceOptions};
use runp::kubelet::status::manager::{read_status_file, status_file_name};
use runp::kubelet::{Agent, AgentParts};
use runp::runtime::ProcessRuntime;
use runtime::{LeakGuard, is_root, skip};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Hang guard of every wait (real time; a passing wait takes a few seconds at most).
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// A root with a process runtime and a manifest directory; agents are started on it.
pub struct AgentEnv {
    /// Declared first: dropped before `dir`, so a failed test leaves no process or mount behind.
    pub guard: LeakGuard,
    pub dir: tempfile::TempDir,
    pub manifests: PathBuf,
    pub config: AgentConfig,
    pub images: ImageStore,
    pub rt: Arc<ProcessRuntime>,
}

/// A running agent; pods keep running when it stops.
pub struct RunningAgent {
    source: Option<ManifestSource>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningAgent {
    /// Problems the manifest source reports (refused files, ignored fields).
    pub fn problems(&self) -> Vec<String> {
        self.source
            .iter()
            .flat_map(|s| s.problems())
            .map(|p| format!("{}: {}", p.file.display(), p.message))
            .collect()
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
        drop(self.source.take());
    }
}

impl AgentEnv {
    /// A fresh root, or None (after printing SKIP) where the process runtime cannot work.
    pub async fn for_test(test: &str) -> Option<AgentEnv> {
        AgentEnv::for_test_with(test, |_| {}).await
    }

    /// As [`AgentEnv::for_test`], with runtime options that `adjust` changed.
    pub async fn for_test_with(
        test: &str,
        adjust: impl FnOnce(&mut runp::runtime::RuntimeOptions),
    ) -> Option<AgentEnv> {
        if !is_root() {
            skip(
                test,
                "root (real, or mapped root in a user namespace) for the process runtime",
            );
            return None;
        }
        // Warnings of the agent and runtime show in a failed test's output (RUST_LOG for more).
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
        let env = runtime::Env::with(adjust).await;
        let runtime::Env {
            guard,
            dir,
            images,
            rt,
        } = env;
        let manifests = dir.path().join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        let mut config = AgentConfig::with_root(dir.path());
        // Fast restarts: the first back-off is 1 s, doubling to 2 s.
        config.timings.backoff_initial = Duration::from_secs(1);
        config.timings.backoff_max = Duration::from_secs(2);
        config.timings.housekeeping = Duration::from_secs(1);
        config.timings.status_sync = Duration::from_secs(1);
        Some(AgentEnv {
            guard,
            dir,
            manifests,
            config,
            images,
            rt,
        })
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a manifest file (atomically, as an editor or config tool would).
    pub fn write(&self, file: &str, yaml: &str) {
        let tmp = self.manifests.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, self.manifests.join(file)).unwrap();
    }

    pub fn remove(&self, file: &str) {
        std::fs::remove_file(self.manifests.join(file)).unwrap();
    }

    /// Starts an agent as `runp agent --runtime=process` does.
    pub fn start(&self) -> RunningAgent {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let (source, objects) = ManifestSource::spawn_with(
            self.manifests.clone(),
            tx,
            SourceOptions::from_config(&self.config),
        )
        .expect("watch the manifest directory");
        let agent = Agent::new(AgentParts {
            runtime: self.rt.clone() as Arc<dyn RuntimeService>,
            images: Arc::new(self.images.clone()) as Arc<dyn ImageService>,
            config: self.config.clone(),
            events: rx,
            objects,
            environment: Arc::new(PodConfigEnvironment::new(
                VolumeManager::new(self.config.clone()),
                self.config.clone(),
            )),
            clock: Arc::new(SystemClock),
            image_gc: ImageGcPolicy::default(),
            metrics: Default::default(),
        });
        let (stop_tx, stop_rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            agent
                .run(async {
                    let _ = stop_rx.await;
                })
                .await
                .expect("agent run");
        });
        RunningAgent {
            source: Some(source),
            stop: Some(stop_tx),
            task,
        }
    }

    /// The pod (default namespace) as its status file shows it.
    pub fn pod(&self, name: &str) -> Option<Pod> {
        read_status_file(
            &self
                .config
                .status_dir
                .join(status_file_name("default", name)),
        )
        .ok()
    }

    pub fn uid(&self, name: &str) -> String {
        self.pod(name)
            .and_then(|p| p.metadata.uid)
            .expect("pod has a status file with a uid")
    }

    pub fn phase(&self, name: &str) -> Option<String> {
        self.pod(name)?.status?.phase
    }

    pub fn condition(&self, pod: &str, type_: &str) -> Option<String> {
        self.pod(pod)?
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status)
    }

    /// Status of container (or init container) `container` of `pod`.
    pub fn container(&self, pod: &str, container: &str) -> Option<ContainerStatus> {
        let status = self.pod(pod)?.status?;
        status
            .container_statuses
            .into_iter()
            .flatten()
            .chain(status.init_container_statuses.into_iter().flatten())
            .find(|c| c.name == container)
    }

    /// "running", "terminated:<code>" or "waiting:<reason>".
    pub fn state(&self, pod: &str, container: &str) -> Option<String> {
        let state = self.container(pod, container)?.state?;
        Some(if state.running.is_some() {
            "running".to_string()
        } else if let Some(t) = state.terminated {
            format!("terminated:{}", t.exit_code)
        } else {
            format!("waiting:{}", state.waiting?.reason.unwrap_or_default())
        })
    }

    /// Every runtime container of `pod` named `container`, oldest first.
    pub async fn instances(&self, pod: &str, container: &str) -> Vec<api::Container> {
        let mut found = self
            .rt
            .list_containers(api::ListContainersRequest {
                filter: Some(api::ContainerFilter {
                    label_selector: HashMap::from([
                        (labels::POD_NAME.to_string(), pod.to_string()),
                        (labels::CONTAINER_NAME.to_string(), container.to_string()),
                    ]),
                    ..Default::default()
                }),
            })
            .await
            .expect("list containers")
            .containers;
        found.sort_by_key(|c| c.created_at);
        found
    }

    /// The running instance of `container` in `pod`.
    pub async fn running_id(&self, pod: &str, container: &str) -> String {
        self.instances(pod, container)
            .await
            .into_iter()
            .rfind(|c| c.state == api::ContainerState::ContainerRunning as i32)
            .unwrap_or_else(|| panic!("{pod}/{container} is not running"))
            .id
    }

    pub async fn container_status(&self, id: &str) -> api::ContainerStatus {
        self.rt
            .container_status(api::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            })
            .await
            .expect("container status")
            .status
            .expect("status present")
    }

    /// ExecSync in the running `container` of `pod`: (exit code, stdout, stderr).
    pub async fn exec(&self, pod: &str, container: &str, cmd: &[&str]) -> (i32, String, String) {
        let id = self.running_id(pod, container).await;
        let out = self
            .rt
            .exec_sync(api::ExecSyncRequest {
                container_id: id,
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                timeout: 20,
            })
            .await
            .expect("exec sync");
        (
            out.exit_code,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// stdout of a command that must succeed.
    pub async fn output(&self, pod: &str, container: &str, cmd: &[&str]) -> String {
        let (code, stdout, stderr) = self.exec(pod, container, cmd).await;
        assert_eq!(code, 0, "{cmd:?} in {pod}/{container}: {stderr}");
        stdout
    }

    /// The sandboxes the runtime has for pod `name` (any state).
    pub async fn sandboxes(&self, name: &str) -> Vec<api::PodSandbox> {
        self.rt
            .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
            .await
            .expect("list sandboxes")
            .items
            .into_iter()
            .filter(|s| s.metadata.as_ref().is_some_and(|m| m.name == name))
            .collect()
    }

    /// Waits until pod `name` is Running with every container ready.
    pub async fn wait_ready(&self, agent: &RunningAgent, name: &str) {
        let started = Instant::now();
        while !(self.phase(name).as_deref() == Some("Running")
            && self.condition(name, "Ready").as_deref() == Some("True"))
        {
            if started.elapsed() > HANG_GUARD {
                let status = self.pod(name).and_then(|p| p.status);
                let problems = agent.problems();
                panic!(
                    "hang guard: pod {name} Running and Ready; manifest problems: {problems:#?}; status: {status:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Removes every pod through the runtime (tests end with no process left behind).
    pub async fn cleanup(&self) {
        runtime::remove_all_pods(self.rt.as_ref()).await;
    }
}

/// Polls `check` (sync) every 100 ms; panics after [`HANG_GUARD`].
pub async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < HANG_GUARD, "hang guard: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Like [`wait_for`] with an async check.
pub async fn wait_for_async<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < HANG_GUARD, "hang guard: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
