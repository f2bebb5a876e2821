//! Load on the kubelet port, run inside the kubelet API cluster test (its control plane and
//! agent): 100 follow streams straight at the port plus a few `kubectl logs -f`, all getting a
//! line written after they connected while /healthz answers, and nothing left open once they
//! close; a large log rotating under a follow stream (every line, in order, across the
//! rotations), then its live file read whole, with tailLines and limitBytes, the agent's memory
//! far below the log's size.

use super::curl;
use super::k8s::Cluster;
use super::kapi::{AgentProcess, Background, HANG_GUARD, wait_for};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

/// Agent flags for the rotation: small files (48 MiB: a follower falls behind by a whole
/// file before it misses one), checked often.
pub const ROTATION_FLAGS: [&str; 6] = [
    "--container-log-max-size",
    "50331648",
    "--container-log-max-files",
    "4",
    "--container-log-monitor-interval",
    "200ms",
];
const FOLLOWERS: usize = 100;
const KUBECTL_FOLLOWERS: usize = 3;
/// The flood: this many 1 KiB lines (256 MiB), then `flood-done`.
const FLOOD_LINES: u64 = 256 * 1024;
const LINE: usize = 1023;
const PAD: usize = LINE - 9;
const MIB: u64 = 1024 * 1024;

pub const POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: kapi-load, namespace: default}
spec:
  nodeName: kapi-node
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: ticker
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "echo ready; while [ ! -e /tmp/go ]; do sleep 0.2; done; echo after-connect; exec sleep 3600"]
  - name: flood
    image: busybox
    imagePullPolicy: IfNotPresent
    command:
    - sh
    - -c
    - |
      echo flood-start
      while [ ! -e /tmp/go ]; do sleep 0.2; done
      awk -v n=LINES 'BEGIN { pad = sprintf("%PADs", ""); gsub(/ /, "x", pad); for (i = 0; i < n; i++) printf "%09d%s\n", i, pad }'
      echo flood-done
      while [ ! -e /tmp/tail ]; do sleep 0.2; done
      i=0; while [ $i -lt 1000 ]; do echo "tail $i"; i=$((i+1)); done
      echo tail-done
      exec sleep 3600
"#;

/// The load pod's manifest.
pub fn pod() -> String {
    POD.replace("LINES", &FLOOD_LINES.to_string())
        .replace("PAD", &PAD.to_string())
}

/// Sends each stdout line of `child` to `tx` tagged with `tag`, from a thread of its own.
pub fn forward_lines(child: &mut Child, tag: usize, tx: mpsc::Sender<(usize, String)>) {
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send((tag, line)).is_err() {
                break;
            }
        }
    });
}

/// `kubectl logs -f ARGS` as the cluster admin, stdout piped.
pub fn kubectl_follow(cluster: &Cluster, args: &[&str]) -> Background {
    Background(
        Command::new(cluster.var("KUBECTL"))
            .arg(format!(
                "--kubeconfig={}",
                cluster.admin_kubeconfig().display()
            ))
            .args(["logs", "-f"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// `curl -N` following a container's log straight at the kubelet port.
fn curl_follow(port: u16, container: &str, auth: &[&str]) -> Background {
    let url =
        format!("https://127.0.0.1:{port}/containerLogs/default/kapi-load/{container}?follow=true");
    Background(
        Command::new("curl")
            .args(["-sk", "-N"])
            .args(auth)
            .arg(url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// A figure of /proc/PID/status in bytes (VmRSS, VmHWM).
fn vm(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("{field} in {status}"));
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Waits until each of `tags` streams sent `want`.
fn each_sees(lines: &mpsc::Receiver<(usize, String)>, tags: usize, want: &str) {
    let mut seen = vec![false; tags];
    while seen.iter().any(|s| !s) {
        let (tag, line) = lines
            .recv_timeout(HANG_GUARD)
            .unwrap_or_else(|_| panic!("hang guard: every stream sees {want:?}"));
        if line == want {
            seen[tag] = true;
        }
    }
}

pub fn many_followers(cluster: &Cluster, port: u16, agent: &AgentProcess, auth: &[&str]) {
    let pid = agent.pid();
    let baseline = open_fds(pid);
    let (tx, lines) = mpsc::channel();
    let mut streams = Vec::new();
    for tag in 0..FOLLOWERS + KUBECTL_FOLLOWERS {
        let mut stream = if tag < FOLLOWERS {
            curl_follow(port, "ticker", auth)
        } else {
            kubectl_follow(cluster, &["kapi-load", "-c", "ticker"])
        };
        forward_lines(&mut stream.0, tag, tx.clone());
        streams.push(stream);
    }
    each_sees(&lines, streams.len(), "ready");
    let open = open_fds(pid);
    assert!(
        open >= baseline + FOLLOWERS,
        "{open} fds with {FOLLOWERS} streams, {baseline} before"
    );
    assert_eq!(curl(port, "/healthz", auth), (200, "ok".to_string()));
    cluster.kubectl_ok(&[
        "exec",
        "kapi-load",
        "-c",
        "ticker",
        "--",
        "touch",
        "/tmp/go",
    ]);
    each_sees(&lines, streams.len(), "after-connect");
    assert_eq!(curl(port, "/healthz", auth), (200, "ok".to_string()));
    drop(streams);
    let closed = wait_for("the closed streams' fds released", || {
        let now = open_fds(pid);
        (now <= baseline + 10).then_some(now)
    });
    eprintln!(
        "{} followers: agent fds {baseline} before, {open} while open, {closed} after",
        FOLLOWERS + KUBECTL_FOLLOWERS
    );
}

/// Checks one flood line: its number is `want`.
fn flood_line(line: &str, want: u64) -> Result<(), String> {
    let ok = line.len() == LINE
        && line[..9].parse::<u64>() == Ok(want)
        && line.as_bytes()[9..].iter().all(|b| *b == b'x');
    if ok {
        Ok(())
    } else {
        Err(format!("line {want}: {:?}", &line[..line.len().min(20)]))
    }
}

/// The flood container's log directory.
fn flood_dir(root: &Path) -> PathBuf {
    let pods = root.join("var/log/pods");
    let dir = std::fs::read_dir(&pods)
        .unwrap()
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("default_kapi-load_")
        })
        .expect("the load pod's log directory");
    dir.path().join("flood")
}

/// For a stalled flood: the log directory's files and sizes, and the end of every shim log
/// under `root` (the flood's shim says whether it waits for a rotation).
fn flood_diagnostics(root: &Path, dir: &Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        out += &format!("{} {size}\n", entry.file_name().to_string_lossy());
    }
    // State dirs are a few levels down; rootfs trees below them need no visit.
    let mut pending = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) && depth < 8 {
                pending.push((path, depth + 1));
            } else if entry.file_name() == "shim.log" {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = &lines[lines.len().saturating_sub(4)..];
                out += &format!("{}:\n  {}\n", path.display(), tail.join("\n  "));
            }
        }
    }
    out
}

fn rotated_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".log."))
        .count()
}

pub fn large_rotated_log(
    cluster: &Cluster,
    port: u16,
    agent: &AgentProcess,
    root: &Path,
    auth: &[&str],
) {
    let pid = agent.pid();
    let dir = flood_dir(root);
    let logs = |query: &str| {
        let (code, body) = curl(
            port,
            &format!("/containerLogs/default/kapi-load/flood{query}"),
            auth,
        );
        assert_eq!(code, 200, "{query}: {body}");
        body
    };
    // Resets VmHWM (the peak) to the current RSS: the peak from here on is this part's.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let before = vm(pid, "VmRSS");
    let mut stream = curl_follow(port, "flood", auth);
    let (tx, lines) = mpsc::channel();
    forward_lines(&mut stream.0, 0, tx);
    let next = || match lines.recv_timeout(HANG_GUARD) {
        Ok((_, line)) => line,
        Err(err) => panic!(
            "a followed flood line: {err}\n{}",
            flood_diagnostics(root, &dir)
        ),
    };
    assert_eq!(next(), "flood-start");
    cluster.kubectl_ok(&["exec", "kapi-load", "-c", "flood", "--", "touch", "/tmp/go"]);
    let started = Instant::now();
    let mut sampled = before;
    let mut rotated_during = 0;
    for i in 0..FLOOD_LINES {
        if let Err(err) = flood_line(&next(), i) {
            panic!("the followed flood: {err}");
        }
        if i % 4096 == 0 {
            sampled = sampled.max(vm(pid, "VmRSS"));
            rotated_during = rotated_during.max(rotated_files(&dir));
        }
    }
    assert_eq!(next(), "flood-done");
    let took = started.elapsed();
    drop(stream);
    assert!(rotated_during >= 2, "{rotated_during} rotated files");

    // Once rotation settled, short lines go to the live file; then it is read.
    let live = dir.join("0.log");
    wait_for("the live log below the rotation size", || {
        let size = std::fs::metadata(&live).map(|m| m.len()).unwrap_or(0);
        (size <= 48 * MIB).then_some(())
    });
    cluster.kubectl_ok(&[
        "exec",
        "kapi-load",
        "-c",
        "flood",
        "--",
        "touch",
        "/tmp/tail",
    ]);
    let whole = wait_for("the tail lines", || {
        let whole = logs("");
        whole.ends_with("tail-done\n").then_some(whole)
    });
    let mut got: Vec<&str> = whole.lines().collect();
    assert_eq!(got.pop(), Some("tail-done"));
    let tail: Vec<String> = (0..1000).map(|i| format!("tail {i}")).collect();
    let tail: Vec<&str> = tail.iter().map(String::as_str).collect();
    assert!(got.ends_with(&tail), "the tail lines, in order");
    got.truncate(got.len() - tail.len());
    // Before them, what rotation left of the flood: its last lines, then flood-done.
    if let Some(done) = got.pop() {
        assert_eq!(done, "flood-done");
        let first = FLOOD_LINES - got.len() as u64;
        for (i, line) in got.iter().enumerate().skip(1) {
            flood_line(line, first + i as u64).unwrap();
        }
    }
    assert_eq!(logs("?tailLines=3"), "tail 998\ntail 999\ntail-done\n");
    assert_eq!(logs("?tailLines=1001&limitBytes=14"), "tail 0\ntail 1\n");
    assert_eq!(logs("?limitBytes=10"), whole[..10]);
    let peak = vm(pid, "VmHWM").max(sampled);
    let growth = peak.saturating_sub(before);
    eprintln!(
        "flood: {} MiB followed in {:.1} s, {rotated_during} rotated files at most; live file \
         read whole: {} KiB; agent RSS {} MiB before, peak {} MiB (+{} MiB)",
        FLOOD_LINES * (LINE as u64 + 1) / MIB,
        took.as_secs_f64(),
        whole.len() / 1024,
        before / MIB,
        peak / MIB,
        growth / MIB
    );
    assert!(
        growth < 64 * MIB,
        "agent RSS grew by {} MiB while serving a {} MiB log",
        growth / MIB,
        FLOOD_LINES / 1024
    );
}
