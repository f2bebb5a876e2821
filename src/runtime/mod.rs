//! The CRI `RuntimeService` implemented over sandboxed processes.
//!
//! Pods are an infra shim holding the pod's namespaces; containers are OCI bundles run by a
//! per-container shim (both from the jail layer). Every record is persisted under the runtime
//! root, so a new `ProcessRuntime` on the same root re-adopts what is still running.

pub mod cgroups;
pub mod clock;
mod container;
pub mod error;
pub mod events;
mod exec;
pub mod ids;
mod monitor;
pub mod network;
pub mod reaper;
mod recovery;
mod sandbox;
mod service;
mod shim;
pub mod spec;
pub mod state;
mod stats;
mod streaming;

pub use error::RuntimeError;
pub use reaper::Reaper;

use crate::image::ImageStore;
use cgroups::Cgroups;
use clock::Clock;
use events::Events;
use state::{Index, Layout};
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How to build a [`ProcessRuntime`].
pub struct RuntimeOptions {
    /// State root (`<runp root>/runtime`): records and writable layers.
    pub root: PathBuf,
    /// What dies with the machine (bundles, shim files, pod files, namespace mounts): best on
    /// tmpfs, where creating a file costs a fraction of a disk's. Default `<root>/run`.
    pub state: PathBuf,
    /// The runp binary, re-executed for shims and exec helpers.
    pub runp_exe: PathBuf,
    pub image_store: ImageStore,
    /// The process's one reaper.
    pub reaper: Reaper,
    pub clock: Arc<dyn Clock>,
    /// The IP reported for host-network pods; detected when None.
    pub node_ip: Option<String>,
    /// cgroup capabilities; detected when None.
    pub cgroups: Option<Cgroups>,
    /// Hang guard for a shim's start report.
    pub shim_start_timeout: Duration,
    /// The pod network (CNI bridge, or loopback only).
    pub network: network::NetworkOptions,
    /// pids.max of every pod cgroup (kubelet's podPidsLimit); None: unlimited.
    pub pod_max_pids: Option<i64>,
    /// A container's live log that reaches this size is not written further until it is
    /// rotated (ReopenContainerLog): the container's output blocks instead of filling the
    /// disk faster than a periodic rotation can keep up with. None: no limit (kubelet's).
    pub container_log_max_live_size: Option<u64>,
}

impl RuntimeOptions {
    pub fn new(
        root: impl Into<PathBuf>,
        runp_exe: impl Into<PathBuf>,
        image_store: ImageStore,
        reaper: Reaper,
    ) -> Self {
        let root: PathBuf = root.into();
        RuntimeOptions {
            state: root.join("run"),
            root,
            runp_exe: runp_exe.into(),
            image_store,
            reaper,
            clock: clock::system(),
            node_ip: None,
            cgroups: None,
            shim_start_timeout: Duration::from_secs(60),
            network: network::NetworkOptions::default(),
            pod_max_pids: None,
            container_log_max_live_size: None,
        }
    }
}

/// What the background watchers share with the operations (no back-reference to the runtime,
/// so dropping the runtime stops them).
pub(crate) struct Shared {
    pub layout: Layout,
    pub index: Index,
    pub events: Events,
    pub clock: Arc<dyn Clock>,
    /// pidfds of running container processes: signals go through them (no pid-reuse kills).
    pub pidfds: Mutex<HashMap<String, Arc<OwnedFd>>>,
    /// Sandboxes and containers whose records were unreadable at start: not listed, but
    /// RemovePodSandbox/RemoveContainer of their ids clears what they left.
    pub broken: Mutex<HashSet<String>>,
}

/// The CRI runtime. Dropping it stops its watchers; the pods keep running.
pub struct ProcessRuntime {
    shared: Arc<Shared>,
    runp_exe: PathBuf,
    images: ImageStore,
    reaper: Reaper,
    cgroups: Cgroups,
    node_ip: String,
    rootless: bool,
    /// The runtime's own RLIMIT_NOFILE hard limit: containers get at most this.
    max_nofile: u64,
    /// Which uids/gids containers may use (all on the host; few as mapped root).
    ids: spec::IdMapping,
    shim_start_timeout: Duration,
    container_log_max_live_size: Option<u64>,
    /// Forks the shims (see jail::Zygote); `None` until the first one, and after it died.
    zygote: Mutex<Option<Arc<crate::jail::Zygote>>>,
    network: network::Network,
    /// Host-wide notices already logged (each once).
    notices: Mutex<std::collections::HashSet<String>>,
    /// Dropped with the runtime: every watcher waits on it.
    shutdown: tokio::sync::watch::Sender<()>,
}

impl ProcessRuntime {
    /// Opens (or creates) the state root and re-adopts what a previous runtime left running.
    pub async fn start(opts: RuntimeOptions) -> Result<Arc<ProcessRuntime>, RuntimeError> {
        let layout = Layout {
            root: opts.root.clone(),
            state: opts.state.clone(),
        };
        // Container specs carry their env (secrets among it): the state is root's alone.
        for private in [&layout.root, &layout.state] {
            crate::util::private_dir::ensure_private_dir(private, 0o700)
                .map_err(RuntimeError::io("creating", private))?;
        }
        for dir in layout.dirs() {
            std::fs::create_dir_all(&dir).map_err(RuntimeError::io("creating", &dir))?;
        }
        let rootless = is_rootless();
        let cgroups = opts
            .cgroups
            .unwrap_or_else(|| Cgroups::detect(rootless))
            .with_pod_max_pids(opts.pod_max_pids);
        if let (Some(max), Some(reason)) = (opts.pod_max_pids, cgroups.unavailable_reason()) {
            tracing::warn!(
                max,
                reason,
                "the pod pids limit cannot be enforced: no usable cgroups"
            );
        }
        match cgroups.unavailable_reason() {
            None => tracing::info!(
                setup = cgroups.setup_name(),
                "cgroups available: limits and stats from cgroups"
            ),
            Some(reason) => tracing::info!(
                %reason,
                "cgroups unavailable (rootless): cpu/memory/pids limits are not enforced; stats come from /proc"
            ),
        }
        let network =
            network::Network::start(opts.network, rootless, &opts.root, opts.reaper.clone())
                .await?;
        let max_nofile = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map(|(_, hard)| hard)
            .unwrap_or(spec::security::DEFAULT_NOFILE);
        if max_nofile < spec::security::DEFAULT_NOFILE {
            tracing::info!(
                limit = max_nofile,
                "containers get RLIMIT_NOFILE {max_nofile} (this process's hard limit) instead of {}: raising it needs CAP_SYS_RESOURCE",
                spec::security::DEFAULT_NOFILE
            );
        }
        let node_ip = opts.node_ip.clone().unwrap_or_else(detect_node_ip);
        let runtime = Arc::new(ProcessRuntime {
            shared: Arc::new(Shared {
                layout,
                index: Index::default(),
                events: Events::default(),
                clock: opts.clock.clone(),
                pidfds: Mutex::new(HashMap::new()),
                broken: Mutex::new(HashSet::new()),
            }),
            runp_exe: opts.runp_exe,
            images: opts.image_store,
            reaper: opts.reaper,
            cgroups,
            node_ip,
            rootless,
            max_nofile,
            ids: read_id_mapping(),
            shim_start_timeout: opts.shim_start_timeout,
            container_log_max_live_size: opts.container_log_max_live_size,
            zygote: Mutex::new(None),
            network,
            notices: Mutex::new(Default::default()),
            shutdown: tokio::sync::watch::channel(()).0,
        });
        runtime.recover().await?;
        Ok(runtime)
    }

    /// Logs a host-wide notice (a rootless limitation) the first time only.
    fn notice_once(&self, notice: &str) {
        if state::lock(&self.notices).insert(notice.to_string()) {
            tracing::info!("{notice}");
        }
    }

    fn now(&self) -> i64 {
        self.shared.clock.now_ns()
    }
}

/// Real root: euid 0 with the identity uid map. Anything else gets the rootless OCI spec.
fn is_rootless() -> bool {
    let identity = std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| {
            let fields: Vec<&str> = m.split_whitespace().collect();
            fields == ["0", "0", "4294967295"]
        })
        .unwrap_or(false);
    !(nix::unistd::geteuid().is_root() && identity)
}

fn read_id_mapping() -> spec::IdMapping {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/self/{f}")).unwrap_or_default();
    spec::IdMapping::parse(&read("uid_map"), &read("gid_map"), &read("setgroups"))
}

/// The address of the interface holding the default route (a UDP connect sends nothing).
fn detect_node_ip() -> String {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".to_string())
}
