//! Container and sandbox resources as the kubelet computes them: QoS class, cgroup parent, CPU
//! shares from requests, CFS quota from limits, memory limit, OOM score adjustment.

use super::quantity::Quantity;
use crate::cri::api;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use std::collections::BTreeMap;

const MIN_SHARES: i64 = 2;
const MAX_SHARES: i64 = 262_144;
const SHARES_PER_CPU: i64 = 1024;
const QUOTA_PERIOD_US: i64 = 100_000;
const MIN_QUOTA_US: i64 = 1000;
const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(&self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

fn quantity(map: Option<&BTreeMap<String, ApiQuantity>>, name: &str) -> Quantity {
    // Unparseable quantities were refused by validation; treat leftovers as unset.
    Quantity::parse_opt(map.and_then(|m| m.get(name))).unwrap_or_default()
}

fn requests(c: &Container, name: &str) -> Quantity {
    quantity(c.resources.as_ref().and_then(|r| r.requests.as_ref()), name)
}

fn limits(c: &Container, name: &str) -> Quantity {
    quantity(c.resources.as_ref().and_then(|r| r.limits.as_ref()), name)
}

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
}

/// The pod's QoS class (`GetPodQOS`), from cpu and memory requests and limits.
pub fn qos_class(pod: &Pod) -> QosClass {
    let mut request_sum: BTreeMap<&str, Quantity> = BTreeMap::new();
    let mut limit_sum: BTreeMap<&str, Quantity> = BTreeMap::new();
    let mut guaranteed = true;
    for c in all_containers(pod) {
        let mut limits_found = 0;
        for name in ["cpu", "memory"] {
            let request = requests(c, name);
            if !request.is_zero() {
                let sum = request_sum.entry(name).or_default();
                *sum = Quantity::from_millis(sum.milli_value() + request.milli_value());
            }
            let limit = limits(c, name);
            if !limit.is_zero() {
                limits_found += 1;
                let sum = limit_sum.entry(name).or_default();
                *sum = Quantity::from_millis(sum.milli_value() + limit.milli_value());
            }
        }
        if limits_found < 2 {
            guaranteed = false;
        }
    }
    if request_sum.is_empty() && limit_sum.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed && request_sum == limit_sum {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// The cgroupfs parent of the pod's sandbox, as the kubelet's cgroupfs driver names it.
pub fn cgroup_parent(pod: &Pod) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    match qos_class(pod) {
        QosClass::Guaranteed => format!("/kubepods/pod{uid}"),
        QosClass::Burstable => format!("/kubepods/burstable/pod{uid}"),
        QosClass::BestEffort => format!("/kubepods/besteffort/pod{uid}"),
    }
}

fn milli_cpu_to_shares(milli_cpu: i64) -> i64 {
    if milli_cpu == 0 {
        return MIN_SHARES;
    }
    (milli_cpu.saturating_mul(SHARES_PER_CPU) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

fn milli_cpu_to_quota(milli_cpu: i64, period: i64) -> i64 {
    if milli_cpu == 0 {
        return 0;
    }
    (milli_cpu.saturating_mul(period) / 1000).max(MIN_QUOTA_US)
}

/// `calculateLinuxResources`: shares from the request (or the limit when only it is set),
/// quota/period from the limit, memory limit.
pub fn linux_resources(
    cpu_request: Quantity,
    cpu_limit: Quantity,
    memory_limit: Quantity,
) -> api::LinuxContainerResources {
    let shares_from = if cpu_request.is_zero() && !cpu_limit.is_zero() {
        cpu_limit
    } else {
        cpu_request
    };
    api::LinuxContainerResources {
        cpu_shares: milli_cpu_to_shares(shares_from.milli_value()),
        cpu_period: QUOTA_PERIOD_US,
        cpu_quota: milli_cpu_to_quota(cpu_limit.milli_value(), QUOTA_PERIOD_US),
        memory_limit_in_bytes: memory_limit.value().max(0),
        ..Default::default()
    }
}

/// OOM score adjustment of a container (`GetContainerOOMScoreAdjust`).
pub fn oom_score_adj(pod: &Pod, container: &Container, memory_capacity: i64) -> i64 {
    match qos_class(pod) {
        QosClass::Guaranteed => GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {
            if memory_capacity <= 0 {
                return BEST_EFFORT_OOM_SCORE_ADJ - 1;
            }
            let request = i128::from(requests(container, "memory").value());
            let adj = 1000 - (1000 * request) / i128::from(memory_capacity);
            let adj = i64::try_from(adj).unwrap_or(1000);
            let floor = 1000 + GUARANTEED_OOM_SCORE_ADJ;
            if adj < floor {
                floor
            } else if adj == BEST_EFFORT_OOM_SCORE_ADJ {
                adj - 1
            } else {
                adj
            }
        }
    }
}

/// Resources of one container, with its OOM score.
pub fn container_resources(
    pod: &Pod,
    container: &Container,
    memory_capacity: i64,
) -> api::LinuxContainerResources {
    let mut resources = linux_resources(
        requests(container, "cpu"),
        limits(container, "cpu"),
        limits(container, "memory"),
    );
    resources.oom_score_adj = oom_score_adj(pod, container, memory_capacity);
    resources
}

/// Sum of the containers' resources (init containers count as their maximum), for the sandbox.
pub fn sandbox_resources(pod: &Pod) -> api::LinuxContainerResources {
    let spec = pod.spec.as_ref();
    let sum = |f: fn(&Container, &str) -> Quantity, name: &str| -> Quantity {
        let regular: i64 = spec
            .iter()
            .flat_map(|s| &s.containers)
            .map(|c| f(c, name).milli_value())
            .sum();
        let init = spec.iter().flat_map(|s| s.init_containers.iter().flatten());
        Quantity::from_millis(
            init.map(|c| f(c, name).milli_value())
                .fold(regular, i64::max),
        )
    };
    linux_resources(
        sum(requests, "cpu"),
        sum(limits, "cpu"),
        sum(limits, "memory"),
    )
}

/// The pod overhead as resources, if any.
pub fn overhead_resources(pod: &Pod) -> Option<api::LinuxContainerResources> {
    let overhead = pod.spec.as_ref()?.overhead.as_ref()?;
    let cpu = quantity(Some(overhead), "cpu");
    Some(linux_resources(
        cpu,
        cpu,
        quantity(Some(overhead), "memory"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u1"},
            "spec": {"containers": containers}
        }))
        .unwrap()
    }

    fn c(limits: serde_json::Value, requests: serde_json::Value) -> serde_json::Value {
        json!({"name": "c", "image": "x", "resources": {"limits": limits, "requests": requests}})
    }

    #[test]
    fn qos_classes() {
        let cases = [
            (
                json!([{"name": "c", "image": "x"}]),
                QosClass::BestEffort,
                "/kubepods/besteffort/podu1",
            ),
            (
                json!([c(
                    json!({"cpu": "1", "memory": "1Gi"}),
                    json!({"cpu": "1", "memory": "1Gi"})
                )]),
                QosClass::Guaranteed,
                "/kubepods/podu1",
            ),
            (
                json!([c(
                    json!({"cpu": "1", "memory": "1Gi"}),
                    json!({"cpu": "500m", "memory": "1Gi"})
                )]),
                QosClass::Burstable,
                "/kubepods/burstable/podu1",
            ),
            (
                json!([c(json!({"cpu": "1"}), json!({"cpu": "1"}))]),
                QosClass::Burstable,
                "/kubepods/burstable/podu1",
            ),
            (
                json!([c(json!({}), json!({"memory": "10Mi"}))]),
                QosClass::Burstable,
                "/kubepods/burstable/podu1",
            ),
            (
                json!([c(json!({"cpu": "1", "memory": "1Gi"}), json!({"cpu": "1", "memory": "1Gi"})), {"name": "d", "image": "x"}]),
                QosClass::Burstable,
                "/kubepods/burstable/podu1",
            ),
        ];
        for (containers, qos, parent) in cases {
            let p = pod(containers.clone());
            assert_eq!(qos_class(&p), qos, "{containers}");
            assert_eq!(cgroup_parent(&p), parent);
        }
    }

    #[test]
    fn cpu_and_memory_conversion() {
        let q = |s: &str| s.parse::<Quantity>().unwrap();
        // (request, limit, memory) → (shares, quota, memory)
        let cases = [
            ("0", "0", "0", 2, 0, 0),
            ("100m", "0", "0", 102, 0, 0),
            ("0", "500m", "128Mi", 512, 50_000, 134_217_728),
            ("250m", "2", "1Gi", 256, 200_000, 1_073_741_824),
            ("1m", "1m", "0", 2, 1000, 0),
            ("1000", "0", "0", 262_144, 0, 0),
        ];
        for (request, limit, memory, shares, quota, mem) in cases {
            let r = linux_resources(q(request), q(limit), q(memory));
            assert_eq!(
                (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
                (shares, quota, mem),
                "{request} {limit} {memory}"
            );
            assert_eq!(r.cpu_period, 100_000);
        }
    }

    #[test]
    fn oom_scores() {
        let gib = 1i64 << 30;
        let guaranteed = pod(json!([c(
            json!({"cpu": "1", "memory": "1Gi"}),
            json!({"cpu": "1", "memory": "1Gi"})
        )]));
        let container = &guaranteed.spec.as_ref().unwrap().containers[0];
        assert_eq!(oom_score_adj(&guaranteed, container, 4 * gib), -997);
        let best = pod(json!([{"name": "c", "image": "x"}]));
        assert_eq!(
            oom_score_adj(&best, &best.spec.as_ref().unwrap().containers[0], 4 * gib),
            1000
        );
        let burst = |req: &str| pod(json!([c(json!({}), json!({"memory": req}))]));
        for (request, expected) in [("1Gi", 750), ("4Gi", 3), ("8Gi", 3), ("1", 999)] {
            let p = burst(request);
            assert_eq!(
                oom_score_adj(&p, &p.spec.as_ref().unwrap().containers[0], 4 * gib),
                expected,
                "{request}"
            );
        }
    }

    #[test]
    fn sandbox_sums() {
        let mut p = pod(json!([
            c(
                json!({"cpu": "1", "memory": "100Mi"}),
                json!({"cpu": "500m"})
            ),
            c(
                json!({"cpu": "1", "memory": "100Mi"}),
                json!({"cpu": "250m"})
            )
        ]));
        let r = sandbox_resources(&p);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (768, 200_000, 200 << 20)
        );
        assert!(overhead_resources(&p).is_none());
        p.spec.as_mut().unwrap().overhead =
            Some([("cpu".to_string(), ApiQuantity("250m".into()))].into());
        assert_eq!(overhead_resources(&p).unwrap().cpu_quota, 25_000);
    }
}
