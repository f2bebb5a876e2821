//! The idle clock of one upgraded connection: the kubelet's streaming connections (spdystream
//! and wsstream) push a read/write deadline forward on every frame, and a connection with no
//! frame in either direction for the stream idle timeout is closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::task::{AbortHandle, JoinHandle};

/// Time of the last frame read or written.
pub struct IdleClock {
    epoch: Instant,
    last_ms: AtomicU64,
}

impl Default for IdleClock {
    fn default() -> Self {
        IdleClock {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl IdleClock {
    pub fn touch(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(now, Ordering::Relaxed);
    }

    pub fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

/// Aborts `tasks` and calls `on_idle` once `clock` saw no frame for `timeout` (zero = never).
pub fn spawn_watchdog(
    clock: Arc<IdleClock>,
    timeout: Duration,
    tasks: Vec<AbortHandle>,
    on_idle: impl FnOnce() + Send + 'static,
) -> Option<JoinHandle<()>> {
    if timeout.is_zero() {
        return None;
    }
    Some(tokio::spawn(async move {
        loop {
            let idle = clock.idle_for();
            if idle >= timeout {
                tracing::debug!(?timeout, "streaming connection idle; closing it");
                tasks.iter().for_each(AbortHandle::abort);
                on_idle();
                return;
            }
            tokio::time::sleep(timeout - idle).await;
        }
    }))
}
