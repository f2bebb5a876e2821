//! CRI conformance through the gRPC socket of `runp serve`: namespace modes (HostNetwork,
//! HostPID, HostIPC, pod and container PID namespaces), pod hostname and DNS config, sysctls,
//! and mounts (propagation private / rslave / rshared, host paths that are files, SELinux
//! relabel ignored), as critest's namespace, networking and mount-propagation specs check them.

#[path = "support/conformance.rs"]
mod conformance;
#[path = "support/serve.rs"]
mod serve;
#[path = "support/runtime.rs"]
mod support;

use conformance::*;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use runp::cri::{RuntimeService, api};
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_conformance_namespaces() {
    let Some(s) = Suite::start("cri_conformance_namespaces").await else {
        return;
    };
    s.run(vec![
        ("host_namespaces", Box::pin(host_namespaces(&s, true))),
        ("pod_namespaces", Box::pin(host_namespaces(&s, false))),
        ("pid_sharing", Box::pin(pid_sharing(&s))),
        ("hostname_and_dns", Box::pin(hostname_and_dns(&s))),
        ("sysctls", Box::pin(sysctls(&s))),
        ("mounts", Box::pin(mounts(&s))),
        ("mount_propagation", Box::pin(mount_propagation(&s))),
    ])
    .await;
}

fn host_ns(kind: &str) -> String {
    std::fs::read_link(format!("/proc/self/ns/{kind}"))
        .unwrap()
        .display()
        .to_string()
}

/// HostNetwork / HostPID / HostIPC: the container is in the host's namespace, or in its own.
async fn host_namespaces(s: &Suite, host: bool) {
    let mode = if host {
        api::NamespaceMode::Node
    } else {
        api::NamespaceMode::Pod
    } as i32;
    let mut config = s.pod_config(if host { "ns-host" } else { "ns-pod" });
    config.hostname = String::new();
    let options = api::NamespaceOption {
        network: mode,
        pid: mode,
        ipc: mode,
        ..Default::default()
    };
    pod_security(&mut config).namespace_options = Some(options.clone());
    let pod = s.pod(config).await;
    let me = std::process::id();
    let script = format!(
        "for n in net pid ipc; do readlink /proc/self/ns/$n; done; test -d /proc/{me} && echo sees-host"
    );
    // As kubelet and critest do, the container's own options repeat the pod's.
    let config = container("c", &format!("{script}; true"), |c| {
        security(c).namespace_options = Some(options)
    });
    let out = s.output_of(&pod, config).await;
    let lines: Vec<&str> = out.lines().collect();
    for (i, kind) in ["net", "pid", "ipc"].into_iter().enumerate() {
        assert_eq!(
            lines[i] == host_ns(kind),
            host,
            "{kind} namespace (host mode {host}): {out}"
        );
    }
    assert_eq!(out.contains("sees-host"), host, "{out}");
    let status = s.pod_status(&pod.0).await;
    let options = status
        .linux
        .and_then(|l| l.namespaces)
        .and_then(|n| n.options);
    assert_eq!(
        options.map(|o| (o.network, o.pid, o.ipc)),
        Some((mode, mode, mode))
    );
}

/// PodPID: one container's processes are visible from another; ContainerPID: they are not;
/// TargetPID: a container joins the target container's namespace and sees its processes.
async fn pid_sharing(s: &Suite) {
    use api::NamespaceMode::*;
    // (pod, pod mode, looker's mode, whether the looker sees the sleeper)
    for (name, mode, looker_mode, visible) in [
        ("ns-pid-pod", Pod, Pod, true),
        ("ns-pid-container", Container, Container, false),
        ("ns-pid-target", Container, Target, true),
    ] {
        let mut config = s.pod_config(name);
        let options = |mode: api::NamespaceMode, target: &str| api::NamespaceOption {
            pid: mode as i32,
            target_id: target.to_string(),
            ..Default::default()
        };
        pod_security(&mut config).namespace_options = Some(options(mode, ""));
        let pod = s.pod(config).await;
        let sleeper = container("sleeper", "exec sleep 4321", |c| {
            security(c).namespace_options = Some(options(mode, ""))
        });
        let sleeper = s.run_container(&pod, sleeper).await;
        let target = if looker_mode == Target {
            sleeper.as_str()
        } else {
            ""
        };
        let looker = container("looker", "exec sleep 1000", |c| {
            security(c).namespace_options = Some(options(looker_mode, target))
        });
        let looker = s.run_container(&pod, looker).await;
        let ps = s.sh(&looker, "ps -o args").await;
        assert_eq!(ps.contains("sleep 4321"), visible, "{name}: {ps}");
    }
}

/// The pod's hostname as given (even longer than a DNS label); the node's when none is given;
/// the DNS config written to /etc/resolv.conf.
async fn hostname_and_dns(s: &Suite) {
    let mut config = s.pod_config("ns-dns");
    config.hostname = "given-hostname".into();
    config.dns_config = Some(api::DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["ns.svc.cluster.local".into(), "svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    let pod = s.pod(config).await;
    let out = s
        .output_of(
            &pod,
            container(
                "c",
                "hostname; cat /etc/resolv.conf; cat /etc/hostname",
                |_| {},
            ),
        )
        .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"given-hostname"), "{out}");
    assert_eq!(
        lines.last(),
        Some(&"given-hostname"),
        "/etc/hostname: {out}"
    );
    for want in [
        "nameserver 10.96.0.10",
        "search ns.svc.cluster.local svc.cluster.local",
        "options ndots:5",
    ] {
        assert!(lines.contains(&want), "resolv.conf lacks {want:?}: {out}");
    }

    // critest's pod names are longer than a hostname may be; without a hostname the node's.
    let mut config = s.pod_config("PodSandbox-with-log-directory-0123456789abcdef0123456789ab");
    config.hostname = String::new();
    let pod = s.pod(config).await;
    let node = nix::unistd::gethostname().unwrap().into_string().unwrap();
    assert_eq!(
        s.output_of(&pod, container("c", "hostname", |_| {})).await,
        node
    );
}

/// Namespaced sysctls of the pod reach its containers.
async fn sysctls(s: &Suite) {
    let mut config = s.pod_config("ns-sysctl");
    config.linux.get_or_insert_with(Default::default).sysctls = [
        ("kernel.shm_rmid_forced".to_string(), "1".to_string()),
        (
            "net.ipv4.ip_local_port_range".to_string(),
            "40000 45000".to_string(),
        ),
    ]
    .into();
    let pod = s.pod(config).await;
    let script = "cat /proc/sys/kernel/shm_rmid_forced /proc/sys/net/ipv4/ip_local_port_range";
    let out = s.output_of(&pod, container("c", script, |_| {})).await;
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words, ["1", "40000", "45000"], "{out}");
}

/// Host paths that are files or directories, read-only or not; SELinux relabel is accepted and
/// ignored (no SELinux here, as containerd without it).
async fn mounts(s: &Suite) {
    let pod = s.pod(s.pod_config("ns-mounts")).await;
    let host = s.dir.path().join("ns-mounts");
    std::fs::create_dir_all(host.join("dir")).unwrap();
    std::fs::write(host.join("file"), "host file\n").unwrap();
    let bind = |host: &Path, at: &str, readonly: bool| api::Mount {
        container_path: at.into(),
        host_path: host.display().to_string(),
        readonly,
        selinux_relabel: true,
        ..Default::default()
    };
    let script = "cat /in/file; echo more >> /in/file 2>&1 || echo ro-file; echo x > /in/dir/new && echo rw-dir";
    let config = container("c", script, |c| {
        c.mounts = vec![
            bind(&host.join("file"), "/in/file", true),
            bind(&host.join("dir"), "/in/dir", false),
            // Missing on the host: created as a directory, as containerd does.
            bind(&host.join("made/by/runtime"), "/in/made", false),
        ];
    });
    let out = s.output_of(&pod, config).await;
    assert!(out.lines().any(|l| l == "host file"), "{out}");
    assert!(out.contains("ro-file") && out.contains("rw-dir"), "{out}");
    assert_eq!(
        std::fs::read_to_string(host.join("dir/new")).unwrap(),
        "x\n"
    );
    assert_eq!(
        std::fs::read_to_string(host.join("file")).unwrap(),
        "host file\n"
    );
    assert!(host.join("made/by/runtime").is_dir());
}

/// critest's mount propagation: a mount made on the host after the container started shows
/// in it with rslave and rshared, not with private; a mount made in a (privileged) container
/// shows on the host with rshared only.
async fn mount_propagation(s: &Suite) {
    use api::MountPropagation::*;
    let base = s.dir.path().join("ns-prop");
    std::fs::create_dir_all(&base).unwrap();
    // The source must be a shared mount for anything to propagate.
    mount(
        Some(&base),
        &base,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .unwrap();
    mount(
        None::<&str>,
        &base,
        None::<&str>,
        MsFlags::MS_SHARED,
        None::<&str>,
    )
    .unwrap();
    let mut config = s.pod_config("ns-prop");
    pod_security(&mut config).privileged = true;
    let pod = s.pod(config).await;
    let mut ids = Vec::new();
    for (name, propagation) in [
        ("private", PropagationPrivate),
        ("rslave", PropagationHostToContainer),
        ("rshared", PropagationBidirectional),
    ] {
        std::fs::create_dir_all(base.join(name)).unwrap();
        let config = container(name, "exec sleep 1000", |c| {
            c.mounts = vec![api::Mount {
                container_path: "/prop".into(),
                host_path: base.join(name).display().to_string(),
                propagation: propagation as i32,
                ..Default::default()
            }];
            // Privileged, to mount inside: only rshared may send that to the host.
            security(c).privileged = true;
        });
        ids.push((name, s.run_container(&pod, config).await));
    }
    for (name, _) in &ids {
        let at = base.join(name).join("from-host");
        std::fs::create_dir_all(&at).unwrap();
        mount(
            Some("tmpfs"),
            &at,
            Some("tmpfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
        std::fs::write(at.join("seen"), "yes").unwrap();
    }
    for (name, id) in &ids {
        let seen = s.sh(id, "cat /prop/from-host/seen 2>/dev/null; true").await;
        assert_eq!(seen == "yes", *name != "private", "{name}: {seen:?}");
    }
    for (name, id) in &ids {
        s.sh(
            id,
            "mkdir -p /prop/from-ctr && mount -t tmpfs tmpfs /prop/from-ctr && echo hi > /prop/from-ctr/seen",
        )
        .await;
        let from_ctr = base.join(name).join("from-ctr/seen");
        assert_eq!(
            std::fs::read_to_string(&from_ctr).ok().as_deref() == Some("hi\n"),
            *name == "rshared",
            "{name}: a mount made in the container reaches the host only with rshared"
        );
    }
    for (_, id) in &ids {
        s.rt()
            .stop_container(api::StopContainerRequest {
                container_id: id.clone(),
                timeout: 0,
            })
            .await
            .unwrap();
    }
    let mut under = support::mounts_under(&base);
    under.sort_by(|a, b| b.cmp(a));
    for m in under {
        umount2(m.as_str(), MntFlags::MNT_DETACH).unwrap();
    }
}
