//! Persistent runtime state: one JSON record per sandbox and per container under the runtime
//! root, replaced atomically on every change, plus the in-memory index the CRI calls use.
//!
//! Layout: records and writable layers under the root (a disk), what dies with the machine
//! under the state dir (tmpfs on a usual host, as containerd's /run/containerd):
//! - `<root>/sandboxes/<id>/sandbox.json`, `<root>/containers/<id>/{container.json, rootfs,
//!   upper, work}`;
//! - `<state>/sandboxes/<id>/{ns/, hostname, hosts, resolv.conf, shm/, shim files}`,
//!   `<state>/containers/<id>/{bundle/config.json, shim files, exit record}`, `<state>/lc/`.
//!
//! A record dir is made before its run dir and removed after it, so a run dir without a
//! record dir is a leftover of a removal cut short, which recovery clears: one state dir
//! belongs to one root.

use crate::cri::{POD_UID_LABEL, api};
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::ids;
use crate::runtime::network::NetworkAttachment;
use crate::util::atomic_file::{replace_json_atomic, write_json_atomic};
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// Where things live under the runtime root and the state dir.
#[derive(Clone, Debug)]
pub struct Layout {
    pub root: PathBuf,
    pub state: PathBuf,
}

impl Layout {
    pub fn sandboxes(&self) -> PathBuf {
        self.root.join("sandboxes")
    }
    pub fn containers(&self) -> PathBuf {
        self.root.join("containers")
    }
    /// The sandbox's record.
    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.sandboxes().join(id)
    }
    /// The container's record and writable layer.
    pub fn container_dir(&self, id: &str) -> PathBuf {
        self.containers().join(id)
    }
    pub fn sandbox_runs(&self) -> PathBuf {
        self.state.join("sandboxes")
    }
    pub fn container_runs(&self) -> PathBuf {
        self.state.join("containers")
    }
    /// The sandbox's namespace files, /dev/shm, etc files and shim files.
    pub fn sandbox_run_dir(&self, id: &str) -> PathBuf {
        self.sandbox_runs().join(id)
    }
    /// The container's bundle and shim files (the shim's state dir).
    pub fn container_run_dir(&self, id: &str) -> PathBuf {
        self.container_runs().join(id)
    }
    /// libcontainer's own state directory (short: unix socket paths live under it).
    pub fn libcontainer_root(&self) -> PathBuf {
        self.state.join("lc")
    }
    /// Every directory the layout needs, created at start.
    pub fn dirs(&self) -> [PathBuf; 5] {
        [
            self.sandboxes(),
            self.containers(),
            self.sandbox_runs(),
            self.container_runs(),
            self.libcontainer_root(),
        ]
    }
}

/// Deletes `dir` and what it holds; already gone is fine.
pub(crate) fn remove_dir_if_present(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(RuntimeError::io("removing", dir)(e))
        }
        _ => Ok(()),
    }
}

/// Writes a file that only matters while the machine stays up (the pod's hosts file, a bundle's
/// config.json, shim.json): no fsync. Durability comes from the record written afterwards; after
/// a power loss every process is gone and these files are rebuilt. Saves ~10 ms per file here.
pub fn write_volatile(path: &Path, contents: &[u8]) -> Result<()> {
    std::fs::write(path, contents).map_err(RuntimeError::io("writing", path))
}

pub fn write_volatile_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| RuntimeError::Internal(format!("serializing {}: {e}", path.display())))?;
    write_volatile(path, &bytes)
}

/// Messages stored as protobuf bytes (base64) so the CRI config round-trips losslessly.
mod pb {
    use super::*;
    pub fn serialize<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

fn decode<M: prost::Message + Default>(bytes: &[u8], what: &str) -> Result<M> {
    M::decode(bytes).map_err(|e| RuntimeError::Internal(format!("corrupt stored {what}: {e}")))
}

fn pod_uid(labels: &HashMap<String, String>) -> Option<String> {
    labels.get(POD_UID_LABEL).cloned()
}

/// Every selector key/value must be present in the labels.
pub(crate) fn labels_match(
    selector: &HashMap<String, String>,
    labels: &HashMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// What ListContainers shows of a stored ContainerConfig: metadata (field 1), image (2), labels
/// (9) and annotations (10); the rest (mounts, envs, ...) is not decoded for a listing.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerListing {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<api::ContainerMetadata>,
    #[prost(message, optional, tag = "2")]
    pub image: Option<api::ImageSpec>,
    #[prost(map = "string, string", tag = "9")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "10")]
    pub annotations: HashMap<String, String>,
}

/// What ListPodSandbox shows of a stored PodSandboxConfig: metadata (field 1), labels (6) and
/// annotations (7).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxListing {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<api::PodSandboxMetadata>,
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "7")]
    pub annotations: HashMap<String, String>,
}

/// A record's listing, decoded at its first list: configs never change after creation, and
/// decoding every record at every list (the PLEG relists all of them each second, each pod
/// sync selects its own by label) was most of the idle agent's CPU.
#[derive(Clone, Debug, Default)]
pub struct ListingCache<T>(std::sync::OnceLock<T>);

impl<T: prost::Message + Default> ListingCache<T> {
    /// The listing of `config` (empty when it does not decode, which matches no selector).
    fn get(&self, config: &[u8]) -> &T {
        self.0.get_or_init(|| T::decode(config).unwrap_or_default())
    }
}

/// A process the runtime started through a shim.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessRecord {
    pub shim_pid: i32,
    /// /proc/<pid>/stat start time, to tell a live shim from a reused pid after a restart.
    pub shim_start_time: u64,
    pub pid: i32,
    pub pid_start_time: u64,
    pub started_at: i64,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum SandboxState {
    Ready,
    NotReady,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NamespacePaths {
    pub net: Option<PathBuf>,
    pub ipc: Option<PathBuf>,
    pub uts: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    #[serde(with = "pb")]
    pub config: Vec<u8>,
    pub runtime_handler: String,
    pub state: SandboxState,
    pub created_at: i64,
    pub hostname: String,
    pub host_network: bool,
    pub host_ipc: bool,
    pub ip: String,
    /// The pod's other IPs (IPv6 in a dual-stack network).
    #[serde(default)]
    pub additional_ips: Vec<String>,
    /// What the pod's network is, for PodSandboxStatus (fixed at creation).
    #[serde(default = "default_network_info")]
    pub network_info: String,
    /// The CNI attachment still to be deleted: set before ADD, cleared by a successful DEL.
    #[serde(default)]
    pub network: Option<NetworkAttachment>,
    pub namespaces: NamespacePaths,
    pub infra: Option<ProcessRecord>,
    /// The pod cgroup (relative to the cgroup root) when cgroups are writable.
    pub cgroup_parent: Option<PathBuf>,
    pub shm_mounted: bool,
    #[serde(skip)]
    pub listing: ListingCache<SandboxListing>,
}

/// Records written before the CNI network existed describe loopback-only pods.
fn default_network_info() -> String {
    "own network namespace with loopback only".to_string()
}

impl SandboxRecord {
    pub fn config(&self) -> Result<api::PodSandboxConfig> {
        decode(&self.config, "sandbox config")
    }
    /// Whether the config's labels carry every pair of `selector` (an empty one matches
    /// without decoding; otherwise the record's listing is decoded, once).
    pub fn selected_by(&self, selector: &HashMap<String, String>) -> bool {
        selector.is_empty() || labels_match(selector, &self.listing().labels)
    }
    /// Metadata, labels and annotations of the config, decoded once.
    pub fn listing(&self) -> &SandboxListing {
        self.listing.get(&self.config)
    }
    pub fn metadata(&self) -> api::PodSandboxMetadata {
        self.listing().metadata.clone().unwrap_or_default()
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

impl ContainerState {
    pub fn to_cri(self) -> api::ContainerState {
        match self {
            ContainerState::Created => api::ContainerState::ContainerCreated,
            ContainerState::Running => api::ContainerState::ContainerRunning,
            ContainerState::Exited => api::ContainerState::ContainerExited,
            ContainerState::Unknown => api::ContainerState::ContainerUnknown,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct UserRecord {
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub id: String,
    pub sandbox_id: String,
    #[serde(with = "pb")]
    pub config: Vec<u8>,
    /// The image as the user wrote it, and the store's record id.
    pub image: String,
    pub image_id: String,
    pub state: ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub process: Option<ProcessRecord>,
    pub log_path: Option<PathBuf>,
    pub stop_signal: i32,
    pub rootfs: PathBuf,
    pub cgroups_path: Option<PathBuf>,
    pub user: UserRecord,
    /// Resources as last set (create or UpdateContainerResources).
    #[serde(with = "pb")]
    pub resources: Vec<u8>,
    #[serde(skip)]
    pub listing: ListingCache<ContainerListing>,
}

impl ContainerRecord {
    pub fn config(&self) -> Result<api::ContainerConfig> {
        decode(&self.config, "container config")
    }
    /// Whether the config's labels carry every pair of `selector` (an empty one matches
    /// without decoding; otherwise the record's listing is decoded, once).
    pub fn selected_by(&self, selector: &HashMap<String, String>) -> bool {
        selector.is_empty() || labels_match(selector, &self.listing().labels)
    }
    /// Metadata, image, labels and annotations of the config, decoded once.
    pub fn listing(&self) -> &ContainerListing {
        self.listing.get(&self.config)
    }
    /// The config's image spec, naming the image as the user wrote it.
    pub fn image_spec(&self) -> api::ImageSpec {
        let mut image = self.listing().image.clone().unwrap_or_default();
        image.image = self.image.clone();
        image
    }
    pub fn resources(&self) -> Option<api::LinuxContainerResources> {
        if self.resources.is_empty() {
            return None;
        }
        decode(&self.resources, "container resources").ok()
    }
}

/// Locks a std mutex; a poisoned lock still guards consistent data here (records are replaced
/// whole), so poisoning is not a reason to fail.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A record plus the lock serialising lifecycle operations on it.
pub struct Entry<R> {
    record: Mutex<R>,
    path: PathBuf,
    /// Held across a whole operation (start, stop, remove); status reads don't take it.
    pub op: tokio::sync::Mutex<()>,
    /// Bumped whenever the record changes (waiters for an exit watch it).
    changed: tokio::sync::watch::Sender<u64>,
}

impl<R: Clone + Serialize> Entry<R> {
    pub fn new(record: R, path: PathBuf) -> Self {
        Entry {
            record: Mutex::new(record),
            path,
            op: tokio::sync::Mutex::new(()),
            changed: tokio::sync::watch::channel(0).0,
        }
    }

    pub fn snapshot(&self) -> R {
        lock(&self.record).clone()
    }

    /// `f` on the record under its lock: for reads that need a part, not a copy (a sandbox
    /// record carries its CNI result; listing 200 pods by copying them all was the agent's
    /// main idle cost).
    pub fn with<T>(&self, f: impl FnOnce(&R) -> T) -> T {
        f(&lock(&self.record))
    }

    /// Applies `f` and persists the result atomically and durably (fsync); on a write failure
    /// the in-memory record is left unchanged.
    pub fn update<T>(&self, f: impl FnOnce(&mut R) -> T) -> Result<T> {
        self.update_with(f, |path, next| write_json_atomic(path, next))
    }

    /// [`Self::update`] without fsync, atomic against a crash of the runtime but not of the
    /// machine: for changes a power loss makes moot, because the processes and namespaces they
    /// describe die with it (an infra's pid, a sandbox turning Ready, a container Running).
    /// Each fsync pair costs ~5 ms here; a pod start had seven.
    pub fn update_volatile<T>(&self, f: impl FnOnce(&mut R) -> T) -> Result<T> {
        self.update_with(f, |path, next| replace_json_atomic(path, next))
    }

    fn update_with<T>(
        &self,
        f: impl FnOnce(&mut R) -> T,
        write: impl FnOnce(&Path, &R) -> std::io::Result<()>,
    ) -> Result<T> {
        let mut guard = lock(&self.record);
        let mut next = guard.clone();
        let out = f(&mut next);
        write(&self.path, &next).map_err(RuntimeError::io("writing", &self.path))?;
        *guard = next;
        drop(guard);
        self.changed.send_modify(|v| *v += 1);
        Ok(out)
    }

    pub fn persist(&self) -> Result<()> {
        let guard = lock(&self.record);
        write_json_atomic(&self.path, &*guard).map_err(RuntimeError::io("writing", &self.path))
    }

    /// [`Self::persist`] without fsync (see [`Self::update_volatile`]), still atomic.
    pub fn persist_volatile(&self) -> Result<()> {
        let guard = lock(&self.record);
        replace_json_atomic(&self.path, &*guard).map_err(RuntimeError::io("writing", &self.path))
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

pub type SandboxEntry = Entry<SandboxRecord>;
pub type ContainerEntry = Entry<ContainerRecord>;

/// Reserved names: CRI forbids two live sandboxes (or two containers of a pod) with the same
/// metadata name and attempt.
pub fn sandbox_name_key(meta: &api::PodSandboxMetadata) -> String {
    format!(
        "{}_{}_{}_{}",
        meta.name, meta.namespace, meta.uid, meta.attempt
    )
}

pub fn container_name_key(sandbox_id: &str, meta: &api::ContainerMetadata) -> String {
    format!("{}_{}_{}", meta.name, sandbox_id, meta.attempt)
}

/// The in-memory index over the records.
#[derive(Default)]
pub struct Index {
    sandboxes: RwLock<HashMap<String, Arc<SandboxEntry>>>,
    containers: RwLock<HashMap<String, Arc<ContainerEntry>>>,
    names: Mutex<HashMap<String, String>>,
    /// Sandbox and container ids by their [`POD_UID_LABEL`]. The kubelet selects a pod's
    /// records by that label on every sync of the pod; a scan of every record made each sync
    /// O(pods), and a resync of them all O(pods²). Labels never change after create.
    by_pod_uid: Mutex<HashMap<String, HashSet<String>>>,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

impl Index {
    /// Reserves `key` for `id`; AlreadyExists when another id holds it.
    pub fn reserve_name(&self, key: &str, id: &str) -> Result<()> {
        let mut names = lock(&self.names);
        match names.get(key) {
            Some(holder) if holder != id => Err(RuntimeError::AlreadyExists(format!(
                "name {key:?} is reserved for {holder}"
            ))),
            _ => {
                names.insert(key.to_string(), id.to_string());
                Ok(())
            }
        }
    }

    pub fn release_name(&self, key: &str, id: &str) {
        let mut names = lock(&self.names);
        if names.get(key).is_some_and(|holder| holder == id) {
            names.remove(key);
        }
    }

    pub fn insert_sandbox(&self, entry: Arc<SandboxEntry>) {
        let (id, uid) = entry.with(|r| (r.id.clone(), pod_uid(&r.listing().labels)));
        write(&self.sandboxes).insert(id.clone(), entry);
        self.index_pod_uid(uid, id);
    }
    pub fn insert_container(&self, entry: Arc<ContainerEntry>) {
        let (id, uid) = entry.with(|r| (r.id.clone(), pod_uid(&r.listing().labels)));
        write(&self.containers).insert(id.clone(), entry);
        self.index_pod_uid(uid, id);
    }
    pub fn remove_sandbox(&self, id: &str) {
        let removed = write(&self.sandboxes).remove(id);
        let uid = removed.and_then(|e| e.with(|r| pod_uid(&r.listing().labels)));
        self.unindex_pod_uid(uid, id);
    }
    pub fn remove_container(&self, id: &str) {
        let removed = write(&self.containers).remove(id);
        let uid = removed.and_then(|e| e.with(|r| pod_uid(&r.listing().labels)));
        self.unindex_pod_uid(uid, id);
    }

    fn index_pod_uid(&self, uid: Option<String>, id: String) {
        if let Some(uid) = uid {
            lock(&self.by_pod_uid).entry(uid).or_default().insert(id);
        }
    }
    fn unindex_pod_uid(&self, uid: Option<String>, id: &str) {
        let Some(uid) = uid else { return };
        let mut by_uid = lock(&self.by_pod_uid);
        if let Some(ids) = by_uid.get_mut(&uid) {
            ids.remove(id);
            if ids.is_empty() {
                by_uid.remove(&uid);
            }
        }
    }

    /// The ids a label selector can match, when it names a pod UID; None: any record can.
    fn candidates(&self, selector: &HashMap<String, String>) -> Option<HashSet<String>> {
        let uid = selector.get(POD_UID_LABEL)?;
        Some(lock(&self.by_pod_uid).get(uid).cloned().unwrap_or_default())
    }

    /// The sandboxes `selector` can match: every one, or only those of the pod it names.
    /// Callers still apply the whole selector.
    pub fn sandboxes_for(&self, selector: &HashMap<String, String>) -> Vec<Arc<SandboxEntry>> {
        match self.candidates(selector) {
            None => self.sandboxes(),
            Some(ids) => {
                let map = read(&self.sandboxes);
                ids.iter().filter_map(|id| map.get(id).cloned()).collect()
            }
        }
    }
    /// The containers `selector` can match, as [`Self::sandboxes_for`].
    pub fn containers_for(&self, selector: &HashMap<String, String>) -> Vec<Arc<ContainerEntry>> {
        match self.candidates(selector) {
            None => self.containers(),
            Some(ids) => {
                let map = read(&self.containers);
                ids.iter().filter_map(|id| map.get(id).cloned()).collect()
            }
        }
    }

    /// Looks up a sandbox by id or unique id prefix.
    pub fn sandbox(&self, id: &str) -> Result<Arc<SandboxEntry>> {
        let map = read(&self.sandboxes);
        let full = ids::resolve_prefix("pod sandbox", id, map.keys())?;
        map.get(&full)
            .cloned()
            .ok_or_else(|| RuntimeError::not_found("pod sandbox", id))
    }
    pub fn container(&self, id: &str) -> Result<Arc<ContainerEntry>> {
        let map = read(&self.containers);
        let full = ids::resolve_prefix("container", id, map.keys())?;
        map.get(&full)
            .cloned()
            .ok_or_else(|| RuntimeError::not_found("container", id))
    }
    pub fn sandboxes(&self) -> Vec<Arc<SandboxEntry>> {
        read(&self.sandboxes).values().cloned().collect()
    }
    pub fn containers(&self) -> Vec<Arc<ContainerEntry>> {
        read(&self.containers).values().cloned().collect()
    }
    /// Snapshots of the sandboxes whose id starts with `id_prefix` (empty: all).
    pub fn sandbox_records(&self, id_prefix: &str) -> Vec<SandboxRecord> {
        self.sandboxes()
            .iter()
            .filter(|e| e.with(|r| r.id.starts_with(id_prefix)))
            .map(|e| e.snapshot())
            .collect()
    }

    /// Snapshots of the containers matching id and sandbox id prefixes (empty: any).
    pub fn container_records(&self, id_prefix: &str, sandbox_prefix: &str) -> Vec<ContainerRecord> {
        self.containers()
            .iter()
            .filter(|e| {
                e.with(|r| r.id.starts_with(id_prefix) && r.sandbox_id.starts_with(sandbox_prefix))
            })
            .map(|e| e.snapshot())
            .collect()
    }

    pub fn containers_of(&self, sandbox_id: &str) -> Vec<Arc<ContainerEntry>> {
        self.containers()
            .into_iter()
            .filter(|c| c.with(|r| r.sandbox_id == sandbox_id))
            .collect()
    }
}

/// A `<dir>/<id>/` whose record could not be loaded.
#[derive(Debug)]
pub struct BadRecord {
    pub id: String,
    pub path: PathBuf,
    /// No record at all: the operation that made the directory died before writing it.
    pub missing: bool,
    pub message: String,
}

/// Records read from disk (with their paths) and the ones that could not be.
pub type Loaded<R> = (Vec<(PathBuf, R)>, Vec<BadRecord>);

/// Reads every `<dir>/<id>/<file>` record; unreadable ones are reported, not fatal.
pub fn load_records<R: serde::de::DeserializeOwned>(dir: &Path, file: &str) -> Result<Loaded<R>> {
    let mut records = Vec::new();
    let mut problems = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((records, problems)),
        Err(e) => return Err(RuntimeError::io("reading", dir)(e)),
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !ids::is_valid_id(&name) {
            continue;
        }
        let path = entry.path().join(file);
        let bad = |missing, message: String| BadRecord {
            id: name.clone(),
            path: path.clone(),
            missing,
            message,
        };
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<R>(&bytes) {
                Ok(r) => records.push((path, r)),
                Err(e) => problems.push(bad(false, e.to_string())),
            },
            Err(e) => problems.push(bad(e.kind() == std::io::ErrorKind::NotFound, e.to_string())),
        }
    }
    Ok((records, problems))
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
