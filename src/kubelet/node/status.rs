//! The Node's status, built purely from measurements, the runtime's CRI status and the previous
//! status (so a condition's lastTransitionTime survives heartbeats that do not change it).
//!
//! As kubelet (pkg/kubelet/nodestatus/setters.go, pkg/kubelet/cm node allocatable):
//! allocatable = capacity - system-reserved - the hard eviction threshold (memory and
//! ephemeral-storage), never negative; conditions MemoryPressure, DiskPressure, PIDPressure and
//! Ready (last) with kubelet's reasons and messages.

use super::info::{HostFacts, Measurements};
use super::options::NodeOptions;
use crate::cri::api;
use crate::kubelet::status::generate::k8s_time;
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeFeatures,
    NodeRuntimeHandler, NodeRuntimeHandlerFeatures, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// Kubelet's default hard eviction thresholds; crossing one sets the pressure condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// memory.available < this many bytes.
    pub memory_available: i64,
    /// nodefs.available < this percent of the filesystem.
    pub nodefs_available_percent: i64,
    /// nodefs.inodesFree < this percent.
    pub inodes_free_percent: i64,
    /// pid.available < this percent of pid_max (kubelet has no default; 10% as commonly set).
    pub pid_available_percent: i64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            memory_available: 100 * 1024 * 1024,
            nodefs_available_percent: 10,
            inodes_free_percent: 5,
            pid_available_percent: 10,
        }
    }
}

/// Whether the node can run pods, from the CRI `Status` call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// Why the node is not ready (kubelet's wording); empty when ready.
    pub problems: Vec<String>,
    /// A declared degradation that keeps the node Ready (pods on loopback only).
    pub degraded: Option<String>,
}

/// The reason runp's runtime gives for pods with a loopback-only network.
pub const LOOPBACK_ONLY: &str = "LoopbackOnly";

/// Readiness from the runtime's answer to `Status` (or the error of the call).
pub fn readiness(status: &Result<api::StatusResponse, String>) -> Readiness {
    let conditions = match status {
        Err(err) => {
            return Readiness {
                problems: vec![format!(
                    "container runtime status check may not have completed yet: {err}"
                )],
                degraded: None,
            };
        }
        Ok(resp) => resp
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default(),
    };
    let mut out = Readiness::default();
    for (kind, what) in [
        ("RuntimeReady", "container runtime not ready"),
        ("NetworkReady", "container runtime network not ready"),
    ] {
        let condition = conditions.iter().find(|c| c.r#type == kind);
        match condition {
            None => out
                .problems
                .push(format!("{what}: {kind} condition missing")),
            Some(c) if kind == "NetworkReady" && c.reason == LOOPBACK_ONLY => {
                out.degraded = Some(if c.message.is_empty() {
                    "pod network is loopback only".to_string()
                } else {
                    format!("pod network is loopback only ({})", c.message)
                });
            }
            Some(c) if !c.status => out.problems.push(format!(
                "{what}: {kind}=false reason:{} message:{}",
                c.reason, c.message
            )),
            Some(_) => {}
        }
    }
    out
}

/// Everything a status is built from.
pub struct StatusInputs<'a> {
    pub opts: &'a NodeOptions,
    pub measurements: &'a Measurements,
    pub facts: &'a HostFacts,
    /// `runp://0.1.0` (`<runtime_name>://<runtime_version>`); empty until the runtime answered.
    pub runtime_version: &'a str,
    pub readiness: &'a Readiness,
    /// The CRI status's runtime handlers and features, when the runtime answered.
    pub runtime_status: Option<&'a api::StatusResponse>,
    pub thresholds: Thresholds,
    pub previous: Option<&'a NodeStatus>,
    pub now: SystemTime,
}

fn quantity(s: String) -> Quantity {
    Quantity(s)
}

/// Bytes in the API's canonical binary form ("1Gi", "8148452Ki", "1000").
pub fn bytes_quantity(bytes: i64) -> Quantity {
    let bytes = bytes.max(0);
    for (shift, suffix) in [(50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        let unit = 1i64 << shift;
        if bytes != 0 && bytes % unit == 0 {
            return quantity(format!("{}{suffix}", bytes / unit));
        }
    }
    quantity(bytes.to_string())
}

/// Millicores in canonical form ("2", "1500m").
pub fn cpu_quantity(millis: i64) -> Quantity {
    let millis = millis.max(0);
    if millis % 1000 == 0 {
        quantity((millis / 1000).to_string())
    } else {
        quantity(format!("{millis}m"))
    }
}

/// Pressure flags from measurements (pure).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

pub fn pressure(m: &Measurements, reserved_pids: i64, t: &Thresholds) -> Pressure {
    let below_percent = |available: i64, total: i64, percent: i64| {
        total > 0 && (available as i128) * 100 < (total as i128) * (percent as i128)
    };
    let pids_available = m.pid_max - reserved_pids.max(0) - m.processes;
    Pressure {
        memory: m.memory_total > 0 && m.memory_available < t.memory_available,
        disk: below_percent(m.fs_available, m.fs_capacity, t.nodefs_available_percent)
            || below_percent(m.inodes_free, m.inodes_total, t.inodes_free_percent),
        pid: below_percent(pids_available, m.pid_max, t.pid_available_percent),
    }
}

/// (type, status, reason, message) of each condition, in kubelet's order.
fn conditions(
    pressure: &Pressure,
    readiness: &Readiness,
) -> [(&'static str, bool, &'static str, String); 4] {
    let flag = |on: bool, yes: &'static str, no: &'static str, what_yes: &str, what_no: &str| {
        if on {
            (true, yes, what_yes.to_string())
        } else {
            (false, no, what_no.to_string())
        }
    };
    let (m, mr, mm) = flag(
        pressure.memory,
        "KubeletHasInsufficientMemory",
        "KubeletHasSufficientMemory",
        "kubelet has insufficient memory available",
        "kubelet has sufficient memory available",
    );
    let (d, dr, dm) = flag(
        pressure.disk,
        "KubeletHasDiskPressure",
        "KubeletHasNoDiskPressure",
        "kubelet has disk pressure",
        "kubelet has no disk pressure",
    );
    let (p, pr, pm) = flag(
        pressure.pid,
        "KubeletHasInsufficientPID",
        "KubeletHasSufficientPID",
        "kubelet has insufficient PID available",
        "kubelet has sufficient PID available",
    );
    let ready = if readiness.problems.is_empty() {
        let message = match &readiness.degraded {
            None => "kubelet is posting ready status".to_string(),
            Some(note) => format!("kubelet is posting ready status; {note}"),
        };
        (true, "KubeletReady", message)
    } else {
        (false, "KubeletNotReady", readiness.problems.join(", "))
    };
    [
        ("MemoryPressure", m, mr, mm),
        ("DiskPressure", d, dr, dm),
        ("PIDPressure", p, pr, pm),
        ("Ready", ready.0, ready.1, ready.2),
    ]
}

/// The full status to report now.
pub fn build_node_status(input: &StatusInputs<'_>) -> NodeStatus {
    let m = input.measurements;
    let reserved = &input.opts.reserved;
    let now = k8s_time(input.now);
    let mut capacity = BTreeMap::new();
    capacity.insert("cpu".to_string(), cpu_quantity(m.cpus.saturating_mul(1000)));
    capacity.insert("memory".to_string(), bytes_quantity(m.memory_total));
    capacity.insert(
        "ephemeral-storage".to_string(),
        bytes_quantity(m.fs_capacity),
    );
    capacity.insert(
        "pods".to_string(),
        quantity(input.opts.max_pods.to_string()),
    );
    let nodefs_threshold =
        (m.fs_capacity as i128 * input.thresholds.nodefs_available_percent as i128 / 100) as i64;
    let mut allocatable = capacity.clone();
    allocatable.insert(
        "cpu".to_string(),
        cpu_quantity(m.cpus.saturating_mul(1000) - reserved.cpu_millis),
    );
    allocatable.insert(
        "memory".to_string(),
        bytes_quantity(m.memory_total - reserved.memory - input.thresholds.memory_available),
    );
    allocatable.insert(
        "ephemeral-storage".to_string(),
        bytes_quantity(m.fs_capacity - reserved.ephemeral_storage - nodefs_threshold),
    );

    let pressure = pressure(m, reserved.pids, &input.thresholds);
    let previous = input
        .previous
        .and_then(|s| s.conditions.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let conditions = conditions(&pressure, input.readiness)
        .into_iter()
        .map(|(kind, on, reason, message)| {
            let status = if on { "True" } else { "False" }.to_string();
            let transition = previous
                .iter()
                .find(|c| c.type_ == kind && c.status == status)
                .and_then(|c| c.last_transition_time.clone())
                .or_else(|| now.clone());
            NodeCondition {
                type_: kind.to_string(),
                status,
                reason: Some(reason.to_string()),
                message: Some(message),
                last_heartbeat_time: now.clone(),
                last_transition_time: transition,
            }
        })
        .collect();

    let facts = input.facts;
    let runtime_status = input.runtime_status;
    NodeStatus {
        capacity: Some(capacity),
        allocatable: Some(allocatable),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".to_string(),
                address: input.opts.node_ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".to_string(),
                address: input.opts.node_name.clone(),
            },
        ]),
        conditions: Some(conditions),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: input.opts.kubelet_port,
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: facts.architecture.clone(),
            boot_id: facts.boot_id.clone(),
            container_runtime_version: input.runtime_version.to_string(),
            kernel_version: facts.kernel_version.clone(),
            kube_proxy_version: String::new(),
            kubelet_version: super::info::kubelet_version(),
            machine_id: facts.machine_id.clone(),
            operating_system: "linux".to_string(),
            os_image: facts.os_image.clone(),
            swap: None,
            system_uuid: facts.system_uuid.clone(),
        }),
        features: runtime_status
            .and_then(|s| s.features.as_ref())
            .map(|f| NodeFeatures {
                supplemental_groups_policy: Some(f.supplemental_groups_policy),
            }),
        runtime_handlers: runtime_status
            .map(|s| {
                s.runtime_handlers
                    .iter()
                    .map(|h| NodeRuntimeHandler {
                        name: Some(h.name.clone()),
                        features: h.features.as_ref().map(|f| NodeRuntimeHandlerFeatures {
                            recursive_read_only_mounts: Some(f.recursive_read_only_mounts),
                            user_namespaces: Some(f.user_namespaces),
                        }),
                    })
                    .collect()
            })
            .filter(|h: &Vec<_>| !h.is_empty()),
        ..Default::default()
    }
}

/// Whether `next` says something `sent` did not: heartbeat times aside (as kubelet's
/// "status changed" check), so an unchanged node is reported only every 5 minutes.
pub fn changed(sent: Option<&NodeStatus>, next: &NodeStatus) -> bool {
    let Some(sent) = sent else { return true };
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(sent) != strip(next)
}

/// Whether the API's copy of the node status shows any of the conditions in `next` with
/// another status (or lacks one): the node lifecycle controller sets them to Unknown when the
/// lease goes stale, and only a patch sets them back. Conditions others own are not compared.
pub fn api_disagrees(api: Option<&NodeStatus>, next: &NodeStatus) -> bool {
    next.conditions.iter().flatten().any(|ours| {
        api.and_then(|a| condition(a, &ours.type_))
            .is_none_or(|theirs| theirs.status != ours.status)
    })
}

/// The Ready condition's status ("True"/"False"), if any.
pub fn ready_status(status: &NodeStatus) -> Option<&str> {
    condition(status, "Ready").map(|c| c.status.as_str())
}

pub fn condition<'a>(status: &'a NodeStatus, kind: &str) -> Option<&'a NodeCondition> {
    status.conditions.as_ref()?.iter().find(|c| c.type_ == kind)
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
