//! Per-pod volumes under `AgentConfig::pod_dir(uid)/volumes/<plugin>/<name>` (plugin names as the
//! kubelet's, e.g. `kubernetes.io~configmap`), and the CRI mounts of each container.
//!
//! - hostPath: the host path itself, after the type check.
//! - emptyDir: a directory; medium Memory is a tmpfs (sizeLimit as its size) when mounting is
//!   permitted, else a directory and a warning.
//! - configMap, secret, downwardAPI, projected: files written with the atomic writer, refreshed
//!   by every [`VolumeManager::setup`]; secret and projected volumes live on a tmpfs when
//!   possible so secrets stay off disk.

pub mod atomic_writer;
mod host_path;
mod mounts;
pub mod payload;
pub mod subpath;
pub mod termination;
pub mod tmpfs;

use super::spec::env::{EnvContext, EnvList, container_env};
use super::spec::fieldpath::{FieldError, NodeResources, PodRuntimeInfo};
use super::spec::quantity::Quantity;
use super::{ObjectSource, pod_identity};
use crate::cri::api;
use crate::kubelet::config::AgentConfig;
use k8s_openapi::api::core::v1::{Container, Pod, Volume};
pub use mounts::MountHook;
use payload::{PayloadContext, volume_payload};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
pub use termination::{termination_log_mount, termination_log_path};

pub const PLUGIN_EMPTY_DIR: &str = "kubernetes.io~empty-dir";
pub const PLUGIN_CONFIG_MAP: &str = "kubernetes.io~configmap";
pub const PLUGIN_SECRET: &str = "kubernetes.io~secret";
pub const PLUGIN_DOWNWARD_API: &str = "kubernetes.io~downward-api";
/// Below the pod dir: the pinned subPath mounts (`<volume>/<container>/<index>`), as kubelet.
pub const SUBPATHS_DIR: &str = "volume-subpaths";
pub const PLUGIN_PROJECTED: &str = "kubernetes.io~projected";
const PLUGINS: [&str; 5] = [
    PLUGIN_EMPTY_DIR,
    PLUGIN_CONFIG_MAP,
    PLUGIN_SECRET,
    PLUGIN_DOWNWARD_API,
    PLUGIN_PROJECTED,
];

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("volume {volume}: {kind} {namespace}/{name} not found")]
    MissingObject {
        volume: String,
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("volume {volume}: {kind} {name} has no key {key:?}")]
    MissingKey {
        volume: String,
        kind: &'static str,
        name: String,
        key: String,
    },
    #[error("volume {volume}: hostPath type check failed: {} is {found}, expected {expected}", path.display())]
    HostPathType {
        volume: String,
        path: PathBuf,
        expected: &'static str,
        found: &'static str,
    },
    #[error(
        "volume {volume}: no serviceAccountToken issued for service account {service_account} (tokens come from the API server's TokenRequest)"
    )]
    NoToken {
        volume: String,
        service_account: String,
    },
    #[error("volume {volume}: {what} is not supported")]
    Unsupported { volume: String, what: &'static str },
    #[error("volume {volume}: {reason}")]
    Invalid { volume: String, reason: String },
    #[error("volume {volume}: {source}")]
    Field { volume: String, source: FieldError },
    #[error("container {container}: volumeMount {volume:?} does not name a volume of the pod")]
    UnknownVolume { container: String, volume: String },
    #[error("container {container}: subPath {sub_path:?} of volume {volume}: {source}")]
    SubPath {
        container: String,
        volume: String,
        sub_path: String,
        source: subpath::SubPathError,
    },
    #[error("container {container}: {reason}")]
    Mount { container: String, reason: String },
    #[error("pod: {0}")]
    Pod(String),
    #[error("cannot unmount {}: {source}", path.display())]
    Unmount { path: PathBuf, source: nix::Error },
}

/// A volume ready to be mounted.
#[derive(Clone, Debug)]
struct ReadyVolume {
    host_path: PathBuf,
    /// API data volumes are always mounted read-only (as the kubelet does since 1.9.4).
    read_only: bool,
}

/// Sets up and tears down the volumes of pods.
#[derive(Clone)]
pub struct VolumeManager {
    config: AgentConfig,
    hooks: Vec<Arc<dyn MountHook>>,
    /// The node's capacity, read once: every sync of every pod refreshes its volumes, and
    /// reading it each time (cgroup CPU quota files, /proc/meminfo, statvfs) was 14 % of the
    /// idle agent's CPU. kubelet, too, reads the machine's capacity at start.
    node: std::sync::OnceLock<NodeResources>,
}

/// The volumes of one pod, as set up; gives each container its mounts.
pub struct PodVolumes {
    pod: Pod,
    volumes: BTreeMap<String, ReadyVolume>,
    /// Per container, for `subPathExpr` (`Err`: why its environment could not be built).
    envs: BTreeMap<String, Result<EnvList, String>>,
    storage_dir: Option<PathBuf>,
    /// `<pod dir>/volume-subpaths`: where subPath mounts are pinned.
    subpaths_dir: PathBuf,
    hooks: Vec<Arc<dyn MountHook>>,
}

impl VolumeManager {
    pub fn new(config: AgentConfig) -> Self {
        VolumeManager {
            config,
            hooks: Vec::new(),
            node: std::sync::OnceLock::new(),
        }
    }

    /// Adds a hook that may rewrite the mounts of every container (plugins).
    pub fn with_hook(mut self, hook: Arc<dyn MountHook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// `<pod dir>/volumes`
    pub fn volumes_dir(&self, pod_uid: &str) -> PathBuf {
        self.config.pod_dir(pod_uid).join("volumes")
    }

    /// Creates or refreshes every volume of `pod` (idempotent: unchanged data is not rewritten).
    /// All volumes are attempted; the first failure is returned.
    pub fn setup(&self, pod: &Pod, objects: &dyn ObjectSource) -> Result<PodVolumes, VolumeError> {
        let (namespace, _, uid) = pod_identity(pod).map_err(|e| VolumeError::Pod(e.to_string()))?;
        let volumes_dir = self.volumes_dir(uid);
        let node = self
            .node
            .get_or_init(|| NodeResources::detect(&self.config.root_dir));
        let ctx = PayloadContext {
            pod,
            namespace,
            objects,
            node,
        };
        let fs_group = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.fs_group)
            .and_then(|g| u32::try_from(g).ok());
        let spec_volumes = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or(&[]);
        let mut ready = BTreeMap::new();
        let mut first_error = None;
        for volume in spec_volumes {
            match self.setup_volume(&ctx, &volumes_dir, volume, fs_group) {
                Ok(v) => {
                    ready.insert(volume.name.clone(), v);
                }
                Err(e) => {
                    tracing::warn!(pod = uid, volume = %volume.name, "volume setup failed: {e}");
                    first_error.get_or_insert(e);
                }
            }
        }
        remove_stale_volumes(&volumes_dir, spec_volumes);
        if let Some(storage) = &self.config.storage_dir {
            create_dir(storage, 0o755)?;
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(PodVolumes {
            pod: pod.clone(),
            volumes: ready,
            envs: self.sub_path_envs(pod, objects, node),
            storage_dir: self.config.storage_dir.clone(),
            subpaths_dir: self.config.pod_dir(uid).join(SUBPATHS_DIR),
            hooks: self.hooks.clone(),
        })
    }

    /// Environments of the containers that use `subPathExpr`.
    fn sub_path_envs(
        &self,
        pod: &Pod,
        objects: &dyn ObjectSource,
        node: &NodeResources,
    ) -> BTreeMap<String, Result<EnvList, String>> {
        let Some(spec) = pod.spec.as_ref() else {
            return BTreeMap::new();
        };
        let host_ip = self.config.node_ip.to_string();
        let status_ips = pod.status.as_ref().and_then(|s| s.pod_ips.as_ref());
        let mut pod_ips: Vec<String> = status_ips
            .into_iter()
            .flatten()
            .map(|ip| ip.ip.clone())
            .collect();
        if pod_ips.is_empty() && spec.host_network.unwrap_or(false) {
            pod_ips.push(host_ip.clone());
        }
        let info = PodRuntimeInfo {
            node_name: self.config.node_name.clone(),
            host_ips: vec![host_ip],
            pod_ips,
        };
        let containers = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten());
        let uses_expr = |c: &&Container| {
            let mounts = c.volume_mounts.iter().flatten();
            mounts
                .into_iter()
                .any(|m| m.sub_path_expr.as_deref().is_some_and(|e| !e.is_empty()))
        };
        containers
            .filter(uses_expr)
            .map(|container| {
                let ctx = EnvContext {
                    pod,
                    container,
                    objects,
                    info: &info,
                    node,
                };
                (
                    container.name.clone(),
                    container_env(&ctx).map_err(|e| e.to_string()),
                )
            })
            .collect()
    }

    fn setup_volume(
        &self,
        ctx: &PayloadContext<'_>,
        volumes_dir: &Path,
        volume: &Volume,
        fs_group: Option<u32>,
    ) -> Result<ReadyVolume, VolumeError> {
        let name = volume.name.as_str();
        if let Some(host) = &volume.host_path {
            host_path::prepare_host_path(
                name,
                Path::new(&host.path),
                host.type_.as_deref().unwrap_or(""),
            )?;
            return Ok(ReadyVolume {
                host_path: PathBuf::from(&host.path),
                read_only: false,
            });
        }
        if let Some(empty) = &volume.empty_dir {
            let dir = volumes_dir.join(PLUGIN_EMPTY_DIR).join(name);
            let created = !dir.exists();
            create_dir(&dir, 0o777)?;
            if empty.medium.as_deref() == Some("Memory") {
                let size = Quantity::parse_opt(empty.size_limit.as_ref())
                    .map_err(|e| VolumeError::Invalid {
                        volume: name.to_string(),
                        reason: e.to_string(),
                    })?
                    .value();
                if let Err(e) = tmpfs::mount_tmpfs(&dir, u64::try_from(size).ok())
                    && created
                {
                    tracing::warn!(volume = name, dir = %dir.display(),
                        "cannot mount a tmpfs for emptyDir medium Memory ({e}); using a plain directory on disk");
                }
            } else if empty.medium.as_deref().is_some_and(|m| !m.is_empty()) {
                return Err(VolumeError::Unsupported {
                    volume: name.to_string(),
                    what: "this emptyDir medium",
                });
            }
            if let (Some(gid), true) = (fs_group, created) {
                apply_fs_group(&dir, gid, false);
            }
            return Ok(ReadyVolume {
                host_path: dir,
                read_only: false,
            });
        }
        let plugin = if volume.config_map.is_some() {
            PLUGIN_CONFIG_MAP
        } else if volume.secret.is_some() {
            PLUGIN_SECRET
        } else if volume.downward_api.is_some() {
            PLUGIN_DOWNWARD_API
        } else if volume.projected.is_some() {
            PLUGIN_PROJECTED
        } else {
            return Err(VolumeError::Unsupported {
                volume: name.to_string(),
                what: "this volume type (supported: hostPath, emptyDir, configMap, secret, downwardAPI, projected)",
            });
        };
        let Some(payload) = volume_payload(ctx, volume) else {
            return Err(VolumeError::Unsupported {
                volume: name.to_string(),
                what: "this volume type",
            });
        };
        let mut payload = payload?;
        let dir = volumes_dir.join(plugin).join(name);
        let created = !dir.exists();
        create_dir(&dir, 0o755)?;
        if created && (plugin == PLUGIN_SECRET || plugin == PLUGIN_PROJECTED) {
            if let Err(e) = tmpfs::mount_tmpfs(&dir, None) {
                tracing::info!(
                    volume = name,
                    "cannot mount a tmpfs for a secret volume ({e}); its files are stored on disk"
                );
            }
            // The tmpfs root has mode 0777; the data dir itself need not be writable.
            set_mode(&dir, 0o755)?;
        }
        if let Some(gid) = fs_group {
            // Group-readable, so the group can read what it owns (kubelet's read-only mask).
            for file in payload.values_mut() {
                file.mode |= 0o440;
            }
            let set_perms = move |version: &Path| {
                apply_fs_group(version, gid, true);
                Ok(())
            };
            atomic_writer::write_atomically(&dir, &payload, &set_perms)?;
        } else {
            atomic_writer::write_atomically(&dir, &payload, &|_| Ok(()))?;
        }
        Ok(ReadyVolume {
            host_path: dir,
            read_only: true,
        })
    }

    /// Unmounts and removes every volume directory of the pod (hostPath volumes are never
    /// touched), then the pod directory if nothing else is left in it. Idempotent.
    pub fn teardown(&self, pod_uid: &str) -> Result<(), VolumeError> {
        let pod_dir = self.config.pod_dir(pod_uid);
        let volumes_dir = pod_dir.join("volumes");
        // Never remove through a mount: whatever is mounted below goes first. The subPath pins
        // first of all: one may show a hostPath's data.
        let subpaths_dir = pod_dir.join(SUBPATHS_DIR);
        tmpfs::unmount_all_under(&subpaths_dir)
            .map_err(|(path, source)| VolumeError::Unmount { path, source })?;
        crate::kubelet::cleanup::remove_dir_same_fs(&subpaths_dir).map_err(|source| {
            VolumeError::Io {
                path: subpaths_dir.clone(),
                source,
            }
        })?;
        tmpfs::unmount_all_under(&volumes_dir)
            .map_err(|(path, source)| VolumeError::Unmount { path, source })?;
        match fs::remove_dir_all(&volumes_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(VolumeError::Io {
                    path: volumes_dir,
                    source,
                });
            }
        }
        // Only if empty: the sync loop keeps its own files there.
        let _ = fs::remove_dir(&pod_dir);
        Ok(())
    }
}

/// Removes volume directories of volumes the pod no longer has.
fn remove_stale_volumes(volumes_dir: &Path, volumes: &[Volume]) {
    let current: BTreeSet<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
    for plugin in PLUGINS {
        let Ok(entries) = fs::read_dir(volumes_dir.join(plugin)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if current.contains(name.to_string_lossy().as_ref()) {
                continue;
            }
            let path = entry.path();
            let removed = tmpfs::unmount_all_under(&path)
                .map_err(|(p, e)| format!("cannot unmount {}: {e}", p.display()))
                .and_then(|()| fs::remove_dir_all(&path).map_err(|e| e.to_string()));
            match removed {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "removed volume no longer in the pod spec")
                }
                Err(e) => tracing::warn!(path = %path.display(), "cannot remove stale volume: {e}"),
            }
        }
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), VolumeError> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Creates `dir` (and parents) and gives it `mode` when it is new.
fn create_dir(dir: &Path, mode: u32) -> Result<(), VolumeError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|source| VolumeError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    set_mode(dir, mode)
}

/// Gives the tree at `root` to group `gid` (setgid directories, group access), as the kubelet's
/// `SetVolumeOwnership`; failures (e.g. an unmapped gid when rootless) are logged, not fatal.
fn apply_fs_group(root: &Path, gid: u32, read_only: bool) {
    let (file_bits, dir_bits) = if read_only {
        (0o440, 0o2550)
    } else {
        (0o660, 0o2770)
    };
    for entry in walkdir::WalkDir::new(root).follow_links(false) {
        let Ok(entry) = entry else { continue };
        if entry.path_is_symlink() {
            continue;
        }
        let path = entry.path();
        if let Err(e) = std::os::unix::fs::lchown(path, None, Some(gid)) {
            tracing::warn!(path = %path.display(), "cannot apply fsGroup {gid}: {e}");
            return;
        }
        let bits = if entry.file_type().is_dir() {
            dir_bits
        } else {
            file_bits
        };
        if let Ok(meta) = entry.metadata() {
            let mode = (meta.permissions().mode() & 0o7777) | bits;
            let _ = fs::set_permissions(path, fs::Permissions::from_mode(mode));
        }
    }
}

impl PodVolumes {
    /// The host directory (or hostPath) of a volume.
    pub fn host_path(&self, volume: &str) -> Option<&Path> {
        self.volumes.get(volume).map(|v| v.host_path.as_path())
    }

    /// The CRI mounts of `container`: its volumeMounts (subPath resolved safely; `subPathExpr`
    /// expanded with the environment computed at setup), then the shared storage dir.
    pub fn mounts_for(&self, container: &Container) -> Result<Vec<api::Mount>, VolumeError> {
        let env = match self.envs.get(&container.name) {
            Some(Ok(env)) => Some(env),
            Some(Err(reason)) => {
                return Err(VolumeError::Mount {
                    container: container.name.clone(),
                    reason: format!("cannot expand subPathExpr: {reason}"),
                });
            }
            None => None,
        };
        self.build_mounts(container, env)
    }

    /// As [`mounts_for`](Self::mounts_for), with `subPathExpr` expanded against `env` (the
    /// environment the container is started with).
    pub fn mounts_with_env(
        &self,
        container: &Container,
        env: &EnvList,
    ) -> Result<Vec<api::Mount>, VolumeError> {
        self.build_mounts(container, Some(env))
    }
}
