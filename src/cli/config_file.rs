//! `runp agent --config FILE`: the agent's settings as YAML, named as kubelet's
//! KubeletConfiguration names them where it has the setting (maxPods, clusterDNS,
//! containerLogMaxSize, staticPodPath...), runp's own names elsewhere. The file becomes flags
//! placed before the command line's, and a setting whose flag the command line gives is taken
//! from the command line only: flags override the file. Unknown or mistyped fields are
//! refused with the field's name and line.

use anyhow::Context;
use runp::kubelet::podconfig::spec::quantity::Quantity;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConfigFile {
    /// `kubelet.config.k8s.io/v1beta1` or `runp.io/v1alpha1`; informational.
    pub api_version: Option<String>,
    pub kind: Option<String>,
    // kubelet's KubeletConfiguration names.
    pub static_pod_path: Option<PathBuf>,
    pub max_pods: Option<u32>,
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Option<Vec<IpAddr>>,
    pub cluster_domain: Option<String>,
    pub container_log_max_size: Option<String>,
    pub container_log_max_files: Option<u32>,
    pub pod_logs_dir: Option<PathBuf>,
    pub container_log_monitor_interval: Option<String>,
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<u8>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<u8>,
    pub pod_pids_limit: Option<i64>,
    pub register_with_taints: Option<Vec<Taint>>,
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// The kubelet API's port (`--kubelet-port`).
    pub port: Option<u16>,
    pub address: Option<IpAddr>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    #[serde(rename = "serverTLSBootstrap")]
    pub server_tls_bootstrap: Option<bool>,
    pub authentication: Option<Authentication>,
    pub authorization: Option<Authorization>,
    // runp's own settings (flags of the same name).
    pub runtime: Option<String>,
    pub runtime_endpoint: Option<String>,
    pub listen: Option<String>,
    /// Group (name or gid) the CRI socket opens to (`--socket-group`).
    pub socket_group: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub node_name: Option<String>,
    #[serde(rename = "nodeIP")]
    pub node_ip: Option<IpAddr>,
    pub node_labels: Option<BTreeMap<String, String>>,
    pub network: Option<String>,
    pub cni_bin_dirs: Option<Vec<PathBuf>>,
    #[serde(rename = "podCIDRs")]
    pub pod_cidrs: Option<Vec<String>>,
    pub pod_bridge: Option<String>,
    pub insecure_registries: Option<Vec<String>>,
    /// containerd's hosts.toml directory (`--registry-config-dir`).
    pub registry_config_dir: Option<PathBuf>,
    pub registry_auth_secret: Option<String>,
    pub streaming_address: Option<String>,
}

/// KubeletConfiguration's `authentication` (the parts runp has).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Authentication {
    pub x509: Option<X509>,
    pub anonymous: Option<Anonymous>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct X509 {
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Anonymous {
    pub enabled: Option<bool>,
}

/// KubeletConfiguration's `authorization`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Authorization {
    /// `Webhook` or `AlwaysAllow`.
    pub mode: Option<String>,
}

/// A taint as KubeletConfiguration's registerWithTaints writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: String,
}

/// The default configuration, every setting with its default (commented where it has none).
pub const DEFAULT: &str = r#"# runp agent configuration (runp agent --config FILE). Flags given on the command line
# override these settings. Names follow kubelet's KubeletConfiguration where it has the setting.
apiVersion: runp.io/v1alpha1
kind: AgentConfiguration

# Pods: static pods from a manifest directory, watched for changes (--manifests).
staticPodPath: /etc/runp/manifests
maxPods: 110                        # --max-pods
clusterDNS: []                      # --cluster-dns, for dnsPolicy ClusterFirst
clusterDomain: cluster.local        # --cluster-domain
podPidsLimit: -1                    # --pod-max-pids: pids.max of each pod cgroup; -1 unlimited
containerLogMaxSize: 512Mi          # --container-log-max-size: rotate above this size
containerLogMaxFiles: 5             # --container-log-max-files, the live one included
# podLogsDir: /var/log/pods         # --pod-logs-dir (default <root>/var/log/pods)
containerLogMonitorInterval: 10s    # --container-log-monitor-interval: rotation checks
imageGCHighThresholdPercent: 85     # --image-gc-high-threshold
imageGCLowThresholdPercent: 80      # --image-gc-low-threshold

# The runtime behind the sync loop: process (runp's own) or remote (a CRI socket).
runtime: process                    # --runtime
# runtimeEndpoint: unix:///run/containerd/containerd.sock   # --runtime-endpoint (remote)
# listen: unix:///var/lib/runp/runp.sock                    # --listen: the agent's CRI socket
# socketGroup: runp                 # --socket-group: socket 0660 for this group (else 0600)

# Pod network (runtime: process).
network: auto                       # --network: auto, cni or loopback
# cniBinDirs: [/opt/cni/bin, /usr/lib/cni]                  # --cni-bin-dir
# podCIDRs: [10.88.0.0/16]                                  # --pod-cidr
podBridge: runp0                    # --pod-bridge
streamingAddress: 127.0.0.1:0       # --streaming-addr: Exec/Attach/PortForward server

# Registries.
insecureRegistries: []              # --insecure-registry: plain http
# registryConfigDir: /etc/runp/certs.d                      # --registry-config-dir: hosts.toml
# registryAuthSecret: kube-system/regcred                   # --registry-auth-secret

# Joining a cluster (with a kubeconfig).
# kubeconfig: /etc/runp/node.kubeconfig                     # --kubeconfig
# nodeName: node-1                                          # --node-name (default: hostname)
nodeIP: 127.0.0.1                   # --node-ip
nodeLabels: {}                      # --node-labels
registerWithTaints: []              # --register-with-taints: [{key, value, effect}]
systemReserved: {}                  # --system-reserved: {cpu: 500m, memory: 1Gi}
port: 10250                         # --kubelet-port: the kubelet API (0: none)
address: 0.0.0.0                    # --address
# tlsCertFile: /etc/runp/pki/kubelet.crt                    # --tls-cert-file (default: self-signed)
# tlsPrivateKeyFile: /etc/runp/pki/kubelet.key              # --tls-private-key-file
serverTLSBootstrap: false           # --rotate-server-certificates: serving certificate by CSR
authentication:
  # x509: {clientCAFile: /etc/runp/pki/ca.crt}              # --client-ca-file
  anonymous: {enabled: false}       # --anonymous-auth
authorization:
  mode: Webhook                     # --authorization-mode: Webhook or AlwaysAllow
"#;

impl ConfigFile {
    /// Reads and checks `path`; errors name the file, the field and its line.
    pub fn load(path: &Path) -> anyhow::Result<ConfigFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the configuration {}", path.display()))?;
        ConfigFile::parse(&text).with_context(|| format!("configuration {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<ConfigFile> {
        // serde_yaml_ng's messages carry the field name and "at line L column C".
        let file: ConfigFile = serde_yaml_ng::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        let kinds = [
            ("runp.io/v1alpha1", "AgentConfiguration"),
            ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration"),
        ];
        match (file.api_version.as_deref(), file.kind.as_deref()) {
            (None, None) => {}
            (Some(version), Some(kind)) if kinds.contains(&(version, kind)) => {}
            (version, kind) => anyhow::bail!(
                "apiVersion {version:?} with kind {kind:?}: expected one of {kinds:?}"
            ),
        }
        if let Some(size) = &file.container_log_max_size {
            size.parse::<Quantity>()
                .map_err(|e| anyhow::anyhow!("containerLogMaxSize: {e}"))?;
        }
        Ok(file)
    }

    /// The settings as `(flag, values)` pairs, in a fixed order.
    pub fn flags(&self) -> Vec<(&'static str, Vec<String>)> {
        let mut out: Vec<(&'static str, Vec<String>)> = Vec::new();
        let mut one = |flag: &'static str, value: Option<String>| {
            if let Some(value) = value {
                out.push((flag, vec![value]));
            }
        };
        let show = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        one("--manifests", show(&self.static_pod_path));
        one("--max-pods", self.max_pods.map(|v| v.to_string()));
        one("--cluster-domain", self.cluster_domain.clone());
        one(
            "--container-log-max-size",
            self.container_log_max_size
                .as_deref()
                .and_then(|s| s.parse::<Quantity>().ok())
                .map(|q| q.value().to_string()),
        );
        one(
            "--container-log-max-files",
            self.container_log_max_files.map(|v| v.to_string()),
        );
        one("--pod-logs-dir", show(&self.pod_logs_dir));
        one(
            "--container-log-monitor-interval",
            self.container_log_monitor_interval.clone(),
        );
        one(
            "--image-gc-high-threshold",
            self.image_gc_high_threshold_percent.map(|v| v.to_string()),
        );
        one(
            "--image-gc-low-threshold",
            self.image_gc_low_threshold_percent.map(|v| v.to_string()),
        );
        one(
            "--pod-max-pids",
            self.pod_pids_limit
                .filter(|v| *v > 0)
                .map(|v| v.to_string()),
        );
        one("--kubelet-port", self.port.map(|v| v.to_string()));
        one("--address", self.address.map(|v| v.to_string()));
        one("--tls-cert-file", show(&self.tls_cert_file));
        one("--tls-private-key-file", show(&self.tls_private_key_file));
        // Only when on: the flag conflicts with --tls-cert-file even as `false`.
        one(
            "--rotate-server-certificates",
            self.server_tls_bootstrap
                .filter(|on| *on)
                .map(|on| on.to_string()),
        );
        let authn = self.authentication.as_ref();
        one(
            "--client-ca-file",
            show(
                &authn
                    .and_then(|a| a.x509.as_ref())
                    .and_then(|x| x.client_ca_file.clone()),
            ),
        );
        one(
            "--anonymous-auth",
            authn
                .and_then(|a| a.anonymous.as_ref())
                .and_then(|a| a.enabled)
                .map(|v| v.to_string()),
        );
        one(
            "--authorization-mode",
            self.authorization.as_ref().and_then(|a| a.mode.clone()),
        );
        one("--registry-config-dir", show(&self.registry_config_dir));
        one("--runtime", self.runtime.clone());
        one("--runtime-endpoint", self.runtime_endpoint.clone());
        one("--listen", self.listen.clone());
        one("--socket-group", self.socket_group.clone());
        one("--kubeconfig", show(&self.kubeconfig));
        one("--node-name", self.node_name.clone());
        one("--node-ip", self.node_ip.map(|v| v.to_string()));
        one("--network", self.network.clone());
        one("--pod-bridge", self.pod_bridge.clone());
        one("--registry-auth-secret", self.registry_auth_secret.clone());
        one("--streaming-addr", self.streaming_address.clone());
        let mut many = |flag: &'static str, values: Vec<String>| {
            if !values.is_empty() {
                out.push((flag, values));
            }
        };
        let strings = |v: &Option<Vec<String>>| v.clone().unwrap_or_default();
        many(
            "--cluster-dns",
            self.cluster_dns
                .iter()
                .flatten()
                .map(ToString::to_string)
                .collect(),
        );
        many(
            "--cni-bin-dir",
            self.cni_bin_dirs
                .iter()
                .flatten()
                .map(|p| p.display().to_string())
                .collect(),
        );
        many("--pod-cidr", strings(&self.pod_cidrs));
        many("--insecure-registry", strings(&self.insecure_registries));
        let pairs = |m: &Option<BTreeMap<String, String>>| -> Vec<String> {
            m.iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        };
        many("--node-labels", pairs(&self.node_labels));
        many("--system-reserved", pairs(&self.system_reserved));
        many(
            "--register-with-taints",
            self.register_with_taints
                .iter()
                .flatten()
                .map(|t| format!("{}={}:{}", t.key, t.value, t.effect))
                .collect(),
        );
        out
    }
}

/// Where the subcommand is: the first argument that is neither a global option nor its value.
fn subcommand_at(args: &[OsString]) -> Option<usize> {
    const GLOBAL_WITH_VALUE: [&str; 3] = ["--root", "--image-root", "--log-level"];
    let mut at = 1;
    while let Some(arg) = args.get(at) {
        let text = arg.to_string_lossy();
        if GLOBAL_WITH_VALUE.contains(&text.as_ref()) {
            at += 2;
        } else if text.starts_with('-') {
            at += 1;
        } else {
            return Some(at);
        }
    }
    None
}

/// `--config FILE` of `runp agent` becomes the file's flags, inserted right after `agent`;
/// settings the command line gives itself are left out. Other commands pass through.
pub fn expand_args(args: Vec<OsString>) -> anyhow::Result<Vec<OsString>> {
    let Some(agent_at) = subcommand_at(&args).filter(|at| args[*at] == "agent") else {
        return Ok(args);
    };
    let mut config = None;
    let mut rest = Vec::new();
    let mut iter = args[agent_at + 1..].iter();
    while let Some(arg) = iter.next() {
        let text = arg.to_string_lossy();
        if text == "--" {
            rest.push(arg.clone());
            rest.extend(iter.cloned());
            break;
        }
        if text == "--config" {
            let path = iter.next().context("--config needs a file")?;
            config = Some(PathBuf::from(path));
        } else if let Some(path) = text.strip_prefix("--config=") {
            config = Some(PathBuf::from(path));
        } else {
            rest.push(arg.clone());
        }
    }
    let Some(path) = config else {
        return Ok(args);
    };
    let given: Vec<String> = rest
        .iter()
        .map(|a| {
            a.to_string_lossy()
                .split('=')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let mut out: Vec<OsString> = args[..=agent_at].to_vec();
    for (flag, values) in ConfigFile::load(&path)?.flags() {
        if given.iter().any(|g| g == flag) {
            continue;
        }
        for value in values {
            out.push(flag.into());
            out.push(value.into());
        }
    }
    out.extend(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn the_default_configuration_parses_and_maps_to_the_agent_defaults() {
        let file = ConfigFile::parse(DEFAULT).unwrap();
        let flags = file.flags();
        let get = |flag: &str| {
            flags
                .iter()
                .find(|(f, _)| *f == flag)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("--max-pods"), Some(vec!["110".to_string()]));
        assert_eq!(
            get("--manifests"),
            Some(vec!["/etc/runp/manifests".to_string()])
        );
        assert_eq!(
            get("--container-log-max-size"),
            Some(vec![(512u64 << 20).to_string()])
        );
        assert_eq!(get("--pod-max-pids"), None, "-1 is unlimited");
        assert_eq!(
            get("--pod-logs-dir"),
            None,
            "commented: <root>/var/log/pods"
        );
        assert_eq!(get("--kubelet-port"), Some(vec!["10250".to_string()]));
        assert_eq!(get("--cluster-dns"), None);
        assert_eq!(get("--anonymous-auth"), Some(vec!["false".to_string()]));
        assert_eq!(
            get("--container-log-monitor-interval"),
            Some(vec!["10s".to_string()])
        );
        assert_eq!(get("--rotate-server-certificates"), None, "off");
        let on = ConfigFile::parse("serverTLSBootstrap: true\n")
            .unwrap()
            .flags();
        assert_eq!(
            on,
            vec![("--rotate-server-certificates", vec!["true".to_string()])]
        );
        assert_eq!(
            get("--authorization-mode"),
            Some(vec!["Webhook".to_string()])
        );
        assert_eq!(get("--socket-group"), None, "0600 by default");
        let group = ConfigFile::parse("socketGroup: runp\n").unwrap().flags();
        assert_eq!(group, vec![("--socket-group", vec!["runp".to_string()])]);
    }

    #[test]
    fn unknown_and_mistyped_fields_name_the_field_and_line() {
        let cases = [
            ("maxPods: 10\nmaxPod: 3\n", &["maxPod", "line 2"][..]),
            (
                "clusterDomain: x\nmaxPods: lots\n",
                &["line 2", "invalid"][..],
            ),
            ("clusterDNS: [not-an-ip]\n", &["line 1"][..]),
            ("containerLogMaxSize: 10Zz\n", &["containerLogMaxSize"][..]),
            ("apiVersion: v1\nkind: Pod\n", &["apiVersion", "Pod"][..]),
            (
                "registerWithTaints: [{key: a, effect: NoSchedule, colour: red}]\n",
                &["colour"][..],
            ),
        ];
        for (text, wanted) in cases {
            let err = format!("{:#}", ConfigFile::parse(text).unwrap_err());
            for want in wanted {
                assert!(err.contains(want), "{text:?}: {err}");
            }
        }
    }

    #[test]
    fn flags_on_the_command_line_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(
            &path,
            "maxPods: 20\nclusterDNS: [10.0.0.10, 10.0.0.11]\nnodeLabels: {zone: a}\n\
             registerWithTaints: [{key: dedicated, value: gpu, effect: NoSchedule}]\n\
             staticPodPath: /etc/runp/manifests\npodLogsDir: /logs\n",
        )
        .unwrap();
        let line = format!(
            "runp --root /r agent --config {} --max-pods 30 --cluster-dns=10.9.9.9",
            path.display()
        );
        let got: Vec<String> = expand_args(args(&line))
            .unwrap()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            got.join(" "),
            "runp --root /r agent --manifests /etc/runp/manifests --pod-logs-dir /logs \
             --node-labels zone=a --register-with-taints dedicated=gpu:NoSchedule \
             --max-pods 30 --cluster-dns=10.9.9.9"
        );
        // Other commands, agent without --config, a pod named agent, and a --config after
        // `--` pass through.
        for line in [
            "runp image ls",
            "runp agent --max-pods 3",
            "runp exec agent -- tool --config x",
            "runp --log-level agent pods",
        ] {
            assert_eq!(expand_args(args(line)).unwrap(), args(line));
        }
        let err = expand_args(args("runp agent --config /nonexistent/x.yaml")).unwrap_err();
        assert!(
            format!("{err:#}").contains("/nonexistent/x.yaml"),
            "{err:#}"
        );
    }
}
