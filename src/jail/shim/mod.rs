//! `runp shim <state_dir>`: supervises one container (or pod infra) process for its whole life,
//! independently of the agent.
//!
//! The shim runs in its own session and ignores SIGHUP/SIGPIPE/SIGTERM/SIGINT, so the agent
//! dying or being restarted never takes pods down. It sends exactly one [`ShimReport`] on fd 3,
//! copies the container's stdout/stderr into the CRI log (reopened on SIGUSR1), reaps the
//! process, removes libcontainer's state and cgroup, writes `exit.json` last and exits 0.

mod attach;
mod container;
pub mod logs;
mod oom;
mod supervise;

use super::channel::Sender;
use super::fds::{close_fds_above, take_inherited_fd};
use super::infra::start_infra;
use super::spawn::SHIM_REPORT_FD;
use super::{
    EXIT_RECORD_FILE, ExitRecord, JailError, SHIM_LOCK_FILE, SHIM_LOG_FILE, SHIM_SPEC_FILE,
    START_RECORD_FILE, ShimProcess, ShimReport, ShimSpec, StartRecord, exit_code_from_wait_status,
    now_unix_nanos, process_start_time,
};
use logs::CriLog;
use nix::sys::signal::{SigHandler, SigSet, Signal, signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use oom::OomCounter;
use std::path::Path;
use tracing::{error, info, warn};

/// Entry point of `runp shim <state_dir>`; returns the process exit code. `init_logging` runs
/// once inherited fds are sorted out (a logger opened before would have its fd closed).
pub fn run_shim(state_dir: &Path, init_logging: impl FnOnce()) -> i32 {
    let report = match take_inherited_fd(SHIM_REPORT_FD) {
        Ok(fd) => fd,
        Err(err) => {
            eprintln!("runp shim: {err} (the shim is started by the runtime, not by hand)");
            return 2;
        }
    };
    close_fds_above(SHIM_REPORT_FD);
    init_logging();
    let mut report = Some(Sender::<ShimReport>::from_owned_fd(report));
    match shim_main(state_dir, &mut report) {
        Ok(()) => 0,
        Err(err) => {
            error!(error = %err, "shim failed");
            if let Some(mut report) = report.take() {
                let _ = report.send(&ShimReport::Failed {
                    message: err.to_string(),
                });
            }
            1
        }
    }
}

/// What the shim supervises once it is running.
enum Supervised {
    Container {
        container: Box<libcontainer::container::Container>,
        oom: Option<OomCounter>,
    },
    Infra,
}

fn shim_main(state_dir: &Path, report: &mut Option<Sender<ShimReport>>) -> Result<(), JailError> {
    let state_dir = std::path::absolute(state_dir)
        .map_err(|err| JailError::io("cannot resolve the state dir", err))?;
    // Do not pin whatever directory we were started in.
    nix::unistd::chdir("/").map_err(|err| JailError::sys("chdir /", err))?;
    let mut signals = setup_signals()?;
    // Held until the shim exits: a runtime restarted mid-start waits on it before starting
    // the container again (see `wait_for_earlier_shim`).
    let _lock = lock_state_dir(&state_dir)?;
    let spec = read_spec(&state_dir)?;
    info!(id = %spec.id, "shim starting");
    let mut log = CriLog::open(spec.log_path.as_deref(), spec.log_max_size).map_err(|err| {
        let path = spec.log_path.as_deref().unwrap_or(Path::new("")).display();
        JailError::io(format!("cannot open the container log {path}"), err)
    })?;

    let (pid, outputs, namespaces, mut supervised, attach) = match &spec.process {
        ShimProcess::Container {
            bundle,
            libcontainer_root,
            stdio,
        } => {
            let container::RunningContainer {
                mut container,
                pid,
                outputs,
                stdin,
                terminal,
            } = container::start_container(
                &spec.id,
                bundle,
                libcontainer_root,
                &state_dir,
                *stdio,
                &state_dir.join(SHIM_LOG_FILE),
            )?;
            // Listening before "started" is reported: a running container can be attached.
            let attach = match attach::AttachServer::listen(&state_dir, *stdio, stdin, terminal) {
                Ok(attach) => attach,
                Err(err) => {
                    let _ =
                        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
                    let _ = nix::sys::wait::waitpid(
                        nix::unistd::Pid::from_raw(pid),
                        Some(nix::sys::wait::WaitPidFlag::__WALL),
                    );
                    container::delete_container(&mut container);
                    return Err(err);
                }
            };
            let supervised = Supervised::Container {
                container: Box::new(container),
                oom: OomCounter::for_process(pid),
            };
            (pid, outputs, None, supervised, Some(attach))
        }
        ShimProcess::Infra {
            ns_dir,
            new_net,
            new_ipc,
            new_uts,
            hostname,
        } => {
            let infra = start_infra(ns_dir, *new_net, *new_ipc, *new_uts, hostname.as_deref())?;
            (
                infra.pid,
                Vec::new(),
                Some(infra.namespaces),
                Supervised::Infra,
                None,
            )
        }
    };

    let (pid_start_time, started_at_ns) = (process_start_time(pid)?, now_unix_nanos());
    write_start_record(&state_dir, pid, pid_start_time, started_at_ns);
    let started = ShimReport::Started {
        pid,
        pid_start_time,
        started_at_ns,
        namespaces,
    };
    if let Some(mut sender) = report.take()
        && let Err(err) = sender.send(&started)
    {
        // The runtime died during the start: no record names this process and a restarted
        // runtime may start the container again, so it must not run (nor its libcontainer
        // state stay behind).
        warn!(%err, "nobody received the start report; stopping the process");
        let child = nix::unistd::Pid::from_raw(pid);
        let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(child, Some(nix::sys::wait::WaitPidFlag::__WALL));
        if let Supervised::Container { container, .. } = &mut supervised {
            container::delete_container(container);
        }
        let _ = std::fs::remove_file(state_dir.join(START_RECORD_FILE));
        return Err(JailError::Channel(err));
    }
    info!(pid, "process started");

    let status = supervise::supervise(pid, outputs, &mut log, &mut signals, attach)?;
    let (exit_code, signal) = exit_code_from_wait_status(status).unwrap_or((255, None));
    let mut oom_killed = false;
    if let Supervised::Container { container, oom } = &mut supervised {
        oom_killed =
            signal == Some(Signal::SIGKILL as i32) && oom.as_ref().is_some_and(|o| o.fired());
        container::delete_container(container);
    }
    let record = ExitRecord {
        pid,
        exit_code,
        signal,
        oom_killed,
        finished_at_ns: now_unix_nanos(),
    };
    info!(exit_code, ?signal, oom_killed, "process exited");
    let path = state_dir.join(EXIT_RECORD_FILE);
    crate::util::atomic_file::write_json_atomic(&path, &record)
        .map_err(|err| JailError::io(format!("cannot write {}", path.display()), err))
}

fn read_spec(state_dir: &Path) -> Result<ShimSpec, JailError> {
    let path = state_dir.join(SHIM_SPEC_FILE);
    let bytes = std::fs::read(&path)
        .map_err(|err| JailError::io(format!("cannot read {}", path.display()), err))?;
    serde_json::from_slice(&bytes)
        .map_err(|err| JailError::InvalidSpec(format!("{}: {err}", path.display())))
}

/// Only SIGKILL ends the shim early; SIGCHLD and SIGUSR1 (log reopen) are read from a signalfd.
/// The container process gets default signal handling back right before exec (see
/// `executor.rs`).
fn setup_signals() -> Result<SignalFd, JailError> {
    for sig in [
        Signal::SIGHUP,
        Signal::SIGPIPE,
        Signal::SIGTERM,
        Signal::SIGINT,
    ] {
        // SAFETY: SIG_IGN installs no handler code.
        unsafe { signal(sig, SigHandler::SigIgn) }
            .map_err(|err| JailError::sys(format!("cannot ignore {sig}"), err))?;
    }
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.add(Signal::SIGUSR1);
    mask.thread_block()
        .map_err(|err| JailError::sys("cannot block signals", err))?;
    SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|err| JailError::sys("signalfd", err))
}

/// Leaves `started.json` for a runtime that dies before our report reaches it (see
/// [`StartRecord`]). Failing to write it only loses that safety net.
fn write_start_record(state_dir: &Path, pid: i32, pid_start_time: u64, started_at_ns: i64) {
    let shim_pid = std::process::id() as i32;
    let record = StartRecord {
        shim_pid,
        shim_start_time: process_start_time(shim_pid).unwrap_or(0),
        pid,
        pid_start_time,
        started_at_ns,
    };
    let path = state_dir.join(START_RECORD_FILE);
    // Renamed into place (never read half-written) but not fsynced: after a power loss the
    // process is gone anyway, and the fsync would delay every start.
    let tmp = state_dir.join(format!(".{START_RECORD_FILE}.tmp"));
    let written = serde_json::to_vec(&record)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(err) = written {
        warn!(%err, path = %path.display(), "cannot write the start record");
    }
}

fn lock_state_dir(state_dir: &Path) -> Result<std::fs::File, JailError> {
    let path = state_dir.join(SHIM_LOCK_FILE);
    let file = std::fs::File::create(&path)
        .map_err(|err| JailError::io(format!("cannot create {}", path.display()), err))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|err| JailError::io(format!("cannot lock {}", path.display()), err.into()))?;
    Ok(file)
}
