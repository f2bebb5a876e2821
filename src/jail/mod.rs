//! Synchronous process sandboxing: the only module with `unsafe` and `fork`.
//!
//! Processes are started by re-executing the runp binary with a hidden subcommand
//! (`runp shim <state_dir>`, `runp exec-helper`, `runp zygote`) that `src/cli/internal.rs`
//! dispatches here before any tokio runtime exists; the runtime's shims are forked by its
//! zygote ([`Zygote`]), which saves the exec of each. Spawn functions never `waitpid`: they
//! return the child's pid and a typed [`channel`]; the caller's single reaper reaps.
//!
//! Files a shim uses inside its state dir: `shim.json` ([`ShimSpec`], written by the runtime),
//! `shim.log` (the shim's own diagnostics), `exit.json` ([`ExitRecord`], written atomically by the
//! shim once it reaped the process).

pub mod attach;
pub mod channel;
mod console;
mod error;
mod exec;
mod executor;
mod fds;
mod infra;
mod leftovers;
mod namespaces;
mod netns;
mod proc;
mod propagation;
mod shim;
mod spawn;
mod zygote;

pub use console::{recv_fd, set_window_size};
pub use error::JailError;
pub use exec::run_exec_helper;
pub use leftovers::kill_shim_leftovers;
pub use namespaces::is_namespace_file;
pub use namespaces::release_pod_namespaces;
pub use netns::{connect_in_netns, in_netns};
pub use proc::{
    exit_code_from_wait_status, now_unix_nanos, process_start_time, read_exit_record,
    read_start_record, request_log_reopen,
};
pub use propagation::{PropagationError, apply_mount_propagation};
pub use shim::logs::{CRI_MAX_LINE, Stream, format_cri_line};
pub use shim::run_shim;
pub use spawn::{spawn_exec, spawn_program, spawn_shim};
pub use zygote::{Zygote, ZygoteError, is_zygote_cmdline, run_zygote};

use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// File names inside a shim's state dir.
pub const SHIM_SPEC_FILE: &str = "shim.json";
pub const SHIM_LOG_FILE: &str = "shim.log";
/// flock()ed by the shim for its whole life.
pub const SHIM_LOCK_FILE: &str = "shim.lock";
pub const EXIT_RECORD_FILE: &str = "exit.json";
pub const START_RECORD_FILE: &str = "started.json";

/// Written by the runtime to `<state_dir>/shim.json`; `runp shim <state_dir>` reads it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimSpec {
    pub id: String,
    pub process: ShimProcess,
    /// CRI log file; `None` discards the output.
    pub log_path: Option<PathBuf>,
    /// The live log's size at which the shim stops copying output until the log is rotated
    /// (the container's writes then block); `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_max_size: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShimProcess {
    /// An OCI bundle (`<bundle>/config.json`, rootfs already prepared) run with libcontainer.
    /// libcontainer state lives in `libcontainer_root` under container id `id`.
    Container {
        bundle: PathBuf,
        libcontainer_root: PathBuf,
        #[serde(default)]
        stdio: ContainerStdio,
    },
    /// The pod infra ("pause") process. Creates the requested namespaces (net/ipc/uts; sets the
    /// hostname, brings `lo` up), bind-mounts them as files under `ns_dir` (ns_dir/net, ipc, uts,
    /// pid), then runs a pid-1 pause loop in a NEW pid namespace that reaps orphans.
    Infra {
        ns_dir: PathBuf,
        new_net: bool,
        new_ipc: bool,
        new_uts: bool,
        hostname: Option<String>,
    },
}

/// The container's stdin and terminal (CRI `ContainerConfig.stdin`, `stdin_once`, `tty`). The
/// shim owns them and serves them, with the output, on its attach socket
/// ([`attach::ATTACH_SOCKET_FILE`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerStdio {
    /// stdin is a pipe the shim holds (else /dev/null).
    pub stdin: bool,
    /// Close the container's stdin when the first attached client's stdin ends (not with tty).
    pub stdin_once: bool,
    /// The container runs on a terminal (OCI `process.terminal`); its output is logged as
    /// stdout.
    pub tty: bool,
}

/// The namespaces of a pod, as files containers join through OCI `linux.namespaces[].path`.
/// Each is a bind mount of `/proc/<infra>/ns/<kind>` (stable even if the infra pid is reused);
/// `None` when the pod did not ask for that namespace (the host's is used).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodNamespacePaths {
    pub net: Option<PathBuf>,
    pub ipc: Option<PathBuf>,
    pub uts: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShimReport {
    Started {
        pid: i32,
        /// `/proc/<pid>/stat` field 22 (clock ticks since boot), for pid-reuse checks.
        pid_start_time: u64,
        started_at_ns: i64,
        /// Infra only.
        namespaces: Option<PodNamespacePaths>,
    },
    Failed {
        message: String,
    },
}

/// Written atomically by the shim to `<state_dir>/started.json` once its process runs, before it
/// reports: a runtime killed before it received the report finds the process here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartRecord {
    pub shim_pid: i32,
    pub shim_start_time: u64,
    pub pid: i32,
    pub pid_start_time: u64,
    pub started_at_ns: i64,
}

/// Written atomically by the shim to `<state_dir>/exit.json` after it reaped the process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub pid: i32,
    /// 128+signal for signal deaths.
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub oom_killed: bool,
    pub finished_at_ns: i64,
}

/// Writes `<state_dir>/shim.json` atomically (what `runp shim <state_dir>` reads).
pub fn write_shim_spec(state_dir: &Path, spec: &ShimSpec) -> Result<(), JailError> {
    let path = state_dir.join(SHIM_SPEC_FILE);
    crate::util::atomic_file::write_json_atomic(&path, spec)
        .map_err(|source| JailError::io(format!("cannot write {}", path.display()), source))
}

pub struct SpawnedShim {
    pub pid: i32,
    pub report: channel::Receiver<ShimReport>,
}

/// ExecSync / exec probes: a process inside a running container (its namespaces, cgroup, caps,
/// user), via libcontainer's tenant builder, started by `runp exec-helper`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecSpec {
    pub container_id: String,
    pub libcontainer_root: PathBuf,
    pub args: Vec<String>,
    /// `KEY=value` entries, added to (and overriding) the container's environment.
    pub env: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// Run on a terminal (the container's devpts), passed back on [`SpawnedExec::console`].
    pub tty: bool,
    /// The command's stdin is a pipe ([`SpawnedExec::stdin`]) instead of /dev/null. With `tty`
    /// the terminal is its stdin.
    #[serde(default)]
    pub stdin: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecReport {
    Started { pid: i32 },
    Failed { message: String },
}

/// A started helper program; its pid is the caller's reaper's to wait for.
pub struct SpawnedProgram {
    pub pid: i32,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

pub struct SpawnedExec {
    /// Exits with the command's exit code (128+signal for signals); SIGKILLing it kills the
    /// command too.
    pub helper_pid: i32,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// The write end of the command's stdin when [`ExecSpec::stdin`] (without a tty).
    pub stdin: Option<OwnedFd>,
    /// With [`ExecSpec::tty`]: the helper sends the terminal master here (see [`recv_fd`])
    /// before it reports `Started`.
    pub console: Option<OwnedFd>,
    pub report: channel::Receiver<ExecReport>,
}
