//! Container and pod statistics: cgroups when usable, else /proc of the container's processes.

use crate::cri::api;
use crate::runtime::ProcessRuntime;
use crate::runtime::cgroups::{Usage, proc_usage};
use crate::runtime::error::Result;
use crate::runtime::state::labels_match;
use crate::runtime::state::{ContainerRecord, ContainerState, SandboxRecord};
use std::path::Path;

fn u64v(value: u64) -> Option<api::UInt64Value> {
    Some(api::UInt64Value { value })
}

fn cpu_usage(now: i64, usage: &Usage) -> api::CpuUsage {
    api::CpuUsage {
        timestamp: now,
        usage_core_nano_seconds: u64v(usage.cpu_ns),
        usage_nano_cores: None,
    }
}

fn memory_usage(now: i64, usage: &Usage) -> api::MemoryUsage {
    api::MemoryUsage {
        timestamp: now,
        working_set_bytes: u64v(usage.working_set),
        usage_bytes: u64v(usage.memory_usage),
        rss_bytes: u64v(usage.rss),
        ..Default::default()
    }
}

/// Bytes in the container's writable layer: its state dir on the same filesystem (an overlay
/// rootfs is another mount and is skipped; a copied rootfs is all writable).
fn writable_bytes(dir: &Path) -> (u64, u64) {
    let mut bytes = 0;
    let mut inodes = 0;
    for entry in walkdir::WalkDir::new(dir)
        .same_file_system(true)
        .into_iter()
        .flatten()
    {
        if let Ok(meta) = entry.metadata() {
            bytes += meta.len();
            inodes += 1;
        }
    }
    (bytes, inodes)
}

impl ProcessRuntime {
    fn usage_of(&self, record: &ContainerRecord) -> Usage {
        if record.state != ContainerState::Running {
            return Usage::default();
        }
        if self.cgroups.available()
            && let Some(path) = &record.cgroups_path
        {
            match self.cgroups.usage(path) {
                Ok(u) => return u,
                Err(e) => {
                    tracing::debug!(container = %record.id, error = %e, "cgroup stats failed; using /proc")
                }
            }
        }
        record
            .process
            .map(|p| proc_usage(p.pid))
            .unwrap_or_default()
    }

    fn container_stats_of(&self, record: &ContainerRecord) -> api::ContainerStats {
        let now = self.now();
        let usage = self.usage_of(record);
        let config = record.config().unwrap_or_default();
        let dir = self.shared.layout.container_dir(&record.id);
        let (bytes, inodes) = writable_bytes(&dir);
        api::ContainerStats {
            attributes: Some(api::ContainerAttributes {
                id: record.id.clone(),
                metadata: config.metadata,
                labels: config.labels,
                annotations: config.annotations,
            }),
            cpu: Some(cpu_usage(now, &usage)),
            memory: Some(memory_usage(now, &usage)),
            writable_layer: Some(api::FilesystemUsage {
                timestamp: now,
                fs_id: Some(api::FilesystemIdentifier {
                    mountpoint: dir.display().to_string(),
                }),
                used_bytes: u64v(bytes),
                inodes_used: u64v(inodes),
            }),
            swap: None,
        }
    }

    pub(crate) fn container_stats_impl(&self, id: &str) -> Result<api::ContainerStats> {
        let record = self.shared.index.container(id)?.snapshot();
        Ok(self.container_stats_of(&record))
    }

    pub(crate) fn list_container_stats_impl(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> Vec<api::ContainerStats> {
        let filter = filter.unwrap_or_default();
        self.shared
            .index
            .container_records(&filter.id, &filter.pod_sandbox_id)
            .into_iter()
            .filter(|r| {
                r.config()
                    .map(|c| labels_match(&filter.label_selector, &c.labels))
                    .unwrap_or(false)
            })
            .map(|r| self.container_stats_of(&r))
            .collect()
    }

    fn pod_stats_of(&self, record: &SandboxRecord) -> api::PodSandboxStats {
        let now = self.now();
        let containers: Vec<api::ContainerStats> = self
            .shared
            .index
            .containers_of(&record.id)
            .iter()
            .map(|c| self.container_stats_of(&c.snapshot()))
            .collect();
        let from_cgroup = record
            .cgroup_parent
            .as_ref()
            .filter(|_| self.cgroups.available())
            .and_then(|p| self.cgroups.usage(p).ok());
        let usage = from_cgroup.unwrap_or_else(|| {
            let mut sum = record.infra.map(|p| proc_usage(p.pid)).unwrap_or_default();
            for c in &containers {
                sum.cpu_ns += c
                    .cpu
                    .as_ref()
                    .and_then(|u| u.usage_core_nano_seconds.as_ref())
                    .map_or(0, |v| v.value);
                sum.working_set += c
                    .memory
                    .as_ref()
                    .and_then(|m| m.working_set_bytes.as_ref())
                    .map_or(0, |v| v.value);
                sum.memory_usage += c
                    .memory
                    .as_ref()
                    .and_then(|m| m.usage_bytes.as_ref())
                    .map_or(0, |v| v.value);
            }
            sum
        });
        let config = record.config().unwrap_or_default();
        api::PodSandboxStats {
            attributes: Some(api::PodSandboxAttributes {
                id: record.id.clone(),
                metadata: config.metadata,
                labels: config.labels,
                annotations: config.annotations,
            }),
            linux: Some(api::LinuxPodSandboxStats {
                cpu: Some(cpu_usage(now, &usage)),
                memory: Some(memory_usage(now, &usage)),
                network: None,
                process: Some(api::ProcessUsage {
                    timestamp: now,
                    process_count: u64v(usage.processes),
                }),
                containers,
            }),
            windows: None,
        }
    }

    pub(crate) fn pod_sandbox_stats_impl(&self, id: &str) -> Result<api::PodSandboxStats> {
        let record = self.shared.index.sandbox(id)?.snapshot();
        Ok(self.pod_stats_of(&record))
    }

    pub(crate) fn list_pod_sandbox_stats_impl(
        &self,
        filter: Option<api::PodSandboxStatsFilter>,
    ) -> Vec<api::PodSandboxStats> {
        let filter = filter.unwrap_or_default();
        self.shared
            .index
            .sandbox_records(&filter.id)
            .into_iter()
            .filter(|r| {
                r.config()
                    .map(|c| labels_match(&filter.label_selector, &c.labels))
                    .unwrap_or(false)
            })
            .map(|r| self.pod_stats_of(&r))
            .collect()
    }
}
