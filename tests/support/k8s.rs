//! A real Kubernetes control plane for cluster tests: ../shared/k8s's `start-cluster.sh` in a
//! temp dir (found through `RUNP_K8S_DIR`), stopped when the handle drops. In CI (`CI=true`) a
//! missing control plane fails the test; elsewhere the test prints SKIP and returns.
//!
//! One cluster serves many agents: `node_kubeconfig(name)` mints a client certificate for
//! `system:node:<name>` (O=system:nodes) with the cluster's CA, so each test gets its own node
//! identity under the Node authorizer.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    for tool in ["etcd", "openssl", "xz"] {
        if !has(tool) {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
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
        let dir = tempfile::Builder::new()
            .prefix("runp-k8s-")
            .tempdir()
            .expect("temp dir");
        let cache = std::env::temp_dir().join("runp-k8s-bin-cache");
        let out = Command::new("bash")
            .arg(k8s_dir().join("start-cluster.sh"))
            .arg(dir.path())
            .env("K8S_BIN_CACHE", &cache)
            .env("NODE_NAME", "runp-test-node")
            .stdin(Stdio::null())
            .output()
            .expect("start-cluster.sh runs");
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
        Command::new(self.var("KUBECTL"))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--request-timeout=10s")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("kubectl runs")
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
        let mut child = Command::new(self.var("KUBECTL"))
            .arg(format!(
                "--kubeconfig={}",
                self.admin_kubeconfig().display()
            ))
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
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
            let out = Command::new("openssl").args(args).output().unwrap();
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

    /// Stops the API server only (etcd and the others keep running), for outage tests.
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
        let _ = Command::new("bash")
            .arg(k8s_dir().join("stop-cluster.sh"))
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
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
