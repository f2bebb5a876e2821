//! API call failures of the node agent: named by verb and resource, classified (permanent or
//! worth retrying), retried with back-off, and logged once per change of what went wrong (not
//! every 10 s while the server stays unreachable).

use crate::kubelet::apiclient::{describe, status_code};
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

/// How long one API request may take before it counts as failed (a hung server must not stall
/// the heartbeat past the lease's 40 s).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug)]
pub enum Cause {
    Api(kube::Error),
    TimedOut(Duration),
}

/// One failed request.
#[derive(Debug)]
pub struct Failure {
    pub verb: &'static str,
    pub resource: String,
    pub cause: Cause,
}

impl Failure {
    pub fn code(&self) -> Option<u16> {
        match &self.cause {
            Cause::Api(err) => status_code(err),
            Cause::TimedOut(_) => None,
        }
    }

    /// The server's reason or the transport problem.
    pub fn reason(&self) -> String {
        match &self.cause {
            Cause::Api(err) => describe(err),
            Cause::TimedOut(after) => format!("no answer within {}s", after.as_secs()),
        }
    }

    /// Refusals that retrying will not change: the identity is not accepted (401), not
    /// allowed (403), or what was sent is invalid (400, 422). Everything else (unreachable
    /// server, timeouts, 5xx, 429, conflicts) is retried.
    pub fn permanent(&self) -> bool {
        matches!(self.code(), Some(400 | 401 | 403 | 422))
    }

    /// What kind of failure this is, for "log once per change".
    fn class(&self) -> String {
        match self.code() {
            Some(code) => format!("{} {} {code}", self.verb, self.resource),
            None => format!("{} {} {}", self.verb, self.resource, self.reason()),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.verb, self.resource, self.reason())
    }
}

/// Runs one request with the timeout, naming it for errors.
pub async fn call<T>(
    verb: &'static str,
    resource: impl Into<String>,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, Failure> {
    let fail = |cause| Failure {
        verb,
        resource: resource.into(),
        cause,
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(fail(Cause::Api(err))),
        Err(_) => Err(fail(Cause::TimedOut(REQUEST_TIMEOUT))),
    }
}

/// What to log about an operation's outcome.
#[derive(Debug, PartialEq, Eq)]
pub enum Report {
    /// Same as last time: stay quiet.
    Quiet,
    /// A new kind of failure: log it.
    Failed,
    /// Working again after failing: log the recovery.
    Recovered,
}

/// Remembers the last failure class per operation (pure).
#[derive(Debug, Default)]
pub struct FailureLog {
    last: HashMap<&'static str, String>,
}

impl FailureLog {
    pub fn failed(&mut self, operation: &'static str, failure: &Failure) -> Report {
        let class = failure.class();
        if self.last.get(operation) == Some(&class) {
            Report::Quiet
        } else {
            self.last.insert(operation, class);
            Report::Failed
        }
    }

    pub fn succeeded(&mut self, operation: &'static str) -> Report {
        match self.last.remove(operation) {
            Some(_) => Report::Recovered,
            None => Report::Quiet,
        }
    }
}

/// Doubling retry delay (kubelet's registration and lease back-off: 200 ms up to 7 s).
#[derive(Clone, Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    pub fn kubelet() -> Backoff {
        Backoff::new(Duration::from_millis(200), Duration::from_secs(7))
    }

    /// The delay before the next attempt; doubles each call.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }

    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_failure(code: u16) -> Failure {
        Failure {
            verb: "create",
            resource: "nodes/n1".into(),
            cause: Cause::Api(kube::Error::Api(
                kube::core::Status::failure("no", "Forbidden")
                    .with_code(code)
                    .boxed(),
            )),
        }
    }

    fn timeout() -> Failure {
        Failure {
            verb: "patch",
            resource: "nodes/n1/status".into(),
            cause: Cause::TimedOut(REQUEST_TIMEOUT),
        }
    }

    #[test]
    fn permanent_failures_are_refusals() {
        for (code, permanent) in [
            (401, true),
            (403, true),
            (422, true),
            (400, true),
            (409, false),
            (429, false),
            (500, false),
            (503, false),
        ] {
            assert_eq!(api_failure(code).permanent(), permanent, "{code}");
        }
        assert!(!timeout().permanent());
        let text = api_failure(403).to_string();
        assert!(text.starts_with("create nodes/n1: "), "{text}");
        assert!(timeout().to_string().contains("no answer within 15s"));
    }

    #[test]
    fn failures_are_logged_once_per_change() {
        let mut log = FailureLog::default();
        assert_eq!(log.succeeded("lease"), Report::Quiet);
        assert_eq!(log.failed("lease", &timeout()), Report::Failed);
        assert_eq!(log.failed("lease", &timeout()), Report::Quiet);
        assert_eq!(log.failed("status", &timeout()), Report::Failed);
        assert_eq!(log.failed("lease", &api_failure(503)), Report::Failed);
        assert_eq!(log.failed("lease", &api_failure(503)), Report::Quiet);
        assert_eq!(log.succeeded("lease"), Report::Recovered);
        assert_eq!(log.succeeded("lease"), Report::Quiet);
        assert_eq!(log.failed("lease", &api_failure(503)), Report::Failed);
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::kubelet();
        let delays: Vec<_> = (0..7).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(delays, [200, 400, 800, 1600, 3200, 6400, 7000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(200));
    }
}
