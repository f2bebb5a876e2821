//! runp's image run as a privileged container (crun; see support/crun.rs) with its volumes on
//! host directories: the agent inside runs the sample pod from the mounted manifest directory,
//! `runp pods`/`ps`/`logs` answer through `crun exec`, a graceful stop (SIGTERM) stops the pods
//! within their grace periods and leaves nothing on the host, and a second container on the same
//! volumes runs the pod again.

#[path = "support/crun.rs"]
mod crun;
#[path = "support/image.rs"]
mod support;

use crun::{Container, Volumes, cgroup_dirs, host_net_namespaces, make_bundle, wait_until};
use std::path::Path;

/// The pod network of the agent in the container: names no other test uses, so that the host
/// checks below see only what this container could have left.
const BRIDGE: &str = "runpimg0";
const POD_CIDR: &str = "10.217.0.0/16";

/// Says on SIGTERM that it was stopped gracefully (its log is on the host's log volume).
const TERM_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: { name: term, namespace: default }
spec:
  terminationGracePeriodSeconds: 10
  containers:
    - name: main
      image: busybox
      command: ["sh", "-c", "trap 'echo stopped by TERM; exit 0' TERM; echo up; while true; do sleep 1; done"]
"#;

/// Every line of the host's /proc/self/mountinfo naming `dir`.
fn host_mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_str().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(dir))
        .map(str::to_string)
        .collect()
}

/// Waits until `runp pods` in the container shows every pod of `names` Running and ready.
fn wait_running(container: &Container, names: &[&str], log: &Path) {
    wait_until(&format!("{names:?} Running in {}", container.id), || {
        let (ok, text) = container.exec(&["runp", "pods"]);
        let ready = |name: &str| {
            text.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(1) == Some(&name) && f.get(3) == Some(&"Running") && f.get(2) == Some(&"1/1")
            })
        };
        if !ok && container.state().is_none_or(|(s, _)| s != "running") {
            panic!(
                "the container exited: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        ok && names.iter().all(|n| ready(n))
    });
}

/// The network namespaces of every process in the container (its own and the pods').
fn container_net_namespaces(container: &Container) -> Vec<String> {
    let script = "for f in /proc/[0-9]*/ns/net; do busybox readlink $f; done";
    let (ok, text) = container.exec(&["sh", "-c", script]);
    assert!(ok, "{text}");
    let mut namespaces: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("net:"))
        .map(str::to_string)
        .collect();
    namespaces.sort();
    namespaces.dedup();
    namespaces
}

#[test]
fn the_image_runs_as_a_privileged_container_and_stops_cleanly() {
    let test = "the_image_runs_as_a_privileged_container_and_stops_cleanly";
    if !support::is_real_root() {
        support::skip(test, "real root (crun runs a privileged container)");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("rpimg")
        .tempdir_in("/tmp")
        .unwrap();
    let top = dir.path();
    let volumes = Volumes {
        state: top.join("state"),
        logs: top.join("logs"),
        manifests: top.join("manifests"),
    };
    for d in [&volumes.state, &volumes.logs, &volumes.manifests] {
        std::fs::create_dir(d).unwrap();
    }
    support::build_runp_image(&top.join("image"));
    // The sample pod's image, preloaded into the state volume (the store is <root>/images).
    support::open_store(&volumes.state)
        .import(&support::fixtures().join("busybox-oci"))
        .expect("import busybox");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(
        repo.join("rootfs-fixtures/pods/hello.yaml"),
        volumes.manifests.join("hello.yaml"),
    )
    .unwrap();
    std::fs::write(volumes.manifests.join("term.yaml"), TERM_POD).unwrap();

    let cgroup = format!("/runp-image-test-{}", std::process::id());
    let bundle = top.join("bundle");
    make_bundle(
        &top.join("image/oci"),
        env!("CARGO_PKG_VERSION"),
        &bundle,
        &volumes,
        &cgroup,
        &["--pod-bridge", BRIDGE, "--pod-cidr", POD_CIDR],
    );
    let log = top.join("agent.log");
    let container = Container::new(
        &format!("runp-image-{}", std::process::id()),
        &top.join("crun"),
        &cgroup,
    );
    let agent_log = || std::fs::read_to_string(&log).unwrap_or_default();

    container.run(&bundle, &log);
    wait_running(&container, &["hello", "term"], &log);
    let (ok, ps) = container.exec(&["runp", "ps"]);
    assert!(ok, "{ps}");
    assert!(
        ps.lines()
            .any(|l| l.contains("default/hello") && l.contains(" web ") && l.contains("Running")),
        "{ps}"
    );
    let (ok, logs) = container.exec(&["runp", "logs", "hello", "-c", "web"]);
    assert!(
        ok && logs.contains("hello from a ConfigMap in pod hello"),
        "{logs}"
    );
    let (ok, health) = container.exec(&["runp", "health"]);
    assert!(ok, "runp health: {health}");
    let namespaces = container_net_namespaces(&container);
    // The container's own, and one per pod (each with its own network).
    assert!(namespaces.len() >= 3, "{namespaces:?}");

    // Graceful stop: SIGTERM to the agent (PID 1), which stops the pods before it exits.
    let killed = container.crun(&["kill", &container.id, "TERM"]);
    assert!(killed.status.success(), "{killed:?}");
    container.wait_stopped();
    let agent_said = agent_log();
    assert!(
        agent_said.contains("stopping every pod first"),
        "{agent_said}"
    );
    let term_log = std::fs::read_dir(&volumes.logs)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("default_term_"))
        .map(|e| std::fs::read_to_string(e.path().join("main/0.log")).unwrap())
        .expect("the term pod's log on the log volume");
    assert!(
        term_log.contains("stopped by TERM"),
        "{term_log}\n{agent_said}"
    );

    // Nothing left on the host: no process of the container, no mount under its volumes, no
    // network namespace of it or its pods, no pod cgroup, no bridge or iptables rule of its
    // pod network.
    // The pods' cgroups (under the container's) hold no process; they go with the container's.
    let busy: Vec<String> = cgroup_dirs(&cgroup)
        .into_iter()
        .flat_map(|dir| walkdir::WalkDir::new(dir).into_iter().flatten())
        .filter(|e| e.file_name() == "cgroup.procs")
        .filter_map(|e| {
            let procs = std::fs::read_to_string(e.path()).unwrap();
            // The agent may still be a zombie here (crun says stopped once it exited) until
            // the host's init reaps it: only live processes count.
            let commands: Vec<String> = procs
                .split_whitespace()
                .filter(|pid| {
                    let status = std::fs::read_to_string(format!("/proc/{pid}/status"));
                    !status.unwrap_or_default().contains("State:\tZ")
                })
                .map(|pid| {
                    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                    format!("{pid} {}", String::from_utf8_lossy(&cmd).replace('\0', " "))
                })
                .collect();
            (!commands.is_empty()).then(|| format!("{}: {commands:?}", e.path().display()))
        })
        .collect();
    assert!(busy.is_empty(), "processes left in {busy:?}\n{agent_said}");
    let mounts = host_mounts_under(top);
    assert!(mounts.is_empty(), "{mounts:#?}");
    let held: Vec<String> = host_net_namespaces()
        .into_iter()
        .filter(|ns| namespaces.contains(ns))
        .collect();
    assert!(held.is_empty(), "network namespaces still in use: {held:?}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for ns in &namespaces {
        assert!(
            !mountinfo.contains(ns.as_str()),
            "{ns} bind-mounted on the host"
        );
    }
    assert!(
        !Path::new("/sys/class/net").join(BRIDGE).exists(),
        "{BRIDGE} on the host"
    );
    let rules = std::process::Command::new("iptables-save")
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&rules.stdout);
    let prefix = POD_CIDR.trim_end_matches(".0.0/16");
    assert!(
        !rules
            .lines()
            .any(|l| l.contains(BRIDGE) || l.contains(prefix)),
        "iptables rules of the container's pod network on the host"
    );
    container.delete();
    assert_eq!(cgroup_dirs(&cgroup), Vec::<std::path::PathBuf>::new());

    // Again on the same volumes: the agent finds its pods stopped and runs them again.
    container.run(&bundle, &log);
    wait_running(&container, &["hello", "term"], &log);
    let (ok, logs) = container.exec(&["runp", "logs", "term", "-c", "main"]);
    assert!(ok && logs.contains("up"), "{logs}");
    let killed = container.crun(&["kill", &container.id, "TERM"]);
    assert!(killed.status.success(), "{killed:?}");
    container.wait_stopped();
    container.delete();
    assert!(host_mounts_under(top).is_empty());
}
