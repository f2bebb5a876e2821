//! runp's image loaded into podman and run as a privileged container (see support/podman.rs)
//! with its volumes on host directories: the agent inside runs the sample pod from the mounted
//! manifest directory, `runp pods`/`ps`/`logs` and the image's health command answer through
//! podman, `podman stop` (SIGTERM) stops the pods within their grace periods and leaves nothing on
//! the host, and `podman start` on the same volumes runs the pods again.

#[path = "support/podman.rs"]
mod podman;
#[path = "support/image.rs"]
mod support;

use podman::{Podman, Volumes, cgroup_dirs, host_net_namespaces, wait_until};
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

/// Every line of the host's /proc/self/mountinfo naming one of `names`.
fn host_mounts_naming(names: &[&str]) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| names.iter().any(|n| l.contains(n)))
        .map(str::to_string)
        .collect()
}

/// Waits until `runp pods` in the container shows every pod of `names` Running and ready.
fn wait_running(container: &Podman, names: &[&str]) {
    wait_until(&format!("{names:?} Running in {}", container.name), || {
        let (ok, text) = container.exec(&["runp", "pods"]);
        let ready = |name: &str| {
            text.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(1) == Some(&name) && f.get(3) == Some(&"Running") && f.get(2) == Some(&"1/1")
            })
        };
        if !ok {
            container.assert_running();
        }
        ok && names.iter().all(|n| ready(n))
    });
}

/// The network namespaces of every process in the container (its own and the pods').
fn container_net_namespaces(container: &Podman) -> Vec<String> {
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
        support::skip(test, "real root (podman runs a privileged container)");
        return;
    }
    if !podman::available(test) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("rpimg")
        .tempdir_in("/tmp")
        .unwrap();
    let top = dir.path();
    let volumes = Volumes::create(top);
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
    let container = Podman::new(
        &top.join("podman"),
        &format!("runp-image-{}", std::process::id()),
        &cgroup,
    );
    let image = container.load(&top.join("image/runp-image.tar"));
    // Its own network namespace: the pods' bridge and iptables rules stay inside it.
    let mut options = vec!["--network".to_string(), "none".to_string()];
    options.extend(volumes.options());
    container.run(
        &image,
        &options,
        &["--pod-bridge", BRIDGE, "--pod-cidr", POD_CIDR],
    );
    let id = container.inspect("{{.Id}}");
    wait_running(&container, &["hello", "term"]);
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
    // The image's health command, run by podman (its timers need systemd, absent here).
    container.ok(&["healthcheck", "run", &container.name]);
    assert_eq!(container.inspect("{{.State.Health.Status}}"), "healthy");
    let namespaces = container_net_namespaces(&container);
    // The container's own, and one per pod (each with its own network).
    assert!(namespaces.len() >= 3, "{namespaces:?}");

    // Graceful stop: SIGTERM to the agent (PID 1), which stops the pods before it exits 0.
    assert_eq!(container.stop(), "0", "{}", container.logs());
    let agent_said = container.logs();
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

    // Nothing left on the host: no cgroup of the container or its pods (runc removed them with
    // the container's; podman keeps its monitor's, `conmon`, with no process left in it), no
    // mount of the container or under its volumes, no network namespace of it or its pods, no
    // bridge or iptables rule of its pod network.
    // podman's monitor exits a moment after `podman stop` returns: wait for it to leave its
    // cgroup before looking (it is podman's process, not one of runp's).
    let left_cgroups = || -> Vec<String> {
        cgroup_dirs(&cgroup)
            .into_iter()
            .flat_map(|dir| {
                walkdir::WalkDir::new(dir)
                    .min_depth(1)
                    .into_iter()
                    .flatten()
            })
            .filter(|e| e.file_type().is_dir())
            .filter(|e| {
                e.file_name() != "conmon"
                    || !std::fs::read_to_string(e.path().join("cgroup.procs"))
                        .unwrap_or_default()
                        .trim()
                        .is_empty()
            })
            .map(|e| e.path().display().to_string())
            .collect()
    };
    let conmon_running = |left: &[String]| left.iter().any(|d| d.ends_with("/conmon"));
    wait_until("podman's conmon to exit", || {
        !conmon_running(&left_cgroups())
    });
    let cgroups = left_cgroups();
    assert!(
        cgroups.is_empty(),
        "cgroups left: {cgroups:#?}\n{agent_said}"
    );
    let volume_dirs = [&volumes.state, &volumes.logs, &volumes.manifests];
    let mut names: Vec<&str> = volume_dirs.iter().map(|d| d.to_str().unwrap()).collect();
    names.push(&id);
    let mounts = host_mounts_naming(&names);
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

    // Started again on the same volumes: the agent finds its pods stopped and runs them again.
    container.ok(&["start", &container.name]);
    wait_running(&container, &["hello", "term"]);
    let (ok, logs) = container.exec(&["runp", "logs", "term", "-c", "main"]);
    assert!(ok && logs.contains("up"), "{logs}");
    assert_eq!(container.stop(), "0", "{}", container.logs());
    drop(container);
    let mounts = host_mounts_naming(&[top.to_str().unwrap()]);
    assert!(mounts.is_empty(), "{mounts:#?}");
    assert_eq!(cgroup_dirs(&cgroup), Vec::<std::path::PathBuf>::new());
}
