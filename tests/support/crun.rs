//! Runs runp's image as a privileged container with crun (the OCI runtime under podman, whose
//! own `podman run` these machines refuse: see README, Deploy): a bundle made by
//! scripts/image-bundle.sh, and a handle that force-deletes the container when dropped.
#![allow(dead_code)]

use serde_json::{Value, json};
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

/// scripts/image-bundle.sh: `layout:tag` unpacked into `bundle`, privileged as
/// `podman run --privileged`, the volumes bound, in cgroup `cgroup`, `flags` added to the
/// agent's command line.
pub fn make_bundle(
    layout: &Path,
    tag: &str,
    bundle: &Path,
    volumes: &Volumes,
    cgroup: &str,
    flags: &[&str],
) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/image-bundle.sh");
    let out = Command::new(script)
        .arg(format!("{}:{tag}", layout.display()))
        .args([bundle, &volumes.state, &volumes.logs, &volumes.manifests])
        .args(flags)
        .env("CGROUP", cgroup)
        .output()
        .expect("scripts/image-bundle.sh runs");
    assert!(
        out.status.success(),
        "scripts/image-bundle.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Rewrites `bundle`'s config.json through `edit`.
pub fn edit_config(bundle: &Path, edit: impl FnOnce(&mut Value)) {
    let path = bundle.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut spec);
    std::fs::write(&path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
}

/// The host's network namespace (`podman run --network host`).
pub fn host_network(spec: &mut Value) {
    let namespaces = spec["linux"]["namespaces"].as_array_mut().unwrap();
    namespaces.retain(|n| n["type"] != "network");
}

/// Binds the host file or directory `source` on `dest`, read-only.
pub fn bind_read_only(spec: &mut Value, source: &Path, dest: &str) {
    spec["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"destination": dest, "type": "bind",
        "source": source, "options": ["rbind", "ro"]}));
}

/// A container of `crun --root <state>` in cgroup `cgroup`; dropping it kills and deletes it
/// and removes what is left of its cgroup.
pub struct Container {
    pub id: String,
    state: PathBuf,
    cgroup: String,
}

impl Container {
    pub fn new(id: &str, state: &Path, cgroup: &str) -> Container {
        Container {
            id: id.to_string(),
            state: state.to_path_buf(),
            cgroup: cgroup.to_string(),
        }
    }

    /// `crun --root <state> ARGS`. In a private mount namespace without the cgroup2 mount of a
    /// hybrid cgroup host, which Debian's crun refuses ("cgroups in hybrid mode not
    /// supported"): it then sees plain cgroup v1, as runp does.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(
                "if grep -q ' /sys/fs/cgroup/unified cgroup2 ' /proc/mounts; then \
                 umount /sys/fs/cgroup/unified; fi; exec crun --root \"$0\" \"$@\"",
            )
            .arg(&self.state)
            .args(args)
            .stdin(Stdio::null());
        command
    }

    pub fn crun(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("crun runs")
    }

    /// `crun run -d`: the container's stdout and stderr (the agent's log) go to `log`.
    pub fn run(&self, bundle: &Path, log: &Path) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let status = self
            .command(&["run", "-d", "--bundle", bundle.to_str().unwrap(), &self.id])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .status()
            .expect("crun runs");
        assert!(status.success(), "crun run {}", self.id);
    }

    /// `crun exec <id> ARGS`: (success, stdout + stderr).
    pub fn exec(&self, args: &[&str]) -> (bool, String) {
        let mut argv = vec!["exec", &self.id];
        argv.extend_from_slice(args);
        let out = self.crun(&argv);
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }

    /// The container's status (`running`, `stopped`...) and init pid, from `crun state`.
    pub fn state(&self) -> Option<(String, i64)> {
        let out = self.crun(&["state", &self.id]);
        let state: Value = serde_json::from_slice(&out.stdout).ok()?;
        Some((
            state["status"].as_str()?.to_string(),
            state["pid"].as_i64()?,
        ))
    }

    pub fn wait_stopped(&self) {
        wait_until(&format!("container {} stopped", self.id), || {
            self.state().is_none_or(|(status, _)| status == "stopped")
        });
    }

    pub fn delete(&self) {
        let out = self.crun(&["delete", "-f", &self.id]);
        assert!(
            out.status.success() || self.state().is_none(),
            "crun delete: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if self.state().is_some() {
            let _ = self.crun(&["kill", &self.id, "KILL"]);
            let _ = self.crun(&["delete", "-f", &self.id]);
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
