//! `/stats/summary` (the Summary API, stats/v1alpha1) and `/metrics/resource` (what
//! metrics-server scrapes), from the CRI's ListPodSandboxStats plus node figures read from
//! /proc and statvfs of the agent's root. Reading is separate from the pure rendering.

use crate::cri::{CriResult, RuntimeService, api};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// Node-wide figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFigures {
    /// Cumulative CPU time of all cores (user, nice, system, irq, softirq, steal).
    pub cpu_core_nanos: Option<u64>,
    pub memory: Option<MemInfo>,
    /// statvfs of the agent's root: (capacity, available, used) bytes.
    pub fs: Option<(u64, u64, u64)>,
    pub boot_time: Option<i64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub available: u64,
    pub free: u64,
}

/// Cumulative node CPU nanoseconds from /proc/stat's `cpu` line (USER_HZ ticks).
pub fn parse_proc_stat(text: &str, ticks_per_second: u64) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal: busy time leaves out idle and iowait.
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| fields.get(*i))
        .sum();
    let per_tick = 1_000_000_000 / ticks_per_second.max(1);
    Some(busy.saturating_mul(per_tick))
}

/// The boot time (seconds since the epoch) from /proc/stat's `btime`.
pub fn parse_boot_time(text: &str) -> Option<i64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// MemTotal, MemAvailable and MemFree of /proc/meminfo, in bytes.
pub fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    };
    Some(MemInfo {
        total: field("MemTotal:")?,
        available: field("MemAvailable:")?,
        free: field("MemFree:")?,
    })
}

/// Reads the node figures (missing pieces stay None).
pub fn node_figures(root: &Path) -> NodeFigures {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .unwrap_or(100);
    let fs = nix::sys::statvfs::statvfs(root).ok().map(|s| {
        let frsize = s.fragment_size();
        let capacity = s.blocks().saturating_mul(frsize);
        let available = s.blocks_available().saturating_mul(frsize);
        let free = s.blocks_free().saturating_mul(frsize);
        (capacity, available, capacity.saturating_sub(free))
    });
    NodeFigures {
        cpu_core_nanos: parse_proc_stat(&stat, ticks),
        memory: std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| parse_meminfo(&m)),
        fs,
        boot_time: parse_boot_time(&stat),
    }
}

/// What the runtime reports: the pods' stats and start times (ns) of sandboxes and containers.
#[derive(Clone, Debug, Default)]
pub struct RuntimeFigures {
    pub pods: Vec<api::PodSandboxStats>,
    pub started: HashMap<String, i64>,
}

pub async fn runtime_figures(runtime: &dyn RuntimeService) -> CriResult<RuntimeFigures> {
    let pods = runtime
        .list_pod_sandbox_stats(api::ListPodSandboxStatsRequest::default())
        .await?
        .stats;
    let mut started = HashMap::new();
    for s in runtime
        .list_pod_sandbox(api::ListPodSandboxRequest::default())
        .await?
        .items
    {
        started.insert(s.id, s.created_at);
    }
    for c in runtime
        .list_containers(api::ListContainersRequest::default())
        .await?
        .containers
    {
        started.insert(c.id, c.created_at);
    }
    Ok(RuntimeFigures { pods, started })
}

fn time(ns: i64) -> String {
    Utc.timestamp_nanos(ns)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn value(v: &Option<api::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

fn cpu(c: &Option<api::CpuUsage>) -> Option<Value> {
    let c = c.as_ref()?;
    Some(json!({
        "time": time(c.timestamp),
        "usageNanoCores": value(&c.usage_nano_cores),
        "usageCoreNanoSeconds": value(&c.usage_core_nano_seconds),
    }))
}

fn memory(m: &Option<api::MemoryUsage>) -> Option<Value> {
    let m = m.as_ref()?;
    Some(json!({
        "time": time(m.timestamp),
        "availableBytes": value(&m.available_bytes),
        "usageBytes": value(&m.usage_bytes),
        "workingSetBytes": value(&m.working_set_bytes),
        "rssBytes": value(&m.rss_bytes),
        "pageFaults": value(&m.page_faults),
        "majorPageFaults": value(&m.major_page_faults),
    }))
}

fn interface(i: &api::NetworkInterfaceUsage) -> Value {
    json!({
        "name": i.name,
        "rxBytes": value(&i.rx_bytes),
        "rxErrors": value(&i.rx_errors),
        "txBytes": value(&i.tx_bytes),
        "txErrors": value(&i.tx_errors),
    })
}

/// The Summary API document.
pub fn summary(
    node_name: &str,
    node: &NodeFigures,
    rt: &RuntimeFigures,
    now: DateTime<Utc>,
) -> Value {
    let now_text = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut node_json = json!({
        "nodeName": node_name,
        "systemContainers": [],
        "startTime": node.boot_time.map(|b| time(b.saturating_mul(1_000_000_000))),
        "cpu": node.cpu_core_nanos.map(|n| json!({"time": now_text, "usageCoreNanoSeconds": n})),
    });
    if let Some(m) = node.memory {
        let used = m.total.saturating_sub(m.free);
        node_json["memory"] = json!({
            "time": now_text,
            "availableBytes": m.available,
            "usageBytes": used,
            "workingSetBytes": m.total.saturating_sub(m.available),
        });
    }
    if let Some((capacity, available, used)) = node.fs {
        let fs = json!({
            "time": now_text,
            "capacityBytes": capacity,
            "availableBytes": available,
            "usedBytes": used,
        });
        node_json["fs"] = fs.clone();
        node_json["runtime"] = json!({"imageFs": fs});
    }
    let pods: Vec<Value> = rt
        .pods
        .iter()
        .filter_map(|p| {
            let attrs = p.attributes.as_ref()?;
            let meta = attrs.metadata.as_ref()?;
            let linux = p.linux.clone().unwrap_or_default();
            let containers: Vec<Value> = linux
                .containers
                .iter()
                .filter_map(|c| {
                    let a = c.attributes.as_ref()?;
                    Some(json!({
                        "name": a.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default(),
                        "startTime": rt.started.get(&a.id).map(|t| time(*t)),
                        "cpu": cpu(&c.cpu),
                        "memory": memory(&c.memory),
                        "rootfs": c.writable_layer.as_ref().map(|f| json!({
                            "time": time(f.timestamp),
                            "usedBytes": value(&f.used_bytes),
                            "inodesUsed": value(&f.inodes_used),
                        })),
                    }))
                })
                .collect();
            let network = linux.network.as_ref().map(|n| {
                let mut v = n
                    .default_interface
                    .as_ref()
                    .map(interface)
                    .unwrap_or(json!({}));
                v["time"] = json!(time(n.timestamp));
                v["interfaces"] = json!(n.interfaces.iter().map(interface).collect::<Vec<_>>());
                v
            });
            Some(json!({
                "podRef": {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid},
                "startTime": rt.started.get(&attrs.id).map(|t| time(*t)),
                "containers": containers,
                "cpu": cpu(&linux.cpu),
                "memory": memory(&linux.memory),
                "network": network,
                "volume": [],
                "process_stats": linux.process.as_ref().map(|p| json!({
                    "process_count": value(&p.process_count),
                })),
            }))
        })
        .collect();
    json!({"node": node_json, "pods": pods})
}

/// Prometheus label value escaping.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `/metrics/resource`: kubelet's resource metrics (the ones metrics-server reads).
pub fn resource_metrics(node: &NodeFigures, rt: &RuntimeFigures, now: DateTime<Utc>) -> String {
    let ms = now.timestamp_millis();
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        if samples.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {name} [STABLE] {help}\n# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "{name}{labels} {v} {ms}");
        }
    };
    let secs = |ns: u64| ns as f64 / 1e9;
    let node_cpu: Vec<_> = node
        .cpu_core_nanos
        .map(|n| (String::new(), secs(n)))
        .into_iter()
        .collect();
    family(
        "node_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
        node_cpu,
    );
    let node_mem: Vec<_> = node
        .memory
        .map(|m| (String::new(), m.total.saturating_sub(m.available) as f64))
        .into_iter()
        .collect();
    family(
        "node_memory_working_set_bytes",
        "gauge",
        "Current working set of the node in bytes",
        node_mem,
    );
    let (mut c_cpu, mut c_mem, mut c_start, mut p_cpu, mut p_mem) =
        (vec![], vec![], vec![], vec![], vec![]);
    for p in &rt.pods {
        let Some(meta) = p.attributes.as_ref().and_then(|a| a.metadata.as_ref()) else {
            continue;
        };
        let pod_labels = format!(
            "namespace=\"{}\",pod=\"{}\"",
            label(&meta.namespace),
            label(&meta.name)
        );
        let linux = p.linux.clone().unwrap_or_default();
        if let Some(v) = linux
            .cpu
            .as_ref()
            .and_then(|c| value(&c.usage_core_nano_seconds))
        {
            p_cpu.push((format!("{{{pod_labels}}}"), secs(v)));
        }
        if let Some(v) = linux
            .memory
            .as_ref()
            .and_then(|m| value(&m.working_set_bytes))
        {
            p_mem.push((format!("{{{pod_labels}}}"), v as f64));
        }
        for c in &linux.containers {
            let Some(a) = c.attributes.as_ref() else {
                continue;
            };
            let name = a
                .metadata
                .as_ref()
                .map(|m| m.name.as_str())
                .unwrap_or_default();
            let labels = format!("{{container=\"{}\",{pod_labels}}}", label(name));
            if let Some(v) = c
                .cpu
                .as_ref()
                .and_then(|c| value(&c.usage_core_nano_seconds))
            {
                c_cpu.push((labels.clone(), secs(v)));
            }
            if let Some(v) = c.memory.as_ref().and_then(|m| value(&m.working_set_bytes)) {
                c_mem.push((labels.clone(), v as f64));
            }
            if let Some(t) = rt.started.get(&a.id) {
                c_start.push((labels, *t as f64 / 1e9));
            }
        }
    }
    family(
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
        c_cpu,
    );
    family(
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set of the container in bytes",
        c_mem,
    );
    family(
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds",
        c_start,
    );
    family(
        "pod_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the pod in core-seconds",
        p_cpu,
    );
    family(
        "pod_memory_working_set_bytes",
        "gauge",
        "Current working set of the pod in bytes",
        p_mem,
    );
    let _ = writeln!(
        out,
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n# TYPE resource_scrape_error gauge\nresource_scrape_error 0"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let stat = "cpu  100 20 30 1000 50 5 5 0 0 0\ncpu0 1 2 3 4\nbtime 1700000000\n";
        assert_eq!(parse_proc_stat(stat, 100), Some(160 * 10_000_000));
        assert_eq!(parse_boot_time(stat), Some(1_700_000_000));
        assert_eq!(parse_proc_stat("nothing", 100), None);
        let mem = "MemTotal:       8000 kB\nMemFree:        1000 kB\nMemAvailable:   3000 kB\n";
        assert_eq!(
            parse_meminfo(mem),
            Some(MemInfo {
                total: 8000 * 1024,
                available: 3000 * 1024,
                free: 1000 * 1024
            })
        );
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
    }

    fn figures() -> (NodeFigures, RuntimeFigures) {
        let node = NodeFigures {
            cpu_core_nanos: Some(5_000_000_000),
            memory: Some(MemInfo {
                total: 100,
                available: 40,
                free: 10,
            }),
            fs: Some((1000, 600, 400)),
            boot_time: Some(1_700_000_000),
        };
        let u = |v| Some(api::UInt64Value { value: v });
        let pod = api::PodSandboxStats {
            attributes: Some(api::PodSandboxAttributes {
                id: "sb".into(),
                metadata: Some(api::PodSandboxMetadata {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: "u1".into(),
                    attempt: 0,
                }),
                ..Default::default()
            }),
            linux: Some(api::LinuxPodSandboxStats {
                cpu: Some(api::CpuUsage {
                    timestamp: 1,
                    usage_core_nano_seconds: u(2_000_000_000),
                    usage_nano_cores: u(5),
                }),
                memory: Some(api::MemoryUsage {
                    working_set_bytes: u(4096),
                    ..Default::default()
                }),
                containers: vec![api::ContainerStats {
                    attributes: Some(api::ContainerAttributes {
                        id: "c1".into(),
                        metadata: Some(api::ContainerMetadata {
                            name: "main".into(),
                            attempt: 0,
                        }),
                        ..Default::default()
                    }),
                    cpu: Some(api::CpuUsage {
                        timestamp: 1,
                        usage_core_nano_seconds: u(1_500_000_000),
                        usage_nano_cores: None,
                    }),
                    memory: Some(api::MemoryUsage {
                        working_set_bytes: u(2048),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let rt = RuntimeFigures {
            pods: vec![pod],
            started: HashMap::from([("c1".to_string(), 1_700_000_100_000_000_000)]),
        };
        (node, rt)
    }

    #[test]
    fn summary_has_node_and_pod_figures() {
        let (node, rt) = figures();
        let s = summary("n1", &node, &rt, Utc::now());
        assert_eq!(s["node"]["nodeName"], "n1");
        assert_eq!(s["node"]["cpu"]["usageCoreNanoSeconds"], 5_000_000_000u64);
        assert_eq!(s["node"]["memory"]["workingSetBytes"], 60);
        assert_eq!(s["node"]["fs"]["capacityBytes"], 1000);
        let pod = &s["pods"][0];
        assert_eq!(pod["podRef"]["name"], "web");
        assert_eq!(pod["cpu"]["usageNanoCores"], 5);
        assert_eq!(pod["containers"][0]["name"], "main");
        assert_eq!(pod["containers"][0]["memory"]["workingSetBytes"], 2048);
        assert_eq!(pod["containers"][0]["startTime"], "2023-11-14T22:15:00Z");
    }

    #[test]
    fn resource_metrics_are_prometheus_text() {
        let (node, rt) = figures();
        let now = Utc.timestamp_millis_opt(1_000).unwrap();
        let text = resource_metrics(&node, &rt, now);
        for line in [
            "# TYPE node_cpu_usage_seconds_total counter",
            "node_cpu_usage_seconds_total 5 1000",
            "node_memory_working_set_bytes 60 1000",
            "container_cpu_usage_seconds_total{container=\"main\",namespace=\"default\",pod=\"web\"} 1.5 1000",
            "container_memory_working_set_bytes{container=\"main\",namespace=\"default\",pod=\"web\"} 2048 1000",
            "container_start_time_seconds{container=\"main\",namespace=\"default\",pod=\"web\"} 1700000100 1000",
            "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 2 1000",
            "pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 4096 1000",
            "resource_scrape_error 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        assert_eq!(label("a\"b\\c"), "a\\\"b\\\\c");
    }
}
