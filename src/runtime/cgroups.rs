//! cgroups through libcgroups: whether they are usable at all (not as mapped root in a user
//! namespace), pod cgroups, resource updates and usage statistics.

use crate::cri::api;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::spec::linux_resources;
use libcgroups::common::{
    AnyCgroupManager, CgroupConfig, CgroupManager, CgroupSetup, ControllerOpt,
    create_cgroup_manager,
};
use std::path::{Path, PathBuf};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Names of the mounts under /sys/fs/cgroup (directories, not the comount symlinks).
pub fn host_cgroup_mounts() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(CGROUP_ROOT) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Usage numbers read from a cgroup (or from /proc when cgroups are unavailable).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_ns: u64,
    pub memory_usage: u64,
    pub working_set: u64,
    pub rss: u64,
    pub processes: u64,
}

/// What this host lets us do with cgroups; decided once at start.
#[derive(Clone, Debug)]
pub struct Cgroups {
    setup: Option<String>,
    unavailable: Option<String>,
    /// pids.max of every pod cgroup.
    pod_max_pids: Option<i64>,
}

impl Cgroups {
    /// Usable when we are real root (not mapped root in a user namespace: there some cgroup
    /// files look writable yet refuse writes, e.g. devices.allow) and the cgroup filesystem is
    /// set up with writable controllers.
    pub fn detect(rootless: bool) -> Cgroups {
        if rootless {
            return Cgroups {
                setup: None,
                unavailable: Some(
                    "not real root (user namespace or unprivileged): cgroup controllers cannot be configured"
                        .to_string(),
                ),
                pod_max_pids: None,
            };
        }
        let setup = match libcgroups::common::get_cgroup_setup() {
            Ok(s) => s,
            Err(e) => {
                return Cgroups {
                    setup: None,
                    unavailable: Some(format!("no usable cgroup filesystem: {e}")),
                    pod_max_pids: None,
                };
            }
        };
        let dirs: Vec<PathBuf> = match setup {
            CgroupSetup::Unified => vec![PathBuf::from(CGROUP_ROOT)],
            CgroupSetup::Legacy | CgroupSetup::Hybrid => ["cpu", "memory", "pids"]
                .iter()
                .map(|c| Path::new(CGROUP_ROOT).join(c))
                .collect(),
        };
        let not_writable: Vec<String> = dirs
            .iter()
            .filter(|d| nix::unistd::access(d.as_path(), nix::unistd::AccessFlags::W_OK).is_err())
            .map(|d| d.display().to_string())
            .collect();
        Cgroups {
            setup: Some(setup.to_string()),
            unavailable: (!not_writable.is_empty())
                .then(|| format!("not writable: {}", not_writable.join(", "))),
            pod_max_pids: None,
        }
    }

    /// Every pod cgroup gets `pids.max = max` (a fork bomb stays inside its pod).
    pub fn with_pod_max_pids(mut self, max: Option<i64>) -> Cgroups {
        self.pod_max_pids = max.filter(|m| *m > 0);
        self
    }

    /// A host where cgroups are never used (tests of the fallback paths).
    pub fn disabled(reason: &str) -> Cgroups {
        Cgroups {
            setup: None,
            unavailable: Some(reason.to_string()),
            pod_max_pids: None,
        }
    }

    pub fn available(&self) -> bool {
        self.unavailable.is_none()
    }

    /// Why cgroups are not used, for logs and status.
    pub fn unavailable_reason(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    pub fn setup_name(&self) -> &str {
        self.setup.as_deref().unwrap_or("none")
    }

    fn manager(&self, path: &Path) -> Result<AnyCgroupManager> {
        create_cgroup_manager(CgroupConfig {
            cgroup_path: path.to_path_buf(),
            systemd_cgroup: false,
            container_name: String::new(),
        })
        .map_err(|e| RuntimeError::Internal(format!("cgroup {}: {e}", path.display())))
    }

    /// The pod's cgroup: the config's parent (cgroupfs syntax) or `/runp/<sandbox id>`.
    pub fn pod_cgroup(&self, config_parent: &str, sandbox_id: &str) -> Result<Option<PathBuf>> {
        if !self.available() {
            return Ok(None);
        }
        if config_parent.is_empty() {
            return Ok(Some(Path::new("/runp").join(sandbox_id)));
        }
        let p = Path::new(config_parent);
        if !p.is_absolute()
            || p.components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(RuntimeError::invalid(format!(
                "cgroup_parent {config_parent:?} must be an absolute cgroupfs path (the cgroup driver is cgroupfs)"
            )));
        }
        Ok(Some(p.to_path_buf()))
    }

    /// Creates the pod cgroup in every hierarchy and applies pod-level resources.
    pub fn create(
        &self,
        path: &Path,
        resources: Option<&api::LinuxContainerResources>,
    ) -> Result<()> {
        let rel = path.strip_prefix("/").unwrap_or(path);
        let roots: Vec<PathBuf> = if self.setup.as_deref() == Some("unified") {
            vec![PathBuf::from(CGROUP_ROOT)]
        } else {
            libcgroups::v1::util::list_supported_mount_points()
                .map_err(|e| RuntimeError::Internal(format!("cgroup mount points: {e}")))?
                .into_values()
                .collect()
        };
        for root in roots {
            let dir = root.join(rel);
            std::fs::create_dir_all(&dir).map_err(RuntimeError::io("creating cgroup", &dir))?;
        }
        if let Some(res) = resources {
            self.update(path, res)?;
        }
        if let Some(max) = self.pod_max_pids {
            self.limit_pids(path, max)?;
        }
        Ok(())
    }

    fn limit_pids(&self, path: &Path, max: i64) -> Result<()> {
        let resources = oci_spec::runtime::LinuxResourcesBuilder::default()
            .pids(
                oci_spec::runtime::LinuxPidsBuilder::default()
                    .limit(max)
                    .build()
                    .map_err(|e| RuntimeError::Internal(format!("pids limit: {e}")))?,
            )
            .build()
            .map_err(|e| RuntimeError::Internal(format!("pids limit: {e}")))?;
        let opt = ControllerOpt {
            resources: &resources,
            disable_oom_killer: false,
            oom_score_adj: None,
            freezer_state: None,
        };
        self.manager(path)?.apply(&opt).map_err(|e| {
            RuntimeError::Internal(format!("pids limit of cgroup {}: {e}", path.display()))
        })
    }

    /// Applies `res` to an existing cgroup.
    pub fn update(&self, path: &Path, res: &api::LinuxContainerResources) -> Result<()> {
        let resources = linux_resources(res)?;
        let opt = ControllerOpt {
            resources: &resources,
            disable_oom_killer: false,
            oom_score_adj: None,
            freezer_state: None,
        };
        self.manager(path)?
            .apply(&opt)
            .map_err(|e| RuntimeError::Internal(format!("updating cgroup {}: {e}", path.display())))
    }

    /// Removes the cgroup (killing what is left in it). Missing is fine.
    pub fn remove(&self, path: &Path) -> Result<()> {
        self.manager(path)?
            .remove()
            .map_err(|e| RuntimeError::Internal(format!("removing cgroup {}: {e}", path.display())))
    }

    pub fn usage(&self, path: &Path) -> Result<Usage> {
        let stats = self
            .manager(path)?
            .stats()
            .map_err(|e| RuntimeError::Internal(format!("cgroup stats {}: {e}", path.display())))?;
        let mem = &stats.memory;
        // cadvisor's working set: usage minus inactive file pages.
        let inactive = mem
            .stats
            .get("total_inactive_file")
            .or_else(|| mem.stats.get("inactive_file"))
            .copied()
            .unwrap_or(0);
        let rss = mem
            .stats
            .get("total_rss")
            .or_else(|| mem.stats.get("anon"))
            .copied()
            .unwrap_or(0);
        Ok(Usage {
            cpu_ns: stats.cpu.usage.usage_total,
            memory_usage: mem.memory.usage,
            working_set: mem.memory.usage.saturating_sub(inactive),
            rss,
            processes: stats.pids.current,
        })
    }
}

/// Fallback without cgroups: sums /proc/<pid>/stat times and RSS over `pid` and its
/// descendants.
pub fn proc_usage(pid: i32) -> Usage {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .unwrap_or(100) as u64;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .filter(|p| *p > 0)
        .unwrap_or(4096) as u64;
    let mut usage = Usage::default();
    let mut queue = vec![pid];
    let mut seen = std::collections::HashSet::new();
    while let Some(p) = queue.pop() {
        if !seen.insert(p) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // Fields after the command name (which may contain spaces) start at state (field 3).
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| {
            fields
                .get(n - 3)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        usage.cpu_ns += (field(14) + field(15)) * 1_000_000_000 / ticks;
        usage.rss += field(24) * page;
        usage.processes += 1;
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for task in tasks.flatten() {
                if let Ok(children) = std::fs::read_to_string(task.path().join("children")) {
                    queue.extend(
                        children
                            .split_whitespace()
                            .filter_map(|c| c.parse::<i32>().ok()),
                    );
                }
            }
        }
    }
    usage.memory_usage = usage.rss;
    usage.working_set = usage.rss;
    usage
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_usage_counts_this_process() {
        let u = proc_usage(std::process::id() as i32);
        assert!(u.processes >= 1);
        assert!(u.rss > 0);
        assert_eq!(proc_usage(-5), Usage::default());
    }

    #[test]
    fn pod_cgroup_paths() {
        let off = Cgroups::disabled("test");
        assert_eq!(off.pod_cgroup("/kubepods/x", "id").unwrap(), None);
        let on = Cgroups {
            setup: Some("hybrid".into()),
            unavailable: None,
            pod_max_pids: None,
        };
        assert_eq!(
            on.pod_cgroup("", "abc").unwrap(),
            Some(PathBuf::from("/runp/abc"))
        );
        assert_eq!(
            on.pod_cgroup("/kubepods/pod1", "abc").unwrap(),
            Some(PathBuf::from("/kubepods/pod1"))
        );
        assert!(on.pod_cgroup("kubepods.slice", "abc").is_err());
        assert!(on.pod_cgroup("/a/../b", "abc").is_err());
    }
}
