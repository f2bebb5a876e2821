//! runp's image as a privileged container (crun; see support/crun.rs) joins a real control
//! plane: with a node kubeconfig mounted, the agent inside registers its Node, which turns
//! Ready; stopped with SIGTERM, the container exits and leaves no cgroup behind.

#[path = "support/crun.rs"]
mod crun;
#[path = "support/k8s.rs"]
mod k8s;
#[path = "support/image.rs"]
mod support;

use crun::{Container, Volumes, cgroup_dirs, edit_config, make_bundle, wait_until};

const NODE: &str = "runp-image-node";

#[test]
fn the_image_joins_the_control_plane_as_a_ready_node() {
    let test = "the_image_joins_the_control_plane_as_a_ready_node";
    if !support::is_real_root() {
        support::skip(test, "real root (crun runs a privileged container)");
        return;
    }
    let Some(cluster) = k8s::Cluster::start(test) else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("rpimgk")
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
    // The host's network (the API server listens on the host's loopback), so the pods get
    // loopback networking: nothing of a pod network lands on the host. The kubelet API on a
    // free loopback port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let flags = [
        "--kubeconfig",
        "/etc/runp/kubeconfig",
        "--node-name",
        NODE,
        "--network",
        "loopback",
        "--kubelet-port",
        &port,
        "--address",
        "127.0.0.1",
    ];
    let cgroup = format!("/runp-image-cluster-{}", std::process::id());
    let bundle = top.join("bundle");
    make_bundle(
        &top.join("image/oci"),
        env!("CARGO_PKG_VERSION"),
        &bundle,
        &volumes,
        &cgroup,
        &flags,
    );
    let kubeconfig = cluster.node_kubeconfig(NODE);
    edit_config(&bundle, |spec| {
        crun::host_network(spec);
        crun::bind_read_only(spec, &kubeconfig, "/etc/runp/kubeconfig");
    });
    let log = top.join("agent.log");
    let container = Container::new(
        &format!("runp-image-cluster-{}", std::process::id()),
        &top.join("crun"),
        &cgroup,
    );
    container.run(&bundle, &log);
    let jsonpath = r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#;
    wait_until(&format!("Node {NODE} Ready"), || {
        let out = cluster.kubectl(&["get", "node", NODE, "-o", jsonpath]);
        if container.state().is_none_or(|(s, _)| s != "running") {
            panic!(
                "the container exited: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        out.status.success() && String::from_utf8_lossy(&out.stdout) == "True"
    });
    let (ok, health) = container.exec(&["runp", "health"]);
    assert!(ok, "runp health: {health}");

    let killed = container.crun(&["kill", &container.id, "TERM"]);
    assert!(killed.status.success(), "{killed:?}");
    container.wait_stopped();
    container.delete();
    assert_eq!(cgroup_dirs(&cgroup), Vec::<std::path::PathBuf>::new());
    cluster.kubectl_ok(&["delete", "node", NODE]);
}
