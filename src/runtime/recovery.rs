//! Start-up recovery: load every record; re-adopt shims that are still alive (pid + start time,
//! then a pidfd), settle the ones that died while no runtime was watching.

use crate::jail;
use crate::runtime::ProcessRuntime;
use crate::runtime::error::Result;
use crate::runtime::monitor::{apply_exit, watch_container, watch_infra};
use crate::runtime::shim::open_pidfd;
use crate::runtime::state::{
    ContainerEntry, ContainerRecord, ContainerState, SandboxEntry, SandboxRecord, SandboxState,
    container_name_key, load_records, lock, sandbox_name_key,
};
use std::sync::Arc;

impl ProcessRuntime {
    pub(crate) async fn recover(&self) -> Result<()> {
        let layout = &self.shared.layout;
        let (sandboxes, problems) =
            load_records::<SandboxRecord>(&layout.sandboxes(), "sandbox.json")?;
        for p in problems {
            tracing::warn!(problem = %p, "skipping an unreadable sandbox record");
        }
        for (path, record) in sandboxes {
            let infra_alive = record
                .infra
                .and_then(|p| open_pidfd(p.shim_pid, p.shim_start_time));
            let entry = Arc::new(SandboxEntry::new(record.clone(), path));
            match infra_alive {
                Some(pidfd) => watch_infra(entry.clone(), pidfd, self.shutdown.subscribe()),
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
        for p in problems {
            tracing::warn!(problem = %p, "skipping an unreadable container record");
        }
        let mut adopted = 0;
        for (path, record) in containers {
            let entry = Arc::new(ContainerEntry::new(record.clone(), path));
            let dir = layout.container_dir(&record.id);
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
        Ok(())
    }
}
