//! The agent's clock, injected so tests drive time.
//!
//! Two readings: a monotonic [`Instant`] (tokio's, so `tokio::time::pause` freezes it) for periods
//! and deadlines, and a wall-clock [`SystemTime`] for everything compared with runtime timestamps
//! (container start/finish times are wall-clock nanoseconds in the CRI) and shown to users.
//! Decision logic never reads a clock itself: callers pass `now` in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic now (tokio's clock: paused in tests).
    fn now(&self) -> Instant;
    /// Wall-clock now.
    fn wall(&self) -> SystemTime;
}

/// The real clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock for tests: its wall time starts at a fixed point and moves exactly with tokio's
/// monotonic clock, so with `tokio::time::pause()` both readings advance only when the test
/// advances time (explicitly, or by tokio's auto-advance while every task sleeps).
#[derive(Clone, Debug)]
pub struct FakeClock {
    start: Instant,
    wall_start: SystemTime,
}

impl FakeClock {
    /// A clock whose wall time is `wall_start` now.
    pub fn starting_at(wall_start: SystemTime) -> Self {
        FakeClock {
            start: Instant::now(),
            wall_start,
        }
    }

    /// A clock starting at 2024-01-01T00:00:00Z.
    pub fn new() -> Self {
        Self::starting_at(UNIX_EPOCH + Duration::from_secs(1_704_067_200))
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall(&self) -> SystemTime {
        self.wall_start + Instant::now().saturating_duration_since(self.start)
    }
}

/// CRI timestamps are nanoseconds since the epoch; 0 means "not set".
pub fn from_unix_nanos(nanos: i64) -> Option<SystemTime> {
    (nanos > 0).then(|| UNIX_EPOCH + Duration::from_nanos(nanos as u64))
}

/// Nanoseconds since the epoch (0 for times before it).
pub fn to_unix_nanos(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn fake_wall_time_follows_paused_tokio_time() {
        let clock = FakeClock::new();
        let wall0 = clock.wall();
        let mono0 = clock.now();
        tokio::time::advance(Duration::from_secs(42)).await;
        assert_eq!(
            clock.wall().duration_since(wall0).unwrap(),
            Duration::from_secs(42)
        );
        assert_eq!(clock.now() - mono0, Duration::from_secs(42));
    }

    #[test]
    fn unix_nanos_round_trip_and_zero_is_unset() {
        assert_eq!(from_unix_nanos(0), None);
        assert_eq!(from_unix_nanos(-5), None);
        let t = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        assert_eq!(from_unix_nanos(to_unix_nanos(t)), Some(t));
    }
}
