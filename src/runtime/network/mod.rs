//! The pod network: each non-hostNetwork pod's network namespace is attached to a bridge, made
//! in process over netlink (`bridge`, the default as real root) or with CNI plugins (`cni`:
//! bridge + host-local IPAM + portmap, as containerd does; the default for an IPv6 pod CIDR).
//! Where that cannot work (not real root, no CAP_NET_ADMIN; for CNI also no plugins) pods get
//! loopback only and IP 127.0.0.1, said once at start-up and in the Status / PodSandboxStatus
//! info.

pub mod bridge;
pub mod cni;
pub mod config;
mod error;
mod ipam;
pub mod result;

pub use cni::{NetworkAttachment, PluginExec};
pub use config::PortMapping;
pub use error::NetworkError;

use crate::cri::api;
use crate::runtime::reaper::Reaper;
use ipnet::IpNet;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The IP of a loopback-only pod.
pub const LOOPBACK_POD_IP: &str = "127.0.0.1";

/// Plugins the default network runs.
const PLUGINS: [&str; 3] = ["bridge", "host-local", "portmap"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkMode {
    /// The bridge made in process (CNI for an IPv6 pod CIDR) when usable, else loopback only
    /// (said why).
    Auto,
    /// CNI or fail to start.
    Cni,
    /// The bridge made in process (no plugin execs per pod) or fail to start.
    Bridge,
    /// Loopback only.
    Loopback,
}

#[derive(Clone, Debug)]
pub struct NetworkOptions {
    pub mode: NetworkMode,
    /// Where plugins are looked up, in order (`CNI_PATH`).
    pub cni_bin_dirs: Vec<PathBuf>,
    /// At most one IPv4 and one IPv6 CIDR; host-local allocates pod IPs from them.
    pub pod_cidrs: Vec<IpNet>,
    pub bridge: String,
    /// host-local's dataDir (leases); `<runtime root>/cni/networks` when None.
    pub data_dir: Option<PathBuf>,
    /// Hang guard per plugin invocation.
    pub plugin_timeout: Duration,
}

impl Default for NetworkOptions {
    fn default() -> Self {
        NetworkOptions {
            mode: NetworkMode::Auto,
            cni_bin_dirs: vec!["/opt/cni/bin".into(), "/usr/lib/cni".into()],
            pod_cidrs: vec!["10.88.0.0/16".parse().expect("valid default CIDR")],
            bridge: "runp0".to_string(),
            data_dir: None,
            plugin_timeout: Duration::from_secs(60),
        }
    }
}

/// What the host offers, for [`decide`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostProbe {
    /// Not real root in the initial user namespace.
    pub rootless: bool,
    pub net_admin: bool,
    pub missing_plugins: Vec<String>,
    /// The iptables binaries missing from the plugins' PATH (ipMasq and portmap need them).
    pub missing_tools: Vec<String>,
    /// A pod CIDR is IPv6: the bridge network is IPv4 only.
    pub ipv6_cidr: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Cni,
    Bridge,
    Loopback { reason: String },
}

/// CNI or loopback, from the mode and the host; `cni` mode fails on the first obstacle.
pub fn decide(
    mode: NetworkMode,
    probe: &HostProbe,
    bin_dirs: &str,
) -> Result<Decision, NetworkError> {
    if mode == NetworkMode::Loopback {
        return Ok(Decision::Loopback {
            reason: "--network=loopback".to_string(),
        });
    }
    // auto: the bridge made in process, unless a pod CIDR is IPv6 (CNI does dual-stack).
    let wants_bridge =
        mode == NetworkMode::Bridge || (mode == NetworkMode::Auto && !probe.ipv6_cidr);
    let obstacle = if probe.rootless {
        Some("not real root in the initial user namespace (rootless): a bridge in the host network namespace cannot be created".to_string())
    } else if !probe.net_admin {
        Some("CAP_NET_ADMIN is not in the effective capability set".to_string())
    } else if wants_bridge {
        // Plugins and iptables are optional there: hostPorts and masquerade say so.
        None
    } else if !probe.missing_plugins.is_empty() {
        Some(format!(
            "CNI plugins {} not found in {bin_dirs} (install containernetworking-plugins or pass --cni-bin-dir)",
            probe.missing_plugins.join(", ")
        ))
    } else if !probe.missing_tools.is_empty() {
        Some(format!(
            "{} not found in PATH (the bridge and portmap plugins need it)",
            probe.missing_tools.join(", ")
        ))
    } else {
        None
    };
    match (obstacle, mode) {
        (None, _) if wants_bridge => Ok(Decision::Bridge),
        (None, _) => Ok(Decision::Cni),
        (Some(reason), NetworkMode::Cni | NetworkMode::Bridge) => Err(NetworkError::Unusable {
            mode: mode_flag(mode),
            reason,
        }),
        (Some(reason), _) => Ok(Decision::Loopback { reason }),
    }
}

fn mode_flag(mode: NetworkMode) -> &'static str {
    match mode {
        NetworkMode::Auto => "auto",
        NetworkMode::Cni => "cni",
        NetworkMode::Bridge => "bridge",
        NetworkMode::Loopback => "loopback",
    }
}

/// The runtime's pod network, chosen at start-up.
pub struct Network {
    exec: PluginExec,
    active: Active,
    options: NetworkOptions,
}

enum Active {
    /// The conflist every new pod is attached with.
    Cni {
        conflist: Value,
    },
    /// The bridge made in process.
    Bridge(bridge::BridgeSetup),
    Loopback {
        reason: String,
    },
}

impl Network {
    /// Validates the options, probes the host and decides; logs the outcome once.
    pub async fn start(
        options: NetworkOptions,
        rootless: bool,
        runtime_root: &Path,
        reaper: Reaper,
    ) -> Result<Network, NetworkError> {
        let exec = PluginExec::new(options.cni_bin_dirs.clone(), reaper, options.plugin_timeout);
        let bin_dirs = exec
            .bin_dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        // Asked for: info; fallen back to: a warning, since probes and pod IPs then only work
        // for host-network pods.
        let loopback = |reason: String| {
            if options.mode == NetworkMode::Loopback {
                tracing::info!(%reason, "pod network: loopback only; each pod gets its own network namespace with lo and IP {LOOPBACK_POD_IP}");
            } else {
                tracing::warn!(%reason, "pod network: loopback only; each pod gets its own network namespace with lo and IP {LOOPBACK_POD_IP}");
            }
            Active::Loopback { reason }
        };
        if options.mode == NetworkMode::Loopback {
            return Ok(Network {
                exec,
                active: loopback("--network=loopback".into()),
                options,
            });
        }
        config::validate(&options.pod_cidrs, &options.bridge)?;
        let mut tools = vec!["iptables"];
        if options.pod_cidrs.iter().any(|c| matches!(c, IpNet::V6(_))) {
            tools.push("ip6tables");
        }
        let probe = HostProbe {
            rootless,
            net_admin: caps::has_cap(
                None,
                caps::CapSet::Effective,
                caps::Capability::CAP_NET_ADMIN,
            )
            .unwrap_or(false),
            missing_plugins: PLUGINS
                .iter()
                .filter(|p| exec.find(p).is_none())
                .map(|p| p.to_string())
                .collect(),
            missing_tools: tools
                .into_iter()
                .filter(|t| !exec.in_path(t))
                .map(str::to_string)
                .collect(),
            ipv6_cidr: options.pod_cidrs.iter().any(|c| matches!(c, IpNet::V6(_))),
        };
        let active = match decide(options.mode, &probe, &bin_dirs)? {
            Decision::Loopback { reason } => loopback(reason),
            Decision::Cni => match Self::cni_config(&exec, &options, runtime_root).await {
                Ok(conflist) => {
                    tracing::info!(
                        bridge = %options.bridge,
                        pod_cidrs = %cidrs_text(&options.pod_cidrs),
                        version = %conflist["cniVersion"].as_str().unwrap_or_default(),
                        "pod network: CNI (bridge, host-local, portmap)"
                    );
                    Active::Cni { conflist }
                }
                Err(e) if options.mode == NetworkMode::Cni => {
                    return Err(NetworkError::Unusable {
                        mode: "cni",
                        reason: e.to_string(),
                    });
                }
                Err(e) => loopback(e.to_string()),
            },
            Decision::Bridge => match bridge::start_network(&exec, &options, runtime_root).await {
                Ok(setup) => Active::Bridge(setup),
                Err(e) if options.mode == NetworkMode::Bridge => {
                    return Err(NetworkError::Unusable {
                        mode: "bridge",
                        reason: e.to_string(),
                    });
                }
                Err(e) => loopback(e.to_string()),
            },
        };
        Ok(Network {
            exec,
            active,
            options,
        })
    }

    async fn cni_config(
        exec: &PluginExec,
        options: &NetworkOptions,
        runtime_root: &Path,
    ) -> Result<Value, NetworkError> {
        exec.probe_iptables()
            .await
            .map_err(NetworkError::Iptables)?;
        let supported = exec.versions("bridge").await?;
        let version = config::choose_version(&supported).ok_or_else(|| {
            NetworkError::InvalidConfig(format!(
                "the bridge plugin supports CNI {} only; runp needs 0.4.0 or 1.0.0",
                supported.join(", ")
            ))
        })?;
        let data_dir = lease_dir(options, runtime_root);
        std::fs::create_dir_all(&data_dir).map_err(NetworkError::io("creating", &data_dir))?;
        Ok(config::render_conflist(
            version,
            &options.bridge,
            &options.pod_cidrs,
            &data_dir,
        ))
    }

    /// Why pods get loopback only; None when they get the CNI network.
    pub fn loopback_reason(&self) -> Option<&str> {
        match &self.active {
            Active::Cni { .. } | Active::Bridge(_) => None,
            Active::Loopback { reason } => Some(reason),
        }
    }

    /// The attachment a new pod will get (None: loopback only). Checks the port mappings, so
    /// bad input fails before anything is created.
    pub fn prepare(
        &self,
        sandbox_id: &str,
        meta: &api::PodSandboxMetadata,
        netns: &Path,
        port_mappings: &[api::PortMapping],
    ) -> Result<Option<NetworkAttachment>, NetworkError> {
        let mappings = config::port_mappings(port_mappings)?;
        let (conflist, bridge) = match &self.active {
            Active::Cni { conflist } => (conflist.clone(), None),
            Active::Bridge(bridge::BridgeSetup { net, portmap, .. }) => {
                let conflist = match portmap {
                    _ if mappings.is_empty() => Value::Null,
                    Ok(conflist) => conflist.clone(),
                    Err(reason) => {
                        return Err(NetworkError::InvalidPortMapping(format!(
                            "hostPorts need the portmap plugin: {reason}"
                        )));
                    }
                };
                (conflist, Some(net.link_of(sandbox_id)))
            }
            Active::Loopback { reason } => {
                if !mappings.is_empty() {
                    tracing::warn!(sandbox = %sandbox_id, %reason, ?mappings,
                        "hostPorts ignored: the pod network is loopback only");
                }
                return Ok(None);
            }
        };
        Ok(Some(NetworkAttachment {
            container_id: sandbox_id.to_string(),
            netns: netns.to_path_buf(),
            ifname: config::POD_IFNAME.to_string(),
            args: config::cni_args(meta, sandbox_id),
            config: conflist,
            port_mappings: mappings,
            result: None,
            bridge,
        }))
    }

    /// Runs ADD; the result and the pod's IPs.
    pub async fn add(
        &self,
        attachment: &NetworkAttachment,
    ) -> Result<(Value, result::PodIps), NetworkError> {
        let out = match (&attachment.bridge, &self.active) {
            (None, _) => self.exec.add(attachment).await?,
            (Some(link), Active::Bridge(bridge::BridgeSetup { net, .. })) => {
                let made = net
                    .attach(&attachment.container_id, link, &attachment.netns)
                    .await?;
                if attachment.port_mappings.is_empty() {
                    made
                } else {
                    let with_link = NetworkAttachment {
                        result: Some(made),
                        ..attachment.clone()
                    };
                    self.exec.add(&with_link).await?
                }
            }
            (Some(_), _) => {
                return Err(NetworkError::InvalidConfig(
                    "a bridge attachment while the bridge network is not running".into(),
                ));
            }
        };
        let ips = result::pod_ips(&out, &attachment.ifname)?;
        Ok((out, ips))
    }

    /// Runs DEL (whatever the current mode: the attachment says what ADD did).
    pub async fn del(&self, attachment: &NetworkAttachment) -> Result<(), NetworkError> {
        detach(&self.exec, attachment).await
    }

    /// What PodSandboxStatus says about a new pod's network.
    pub fn pod_summary(&self) -> String {
        match &self.active {
            Active::Cni { .. } => format!(
                "CNI network {}: {} on bridge {}",
                config::NETWORK_NAME,
                config::POD_IFNAME,
                self.options.bridge
            ),
            Active::Bridge(_) => format!(
                "bridge network {}: {} on bridge {} (made in process)",
                config::NETWORK_NAME,
                config::POD_IFNAME,
                self.options.bridge
            ),
            Active::Loopback { reason } => format!(
                "own network namespace with loopback only ({reason}): the pod IP is {LOOPBACK_POD_IP}"
            ),
        }
    }

    /// The runtime Status info.
    pub fn describe(&self) -> Value {
        match &self.active {
            Active::Cni { conflist } => json!({
                "mode": "cni",
                "bridge": self.options.bridge,
                "podCIDRs": self.options.pod_cidrs.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                "cniBinDirs": self.exec.bin_dirs(),
                "cniVersion": conflist["cniVersion"],
                "dataDir": conflist["plugins"][0]["ipam"]["dataDir"],
            }),
            Active::Bridge(bridge::BridgeSetup {
                net,
                portmap,
                no_masquerade,
            }) => json!({
                "mode": "bridge",
                "bridge": self.options.bridge,
                "podCIDRs": [net.subnet().to_string()],
                "masquerade": no_masquerade.is_none(),
                "noMasqueradeReason": no_masquerade,
                "hostPorts": portmap.is_ok(),
                "noHostPortsReason": portmap.as_ref().err(),
            }),
            Active::Loopback { reason } => json!({
                "mode": "loopback",
                "reason": reason,
                "podIP": LOOPBACK_POD_IP,
            }),
        }
    }
}

/// DEL of `attachment`, whatever mode made it: the CNI list in reverse, or the bridge
/// network's release (with portmap's DEL first when the pod has hostPorts, while its address
/// still names its rules). Idempotent.
pub async fn detach(exec: &PluginExec, attachment: &NetworkAttachment) -> Result<(), NetworkError> {
    let Some(link) = &attachment.bridge else {
        return exec.del(attachment).await;
    };
    let portmap = if attachment.port_mappings.is_empty() {
        Ok(())
    } else {
        exec.del(attachment).await
    };
    let released = bridge::detach(&attachment.container_id, link, attachment.result.as_ref()).await;
    portmap.and(released)
}

/// Where IP leases live: host-local's dataDir, shared by the bridge network.
pub(super) fn lease_dir(options: &NetworkOptions, runtime_root: &Path) -> PathBuf {
    options
        .data_dir
        .clone()
        .unwrap_or_else(|| runtime_root.join("cni").join("networks"))
}

pub(super) fn cidrs_text(cidrs: &[IpNet]) -> String {
    cidrs
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decision_table() {
        let ok = HostProbe {
            rootless: false,
            net_admin: true,
            missing_plugins: vec![],
            missing_tools: vec![],
            ipv6_cidr: false,
        };
        let rootless = HostProbe {
            rootless: true,
            ..ok.clone()
        };
        let no_caps = HostProbe {
            net_admin: false,
            ..ok.clone()
        };
        let no_plugins = HostProbe {
            missing_plugins: vec!["bridge".into(), "portmap".into()],
            ..ok.clone()
        };
        let no_iptables = HostProbe {
            missing_tools: vec!["iptables".into()],
            ..ok.clone()
        };
        let v6 = HostProbe {
            ipv6_cidr: true,
            ..ok.clone()
        };
        let v6_no_plugins = HostProbe {
            ipv6_cidr: true,
            ..no_plugins.clone()
        };
        #[derive(Debug)]
        enum Want {
            Cni,
            Bridge,
            /// Loopback, the reason containing this.
            Loopback(&'static str),
            /// An error containing this.
            Fails(&'static str),
        }
        use NetworkMode::*;
        let cases: Vec<(NetworkMode, &HostProbe, Want)> = vec![
            (Auto, &ok, Want::Bridge),
            (Auto, &no_plugins, Want::Bridge),
            (Auto, &no_iptables, Want::Bridge),
            (Auto, &v6, Want::Cni),
            (
                Auto,
                &v6_no_plugins,
                Want::Loopback("bridge, portmap not found in /opt/cni/bin"),
            ),
            (Auto, &rootless, Want::Loopback("rootless")),
            (Auto, &no_caps, Want::Loopback("CAP_NET_ADMIN")),
            (Cni, &ok, Want::Cni),
            (Cni, &v6, Want::Cni),
            (Cni, &rootless, Want::Fails("rootless")),
            (
                Cni,
                &no_plugins,
                Want::Fails("install containernetworking-plugins"),
            ),
            (Cni, &no_iptables, Want::Fails("iptables")),
            (Bridge, &ok, Want::Bridge),
            (Bridge, &no_plugins, Want::Bridge),
            (Bridge, &no_iptables, Want::Bridge),
            (Bridge, &rootless, Want::Fails("rootless")),
            (Bridge, &no_caps, Want::Fails("CAP_NET_ADMIN")),
            (Loopback, &ok, Want::Loopback("--network=loopback")),
            (Loopback, &rootless, Want::Loopback("--network=loopback")),
        ];
        for (mode, probe, want) in cases {
            let got = decide(mode, probe, "/opt/cni/bin");
            match (&want, got) {
                (Want::Cni, Ok(Decision::Cni)) | (Want::Bridge, Ok(Decision::Bridge)) => {}
                (Want::Loopback(part), Ok(Decision::Loopback { reason })) => {
                    assert!(reason.contains(part), "{mode:?} {probe:?}: {reason}")
                }
                (Want::Fails(part), Err(e)) => {
                    let text = e.to_string();
                    let flag = format!("--network={}: ", mode_flag(mode));
                    assert!(text.starts_with(&flag), "{text}");
                    assert!(text.contains(part), "{mode:?} {probe:?}: {text}");
                }
                (want, got) => panic!("{mode:?} {probe:?}: want {want:?}, got {got:?}"),
            }
        }
    }
}
