//! ReopenContainerLog: the shim reopens the log on SIGUSR1 (after kubelet rotated it away); we
//! wait until the file exists again.

use crate::jail;
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::state::ContainerState;
use std::time::Duration;

const REOPEN_TIMEOUT: Duration = Duration::from_secs(10);

impl ProcessRuntime {
    pub(crate) async fn reopen_container_log_impl(&self, id: &str) -> Result<()> {
        let record = self.shared.index.container(id)?.snapshot();
        let (ContainerState::Running, Some(process)) = (record.state, record.process) else {
            return Err(RuntimeError::FailedPrecondition(format!(
                "container {} is not running",
                record.id
            )));
        };
        let Some(log_path) = record.log_path else {
            return Ok(());
        };
        jail::request_log_reopen(process.shim_pid)?;
        let deadline = tokio::time::Instant::now() + REOPEN_TIMEOUT;
        while !log_path.exists() {
            if tokio::time::Instant::now() >= deadline {
                return Err(RuntimeError::DeadlineExceeded(format!(
                    "the shim did not reopen {}",
                    log_path.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}
