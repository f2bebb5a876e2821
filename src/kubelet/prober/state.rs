//! The probe state machine (pure): initial delay, startup gating, success/failure thresholds,
//! following the kubelet's prober worker.

use super::results::{ProbeKind, ProbeResult};
use k8s_openapi::api::core::v1::Probe;
use std::time::Duration;

/// Timing and thresholds of one probe, defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSettings {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

fn seconds(value: Option<i32>, default: u64, min: u64) -> Duration {
    let secs = value.and_then(|v| u64::try_from(v).ok()).unwrap_or(default);
    Duration::from_secs(secs.max(min))
}

impl ProbeSettings {
    /// Kubernetes defaults: period 10 s, timeout 1 s, success 1, failure 3, no delay. Liveness
    /// and startup probes must succeed once (the API rejects other thresholds).
    pub fn from_probe(probe: &Probe, kind: ProbeKind) -> Self {
        let success = match kind {
            ProbeKind::Readiness => probe.success_threshold.unwrap_or(1).max(1) as u32,
            ProbeKind::Liveness | ProbeKind::Startup => 1,
        };
        ProbeSettings {
            initial_delay: seconds(probe.initial_delay_seconds, 0, 0),
            period: seconds(probe.period_seconds, 10, 1),
            timeout: seconds(probe.timeout_seconds, 1, 1),
            success_threshold: success,
            failure_threshold: probe.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// The outcome of running a probe once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    Success,
    Failure(String),
}

/// What the worker does at a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Run the probe now.
    Probe,
    /// Not yet (initial delay, or waiting for the startup probe).
    Wait,
    /// This worker is done (startup succeeded, or liveness/startup failed and the container
    /// will be restarted: a new container gets new workers).
    Stop,
}

/// State of one probe of one container instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeState {
    pub kind: ProbeKind,
    pub result: ProbeResult,
    last: Option<bool>,
    run: u32,
    on_hold: bool,
}

impl ProbeState {
    /// Readiness starts failed (not ready until it succeeds), liveness successful, startup unknown.
    pub fn new(kind: ProbeKind) -> Self {
        let result = match kind {
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Startup => ProbeResult::Unknown,
        };
        ProbeState {
            kind,
            result,
            last: None,
            run: 0,
            on_hold: false,
        }
    }

    /// Decides whether to probe now. `started` says whether the container's startup probe
    /// succeeded (true when it has none); `since_start` is how long the container has run.
    pub fn step(&self, settings: &ProbeSettings, started: bool, since_start: Duration) -> Step {
        if self.on_hold {
            return Step::Stop;
        }
        match self.kind {
            ProbeKind::Startup if started || self.result == ProbeResult::Success => {
                return Step::Stop;
            }
            ProbeKind::Liveness | ProbeKind::Readiness if !started => return Step::Wait,
            _ => {}
        }
        if since_start < settings.initial_delay {
            return Step::Wait;
        }
        Step::Probe
    }

    /// Records an outcome; returns the new result when the settled result changed.
    pub fn observe(
        &mut self,
        outcome: &ProbeOutcome,
        settings: &ProbeSettings,
    ) -> Option<ProbeResult> {
        let success = *outcome == ProbeOutcome::Success;
        if self.last == Some(success) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(success);
            self.run = 1;
        }
        let threshold = if success {
            settings.success_threshold
        } else {
            settings.failure_threshold
        };
        if self.run < threshold {
            return None;
        }
        let new = if success {
            ProbeResult::Success
        } else {
            ProbeResult::Failure
        };
        if !success && matches!(self.kind, ProbeKind::Liveness | ProbeKind::Startup) {
            // The container is restarted; probing it further means nothing.
            self.on_hold = true;
        }
        if new == self.result {
            return None;
        }
        self.result = new;
        Some(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(success: u32, failure: u32, delay: u64) -> ProbeSettings {
        ProbeSettings {
            initial_delay: Duration::from_secs(delay),
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    #[test]
    fn defaults_and_clamping() {
        let probe: Probe = serde_json::from_value(serde_json::json!({
            "exec": {"command": ["true"]}, "successThreshold": 3, "periodSeconds": 0,
            "timeoutSeconds": -4, "failureThreshold": 0
        }))
        .unwrap();
        let readiness = ProbeSettings::from_probe(&probe, ProbeKind::Readiness);
        assert_eq!(readiness.success_threshold, 3);
        assert_eq!(readiness.period, Duration::from_secs(1));
        assert_eq!(readiness.timeout, Duration::from_secs(1));
        assert_eq!(readiness.failure_threshold, 1);
        let liveness = ProbeSettings::from_probe(&Probe::default(), ProbeKind::Liveness);
        assert_eq!(liveness, settings(1, 3, 0));
    }

    /// Feeds outcomes (S = success, F = failure) and records the result after each.
    fn run(kind: ProbeKind, s: &ProbeSettings, outcomes: &str) -> (String, Vec<ProbeResult>) {
        let mut state = ProbeState::new(kind);
        let mut changes = String::new();
        let mut results = Vec::new();
        for c in outcomes.chars() {
            let outcome = if c == 'S' {
                ProbeOutcome::Success
            } else {
                ProbeOutcome::Failure("boom".into())
            };
            changes.push(if state.observe(&outcome, s).is_some() {
                '!'
            } else {
                '.'
            });
            results.push(state.result);
        }
        (changes, results)
    }

    #[test]
    fn thresholds() {
        use ProbeResult::{Failure as F, Success as S, Unknown as U};
        // (name, kind, settings, outcomes, changes, results)
        type Case = (
            &'static str,
            ProbeKind,
            ProbeSettings,
            &'static str,
            &'static str,
            Vec<ProbeResult>,
        );
        let cases: Vec<Case> = vec![
            (
                "readiness: one success is enough",
                ProbeKind::Readiness,
                settings(1, 3, 0),
                "S",
                "!",
                vec![S],
            ),
            (
                "readiness: starts not ready, needs 2 successes",
                ProbeKind::Readiness,
                settings(2, 3, 0),
                "SSF",
                ".!.",
                vec![F, S, S],
            ),
            (
                "readiness: a failure interrupts the success run",
                ProbeKind::Readiness,
                settings(2, 3, 0),
                "SFSS",
                "...!",
                vec![F, F, F, S],
            ),
            (
                "readiness: 3 failures to become unready",
                ProbeKind::Readiness,
                settings(1, 3, 0),
                "SFFFS",
                "!..!!",
                vec![S, S, S, F, S],
            ),
            (
                "liveness: starts healthy, fails after 3",
                ProbeKind::Liveness,
                settings(1, 3, 0),
                "FFF",
                "..!",
                vec![S, S, F],
            ),
            (
                "liveness: failures not consecutive",
                ProbeKind::Liveness,
                settings(1, 3, 0),
                "FFSFF",
                ".....",
                vec![S, S, S, S, S],
            ),
            (
                "startup: unknown until it succeeds",
                ProbeKind::Startup,
                settings(1, 2, 0),
                "FS",
                ".!",
                vec![U, S],
            ),
            (
                "startup: fails after threshold",
                ProbeKind::Startup,
                settings(1, 2, 0),
                "FF",
                ".!",
                vec![U, F],
            ),
        ];
        for (name, kind, s, outcomes, want_changes, want_results) in cases {
            let (changes, results) = run(kind, &s, outcomes);
            assert_eq!(changes, want_changes, "{name}");
            assert_eq!(results, want_results, "{name}");
        }
    }

    #[test]
    fn steps() {
        let s = settings(1, 1, 5);
        let secs = Duration::from_secs;
        let cases = [
            (
                "readiness waits for startup",
                ProbeKind::Readiness,
                false,
                60,
                Step::Wait,
            ),
            (
                "liveness waits for startup",
                ProbeKind::Liveness,
                false,
                60,
                Step::Wait,
            ),
            ("initial delay", ProbeKind::Liveness, true, 4, Step::Wait),
            ("after the delay", ProbeKind::Liveness, true, 5, Step::Probe),
            (
                "startup probes before started",
                ProbeKind::Startup,
                false,
                5,
                Step::Probe,
            ),
            (
                "startup stops once started",
                ProbeKind::Startup,
                true,
                5,
                Step::Stop,
            ),
        ];
        for (name, kind, started, since, want) in cases {
            assert_eq!(
                ProbeState::new(kind).step(&s, started, secs(since)),
                want,
                "{name}"
            );
        }
        let mut liveness = ProbeState::new(ProbeKind::Liveness);
        liveness.observe(&ProbeOutcome::Failure("x".into()), &s);
        assert_eq!(
            liveness.step(&s, true, secs(60)),
            Step::Stop,
            "liveness failed: on hold"
        );
        let mut readiness = ProbeState::new(ProbeKind::Readiness);
        readiness.observe(&ProbeOutcome::Failure("x".into()), &s);
        assert_eq!(
            readiness.step(&s, true, secs(60)),
            Step::Probe,
            "readiness keeps probing"
        );
    }
}
