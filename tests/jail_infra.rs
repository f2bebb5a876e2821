//! The pod infra process: persistent namespaces that containers join by path.

#[path = "support/jail.rs"]
mod support;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use oci_spec::runtime::{LinuxNamespaceType, Spec};
use runp::jail::{self, PodNamespacePaths, ShimProcess, ShimReport, ShimSpec};
use std::path::Path;
use support::*;

/// Starts an infra shim for a pod named `hostname`; returns (shim pid, pause pid, paths).
fn start_infra(dir: &Path, hostname: &str) -> (i32, i32, PodNamespacePaths) {
    let state_dir = dir.join("infra-state");
    std::fs::create_dir_all(&state_dir).unwrap();
    let spec = ShimSpec {
        id: unique_id("infra"),
        process: ShimProcess::Infra {
            ns_dir: dir.join("ns"),
            new_net: true,
            new_ipc: true,
            new_uts: true,
            hostname: Some(hostname.into()),
        },
        log_path: None,
        log_max_size: None,
    };
    match start_shim(&state_dir, &spec) {
        (
            shim,
            ShimReport::Started {
                pid,
                namespaces: Some(ns),
                ..
            },
        ) => (shim, pid, ns),
        (shim, other) => {
            reap(shim);
            panic!("infra did not start: {other:?}")
        }
    }
}

/// `spec` joining the pod's namespaces (and the pid namespace of `pause`, the infra, when
/// `share_pid`, as the runtime does).
fn join_pod(spec: &mut Spec, ns: &PodNamespacePaths, pause: i32, share_pid: bool) {
    let pid_ns = std::path::PathBuf::from(format!("/proc/{pause}/ns/pid"));
    let linux = spec.linux_mut().as_mut().unwrap();
    let namespaces = linux
        .namespaces()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|n| match n.typ() {
            LinuxNamespaceType::Network => namespace(n.typ(), ns.net.as_deref()),
            LinuxNamespaceType::Ipc => namespace(n.typ(), ns.ipc.as_deref()),
            LinuxNamespaceType::Uts => namespace(n.typ(), ns.uts.as_deref()),
            LinuxNamespaceType::Pid if share_pid => namespace(n.typ(), Some(&pid_ns)),
            _ => n,
        })
        .collect();
    linux.set_namespaces(Some(namespaces));
    // The pod's hostname comes from its uts namespace.
    spec.set_hostname(None);
}

fn ns_link(pid: i32, kind: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}"))
        .unwrap()
        .display()
        .to_string()
}

#[test]
fn containers_join_the_pod_namespaces() {
    if skip_without_root("containers_join_the_pod_namespaces") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let (infra_shim, pause, ns) = start_infra(dir.path(), "mypod");
    for (kind, path) in [("net", &ns.net), ("ipc", &ns.ipc), ("uts", &ns.uts)] {
        assert_eq!(
            path.as_deref(),
            Some(dir.path().join("ns").join(kind).as_path())
        );
    }
    // No pid namespace file: sharers join /proc/<pause>/ns/pid.
    assert!(!dir.path().join("ns/pid").exists());
    // The pause process: pid 1 of its own pid namespace, no capabilities, no_new_privs.
    let status = std::fs::read_to_string(format!("/proc/{pause}/status")).unwrap();
    assert!(
        status.contains("\nNSpid:\t") && status.contains(&format!("NSpid:\t{pause}\t1\n")),
        "{status}"
    );
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
    assert!(status.contains("CapBnd:\t0000000000000000"), "{status}");
    assert!(status.contains("NoNewPrivs:\t1"), "{status}");
    assert_ne!(
        ns_link(pause, "net"),
        ns_link(std::process::id() as i32, "net")
    );

    let script = "hostname; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; \
                  ip -o link show lo; for n in net ipc uts; do readlink /proc/self/ns/$n; done";
    let mut spec = base_spec(&rootfs, &["sh", "-c", script]);
    join_pod(&mut spec, &ns, pause, false);
    let run = Run::new(dir.path(), "member", &spec);
    let (shim, _) = run.start_ok();
    let exit = run.wait_exit(shim);
    assert_eq!(exit.exit_code, 0, "{:?}", run.log_records());
    let out = stream_lines(&run.log_records(), "stdout");
    assert_eq!(out[0], "mypod");
    assert_eq!(out[1], "lo", "only the loopback interface: {out:?}");
    assert!(
        out[2].contains("lo:") && out[2].contains(",UP"),
        "lo is up: {}",
        out[2]
    );
    assert_eq!(
        &out[3..6],
        [
            ns_link(pause, "net"),
            ns_link(pause, "ipc"),
            ns_link(pause, "uts")
        ]
    );

    // Sharing the pod's pid namespace: the pause process is pid 1.
    let mut spec = base_spec(&rootfs, &["sh", "-c", "cat /proc/1/comm; echo $$"]);
    join_pod(&mut spec, &ns, pause, true);
    let run = Run::new(dir.path(), "pid-sharer", &spec);
    let (shim, _) = run.start_ok();
    let exit = run.wait_exit(shim);
    assert_eq!(exit.exit_code, 0, "{:?}", run.log_records());
    let out = stream_lines(&run.log_records(), "stdout");
    assert_eq!(out[0], "pause");
    assert_ne!(out[1], "1");

    // SIGTERM ends the pause process cleanly; the shim records it.
    kill(Pid::from_raw(pause), Signal::SIGTERM).unwrap();
    let exit = wait_exit_record(&dir.path().join("infra-state"), infra_shim);
    assert_eq!((exit.pid, exit.exit_code, exit.signal), (pause, 0, None));
    reap(infra_shim);
    jail::release_pod_namespaces(&dir.path().join("ns")).unwrap();
    assert!(!dir.path().join("ns/net").exists());
}

#[test]
fn a_pod_hostname_without_its_own_uts_namespace_is_refused() {
    if skip_without_root("a_pod_hostname_without_its_own_uts_namespace_is_refused") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    std::fs::create_dir_all(&state_dir).unwrap();
    let spec = ShimSpec {
        id: unique_id("infra-bad"),
        process: ShimProcess::Infra {
            ns_dir: dir.path().join("ns"),
            new_net: false,
            new_ipc: false,
            new_uts: false,
            hostname: Some("would-rename-the-host".into()),
        },
        log_path: None,
        log_max_size: None,
    };
    let (shim, report) = start_shim(&state_dir, &spec);
    reap(shim);
    match report {
        ShimReport::Failed { message } => assert!(message.contains("uts"), "{message}"),
        other => panic!("expected a failure, got {other:?}"),
    }
}
