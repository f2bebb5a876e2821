//! The termination message file of a container instance, mounted at its
//! `terminationMessagePath` (as the kubelet does), so the sync loop can read it after exit.

use super::VolumeError;
use crate::cri::api;
use crate::kubelet::config::AgentConfig;
use k8s_openapi::api::core::v1::Container;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// `<pod dir>/containers/<name>/<restart>.termination-log`
pub fn termination_log_path(
    config: &AgentConfig,
    pod_uid: &str,
    container: &str,
    restart_count: u32,
) -> PathBuf {
    let dir = config.pod_dir(pod_uid).join("containers").join(container);
    dir.join(format!("{restart_count}.termination-log"))
}

/// Creates the (empty, world-writable, since the container may run as any user) termination
/// message file of this container instance and returns its mount; `None` when the container
/// has no terminationMessagePath.
pub fn termination_log_mount(
    config: &AgentConfig,
    pod_uid: &str,
    container: &Container,
    restart_count: u32,
) -> Result<Option<(api::Mount, PathBuf)>, VolumeError> {
    let Some(target) = container
        .termination_message_path
        .as_deref()
        .filter(|p| !p.is_empty())
    else {
        return Ok(None);
    };
    let path = termination_log_path(config, pod_uid, &container.name, restart_count);
    let io = |source| VolumeError::Io {
        path: path.clone(),
        source,
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io)?;
    }
    fs::File::create(&path).map_err(io)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).map_err(io)?;
    let mount = api::Mount {
        container_path: target.to_string(),
        host_path: path.to_string_lossy().into_owned(),
        ..Default::default()
    };
    Ok(Some((mount, path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_a_file_per_instance() {
        let root = tempfile::tempdir().unwrap();
        let config = AgentConfig::with_root(root.path());
        let mut container = Container {
            name: "main".into(),
            termination_message_path: Some("/dev/termination-log".into()),
            ..Default::default()
        };
        let (mount, path) = termination_log_mount(&config, "u1", &container, 2)
            .unwrap()
            .unwrap();
        assert_eq!(mount.container_path, "/dev/termination-log");
        assert!(path.ends_with("var/pods/u1/containers/main/2.termination-log"));
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o666
        );
        fs::write(&path, "bye").unwrap();
        // Recreated empty for the same instance; other instances are separate files.
        termination_log_mount(&config, "u1", &container, 2).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "");
        container.termination_message_path = None;
        assert!(
            termination_log_mount(&config, "u1", &container, 3)
                .unwrap()
                .is_none()
        );
    }
}
