//! Usage numbers of a cgroup, read straight from its files, and the /proc fallback.
//!
//! Not through libcgroups' stats: its v1 manager finds each controller by re-reading
//! /proc/self/mountinfo and /proc/self/cgroup once per controller per call, and mountinfo grows
//! with every pod's mounts (about 4 ms a read at 2,000 mounts), so a stats round over many pods
//! cost seconds of CPU.

use super::Hierarchies;
use std::io;
use std::path::Path;

/// Usage numbers read from a cgroup (or from /proc when cgroups are unavailable).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_ns: u64,
    pub memory_usage: u64,
    pub working_set: u64,
    pub rss: u64,
    pub processes: u64,
}

/// The usage of the cgroup at `rel` (relative to each hierarchy's root). A cgroup that does not
/// exist is an error; a controller file that is missing counts as 0.
pub(super) fn cgroup_usage(hierarchies: &Hierarchies, rel: &Path) -> io::Result<Usage> {
    let dir = |controller: &str| hierarchies.dir(controller, rel);
    let memory_dir = dir("memory").ok_or_else(|| io::Error::other("no memory hierarchy"))?;
    if !memory_dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no cgroup {}", memory_dir.display()),
        ));
    }
    let read = |controller: &str, file: &str| -> Option<String> {
        std::fs::read_to_string(dir(controller)?.join(file)).ok()
    };
    let number = |controller: &str, file: &str| -> u64 {
        read(controller, file)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let memory_stat = read("memory", "memory.stat").unwrap_or_default();
    let stat = |key: &str| stat_value(&memory_stat, key);
    let (cpu_ns, memory_usage, inactive_file, rss) = match hierarchies {
        Hierarchies::Unified(_) => (
            read("cpu", "cpu.stat")
                .and_then(|s| stat_value(&s, "usage_usec"))
                .unwrap_or(0)
                .saturating_mul(1000),
            number("memory", "memory.current"),
            stat("inactive_file"),
            stat("anon"),
        ),
        _ => (
            number("cpuacct", "cpuacct.usage"),
            number("memory", "memory.usage_in_bytes"),
            stat("total_inactive_file").or_else(|| stat("inactive_file")),
            stat("total_rss").or_else(|| stat("rss")),
        ),
    };
    Ok(Usage {
        cpu_ns,
        memory_usage,
        // cadvisor's working set: usage minus inactive file pages.
        working_set: memory_usage.saturating_sub(inactive_file.unwrap_or(0)),
        rss: rss.unwrap_or(0),
        processes: number("pids", "pids.current"),
    })
}

/// `key`'s value in a flat keyed file (`memory.stat`, `cpu.stat`).
fn stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
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
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    #[test]
    fn proc_usage_counts_this_process() {
        let u = proc_usage(std::process::id() as i32);
        assert!(u.processes >= 1);
        assert!(u.rss > 0);
        assert_eq!(proc_usage(-5), Usage::default());
    }

    #[test]
    fn stat_values_by_exact_key() {
        let text = "cache 5\ntotal_rss 7\nrss 3\ninactive_file 11\n";
        assert_eq!(stat_value(text, "rss"), Some(3));
        assert_eq!(stat_value(text, "total_rss"), Some(7));
        assert_eq!(stat_value(text, "inactive_file"), Some(11));
        assert_eq!(stat_value(text, "anon"), None);
    }

    fn write(dir: &Path, file: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
    }

    #[test]
    fn v1_usage_from_the_controllers_files() {
        let root = tempfile::tempdir().unwrap();
        let mounts: BTreeMap<String, PathBuf> = ["cpuacct", "memory", "pids"]
            .iter()
            .map(|c| (c.to_string(), root.path().join(c)))
            .collect();
        let h = Hierarchies::V1(mounts);
        let rel = Path::new("runp/pod");
        write(
            &root.path().join("cpuacct/runp/pod"),
            "cpuacct.usage",
            "1234\n",
        );
        let mem = root.path().join("memory/runp/pod");
        write(&mem, "memory.usage_in_bytes", "10000\n");
        write(
            &mem,
            "memory.stat",
            "rss 1\ntotal_rss 4000\ntotal_inactive_file 3000\n",
        );
        // No pids.current: counts as 0.
        let u = cgroup_usage(&h, rel).unwrap();
        assert_eq!(
            u,
            Usage {
                cpu_ns: 1234,
                memory_usage: 10000,
                working_set: 7000,
                rss: 4000,
                processes: 0
            }
        );
        let err = cgroup_usage(&h, Path::new("runp/gone")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn v2_usage_from_the_unified_files() {
        let root = tempfile::tempdir().unwrap();
        let h = Hierarchies::Unified(root.path().to_path_buf());
        let dir = root.path().join("runp/pod");
        write(&dir, "cpu.stat", "usage_usec 5\nuser_usec 3\n");
        write(&dir, "memory.current", "9000\n");
        write(&dir, "memory.stat", "anon 2000\ninactive_file 500\n");
        write(&dir, "pids.current", "3\n");
        let u = cgroup_usage(&h, Path::new("runp/pod")).unwrap();
        assert_eq!(
            u,
            Usage {
                cpu_ns: 5000,
                memory_usage: 9000,
                working_set: 8500,
                rss: 2000,
                processes: 3
            }
        );
    }
}
