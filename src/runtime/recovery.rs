//! Start-up recovery: load every record; re-adopt shims that are still alive (pid + start time,
//! then a pidfd), settle the ones that died while no runtime was watching.

use crate::jail;
use crate::runtime::ProcessRuntime;
use crate::runtime::error::Result;
use crate::runtime::monitor::{apply_exit, watch_container, watch_infra};
use crate::runtime::shim::{open_pidfd, signal};
use crate::runtime::state::{
    BadRecord, ContainerEntry, ContainerRecord, ContainerState, ProcessRecord, SandboxEntry,
    SandboxRecord, SandboxState, container_name_key, load_records, lock, sandbox_name_key,
};
use std::path::Path;
use std::sync::Arc;

impl ProcessRuntime {
    pub(crate) async fn recover(&self) -> Result<()> {
        let layout = &self.shared.layout;
        let (sandboxes, problems) =
            load_records::<SandboxRecord>(&layout.sandboxes(), "sandbox.json")?;
        for bad in problems {
            self.bad_record(bad, "sandbox").await;
        }
        for (path, record) in sandboxes {
            if record.infra.is_none() {
                stop_unrecorded_infra(&layout.sandbox_run_dir(&record.id));
            }
            let infra_alive = record
                .infra
                .and_then(|p| open_pidfd(p.shim_pid, p.shim_start_time));
            let entry = Arc::new(SandboxEntry::new(record.clone(), path));
            match infra_alive {
                Some(pidfd) => watch_infra(
                    self.shared.clone(),
                    entry.clone(),
                    pidfd,
                    self.shutdown.subscribe(),
                ),
                None if record.state == SandboxState::Ready => {
                    tracing::info!(sandbox = %record.id, "pod infra died while the runtime was away");
                    entry.update(|r| {
                        r.state = SandboxState::NotReady;
                        r.infra = None;
                    })?;
                }
                None => {}
            }
            let _ = self
                .shared
                .index
                .reserve_name(&sandbox_name_key(&record.metadata()), &record.id);
            self.shared.index.insert_sandbox(entry);
        }

        let (containers, problems) =
            load_records::<ContainerRecord>(&layout.containers(), "container.json")?;
        for bad in problems {
            self.bad_record(bad, "container").await;
        }
        let mut adopted = 0;
        for (path, record) in containers {
            let dir = layout.container_run_dir(&record.id);
            let entry = Arc::new(ContainerEntry::new(record.clone(), path));
            let record = adopt_interrupted_start(&entry, &dir)?;
            if record.state == ContainerState::Running {
                let shim = record
                    .process
                    .and_then(|p| open_pidfd(p.shim_pid, p.shim_start_time));
                match shim {
                    Some(shim_pidfd) => {
                        if let Some(p) = record.process
                            && let Some(fd) = open_pidfd(p.pid, p.pid_start_time)
                        {
                            lock(&self.shared.pidfds).insert(record.id.clone(), Arc::new(fd));
                        }
                        watch_container(
                            self.shared.clone(),
                            entry.clone(),
                            shim_pidfd,
                            dir,
                            self.shutdown.subscribe(),
                        );
                        adopted += 1;
                    }
                    None => {
                        let exit = jail::read_exit_record(&dir).unwrap_or_else(|e| {
                            tracing::warn!(container = %record.id, error = %e, "unreadable exit record");
                            None
                        });
                        let now = self.now();
                        entry.update(|r| apply_exit(r, exit.as_ref(), now))?;
                        tracing::info!(container = %record.id, code = entry.snapshot().exit_code, "container exited while the runtime was away");
                    }
                }
            }
            if let Ok(config) = record.config() {
                let meta = config.metadata.unwrap_or_default();
                let _ = self
                    .shared
                    .index
                    .reserve_name(&container_name_key(&record.sandbox_id, &meta), &record.id);
            }
            self.shared.index.insert_container(entry);
        }
        if adopted > 0 {
            tracing::info!(count = adopted, "re-adopted running containers");
        }
        self.clear_stray_run_dirs().await;
        Ok(())
    }

    /// Run dirs whose record dir is gone: a removal cut short between the two.
    async fn clear_stray_run_dirs(&self) {
        let layout = &self.shared.layout;
        for sandbox in [true, false] {
            let (runs, records) = match sandbox {
                true => (layout.sandbox_runs(), layout.sandboxes()),
                false => (layout.container_runs(), layout.containers()),
            };
            let Ok(entries) = std::fs::read_dir(&runs) else {
                continue;
            };
            for entry in entries.flatten() {
                let id = entry.file_name().to_string_lossy().into_owned();
                if !crate::runtime::ids::is_valid_id(&id) || records.join(&id).exists() {
                    continue;
                }
                tracing::info!(%id, dir = %entry.path().display(), "clearing a run dir without its record");
                if let Err(e) = self.clear_leftovers(&id, sandbox).await {
                    tracing::warn!(%id, error = %e, "cannot clear a run dir without its record");
                }
            }
        }
    }
}

impl ProcessRuntime {
    /// A directory without its record is what a RunPodSandbox/CreateContainer killed before
    /// the record was written left (nothing runs for it yet): cleared now. An unreadable record
    /// is reported by file and kept aside; removing its id clears it.
    async fn bad_record(&self, bad: BadRecord, kind: &str) {
        if bad.missing {
            tracing::info!(id = %bad.id, file = %bad.path.display(), "clearing a {kind} whose creation was cut short");
            if let Err(e) = self.clear_leftovers(&bad.id, kind == "sandbox").await {
                tracing::warn!(id = %bad.id, error = %e, "cannot clear the {kind} leftovers");
            }
            return;
        }
        tracing::error!(
            id = %bad.id,
            file = %bad.path.display(),
            error = %bad.message,
            "unreadable {kind} record: skipped (not listed); removing the {kind} by its id clears it"
        );
        lock(&self.shared.broken).insert(bad.id);
    }

    /// Removal of an id whose record was unreadable: clears it if it is one.
    pub(crate) async fn remove_broken(&self, id: &str, sandbox: bool) -> Result<()> {
        if !lock(&self.shared.broken).contains(id) {
            return Ok(());
        }
        if sandbox {
            for container in self.shared.index.containers_of(id) {
                self.remove_container_entry(&container).await?;
            }
        }
        self.clear_leftovers(id, sandbox).await?;
        // The record is gone, and with it any cgroup_parent it named: the default one at least.
        if sandbox
            && let Ok(Some(cgroup)) = self.cgroups.pod_cgroup("", id)
            && let Err(e) = self.cgroups.remove(&cgroup)
        {
            tracing::warn!(sandbox = %id, error = %e, "cannot remove the pod cgroup");
        }
        lock(&self.shared.broken).remove(id);
        tracing::info!(%id, "removed the state of an unreadable record");
        Ok(())
    }

    /// Kills what the shim's start record names, then releases mounts, lease and directories.
    async fn clear_leftovers(&self, id: &str, sandbox: bool) -> Result<()> {
        let layout = &self.shared.layout;
        if sandbox {
            kill_started(&layout.sandbox_run_dir(id));
            return self.teardown_sandbox(id).await;
        }
        kill_started(&layout.container_run_dir(id));
        self.teardown_container(id, "").await
    }
}

/// A StartContainer cut short after the shim started the process but before its report was
/// recorded leaves a Created record and a running (or since exited) process: the shim's start
/// record makes it Running, so it is watched and stopped like any other, never started twice.
fn adopt_interrupted_start(entry: &ContainerEntry, dir: &Path) -> Result<ContainerRecord> {
    let record = entry.snapshot();
    if record.state != ContainerState::Created {
        return Ok(record);
    }
    let started = match jail::read_start_record(dir) {
        Ok(Some(started)) => started,
        Ok(None) => return Ok(record),
        Err(e) => {
            tracing::warn!(container = %record.id, error = %e, "unreadable start record");
            return Ok(record);
        }
    };
    tracing::info!(container = %record.id, pid = started.pid, "adopting a container whose start was interrupted");
    entry.update(|r| {
        r.state = ContainerState::Running;
        r.started_at = started.started_at_ns;
        r.process = Some(ProcessRecord {
            shim_pid: started.shim_pid,
            shim_start_time: started.shim_start_time,
            pid: started.pid,
            pid_start_time: started.pid_start_time,
            started_at: started.started_at_ns,
        });
    })?;
    Ok(entry.snapshot())
}

/// A RunPodSandbox cut short after the infra shim reported but before the record got its pid:
/// the pod is not ready (its network may be half set up), so that infra is stopped and the
/// pod reported NotReady for its owner to remove.
fn stop_unrecorded_infra(dir: &Path) {
    if kill_started(dir) {
        tracing::info!(dir = %dir.display(), "stopped the infra of a RunPodSandbox cut short");
    }
}

/// SIGKILLs the process and the shim a shim's start record in `dir` names, when they still
/// live (pid and start time match); whether any did.
fn kill_started(dir: &Path) -> bool {
    let Ok(Some(started)) = jail::read_start_record(dir) else {
        return false;
    };
    let mut killed = false;
    for (pid, start) in [
        (started.pid, started.pid_start_time),
        (started.shim_pid, started.shim_start_time),
    ] {
        if let Some(fd) = open_pidfd(pid, start) {
            killed |= signal(&fd, libc::SIGKILL).is_ok();
        }
    }
    killed
}
