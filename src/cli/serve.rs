//! `runp serve`: the CRI RuntimeService and ImageService over gRPC on a unix socket, backed by
//! the in-process runtime and image store (usable by crictl or a kubelet).

use super::{GlobalOpts, RegistryArgs, local};
use clap::Args;
use std::net::IpAddr;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// CRI endpoint to listen on (unix:///path.sock, or tcp://127.0.0.1:PORT).
    #[arg(long, default_value = "unix:///run/runp/runp.sock")]
    pub listen: String,
    /// Group (name or gid) whose members may use the CRI socket: mode 0660 owned by it
    /// (default 0600, owner only).
    #[arg(long, value_name = "NAME|GID")]
    pub socket_group: Option<String>,
    /// IP reported for host-network pods (detected when omitted).
    #[arg(long)]
    pub node_ip: Option<IpAddr>,
    #[command(flatten)]
    pub network: local::NetworkArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[command(flatten)]
    pub streaming: local::StreamingArgs,
    #[command(flatten)]
    pub limits: local::LimitArgs,
}

pub async fn run(global: &GlobalOpts, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let local = local::start(
        global,
        args.node_ip,
        &args.network,
        &args.registry,
        &args.streaming,
        &args.limits,
        // The CRI client (kubelet) owns rotation and its limits.
        None,
    )
    .await?;
    local::serve(
        &args.listen,
        args.socket_group.as_deref(),
        &local,
        local::termination_signal(),
    )
    .await?;
    // Pods keep running: their shims are independent of this process.
    tracing::info!("CRI server stopped; pods keep running");
    Ok(ExitCode::SUCCESS)
}
