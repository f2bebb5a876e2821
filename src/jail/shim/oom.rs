//! OOM-kill detection from the container's memory cgroup: the `oom_kill` counter of
//! `memory.oom_control` (cgroup v1) or `memory.events` (v2), read when the process starts and
//! again after it died (before the cgroup is removed).

use std::path::{Path, PathBuf};
use tracing::info;

pub(crate) struct OomCounter {
    file: PathBuf,
    baseline: u64,
}

impl OomCounter {
    /// The counter of `pid`'s memory cgroup, or `None` (logged) when it cannot be read, e.g.
    /// rootless without a memory controller.
    pub fn for_process(pid: i32) -> Option<OomCounter> {
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let Some(file) = counter_file(&cgroups) else {
            info!(
                pid,
                "no readable memory cgroup: OOM kills will not be detected"
            );
            return None;
        };
        let Some(baseline) = read_oom_kills(&file) else {
            info!(file = %file.display(), "memory cgroup has no oom_kill counter: OOM kills will not be detected");
            return None;
        };
        Some(OomCounter { file, baseline })
    }

    /// Whether the cgroup's OOM killer fired since [`OomCounter::for_process`].
    pub fn fired(&self) -> bool {
        read_oom_kills(&self.file).is_some_and(|now| now > self.baseline)
    }
}

fn counter_file(proc_cgroup: &str) -> Option<PathBuf> {
    let (v1_path, v2_path) = parse_memory_cgroup(proc_cgroup);
    if let Some(path) = v1_path {
        let mount = libcgroups::v1::util::get_subsystem_mount_point(
            &libcgroups::v1::ControllerType::Memory,
        )
        .ok()?;
        return Some(join_cgroup(&mount, &path).join("memory.oom_control"));
    }
    let mount = libcgroups::v2::util::get_unified_mount_point().ok()?;
    let file = join_cgroup(&mount, &v2_path?).join("memory.events");
    file.exists().then_some(file)
}

fn join_cgroup(mount: &Path, cgroup: &str) -> PathBuf {
    mount.join(cgroup.trim_start_matches('/'))
}

/// `(v1 memory cgroup path, v2 cgroup path)` from `/proc/<pid>/cgroup`.
pub(crate) fn parse_memory_cgroup(proc_cgroup: &str) -> (Option<String>, Option<String>) {
    let mut v1 = None;
    let mut v2 = None;
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path.to_string());
        }
    }
    (v1, v2)
}

fn read_oom_kills(file: &Path) -> Option<u64> {
    parse_oom_kill(&std::fs::read_to_string(file).ok()?)
}

pub(crate) fn parse_oom_kill(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_cgroup_lines() {
        let hybrid = "12:pids:/a\n5:memory:/runp/c1\n0::/user.slice\n";
        assert_eq!(
            parse_memory_cgroup(hybrid),
            (Some("/runp/c1".into()), Some("/user.slice".into()))
        );
        assert_eq!(
            parse_memory_cgroup("0::/x/y\n"),
            (None, Some("/x/y".into()))
        );
        assert_eq!(
            parse_memory_cgroup("3:cpu,memory:/m\n"),
            (Some("/m".into()), None)
        );
        assert_eq!(parse_memory_cgroup("junk\n"), (None, None));
    }

    #[test]
    fn oom_kill_counter() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        let v2 = "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_oom_kill(v1), Some(2));
        assert_eq!(parse_oom_kill(v2), Some(1));
        assert_eq!(parse_oom_kill("oom_kill_disable 0\n"), None);
    }
}
