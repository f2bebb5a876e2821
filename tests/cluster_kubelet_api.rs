//! The kubelet API of `runp agent --kubeconfig` against a real control plane: `kubectl logs`
//! (plain, --tail, -f), `kubectl exec -i` with stdin and an exit code, `kubectl port-forward`
//! to a busybox httpd all go API server → kubelet port;
//! authentication and authorization straight at the kubelet port: no credentials 401, a
//! service-account token without RBAC 403 (naming the permission), with nodes/proxy 200, a
//! cluster-CA client certificate 200, a client certificate of another CA refused;
//! /stats/summary and /metrics/resource with the pod's figures; /metrics with the agent's
//! (running pods and containers, CRI operations, pod start, PLEG relist); the serving
//! certificate through a CSR ([`serving_cert`]); then the load steps of [`load`] (100 log
//! followers, a large rotating log). One control plane, one agent.

#[path = "support/image.rs"]
mod image;
#[path = "support/k8s.rs"]
mod k8s;
#[path = "support/kapi.rs"]
mod kapi;
#[path = "cluster_kubelet_api/load.rs"]
mod load;
#[path = "support/runtime.rs"]
mod runtime;
#[path = "cluster_kubelet_api/serving_cert.rs"]
mod serving_cert;

use k8s::{Cluster, run_command};
use kapi::{AgentProcess, Background, HANG_GUARD, free_port, wait_for};
use runtime::{LeakGuard, is_root, skip};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;

const NODE: &str = "kapi-node";

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: kapi, namespace: default}
spec:
  nodeName: kapi-node
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: logger
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo one; echo two; echo three; while [ ! -e /tmp/go ]; do sleep 0.2; done; echo later; exec sleep 3600"]
  - name: web
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "mkdir -p /www && echo hello-from-pod > /www/index.html && exec httpd -f -p 8080 -h /www"]
"#;

/// `curl` straight at the kubelet port: (HTTP code, body); code 0 when no answer came.
fn curl(port: u16, path: &str, extra: &[&str]) -> (u16, String) {
    let url = format!("https://127.0.0.1:{port}{path}");
    let mut args = vec!["-sk", "-w", "\n%{http_code}", "--max-time", "10"];
    args.extend_from_slice(extra);
    args.push(&url);
    let out = run_command("curl", &args, &[], b"");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

fn openssl(args: &[&str]) {
    let out = run_command("openssl", args, &[], b"");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A client certificate (CN=intruder, O=system:masters) signed by a CA of its own.
fn foreign_client_cert(dir: &Path) -> (String, String) {
    let p = |name: &str| dir.join(name).to_string_lossy().into_owned();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &p("other-ca.key"),
        "-out",
        &p("other-ca.crt"),
        "-days",
        "1",
        "-subj",
        "/CN=other-ca",
    ]);
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &p("intruder.key"),
        "-out",
        &p("intruder.csr"),
        "-subj",
        "/O=system:masters/CN=intruder",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &p("intruder.csr"),
        "-CA",
        &p("other-ca.crt"),
        "-CAkey",
        &p("other-ca.key"),
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        &p("intruder.crt"),
    ]);
    (p("intruder.crt"), p("intruder.key"))
}

#[test]
fn kubectl_logs_exec_port_forward_and_kubelet_authorization() {
    let test = "kubectl_logs_exec_port_forward_and_kubelet_authorization";
    if !is_root() {
        skip(test, "root for the process runtime");
        return;
    }
    let Some(cluster) = Cluster::start(test) else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("rk")
        .tempdir_in("/tmp")
        .unwrap();
    let guard = LeakGuard::new(dir.path());
    let root = dir.path();
    let load = Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--root")
        .arg(root)
        .args(["image", "load"])
        .arg(image::fixtures().join("busybox-oci.tar"))
        .output()
        .unwrap();
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );

    // RBAC first, so the API server's authorizer has it before the kubelet asks.
    for sa in ["kapi-reader", "kapi-nobody"] {
        cluster.kubectl_ok(&["create", "serviceaccount", sa]);
    }
    cluster.kubectl_ok(&[
        "create",
        "clusterrole",
        "kapi-node-proxy",
        "--verb=get,create",
        "--resource=nodes/proxy",
    ]);
    cluster.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "kapi-node-proxy",
        "--clusterrole=kapi-node-proxy",
        "--serviceaccount=default:kapi-reader",
    ]);

    let port = free_port();
    let kubeconfig = cluster.node_kubeconfig(NODE);
    let ca = cluster.var("K8S_CA");
    let mut flags = load::ROTATION_FLAGS.to_vec();
    flags.push(serving_cert::FLAG);
    let agent = AgentProcess::spawn_with(root, NODE, &kubeconfig, port, ca, &flags);
    cluster.apply(POD);
    wait_for("kapi Running", || {
        let out = cluster.kubectl(&["get", "pod", "kapi", "-o", "jsonpath={.status.phase}"]);
        (String::from_utf8_lossy(&out.stdout) == "Running").then_some(())
    });

    // kubectl logs: the whole log, then --tail.
    let logs = wait_for("the logger's first lines", || {
        let out = cluster.kubectl(&["logs", "kapi", "-c", "logger"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("three").then_some(text)
    });
    assert_eq!(logs, "one\ntwo\nthree\n");
    assert_eq!(
        cluster.kubectl_ok(&["logs", "kapi", "-c", "logger", "--tail=1"]),
        "three\n"
    );
    assert_eq!(
        cluster.kubectl_ok(&[
            "logs",
            "kapi",
            "-c",
            "logger",
            "--tail=2",
            "--limit-bytes=5"
        ]),
        "two\nt"
    );

    // kubectl logs -f: the old lines, then one written after the stream started.
    let mut follow = load::kubectl_follow(&cluster, &["kapi", "-c", "logger"]);
    let (lines_tx, lines) = mpsc::channel();
    load::forward_lines(&mut follow.0, 0, lines_tx);
    let next = || {
        lines
            .recv_timeout(HANG_GUARD)
            .expect("a followed log line")
            .1
    };
    assert_eq!([next(), next(), next()], ["one", "two", "three"]);
    cluster.kubectl_ok(&["exec", "kapi", "-c", "logger", "--", "touch", "/tmp/go"]);
    assert_eq!(next(), "later", "a line written while following");
    drop(follow);

    // kubectl exec -i: stdin reaches the command, its exit code comes back.
    let out = cluster.kubectl_stdin_as(
        &cluster.admin_kubeconfig(),
        &[
            "exec",
            "-i",
            "kapi",
            "-c",
            "logger",
            "--",
            "sh",
            "-c",
            "cat; echo err >&2; exit 7",
        ],
        b"piped input\n",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "piped input\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("err"));
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // kubectl port-forward, then HTTP through it to the pod's httpd (once it serves).
    wait_for("httpd serving in the pod", || {
        let out = cluster.kubectl(&[
            "exec",
            "kapi",
            "-c",
            "web",
            "--",
            "wget",
            "-qO-",
            "http://127.0.0.1:8080/",
        ]);
        out.status.success().then_some(())
    });
    let local = free_port();
    let mut forward = Background(
        Command::new(cluster.var("KUBECTL"))
            .arg(format!(
                "--kubeconfig={}",
                cluster.admin_kubeconfig().display()
            ))
            .args(["port-forward", "pod/kapi", &format!("{local}:8080")])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(root.join("port-forward.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut ready = String::new();
    // Kept open until the end: kubectl dies of SIGPIPE when it prints to a closed pipe.
    let mut forward_out = BufReader::new(forward.0.stdout.take().unwrap());
    forward_out.read_line(&mut ready).unwrap();
    assert!(ready.contains("Forwarding from"), "{ready:?}");
    let mut http = std::net::TcpStream::connect(("127.0.0.1", local)).unwrap();
    http.set_read_timeout(Some(HANG_GUARD)).unwrap();
    http.write_all(b"GET /index.html HTTP/1.0\r\nHost: pod\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    if let Err(err) = http.read_to_string(&mut answer) {
        let log = std::fs::read_to_string(root.join("port-forward.log")).unwrap_or_default();
        panic!("port-forward: {err}: {log}");
    }
    assert!(
        answer.starts_with("HTTP/1.") && answer.contains(" 200 "),
        "{answer}"
    );
    assert!(answer.ends_with("hello-from-pod\n"), "{answer}");
    drop(forward);
    drop(forward_out);

    // Straight at the kubelet port.
    let (code, body) = curl(port, "/pods", &[]);
    assert_eq!((code, body.as_str()), (401, "Unauthorized\n"));
    let token = |sa: &str| {
        cluster
            .kubectl_ok(&["create", "token", sa])
            .trim()
            .to_string()
    };
    let bearer = |sa: &str| format!("Authorization: Bearer {}", token(sa));
    let (code, body) = curl(port, "/pods", &["-H", &bearer("kapi-nobody")]);
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body,
        "Forbidden (user=system:serviceaccount:default:kapi-nobody, verb=get, resource=nodes, \
         subresource=proxy)\n"
    );
    let reader = bearer("kapi-reader");
    let (code, body) = curl(port, "/pods", &["-H", &reader]);
    assert_eq!(code, 200, "{body}");
    let pods: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(pods["kind"], "PodList");
    assert_eq!(pods["items"][0]["metadata"]["name"], "kapi", "{pods}");
    assert_eq!(pods["items"][0]["status"]["phase"], "Running");
    // (The API server's /api/v1/nodes/NAME/proxy refuses a node at 127.0.0.1: "address not
    // allowed"; logs, exec and port-forward use the kubelet connection and reach it.)
    let (code, body) = curl(
        port,
        "/run/default/kapi/logger?cmd=echo+ran",
        &["-X", "POST", "-H", &reader],
    );
    assert_eq!((code, body.as_str()), (200, "ran\n"));
    let (code, _) = curl(port, "/nothing/here", &["-H", &reader]);
    assert_eq!(code, 404);
    let (code, _) = curl(port, "/pods", &["-X", "POST", "-H", &reader]);
    assert_eq!(code, 405);
    // Client certificates: the cluster CA's admin (O=system:masters) is in; another CA's
    // certificate fails the TLS handshake whatever it claims.
    let admin = [
        "--cert",
        cluster.var("K8S_ADMIN_CERT"),
        "--key",
        cluster.var("K8S_ADMIN_KEY"),
    ];
    let (code, body) = curl(
        port,
        "/containerLogs/default/kapi/logger?tailLines=1",
        &admin,
    );
    assert_eq!((code, body.as_str()), (200, "later\n"));
    // Stats: nodes/stats is not nodes/proxy.
    let (code, body) = curl(port, "/stats/summary", &["-H", &reader]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("subresource=stats"), "{body}");
    let (code, body) = curl(port, "/stats/summary", &admin);
    assert_eq!(code, 200, "{body}");
    let summary: serde_json::Value = serde_json::from_str(&body).unwrap();
    let node = &summary["node"];
    assert_eq!(node["nodeName"], NODE);
    for figure in [
        &node["cpu"]["usageCoreNanoSeconds"],
        &node["memory"]["workingSetBytes"],
        &node["fs"]["capacityBytes"],
    ] {
        assert!(figure.as_u64().is_some_and(|v| v > 0), "{node}");
    }
    let pods = summary["pods"].as_array().unwrap();
    let kapi = pods
        .iter()
        .find(|p| p["podRef"]["name"] == "kapi")
        .unwrap_or_else(|| panic!("kapi in {summary}"));
    let names: Vec<&str> = kapi["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        names.contains(&"logger") && names.contains(&"web"),
        "{kapi}"
    );
    assert!(
        kapi["memory"]["workingSetBytes"]
            .as_u64()
            .is_some_and(|v| v > 0),
        "{kapi}"
    );
    let (code, metrics) = curl(port, "/metrics/resource", &admin);
    assert_eq!(code, 200, "{metrics}");
    for prefix in [
        "node_cpu_usage_seconds_total ",
        "node_memory_working_set_bytes ",
        "container_cpu_usage_seconds_total{container=\"logger\",namespace=\"default\",pod=\"kapi\"} ",
        "pod_memory_working_set_bytes{namespace=\"default\",pod=\"kapi\"} ",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(prefix)),
            "{prefix}\n{metrics}"
        );
    }
    // /metrics: nodes/metrics, with the figures of what the agent did.
    let (code, body) = curl(port, "/metrics", &["-H", &reader]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("subresource=metrics"), "{body}");
    let (code, metrics) = curl(port, "/metrics", &admin);
    assert_eq!(code, 200, "{metrics}");
    let value = |name: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(&format!("{name} ")));
        let value = line.and_then(|l| l.rsplit(' ').next()?.parse().ok());
        value.unwrap_or_else(|| panic!("{name} in\n{metrics}"))
    };
    let running = cluster.kubectl_ok(&[
        "get",
        "pods",
        "-A",
        "--field-selector=spec.nodeName=kapi-node,status.phase=Running",
        "-o",
        "name",
    ]);
    assert_eq!(
        value("kubelet_running_pods"),
        running.lines().count() as f64
    );
    assert_eq!(value("kubelet_running_pods"), 1.0);
    assert_eq!(
        value("kubelet_running_containers{container_state=\"running\"}"),
        2.0
    );
    assert!(value("kubelet_runtime_operations_total{operation_type=\"run_podsandbox\"}") >= 1.0);
    assert!(
        value("kubelet_runtime_operations_duration_seconds_count{operation_type=\"exec\"}") >= 1.0
    );
    assert!(value("kubelet_pod_start_duration_seconds_count") >= 1.0);
    assert!(value("kubelet_pleg_relist_duration_seconds_count") >= 1.0);
    let (cert, key) = foreign_client_cert(root);
    let (code, body) = curl(port, "/pods", &["--cert", &cert, "--key", &key]);
    assert_eq!(code, 0, "no HTTP answer with a foreign certificate: {body}");

    serving_cert::issued_through_a_csr(&cluster, NODE, port, &admin);

    // The load pod comes last: the figures above count the first pod only.
    cluster.apply(&load::pod());
    wait_for("kapi-load Running", || {
        let out = cluster.kubectl(&["get", "pod", "kapi-load", "-o", "jsonpath={.status.phase}"]);
        (String::from_utf8_lossy(&out.stdout) == "Running").then_some(())
    });
    load::many_followers(&cluster, port, &agent, &admin);
    load::large_rotated_log(&cluster, port, &agent, root, &admin);

    // Clean up through the agent.
    for pod in ["kapi", "kapi-load"] {
        cluster.kubectl_ok(&["delete", "pod", pod, "--grace-period=1", "--wait=false"]);
        wait_for("the pods gone", || {
            let out = cluster.kubectl(&["get", "pod", pod]);
            (!out.status.success()).then_some(())
        });
    }
    agent.stop();
    drop(guard);
}
