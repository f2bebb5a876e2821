//! cgroups: whether they are usable at all (not as mapped root in a user namespace), pod
//! cgroups, resource updates (through libcgroups) and usage statistics.

mod usage;

pub use usage::{Usage, proc_usage};

use crate::cri::api;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::spec::linux_resources;
use libcgroups::common::{
    AnyCgroupManager, CgroupConfig, CgroupManager, CgroupSetup, ControllerOpt,
    create_cgroup_manager,
};
use std::collections::BTreeMap;
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

/// Removes cgroup directory `dir` after its children, as runc's RemovePath: a cgroup with
/// children or processes cannot be removed. Processes left are killed; a killed process leaves
/// its cgroup a moment later, so a busy cgroup is tried again a few times.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    let mut delay = std::time::Duration::from_millis(10);
    for attempt in 1.. {
        if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        match std::fs::remove_dir(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) && attempt < 6 => {
                std::thread::sleep(delay);
                delay *= 2;
            }
            other => return other,
        }
    }
    Ok(())
}

/// What this host lets us do with cgroups; decided once at start.
#[derive(Clone, Debug)]
pub struct Cgroups {
    setup: Option<String>,
    unavailable: Option<String>,
    /// pids.max of every pod cgroup.
    pod_max_pids: Option<i64>,
    hierarchies: Hierarchies,
}

/// Where the cgroup hierarchies are mounted, found once at start: libcgroups' v1 manager
/// re-reads /proc/self/mountinfo once per controller every time it is built, and mountinfo
/// grows with every pod's mounts.
#[derive(Clone, Debug)]
pub(crate) enum Hierarchies {
    None,
    Unified(PathBuf),
    /// Controller name → its hierarchy's mount point (comounted controllers share one).
    V1(BTreeMap<String, PathBuf>),
}

impl Hierarchies {
    /// The directory of cgroup `rel` in the hierarchy of `controller`.
    fn dir(&self, controller: &str, rel: &Path) -> Option<PathBuf> {
        let rel = rel.strip_prefix("/").unwrap_or(rel);
        match self {
            Hierarchies::None => None,
            Hierarchies::Unified(root) => Some(root.join(rel)),
            Hierarchies::V1(mounts) => mounts.get(controller).map(|m| m.join(rel)),
        }
    }

    /// The directories of cgroup `rel` in every hierarchy, each once.
    fn dirs(&self, rel: &Path) -> Vec<PathBuf> {
        let rel = rel.strip_prefix("/").unwrap_or(rel);
        let mut dirs: Vec<PathBuf> = match self {
            Hierarchies::None => Vec::new(),
            Hierarchies::Unified(root) => vec![root.join(rel)],
            Hierarchies::V1(mounts) => mounts.values().map(|m| m.join(rel)).collect(),
        };
        dirs.sort();
        dirs.dedup();
        dirs
    }
}

impl Cgroups {
    /// Usable when we are real root (not mapped root in a user namespace: there some cgroup
    /// files look writable yet refuse writes, e.g. devices.allow) and the cgroup filesystem is
    /// set up with writable controllers.
    pub fn detect(rootless: bool) -> Cgroups {
        if rootless {
            return Cgroups::disabled(
                "not real root (user namespace or unprivileged): cgroup controllers cannot be configured",
            );
        }
        let setup = match libcgroups::common::get_cgroup_setup() {
            Ok(s) => s,
            Err(e) => return Cgroups::disabled(&format!("no usable cgroup filesystem: {e}")),
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
        let hierarchies = match setup {
            CgroupSetup::Unified => Hierarchies::Unified(PathBuf::from(CGROUP_ROOT)),
            CgroupSetup::Legacy | CgroupSetup::Hybrid => {
                match libcgroups::v1::util::list_supported_mount_points() {
                    Ok(mounts) => Hierarchies::V1(
                        mounts
                            .into_iter()
                            .map(|(controller, mount)| (controller.to_string(), mount))
                            .collect(),
                    ),
                    Err(e) => {
                        return Cgroups {
                            setup: Some(setup.to_string()),
                            ..Cgroups::disabled(&format!("cgroup v1 mount points: {e}"))
                        };
                    }
                }
            }
        };
        Cgroups {
            setup: Some(setup.to_string()),
            unavailable: (!not_writable.is_empty())
                .then(|| format!("not writable: {}", not_writable.join(", "))),
            pod_max_pids: None,
            hierarchies,
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
            hierarchies: Hierarchies::None,
        }
    }

    /// A container's device rules are enforced: v1's devices controller. On cgroup v2 that
    /// takes a BPF program, which libcgroups builds only with its `cgroupsv2_devices` feature
    /// (libbpf), not enabled here; the spec then drops CAP_MKNOD instead.
    pub fn filters_devices(&self) -> bool {
        self.available()
            && matches!(&self.hierarchies, Hierarchies::V1(m) if m.contains_key("devices"))
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
        for dir in self.hierarchies.dirs(path) {
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
        let Some(dir) = self.hierarchies.dir("pids", path) else {
            return Err(RuntimeError::Internal(
                "no pids cgroup controller for the pod pids limit".into(),
            ));
        };
        let file = dir.join("pids.max");
        std::fs::write(&file, max.to_string()).map_err(RuntimeError::io("writing", &file))
    }

    /// Starts, in the background, the RCU grace period that the next move of a process into a
    /// cgroup must wait for, so the container's own move (in libcontainer's intermediate process,
    /// several ms later) finds it over or under way instead of starting it.
    ///
    /// Why: a write to `cgroup.procs` takes the kernel's cgroup_threadgroup_rwsem for writing,
    /// whose first writer after a quiet spell waits a full RCU grace period (`rcu_sync_enter`,
    /// 7–20 ms here, measured with perf as the largest part of StartContainer); writers within
    /// about 10 ms after one do not wait. The primer moves this process into the cgroup it is
    /// already in (no change), from a thread of its own, so nothing waits for it.
    pub fn prime_migration(&self) {
        let Some(procs) = self.own_procs_file() else {
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("runp-cgroup-primer".into())
            .spawn(move || {
                // "0" is the writing process. A failure only loses the head start.
                if let Err(e) = std::fs::write(&procs, "0") {
                    tracing::debug!(file = %procs.display(), error = %e, "cgroup primer");
                }
            });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "cgroup primer thread");
        }
    }

    /// `cgroup.procs` of the cgroup this process is in, in the pids (or unified) hierarchy.
    fn own_procs_file(&self) -> Option<PathBuf> {
        if !self.available() {
            return None;
        }
        let controller = match self.hierarchies {
            Hierarchies::Unified(_) => "",
            Hierarchies::V1(_) => "pids",
            Hierarchies::None => return None,
        };
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let path = own.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let matches = match controller {
                "" => controllers.is_empty(),
                c => controllers.split(',').any(|name| name == c),
            };
            matches.then(|| PathBuf::from(path))
        })?;
        // The unified hierarchy has one directory for every controller.
        let dir = self.hierarchies.dir("pids", &path)?;
        Some(dir.join("cgroup.procs"))
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

    /// Removes the cgroup and every cgroup below it (a pod's containers, whose shim may have
    /// died before removing its own), killing what is left in them. Missing is fine.
    pub fn remove(&self, path: &Path) -> Result<()> {
        for dir in self.hierarchies.dirs(path) {
            remove_tree(&dir).map_err(RuntimeError::io("removing cgroup", &dir))?;
        }
        Ok(())
    }

    pub fn usage(&self, path: &Path) -> Result<Usage> {
        usage::cgroup_usage(&self.hierarchies, path)
            .map_err(|e| RuntimeError::Internal(format!("cgroup stats {}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_tree_is_removed_children_first_and_missing_is_fine() {
        let root = tempfile::tempdir().unwrap();
        let pod = root.path().join("runp/pod");
        std::fs::create_dir_all(pod.join("ctr-a/inner")).unwrap();
        std::fs::create_dir_all(pod.join("ctr-b")).unwrap();
        remove_tree(&pod).unwrap();
        assert!(!pod.exists());
        assert!(root.path().join("runp").is_dir(), "the parent stays");
        remove_tree(&pod).unwrap();
        let h = Hierarchies::V1(
            [
                ("pids", "pids"),
                ("cpu", "cpu,cpuacct"),
                ("cpuacct", "cpu,cpuacct"),
            ]
            .into_iter()
            .map(|(c, m)| (c.to_string(), root.path().join(m)))
            .collect(),
        );
        assert_eq!(
            h.dirs(Path::new("/runp/x")),
            vec![
                root.path().join("cpu,cpuacct/runp/x"),
                root.path().join("pids/runp/x")
            ],
            "comounted controllers once"
        );
    }

    #[test]
    fn pod_cgroup_paths() {
        let off = Cgroups::disabled("test");
        assert_eq!(off.pod_cgroup("/kubepods/x", "id").unwrap(), None);
        let on = Cgroups {
            setup: Some("hybrid".into()),
            unavailable: None,
            pod_max_pids: None,
            hierarchies: Hierarchies::None,
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
