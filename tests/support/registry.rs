//! A real registry for the pull tests: Debian's docker-registry on 127.0.0.1 with a free port
//! and a temporary storage directory (optionally behind htpasswd basic auth), images pushed
//! into it with skopeo.
#![allow(dead_code)]

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// True when docker-registry, skopeo and htpasswd are installed; prints a SKIP line if not.
pub fn tools_present(test: &str) -> bool {
    for (tool, package) in [
        (REGISTRY_BIN, "docker-registry"),
        ("/usr/bin/skopeo", "skopeo"),
        ("/usr/bin/htpasswd", "apache2-utils"),
    ] {
        if !Path::new(tool).exists() {
            eprintln!("SKIP: {test}: needs {tool} (Debian package {package})");
            return false;
        }
    }
    true
}

/// Writes `text` as `<dir>/<registry>/hosts.toml`: containerd's `--registry-config-dir` layout.
pub fn write_hosts_toml(dir: &Path, registry: &str, text: &str) {
    let host_dir = dir.join(registry);
    fs::create_dir_all(&host_dir).unwrap();
    fs::write(host_dir.join("hosts.toml"), text).unwrap();
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct TestRegistry {
    child: Child,
    /// `127.0.0.1:PORT`
    pub addr: String,
    pub dir: tempfile::TempDir,
    pub creds: Option<(String, String)>,
}

impl TestRegistry {
    /// Starts a registry; with `creds`, every request needs basic auth with them.
    pub fn start(creds: Option<(&str, &str)>) -> TestRegistry {
        Self::start_with(creds, None)
    }

    /// Like [`TestRegistry::start`]; with `tls` = (certificate, key) PEM files it serves https.
    pub fn start_with(creds: Option<(&str, &str)>, tls: Option<(&Path, &Path)>) -> TestRegistry {
        let dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("storage");
        fs::create_dir(&storage).unwrap();
        let auth = match creds {
            Some((user, pass)) => {
                let htpasswd = dir.path().join("htpasswd");
                let out = Command::new("htpasswd")
                    .args(["-Bbn", user, pass])
                    .output()
                    .expect("running htpasswd");
                assert!(out.status.success(), "htpasswd failed");
                fs::write(&htpasswd, &out.stdout).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: runp-test\n    path: {}\n",
                    htpasswd.display()
                )
            }
            None => String::new(),
        };
        let tls = match tls {
            Some((cert, key)) => format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert.display(),
                key.display()
            ),
            None => String::new(),
        };
        for _ in 0..5 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let config = dir.path().join("config.yml");
            fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n\
                     storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
                     http:\n  addr: {addr}\n{tls}{auth}",
                    storage.display()
                ),
            )
            .unwrap();
            let log = fs::File::create(dir.path().join("registry.log")).unwrap();
            let mut child = Command::new(REGISTRY_BIN)
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("starting docker-registry");
            if wait_ready(&mut child, &addr) {
                return TestRegistry {
                    child,
                    addr,
                    dir,
                    creds: creds.map(|(u, p)| (u.to_string(), p.to_string())),
                };
            }
            // Lost the port to someone else, or it died: try another one.
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "docker-registry did not start: {}",
            fs::read_to_string(dir.path().join("registry.log")).unwrap_or_default()
        )
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// `skopeo copy SRC docker://ADDR/DEST` with `extra` options (e.g. `--format v2s2`, `--all`).
    pub fn push(&self, src: &str, dest: &str, extra: &[&str]) {
        let mut cmd = Command::new("skopeo");
        cmd.args([
            "--insecure-policy",
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
        ]);
        if let Some((user, pass)) = &self.creds {
            cmd.arg(format!("--dest-creds={user}:{pass}"));
        }
        cmd.args(extra)
            .arg(src)
            .arg(format!("docker://{}/{dest}", self.addr));
        let out = cmd.output().expect("running skopeo");
        assert!(
            out.status.success(),
            "skopeo copy {src} failed: {}\nregistry log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    /// The manifest digest `dest` (`repo:tag`) resolves to, as skopeo sees it.
    pub fn digest(&self, dest: &str) -> String {
        let mut cmd = Command::new("skopeo");
        cmd.args(["inspect", "--raw", "--tls-verify=false"]);
        if let Some((user, pass)) = &self.creds {
            cmd.arg(format!("--creds={user}:{pass}"));
        }
        let out = cmd
            .arg(format!("docker://{}/{dest}", self.addr))
            .output()
            .expect("running skopeo inspect");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        use sha2::Digest as _;
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(&out.stdout)))
    }

    /// Where the registry keeps a blob's bytes (for tampering).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

fn wait_ready(child: &mut Child, addr: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if std::net::TcpStream::connect(addr).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA (`ca.pem`) and a server certificate it signed for 127.0.0.1 (`cert.pem`, `key.pem`)
/// in `dir`, made with openssl; None (after a SKIP line) without openssl.
pub fn loopback_certificates(test: &str, dir: &Path) -> Option<(PathBuf, PathBuf, PathBuf)> {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("SKIP: {test}: needs openssl");
        return None;
    }
    let ext = dir.join("leaf.ext");
    fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let path = |name: &str| dir.join(name).display().to_string();
    let steps: [Vec<String>; 3] = [
        [
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=runp test CA",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            "-keyout".into(),
            path("ca.key"),
            "-out".into(),
            path("ca.pem"),
        ])
        .collect(),
        [
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            "-keyout".into(),
            path("key.pem"),
            "-out".into(),
            path("leaf.csr"),
        ])
        .collect(),
        ["x509", "-req", "-days", "1", "-CAcreateserial"]
            .iter()
            .map(|s| s.to_string())
            .chain([
                "-in".into(),
                path("leaf.csr"),
                "-CA".into(),
                path("ca.pem"),
                "-CAkey".into(),
                path("ca.key"),
                "-extfile".into(),
                path("leaf.ext"),
                "-out".into(),
                path("cert.pem"),
            ])
            .collect(),
    ];
    for args in steps {
        let out = Command::new("openssl").args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some((
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    ))
}

/// `oci:<fixture dir>:<name>` for skopeo.
pub fn oci_source(dir: &Path, name: &str) -> String {
    format!("oci:{}:{name}", dir.display())
}
