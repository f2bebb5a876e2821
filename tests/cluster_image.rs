//! runp's image loaded into podman and run as a privileged container (see support/podman.rs)
//! joins a real control plane: with a node kubeconfig mounted, the agent inside registers its
//! Node, which turns Ready; `podman stop` (SIGTERM) lets the agent exit 0.

#[path = "support/k8s.rs"]
mod k8s;
#[path = "support/podman.rs"]
mod podman;
#[path = "support/image.rs"]
mod support;

use podman::{Podman, Volumes, wait_until};

const NODE: &str = "runp-image-node";

#[test]
fn the_image_joins_the_control_plane_as_a_ready_node() {
    let test = "the_image_joins_the_control_plane_as_a_ready_node";
    if !support::is_real_root() {
        support::skip(test, "real root (podman runs a privileged container)");
        return;
    }
    if !podman::available(test) {
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
    let volumes = Volumes::create(top);
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
    let container = Podman::new(
        &top.join("podman"),
        &format!("runp-image-cluster-{}", std::process::id()),
        &format!("/runp-image-cluster-{}", std::process::id()),
    );
    let image = container.load(&top.join("image/runp-image.tar"));
    let kubeconfig = cluster.node_kubeconfig(NODE);
    let mut options = vec![
        "--network".to_string(),
        "host".to_string(),
        "-v".to_string(),
        format!("{}:/etc/runp/kubeconfig:ro", kubeconfig.display()),
    ];
    options.extend(volumes.options());
    container.run(&image, &options, &flags);
    let jsonpath = r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#;
    wait_until(&format!("Node {NODE} Ready"), || {
        let out = cluster.kubectl(&["get", "node", NODE, "-o", jsonpath]);
        container.assert_running();
        out.status.success() && String::from_utf8_lossy(&out.stdout) == "True"
    });
    container.ok(&["healthcheck", "run", &container.name]);

    assert_eq!(container.stop(), "0", "{}", container.logs());
    cluster.kubectl_ok(&["delete", "node", NODE]);
}
