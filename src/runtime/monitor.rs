//! Exit watchers: a shim's pidfd becomes readable when the shim exits (it outlives its process
//! and writes exit.json first). The same path serves shims we started and shims re-adopted
//! after a restart (which are not our children).

use crate::cri::api;
use crate::jail::{self, ExitRecord};
use crate::runtime::Shared;
use crate::runtime::shim::signal;
use crate::runtime::state::{
    ContainerEntry, ContainerRecord, ContainerState, SandboxEntry, SandboxState, lock,
};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Exit code and reason when a shim died without writing an exit record.
pub const UNKNOWN_EXIT_CODE: i32 = 255;

/// Resolves when the process behind `pidfd` has exited; `false` if the runtime shut down first.
async fn exited(pidfd: OwnedFd, mut shutdown: tokio::sync::watch::Receiver<()>) -> bool {
    // Deprecated because a borrowed fd could be closed while registered; here the AsyncFd owns
    // the OwnedFd, which is the sound case.
    #[allow(deprecated)]
    let afd = match AsyncFd::with_interest(pidfd, Interest::READABLE) {
        Ok(afd) => afd,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch a pidfd; treating the process as exited");
            return true;
        }
    };
    tokio::select! {
        ready = afd.readable() => {
            if let Err(e) = ready {
                tracing::warn!(error = %e, "pidfd watch failed; treating the process as exited");
            }
            true
        }
        _ = shutdown.changed() => false,
    }
}

/// Applies an exit record (or its absence) to a container record.
pub fn apply_exit(record: &mut ContainerRecord, exit: Option<&ExitRecord>, now: i64) {
    record.state = ContainerState::Exited;
    match exit {
        Some(exit) => {
            record.exit_code = exit.exit_code;
            record.finished_at = exit.finished_at_ns;
            record.reason = if exit.oom_killed {
                "OOMKilled"
            } else if exit.exit_code == 0 {
                "Completed"
            } else {
                "Error"
            }
            .to_string();
            // containerd leaves the message empty for an exit, signalled or not: kubelet
            // prefixes a non-empty one to the container's termination message.
            record.message = String::new();
        }
        None => {
            record.exit_code = UNKNOWN_EXIT_CODE;
            record.finished_at = now;
            record.reason = "Unknown".to_string();
            record.message = "the container's shim exited without an exit record".to_string();
        }
    }
}

pub(crate) fn container_event(
    record: &ContainerRecord,
    kind: api::ContainerEventType,
    shared: &Shared,
) -> api::ContainerEventResponse {
    let sandbox = shared
        .index
        .sandbox(&record.sandbox_id)
        .ok()
        .map(|s| crate::runtime::sandbox::status::sandbox_status(&s.snapshot()));
    api::ContainerEventResponse {
        container_id: record.id.clone(),
        container_event_type: kind as i32,
        created_at: shared.clock.now_ns(),
        pod_sandbox_status: sandbox,
        containers_statuses: vec![crate::runtime::container::status::container_status(record)],
    }
}

/// Watches a container's shim; on exit records the result and publishes CONTAINER_STOPPED.
pub(crate) fn watch_container(
    shared: Arc<Shared>,
    entry: Arc<ContainerEntry>,
    shim_pidfd: OwnedFd,
    state_dir: PathBuf,
    shutdown: tokio::sync::watch::Receiver<()>,
) {
    tokio::spawn(async move {
        if !exited(shim_pidfd, shutdown).await {
            return;
        }
        let exit = match jail::read_exit_record(&state_dir) {
            Ok(exit) => exit,
            Err(e) => {
                tracing::warn!(dir = %state_dir.display(), error = %e, "unreadable exit record");
                None
            }
        };
        let id = entry.snapshot().id;
        // A shim that died abnormally may leave its process behind: kill it.
        if let Some(pidfd) = lock(&shared.pidfds).remove(&id)
            && exit.is_none()
        {
            let _ = signal(&*pidfd, libc::SIGKILL);
        }
        let now = shared.clock.now_ns();
        match entry.update(|r| apply_exit(r, exit.as_ref(), now)) {
            Ok(()) => {
                tracing::info!(container = %id, code = entry.snapshot().exit_code, "container exited")
            }
            Err(e) => {
                tracing::error!(container = %id, error = %e, "cannot record a container exit")
            }
        }
        let event = container_event(
            &entry.snapshot(),
            api::ContainerEventType::ContainerStoppedEvent,
            &shared,
        );
        shared.events.publish(event);
    });
}

/// Watches a pod's infra shim: when it exits the sandbox is no longer ready, and a
/// CONTAINER_STOPPED event for the sandbox id (as containerd's sandbox events) tells an evented
/// PLEG at once.
pub(crate) fn watch_infra(
    shared: Arc<Shared>,
    entry: Arc<SandboxEntry>,
    shim_pidfd: OwnedFd,
    shutdown: tokio::sync::watch::Receiver<()>,
) {
    tokio::spawn(async move {
        if !exited(shim_pidfd, shutdown).await {
            return;
        }
        let id = entry.snapshot().id;
        tracing::info!(sandbox = %id, "pod infra process exited");
        if let Err(e) = entry.update(|r| {
            r.state = SandboxState::NotReady;
            r.infra = None;
        }) {
            tracing::error!(sandbox = %id, error = %e, "cannot record the infra exit");
        }
        shared.events.publish(api::ContainerEventResponse {
            container_id: id,
            container_event_type: api::ContainerEventType::ContainerStoppedEvent as i32,
            created_at: shared.clock.now_ns(),
            pod_sandbox_status: Some(crate::runtime::sandbox::status::sandbox_status(
                &entry.snapshot(),
            )),
            containers_statuses: Vec::new(),
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ContainerRecord {
        ContainerRecord {
            id: "c".into(),
            sandbox_id: "s".into(),
            config: vec![],
            image: String::new(),
            image_id: String::new(),
            state: ContainerState::Running,
            created_at: 1,
            started_at: 2,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            process: None,
            log_path: None,
            stop_signal: 15,
            rootfs: PathBuf::new(),
            cgroups_path: None,
            user: Default::default(),
            resources: vec![],
            listing: Default::default(),
        }
    }

    #[test]
    fn exit_reasons() {
        let exit = |code, signal, oom| ExitRecord {
            pid: 1,
            exit_code: code,
            signal,
            oom_killed: oom,
            finished_at_ns: 77,
        };
        let cases = [
            (Some(exit(0, None, false)), 0, "Completed"),
            (Some(exit(3, None, false)), 3, "Error"),
            (Some(exit(137, Some(9), false)), 137, "Error"),
            (Some(exit(137, Some(9), true)), 137, "OOMKilled"),
            (None, UNKNOWN_EXIT_CODE, "Unknown"),
        ];
        for (exit, code, reason) in cases {
            let mut r = record();
            apply_exit(&mut r, exit.as_ref(), 99);
            assert_eq!(r.state, ContainerState::Exited);
            assert_eq!((r.exit_code, r.reason.as_str()), (code, reason));
            assert_eq!(
                r.message.is_empty(),
                exit.is_some(),
                "{reason}: {:?}",
                r.message
            );
            assert_eq!(r.finished_at, if exit.is_some() { 77 } else { 99 });
        }
    }
}
