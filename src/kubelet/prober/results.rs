//! Probe results by container id, read by the pod actions (liveness/startup) and the status
//! generator (readiness, started).

use std::collections::HashMap;

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    /// As kubelet's event notes name it ("Liveness probe failed: ...").
    pub fn title(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "liveness",
            ProbeKind::Readiness => "readiness",
            ProbeKind::Startup => "startup",
        }
    }
}

/// The settled result of a probe (after thresholds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeResult {
    Unknown,
    Success,
    Failure,
}

/// Results of every probe of every container the agent probes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbeResults {
    map: HashMap<(String, ProbeKind), ProbeResult>,
}

impl ProbeResults {
    pub fn get(&self, container_id: &str, kind: ProbeKind) -> Option<ProbeResult> {
        self.map.get(&(container_id.to_string(), kind)).copied()
    }

    /// Sets a result; returns whether it changed.
    pub fn set(&mut self, container_id: &str, kind: ProbeKind, result: ProbeResult) -> bool {
        self.map.insert((container_id.to_string(), kind), result) != Some(result)
    }

    pub fn remove(&mut self, container_id: &str, kind: ProbeKind) {
        self.map.remove(&(container_id.to_string(), kind));
    }

    /// Drops the results of containers not in `keep`.
    pub fn retain_containers(&mut self, keep: impl Fn(&str) -> bool) {
        self.map.retain(|(id, _), _| keep(id));
    }

    pub fn is_failure(&self, container_id: &str, kind: ProbeKind) -> bool {
        self.get(container_id, kind) == Some(ProbeResult::Failure)
    }
}
