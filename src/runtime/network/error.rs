//! Errors of the pod network (CNI) module, mapped to a CRI status through `RuntimeError`.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// `--network=cni` or `--network=bridge` was asked for and cannot work here.
    #[error("--network={mode}: the {} pod network is unusable: {reason}", if *.mode == "cni" { "CNI" } else { "bridge" })]
    Unusable { mode: &'static str, reason: String },
    /// ipMasq and portmap need a working iptables.
    #[error("iptables does not work here: {0}")]
    Iptables(String),
    #[error("invalid network configuration: {0}")]
    InvalidConfig(String),
    #[error("invalid port mapping: {0}")]
    InvalidPortMapping(String),
    #[error("CNI plugin {plugin:?} not found in {}", dirs_text(.dirs))]
    PluginNotFound { plugin: String, dirs: Vec<PathBuf> },
    #[error("CNI plugin {plugin} {command}: cannot start it: {source}")]
    Spawn {
        plugin: String,
        command: &'static str,
        #[source]
        source: crate::jail::JailError,
    },
    /// The plugin failed and said why (the CNI error JSON on stdout).
    #[error("CNI plugin {plugin} {command} failed: {msg} (CNI error code {code}){}", details_text(.details))]
    Plugin {
        plugin: String,
        command: &'static str,
        code: u32,
        msg: String,
        details: String,
    },
    /// The plugin failed without a CNI error on stdout.
    #[error("CNI plugin {plugin} {command} failed ({status}): {}", output_text(.output))]
    Failed {
        plugin: String,
        command: &'static str,
        status: String,
        output: String,
    },
    #[error("CNI plugin {plugin} {command}: unusable output: {message}")]
    BadOutput {
        plugin: String,
        command: &'static str,
        message: String,
    },
    #[error("CNI plugin {plugin} {command} did not finish within {secs}s (killed)")]
    Timeout {
        plugin: String,
        command: &'static str,
        secs: u64,
    },
    #[error("the CNI result has no IP address for the pod: {0}")]
    NoPodIp(String),
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The bridge network's netlink requests (`--network=bridge`).
    #[error("bridge network: {0}")]
    Netlink(String),
    #[error("the child reaper stopped while waiting for CNI plugin {0}")]
    ReaperGone(String),
}

fn dirs_text(dirs: &[PathBuf]) -> String {
    let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    format!(
        "{} (install containernetworking-plugins or pass --cni-bin-dir)",
        list.join(":")
    )
}

fn details_text(details: &str) -> String {
    if details.is_empty() {
        String::new()
    } else {
        format!(": {details}")
    }
}

fn output_text(output: &str) -> &str {
    if output.is_empty() {
        "no output"
    } else {
        output
    }
}

impl NetworkError {
    pub fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| NetworkError::Io { what, path, source }
    }
}
