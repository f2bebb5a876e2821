//! The one owner of `waitpid` in the process.
//!
//! A dedicated thread (with its own small tokio runtime, so it outlives whichever runtime started
//! it) listens for SIGCHLD and reaps every exited child with `waitpid(-1, WNOHANG)`. Statuses go
//! to registered waiters; a status nobody waits for yet is kept, because a child can exit before
//! its spawner gets to register (the race the Go agent had). Consequence: nothing else in the
//! process may wait for its own children (no `std::process::Command::status`, no
//! `tokio::process`).

use crate::runtime::state::lock;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Unclaimed statuses kept at most (oldest dropped first).
const MAX_UNCLAIMED: usize = 4096;

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Exited(i32),
    Signaled(i32),
}

impl ExitStatus {
    /// The shell convention: the exit code, or 128 + the signal.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Exited(code) => code,
            ExitStatus::Signaled(sig) => 128 + sig,
        }
    }
}

#[derive(Default)]
struct Table {
    waiters: HashMap<i32, oneshot::Sender<ExitStatus>>,
    unclaimed: HashMap<i32, ExitStatus>,
    order: VecDeque<i32>,
    ignored: HashSet<i32>,
}

impl Table {
    fn deliver(&mut self, pid: i32, status: ExitStatus) {
        if self.ignored.remove(&pid) {
            return;
        }
        if let Some(tx) = self.waiters.remove(&pid) {
            let _ = tx.send(status);
            return;
        }
        if self.unclaimed.insert(pid, status).is_none() {
            self.order.push_back(pid);
        }
        while self.unclaimed.len() > MAX_UNCLAIMED {
            match self.order.pop_front() {
                Some(old) => {
                    self.unclaimed.remove(&old);
                }
                None => break,
            }
        }
    }
}

struct Shared {
    table: Mutex<Table>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(stop) = lock(&self.stop).take() {
            let _ = stop.send(());
        }
    }
}

/// Handle to the process's reaper; clone freely. The thread stops when the last handle drops.
#[derive(Clone)]
pub struct Reaper {
    shared: Arc<Shared>,
}

impl Reaper {
    /// Starts the reaper thread. Start exactly one per process.
    pub fn start() -> std::io::Result<Reaper> {
        let (stop_tx, stop_rx) = oneshot::channel();
        let shared = Arc::new(Shared {
            table: Mutex::new(Table::default()),
            stop: Mutex::new(Some(stop_tx)),
        });
        let weak = Arc::downgrade(&shared);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
        std::thread::Builder::new()
            .name("runp-reaper".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    use tokio::signal::unix::{SignalKind, signal};
                    let mut sigchld = match signal(SignalKind::child()) {
                        Ok(s) => s,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    let mut stop_rx = stop_rx;
                    // A slow tick as well, in case a SIGCHLD arrived before the handler was set.
                    let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
                    loop {
                        let Some(shared) = weak.upgrade() else { return };
                        reap_all(&shared);
                        drop(shared);
                        tokio::select! {
                            _ = sigchld.recv() => {}
                            _ = tick.tick() => {}
                            _ = &mut stop_rx => return,
                        }
                    }
                });
            })?;
        ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("reaper thread died during start"))??;
        Ok(Reaper { shared })
    }

    /// Waits for `pid` to be reaped (returns at once if it already was). `None` if the reaper
    /// stopped.
    pub async fn wait(&self, pid: i32) -> Option<ExitStatus> {
        let rx = {
            let mut table = lock(&self.shared.table);
            if let Some(status) = table.unclaimed.remove(&pid) {
                table.order.retain(|p| *p != pid);
                return Some(status);
            }
            let (tx, rx) = oneshot::channel();
            table.waiters.insert(pid, tx);
            rx
        };
        // A child that died between our last pass and the registration is picked up here.
        reap_all(&self.shared);
        rx.await.ok()
    }

    /// Nobody will ask for `pid`'s status: drop it now or when it comes.
    pub fn forget(&self, pid: i32) {
        let mut table = lock(&self.shared.table);
        if table.unclaimed.remove(&pid).is_some() {
            table.order.retain(|p| *p != pid);
        } else {
            table.ignored.insert(pid);
        }
    }
}

fn reap_all(shared: &Shared) {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => {
                lock(&shared.table).deliver(pid.as_raw(), ExitStatus::Exited(code))
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) => {
                lock(&shared.table).deliver(pid.as_raw(), ExitStatus::Signaled(sig as i32))
            }
            Ok(WaitStatus::StillAlive) => return,
            // Stopped/continued children are not exits; keep looping for real ones.
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            // ECHILD: no children at all.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_keeps_unclaimed_and_honours_forget() {
        let mut t = Table::default();
        t.deliver(1, ExitStatus::Exited(3));
        assert_eq!(t.unclaimed.get(&1), Some(&ExitStatus::Exited(3)));
        t.ignored.insert(2);
        t.deliver(2, ExitStatus::Exited(0));
        assert!(!t.unclaimed.contains_key(&2));
        for pid in 10..(10 + MAX_UNCLAIMED as i32 + 5) {
            t.deliver(pid, ExitStatus::Signaled(9));
        }
        assert_eq!(t.unclaimed.len(), MAX_UNCLAIMED);
        assert!(!t.unclaimed.contains_key(&1), "oldest dropped first");
        assert_eq!(ExitStatus::Signaled(9).code(), 137);
        assert_eq!(ExitStatus::Exited(2).code(), 2);
    }
}
