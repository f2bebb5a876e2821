//! client-go's EventSourceObjectSpamFilter: a token bucket per involved object (burst 25,
//! one token back every 5 minutes), so a crash-looping pod cannot flood the API server.

use std::collections::HashMap;
use std::time::{Duration, Instant};

pub const BURST: u32 = 25;
pub const REFILL_EVERY: Duration = Duration::from_secs(300);

struct Bucket {
    tokens: u32,
    refilled: Instant,
}

/// Buckets by involved object key (e.g. the pod uid).
#[derive(Default)]
pub struct SpamFilter {
    buckets: HashMap<String, Bucket>,
}

impl SpamFilter {
    /// Whether an event about `key` may be sent at `now` (and takes a token if so).
    pub fn allow(&mut self, key: &str, now: Instant) -> bool {
        let bucket = self.buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: BURST,
            refilled: now,
        });
        let elapsed = now.saturating_duration_since(bucket.refilled);
        let earned = (elapsed.as_secs() / REFILL_EVERY.as_secs()) as u32;
        if earned > 0 {
            bucket.tokens = bucket.tokens.saturating_add(earned).min(BURST);
            bucket.refilled += REFILL_EVERY * earned;
        }
        if bucket.tokens == 0 {
            return false;
        }
        bucket.tokens -= 1;
        true
    }

    /// Forgets the buckets of objects gone (a deleted pod).
    pub fn forget(&mut self, key: &str) {
        self.buckets.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_one_per_refill_period_per_object() {
        let start = Instant::now();
        let mut filter = SpamFilter::default();
        let allowed = (0..40).filter(|_| filter.allow("a", start)).count();
        assert_eq!(allowed, BURST as usize);
        assert!(
            filter.allow("b", start),
            "another object has its own bucket"
        );
        assert!(!filter.allow("a", start + REFILL_EVERY - Duration::from_secs(1)));
        assert!(filter.allow("a", start + REFILL_EVERY));
        assert!(!filter.allow("a", start + REFILL_EVERY));
        // Long idle refills up to the burst only.
        let later = start + REFILL_EVERY * 1000;
        let allowed = (0..40).filter(|_| filter.allow("a", later)).count();
        assert_eq!(allowed, BURST as usize);
        filter.forget("a");
        assert!(filter.allow("a", later));
    }
}
