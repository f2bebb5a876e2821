//! Real measurements of the host for the Node's capacity, pressure conditions and nodeInfo.
//!
//! The readers are thin; the parsers (meminfo, os-release, uname machine) are pure and tested.
//! Memory availability is /proc/meminfo's MemAvailable (kubelet derives memory.available from
//! the root cgroup's working set; MemAvailable is the kernel's own estimate of the same thing).

use std::path::Path;

/// What changes between heartbeats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measurements {
    pub cpus: i64,
    pub memory_total: i64,
    pub memory_available: i64,
    /// Filesystem of the agent's root (nodefs).
    pub fs_capacity: i64,
    pub fs_available: i64,
    pub inodes_total: i64,
    pub inodes_free: i64,
    pub pid_max: i64,
    pub processes: i64,
}

/// What identifies the machine (read once).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFacts {
    pub kernel_version: String,
    pub os_image: String,
    pub architecture: String,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
}

/// The kubeletVersion reported: the Kubernetes minor whose API runp is built against
/// (k8s-openapi feature v1_36) as semver, with runp's version as build metadata (as k3s's
/// `v1.28.5+k3s1`), so version-skew checks parse it as v1.36.0.
pub fn kubelet_version() -> String {
    format!("v1.36.0+runp.{}", env!("CARGO_PKG_VERSION"))
}

/// Measures the host; `root` is the agent's root directory (ephemeral storage).
pub fn measure(root: &Path) -> Measurements {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let (memory_total, memory_available) = parse_meminfo(&meminfo);
    let mut m = Measurements {
        cpus: online_cpus(),
        memory_total,
        memory_available,
        pid_max: read_number("/proc/sys/kernel/pid_max").unwrap_or(32768),
        processes: process_count(),
        ..Default::default()
    };
    if let Ok(fs) = nix::sys::statvfs::statvfs(root) {
        let frsize = fs.fragment_size() as i64;
        m.fs_capacity = (fs.blocks() as i64).saturating_mul(frsize);
        m.fs_available = (fs.blocks_available() as i64).saturating_mul(frsize);
        m.inodes_total = fs.files() as i64;
        m.inodes_free = fs.files_available() as i64;
    }
    m
}

/// Reads the machine's identity.
pub fn host_facts() -> HostFacts {
    let uname = nix::sys::utsname::uname().ok();
    let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uname
            .as_ref()
            .map(|u| f(u).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let machine_id = read("/etc/machine-id");
    let product_uuid = read("/sys/class/dmi/id/product_uuid");
    let os_release = std::fs::read_to_string("/etc/os-release")
        .or_else(|_| std::fs::read_to_string("/usr/lib/os-release"))
        .unwrap_or_default();
    HostFacts {
        kernel_version: field(|u| u.release()),
        os_image: pretty_name(&os_release).unwrap_or_else(|| "Linux".to_string()),
        architecture: go_arch(&field(|u| u.machine())),
        system_uuid: if product_uuid.is_empty() {
            machine_id.clone()
        } else {
            product_uuid
        },
        machine_id,
        boot_id: read("/proc/sys/kernel/random/boot_id"),
    }
}

fn online_cpus() -> i64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 { n as i64 } else { 1 }
}

/// Tasks (processes and threads) on the host, as kubelet's pid signal counts them.
fn process_count() -> i64 {
    // SAFETY: sysinfo only writes into the zeroed struct it is given.
    let mut info: libc::sysinfo = unsafe { std::mem::zeroed() };
    if unsafe { libc::sysinfo(&mut info) } == 0 {
        i64::from(info.procs)
    } else {
        0
    }
}

fn read_number(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `(MemTotal, MemAvailable)` in bytes; MemFree when MemAvailable is missing (old kernels).
pub fn parse_meminfo(text: &str) -> (i64, i64) {
    let kib = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            let number = rest.split_whitespace().next()?;
            number.parse::<i64>().ok().map(|v| v.saturating_mul(1024))
        })
    };
    let total = kib("MemTotal").unwrap_or(0);
    let available = kib("MemAvailable").or_else(|| kib("MemFree")).unwrap_or(0);
    (total, available)
}

/// PRETTY_NAME of an os-release file, unquoted.
pub fn pretty_name(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.trim().strip_prefix("PRETTY_NAME=")?;
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        Some(value.to_string()).filter(|v| !v.is_empty())
    })
}

/// uname's machine in Go's GOARCH naming (what kubernetes.io/arch and nodeInfo use).
pub fn go_arch(machine: &str) -> String {
    match machine {
        "x86_64" | "amd64" => "amd64",
        "aarch64" | "arm64" => "arm64",
        "i386" | "i486" | "i586" | "i686" => "386",
        "armv7l" | "armv6l" | "arm" => "arm",
        "ppc64le" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_gives_total_and_available() {
        let text =
            "MemTotal:       24683792 kB\nMemFree:         1000 kB\nMemAvailable:   24075520 kB\n";
        assert_eq!(parse_meminfo(text), (24683792 * 1024, 24075520 * 1024));
        assert_eq!(
            parse_meminfo("MemTotal: 2048 kB\nMemFree: 1024 kB\n"),
            (2048 * 1024, 1024 * 1024)
        );
        assert_eq!(parse_meminfo(""), (0, 0));
    }

    #[test]
    fn os_release_pretty_name() {
        let text = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(
            pretty_name(text).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(pretty_name("PRETTY_NAME=Alpine").as_deref(), Some("Alpine"));
        assert_eq!(pretty_name("NAME=x\n"), None);
    }

    #[test]
    fn architectures_use_go_names() {
        for (machine, arch) in [
            ("x86_64", "amd64"),
            ("aarch64", "arm64"),
            ("i686", "386"),
            ("armv7l", "arm"),
            ("s390x", "s390x"),
        ] {
            assert_eq!(go_arch(machine), arch);
        }
    }

    #[test]
    fn the_host_is_measured() {
        let dir = tempfile::tempdir().unwrap();
        let m = measure(dir.path());
        assert!(m.cpus >= 1);
        assert!(
            m.memory_total > 0 && m.memory_available <= m.memory_total,
            "{m:?}"
        );
        assert!(
            m.fs_capacity > 0 && m.fs_available <= m.fs_capacity,
            "{m:?}"
        );
        assert!(m.pid_max > 0 && m.processes > 0, "{m:?}");
        let facts = host_facts();
        assert!(!facts.kernel_version.is_empty());
        assert!(!facts.architecture.is_empty());
        assert!(kubelet_version().starts_with("v1.36."));
    }
}
