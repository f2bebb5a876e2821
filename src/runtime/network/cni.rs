//! Invoking CNI plugins per the CNI spec: one process per plugin and command, parameters in
//! `CNI_*` environment variables, the plugin's network config on stdin, the result (or a CNI
//! error) on stdout. A network configuration list runs ADD in order, each plugin getting the
//! previous result, and DEL in reverse order with the final result.

use super::NetworkError;
use super::config::{self, PortMapping};
use super::result;
use crate::jail;
use crate::runtime::reaper::{ExitStatus, Reaper};
use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Output kept per stream: results are a few KiB; this only bounds a runaway plugin.
const MAX_OUTPUT: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CniCommand {
    Add,
    Del,
    Version,
}

impl CniCommand {
    pub fn as_str(self) -> &'static str {
        match self {
            CniCommand::Add => "ADD",
            CniCommand::Del => "DEL",
            CniCommand::Version => "VERSION",
        }
    }
}

/// What a pod's ADD used, persisted in the sandbox record so that DEL (after a restart too)
/// replays exactly the same configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetworkAttachment {
    pub container_id: String,
    /// The pod's network namespace file.
    pub netns: PathBuf,
    pub ifname: String,
    /// `CNI_ARGS`.
    pub args: String,
    /// The network configuration list as rendered at ADD.
    pub config: Value,
    pub port_mappings: Vec<PortMapping>,
    /// The list's final ADD result, once ADD succeeded (DEL's prevResult).
    pub result: Option<Value>,
    /// Set when the bridge network (in process) made the pod's link; `config` then holds only
    /// the portmap plugin, run when `port_mappings` is not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<super::bridge::BridgeLink>,
}

/// Finds and runs plugin binaries.
#[derive(Clone)]
pub struct PluginExec {
    bin_dirs: Vec<PathBuf>,
    reaper: Reaper,
    timeout: Duration,
    path_env: String,
}

impl PluginExec {
    /// `timeout` is a hang guard per plugin invocation.
    pub fn new(bin_dirs: Vec<PathBuf>, reaper: Reaper, timeout: Duration) -> PluginExec {
        let path_env = config::plugin_path(std::env::var("PATH").ok().as_deref());
        PluginExec {
            bin_dirs,
            reaper,
            timeout,
            path_env,
        }
    }

    pub fn bin_dirs(&self) -> &[PathBuf] {
        &self.bin_dirs
    }

    /// The first executable `plugin` in the bin dirs.
    pub fn find(&self, plugin: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        self.bin_dirs.iter().map(|d| d.join(plugin)).find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    }

    /// Whether `program` is an executable in the plugins' PATH (iptables, for one).
    pub fn in_path(&self, program: &str) -> bool {
        use std::os::unix::fs::PermissionsExt;
        self.path_env.split(':').any(|d| {
            std::fs::metadata(Path::new(d).join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    }

    /// Runs `plugin` once; its stdout on success.
    pub async fn exec(
        &self,
        plugin: &str,
        command: CniCommand,
        attachment: Option<(&NetworkAttachment, &str)>,
        stdin: &[u8],
    ) -> Result<Vec<u8>, NetworkError> {
        let cmd = command.as_str();
        let path = self
            .find(plugin)
            .ok_or_else(|| NetworkError::PluginNotFound {
                plugin: plugin.to_string(),
                dirs: self.bin_dirs.clone(),
            })?;
        let cni_path = self
            .bin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let mut env = vec![
            ("CNI_COMMAND".to_string(), cmd.to_string()),
            ("CNI_PATH".to_string(), cni_path),
            ("PATH".to_string(), self.path_env.clone()),
        ];
        if let Some((a, netns)) = attachment {
            env.extend([
                ("CNI_CONTAINERID".to_string(), a.container_id.clone()),
                ("CNI_NETNS".to_string(), netns.to_string()),
                ("CNI_IFNAME".to_string(), a.ifname.clone()),
                ("CNI_ARGS".to_string(), a.args.clone()),
            ]);
        }
        match self.run(plugin, cmd, &path, &[], &env, stdin).await? {
            (ExitStatus::Exited(0), stdout, _) => Ok(stdout),
            (status, stdout, stderr) => Err(result::failure(
                plugin,
                cmd,
                exit_text(status),
                &stdout,
                &stderr,
            )),
        }
    }

    /// Whether the iptables in the plugins' PATH works (a binary can be present while the
    /// kernel lacks its tables, and then every ADD would fail); Err says why not.
    pub async fn probe_iptables(&self) -> Result<(), String> {
        self.iptables(&["-w", "5", "-t", "nat", "-S", "POSTROUTING"])
            .await
    }

    /// Runs the iptables in the plugins' PATH; Err says why it failed.
    pub async fn iptables(&self, args: &[&str]) -> Result<(), String> {
        let path = self
            .path_env
            .split(':')
            .map(|d| Path::new(d).join("iptables"))
            .find(|p| p.is_file())
            .ok_or("iptables not found in PATH")?;
        let env = [("PATH".to_string(), self.path_env.clone())];
        match self.run("iptables", "run", &path, args, &env, &[]).await {
            Ok((ExitStatus::Exited(0), _, _)) => Ok(()),
            Ok((status, _, stderr)) => Err(format!(
                "`iptables {}` failed ({}): {}",
                args.join(" "),
                exit_text(status),
                String::from_utf8_lossy(&stderr).trim()
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Runs `path` to its end (or the hang guard): exit status, stdout, stderr.
    async fn run(
        &self,
        label: &str,
        cmd: &'static str,
        path: &Path,
        args: &[&str],
        env: &[(String, String)],
        stdin: &[u8],
    ) -> Result<(ExitStatus, Vec<u8>, Vec<u8>), NetworkError> {
        let spawned =
            jail::spawn_program(path, args, env).map_err(|source| NetworkError::Spawn {
                plugin: label.to_string(),
                command: cmd,
                source,
            })?;
        let pid = spawned.pid;
        let pidfd = Pid::from_raw(pid).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
        let run = async {
            tokio::join!(
                write_all(spawned.stdin, stdin),
                read_capped(spawned.stdout),
                read_capped(spawned.stderr),
                self.reaper.wait(pid),
            )
        };
        let Ok(((), stdout, stderr, status)) = tokio::time::timeout(self.timeout, run).await else {
            if let Some(fd) = &pidfd {
                let _ = pidfd_send_signal(fd, Signal::KILL);
            }
            return Err(NetworkError::Timeout {
                plugin: label.to_string(),
                command: cmd,
                secs: self.timeout.as_secs(),
            });
        };
        let status = status.ok_or_else(|| NetworkError::ReaperGone(label.to_string()))?;
        Ok((status, stdout, stderr))
    }

    /// The CNI versions `plugin` supports (its VERSION reply).
    pub async fn versions(&self, plugin: &str) -> Result<Vec<String>, NetworkError> {
        let out = self
            .exec(
                plugin,
                CniCommand::Version,
                None,
                br#"{"cniVersion":"1.0.0"}"#,
            )
            .await?;
        result::supported_versions(&out).ok_or_else(|| NetworkError::BadOutput {
            plugin: plugin.to_string(),
            command: "VERSION",
            message: String::from_utf8_lossy(&out).into_owned(),
        })
    }

    /// ADD over the whole list; the final result. The caller runs [`Self::del`] on failure.
    pub async fn add(&self, a: &NetworkAttachment) -> Result<Value, NetworkError> {
        let runtime_config = config::runtime_config(&a.port_mappings);
        let netns = a.netns.display().to_string();
        // A result already there is the bridge network's, which the portmap plugin extends.
        let mut prev: Option<Value> = a.result.clone();
        for (ty, plugin) in config::plugins(&a.config)? {
            let conf = config::plugin_config(&a.config, plugin, &runtime_config, prev.as_ref());
            let out = self
                .exec(
                    &ty,
                    CniCommand::Add,
                    Some((a, &netns)),
                    conf.to_string().as_bytes(),
                )
                .await?;
            let result: Value =
                serde_json::from_slice(&out).map_err(|e| NetworkError::BadOutput {
                    plugin: ty.clone(),
                    command: "ADD",
                    message: format!("{e}: {}", String::from_utf8_lossy(&out)),
                })?;
            prev = Some(result);
        }
        prev.ok_or_else(|| NetworkError::InvalidConfig("network config without plugins".into()))
    }

    /// DEL over the list in reverse order. Every plugin runs even after one failed (so an
    /// earlier failure does not leak the IP lease); the first error is returned. Idempotent;
    /// a namespace that is already gone is passed as empty, which plugins accept.
    pub async fn del(&self, a: &NetworkAttachment) -> Result<(), NetworkError> {
        let runtime_config = config::runtime_config(&a.port_mappings);
        let netns = if jail::is_namespace_file(&a.netns) {
            a.netns.display().to_string()
        } else {
            String::new()
        };
        let mut first_error = None;
        for (ty, plugin) in config::plugins(&a.config)?.into_iter().rev() {
            let conf = config::plugin_config(&a.config, plugin, &runtime_config, a.result.as_ref());
            if let Err(e) = self
                .exec(
                    &ty,
                    CniCommand::Del,
                    Some((a, &netns)),
                    conf.to_string().as_bytes(),
                )
                .await
            {
                tracing::warn!(container = %a.container_id, error = %e, "CNI DEL");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

async fn write_all(fd: OwnedFd, data: &[u8]) {
    // A plugin that exits without reading its stdin is reported by its exit status.
    if let Ok(mut tx) = tokio::net::unix::pipe::Sender::from_owned_fd(fd) {
        let _ = tx.write_all(data).await;
    }
}

async fn read_capped(fd: OwnedFd) -> Vec<u8> {
    let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match rx.read(&mut buf).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(out.len());
                out.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

fn exit_text(status: ExitStatus) -> String {
    match status {
        ExitStatus::Exited(code) => format!("exit status {code}"),
        ExitStatus::Signaled(sig) => format!("killed by signal {sig}"),
    }
}
