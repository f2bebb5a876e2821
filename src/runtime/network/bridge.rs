//! The bridge network in process (`--network=bridge`): what the CNI bridge and host-local
//! plugins do for runp's conflist, over rtnetlink instead of plugin execs. The bridge holds the
//! pod gateway's address; each pod gets a veth whose peer is created inside its network
//! namespace as `eth0`, the host end on the bridge with hairpin on, an IP leased in
//! host-local's format (see [`super::ipam`]) and a default route via the gateway. Masquerade
//! is one iptables rule per network, set at start, not a chain per pod.

use super::config::{self, POD_IFNAME};
use super::ipam::{self, Ipam};
use super::{NetworkError, NetworkOptions, PluginExec};
use futures::TryStreamExt;
use ipnet::{IpNet, Ipv4Net};
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::link::{InfoData, InfoVeth};
use rtnetlink::{Handle, LinkBridge, LinkBridgePort, LinkUnspec, LinkVeth, RouteMessageBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// What DEL needs of a pod attached by the bridge network, persisted in its attachment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BridgeLink {
    /// The host end of the pod's veth (deleting it deletes the pair).
    pub host_veth: String,
    /// The lease directory of the pod's IP.
    pub lease_dir: PathBuf,
    pub subnet: Ipv4Net,
}

/// The host end's name: `runp` and the sandbox id's first 11 characters (IFNAMSIZ allows 15),
/// so a pod's veth is found by its sandbox id.
pub fn host_veth_name(sandbox_id: &str) -> String {
    let tail: String = sandbox_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(11)
        .collect();
    format!("runp{tail}")
}

/// The network's one masquerade rule (nat POSTROUTING), as iptables arguments after the chain:
/// what leaves the pod subnet for elsewhere goes out with the host's address.
pub fn masquerade_rule(bridge: &str, subnet: Ipv4Net) -> Vec<String> {
    let cidr = subnet.to_string();
    let comment = format!("runp bridge network {bridge}");
    [
        "-s",
        &cidr,
        "!",
        "-d",
        &cidr,
        "-m",
        "comment",
        "--comment",
        &comment,
        "-j",
        "MASQUERADE",
    ]
    .map(str::to_string)
    .to_vec()
}

/// A netlink route connection in this process's network namespace, for the runtime's life.
pub fn connect() -> Result<Handle, NetworkError> {
    let (connection, handle, _) = rtnetlink::new_connection()
        .map_err(|e| NetworkError::Netlink(format!("cannot open a netlink socket: {e}")))?;
    tokio::spawn(connection);
    Ok(handle)
}

/// The bridge network as started: the bridge, and what it can and cannot do.
pub struct BridgeSetup {
    pub net: BridgeNet,
    /// The portmap-only conflist for pods with hostPorts, or why there is none.
    pub portmap: Result<Value, String>,
    /// Why pods are not masqueraded (cannot reach beyond the host), if they are not.
    pub no_masquerade: Option<String>,
}

/// Starts the bridge network of `options`: the bridge, its masquerade rule and the portmap
/// plugin's conflist, each said once.
pub async fn start_network(
    exec: &PluginExec,
    options: &NetworkOptions,
    runtime_root: &Path,
) -> Result<BridgeSetup, NetworkError> {
    let subnet = match options.pod_cidrs.as_slice() {
        [IpNet::V4(subnet)] => *subnet,
        _ => {
            return Err(NetworkError::InvalidConfig(format!(
                "the bridge network is IPv4 only and takes one pod CIDR, not {} (use --network=cni for IPv6)",
                super::cidrs_text(&options.pod_cidrs)
            )));
        }
    };
    let data_dir = super::lease_dir(options, runtime_root);
    let net = BridgeNet::start(&options.bridge, subnet, &data_dir, config::NETWORK_NAME).await?;
    let rule = masquerade_rule(&options.bridge, subnet);
    let with = |op: &'static str| {
        let mut args = vec!["-w", "5", "-t", "nat", op, "POSTROUTING"];
        args.extend(rule.iter().map(String::as_str));
        args
    };
    // Check-then-append under a lock beside the leases, which every runtime sharing this
    // bridge shares: two starting at once would each append the rule.
    let lock_path = data_dir.join(format!(".{}.masquerade.lock", options.bridge));
    let path = lock_path.clone();
    let lock = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
        let file = std::fs::File::create(&path)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(file)
    })
    .await
    .map_err(|e| NetworkError::InvalidConfig(format!("masquerade lock task: {e}")))?
    .map_err(NetworkError::io("locking", &lock_path))?;
    let no_masquerade = if exec.iptables(&with("-C")).await.is_ok() {
        None
    } else {
        exec.iptables(&with("-A")).await.err()
    };
    drop(lock);
    if let Some(reason) = &no_masquerade {
        tracing::warn!(%reason, "bridge network: pods are not masqueraded, so they reach this host and each other but nothing beyond");
    }
    let portmap = match exec.find("portmap") {
        None => Err(format!(
            "the portmap CNI plugin is not in {}",
            exec.bin_dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(":")
        )),
        // A portmap that does not answer costs hostPorts, not the network.
        Some(_) => match exec.versions("portmap").await {
            Ok(supported) => config::choose_version(&supported)
                .map(config::render_portmap_conflist)
                .ok_or_else(|| {
                    format!(
                        "the portmap plugin supports CNI {} only",
                        supported.join(", ")
                    )
                }),
            Err(e) => Err(e.to_string()),
        },
    };
    if let Err(reason) = &portmap {
        tracing::warn!(%reason, "bridge network: pods with hostPorts will fail to start");
    }
    tracing::info!(
        bridge = %options.bridge,
        pod_cidr = %subnet,
        lease_dir = %data_dir.display(),
        "pod network: bridge made in process (netlink; no plugin execs per pod)"
    );
    Ok(BridgeSetup {
        net,
        portmap,
        no_masquerade,
    })
}

/// The bridge network of a runtime.
pub struct BridgeNet {
    handle: Handle,
    bridge: String,
    /// Re-read when the bridge was deleted under the runtime (see [`BridgeNet::attach`]).
    bridge_index: AtomicU32,
    subnet: Ipv4Net,
    gateway: Ipv4Addr,
    lease_dir: PathBuf,
}

impl BridgeNet {
    /// Creates the bridge if missing, brings it up with the gateway's address, and turns IP
    /// forwarding on (as the bridge plugin's isGateway does).
    pub async fn start(
        bridge: &str,
        subnet: Ipv4Net,
        data_dir: &Path,
        network: &str,
    ) -> Result<BridgeNet, NetworkError> {
        let lease_dir = Ipam::open(data_dir, network, subnet)?.dir().to_path_buf();
        let handle = connect()?;
        let bridge_index = ensure_bridge(&handle, bridge, subnet).await?;
        let gateway = ipam::gateway(subnet);
        let forward = "/proc/sys/net/ipv4/ip_forward";
        std::fs::write(forward, "1")
            .map_err(NetworkError::io("enabling IP forwarding in", forward))?;
        Ok(BridgeNet {
            handle,
            bridge: bridge.to_string(),
            bridge_index: AtomicU32::new(bridge_index),
            subnet,
            gateway,
            lease_dir,
        })
    }

    pub fn subnet(&self) -> Ipv4Net {
        self.subnet
    }

    /// The link a pod gets, recorded before ADD makes anything so that DEL can undo a
    /// cut-short one.
    pub fn link_of(&self, sandbox_id: &str) -> BridgeLink {
        BridgeLink {
            host_veth: host_veth_name(sandbox_id),
            lease_dir: self.lease_dir.clone(),
            subnet: self.subnet,
        }
    }

    /// ADD: leases an IP, makes the veth pair (`eth0` created inside the pod's namespace, the
    /// host end up on the bridge), sets hairpin, then brings `eth0` up with the pod's address
    /// and default route from a netlink socket inside its namespace. The result is shaped as
    /// the bridge plugin's CNI result. On error the caller runs [`detach`].
    pub async fn attach(
        &self,
        sandbox_id: &str,
        link: &BridgeLink,
        netns: &Path,
    ) -> Result<Value, NetworkError> {
        let ipam = Ipam::at(link.lease_dir.clone(), link.subnet);
        let id = sandbox_id.to_string();
        let ip = tokio::task::spawn_blocking(move || ipam.allocate(&id, POD_IFNAME))
            .await
            .map_err(|e| NetworkError::Netlink(format!("IP lease task: {e}")))??;
        let ns = std::fs::File::open(netns).map_err(NetworkError::io("opening", netns))?;
        // Not up at creation: the kernel brings a veth peer up before it links the pair, and
        // a veth without its peer refuses to open (ENOTCONN).
        let peer = LinkUnspec::new_with_name(POD_IFNAME)
            .setns_by_fd(ns.as_raw_fd())
            .build();
        let veth = |bridge_index: u32| {
            LinkVeth::new(&link.host_veth, POD_IFNAME)
                .set_info_data(InfoData::Veth(InfoVeth::Peer(peer.clone())))
                .controller(bridge_index)
                .up()
                .build()
        };
        let index = self.bridge_index.load(Ordering::Relaxed);
        let made = self.handle.link().add(veth(index)).execute().await;
        // A bridge deleted under the runtime (by hand, or by a last-out test cleanup) leaves
        // its index stale: made again, as the bridge plugin ensures it on every ADD.
        let made = match made {
            Err(e) if link_index(&self.handle, &self.bridge).await? != Some(index) => {
                tracing::warn!(bridge = %self.bridge, error = %e, "the pod bridge was gone: made again");
                let index = ensure_bridge(&self.handle, &self.bridge, self.subnet).await?;
                self.bridge_index.store(index, Ordering::Relaxed);
                self.handle.link().add(veth(index)).execute().await
            }
            made => made,
        };
        made.map_err(netlink(format!("creating veth {}", link.host_veth)))?;
        drop(ns);
        let host_index = link_index(&self.handle, &link.host_veth)
            .await?
            .ok_or_else(|| NetworkError::Netlink(format!("veth {} vanished", link.host_veth)))?;
        self.handle
            .link()
            .set_port(LinkBridgePort::new(host_index).hairpin(true).build())
            .execute()
            .await
            .map_err(netlink(format!("setting hairpin on {}", link.host_veth)))?;
        self.configure_pod(netns, ip).await?;
        let address = format!("{ip}/{}", self.subnet.prefix_len());
        Ok(json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                { "name": self.bridge },
                { "name": link.host_veth },
                { "name": POD_IFNAME, "sandbox": netns.display().to_string() },
            ],
            "ips": [{ "address": address, "gateway": self.gateway.to_string(), "interface": 2 }],
            "routes": [{ "dst": "0.0.0.0/0", "gw": self.gateway.to_string() }],
            "dns": {},
        }))
    }

    /// The pod's address on `eth0` and its default route, from inside its namespace.
    async fn configure_pod(&self, netns: &Path, ip: Ipv4Addr) -> Result<(), NetworkError> {
        let runtime = tokio::runtime::Handle::current();
        let path = netns.to_path_buf();
        let connection = tokio::task::spawn_blocking(move || {
            crate::jail::in_netns(&path, move || {
                // The socket registers with this runtime's reactor while still on the thread
                // that joined the pod's namespace.
                let _entered = runtime.enter();
                rtnetlink::new_connection().map_err(|e| {
                    crate::jail::JailError::io("cannot open a netlink socket in the pod", e)
                })
            })
        })
        .await
        .map_err(|e| NetworkError::Netlink(format!("pod netlink task: {e}")))?
        .map_err(|e| NetworkError::Netlink(e.to_string()))?;
        let (connection, pod, _) = connection;
        // Aborted at the end, whatever happened: its socket lives in the pod's namespace and
        // would keep that namespace (and the veth pair) alive, and netlink-proto ends a
        // connection only once it sees every handle gone.
        let connection = AbortOnDrop(tokio::spawn(connection));
        let configured = Self::address_and_route(&pod, ip, self.subnet, self.gateway).await;
        drop(pod);
        drop(connection);
        configured
    }

    /// `eth0` up, its address, and the default route via the gateway, through `pod`'s socket.
    async fn address_and_route(
        pod: &Handle,
        ip: Ipv4Addr,
        subnet: Ipv4Net,
        gateway: Ipv4Addr,
    ) -> Result<(), NetworkError> {
        let index = link_index(pod, POD_IFNAME)
            .await?
            .ok_or_else(|| NetworkError::Netlink(format!("no {POD_IFNAME} in the pod")))?;
        pod.link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(netlink(format!("bringing the pod's {POD_IFNAME} up")))?;
        pod.address()
            .add(index, ip.into(), subnet.prefix_len())
            .execute()
            .await
            .map_err(netlink(format!("adding {ip} to the pod's {POD_IFNAME}")))?;
        let route = RouteMessageBuilder::<Ipv4Addr>::new()
            .gateway(gateway)
            .output_interface(index)
            .build();
        pod.route()
            .add(route)
            .execute()
            .await
            .map_err(netlink(format!(
                "adding the pod's default route via {gateway}"
            )))
    }
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// DEL: releases the pod's IP, the one `result` names, else any lease of `sandbox_id`.
/// Idempotent. The veth pair is left to go with the pod's network namespace, which dies when
/// the infra is killed and its namespace file released, as stop does next: deleting the pair
/// here cost StopPodSandbox about 30 ms (the kernel's netdev unregistration waits for RCU grace
/// periods; bench-containerd.sh), where the namespace's teardown does it off the caller's path,
/// batched. IPs are searched onward from the last lease, so a released one is not handed out
/// again until the whole range has been.
pub async fn detach(
    sandbox_id: &str,
    link: &BridgeLink,
    result: Option<&Value>,
) -> Result<(), NetworkError> {
    let ip = result
        .and_then(|r| super::result::pod_ips(r, POD_IFNAME).ok())
        .and_then(|ips| ips.primary.parse::<Ipv4Addr>().ok());
    let ipam = Ipam::at(link.lease_dir.clone(), link.subnet);
    let id = sandbox_id.to_string();
    tokio::task::spawn_blocking(move || ipam.release(&id, ip))
        .await
        .map_err(|e| NetworkError::Netlink(format!("IP release task: {e}")))?
}

/// The bridge's index, after making it if missing, bringing it up and giving it the gateway's
/// address unless it has it.
async fn ensure_bridge(
    handle: &Handle,
    bridge: &str,
    subnet: Ipv4Net,
) -> Result<u32, NetworkError> {
    let bridge_index = match link_index(handle, bridge).await? {
        Some(index) => index,
        None => {
            let made = handle
                .link()
                .add(LinkBridge::new(bridge).up().build())
                .execute()
                .await;
            tolerate(made, libc::EEXIST, || format!("creating bridge {bridge}"))?;
            link_index(handle, bridge).await?.ok_or_else(|| {
                NetworkError::Netlink(format!("bridge {bridge} vanished after creation"))
            })?
        }
    };
    handle
        .link()
        .set(LinkUnspec::new_with_index(bridge_index).up().build())
        .execute()
        .await
        .map_err(netlink(format!("bringing bridge {bridge} up")))?;
    let gateway = ipam::gateway(subnet);
    let mut addresses = handle
        .address()
        .get()
        .set_link_index_filter(bridge_index)
        .execute();
    let mut has_gateway = false;
    while let Some(message) = addresses
        .try_next()
        .await
        .map_err(netlink(format!("listing the addresses of {bridge}")))?
    {
        has_gateway |= message.header.prefix_len == subnet.prefix_len()
            && message
                .attributes
                .iter()
                .any(|a| matches!(a, AddressAttribute::Address(IpAddr::V4(ip)) if *ip == gateway));
    }
    if !has_gateway {
        let added = handle
            .address()
            .add(bridge_index, gateway.into(), subnet.prefix_len())
            .execute()
            .await;
        tolerate(added, libc::EEXIST, || {
            format!("adding {gateway}/{} to {bridge}", subnet.prefix_len())
        })?;
    }
    Ok(bridge_index)
}

/// The index of link `name`; None when there is none.
async fn link_index(handle: &Handle, name: &str) -> Result<Option<u32>, NetworkError> {
    let mut links = handle.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(found) => Ok(found.map(|m| m.header.index)),
        Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(NetworkError::Netlink(format!(
            "looking up link {name}: {e}"
        ))),
    }
}

fn errno(e: &rtnetlink::Error) -> Option<i32> {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.code.map(|c| -c.get()),
        _ => None,
    }
}

/// Ok when `done` succeeded or failed with `ok_errno` (EEXIST: already there).
fn tolerate(
    done: Result<(), rtnetlink::Error>,
    ok_errno: i32,
    what: impl FnOnce() -> String,
) -> Result<(), NetworkError> {
    match done {
        Err(e) if errno(&e) != Some(ok_errno) => {
            Err(NetworkError::Netlink(format!("{}: {e}", what())))
        }
        _ => Ok(()),
    }
}

fn netlink(what: String) -> impl FnOnce(rtnetlink::Error) -> NetworkError {
    move |e| NetworkError::Netlink(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_veth_names_fit_ifnamsiz_and_follow_the_sandbox_id() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(host_veth_name(id), "runp0123456789a");
        assert!(host_veth_name(id).len() <= 15);
        assert_eq!(host_veth_name("ab/../c"), "runpabc");
    }
}
