//! Runs runp's image with podman, as README's Deploy section does, in a private podman (its own
//! storage, state and temp directories under the test's directory, cgroupfs, runc, a file event
//! log) whose every container, image, mount and cgroup is removed when the handle drops.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for a container state; a hang guard, not a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// The image's volumes and the host directories bound on them.
pub struct Volumes {
    pub state: PathBuf,
    pub logs: PathBuf,
    pub manifests: PathBuf,
}

impl Volumes {
    /// Three new directories under `top`.
    pub fn create(top: &Path) -> Volumes {
        let volumes = Volumes {
            state: top.join("state"),
            logs: top.join("logs"),
            manifests: top.join("manifests"),
        };
        for d in [&volumes.state, &volumes.logs, &volumes.manifests] {
            std::fs::create_dir(d).unwrap();
        }
        volumes
    }

    /// `podman run -v` options binding them on the image's volumes.
    pub fn options(&self) -> Vec<String> {
        [
            (&self.state, "/var/lib/runp"),
            (&self.logs, "/var/log/pods"),
            (&self.manifests, "/etc/runp/manifests"),
        ]
        .iter()
        .flat_map(|(host, dest)| ["-v".to_string(), format!("{}:{dest}", host.display())])
        .collect()
    }
}

/// Whether `podman` and `runc` are installed; prints SKIP when not (panics in CI, which
/// installs both).
pub fn available(test: &str) -> bool {
    let found = ["podman", "runc"].iter().all(|tool| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(
        found || !ci,
        "{test}: podman and runc must be installed in CI"
    );
    if !found {
        eprintln!("SKIP: {test}: needs podman and runc (apt-get install podman)");
    }
    found
}

/// One container `name` of a private podman under `dir`, in cgroup `cgroup` (cgroupfs path).
pub struct Podman {
    pub name: String,
    pub cgroup: String,
    dir: PathBuf,
}

impl Podman {
    pub fn new(dir: &Path, name: &str, cgroup: &str) -> Podman {
        Podman {
            name: name.to_string(),
            cgroup: cgroup.to_string(),
            dir: dir.to_path_buf(),
        }
    }

    /// `podman ARGS` with the private storage. runc: Debian's crun refuses a cgroup v1 "hybrid"
    /// host; cgroupfs and a file event log: no systemd here.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("podman");
        for (flag, sub) in [
            ("--root", "storage"),
            ("--runroot", "run"),
            ("--tmpdir", "tmp"),
        ] {
            command.arg(flag).arg(self.dir.join(sub));
        }
        command
            .args(["--cgroup-manager", "cgroupfs", "--events-backend", "file"])
            .args(["--runtime", "runc", "--storage-driver", "overlay"])
            .args(args)
            .stdin(Stdio::null());
        command
    }

    pub fn podman(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("podman runs")
    }

    /// `podman ARGS`, which must succeed: its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.podman(args);
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `podman load -i archive`: the loaded image's name.
    pub fn load(&self, archive: &Path) -> String {
        let out = self.ok(&["load", "-i", archive.to_str().unwrap()]);
        out.lines()
            .find_map(|l| l.strip_prefix("Loaded image: "))
            .unwrap_or_else(|| panic!("podman load: {out}"))
            .trim()
            .to_string()
    }

    /// `podman run -d --privileged` of `image` as this container with `options`, and `flags`
    /// added to the agent's command line. The rlimits podman sets by default exceed this
    /// machine's hard limits, which need CAP_SYS_RESOURCE to raise: the open-files hard limit is
    /// kept, and processes get 4096 (podman lowers its own limit, to 32768 here, and runc cannot
    /// exceed it; root with CAP_SYS_ADMIN is not held to it anyway).
    pub fn run(&self, image: &str, options: &[String], flags: &[&str]) {
        let nofile = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .unwrap()
            .1;
        let nproc = 4096;
        let mut args: Vec<String> = [
            "run",
            "-d",
            "--name",
            &self.name,
            "--privileged",
            "--cgroup-parent",
            &self.cgroup,
            "--health-cmd",
            "runp health",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--ulimit=nofile={nofile}:{nofile}"));
        args.push(format!("--ulimit=nproc={nproc}:{nproc}"));
        args.extend_from_slice(options);
        args.push(image.to_string());
        // The image's command (`agent --runtime=process --config ...`) with the flags added.
        let cmd = self.ok(&[
            "image",
            "inspect",
            "--format",
            "{{json .Config.Cmd}}",
            image,
        ]);
        let cmd: Vec<String> = serde_json::from_str(&cmd).expect("the image's Cmd");
        args.extend(cmd);
        args.extend(flags.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.ok(&args);
    }

    /// `podman exec NAME ARGS`: (success, stdout + stderr).
    pub fn exec(&self, args: &[&str]) -> (bool, String) {
        let mut argv = vec!["exec", &self.name];
        argv.extend_from_slice(args);
        let out = self.podman(&argv);
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }

    /// A field of `podman inspect NAME` (a Go template such as `{{.State.Running}}`).
    pub fn inspect(&self, format: &str) -> String {
        self.ok(&["inspect", "--format", format, &self.name])
            .trim()
            .to_string()
    }

    pub fn running(&self) -> bool {
        self.inspect("{{.State.Running}}") == "true"
    }

    /// The container's output (the agent's log).
    pub fn logs(&self) -> String {
        let out = self.podman(&["logs", &self.name]);
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// Panics with the agent's log when the container is not running.
    pub fn assert_running(&self) {
        if !self.running() {
            panic!("the container exited: {}", self.logs());
        }
    }

    /// `podman stop -t 60`: SIGTERM (the image's stop signal) to the agent, SIGKILL only after
    /// 60 s. The agent's exit code (137 when killed).
    pub fn stop(&self) -> String {
        self.ok(&["stop", "-t", "60", &self.name]);
        self.inspect("{{.State.ExitCode}}")
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.podman(&["rm", "-f", "-t", "0", &self.name]);
        let _ = self.podman(&["rmi", "-a", "-f"]);
        // Removes the storage, state and temp directories and unmounts podman's own mounts.
        let _ = self.podman(&["system", "reset", "-f"]);
        // Anything still mounted below (a failed run), deepest first.
        let dir = self.dir.to_str().unwrap().to_string();
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
            .filter(|m| m.starts_with(&dir))
            .collect();
        mounts.reverse();
        for mount in mounts {
            let _ = nix::mount::umount2(mount.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
        // Deepest first: a cgroup with children cannot be removed.
        for dir in cgroup_dirs(&self.cgroup) {
            for entry in walkdir::WalkDir::new(dir)
                .contents_first(true)
                .into_iter()
                .flatten()
            {
                if entry.file_type().is_dir() {
                    let _ = std::fs::remove_dir(entry.path());
                }
            }
        }
    }
}

/// Polls `check` every 250 ms; panics after the hang guard.
pub fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < HANG_GUARD, "hang guard: {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The cgroupfs directories of cgroup `path` in every mounted hierarchy.
pub fn cgroup_dirs(path: &str) -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path().join(path.trim_start_matches('/')))
        .filter(|p| p.is_dir())
        .collect()
}

/// Inodes of the network namespaces every host process is in.
pub fn host_net_namespaces() -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path().join("ns/net")).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .collect()
}
