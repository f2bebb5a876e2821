//! Test support for the jail layer: a busybox rootfs built from /bin/busybox, runc-like OCI
//! bundles (rootless-friendly when not real root), and helpers to run a shim to completion.
#![allow(dead_code)]

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxNamespace, LinuxNamespaceBuilder,
    LinuxNamespaceType, ProcessBuilder, RootBuilder, Spec, get_default_mounts,
    get_default_readonly_paths, get_rootless_mounts,
};
use runp::jail::{self, ExitRecord, ShimProcess, ShimReport, ShimSpec};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// The runp binary under test; `RUNP_TEST_EXE` picks another build (e.g. release, to measure).
pub fn runp_exe() -> PathBuf {
    std::env::var_os("RUNP_TEST_EXE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_runp")))
}

/// Real root: euid 0 in the initial user namespace (identity uid map).
pub fn is_real_root() -> bool {
    let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let identity = uid_map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    nix::unistd::geteuid().is_root() && identity
}

/// Root in some user namespace (real root or `unshare --user --map-root-user`).
pub fn is_ns_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Prints the SKIP line and returns true when `needs` is not met.
pub fn skip_unless(test: &str, met: bool, needs: &str) -> bool {
    if !met {
        eprintln!("SKIP: {test}: needs {needs}");
    }
    !met
}

/// Containers need root, real or mapped in a user namespace.
pub fn skip_without_root(test: &str) -> bool {
    skip_unless(
        test,
        is_ns_root(),
        "root (real or mapped in a user namespace)",
    )
}

pub fn unique_id(name: &str) -> String {
    format!(
        "{name}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// A minimal root filesystem: /bin/busybox plus a symlink per applet, and the usual mount points.
pub fn busybox_rootfs(dir: &Path) -> PathBuf {
    let rootfs = dir.join("rootfs");
    for sub in ["bin", "proc", "sys", "dev", "tmp", "etc", "root", "mnt"] {
        std::fs::create_dir_all(rootfs.join(sub)).unwrap();
    }
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    let list = std::process::Command::new("/bin/busybox")
        .arg("--list")
        .output()
        .unwrap();
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if applet != "busybox" && !applet.is_empty() {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
        }
    }
    std::fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )
    .unwrap();
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n").unwrap();
    rootfs
}

/// Docker's default capability set.
pub fn docker_default_caps() -> HashSet<Capability> {
    use Capability::*;
    [
        Chown,
        DacOverride,
        Fsetid,
        Fowner,
        Mknod,
        NetRaw,
        Setgid,
        Setuid,
        Setfcap,
        Setpcap,
        NetBindService,
        SysChroot,
        Kill,
        AuditWrite,
    ]
    .into_iter()
    .collect()
}

pub fn namespace(typ: LinuxNamespaceType, path: Option<&Path>) -> LinuxNamespace {
    let mut builder = LinuxNamespaceBuilder::default().typ(typ);
    if let Some(path) = path {
        builder = builder.path(path);
    }
    builder.build().unwrap()
}

/// A runc-like spec running `args` in `rootfs`: new pid/net/ipc/uts/mount namespaces, Docker's
/// default capabilities, no_new_privs, masked and read-only /proc paths. Without real root it
/// is made rootless-friendly (no cgroup resources, no devpts gid=5, /sys bound from the host).
pub fn base_spec(rootfs: &Path, args: &[&str]) -> Spec {
    let caps = docker_default_caps();
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(caps.clone())
        .effective(caps.clone())
        .permitted(caps)
        .inheritable(HashSet::new())
        .ambient(HashSet::new())
        .build()
        .unwrap();
    let process = ProcessBuilder::default()
        .args(args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
        .env(vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ])
        .cwd("/")
        .no_new_privileges(true)
        .capabilities(capabilities)
        .build()
        .unwrap();
    let namespaces = [
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Network,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::Mount,
    ]
    .into_iter()
    .map(|t| namespace(t, None))
    .collect::<Vec<_>>();
    let real_root = is_real_root();
    let mut linux = LinuxBuilder::default()
        .namespaces(namespaces)
        .masked_paths(oci_spec::runtime::get_default_maskedpaths())
        .readonly_paths(get_default_readonly_paths());
    linux = linux.cgroups_path(PathBuf::from(format!(
        "/runp-jail-test/{}",
        unique_id("cg")
    )));
    let mut mounts = if real_root {
        get_default_mounts()
    } else {
        get_rootless_mounts()
    };
    // The cgroup fs inside the container is not needed by these tests.
    mounts.retain(|m| m.destination() != Path::new("/sys/fs/cgroup"));
    let mut linux = linux.build().unwrap();
    if !real_root {
        // LinuxBuilder starts from Linux::default(), which has (empty) resources: libcontainer
        // then writes device rules, which a user namespace may not.
        linux.set_resources(None);
    }
    let mut spec = Spec::default();
    spec.set_process(Some(process))
        .set_root(Some(
            RootBuilder::default()
                .path(rootfs)
                .readonly(false)
                .build()
                .unwrap(),
        ))
        .set_hostname(Some("jail-test".into()))
        .set_mounts(Some(mounts))
        .set_linux(Some(linux));
    spec
}

/// Replaces the spec's proc mount with a recursive bind of the host's /proc.
pub fn bind_host_proc(spec: &mut Spec) {
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    for mount in mounts
        .iter_mut()
        .filter(|m| m.destination() == Path::new("/proc"))
    {
        mount
            .set_typ(Some("none".into()))
            .set_source(Some("/proc".into()))
            .set_options(Some(vec![
                "rbind".into(),
                "nosuid".into(),
                "nodev".into(),
                "noexec".into(),
            ]));
    }
    spec.set_mounts(Some(mounts));
}

/// One container run: its dirs, and the shim once started.
pub struct Run {
    pub id: String,
    pub dir: PathBuf,
    pub state_dir: PathBuf,
    pub bundle: PathBuf,
    pub lc_root: PathBuf,
    pub log_path: PathBuf,
    started: std::cell::RefCell<Vec<i32>>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for pid in self.started.borrow().iter() {
            if !is_dead(*pid) {
                let _ = nix::sys::signal::kill(Pid::from_raw(*pid), nix::sys::signal::SIGKILL);
            }
        }
    }
}

impl Run {
    /// Kills `pid` (a container process started another way) when the run is dropped, so a
    /// failing test leaves no container behind.
    pub fn track(&self, pid: i32) {
        self.started.borrow_mut().push(pid);
    }

    /// Prepares a bundle for `spec` under `dir/<name>`.
    pub fn new(dir: &Path, name: &str, spec: &Spec) -> Run {
        let id = unique_id(name);
        let base = dir.join(name);
        let run = Run {
            state_dir: base.join("state"),
            bundle: base.join("bundle"),
            lc_root: dir.join("libcontainer"),
            log_path: base.join("container.log"),
            dir: base,
            id,
            started: Default::default(),
        };
        std::fs::create_dir_all(&run.state_dir).unwrap();
        std::fs::create_dir_all(&run.bundle).unwrap();
        spec.save(run.bundle.join("config.json")).unwrap();
        run
    }

    pub fn shim_spec(&self) -> ShimSpec {
        ShimSpec {
            id: self.id.clone(),
            process: ShimProcess::Container {
                bundle: self.bundle.clone(),
                libcontainer_root: self.lc_root.clone(),
                stdio: Default::default(),
            },
            log_path: Some(self.log_path.clone()),
            log_max_size: None,
        }
    }

    /// Starts the shim and waits for its report.
    pub fn start(&self) -> (i32, ShimReport) {
        start_shim(&self.state_dir, &self.shim_spec())
    }

    /// Starts the shim and asserts the process started; returns (shim pid, process pid). The
    /// process is SIGKILLed when the test ends, also when it panics.
    pub fn start_ok(&self) -> (i32, i32) {
        self.start_ok_with(|_| {})
    }

    /// As [`Run::start_ok`], with a shim spec that `adjust` changed.
    pub fn start_ok_with(&self, adjust: impl FnOnce(&mut ShimSpec)) -> (i32, i32) {
        let mut spec = self.shim_spec();
        adjust(&mut spec);
        let (shim, report) = start_shim(&self.state_dir, &spec);
        match report {
            ShimReport::Started { pid, .. } => {
                self.started.borrow_mut().push(pid);
                (shim, pid)
            }
            ShimReport::Failed { message } => {
                reap(shim);
                panic!(
                    "container did not start: {message}\nshim.log:\n{}",
                    self.shim_log()
                )
            }
        }
    }

    pub fn shim_log(&self) -> String {
        std::fs::read_to_string(self.state_dir.join(jail::SHIM_LOG_FILE)).unwrap_or_default()
    }

    /// Waits for exit.json and reaps the shim (the test process is its parent).
    pub fn wait_exit(&self, shim: i32) -> ExitRecord {
        let record = wait_exit_record(&self.state_dir, shim);
        let status = reap(shim);
        assert_eq!(
            status,
            WaitStatus::Exited(Pid::from_raw(shim), 0),
            "shim exit; shim.log:\n{}",
            self.shim_log()
        );
        record
    }

    pub fn log_records(&self) -> Vec<LogRecord> {
        parse_log(&std::fs::read_to_string(&self.log_path).unwrap_or_default())
    }
}

pub fn start_shim(state_dir: &Path, spec: &ShimSpec) -> (i32, ShimReport) {
    jail::write_shim_spec(state_dir, spec).unwrap();
    let mut spawned = jail::spawn_shim(&runp_exe(), state_dir).unwrap();
    let report = spawned
        .report
        .recv_timeout(HANG_GUARD)
        .unwrap_or_else(|err| {
            let log =
                std::fs::read_to_string(state_dir.join(jail::SHIM_LOG_FILE)).unwrap_or_default();
            panic!("no report from the shim: {err}\nshim.log:\n{log}")
        });
    (spawned.pid, report)
}

pub fn wait_exit_record(state_dir: &Path, shim: i32) -> ExitRecord {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        if let Some(record) = jail::read_exit_record(state_dir).unwrap() {
            return record;
        }
        if Instant::now() > deadline {
            let _ = nix::sys::signal::kill(Pid::from_raw(shim), nix::sys::signal::SIGKILL);
            reap(shim);
            let log =
                std::fs::read_to_string(state_dir.join(jail::SHIM_LOG_FILE)).unwrap_or_default();
            panic!("no exit.json within {HANG_GUARD:?}; shim.log:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a child of the test process (bounded by the hang guard, then SIGKILL).
pub fn reap(pid: i32) -> WaitStatus {
    let pid = Pid::from_raw(pid);
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)).unwrap() {
            WaitStatus::StillAlive if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            WaitStatus::StillAlive => {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL);
            }
            status => return status,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub timestamp: String,
    pub stream: String,
    pub tag: String,
    pub content: String,
}

pub fn parse_log(text: &str) -> Vec<LogRecord> {
    text.split_terminator('\n')
        .map(|line| {
            let mut parts = line.splitn(4, ' ');
            let mut next = || {
                parts
                    .next()
                    .unwrap_or_else(|| panic!("bad log line {line:?}"))
                    .to_string()
            };
            LogRecord {
                timestamp: next(),
                stream: next(),
                tag: next(),
                content: next(),
            }
        })
        .collect()
}

/// The content lines of one stream, partial records joined.
pub fn stream_lines(records: &[LogRecord], stream: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for record in records.iter().filter(|r| r.stream == stream) {
        current.push_str(&record.content);
        if record.tag == "F" {
            lines.push(std::mem::take(&mut current));
        }
    }
    lines
}

/// Output and outcome of one `spawn_exec`.
pub struct ExecOutcome {
    pub report: jail::ExecReport,
    pub stdout: String,
    pub stderr: String,
    pub status: WaitStatus,
}

pub fn exec_spec(run: &Run, args: &[&str]) -> jail::ExecSpec {
    jail::ExecSpec {
        container_id: run.id.clone(),
        libcontainer_root: run.lc_root.clone(),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: vec![],
        cwd: None,
        tty: false,
        stdin: false,
    }
}

/// Runs `spec` to completion: output read on threads, report received, helper reaped.
pub fn exec_to_end(spec: &jail::ExecSpec) -> ExecOutcome {
    use std::io::Read;
    let spawned = jail::spawn_exec(&runp_exe(), spec).unwrap();
    let read_all = |fd: std::os::fd::OwnedFd| {
        std::thread::spawn(move || {
            let mut text = String::new();
            std::fs::File::from(fd).read_to_string(&mut text).unwrap();
            text
        })
    };
    let stdout = read_all(spawned.stdout);
    let stderr = read_all(spawned.stderr);
    let mut report_rx = spawned.report;
    let report = report_rx.recv_timeout(HANG_GUARD).unwrap();
    let status = reap(spawned.helper_pid);
    ExecOutcome {
        report,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        status,
    }
}

/// Where each open fd of `pid` points (`/proc/PID/fd`).
pub fn fd_targets(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| {
            std::fs::read_link(e.unwrap().path())
                .unwrap()
                .display()
                .to_string()
        })
        .collect()
}

/// Whether `pid` is gone or a zombie (dead either way).
pub fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG_GUARD;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
