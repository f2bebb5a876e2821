//! What the kubelet API cluster tests share: the agent as a child process with its kubelet
//! port, children killed on drop, free ports, and polling with a hang guard.
#![allow(dead_code)]

use super::runtime;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// The agent as a child process, SIGKILLed if the test ends without stopping it.
pub struct AgentProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl AgentProcess {
    pub fn spawn(root: &Path, node: &str, kubeconfig: &Path, port: u16, ca: &str) -> AgentProcess {
        Self::spawn_with(root, node, kubeconfig, port, ca, &[])
    }

    /// [`AgentProcess::spawn`] with `extra` agent flags.
    pub fn spawn_with(
        root: &Path,
        node: &str,
        kubeconfig: &Path,
        port: u16,
        ca: &str,
        extra: &[&str],
    ) -> AgentProcess {
        let log = root.join("agent.log");
        let ipam = Path::new(runtime::TEST_NET_DIR).join("ipam");
        let stderr = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_runp"))
            .arg("--root")
            .arg(root)
            .args(["agent", "--runtime", "process", "--node-name", node])
            .args(["--node-ip", "127.0.0.1", "--address", "127.0.0.1"])
            .args(["--kubelet-port", &port.to_string(), "--client-ca-file", ca])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--pod-bridge", runtime::TEST_BRIDGE])
            .args(["--pod-cidr", runtime::TEST_POD_CIDR])
            .arg("--cni-data-dir")
            .arg(ipam)
            .args(["--log-level", "info,runp::kubelet::server=debug"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        AgentProcess {
            child: Some(child),
            log,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM and a clean exit.
    pub fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(started.elapsed() < HANG_GUARD, "the agent did not stop");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "agent exit {status}: {}", self.log());
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("agent log:\n{}", self.log());
        }
    }
}

/// A child killed when dropped (kubectl logs -f, kubectl port-forward).
pub struct Background(pub Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(started.elapsed() < HANG_GUARD, "hang guard: {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}
