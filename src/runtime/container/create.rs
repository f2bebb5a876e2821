//! CreateContainer: resolve the image, prepare the rootfs (a lease held while the container
//! exists), write the OCI bundle from the pure conversion, persist the record.

use crate::cri::api;
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::ids::new_id;
use crate::runtime::monitor::container_event;
use crate::runtime::spec::{self, EtcFiles, PodFiles, PodNamespaces, SpecInputs};
use crate::runtime::state::{
    ContainerEntry, ContainerRecord, ContainerState, SandboxRecord, SandboxState, UserRecord,
    container_name_key, write_volatile_json,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Reads a small file of the rootfs without following a symlink out of it.
fn read_rootfs_file(rootfs: &Path, rel: &str) -> Option<String> {
    let path = rootfs.join(rel);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > 4 << 20 {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// containerd creates missing host paths of bind mounts as directories.
fn ensure_host_paths(mounts: &[api::Mount]) -> Result<()> {
    for m in mounts {
        let host = Path::new(&m.host_path);
        if !host.is_absolute() {
            continue; // rejected with a clear error by the conversion
        }
        match std::fs::symlink_metadata(host) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(host)
                    .map_err(RuntimeError::io("creating mount source", host))?;
            }
            Err(e) => return Err(RuntimeError::io("checking mount source", host)(e)),
        }
    }
    Ok(())
}

/// LogPath = the sandbox's log_directory joined with the container's log_path. Both come from
/// the client: the directory must be absolute, the path relative, neither with `..` or NUL, so
/// the log lands inside the directory the client named.
fn log_path(
    sandbox: &api::PodSandboxConfig,
    config: &api::ContainerConfig,
) -> Result<Option<PathBuf>> {
    if config.log_path.is_empty() || sandbox.log_directory.is_empty() {
        return Ok(None);
    }
    let has_dotdot = |p: &Path| {
        p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    };
    let dir = Path::new(&sandbox.log_directory);
    if !dir.is_absolute() || has_dotdot(dir) || sandbox.log_directory.contains('\0') {
        return Err(RuntimeError::invalid(format!(
            "the sandbox's log_directory {:?} must be an absolute path without '..' or NUL",
            sandbox.log_directory
        )));
    }
    let rel = Path::new(&config.log_path);
    if rel.is_absolute() || has_dotdot(rel) || config.log_path.contains('\0') {
        return Err(RuntimeError::invalid(format!(
            "log_path {:?} must be relative to the sandbox log directory without '..' or NUL",
            config.log_path
        )));
    }
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(RuntimeError::io("creating log directory", parent))?;
    }
    Ok(Some(path))
}

impl ProcessRuntime {
    pub(crate) async fn create_container_impl(
        &self,
        req: api::CreateContainerRequest,
    ) -> Result<String> {
        let sandbox_entry = self.shared.index.sandbox(&req.pod_sandbox_id)?;
        let sandbox = sandbox_entry.snapshot();
        if sandbox.state != SandboxState::Ready {
            return Err(RuntimeError::FailedPrecondition(format!(
                "pod sandbox {} is not ready",
                sandbox.id
            )));
        }
        let config = req
            .config
            .ok_or_else(|| RuntimeError::invalid("CreateContainer without a config"))?;
        let meta = config
            .metadata
            .clone()
            .ok_or_else(|| RuntimeError::invalid("container config without metadata"))?;
        if meta.name.is_empty() {
            return Err(RuntimeError::invalid("container metadata needs a name"));
        }
        let image_ref = config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .filter(|i| !i.is_empty())
            .ok_or_else(|| RuntimeError::invalid("container config without an image"))?;
        let id = new_id();
        let name_key = container_name_key(&sandbox.id, &meta);
        self.shared.index.reserve_name(&name_key, &id)?;
        let dir = self.shared.layout.container_dir(&id);
        let result = self
            .create_container_in(&id, &dir, &sandbox, config, image_ref)
            .await;
        match result {
            Ok(entry) => {
                let record = entry.snapshot();
                self.shared.index.insert_container(entry);
                self.shared.events.publish(container_event(
                    &record,
                    api::ContainerEventType::ContainerCreatedEvent,
                    &self.shared,
                ));
                Ok(id)
            }
            Err((e, image_id)) => {
                self.shared.index.release_name(&name_key, &id);
                if let Some(image_id) = image_id {
                    let (images, holder, d) = (self.images.clone(), id.clone(), dir.clone());
                    let _ = tokio::task::spawn_blocking(move || {
                        images.release_rootfs(&image_id, &holder, &d)
                    })
                    .await;
                }
                let _ = std::fs::remove_dir_all(self.shared.layout.container_run_dir(&id));
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// On failure also returns the image id whose rootfs lease must be released.
    async fn create_container_in(
        &self,
        id: &str,
        dir: &Path,
        sandbox: &SandboxRecord,
        config: api::ContainerConfig,
        image_ref: String,
    ) -> std::result::Result<Arc<ContainerEntry>, (RuntimeError, Option<String>)> {
        let fail = |e: RuntimeError| (e, None);
        // The record dir first: a run dir never outlives it (see the state layout).
        let run_dir = self.shared.layout.container_run_dir(id);
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::create_dir_all(run_dir.join("bundle")))
            .map_err(|e| fail(RuntimeError::io("creating", &run_dir)(e)))?;
        let images = self.images.clone();
        let lookup = image_ref.clone();
        let image = tokio::task::spawn_blocking(move || images.resolve(&lookup))
            .await
            .map_err(|e| fail(RuntimeError::Internal(format!("image lookup task: {e}"))))?
            .map_err(|e| fail(e.into()))?;
        let (images, image_id, holder, cdir) = (
            self.images.clone(),
            image.id.clone(),
            id.to_string(),
            dir.to_path_buf(),
        );
        let prepared =
            tokio::task::spawn_blocking(move || images.prepare_rootfs(&image_id, &holder, &cdir))
                .await
                .map_err(|e| fail(RuntimeError::Internal(format!("rootfs task: {e}"))))?;
        let with_lease = |e: RuntimeError| (e, Some(image.id.clone()));
        let rootfs = prepared.map_err(|e| with_lease(e.into()))?.path;
        self.write_bundle(
            id, dir, &run_dir, sandbox, config, &image, image_ref, rootfs,
        )
        .map_err(with_lease)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_bundle(
        &self,
        id: &str,
        dir: &Path,
        run_dir: &Path,
        sandbox: &SandboxRecord,
        config: api::ContainerConfig,
        image: &crate::image::ImageRecord,
        image_ref: String,
        rootfs: PathBuf,
    ) -> Result<Arc<ContainerEntry>> {
        let sandbox_config = sandbox.config()?;
        let image_config = image.config.config().clone();
        let etc = EtcFiles {
            passwd: read_rootfs_file(&rootfs, "etc/passwd"),
            group: read_rootfs_file(&rootfs, "etc/group"),
        };
        ensure_host_paths(&config.mounts)?;
        let log_path = log_path(&sandbox_config, &config)?;
        let sandbox_dir = self.shared.layout.sandbox_run_dir(&sandbox.id);
        let pod_files = PodFiles {
            hostname: sandbox_dir.join("hostname"),
            hosts: sandbox_dir.join("hosts"),
            resolv_conf: sandbox_dir.join("resolv.conf"),
            shm: sandbox.shm_mounted.then(|| sandbox_dir.join("shm")),
        };
        let pid_to_join = match spec::pid_mode(&config) {
            api::NamespaceMode::Pod => sandbox
                .infra
                .map(|p| PathBuf::from(format!("/proc/{}/ns/pid", p.pid))),
            api::NamespaceMode::Target => Some(self.target_pid_ns(&config)?),
            _ => None,
        };
        let namespaces = PodNamespaces {
            net: sandbox.namespaces.net.clone(),
            ipc: sandbox.namespaces.ipc.clone(),
            uts: sandbox.namespaces.uts.clone(),
            pid_to_join,
        };
        let cgroups_path = sandbox.cgroup_parent.as_ref().map(|p| p.join(id));
        let security = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref());
        spec::security::check_apparmor(security)?;
        let localhost_seccomp = match spec::seccomp::seccomp_choice(security)? {
            spec::seccomp::SeccompChoice::Localhost(path) => {
                Some(std::fs::read_to_string(&path).map_err(|e| {
                    RuntimeError::invalid(format!("seccomp profile {}: {e}", path.display()))
                })?)
            }
            _ => None,
        };
        let built = spec::build_spec(&SpecInputs {
            config: &config,
            sandbox: &sandbox_config,
            image: image_config.as_ref(),
            rootfs: &rootfs,
            etc: &etc,
            hostname: &sandbox.hostname,
            pod_files: &pod_files,
            namespaces: &namespaces,
            cgroups_path: cgroups_path.clone(),
            devices_filtered: self.cgroups.filters_devices(),
            rootless: self.rootless,
            max_nofile: self.max_nofile,
            ids: &self.ids,
            localhost_seccomp: localhost_seccomp.as_deref(),
            cgroup_mounts: &crate::runtime::cgroups::host_cgroup_mounts(),
            runp_exe: Some(&self.runp_exe),
        })?;
        self.log_warnings(id, &built.warnings);
        super::targets::make_bind_targets(
            &rootfs,
            built.spec.mounts().as_deref().unwrap_or_default(),
        );
        let stop_signal = spec::stop_signal(image_config.as_ref())?;
        let bundle_config = run_dir.join("bundle").join("config.json");
        write_volatile_json(&bundle_config, &built.spec)?;
        let resources = config
            .linux
            .as_ref()
            .and_then(|l| l.resources.as_ref())
            .map(prost::Message::encode_to_vec)
            .unwrap_or_default();
        let record = ContainerRecord {
            id: id.to_string(),
            sandbox_id: sandbox.id.clone(),
            config: prost::Message::encode_to_vec(&config),
            image: image_ref,
            image_id: image.id.clone(),
            state: ContainerState::Created,
            created_at: self.now(),
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            process: None,
            log_path,
            stop_signal,
            rootfs,
            cgroups_path,
            user: UserRecord {
                uid: built.user.uid,
                gid: built.user.gid,
                additional_gids: built.user.additional_gids,
            },
            resources,
            listing: Default::default(),
        };
        let entry = Arc::new(ContainerEntry::new(record, dir.join("container.json")));
        entry.persist()?;
        Ok(entry)
    }

    /// `pid: TARGET` joins another running container's pid namespace.
    fn target_pid_ns(&self, config: &api::ContainerConfig) -> Result<PathBuf> {
        let target = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .map(|n| n.target_id.clone())
            .unwrap_or_default();
        let record = self.shared.index.container(&target)?.snapshot();
        match (record.state, record.process) {
            (ContainerState::Running, Some(p)) => {
                Ok(PathBuf::from(format!("/proc/{}/ns/pid", p.pid)))
            }
            _ => Err(RuntimeError::FailedPrecondition(format!(
                "target container {target} is not running"
            ))),
        }
    }

    /// Host-wide notices (rootless, no cgroups) are logged once; the rest per container.
    fn log_warnings(&self, id: &str, warnings: &[String]) {
        for w in warnings {
            if w.contains("(rootless)") || w.contains("(cgroups unavailable)") {
                self.notice_once(w);
            } else {
                tracing::warn!(container = %id, "{w}");
            }
        }
    }
}
