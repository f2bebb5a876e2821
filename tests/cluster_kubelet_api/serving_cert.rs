//! The serving certificate through a CSR (`--rotate-server-certificates`), in the kubelet API
//! cluster test: the agent asks the kubernetes.io/kubelet-serving signer as its node, serves
//! its self-signed certificate until the request is approved, then the issued one, which
//! verifies against the cluster CA for 127.0.0.1.

use super::k8s::{Cluster, run_command};
use super::kapi::wait_for;

pub const FLAG: &str = "--rotate-server-certificates";

/// /healthz with the certificate verified against `ca`: the HTTP code, 0 when TLS failed.
fn verified_healthz(port: u16, ca: &str, auth: &[&str]) -> u16 {
    let url = format!("https://127.0.0.1:{port}/healthz");
    let mut args = vec![
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
    ];
    args.extend_from_slice(&["--cacert", ca]);
    args.extend_from_slice(auth);
    args.push(&url);
    let out = run_command("curl", &args, &[], b"");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

pub fn issued_through_a_csr(cluster: &Cluster, node: &str, port: u16, auth: &[&str]) {
    let ca = cluster.var("K8S_CA");
    let user = format!("system:node:{node}");
    let csr = wait_for("the node's serving CSR", || {
        let list = cluster.kubectl_ok(&[
            "get",
            "csr",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.spec.signerName} {.spec.username}{\"\\n\"}{end}",
        ]);
        list.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (fields[1..] == ["kubernetes.io/kubelet-serving", user.as_str()])
                .then(|| fields[0].to_string())
        })
    });
    // Not approved yet: the self-signed certificate does not verify.
    assert_eq!(
        verified_healthz(port, ca, auth),
        0,
        "verified before approval"
    );
    cluster.kubectl_ok(&["certificate", "approve", &csr]);
    wait_for("the issued certificate served", || {
        (verified_healthz(port, ca, auth) == 200).then_some(())
    });
}
