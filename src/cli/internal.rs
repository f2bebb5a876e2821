//! Hidden subcommands runp re-executes itself with (the per-container shim, the exec helper).
//! They run before any tokio runtime exists: they fork, and must stay single-threaded.

use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum InternalCommand {
    /// Supervise one container or pod infra process (started by the runtime).
    #[command(hide = true)]
    Shim {
        /// Directory holding shim.json; shim.log and exit.json are written there.
        state_dir: PathBuf,
    },
    /// Fork shims on the runtime's request (started by the runtime).
    #[command(hide = true)]
    Zygote {
        /// Room for the command line of the shims it forks.
        room: Option<String>,
    },
    /// Run one process inside a running container (started by the runtime).
    #[command(hide = true, name = "exec-helper")]
    ExecHelper,
    /// Give CRI mounts their propagation (the OCI createContainer hook of a container).
    #[command(hide = true, name = "mount-propagation")]
    MountPropagation {
        /// The container's rootfs.
        rootfs: PathBuf,
        /// `private:PATH` or `slave:PATH`, parents first.
        mounts: Vec<String>,
    },
}

pub fn run(cmd: InternalCommand) -> ExitCode {
    let code = match cmd {
        // stderr is the shim's shim.log.
        InternalCommand::Shim { state_dir } => runp::jail::run_shim(&state_dir, init_shim_tracing),
        // stderr is the runtime's; each shim it forks logs to its shim.log.
        InternalCommand::Zygote { room: _ } => runp::jail::run_zygote(init_shim_tracing),
        // stderr is the agent's: only say something when it matters.
        InternalCommand::ExecHelper => runp::jail::run_exec_helper(|| init_tracing("error")),
        // stderr is the shim's: libcontainer logs a failed hook with it.
        InternalCommand::MountPropagation { rootfs, mounts } => {
            match runp::jail::apply_mount_propagation(&rootfs, &mounts) {
                Ok(()) => 0,
                Err(err) => {
                    eprintln!("runp mount-propagation: {err}");
                    1
                }
            }
        }
    };
    ExitCode::from(u8::try_from(code & 0xff).unwrap_or(u8::MAX))
}

fn init_shim_tracing() {
    init_tracing("info,libcontainer=warn,libcgroups=error")
}

/// Logs to a close-on-exec copy of stderr, filtered by RUNP_LOG when set. A copy, because
/// libcontainer's container init puts the container's own stderr on fd 2 before it execs, and
/// our diagnostics must not end up in the container's log.
fn init_tracing(default_filter: &str) {
    use std::os::fd::AsFd;
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let filter = std::env::var("RUNP_LOG")
        .ok()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default_filter));
    let writer = match std::io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => BoxMakeWriter::new(std::sync::Mutex::new(std::fs::File::from(fd))),
        Err(_) => BoxMakeWriter::new(std::io::stderr),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .init();
}
