//! The kubelet's own metrics (`/metrics`, Prometheus/OpenMetrics text): CRI operation
//! latencies and errors (through [`instrumented`]), pod start latency, running pods and
//! containers, and PLEG relist duration. One [`KubeletMetrics`] is made by the caller and
//! handed to whatever records into it: no process-wide registry.

pub mod instrumented;

use crate::kubelet::runtime_pod::RunState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::time::Duration;

pub use instrumented::{InstrumentedImages, InstrumentedRuntime};

/// The OpenMetrics text's content type (what the encoder writes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot encode the metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Operation {
    operation_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ContainerState {
    container_state: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn operation_buckets() -> Histogram {
    // kubelet's: ExponentialBuckets(.005, 2.5, 14).
    Histogram::new(exponential_buckets(0.005, 2.5, 14))
}

/// kubelet's pod start buckets: pods take seconds to minutes (image pulls).
const POD_START_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// Prometheus' default buckets (kubelet's for the PLEG relist).
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

const CONTAINER_STATES: [(RunState, &str); 4] = [
    (RunState::Created, "created"),
    (RunState::Running, "running"),
    (RunState::Exited, "exited"),
    (RunState::Unknown, "unknown"),
];

/// The kubelet's metrics and the registry they are rendered from.
pub struct KubeletMetrics {
    registry: Registry,
    operations: Family<Operation, prometheus_client::metrics::counter::Counter>,
    operation_errors: Family<Operation, prometheus_client::metrics::counter::Counter>,
    operation_duration: HistogramFamily<Operation>,
    pod_start: Histogram,
    running_pods: Gauge,
    running_containers: Family<ContainerState, Gauge>,
    pleg_relist: Histogram,
}

impl Default for KubeletMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl KubeletMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let operations = Family::default();
        let operation_errors = Family::default();
        let operation_duration: HistogramFamily<Operation> =
            Family::new_with_constructor(operation_buckets);
        let pod_start = Histogram::new(POD_START_BUCKETS);
        let running_pods = Gauge::default();
        let running_containers = Family::default();
        let pleg_relist = Histogram::new(DEFAULT_BUCKETS);
        // The counters' `_total` suffix is the encoder's.
        registry.register(
            "kubelet_runtime_operations",
            "Cumulative number of runtime operations by operation type",
            operations.clone(),
        );
        registry.register(
            "kubelet_runtime_operations_errors",
            "Cumulative number of runtime operation errors by operation type",
            operation_errors.clone(),
        );
        registry.register(
            "kubelet_runtime_operations_duration_seconds",
            "Duration in seconds of runtime operations, by operation type",
            operation_duration.clone(),
        );
        registry.register(
            "kubelet_pod_start_duration_seconds",
            "Duration in seconds from the kubelet seeing a pod for the first time to the pod \
             starting to run (all its containers running)",
            pod_start.clone(),
        );
        registry.register(
            "kubelet_running_pods",
            "Number of pods that have a running pod sandbox",
            running_pods.clone(),
        );
        registry.register(
            "kubelet_running_containers",
            "Number of containers currently running, by state",
            running_containers.clone(),
        );
        registry.register(
            "kubelet_pleg_relist_duration_seconds",
            "Duration in seconds for relisting pods in PLEG",
            pleg_relist.clone(),
        );
        KubeletMetrics {
            registry,
            operations,
            operation_errors,
            operation_duration,
            pod_start,
            running_pods,
            running_containers,
            pleg_relist,
        }
    }

    /// One CRI call of `operation` that took `took`.
    pub fn observe_operation(&self, operation: &'static str, took: Duration, failed: bool) {
        let key = Operation {
            operation_type: operation,
        };
        self.operations.get_or_create(&key).inc();
        self.operation_duration
            .get_or_create(&key)
            .observe(took.as_secs_f64());
        if failed {
            self.operation_errors.get_or_create(&key).inc();
        }
    }

    /// A pod whose containers all run, `took` after it was first seen.
    pub fn observe_pod_start(&self, took: Duration) {
        self.pod_start.observe(took.as_secs_f64());
    }

    pub fn observe_pleg_relist(&self, took: Duration) {
        self.pleg_relist.observe(took.as_secs_f64());
    }

    /// What one relist saw: ready sandboxes and containers by state.
    pub fn set_running<'a>(
        &self,
        ready_sandboxes: usize,
        containers: impl IntoIterator<Item = &'a RunState>,
    ) {
        self.running_pods
            .set(i64::try_from(ready_sandboxes).unwrap_or(i64::MAX));
        let mut counts: HashMap<&'static str, i64> = HashMap::new();
        for state in containers {
            let name = CONTAINER_STATES
                .iter()
                .find(|(s, _)| s == state)
                .map_or("unknown", |(_, name)| name);
            *counts.entry(name).or_default() += 1;
        }
        // Every state is set, so a state that emptied drops to 0.
        for (_, name) in CONTAINER_STATES {
            let key = ContainerState {
                container_state: name,
            };
            let count = counts.get(name).copied().unwrap_or(0);
            self.running_containers.get_or_create(&key).set(count);
        }
    }

    /// The metrics as OpenMetrics text (which Prometheus scrapes).
    pub fn render(&self) -> Result<String, MetricsError> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
    }

    #[test]
    fn renders_what_was_recorded() {
        let metrics = KubeletMetrics::new();
        metrics.observe_operation("run_podsandbox", Duration::from_millis(30), false);
        metrics.observe_operation("run_podsandbox", Duration::from_millis(2), true);
        metrics.observe_operation("list_containers", Duration::from_millis(1), false);
        metrics.observe_pod_start(Duration::from_millis(1500));
        metrics.observe_pleg_relist(Duration::from_millis(3));
        let states = [RunState::Running, RunState::Running, RunState::Exited];
        metrics.set_running(2, &states);
        let text = metrics.render().unwrap();
        assert_eq!(
            line(
                &text,
                "kubelet_runtime_operations_total{operation_type=\"run_podsandbox\"}"
            ),
            "kubelet_runtime_operations_total{operation_type=\"run_podsandbox\"} 2"
        );
        assert_eq!(
            line(
                &text,
                "kubelet_runtime_operations_errors_total{operation_type=\"run"
            ),
            "kubelet_runtime_operations_errors_total{operation_type=\"run_podsandbox\"} 1"
        );
        assert!(!text.contains("kubelet_runtime_operations_errors_total{operation_type=\"list"));
        // 2 ms is under the first bucket (5 ms); 30 ms under 31.25 ms.
        let le = "kubelet_runtime_operations_duration_seconds_bucket{le=\"0.005\",operation_type=\"run_podsandbox\"}";
        assert_eq!(line(&text, le), format!("{le} 1"));
        let le = "kubelet_runtime_operations_duration_seconds_bucket{le=\"0.03125\",operation_type=\"run_podsandbox\"}";
        assert_eq!(line(&text, le), format!("{le} 2"));
        assert_eq!(
            line(&text, "kubelet_pod_start_duration_seconds_count"),
            "kubelet_pod_start_duration_seconds_count 1"
        );
        assert_eq!(
            line(
                &text,
                "kubelet_pod_start_duration_seconds_bucket{le=\"1.0\"}"
            ),
            "kubelet_pod_start_duration_seconds_bucket{le=\"1.0\"} 0"
        );
        assert_eq!(
            line(&text, "kubelet_pleg_relist_duration_seconds_count"),
            "kubelet_pleg_relist_duration_seconds_count 1"
        );
        assert_eq!(
            line(&text, "kubelet_running_pods "),
            "kubelet_running_pods 2"
        );
        for (state, want) in [
            ("running", 2),
            ("exited", 1),
            ("created", 0),
            ("unknown", 0),
        ] {
            let prefix = format!("kubelet_running_containers{{container_state=\"{state}\"}}");
            assert_eq!(line(&text, &prefix), format!("{prefix} {want}"));
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_state_that_empties_drops_to_zero() {
        let metrics = KubeletMetrics::new();
        metrics.set_running(1, &[RunState::Running]);
        metrics.set_running(0, &[]);
        let text = metrics.render().unwrap();
        assert_eq!(
            line(&text, "kubelet_running_pods "),
            "kubelet_running_pods 0"
        );
        let prefix = "kubelet_running_containers{container_state=\"running\"}";
        assert_eq!(line(&text, prefix), format!("{prefix} 0"));
    }
}
