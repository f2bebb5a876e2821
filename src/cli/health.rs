//! `runp health`: a container HEALTHCHECK or a monitoring probe. Asks the CRI socket of the agent
//! (`unix://<root>/runp.sock`, or `--endpoint`) for the runtime's Status: healthy when it
//! answers within the timeout and reports RuntimeReady.

use super::{GlobalOpts, local};
use anyhow::Context;
use clap::Args;
use runp::cri::RuntimeService;
use runp::cri::api;
use runp::cri::client::{RemoteOptions, RemoteRuntime};
use runp::cri::endpoint::CriEndpoint;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct HealthArgs {
    /// CRI endpoint to ask (default: the agent's unix://<root>/runp.sock).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 5)]
    pub timeout: u64,
}

pub async fn run(global: &GlobalOpts, args: HealthArgs) -> anyhow::Result<ExitCode> {
    let endpoint = args
        .endpoint
        .clone()
        .unwrap_or_else(|| local::default_endpoint(global));
    let parsed: CriEndpoint = endpoint
        .parse()
        .with_context(|| format!("--endpoint {endpoint:?}"))?;
    let timeout = Duration::from_secs(args.timeout.max(1));
    let options = RemoteOptions {
        call_timeout: timeout,
        connect_timeout: timeout,
        ..RemoteOptions::default()
    };
    let status = async {
        let runtime = RemoteRuntime::connect(&parsed, options).await?;
        let status = runtime
            .status(api::StatusRequest { verbose: false })
            .await
            .map_err(|s| anyhow::anyhow!("Status: {}", s.message()))?;
        anyhow::Ok(status)
    };
    let status = match tokio::time::timeout(timeout, status).await {
        Ok(Ok(status)) => status,
        Ok(Err(err)) => {
            println!("unhealthy: {err:#}");
            return Ok(ExitCode::FAILURE);
        }
        Err(_) => {
            println!("unhealthy: no answer from {endpoint} within {timeout:?}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let conditions = status.status.map(|s| s.conditions).unwrap_or_default();
    let runtime_ready = conditions.iter().find(|c| c.r#type == "RuntimeReady");
    match runtime_ready {
        Some(c) if c.status => {
            let network = conditions
                .iter()
                .find(|c| c.r#type == "NetworkReady")
                .map(|c| match c.status {
                    true => "network ready".to_string(),
                    false => format!("network not ready: {} {}", c.reason, c.message),
                })
                .unwrap_or_default();
            println!("healthy: {endpoint}; {network}");
            Ok(ExitCode::SUCCESS)
        }
        Some(c) => {
            println!("unhealthy: runtime not ready: {} {}", c.reason, c.message);
            Ok(ExitCode::FAILURE)
        }
        None => {
            println!("unhealthy: the runtime reports no RuntimeReady condition");
            Ok(ExitCode::FAILURE)
        }
    }
}
