//! `runp exec POD [-c CTR] [-i] [-t] -- CMD`: ExecSync through the CRI endpoint, or with `-i`
//! or `-t` an interactive session on the runtime's streaming URL (as `crictl exec -it`), with
//! the local terminal in raw mode and its size changes passed on.

use super::GlobalOpts;
use super::pods::{config, find_pod, pick_container};
use anyhow::Context;
use clap::Args;
use runp::cri::client::{RemoteOptions, RemoteRuntime};
use runp::cri::endpoint::CriEndpoint;
use runp::cri::streaming::client::{ClientIo, run_remote_command};
use runp::cri::{RuntimeService, TerminalSize, api};
use runp::kubelet::status::generate::CONTAINER_ID_SCHEME;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::process::ExitCode;
use tokio::sync::mpsc;

#[derive(Args, Debug)]
pub struct ExecArgs {
    pub pod: String,
    #[arg(short, long)]
    pub container: Option<String>,
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Pass this command's stdin to the command (interactive session).
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// Run the command on a terminal (with -i: an interactive shell).
    #[arg(short = 't', long)]
    pub tty: bool,
    /// CRI endpoint of the container runtime (default: the agent's, unix://<root>/runp.sock).
    #[arg(long, env = "RUNP_RUNTIME_ENDPOINT")]
    pub runtime_endpoint: Option<String>,
    /// Seconds the command may run (0: no limit; without -i/-t only).
    #[arg(long, default_value_t = 0)]
    pub timeout: i64,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub async fn exec(global: &GlobalOpts, args: ExecArgs) -> anyhow::Result<ExitCode> {
    let config = config(global);
    let pod = find_pod(&config, args.namespace.as_deref(), &args.pod)?;
    let container = pick_container(&pod, args.container.as_deref())?;
    let running = container
        .state
        .as_ref()
        .is_some_and(|s| s.running.is_some());
    let id = container
        .container_id
        .as_deref()
        .map(|id| id.trim_start_matches(CONTAINER_ID_SCHEME).to_string())
        .filter(|_| running)
        .with_context(|| format!("container {:?} is not running", container.name))?;
    let endpoint = args
        .runtime_endpoint
        .clone()
        .unwrap_or_else(|| super::local::default_endpoint(global));
    let endpoint: CriEndpoint = endpoint
        .parse()
        .with_context(|| format!("--runtime-endpoint {endpoint:?}"))?;
    let remote = RemoteRuntime::connect(&endpoint, RemoteOptions::default())
        .await
        .context("connecting to the container runtime")?;
    let code = if args.stdin || args.tty {
        interactive(&remote, id, &args).await?
    } else {
        let response = remote
            .exec_sync(api::ExecSyncRequest {
                container_id: id,
                cmd: args.command,
                timeout: args.timeout,
            })
            .await
            .map_err(|s| anyhow::anyhow!("exec: {}", s.message()))?;
        std::io::stdout().write_all(&response.stdout)?;
        std::io::stderr().write_all(&response.stderr)?;
        response.exit_code
    };
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

async fn interactive(remote: &RemoteRuntime, id: String, args: &ExecArgs) -> anyhow::Result<i32> {
    let response = remote
        .exec(api::ExecRequest {
            container_id: id,
            cmd: args.command.clone(),
            tty: args.tty,
            stdin: args.stdin,
            stdout: true,
            // A terminal merges stderr into its output.
            stderr: !args.tty,
        })
        .await
        .map_err(|s| anyhow::anyhow!("exec: {}", s.message()))?;
    let stdin = std::io::stdin();
    let _raw = if args.tty && args.stdin {
        RawTerminal::enter(stdin.as_fd())?
    } else {
        None
    };
    let resize = if args.tty {
        terminal_resizes(std::io::stdout().as_fd().try_clone_to_owned()?)?
    } else {
        None
    };
    let io = ClientIo {
        stdin: args.stdin.then(forward_stdin),
        stdout: tokio::io::stdout(),
        stderr: (!args.tty).then(tokio::io::stderr),
        resize,
    };
    Ok(run_remote_command(&response.url, io).await?)
}

/// Reads stdin on a plain thread: tokio's stdin cannot be cancelled, and a read blocked in it
/// would hold up the runtime's shutdown after the command ended.
fn forward_stdin() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(8);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// The terminal's size now and after every SIGWINCH; `None` when stdout is not a terminal.
fn terminal_resizes(
    terminal: std::os::fd::OwnedFd,
) -> anyhow::Result<Option<mpsc::Receiver<TerminalSize>>> {
    if !rustix::termios::isatty(&terminal) {
        return Ok(None);
    }
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        .context("watching terminal size changes")?;
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            if let Ok(size) = rustix::termios::tcgetwinsize(&terminal) {
                let size = TerminalSize {
                    width: size.ws_col,
                    height: size.ws_row,
                };
                if tx.send(size).await.is_err() {
                    return;
                }
            }
            if winch.recv().await.is_none() {
                return;
            }
        }
    });
    Ok(Some(rx))
}

/// The local terminal in raw mode (keys go to the remote shell as typed); restored on drop.
struct RawTerminal {
    fd: std::os::fd::OwnedFd,
    saved: rustix::termios::Termios,
}

impl RawTerminal {
    fn enter(fd: BorrowedFd<'_>) -> anyhow::Result<Option<RawTerminal>> {
        if !rustix::termios::isatty(fd) {
            return Ok(None);
        }
        let saved = rustix::termios::tcgetattr(fd).context("reading the terminal's mode")?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(fd, rustix::termios::OptionalActions::Flush, &raw)
            .context("setting the terminal to raw mode")?;
        Ok(Some(RawTerminal {
            fd: fd.try_clone_to_owned()?,
            saved,
        }))
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            &self.fd,
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
    }
}
