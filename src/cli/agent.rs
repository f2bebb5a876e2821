//! `runp agent`: runs the pods of a manifest directory and keeps them converged.
//!
//! The sync loop talks to a CRI runtime through the CRI traits only: the in-process runtime
//! (`--runtime=process`, the default; also served on `--listen` so `runp exec` and crictl can
//! reach it), or any CRI server over gRPC (`--runtime=remote --runtime-endpoint unix:///...`,
//! e.g. `runp serve` or containerd).

use super::cluster::ClusterArgs;
use super::{GlobalOpts, RegistryArgs, local};
use anyhow::Context;
use clap::Args;
use runp::cri::client::{RemoteOptions, RemoteRuntime};
use runp::cri::endpoint::CriEndpoint;
use runp::cri::{ImageService, RuntimeService};
use runp::kubelet::apiclient::{ApiClient, ClientSource, client_source};
use runp::kubelet::clock::SystemClock;
use runp::kubelet::config::AgentConfig;
use runp::kubelet::environment::PodConfigEnvironment;
use runp::kubelet::gc::images::ImageGcPolicy;
use runp::kubelet::metrics::{InstrumentedImages, InstrumentedRuntime, KubeletMetrics};
use runp::kubelet::node::{NodeAgent, NodeHandle, NodeOptions, RawNodeFlags};
use runp::kubelet::objects::{ApiObjects, LayeredObjects};
use runp::kubelet::podconfig::{ObjectSource, ObjectStore, VolumeManager};
use runp::kubelet::source::apiserver::NodePods;
use runp::kubelet::source::manifest::{ManifestSource, SourceOptions};
use runp::kubelet::{Agent, AgentParts};
use std::collections::HashSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// YAML configuration (`runp config default` prints one); flags given here override it.
    /// Read before the other flags are parsed.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory of Pod, ConfigMap and Secret manifests (YAML/JSON), watched for changes.
    /// With --kubeconfig its pods are static pods of the node.
    #[arg(long, required_unless_present_any = ["kubeconfig", "in_cluster"])]
    pub manifests: Option<PathBuf>,
    /// Which runtime runs the pods: the in-process one, or a CRI server over gRPC.
    #[arg(long, value_enum, default_value_t = RuntimeKind::Process)]
    pub runtime: RuntimeKind,
    /// CRI endpoint of the remote runtime (unix:///path.sock or tcp://host:port).
    #[arg(
        long,
        env = "RUNP_RUNTIME_ENDPOINT",
        required_if_eq("runtime", "remote")
    )]
    pub runtime_endpoint: Option<String>,
    /// With --runtime=process: also serve the CRI here (default unix://<root>/runp.sock;
    /// `none` to serve nothing).
    #[arg(long)]
    pub listen: Option<String>,
    /// Group (name or gid) whose members may use the --listen socket: mode 0660 owned by it
    /// (default 0600, owner only).
    #[arg(long, value_name = "NAME|GID")]
    pub socket_group: Option<String>,
    /// Node name (the Node registered with --kubeconfig; given to pods). Default: the
    /// hostname, lower-cased, as kubelet.
    #[arg(long, default_value_t = runp::kubelet::node::options::default_node_name())]
    pub node_name: String,
    /// Node IP (status.hostIP, and the pod IP of hostNetwork pods).
    #[arg(long, default_value = "127.0.0.1")]
    pub node_ip: IpAddr,
    /// Cluster DNS server for dnsPolicy ClusterFirst (repeatable).
    #[arg(long)]
    pub cluster_dns: Vec<IpAddr>,
    /// Cluster domain.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// `namespace/name` of a dockerconfigjson secret used for every image pull.
    #[arg(long)]
    pub registry_auth_secret: Option<String>,
    /// Rotate a container log when it is larger than this many bytes.
    #[arg(long, default_value_t = 512 * 1024 * 1024)]
    pub container_log_max_size: u64,
    /// Log files kept per container, the live one included.
    #[arg(long, default_value_t = 5)]
    pub container_log_max_files: usize,
    /// Directory of the containers' logs, `<dir>/<namespace>_<pod>_<uid>/<container>/N.log`
    /// (kubelet's podLogsDir). Default: <root>/var/log/pods.
    #[arg(long)]
    pub pod_logs_dir: Option<PathBuf>,
    /// How often container logs are checked for rotation (kubelet's
    /// containerLogMonitorInterval): `10s`, `500ms`, `1m`.
    #[arg(long, default_value = "10s", value_parser = parse_interval)]
    pub container_log_monitor_interval: Duration,
    /// Image GC starts above this disk usage (percent).
    #[arg(long, default_value_t = 85)]
    pub image_gc_high_threshold: u8,
    /// Image GC frees down to this disk usage (percent).
    #[arg(long, default_value_t = 80)]
    pub image_gc_low_threshold: u8,
    /// With --runtime=process: the pod network.
    #[command(flatten)]
    pub network: local::NetworkArgs,
    // With --runtime=process: registries pulled from over plain http.
    #[command(flatten)]
    pub registry: RegistryArgs,
    // With --runtime=process: the streaming server (Exec/Attach/PortForward on --listen).
    #[command(flatten)]
    pub streaming: local::StreamingArgs,
    // With --runtime=process: limits on every pod.
    #[command(flatten)]
    pub limits: local::LimitArgs,
    // Joining a cluster as a node.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `500ms`, `10s`, `1m` (a Go duration of one unit); at least 1 ms, as a zero interval would spin.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map(|at| text.split_at(at))
        .ok_or_else(|| format!("{text:?}: a unit is needed (ms, s, m)"))?;
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a number then ms, s or m"))?;
    let interval = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m)")),
    };
    if interval.is_zero() {
        return Err(format!("{text:?}: must be more than zero"));
    }
    Ok(interval)
}

/// The runtime behind the sync loop.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeKind {
    /// runp's in-process runtime and image store.
    Process,
    /// A CRI server reached over gRPC.
    Remote,
}

impl AgentArgs {
    pub fn config(&self, global: &GlobalOpts) -> AgentConfig {
        let mut config = AgentConfig::with_root(&global.root);
        config.node_name = self.node_name.clone();
        config.node_ip = self.node_ip;
        config.cluster_dns = self.cluster_dns.clone();
        config.cluster_domain = self.cluster_domain.clone();
        config.registry_auth_secret = self.registry_auth_secret.clone();
        config.container_log_max_size = self.container_log_max_size;
        config.container_log_max_files = self.container_log_max_files;
        if let Some(dir) = &self.pod_logs_dir {
            config.pod_logs_dir = dir.clone();
        }
        config.timings.log_rotation = self.container_log_monitor_interval;
        config
    }

    /// The node's registration options (checked before anything starts).
    pub fn node_options(&self, global: &GlobalOpts) -> anyhow::Result<NodeOptions> {
        let cluster = &self.cluster;
        Ok(NodeOptions::parse(&RawNodeFlags {
            node_name: &self.node_name,
            node_labels: &cluster.node_labels,
            register_with_taints: &cluster.register_with_taints,
            max_pods: cluster.max_pods,
            system_reserved: &cluster.system_reserved,
            node_ip: Some(self.node_ip),
            kubelet_port: cluster.kubelet_port,
            root: global.root.clone(),
        })?)
    }
}

/// Connects to the API server and starts the node agent (registration, status, Lease).
/// Connects once to the API server when the node joins a cluster (`--kubeconfig`, `KUBECONFIG`
/// or `--in-cluster`); None without a cluster.
async fn connect_cluster(cluster: &ClusterArgs) -> anyhow::Result<Option<ApiClient>> {
    if !cluster.enabled() {
        return Ok(None);
    }
    let source = if cluster.in_cluster {
        ClientSource::InCluster
    } else {
        client_source(cluster.kubeconfig.as_deref())
    };
    let api = ApiClient::connect(&source)
        .await
        .context("connecting to the API server")?;
    Ok(Some(api))
}

async fn start_node(
    api: ApiClient,
    opts: NodeOptions,
    runtime: Arc<dyn RuntimeService>,
) -> anyhow::Result<NodeHandle> {
    let name = opts.node_name.clone();
    NodeAgent::start(api, runtime, opts, Arc::new(SystemClock))
        .await
        .with_context(|| format!("registering node {name}"))
}

/// The kubelet API of a cluster node (`--kubelet-port`, 0 for none).
async fn start_kubelet_api(
    global: &GlobalOpts,
    args: &AgentArgs,
    api: &ApiClient,
    runtime: Arc<dyn RuntimeService>,
    agent: &Agent,
    metrics: Arc<KubeletMetrics>,
) -> anyhow::Result<Option<runp::kubelet::server::KubeletServer>> {
    let node = super::kubelet_api::NodeIdentity {
        name: &args.node_name,
        ip: args.node_ip,
        port: args.cluster.kubelet_port,
        root: &global.root,
    };
    let pods = Arc::new(agent.handle());
    super::kubelet_api::start(&args.cluster.api, node, api, runtime, pods, metrics).await
}

/// Logs manifest problems (file and reason) once each.
fn report_problems(source: &ManifestSource, seen: &mut HashSet<String>) {
    let problems = source.problems();
    let current: HashSet<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.file.display(), p.message))
        .collect();
    for problem in &problems {
        let key = format!("{}: {}", problem.file.display(), problem.message);
        if seen.insert(key) {
            tracing::warn!(file = %problem.file.display(), severity = ?problem.severity,
                "manifest problem: {}", problem.message);
        }
    }
    seen.retain(|k| current.contains(k));
}

pub async fn run(global: &GlobalOpts, args: AgentArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.image_gc_low_threshold < args.image_gc_high_threshold
            && args.image_gc_high_threshold <= 100,
        "image GC thresholds: low ({}) must be below high ({}), high at most 100",
        args.image_gc_low_threshold,
        args.image_gc_high_threshold
    );
    let config = args.config(global);
    let node_options = match args.cluster.enabled() {
        true => Some(args.node_options(global)?),
        false => None,
    };
    let mut served = None;
    let (runtime, images): (Arc<dyn RuntimeService>, Arc<dyn ImageService>) = match args.runtime {
        RuntimeKind::Remote => {
            if !args.registry.insecure_registry.is_empty() {
                tracing::warn!(
                    "--insecure-registry is ignored with --runtime=remote: the remote runtime pulls"
                );
            }
            let endpoint = args.runtime_endpoint.as_deref().unwrap_or_default();
            let endpoint: CriEndpoint = endpoint
                .parse()
                .with_context(|| format!("--runtime-endpoint {endpoint:?}"))?;
            let remote = Arc::new(
                RemoteRuntime::connect(&endpoint, RemoteOptions::default())
                    .await
                    .context("connecting to the container runtime")?,
            );
            (remote.clone(), remote)
        }
        RuntimeKind::Process => {
            let local = local::start(
                global,
                Some(args.node_ip),
                &args.network,
                &args.registry,
                &args.streaming,
                &args.limits,
                config.container_log_max_live_size(),
            )
            .await?;
            let listen = args
                .listen
                .clone()
                .unwrap_or_else(|| local::default_endpoint(global));
            let pair = (local.runtime.clone(), local.images.clone());
            if listen != "none" {
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let group = args.socket_group.clone();
                let server = tokio::spawn(async move {
                    local::serve(&listen, group.as_deref(), &local, async {
                        let _ = stopped.await;
                    })
                    .await
                });
                served = Some((stop, server));
            }
            pair
        }
    };
    // Every CRI call of the sync loop and the kubelet API is timed into /metrics.
    let metrics = Arc::new(KubeletMetrics::new());
    let runtime: Arc<dyn RuntimeService> =
        Arc::new(InstrumentedRuntime::new(runtime, Arc::clone(&metrics)));
    let images: Arc<dyn ImageService> =
        Arc::new(InstrumentedImages::new(images, Arc::clone(&metrics)));
    let api = connect_cluster(&args.cluster).await?;
    let node = match (&api, node_options) {
        (Some(api), Some(opts)) => Some(start_node(api.clone(), opts, runtime.clone()).await?),
        _ => None,
    };
    // Both sources feed `tx`; in a cluster, ApiObjects sits between them and the agent so each
    // pod's ConfigMaps, Secrets and tokens are watched before its first sync.
    let (tx, sources_rx) = tokio::sync::mpsc::channel(1024);
    let node_pods = api
        .clone()
        .map(|api| NodePods::start(api, &config.node_name, tx.clone()));
    // With the API source too, manifest pods are the node's static pods.
    let (source, manifest_objects) = match args.manifests.clone() {
        Some(dir) => {
            let (source, objects) =
                ManifestSource::spawn_with(dir, tx, SourceOptions::from_config(&config))
                    .context("reading the manifest directory")?;
            (Some(source), objects)
        }
        None => (None, Arc::new(ObjectStore::new()) as Arc<dyn ObjectSource>),
    };
    let (rx, objects, middleware) = match &api {
        Some(api) => {
            let (agent_tx, agent_rx) = tokio::sync::mpsc::channel(1024);
            let (api_objects, task) = ApiObjects::spawn(api.clone(), sources_rx, agent_tx);
            let layered = LayeredObjects {
                first: manifest_objects,
                then: api_objects,
            };
            (
                agent_rx,
                Arc::new(layered) as Arc<dyn ObjectSource>,
                Some(task),
            )
        }
        None => (sources_rx, manifest_objects, None),
    };
    let environment = Arc::new(PodConfigEnvironment::new(
        VolumeManager::new(config.clone()),
        config.clone(),
    ));
    let config_node_name = config.node_name.clone();
    let mut agent = Agent::new(AgentParts {
        runtime: runtime.clone(),
        images,
        config,
        events: rx,
        objects,
        environment,
        clock: Arc::new(SystemClock),
        image_gc: ImageGcPolicy {
            high_percent: args.image_gc_high_threshold,
            low_percent: args.image_gc_low_threshold,
            ..ImageGcPolicy::default()
        },
        metrics: Arc::clone(&metrics),
    });
    if let Some(node_pods) = &node_pods {
        agent = node_pods.attach(agent);
    }
    if std::process::id() == 1 {
        // PID 1 of a container: its exit SIGKILLs every pod, so they are stopped first.
        agent = agent.stopping_pods_on_shutdown();
    }
    if let Some(node) = &node {
        agent = agent.with_admission(Arc::new(node.watch()));
    }
    if let Some(api) = &api {
        let publisher = runp::kubelet::events::api::RecorderPublisher::new(
            api.client.clone(),
            &config_node_name,
        );
        let (sink, _publishing) = runp::kubelet::events::api::ApiSink::start(
            Arc::new(publisher),
            runp::kubelet::events::api::QUEUE_CAPACITY,
        );
        agent = agent.with_pod_event_sink(sink);
    }
    let problems = tokio::spawn(async move {
        let Some(source) = source else { return };
        let mut seen = HashSet::new();
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            report_problems(&source, &mut seen);
        }
    });
    let kubelet_api = match &api {
        Some(api) => start_kubelet_api(global, &args, api, runtime, &agent, metrics).await?,
        None => None,
    };
    let shutdown = local::termination_signal();
    let result = agent.run(shutdown).await;
    if let Some(server) = kubelet_api {
        server.stop().await;
    }
    problems.abort();
    if let Some(middleware) = middleware {
        middleware.abort();
    }
    if let Some(node_pods) = &node_pods {
        node_pods.stop();
    }
    if let Some(node) = node {
        // The Node stays registered (and its pods running); only the heartbeat stops.
        node.stop().await;
    }
    if let Some((stop, server)) = served {
        let _ = stop.send(());
        match server.await {
            Ok(Err(err)) => tracing::warn!(error = %format!("{err:#}"), "CRI server"),
            Err(err) => tracing::warn!(error = %err, "CRI server task"),
            Ok(Ok(())) => {}
        }
    }
    result.context("running the agent")?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_intervals_parse_like_go_durations() {
        let table = [
            ("10s", Ok(Duration::from_secs(10))),
            ("200ms", Ok(Duration::from_millis(200))),
            ("2m", Ok(Duration::from_secs(120))),
            ("0s", Err(())),
            ("10", Err(())),
            ("s", Err(())),
            ("5h", Err(())),
        ];
        for (text, want) in table {
            assert_eq!(parse_interval(text).map_err(|_| ()), want, "{text}");
        }
    }
}
