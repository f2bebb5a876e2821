//! Starting the in-process runtime (`--runtime=process`) and serving it over the CRI socket.

use super::{GlobalOpts, RegistryArgs};
use anyhow::Context;
use runp::cri::endpoint::CriEndpoint;
use runp::cri::streaming::{StreamingServer, WithStreaming};
use runp::cri::{ImageService, RuntimeService};
use runp::image::ImageStore;
use runp::runtime::network::{NetworkMode, NetworkOptions};
use runp::runtime::{ProcessRuntime, Reaper, RuntimeOptions};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// The pod network options of `runp serve` and `runp agent --runtime=process`.
#[derive(clap::Args, Clone, Debug)]
pub struct NetworkArgs {
    /// Pod network: `bridge` (a bridge made in process over netlink, no plugin execs: IPv4
    /// only, the portmap plugin only for pods with hostPorts; fail if unusable), `cni` (the
    /// same bridge through the CNI plugins; fail if unusable), `loopback` (each pod gets lo
    /// only and IP 127.0.0.1), or `auto` (bridge as real root with CAP_NET_ADMIN, cni when a
    /// pod CIDR is IPv6; else loopback, saying why).
    #[arg(long, value_enum, default_value_t = NetworkKind::Auto)]
    pub network: NetworkKind,
    /// Directory of the CNI plugin binaries (repeatable; searched in order). Default:
    /// /opt/cni/bin, then /usr/lib/cni (Debian's containernetworking-plugins).
    #[arg(long)]
    pub cni_bin_dir: Vec<PathBuf>,
    /// CIDR pod IPs are allocated from (repeatable: one IPv4, one IPv6). Default 10.88.0.0/16.
    #[arg(long)]
    pub pod_cidr: Vec<ipnet::IpNet>,
    /// Name of the host bridge pods are attached to.
    #[arg(long, default_value = "runp0")]
    pub pod_bridge: String,
    /// Where host-local (and the bridge network) keeps the IP leases (default <root>/runtime/cni/networks). Runtimes
    /// on one host that share a bridge and CIDR must share this directory.
    #[arg(long)]
    pub cni_data_dir: Option<PathBuf>,
}

/// Where Exec/Attach/PortForward are served (`runp serve`, `runp agent --runtime=process`).
#[derive(clap::Args, Clone, Debug)]
pub struct StreamingArgs {
    /// Address of the streaming server whose one-time URLs Exec, Attach and PortForward
    /// answer (as containerd's: loopback, a free port by default).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub streaming_addr: SocketAddr,
}

/// Limits the runtime puts on every pod (`runp serve`, `runp agent --runtime=process`).
#[derive(clap::Args, Clone, Debug)]
pub struct LimitArgs {
    /// Processes (and threads) a pod may have at once: pids.max of its cgroup, as kubelet's
    /// podPidsLimit. Unset or -1: unlimited. Needs usable cgroups (real root).
    #[arg(long, allow_negative_numbers = true)]
    pub pod_max_pids: Option<i64>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkKind {
    Auto,
    Cni,
    Bridge,
    Loopback,
}

impl NetworkArgs {
    pub fn options(&self) -> NetworkOptions {
        let defaults = NetworkOptions::default();
        NetworkOptions {
            mode: match self.network {
                NetworkKind::Auto => NetworkMode::Auto,
                NetworkKind::Cni => NetworkMode::Cni,
                NetworkKind::Bridge => NetworkMode::Bridge,
                NetworkKind::Loopback => NetworkMode::Loopback,
            },
            cni_bin_dirs: if self.cni_bin_dir.is_empty() {
                defaults.cni_bin_dirs
            } else {
                self.cni_bin_dir.clone()
            },
            pod_cidrs: if self.pod_cidr.is_empty() {
                defaults.pod_cidrs
            } else {
                self.pod_cidr.clone()
            },
            bridge: self.pod_bridge.clone(),
            data_dir: self.cni_data_dir.clone(),
            plugin_timeout: defaults.plugin_timeout,
        }
    }
}

/// The process runtime (with its streaming server) and its image store, as CRI trait objects.
pub struct LocalRuntime {
    pub runtime: Arc<dyn RuntimeService>,
    pub images: Arc<dyn ImageService>,
}

/// The CRI socket runp serves by default: `unix://<root>/runp.sock`.
pub fn default_endpoint(global: &GlobalOpts) -> String {
    format!("unix://{}", global.root.join("runp.sock").display())
}

/// Opens the image store and starts the process runtime under `--root`, re-adopting what a
/// previous agent left running, and its streaming server. Owns this process's one reaper.
pub async fn start(
    global: &GlobalOpts,
    node_ip: Option<IpAddr>,
    network: &NetworkArgs,
    registry: &RegistryArgs,
    streaming: &StreamingArgs,
    limits: &LimitArgs,
    container_log_max_live_size: Option<u64>,
) -> anyhow::Result<LocalRuntime> {
    let image_root = global.image_root();
    let store = ImageStore::open_with(&image_root, registry.store_options()?)
        .with_context(|| format!("opening the image store {}", image_root.display()))?;
    let exe = std::env::current_exe().context("locating the runp binary")?;
    let reaper = Reaper::start().context("starting the child reaper")?;
    let mut options = RuntimeOptions::new(global.root.join("runtime"), exe, store.clone(), reaper);
    options.state = global.state_dir().join("runtime");
    options.node_ip = node_ip.map(|ip| ip.to_string());
    options.network = network.options();
    options.pod_max_pids = limits.pod_max_pids.filter(|max| *max > 0);
    options.container_log_max_live_size = container_log_max_live_size;
    let runtime = ProcessRuntime::start(options)
        .await
        .context("starting the process runtime")?;
    let server = StreamingServer::start(streaming.streaming_addr, runtime.clone())
        .context("starting the streaming server")?;
    tracing::info!(url = %server.base_url(), "streaming server for Exec, Attach and PortForward");
    Ok(LocalRuntime {
        runtime: Arc::new(WithStreaming::new(runtime, Arc::new(server))),
        images: Arc::new(store),
    })
}

/// Serves `local` over the CRI gRPC API on `listen` until `shutdown` completes.
/// `socket_group` (`--socket-group`, a name or gid) opens the unix socket to that group.
pub async fn serve(
    listen: &str,
    socket_group: Option<&str>,
    local: &LocalRuntime,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let endpoint: CriEndpoint = listen
        .parse()
        .with_context(|| format!("--listen {listen:?}"))?;
    let group = socket_group
        .map(runp::cri::socket::resolve_group)
        .transpose()
        .context("--socket-group")?;
    tracing::info!(%endpoint, ?group, "serving the CRI");
    runp::cri::server::serve_for(
        &endpoint,
        group,
        local.runtime.clone(),
        local.images.clone(),
        shutdown,
    )
    .await
    .with_context(|| format!("serving the CRI on {endpoint}"))
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn termination_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot watch SIGTERM; stop with Ctrl-C");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
