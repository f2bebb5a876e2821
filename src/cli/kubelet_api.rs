//! `runp agent`'s kubelet API flags (named as kubelet's) and its start in cluster mode.

use anyhow::Context as _;
use clap::Args;
use runp::cri::RuntimeService;
use runp::kubelet::apiclient::ApiClient;
use runp::kubelet::server::{
    ApiReviews, Auth, AuthorizationMode, Context, KubeletServer, PodSource, csr, tls,
};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Clone, Debug)]
pub struct KubeletApiArgs {
    /// Address the kubelet API listens on (`--kubelet-port`; 0 there serves nothing).
    #[arg(long, default_value = "0.0.0.0")]
    pub address: IpAddr,
    /// Serving certificate (PEM, the chain); default: a self-signed one for the node's names.
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// Key of --tls-cert-file (PEM).
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// CA bundle that client certificates must chain to (CN = user, O = groups).
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Serve unauthenticated requests as system:anonymous (else they get 401).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub anonymous_auth: bool,
    /// `Webhook` (SubjectAccessReview per request) or `AlwaysAllow`.
    #[arg(long, default_value = "Webhook")]
    pub authorization_mode: AuthorizationMode,
    /// Request the serving certificate from the cluster (a CertificateSigningRequest for the
    /// kubernetes.io/kubelet-serving signer, to be approved) and renew it before it expires.
    #[arg(
        long,
        conflicts_with = "tls_cert_file",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value_t = false
    )]
    pub rotate_server_certificates: bool,
}

impl Default for KubeletApiArgs {
    fn default() -> Self {
        KubeletApiArgs {
            address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            anonymous_auth: false,
            authorization_mode: AuthorizationMode::Webhook,
            rotate_server_certificates: false,
        }
    }
}

/// Where the node is and who it is.
pub struct NodeIdentity<'a> {
    pub name: &'a str,
    pub ip: IpAddr,
    pub port: u16,
    pub root: &'a std::path::Path,
}

/// Starts the kubelet API; None with port 0.
pub async fn start(
    args: &KubeletApiArgs,
    node: NodeIdentity<'_>,
    api: &ApiClient,
    runtime: Arc<dyn RuntimeService>,
    pods: Arc<dyn PodSource>,
    metrics: Arc<runp::kubelet::metrics::KubeletMetrics>,
) -> anyhow::Result<Option<KubeletServer>> {
    if node.port == 0 {
        tracing::info!("--kubelet-port 0: no kubelet API");
        return Ok(None);
    }
    let mut names = vec![node.name.to_string()];
    if let Ok(host) = nix::unistd::gethostname() {
        names.push(host.to_string_lossy().to_lowercase());
    }
    names.extend([
        node.ip.to_string(),
        "127.0.0.1".to_string(),
        "localhost".to_string(),
    ]);
    let identity = tls::identity(
        args.tls_cert_file.as_deref(),
        args.tls_private_key_file.as_deref(),
        &names,
    )
    .context("the kubelet API's serving certificate")?;
    let served = tls::ServingCert::new(identity).context("the kubelet API's TLS")?;
    let config = tls::server_config(served.clone(), args.client_ca_file.as_deref())
        .context("the kubelet API's TLS")?;
    if args.rotate_server_certificates {
        // Runs as long as the agent; the server serves whatever it last installed.
        csr::spawn_rotation(api.client.clone(), node.name.to_string(), names, served);
    }
    let reviews = Arc::new(ApiReviews {
        client: api.client.clone(),
    });
    let auth = Auth::new(args.anonymous_auth, args.authorization_mode, reviews);
    let configz = serde_json::json!({
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "address": args.address.to_string(),
        "port": node.port,
        "tlsCertFile": args.tls_cert_file,
        "tlsPrivateKeyFile": args.tls_private_key_file,
        "serverTLSBootstrap": args.rotate_server_certificates,
        "authentication": {
            "x509": {"clientCAFile": args.client_ca_file},
            "webhook": {"enabled": true, "cacheTTL": "2m0s"},
            "anonymous": {"enabled": args.anonymous_auth},
        },
        "authorization": {
            "mode": format!("{:?}", args.authorization_mode),
            "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"},
        },
    });
    let context = Context {
        runtime,
        pods,
        metrics,
        configz,
        node_name: node.name.to_string(),
        root: node.root.to_path_buf(),
    };
    let bind = SocketAddr::new(args.address, node.port);
    // A port already taken (another agent, a kubelet) degrades the node, it does not stop
    // its pods: logs and exec are unavailable, everything else runs. Bad TLS files above do
    // stop the agent, as a misconfiguration.
    match KubeletServer::start(bind, config, node.name, auth, context).await {
        Ok(server) => Ok(Some(server)),
        Err(err) => {
            tracing::error!(error = %err, "the kubelet API cannot start; running without it");
            Ok(None)
        }
    }
}
