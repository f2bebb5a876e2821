//! `runp` as a child process: one-shot commands, and daemons (`serve`, `agent`) stopped with
//! SIGTERM, killed with SIGKILL, or killed when a test ends without stopping them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Hang guard of every wait (real time).
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// A child process killed (SIGKILL) if the test ends without stopping it.
pub struct Daemon {
    name: &'static str,
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    pub fn spawn(name: &'static str, root: &Path, args: &[&str], log: PathBuf) -> Daemon {
        let stderr = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_runp"))
            .arg("--root")
            .arg(root)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        Daemon {
            name,
            child: Some(child),
            log,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, and waits until it is gone (its log is kept).
    pub fn kill9(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// SIGTERM, then waits for a successful exit.
    pub async fn stop(mut self) {
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
            assert!(started.elapsed() < HANG_GUARD, "{} did not stop", self.name);
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            status.success(),
            "{} exit {status}: {}",
            self.name,
            self.log()
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("{} log:\n{}", self.name, self.log());
        }
    }
}

/// `runp --root ROOT ARGS`, waited for.
pub fn runp(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(root)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}
