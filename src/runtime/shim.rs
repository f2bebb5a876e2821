//! Starting shims (jail layer) and holding on to processes by pidfd.

use crate::jail::{self, PodNamespacePaths, ShimReport, ShimSpec};
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::state::{ProcessRecord, lock, write_volatile_json};
use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// A started shim: its pidfd (readable once it exited) and what it reported.
pub(crate) struct StartedShim {
    pub shim_pidfd: OwnedFd,
    pub process: ProcessRecord,
    pub namespaces: Option<PodNamespacePaths>,
}

/// Opens a pidfd for `pid` and checks it is still the process that started at `start_time`
/// (the pidfd pins the process, so the check after opening is race-free).
pub(crate) fn open_pidfd(pid: i32, start_time: u64) -> Option<OwnedFd> {
    let fd = pidfd_open(Pid::from_raw(pid)?, PidfdFlags::empty()).ok()?;
    match jail::process_start_time(pid) {
        Ok(t) if t == start_time => Some(fd),
        _ => None,
    }
}

/// Sends `sig` through a pidfd; a process that is already gone is not an error.
pub(crate) fn signal(pidfd: &impl AsFd, sig: i32) -> Result<()> {
    let sig = Signal::from_named_raw(sig)
        .ok_or_else(|| RuntimeError::Internal(format!("unsupported signal {sig}")))?;
    match pidfd_send_signal(pidfd, sig) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(RuntimeError::Internal(format!(
            "sending signal {sig:?}: {e}"
        ))),
    }
}

impl ProcessRuntime {
    /// Writes `shim.json`, starts `runp shim <state_dir>` and waits for its report.
    pub(crate) async fn start_shim(&self, state_dir: &Path, spec: ShimSpec) -> Result<StartedShim> {
        // Not jail::write_shim_spec: that one fsyncs, and shim.json is read at once and never
        // again (see write_volatile).
        self.wait_for_earlier_shim(state_dir).await?;
        write_volatile_json(&state_dir.join(jail::SHIM_SPEC_FILE), &spec)?;
        let spawned = self.spawn_shim(state_dir).await?;
        let shim_pid = spawned.pid;
        let shim_pidfd = Pid::from_raw(shim_pid)
            .ok_or_else(|| RuntimeError::Internal(format!("bad shim pid {shim_pid}")))
            .and_then(|pid| {
                pidfd_open(pid, PidfdFlags::empty()).map_err(|e| {
                    RuntimeError::Internal(format!("the shim exited at once (pidfd_open: {e})"))
                })
            });
        let shim_start_time = jail::process_start_time(shim_pid).unwrap_or(0);
        let timeout = self.shim_start_timeout;
        let mut report_rx = spawned.report;
        let report = tokio::task::spawn_blocking(move || report_rx.recv_timeout(timeout))
            .await
            .map_err(|e| RuntimeError::Internal(format!("shim report task: {e}")))?;
        let shim_log = state_dir.join(jail::SHIM_LOG_FILE);
        let message = match report {
            Ok(ShimReport::Started {
                pid,
                pid_start_time,
                started_at_ns,
                namespaces,
            }) => {
                return Ok(StartedShim {
                    shim_pidfd: shim_pidfd.map_err(|e| failure(None, &shim_log, e.to_string()))?,
                    process: ProcessRecord {
                        shim_pid,
                        shim_start_time,
                        pid,
                        pid_start_time,
                        started_at: started_at_ns,
                    },
                    namespaces,
                });
            }
            // The shim undid its own start before reporting.
            Ok(ShimReport::Failed { message }) => {
                return Err(failure(shim_pidfd.as_ref().ok(), &shim_log, message));
            }
            Err(e) => format!("no start report from the shim: {e}"),
        };
        // Hung or dead without a word: whatever it started by now has no record anywhere.
        let error = failure(shim_pidfd.as_ref().ok(), &shim_log, message);
        if let Ok(fd) = shim_pidfd {
            wait_for_exit(fd).await;
        }
        let (dir, id) = (state_dir.to_path_buf(), spec.id.clone());
        let killed = tokio::task::spawn_blocking(move || {
            jail::kill_shim_leftovers(&dir, &spec.process, &id, shim_start_time)
        })
        .await
        .unwrap_or_default();
        if !killed.is_empty() {
            tracing::warn!(state = %state_dir.display(), ?killed, "killed what an unreported shim had started");
        }
        Err(error)
    }
}

impl ProcessRuntime {
    /// Starts the shim of `state_dir` through the zygote (started on first use, and again after
    /// it died), or by exec'ing `runp shim` when there is none.
    async fn spawn_shim(&self, state_dir: &Path) -> Result<jail::SpawnedShim> {
        if let Some(zygote) = self.zygote() {
            // On a blocking thread: a request waits for the zygote's answer, at most its 10 s
            // timeout when the zygote hangs, which would stall every task of this worker.
            let dir = state_dir.to_path_buf();
            let asked = zygote.clone();
            let spawned = tokio::task::spawn_blocking(move || asked.spawn_shim(&dir))
                .await
                .map_err(|e| RuntimeError::Internal(format!("shim zygote request: {e}")))?;
            match spawned {
                Ok(spawned) => return Ok(spawned),
                Err(jail::ZygoteError::Gone(e)) => {
                    tracing::warn!(error = %e, "the shim zygote is gone; a new one starts with the next shim");
                    let mut slot = lock(&self.zygote);
                    if slot
                        .as_ref()
                        .is_some_and(|z| std::sync::Arc::ptr_eq(z, &zygote))
                    {
                        *slot = None;
                    }
                }
                Err(jail::ZygoteError::Failed(e)) => return Err(e.into()),
            }
        }
        let spawned = jail::spawn_shim(&self.runp_exe, state_dir)?;
        // The shim's exit is observed through its pidfd; its wait status is of no interest.
        self.reaper.forget(spawned.pid);
        Ok(spawned)
    }

    /// The running zygote, started when there is none; `None` when it cannot be started.
    fn zygote(&self) -> Option<std::sync::Arc<jail::Zygote>> {
        let mut slot = lock(&self.zygote);
        if slot.is_none() {
            match jail::Zygote::start(&self.runp_exe) {
                Ok(zygote) => {
                    // Its exit is of no interest either: a new one is started on demand.
                    self.reaper.forget(zygote.pid());
                    *slot = Some(std::sync::Arc::new(zygote));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the shim zygote; exec'ing shims")
                }
            }
        }
        slot.clone()
    }
}

/// Waits (at most 10 s: SIGKILL was sent) until the process behind `pidfd` has exited.
async fn wait_for_exit(pidfd: OwnedFd) {
    let waited = tokio::task::spawn_blocking(move || {
        let mut fds = [rustix::event::PollFd::new(
            &pidfd,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&timeout))
    })
    .await;
    if !matches!(waited, Ok(Ok(1))) {
        tracing::warn!(?waited, "a killed shim did not exit");
    }
}

impl ProcessRuntime {
    /// A shim that an earlier runtime started (it was killed during StartContainer) may still
    /// be starting the same container: wait until it is gone (it stops its process when its
    /// report finds nobody), so two shims never start one container.
    async fn wait_for_earlier_shim(&self, state_dir: &Path) -> Result<()> {
        let path = state_dir.join(jail::SHIM_LOCK_FILE);
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(RuntimeError::io("opening", &path)(e)),
        };
        let deadline = std::time::Instant::now() + self.shim_start_timeout;
        loop {
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(()),
                Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => {
                    return Err(RuntimeError::Internal(format!(
                        "an earlier shim still holds {}: {e}",
                        path.display()
                    )));
                }
            }
        }
    }
}

/// Kills a shim that failed to start and builds an error with the end of its log.
fn failure(shim_pidfd: Option<&OwnedFd>, shim_log: &Path, message: String) -> RuntimeError {
    if let Some(fd) = shim_pidfd {
        let _ = signal(fd, libc::SIGKILL);
    }
    let log = std::fs::read_to_string(shim_log).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(5).collect();
    if tail.is_empty() {
        RuntimeError::Internal(message)
    } else {
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        RuntimeError::Internal(format!("{message} (shim log: {})", tail.join(" | ")))
    }
}
