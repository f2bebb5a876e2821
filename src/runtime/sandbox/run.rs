//! RunPodSandbox.

use super::{files, namespace_options};
use crate::cri::api;
use crate::jail::{ShimProcess, ShimSpec};
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::ids::new_id;
use crate::runtime::monitor::watch_infra;
use crate::runtime::network::LOOPBACK_POD_IP;
use crate::runtime::state::{
    NamespacePaths, SandboxEntry, SandboxRecord, SandboxState, remove_dir_if_present,
    sandbox_name_key, write_volatile,
};
use nix::mount::{MsFlags, mount};
use std::path::Path;
use std::sync::Arc;

/// Size of a pod's /dev/shm (Docker's and containerd's default).
const SHM_SIZE: &str = "size=65536k";

impl ProcessRuntime {
    pub(crate) async fn run_pod_sandbox_impl(
        &self,
        req: api::RunPodSandboxRequest,
    ) -> Result<String> {
        let config = req
            .config
            .ok_or_else(|| RuntimeError::invalid("RunPodSandbox without a config"))?;
        let meta = config
            .metadata
            .clone()
            .ok_or_else(|| RuntimeError::invalid("pod sandbox config without metadata"))?;
        if meta.name.is_empty() || meta.uid.is_empty() || meta.namespace.is_empty() {
            return Err(RuntimeError::invalid(
                "pod sandbox metadata needs a name, uid and namespace",
            ));
        }
        let ns_opts = namespace_options(&config);
        let host_network = ns_opts.network == api::NamespaceMode::Node as i32;
        let host_ipc = ns_opts.ipc == api::NamespaceMode::Node as i32;
        let node_hostname = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        let hostname = if host_network {
            node_hostname
        } else {
            files::pod_hostname(&config.hostname, &node_hostname).map_err(RuntimeError::invalid)?
        };

        let id = new_id();
        let name_key = sandbox_name_key(&meta);
        self.shared.index.reserve_name(&name_key, &id)?;
        let dir = self.shared.layout.sandbox_run_dir(&id);
        match self
            .create_sandbox(
                &id,
                &dir,
                config,
                &req.runtime_handler,
                hostname,
                host_network,
                host_ipc,
            )
            .await
        {
            Ok(()) => Ok(id),
            Err(e) => {
                self.shared.index.release_name(&name_key, &id);
                if let Err(cleanup) = self.teardown_sandbox(&id).await {
                    tracing::warn!(sandbox = %id, error = %cleanup, "cleanup after a failed RunPodSandbox");
                }
                Err(e)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn create_sandbox(
        &self,
        id: &str,
        dir: &Path,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
        hostname: String,
        host_network: bool,
        host_ipc: bool,
    ) -> Result<()> {
        // The record dir first: a run dir never outlives it (see the state layout).
        let record_dir = self.shared.layout.sandbox_dir(id);
        std::fs::create_dir_all(&record_dir).map_err(RuntimeError::io("creating", &record_dir))?;
        std::fs::create_dir_all(dir.join("ns")).map_err(RuntimeError::io("creating", dir))?;
        // Bad port mappings fail here, before anything exists.
        let (network, network_info) = if host_network {
            (None, "host network namespace".to_string())
        } else {
            let meta = config.metadata.clone().unwrap_or_default();
            let netns = dir.join("ns").join("net");
            let attachment = self
                .network
                .prepare(id, &meta, &netns, &config.port_mappings)?;
            (attachment, self.network.pod_summary())
        };
        let ip = if host_network {
            self.node_ip.clone()
        } else {
            LOOPBACK_POD_IP.to_string()
        };
        write_volatile(
            &dir.join("hostname"),
            files::hostname_file(&hostname).as_bytes(),
        )?;
        match files::resolv_conf(config.dns_config.as_ref()) {
            Some(content) => write_volatile(&dir.join("resolv.conf"), content.as_bytes())?,
            None => copy_host_file("/etc/resolv.conf", &dir.join("resolv.conf"))?,
        }
        let shm_mounted = if host_ipc {
            false
        } else {
            let shm = dir.join("shm");
            std::fs::create_dir_all(&shm).map_err(RuntimeError::io("creating", &shm))?;
            mount(
                Some("shm"),
                &shm,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some(format!("mode=1777,{SHM_SIZE}").as_str()),
            )
            .map_err(|e| RuntimeError::Internal(format!("mounting the pod's /dev/shm: {e}")))?;
            true
        };
        let linux = config.linux.clone().unwrap_or_default();
        let cgroup_parent = self.cgroups.pod_cgroup(&linux.cgroup_parent, id)?;
        let record = SandboxRecord {
            id: id.to_string(),
            config: prost::Message::encode_to_vec(&config),
            runtime_handler: runtime_handler.to_string(),
            state: SandboxState::NotReady,
            created_at: self.now(),
            hostname: hostname.clone(),
            host_network,
            host_ipc,
            ip,
            additional_ips: Vec::new(),
            network_info,
            // Recorded before ADD runs: whatever happens next, stop and remove run DEL.
            network,
            namespaces: NamespacePaths::default(),
            infra: None,
            cgroup_parent: cgroup_parent.clone(),
            shm_mounted,
            listing: Default::default(),
        };
        // Persist before starting anything, so a crash leaves a record to clean up. Durably
        // only with a CNI attachment: its IPAM allocation is the one thing here that outlives
        // a power loss (mounts, cgroups and processes do not), and DEL must find it.
        let entry = Arc::new(SandboxEntry::new(record, record_dir.join("sandbox.json")));
        if entry.with(|r| r.network.is_some()) {
            entry.persist()?;
        } else {
            entry.persist_volatile()?;
        }
        if let Some(cg) = &cgroup_parent {
            self.cgroups.create(cg, linux.resources.as_ref())?;
        }
        let remove_cgroup = || {
            if let Some(cg) = &cgroup_parent {
                let _ = self.cgroups.remove(cg);
            }
        };
        let started = self
            .start_shim(
                dir,
                ShimSpec {
                    id: format!("infra-{id}"),
                    process: ShimProcess::Infra {
                        ns_dir: dir.join("ns"),
                        new_net: !host_network,
                        new_ipc: !host_ipc,
                        new_uts: !host_network,
                        hostname: (!host_network).then(|| hostname.clone()),
                    },
                    log_path: None,
                    log_max_size: None,
                },
            )
            .await;
        let started = match started {
            Ok(s) => s,
            Err(e) => {
                remove_cgroup();
                return Err(e);
            }
        };
        let namespaces = started
            .namespaces
            .as_ref()
            .map(|ns| NamespacePaths {
                net: ns.net.clone(),
                ipc: ns.ipc.clone(),
                uts: ns.uts.clone(),
            })
            .unwrap_or_default();
        let infra = started.process;
        let recorded = entry.update_volatile(|r| {
            r.namespaces = namespaces;
            r.infra = Some(infra);
        });
        // Watched from here on, so the teardown below can wait for the infra to go.
        watch_infra(
            self.shared.clone(),
            entry.clone(),
            started.shim_pidfd,
            self.shutdown.subscribe(),
        );
        let attached = match recorded {
            Ok(()) => self.attach_network(&entry, dir).await,
            Err(e) => Err(e),
        };
        if let Err(e) = attached {
            if let Err(detach) = self.detach_network(&entry).await {
                tracing::warn!(sandbox = %id, error = %detach, "CNI DEL after a failed RunPodSandbox");
            }
            if let Err(kill) = self.kill_infra(&entry).await {
                tracing::warn!(sandbox = %id, error = %kill, "stopping the infra after a failed RunPodSandbox");
            }
            remove_cgroup();
            return Err(e);
        }
        // Ready unless the infra died meanwhile (its watcher has recorded that).
        entry.update_volatile(|r| {
            if r.infra.is_some() {
                r.state = SandboxState::Ready;
            }
        })?;
        self.shared.index.insert_sandbox(entry.clone());
        let ip = entry.snapshot().ip;
        tracing::info!(sandbox = %id, %hostname, %ip, "pod sandbox ready");
        Ok(())
    }

    /// CNI ADD on the pod's network namespace (when the pod has a CNI attachment), the IPs
    /// recorded, then the hosts file that names the pod on its IP.
    async fn attach_network(&self, entry: &SandboxEntry, dir: &Path) -> Result<()> {
        let record = entry.snapshot();
        if let Some(mut attachment) = record.network.clone() {
            if let Some(net) = &record.namespaces.net {
                attachment.netns = net.clone();
            }
            let (result, ips) = self.network.add(&attachment).await?;
            attachment.result = Some(result);
            // Volatile: CNI DEL after a power loss needs only the attachment persisted before
            // ADD ran.
            entry.update_volatile(|r| {
                r.ip = ips.primary;
                r.additional_ips = ips.additional;
                r.network = Some(attachment);
            })?;
        }
        let record = entry.snapshot();
        if record.host_network {
            copy_host_file("/etc/hosts", &dir.join("hosts"))
        } else {
            write_volatile(
                &dir.join("hosts"),
                files::hosts_file(&record.hostname, &record.ip).as_bytes(),
            )
        }
    }

    /// Unmounts what a sandbox's run dir holds (namespace files, /dev/shm) and deletes it,
    /// then its record dir.
    pub(crate) async fn teardown_sandbox(&self, id: &str) -> Result<()> {
        let run_dir = self.shared.layout.sandbox_run_dir(id);
        let record_dir = self.shared.layout.sandbox_dir(id);
        tokio::task::spawn_blocking(move || {
            if run_dir.exists() {
                crate::jail::release_pod_namespaces(&run_dir.join("ns"))?;
                unmount_all(&run_dir.join("shm"));
                std::fs::remove_dir_all(&run_dir)
                    .map_err(RuntimeError::io("removing", &run_dir))?;
            }
            remove_dir_if_present(&record_dir)
        })
        .await
        .map_err(|e| RuntimeError::Internal(format!("sandbox teardown task: {e}")))?
    }
}

/// Detaches every mount stacked on `path` (missing or unmounted is fine).
pub(crate) fn unmount_all(path: &Path) {
    while nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH).is_ok() {}
}

fn copy_host_file(from: &str, to: &Path) -> Result<()> {
    let content = match std::fs::read(from) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(RuntimeError::io("reading", from)(e)),
    };
    write_volatile(to, &content)
}
