//! Agent configuration shared by the sync loop and the pod-to-CRI conversion. Defaults follow the
//! provider being rewritten (see the timing constants in the README).

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Static configuration of one agent.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AgentConfig {
    /// Node name (`spec.nodeName` of pods without one).
    pub node_name: String,
    /// Host IP (`status.hostIP`; pod IP of hostNetwork pods).
    pub node_ip: IpAddr,
    /// Root of pod data: `<root_dir>/var/pods/<uid>/{volumes,containers/<name>}`.
    pub root_dir: PathBuf,
    /// Container stdout logs: `<pod_logs_dir>/<ns>_<pod>_<uid>/<container>/<restart>.log`
    /// (kubelet's podLogsDir).
    pub pod_logs_dir: PathBuf,
    /// Where pod status files are written (`<status_dir>/<ns>_<name>.yaml`).
    pub status_dir: PathBuf,
    /// Shared storage dir bind-mounted into every container at the same path (`<root>/var/storage`).
    pub storage_dir: Option<PathBuf>,
    /// Cluster DNS servers for dnsPolicy ClusterFirst.
    pub cluster_dns: Vec<IpAddr>,
    /// Cluster domain (e.g. `cluster.local`).
    pub cluster_domain: String,
    /// Host resolv.conf used for dnsPolicy Default (and ClusterFirst without cluster DNS).
    pub resolv_conf: PathBuf,
    /// Name (`namespace/name`) of a dockerconfigjson/dockercfg secret used for every pull.
    pub registry_auth_secret: Option<String>,
    /// Fallback registry credentials (`user:password`) when no secret matches.
    pub registry_credentials: Option<String>,
    /// Container log rotation: maximum size of the live log file in bytes.
    pub container_log_max_size: u64,
    /// Container log rotation: files kept per container, the live one included.
    pub container_log_max_files: usize,
    /// Loop timings.
    pub timings: Timings,
}

impl AgentConfig {
    /// Where an in-process runtime stops writing a container's live log until it is rotated:
    /// the whole per-container budget (size × files), so a flood faster than the periodic
    /// rotation waits for it instead of filling the disk. None when rotation is off.
    pub fn container_log_max_live_size(&self) -> Option<u64> {
        (self.container_log_max_size > 0).then(|| {
            self.container_log_max_size
                .saturating_mul(self.container_log_max_files.max(1) as u64)
        })
    }

    /// A configuration rooted at `root` with the reference defaults.
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        AgentConfig {
            node_name: "runp-node".to_string(),
            node_ip: IpAddr::from([127, 0, 0, 1]),
            root_dir: root.clone(),
            pod_logs_dir: root.join("var/log/pods"),
            status_dir: root.join("var/status"),
            storage_dir: Some(root.join("var/storage")),
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".to_string(),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            registry_auth_secret: None,
            registry_credentials: None,
            container_log_max_size: 512 * 1024 * 1024,
            container_log_max_files: 5,
            timings: Timings::default(),
        }
    }

    /// Where the agent records its `pod_logs_dir` (`<root>/var/pod-logs-dir`).
    pub fn pod_logs_dir_record(&self) -> PathBuf {
        self.root_dir.join("var/pod-logs-dir")
    }

    /// The configuration of the agent that ran on this root, as far as the files under the
    /// root tell: its `pod_logs_dir`, when it recorded one.
    pub fn recorded(root: impl Into<PathBuf>) -> Self {
        let mut config = AgentConfig::with_root(root);
        if let Ok(dir) = std::fs::read_to_string(config.pod_logs_dir_record()) {
            config.pod_logs_dir = PathBuf::from(dir);
        }
        config
    }

    /// `<root>/var/pods/<uid>`
    pub fn pod_dir(&self, pod_uid: &str) -> PathBuf {
        self.root_dir.join("var/pods").join(pod_uid)
    }
}

/// Periods and limits of the sync loop (reference values in `Default`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Timings {
    /// First container restart / image pull back-off.
    pub backoff_initial: Duration,
    /// Back-off cap.
    pub backoff_max: Duration,
    /// PLEG relist period while the runtime's event stream is not followed.
    pub pleg_relist: Duration,
    /// PLEG relist period while it is (a safety net behind the events; kubelet's Evented PLEG
    /// relists every 300 s, this stays below the 3 min health threshold).
    pub pleg_relist_evented: Duration,
    /// PLEG is unhealthy when no relist completed for this long.
    pub pleg_unhealthy_after: Duration,
    /// Pod worker resync period.
    pub resync: Duration,
    /// Housekeeping period (orphans, removed pods).
    pub housekeeping: Duration,
    /// Status sync period.
    pub status_sync: Duration,
    /// Container GC period.
    pub container_gc: Duration,
    /// Minimum age of a dead container before GC may remove it.
    pub container_gc_min_age: Duration,
    /// Dead containers kept per (pod, container name).
    pub container_gc_max_per_container: usize,
    /// Log rotation check period.
    pub log_rotation: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            backoff_initial: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            pleg_relist: Duration::from_secs(1),
            pleg_relist_evented: Duration::from_secs(60),
            pleg_unhealthy_after: Duration::from_secs(180),
            // kubelet's syncFrequency: PLEG events, probe results and object changes sync a pod
            // at once, so the periodic resync is only a safety net.
            resync: Duration::from_secs(60),
            housekeeping: Duration::from_secs(5),
            status_sync: Duration::from_secs(10),
            container_gc: Duration::from_secs(60),
            container_gc_min_age: Duration::from_secs(60),
            container_gc_max_per_container: 1,
            log_rotation: Duration::from_secs(10),
        }
    }
}
