//! Restart and image-pull back-off (pure): 10 s doubling to 300 s per (pod uid, container name,
//! image), forgotten once the thing ran cleanly for twice the cap — kubelet's
//! `flowcontrol.Backoff` as its `doBackOff` and image puller use it.
//!
//! Model: an entry holds the delay to wait after the NEXT failure. A failure at `failed_at` may
//! be retried at `failed_at + delay`. Without an entry (never retried, or the last retry was
//! more than `2 × max` before the failure: the container ran cleanly that long) there is
//! nothing to wait for; the first retry creates the entry at `initial` and each later retry
//! doubles it (capped). So a container crashing in a loop is restarted at once, then 10, 20,
//! 40, 80, 160, 300, 300 … seconds after each death, as kubelet does (`IsInBackOffSince` is
//! false for an unknown key, `Next` then starts it at the initial duration).
//!
//! A failed image pull is recorded when it fails ([`Backoff::record_failure`], kubelet calls
//! `Next` on the pull error), so pulls wait 10, 20, 40 … seconds, the first one included.
//!
//! Times are wall-clock: failures are timestamped by the runtime (`finishedAt`).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// What a back-off entry is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BackoffKey {
    pub pod_uid: String,
    pub container: String,
    pub image: String,
}

impl BackoffKey {
    pub fn new(pod_uid: &str, container: &str, image: &str) -> Self {
        BackoffKey {
            pod_uid: pod_uid.to_string(),
            container: container.to_string(),
            image: image.to_string(),
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    delay: Duration,
    last_retry: SystemTime,
    last_failure: Option<SystemTime>,
}

/// Back-off table; one for container restarts, another for image pulls.
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<BackoffKey, Entry>,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max: max.max(initial),
            entries: HashMap::new(),
        }
    }

    /// The delay that applies to a failure at `failed_at`.
    pub fn delay_for(&self, key: &BackoffKey, failed_at: SystemTime) -> Duration {
        match self.entries.get(key) {
            Some(entry) if !self.expired(entry, failed_at) => entry.delay,
            _ => Duration::ZERO,
        }
    }

    /// Earliest time a failure at `failed_at` may be retried.
    pub fn retry_at(&self, key: &BackoffKey, failed_at: SystemTime) -> SystemTime {
        failed_at + self.delay_for(key, failed_at)
    }

    /// `Some(remaining)` while a failure at `failed_at` must not be retried yet.
    pub fn remaining(
        &self,
        key: &BackoffKey,
        failed_at: SystemTime,
        now: SystemTime,
    ) -> Option<Duration> {
        self.retry_at(key, failed_at)
            .duration_since(now)
            .ok()
            .filter(|d| !d.is_zero())
    }

    /// The failure at `failed_at` is retried at `now`: the next failure waits twice as long
    /// as this one did (capped).
    pub fn record_retry(&mut self, key: &BackoffKey, failed_at: SystemTime, now: SystemTime) {
        let current = self.delay_for(key, failed_at);
        let next = if current.is_zero() {
            self.initial
        } else {
            current.saturating_mul(2).min(self.max)
        };
        let last_failure = self.entries.get(key).and_then(|e| e.last_failure);
        self.entries.insert(
            key.clone(),
            Entry {
                delay: next,
                last_retry: now,
                last_failure,
            },
        );
    }

    /// Remembers a failure the runtime does not timestamp for us (a failed image pull).
    /// Unlike a container's death, the first such failure already waits `initial`.
    pub fn record_failure(&mut self, key: &BackoffKey, at: SystemTime) {
        let fresh = Entry {
            delay: self.initial,
            last_retry: at,
            last_failure: Some(at),
        };
        let live = self.entries.get(key).is_some_and(|e| !self.expired(e, at));
        match self.entries.get_mut(key) {
            Some(entry) if live => entry.last_failure = Some(at),
            _ => {
                self.entries.insert(key.clone(), fresh);
            }
        }
    }

    /// The failure recorded with [`Backoff::record_failure`], if any.
    pub fn last_failure(&self, key: &BackoffKey) -> Option<SystemTime> {
        self.entries.get(key).and_then(|e| e.last_failure)
    }

    /// Time until the earliest recorded failure may be retried (pull back-offs).
    pub fn next_retry(&self, now: SystemTime) -> Option<Duration> {
        self.entries
            .iter()
            .filter_map(|(key, entry)| {
                let failed_at = entry.last_failure?;
                self.remaining(key, failed_at, now)
            })
            .min()
    }

    /// Forgets a key (the thing succeeded, e.g. the image was pulled).
    pub fn reset(&mut self, key: &BackoffKey) {
        self.entries.remove(key);
    }

    /// Drops entries whose last retry is older than `2 × max` (they would be ignored anyway),
    /// and every entry of pods not in `keep_pod`.
    pub fn gc(&mut self, now: SystemTime, keep_pod: impl Fn(&str) -> bool) {
        let horizon = self.max.saturating_mul(2);
        self.entries.retain(|key, entry| {
            keep_pod(&key.pod_uid)
                && now
                    .duration_since(entry.last_retry)
                    .map(|age| age <= horizon)
                    .unwrap_or(true)
        });
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn expired(&self, entry: &Entry, at: SystemTime) -> bool {
        at.duration_since(entry.last_retry)
            .map(|ran| ran > self.max.saturating_mul(2))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn key() -> BackoffKey {
        BackoffKey::new("uid", "app", "busybox")
    }

    fn table() -> Backoff {
        Backoff::new(Duration::from_secs(10), Duration::from_secs(300))
    }

    /// A container that dies `run` seconds after each restart: the delays it waits.
    #[test]
    fn crash_loop_delays_double_up_to_the_cap() {
        struct Case {
            name: &'static str,
            run_secs: u64,
            want: &'static [u64],
        }
        let cases = [
            Case {
                name: "instant crash",
                run_secs: 0,
                want: &[0, 10, 20, 40, 80, 160, 300, 300, 300],
            },
            Case {
                name: "runs a minute each time",
                run_secs: 60,
                want: &[0, 10, 20, 40, 80, 160, 300, 300],
            },
            Case {
                name: "runs longer than twice the cap: always restarted at once",
                run_secs: 601,
                want: &[0, 0, 0, 0],
            },
            Case {
                name: "runs exactly twice the cap: not yet clean",
                run_secs: 600,
                want: &[0, 10, 20, 40],
            },
        ];
        for case in cases {
            let mut backoff = table();
            let mut now = t(0);
            let mut got = Vec::new();
            for _ in case.want {
                now += Duration::from_secs(case.run_secs);
                let failed_at = now;
                let retry = backoff.retry_at(&key(), failed_at);
                let delay = retry.duration_since(failed_at).unwrap();
                got.push(delay.as_secs());
                assert!(backoff.remaining(&key(), failed_at, retry).is_none());
                if !delay.is_zero() {
                    let early = retry - Duration::from_secs(1);
                    assert!(backoff.remaining(&key(), failed_at, early).is_some());
                }
                now = retry;
                backoff.record_retry(&key(), failed_at, now);
            }
            assert_eq!(got, case.want, "{}", case.name);
        }
    }

    #[test]
    fn remaining_counts_down_from_the_failure() {
        let mut backoff = table();
        let failed = t(100);
        assert_eq!(backoff.remaining(&key(), failed, t(100)), None, "no entry");
        backoff.record_retry(&key(), t(50), t(50));
        let cases = [
            (t(100), Some(10)),
            (t(105), Some(5)),
            (t(110), None),
            (t(500), None),
        ];
        for (now, want) in cases {
            let got = backoff.remaining(&key(), failed, now).map(|d| d.as_secs());
            assert_eq!(got, want, "now={now:?}");
        }
    }

    #[test]
    fn keys_are_independent_and_reset_forgets() {
        let mut backoff = table();
        let other = BackoffKey::new("uid", "app", "busybox:2");
        backoff.record_retry(&key(), t(0), t(0));
        backoff.record_retry(&key(), t(1), t(1));
        assert_eq!(backoff.delay_for(&key(), t(2)), Duration::from_secs(20));
        assert_eq!(backoff.delay_for(&other, t(2)), Duration::ZERO);
        backoff.reset(&key());
        assert_eq!(backoff.delay_for(&key(), t(2)), Duration::ZERO);
    }

    /// Pull failures are recorded as they happen: the first one waits `initial` too.
    #[test]
    fn pull_failures_are_remembered() {
        let mut backoff = table();
        assert_eq!(backoff.last_failure(&key()), None);
        backoff.record_failure(&key(), t(5));
        assert_eq!(backoff.last_failure(&key()), Some(t(5)));
        assert_eq!(
            backoff.remaining(&key(), t(5), t(6)),
            Some(Duration::from_secs(9))
        );
        backoff.record_retry(&key(), t(5), t(15));
        backoff.record_failure(&key(), t(16));
        assert_eq!(backoff.retry_at(&key(), t(16)), t(36));
        assert_eq!(backoff.next_retry(t(30)), Some(Duration::from_secs(6)));
        assert_eq!(backoff.next_retry(t(36)), None);
        // A failure long after the last retry starts over at `initial`.
        backoff.record_failure(&key(), t(700));
        assert_eq!(backoff.retry_at(&key(), t(700)), t(710));
    }

    #[test]
    fn gc_drops_stale_entries_and_removed_pods() {
        let mut backoff = table();
        backoff.record_retry(&key(), t(0), t(0));
        backoff.record_retry(&BackoffKey::new("gone", "app", "x"), t(590), t(590));
        backoff.gc(t(600), |uid| uid != "gone");
        assert_eq!(backoff.len(), 1);
        backoff.gc(t(601), |_| true);
        assert!(backoff.is_empty());
    }
}
