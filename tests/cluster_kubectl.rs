//! The kubectl paths through the kubelet API beyond the basics of cluster_kubelet_api:
//! `kubectl logs --previous` after a restart, `--since-time` and `--since`, `kubectl exec -t`
//! (on a pseudo-terminal from `script`), `kubectl attach -i` to a container reading its
//! stdin, and `kubectl cp` both ways. One control plane, one agent, one pod.

#[path = "support/image.rs"]
mod image;
#[path = "support/k8s.rs"]
mod k8s;
#[path = "support/kapi.rs"]
mod kapi;
#[path = "support/runtime.rs"]
mod runtime;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use k8s::{Cluster, run_command};
use kapi::{AgentProcess, Background, HANG_GUARD, free_port, wait_for};
use runtime::{LeakGuard, is_root, skip};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;

const NODE: &str = "kctl-node";

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: kctl, namespace: default}
spec:
  nodeName: kctl-node
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes: [{name: state, emptyDir: {}}]
  containers:
  - name: restarter
    image: busybox
    imagePullPolicy: IfNotPresent
    volumeMounts: [{name: state, mountPath: /state}]
    command: [sh, -c, "if [ -e /state/ran ]; then echo second life; exec sleep 3600; fi; touch /state/ran; echo first life; exit 3"]
  - name: shell
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo old; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo new; exec sleep 3600"]
  - name: reader
    image: busybox
    imagePullPolicy: IfNotPresent
    stdin: true
    command: [sh, -c, "while read line; do echo got:$line; done"]
"#;

/// The timestamp and text of each line of `kubectl logs --timestamps`.
fn stamped(text: &str) -> Vec<(DateTime<Utc>, String)> {
    text.lines()
        .map(|line| {
            let (ts, rest) = line.split_once(' ').unwrap_or_else(|| panic!("{line:?}"));
            let ts = DateTime::parse_from_rfc3339(ts).unwrap_or_else(|e| panic!("{ts}: {e}"));
            (ts.with_timezone(&Utc), rest.to_string())
        })
        .collect()
}

/// Sleeps until the wall clock is past `at`.
fn sleep_past(at: DateTime<Utc>) {
    while Utc::now() <= at {
        let left = (at - Utc::now()).to_std().unwrap_or_default();
        std::thread::sleep(left + std::time::Duration::from_millis(20));
    }
}

#[test]
fn kubectl_logs_previous_since_exec_tty_attach_and_cp() {
    let test = "kubectl_logs_previous_since_exec_tty_attach_and_cp";
    if !is_root() {
        skip(test, "root for the process runtime");
        return;
    }
    let Some(cluster) = Cluster::start(test) else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("rc")
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
    let kubeconfig = cluster.node_kubeconfig(NODE);
    let agent = AgentProcess::spawn(root, NODE, &kubeconfig, free_port(), cluster.var("K8S_CA"));
    cluster.apply(POD);
    let logs = |args: &[&str]| {
        let mut all = vec!["logs", "kctl"];
        all.extend_from_slice(args);
        cluster.kubectl_ok(&all)
    };

    // --since-time (whole seconds on the wire) between two lines, then --since.
    let old = wait_for("the shell's first line", || {
        let out = cluster.kubectl(&["logs", "kctl", "-c", "shell", "--timestamps"]);
        let lines = stamped(&String::from_utf8_lossy(&out.stdout));
        lines.first().map(|(ts, _)| *ts)
    });
    let cut = old.duration_trunc(TimeDelta::seconds(1)).unwrap() + TimeDelta::seconds(1);
    sleep_past(cut);
    cluster.kubectl_ok(&["exec", "kctl", "-c", "shell", "--", "touch", "/tmp/go"]);
    let lines = wait_for("the shell's second line", || {
        let out = cluster.kubectl(&["logs", "kctl", "-c", "shell", "--timestamps"]);
        let lines = stamped(&String::from_utf8_lossy(&out.stdout));
        (lines.len() == 2).then_some(lines)
    });
    assert_eq!((lines[0].1.as_str(), lines[1].1.as_str()), ("old", "new"));
    let since_time = format!("--since-time={}", cut.format("%Y-%m-%dT%H:%M:%SZ"));
    assert_eq!(logs(&["-c", "shell", &since_time]), "new\n");
    assert_eq!(logs(&["-c", "shell", "--since=1h"]), "old\nnew\n");
    sleep_past(lines[1].0 + TimeDelta::seconds(2));
    assert_eq!(logs(&["-c", "shell", "--since=1s"]), "");

    // exec -t: kubectl allocates a TTY only when its own stdin is a terminal, so it runs
    // under `script`'s pseudo-terminal.
    let kubectl = format!(
        "{} --kubeconfig={} exec -it kctl -c shell -- sh -c 'tty; test -t 0 && echo stdin-is-a-tty'",
        cluster.var("KUBECTL"),
        cluster.admin_kubeconfig().display()
    );
    let out = run_command("script", &["-qec", &kubectl, "/dev/null"], &[], b"");
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("/dev/pts/"), "{text:?}");
    assert!(text.contains("stdin-is-a-tty"), "{text:?}");

    // attach -i: lines typed reach the container's stdin, its answers come back.
    let mut attach = Background(
        Command::new(cluster.var("KUBECTL"))
            .arg(format!(
                "--kubeconfig={}",
                cluster.admin_kubeconfig().display()
            ))
            .args(["attach", "-i", "kctl", "-c", "reader"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (lines_tx, answers) = mpsc::channel();
    let stdout = attach.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stdin = attach.0.stdin.take().unwrap();
    stdin.write_all(b"hello\n").unwrap();
    stdin.flush().unwrap();
    let answer = answers
        .recv_timeout(HANG_GUARD)
        .expect("an answer through attach");
    assert_eq!(answer, "got:hello");
    stdin.write_all(b"again\n").unwrap();
    stdin.flush().unwrap();
    assert_eq!(answers.recv_timeout(HANG_GUARD).unwrap(), "got:again");
    drop(stdin);
    drop(attach);

    // cp both ways (tar in the container through exec): the bytes survive the round trip.
    let data: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let local = root.join("upload.bin");
    std::fs::write(&local, &data).unwrap();
    cluster.kubectl_ok(&[
        "cp",
        local.to_str().unwrap(),
        "kctl:/tmp/upload.bin",
        "-c",
        "shell",
    ]);
    let size = cluster.kubectl_ok(&[
        "exec",
        "kctl",
        "-c",
        "shell",
        "--",
        "wc",
        "-c",
        "/tmp/upload.bin",
    ]);
    assert_eq!(size.split_whitespace().next(), Some("200000"), "{size}");
    cluster.kubectl_ok(&[
        "exec",
        "kctl",
        "-c",
        "shell",
        "--",
        "cp",
        "/tmp/upload.bin",
        "/tmp/back.bin",
    ]);
    let back = root.join("back.bin");
    cluster.kubectl_ok(&[
        "cp",
        "kctl:/tmp/back.bin",
        back.to_str().unwrap(),
        "-c",
        "shell",
    ]);
    assert!(
        std::fs::read(&back).unwrap() == data,
        "kubectl cp from the pod changed the bytes"
    );

    // --previous: the log of the container's first life, after its restart.
    wait_for("the restarter's second life", || {
        let out = cluster.kubectl(&["logs", "kctl", "-c", "restarter"]);
        (String::from_utf8_lossy(&out.stdout) == "second life\n").then_some(())
    });
    assert_eq!(logs(&["-c", "restarter", "--previous"]), "first life\n");
    let restarts = cluster.kubectl_ok(&[
        "get",
        "pod",
        "kctl",
        "-o",
        "jsonpath={.status.containerStatuses[?(@.name==\"restarter\")].restartCount}",
    ]);
    assert_eq!(restarts, "1");

    cluster.kubectl_ok(&["delete", "pod", "kctl", "--grace-period=1", "--wait=false"]);
    wait_for("kctl gone", || {
        let out = cluster.kubectl(&["get", "pod", "kctl"]);
        (!out.status.success()).then_some(())
    });
    agent.stop();
    drop(guard);
}
