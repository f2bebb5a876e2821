//! Starting the in-process runtime (`--runtime=process`) and serving it over the CRI socket.

use super::{GlobalOpts, RegistryArgs};
use anyhow::Context;
use runp::cri::endpoint::CriEndpoint;
use runp::cri::{ImageService, RuntimeService};
use runp::image::ImageStore;
use runp::runtime::{ProcessRuntime, Reaper, RuntimeOptions};
use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;

/// The process runtime and its image store, as CRI trait objects.
pub struct LocalRuntime {
    pub runtime: Arc<dyn RuntimeService>,
    pub images: Arc<dyn ImageService>,
}

/// The CRI socket runp serves by default: `unix://<root>/runp.sock`.
pub fn default_endpoint(global: &GlobalOpts) -> String {
    format!("unix://{}", global.root.join("runp.sock").display())
}

/// Opens the image store and starts the process runtime under `--root`, re-adopting what a
/// previous agent left running. Owns this process's one reaper.
pub async fn start(
    global: &GlobalOpts,
    node_ip: Option<IpAddr>,
    registry: &RegistryArgs,
) -> anyhow::Result<LocalRuntime> {
    let image_root = global.image_root();
    let store = ImageStore::open_with(&image_root, registry.store_options()?)
        .with_context(|| format!("opening the image store {}", image_root.display()))?;
    let exe = std::env::current_exe().context("locating the runp binary")?;
    let reaper = Reaper::start().context("starting the child reaper")?;
    let mut options = RuntimeOptions::new(global.root.join("runtime"), exe, store.clone(), reaper);
    options.node_ip = node_ip.map(|ip| ip.to_string());
    let runtime = ProcessRuntime::start(options)
        .await
        .context("starting the process runtime")?;
    Ok(LocalRuntime {
        runtime,
        images: Arc::new(store),
    })
}

/// Serves `local` over the CRI gRPC API on `listen` until `shutdown` completes.
pub async fn serve(
    listen: &str,
    local: &LocalRuntime,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let endpoint: CriEndpoint = listen
        .parse()
        .with_context(|| format!("--listen {listen:?}"))?;
    tracing::info!(%endpoint, "serving the CRI");
    runp::cri::server::serve(
        &endpoint,
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
