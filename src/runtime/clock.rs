//! The injected clock: timestamps in CRI are nanoseconds since the epoch.

use std::sync::Arc;

pub trait Clock: Send + Sync + 'static {
    fn now_ns(&self) -> i64;
}

pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}

pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}
