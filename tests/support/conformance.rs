//! The CRI conformance tests (tests/cri_conformance_*.rs): one `runp serve` per test binary,
//! driven through its unix socket by the project's tonic client, with the cases of a binary
//! run concurrently against it (as critest runs its specs against one runtime). Each case is a
//! named future; all run to the end and every failure is reported with its case name.
#![allow(dead_code)]

use crate::serve::*;
use crate::support::*;
use futures::FutureExt;
use futures::future::BoxFuture;
use runp::cri::client::RemoteRuntime;
use runp::cri::{RuntimeService, api};
use std::path::PathBuf;
use std::time::Duration;

/// `runp serve` on a fresh root with both fixture images. Dropped in field order: the server
/// first, then the leak guard, then the directory.
pub struct Suite {
    pub served: Served,
    guard: LeakGuard,
    pub dir: tempfile::TempDir,
}

/// One named case of a binary.
pub type Case<'a> = (&'static str, BoxFuture<'a, ()>);

impl Suite {
    /// The server, or None (after printing SKIP) without root of some kind.
    pub async fn start(test: &str) -> Option<Suite> {
        Self::start_with(test, &["--network", "loopback"]).await
    }

    /// Like [`Suite::start`], `runp serve` getting these arguments (network, registry, ...)
    /// instead of `--network loopback`.
    pub async fn start_with(test: &str, args: &[&str]) -> Option<Suite> {
        if !is_root() {
            skip(test, "root (real or mapped)");
            return None;
        }
        let (dir, guard) = test_dir();
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rootfs-fixtures/build");
        runp::image::ImageStore::open(dir.path().join("root/images"))
            .unwrap()
            .import(&fixtures.join("busybox-extra-oci"))
            .unwrap();
        let served = Served::start_with(dir.path(), 1, args).await;
        Some(Suite { served, guard, dir })
    }

    pub fn rt(&self) -> &RemoteRuntime {
        &self.served.rt
    }

    pub fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    /// Runs every case concurrently; panics naming each failed case (with the server's log).
    /// Then removes every pod and checks nothing of them remains.
    pub async fn run(&self, cases: Vec<Case<'_>>) {
        let names: Vec<&str> = cases.iter().map(|c| c.0).collect();
        let results = futures::future::join_all(cases.into_iter().map(|(name, case)| {
            std::panic::AssertUnwindSafe(case)
                .catch_unwind()
                .map(move |r| (name, r))
        }))
        .await;
        let failed: Vec<String> = results
            .into_iter()
            .filter_map(|(name, r)| {
                let err = r.err()?;
                let msg = err
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Some(format!("{name}: {msg}"))
            })
            .collect();
        if !failed.is_empty() {
            panic!(
                "{} of {} cases failed:\n{}\n--- runp serve log (tail) ---\n{}",
                failed.len(),
                names.len(),
                failed.join("\n"),
                tail(&self.served.log_text(), 60)
            );
        }
        for name in names {
            eprintln!("ok: {name}");
        }
        remove_everything_and_check(&self.served, self.dir.path()).await;
    }

    /// Runs a pod sandbox from `config` (see [`Suite::pod_config`]).
    pub async fn pod(&self, config: api::PodSandboxConfig) -> (String, api::PodSandboxConfig) {
        let id = self
            .rt()
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("run pod sandbox {:?}: {e}", config.metadata))
            .pod_sandbox_id;
        (id, config)
    }

    pub fn pod_config(&self, name: &str) -> api::PodSandboxConfig {
        pod_config(name, &self.logs())
    }

    pub async fn create(
        &self,
        pod: &(String, api::PodSandboxConfig),
        config: api::ContainerConfig,
    ) -> Result<String, tonic::Status> {
        create_container_in(self.rt(), pod, config).await
    }

    /// PodSandboxStatus of `id` (not verbose).
    pub async fn pod_status(&self, id: &str) -> api::PodSandboxStatus {
        self.rt()
            .pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: false,
            })
            .await
            .expect("pod sandbox status")
            .status
            .expect("a pod status")
    }

    /// Create + start; panics naming the container on failure.
    pub async fn run_container(
        &self,
        pod: &(String, api::PodSandboxConfig),
        config: api::ContainerConfig,
    ) -> String {
        let name = config.metadata.clone().unwrap_or_default().name;
        let id = self
            .create(pod, config)
            .await
            .unwrap_or_else(|e| panic!("create container {name}: {e}"));
        self.rt()
            .start_container(api::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("start container {name}: {e}"));
        id
    }

    /// ImageStatus of `name` (None: not present).
    pub async fn image(&self, name: &str) -> Option<api::Image> {
        use runp::cri::ImageService;
        self.rt()
            .image_status(api::ImageStatusRequest {
                image: Some(api::ImageSpec {
                    image: name.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .unwrap_or_else(|e| panic!("image status {name}: {e}"))
            .image
    }

    /// ListImages without a filter.
    pub async fn images(&self) -> Vec<api::Image> {
        use runp::cri::ImageService;
        self.rt()
            .list_images(api::ListImagesRequest { filter: None })
            .await
            .expect("list images")
            .images
    }

    /// RemoveImage, which must succeed.
    pub async fn remove_image(&self, name: &str) {
        use runp::cri::ImageService;
        self.rt()
            .remove_image(api::RemoveImageRequest {
                image: Some(api::ImageSpec {
                    image: name.to_string(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap_or_else(|e| panic!("remove image {name}: {e}"));
    }

    pub async fn status(&self, id: &str) -> api::ContainerStatus {
        status_of(self.rt(), id)
            .await
            .unwrap_or_else(|e| panic!("container status {id}: {e}"))
    }

    /// Polls until the container exited (hang guard: 30 s).
    pub async fn wait_exit(&self, id: &str) -> api::ContainerStatus {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.status(id).await;
            if s.state == api::ContainerState::ContainerExited as i32 {
                return s;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "container {id} did not exit: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn exec(&self, id: &str, cmd: &[&str]) -> api::ExecSyncResponse {
        self.rt()
            .exec_sync(api::ExecSyncRequest {
                container_id: id.to_string(),
                cmd: cmd.iter().map(|s| s.to_string()).collect(),
                timeout: 20,
            })
            .await
            .unwrap_or_else(|e| panic!("exec {cmd:?} in {id}: {e}"))
    }

    /// The stdout of a successful `sh -c script` in the container, trimmed.
    pub async fn sh(&self, id: &str, script: &str) -> String {
        let r = self.exec(id, &["/bin/sh", "-c", script]).await;
        assert_eq!(
            r.exit_code,
            0,
            "{script:?} failed: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        String::from_utf8_lossy(&r.stdout).trim().to_string()
    }

    /// The log of a container that runs `script` once and exits 0 (trimmed stdout + stderr).
    pub async fn output_of(
        &self,
        pod: &(String, api::PodSandboxConfig),
        config: api::ContainerConfig,
    ) -> String {
        let name = config.metadata.clone().unwrap_or_default().name;
        let log = PathBuf::from(&pod.1.log_directory).join(&config.log_path);
        let id = self.run_container(pod, config).await;
        let status = self.wait_exit(&id).await;
        let lines: Vec<String> = parse_cri_log(&std::fs::read_to_string(&log).unwrap_or_default())
            .into_iter()
            .map(|l| l.2)
            .collect();
        assert_eq!(status.exit_code, 0, "{name} failed: {lines:?}");
        lines.join("\n")
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A busybox container running `sh -c script` with `adjust` applied to its config.
pub fn container(
    name: &str,
    script: &str,
    adjust: impl FnOnce(&mut api::ContainerConfig),
) -> api::ContainerConfig {
    let mut config = shell(name, script);
    adjust(&mut config);
    config
}

/// The container's Linux security context, created on first use.
pub fn security(config: &mut api::ContainerConfig) -> &mut api::LinuxContainerSecurityContext {
    config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
}

/// The pod's Linux security context, created on first use.
pub fn pod_security(config: &mut api::PodSandboxConfig) -> &mut api::LinuxSandboxSecurityContext {
    config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
}

/// Now in ns since the epoch (to bound the CRI's ns timestamps).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// A label (or annotation) map from pairs.
pub fn labels(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
