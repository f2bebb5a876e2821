//! A real Kubernetes control plane for cluster tests: ../shared/k8s's `start-cluster.sh` in a
//! temp dir (found through `RUNP_K8S_DIR`), stopped when the handle drops. In CI (`CI=true`) a
//! missing control plane fails the test; elsewhere the test prints SKIP and returns.
//!
//! One cluster serves many agents: `node_kubeconfig(name)` mints a client certificate for
//! `system:node:<name>` (O=system:nodes) with the cluster's CA, so each test gets its own node
//! identity under the Node authorizer.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};

/// Marks the exit code a wrapping shell writes as the last line of stderr.
const RC_MARKER: &str = "__runp_test_rc=";

/// Runs `program args` to completion with `input` on stdin. An in-process runtime's reaper may
/// own every child's exit status (std's wait then fails with ECHILD), so the command runs under
/// `sh`, which reports the exit code on stderr; std's status is used when it has it.
pub fn run_command(program: &str, args: &[&str], envs: &[(&str, &Path)], input: &[u8]) -> Output {
    let script = format!("\"$@\"; rc=$?; echo {RC_MARKER}$rc >&2; exit $rc");
    let mut child = Command::new("sh")
        .args(["-c", &script, "sh", program])
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, *v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let mut stderr_pipe = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr_pipe.read_to_end(&mut buf);
        buf
    });
    let mut stdout = Vec::new();
    let _ = child.stdout.take().unwrap().read_to_end(&mut stdout);
    let _ = writer.join();
    let stderr_all = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).into_owned();
    let (stderr, reported) = match stderr_all.rfind(RC_MARKER) {
        Some(at) => {
            let code = stderr_all[at + RC_MARKER.len()..]
                .trim()
                .parse::<i32>()
                .ok();
            (stderr_all[..at].to_string(), code)
        }
        None => (stderr_all, None),
    };
    let status = match child.wait() {
        Ok(status) => status,
        // The reaper took it: the shell's report stands (none: it was killed).
        Err(_) => ExitStatus::from_raw(reported.map_or(9, |code| (code & 0xff) << 8)),
    };
    Output {
        status,
        stdout,
        stderr: stderr.into_bytes(),
    }
}

/// The control plane folder: `RUNP_K8S_DIR`, else ../shared/k8s beside the project.
pub fn k8s_dir() -> PathBuf {
    match std::env::var_os("RUNP_K8S_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/k8s"),
    }
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Why the control plane cannot start here, if it cannot.
fn unavailable() -> Option<String> {
    let dir = k8s_dir();
    if !dir.join("start-cluster.sh").exists() {
        return Some(format!(
            "no control plane at {} (set RUNP_K8S_DIR)",
            dir.display()
        ));
    }
    let has = |tool: &str| {
        run_command("sh", &["-c", &format!("command -v {tool}")], &[], b"")
            .status
            .success()
    };
    for tool in ["etcd", "openssl", "xz"] {
        if !has(tool) {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

/// One run of start-cluster.sh in a fresh folder.
fn start_cluster_once() -> (tempfile::TempDir, Output) {
    let dir = tempfile::Builder::new()
        .prefix("runp-k8s-")
        .tempdir()
        .expect("temp dir");
    let cache = std::env::temp_dir().join("runp-k8s-bin-cache");
    let script = k8s_dir().join("start-cluster.sh");
    let out = run_command(
        "env",
        &[
            "NODE_NAME=runp-test-node",
            "bash",
            &script.to_string_lossy(),
            &dir.path().to_string_lossy(),
        ],
        &[("K8S_BIN_CACHE", &cache)],
        b"",
    );
    (dir, out)
}

/// A running control plane.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub env: HashMap<String, String>,
}

impl Cluster {
    /// Starts a control plane, or returns None after printing SKIP (outside CI only).
    pub fn start(test: &str) -> Option<Cluster> {
        if let Some(reason) = unavailable() {
            assert!(
                !in_ci(),
                "{test}: the Kubernetes control plane must run in CI: {reason}"
            );
            eprintln!("SKIP: {test}: needs the Kubernetes control plane: {reason}");
            return None;
        }
        // start-cluster.sh picks free ports in a range that overlaps the
        // kernel's ephemeral ports, so a port free when picked can be taken by
        // an outgoing connection before kube-apiserver binds it: start again
        // on fresh ports then, and only then. A CI run once lost 3 attempts in a
        // row (kube-apiserver's own connections to etcd take ephemeral ports
        // while the later components' ports wait), so up to 6.
        let mut attempt = 1;
        let (dir, out) = loop {
            let (dir, out) = start_cluster_once();
            let log = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if out.status.success() || attempt == 6 || !log.contains("address already in use") {
                break (dir, out);
            }
            eprintln!("{test}: start-cluster.sh lost a port to another socket; starting again");
            attempt += 1;
        };
        assert!(
            out.status.success(),
            "start-cluster.sh failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let env = parse_env(&std::fs::read_to_string(dir.path().join("env")).expect("env file"));
        Some(Cluster { dir, env })
    }

    pub fn var(&self, name: &str) -> &str {
        self.env
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing from the cluster env"))
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.var("K8S_ADMIN_KUBECONFIG"))
    }

    pub fn api_url(&self) -> &str {
        self.var("K8S_API_URL")
    }

    /// `kubectl` as cluster-admin.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_as(&self.admin_kubeconfig(), args)
    }

    /// `kubectl` with `kubeconfig`.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        self.kubectl_stdin_as(kubeconfig, args, b"")
    }

    /// `kubectl` with `kubeconfig` and `input` on stdin.
    pub fn kubectl_stdin_as(&self, kubeconfig: &Path, args: &[&str], input: &[u8]) -> Output {
        let kubeconfig = format!("--kubeconfig={}", kubeconfig.display());
        let mut all = vec![kubeconfig.as_str(), "--request-timeout=10s"];
        all.extend_from_slice(args);
        run_command(self.var("KUBECTL"), &all, &[], input)
    }

    /// `kubectl` as admin that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl apply -f -` of `yaml` as admin.
    pub fn apply(&self, yaml: &str) {
        let out = self.kubectl_stdin_as(
            &self.admin_kubeconfig(),
            &["apply", "-f", "-"],
            yaml.as_bytes(),
        );
        assert!(
            out.status.success(),
            "kubectl apply failed: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A kubeconfig for the node identity `system:node:<node>`, minted with the cluster CA.
    pub fn node_kubeconfig(&self, node: &str) -> PathBuf {
        let pki = self.dir.path().join("pki");
        let key = pki.join(format!("node-{node}.key"));
        let csr = pki.join(format!("node-{node}.csr"));
        let crt = pki.join(format!("node-{node}.crt"));
        let ext = pki.join(format!("node-{node}.ext"));
        std::fs::write(
            &ext,
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        let run = |args: &[&str]| {
            let out = run_command("openssl", args, &[], b"");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let p = |path: &Path| path.to_string_lossy().into_owned();
        run(&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &p(&key),
        ]);
        run(&[
            "req",
            "-new",
            "-key",
            &p(&key),
            "-subj",
            &format!("/O=system:nodes/CN=system:node:{node}"),
            "-out",
            &p(&csr),
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            &p(&csr),
            "-CA",
            self.var("K8S_CA"),
            "-CAkey",
            self.var("K8S_CA_KEY"),
            "-set_serial",
            &format!("0x{:032x}", rand_serial()),
            "-sha256",
            "-days",
            "30",
            "-extfile",
            &p(&ext),
            "-out",
            &p(&crt),
        ]);
        let b64 = |path: &Path| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(std::fs::read(path).unwrap())
        };
        let kubeconfig = self.dir.path().join(format!("node-{node}.kubeconfig"));
        let user = format!("system:node:{node}");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: runp-test\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: {user}@runp-test\n  context:\n    cluster: runp-test\n    user: {user}\ncurrent-context: {user}@runp-test\n",
                server = self.api_url(),
                ca = b64(Path::new(self.var("K8S_CA"))),
                cert = b64(&crt),
                key = b64(&key),
            ),
        )
        .unwrap();
        kubeconfig
    }

    /// Kills the API server (SIGKILL: its watches break mid-stream), keeps it down for `down`,
    /// then starts it again with the same command line and waits for /readyz. etcd and the
    /// other components keep running.
    pub fn restart_apiserver(&self, down: std::time::Duration) {
        let pid = self
            .apiserver_pid()
            .expect("kube-apiserver in the pids file");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("apiserver cmdline");
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let gone = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|stat| {
                    stat.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
                .unwrap_or(true)
        };
        let started = std::time::Instant::now();
        while !gone(pid) {
            assert!(
                started.elapsed().as_secs() < 30,
                "kube-apiserver did not die"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::thread::sleep(down);
        let log = self.dir.path().join("logs/kube-apiserver.log");
        let script = format!(
            "setsid \"$@\" </dev/null >>'{}' 2>&1 & echo $!",
            log.display()
        );
        let mut args = vec!["-c", script.as_str(), "sh"];
        args.extend(argv.iter().map(String::as_str));
        let out = run_command("sh", &args, &[], b"");
        let new_pid: i32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the new apiserver's pid");
        let stat = std::fs::read_to_string(format!("/proc/{new_pid}/stat")).unwrap_or_default();
        let start_time = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(19))
            .unwrap_or("0")
            .to_string();
        let pids = self.dir.path().join("pids");
        let kept: String = std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with("kube-apiserver "))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(
            &pids,
            format!("{kept}kube-apiserver {new_pid} {start_time}\n"),
        )
        .unwrap();
        let started = std::time::Instant::now();
        while !self.kubectl(&["get", "--raw", "/readyz"]).status.success() {
            assert!(
                started.elapsed().as_secs() < 90,
                "kube-apiserver not ready again after its restart"
            );
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
    }

    /// The running kube-apiserver's pid (from the pids file).
    pub fn apiserver_pid(&self) -> Option<i32> {
        let pids = std::fs::read_to_string(self.dir.path().join("pids")).ok()?;
        pids.lines()
            .find(|l| l.starts_with("kube-apiserver "))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
    }
}

fn rand_serial() -> u128 {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    nanos ^ (u128::from(std::process::id()) << 64)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let script = k8s_dir().join("stop-cluster.sh");
        let dir = self.dir.path().to_string_lossy();
        run_command("bash", &[&script.to_string_lossy(), &dir], &[], b"");
    }
}

/// `export NAME='value'` / `NAME=value` lines of the env file.
fn parse_env(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim().strip_prefix("export ").unwrap_or(line.trim());
            let (name, value) = line.split_once('=')?;
            let value = value.trim();
            let value = value
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .or_else(|| value.strip_prefix('"').and_then(|v| v.strip_suffix('"')))
                .unwrap_or(value);
            Some((name.to_string(), value.to_string()))
        })
        .collect()
}
