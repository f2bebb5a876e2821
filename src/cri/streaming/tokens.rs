//! One-time tokens for streaming URLs (kubelet's requestCache): a validated Exec/Attach/
//! PortForward request is stored under a random URL-safe token for one minute; the first
//! request to its URL consumes it. At most 1000 may wait at once.

use crate::cri::api;
use base64::Engine;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a token stays valid (kubelet's CacheTTL).
pub const TOKEN_TTL: Duration = Duration::from_secs(60);
/// Tokens that may wait at once (kubelet's maxInFlight).
pub const MAX_IN_FLIGHT: usize = 1000;
/// Token length in base64url characters (kubelet's tokenLen).
const TOKEN_LEN: usize = 8;

/// The time source (injected so tests can expire tokens without waiting).
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(Instant::now)
}

/// A request waiting for its client to connect.
#[derive(Clone, Debug, PartialEq)]
pub enum CachedRequest {
    Exec(api::ExecRequest),
    Attach(api::AttachRequest),
    PortForward(api::PortForwardRequest),
}

pub struct RequestCache {
    clock: Clock,
    ttl: Duration,
    inner: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_token: HashMap<String, (CachedRequest, Instant)>,
    /// Tokens in insertion (= expiry) order; consumed ones are skipped when met.
    order: VecDeque<(String, Instant)>,
}

impl RequestCache {
    pub fn new(clock: Clock, ttl: Duration) -> RequestCache {
        RequestCache {
            clock,
            ttl,
            inner: Mutex::new(Entries::default()),
        }
    }

    /// Stores `request`; its token, or `ResourceExhausted` when too many are waiting.
    pub fn insert(&self, request: CachedRequest) -> Result<String, tonic::Status> {
        let now = (self.clock)();
        let mut entries = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        entries.collect_expired(now);
        if entries.by_token.len() >= MAX_IN_FLIGHT {
            return Err(tonic::Status::resource_exhausted(
                "maximum number of in-flight requests exceeded",
            ));
        }
        let token = loop {
            let raw: [u8; TOKEN_LEN * 6 / 8] = rand::random();
            let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw);
            if !entries.by_token.contains_key(&token) {
                break token;
            }
        };
        let expires = now + self.ttl;
        entries.by_token.insert(token.clone(), (request, expires));
        entries.order.push_back((token.clone(), expires));
        Ok(token)
    }

    /// Takes the request stored under `token`: `None` if unknown, used, or expired.
    pub fn consume(&self, token: &str) -> Option<CachedRequest> {
        let now = (self.clock)();
        let mut entries = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (request, expires) = entries.by_token.remove(token)?;
        (now <= expires).then_some(request)
    }

    /// Requests currently waiting (expired ones included until collected).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_token
            .len()
    }
}

impl Entries {
    fn collect_expired(&mut self, now: Instant) {
        while let Some((token, expires)) = self.order.front() {
            if *expires >= now {
                break;
            }
            if self
                .by_token
                .get(token)
                .is_some_and(|(_, stored)| stored == expires)
            {
                self.by_token.remove(token);
            }
            self.order.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn manual_clock() -> (Clock, Arc<AtomicU64>) {
        let start = Instant::now();
        let offset = Arc::new(AtomicU64::new(0));
        let read = offset.clone();
        let clock: Clock =
            Arc::new(move || start + Duration::from_secs(read.load(Ordering::SeqCst)));
        (clock, offset)
    }

    fn exec(id: &str) -> CachedRequest {
        CachedRequest::Exec(api::ExecRequest {
            container_id: id.into(),
            ..Default::default()
        })
    }

    #[test]
    fn tokens_are_one_time_url_safe_and_expire() {
        let (clock, offset) = manual_clock();
        let cache = RequestCache::new(clock, TOKEN_TTL);
        let first = cache.insert(exec("a")).unwrap();
        let second = cache.insert(exec("b")).unwrap();
        assert_eq!(first.len(), TOKEN_LEN);
        assert!(
            first
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_ne!(first, second);
        assert_eq!(cache.consume(&first), Some(exec("a")));
        assert_eq!(cache.consume(&first), None, "reused");
        assert_eq!(cache.consume("nope"), None, "unknown");
        offset.store(61, Ordering::SeqCst);
        assert_eq!(cache.consume(&second), None, "expired");
    }

    #[test]
    fn too_many_in_flight_is_resource_exhausted_until_they_expire() {
        let (clock, offset) = manual_clock();
        let cache = RequestCache::new(clock, TOKEN_TTL);
        for _ in 0..MAX_IN_FLIGHT {
            cache.insert(exec("x")).unwrap();
        }
        let err = cache.insert(exec("y")).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        offset.store(61, Ordering::SeqCst);
        cache.insert(exec("y")).unwrap();
        assert_eq!(cache.len(), 1);
    }
}
