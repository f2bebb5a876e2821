//! Subcommand implementations (the binary's side; `anyhow` lives here and in tests only).

pub mod agent;
pub mod cluster;
pub mod config_file;
pub mod exec;
pub mod health;
pub mod image;
pub mod internal;
pub mod kubelet_api;
pub mod local;
pub mod pods;
pub mod serve;

use clap::Args;
use runp::image::{RegistryOptions, StoreOptions};
use std::path::{Path, PathBuf};

const DEFAULT_ROOT: &str = "/var/lib/runp";

/// Options shared by every subcommand.
#[derive(Args, Clone, Debug)]
pub struct GlobalOpts {
    /// State root of runp (runtime state, pod data).
    #[arg(
        long,
        global = true,
        env = "RUNP_ROOT",
        default_value = DEFAULT_ROOT
    )]
    pub root: PathBuf,
    /// Image store root; defaults to <root>/images.
    #[arg(long, global = true, env = "RUNP_IMAGE_ROOT")]
    pub image_root: Option<PathBuf>,
    /// State that dies with the machine (bundles, shim files, pod namespace files), best on
    /// tmpfs; defaults to /run/runp with the default root, else to <root>/run. One per root.
    #[arg(long, global = true, env = "RUNP_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Log filter (tracing EnvFilter syntax, e.g. `info` or `runp=debug`).
    #[arg(long, global = true, env = "RUNP_LOG", default_value = "info")]
    pub log_level: String,
}

impl GlobalOpts {
    pub fn image_root(&self) -> PathBuf {
        self.image_root
            .clone()
            .unwrap_or_else(|| self.root.join("images"))
    }

    /// The default root pairs with /run/runp, as containerd's /var/lib and /run do; any other
    /// root keeps its state inside, so that two roots never share one.
    pub fn state_dir(&self) -> PathBuf {
        match &self.state_dir {
            Some(dir) => dir.clone(),
            None if self.root == Path::new(DEFAULT_ROOT) => PathBuf::from("/run/runp"),
            None => self.root.join("run"),
        }
    }
}

/// Registry options of the commands that pull (`serve`, `agent`, `image pull`).
#[derive(Args, Clone, Debug, Default)]
pub struct RegistryArgs {
    /// Reach this registry over plain http instead of https (HOST or HOST:PORT; a bare HOST
    /// covers every port). Repeatable.
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]")]
    pub insecure_registry: Vec<String>,
    /// containerd's registry hosts directory: DIR/<registry host[:port]>/hosts.toml (and
    /// DIR/_default/hosts.toml for the rest) names mirrors, tried in order before the registry,
    /// with their capabilities, TLS settings and paths. Read at each pull.
    #[arg(long, value_name = "DIR")]
    pub registry_config_dir: Option<PathBuf>,
}

impl RegistryArgs {
    /// Image store options with these registry settings.
    pub fn store_options(&self) -> anyhow::Result<StoreOptions> {
        let registry = RegistryOptions {
            insecure: self.insecure_registry.clone(),
            config_dir: self.registry_config_dir.clone(),
            ..RegistryOptions::default()
        };
        registry
            .validate()
            .map_err(|e| anyhow::anyhow!("--insecure-registry {e}"))?;
        if let Some(dir) = &self.registry_config_dir
            && !dir.is_dir()
        {
            anyhow::bail!("--registry-config-dir {}: not a directory", dir.display());
        }
        Ok(StoreOptions {
            registry,
            ..StoreOptions::default()
        })
    }
}

/// Logs go to stderr so command output on stdout stays machine-readable. libcontainer and
/// libcgroups warn per container about controllers this host lacks; they are quiet unless the
/// filter names them.
pub fn init_tracing(opts: &GlobalOpts) {
    let mut directives = opts.log_level.clone();
    for noisy in ["libcgroups", "libcontainer"] {
        if !directives.contains(noisy) {
            directives.push_str(&format!(",{noisy}=error"));
        }
    }
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_dir_pairs_with_the_root() {
        let opts = |root: &str, state_dir: Option<&str>| GlobalOpts {
            root: root.into(),
            image_root: None,
            state_dir: state_dir.map(PathBuf::from),
            log_level: "info".into(),
        };
        for (root, state_dir, expected) in [
            (DEFAULT_ROOT, None, "/run/runp"),
            ("/srv/runp", None, "/srv/runp/run"),
            (DEFAULT_ROOT, Some("/mnt/tmpfs/runp"), "/mnt/tmpfs/runp"),
            ("/srv/runp", Some("/run/other"), "/run/other"),
        ] {
            assert_eq!(
                opts(root, state_dir).state_dir(),
                PathBuf::from(expected),
                "{root} {state_dir:?}"
            );
        }
    }
}
