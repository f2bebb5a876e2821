//! volumeMounts → CRI mounts.

use super::subpath::{check_sub_path, open_sub_path, pin_sub_path};
use super::{PodVolumes, VolumeError};
use crate::cri::api;
use crate::kubelet::podconfig::spec::env::EnvList;
use crate::kubelet::podconfig::spec::expansion;
use k8s_openapi::api::core::v1::{Container, Pod, VolumeMount};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Extension point: may rewrite the host paths of a container's mounts or add mounts (e.g. a
/// plugin providing device or data directories). Hooks run in order after the built-in mounts.
pub trait MountHook: Send + Sync {
    fn rewrite(
        &self,
        pod: &Pod,
        container: &Container,
        mounts: &mut Vec<api::Mount>,
    ) -> Result<(), VolumeError>;
}

/// `subPathExpr` expanded like the kubelet's `ExpandContainerVolumeMounts`: every reference
/// must name a non-empty variable.
fn expand_sub_path_expr(expr: &str, env: &EnvList) -> Result<String, String> {
    let mut missing = BTreeSet::new();
    let expanded = expansion::expand(expr, |name| match env.get(name) {
        Some(value) if !value.is_empty() => Some(value.to_string()),
        _ => {
            missing.insert(name.to_string());
            Some(String::new())
        }
    });
    if missing.is_empty() {
        Ok(expanded)
    } else {
        let names: Vec<String> = missing.into_iter().collect();
        Err(format!("missing value for {}", names.join(", ")))
    }
}

fn propagation(mount: &VolumeMount, privileged: bool) -> Result<api::MountPropagation, String> {
    use api::MountPropagation as P;
    match mount.mount_propagation.as_deref() {
        None | Some("") | Some("None") => Ok(P::PropagationPrivate),
        Some("HostToContainer") => Ok(P::PropagationHostToContainer),
        Some("Bidirectional") if privileged => Ok(P::PropagationBidirectional),
        Some("Bidirectional") => Err(format!(
            "volumeMount {}: Bidirectional mount propagation is available only to privileged containers",
            mount.name
        )),
        Some(other) => Err(format!(
            "volumeMount {}: invalid mountPropagation {other:?}",
            mount.name
        )),
    }
}

impl PodVolumes {
    pub(super) fn build_mounts(
        &self,
        container: &Container,
        env: Option<&EnvList>,
    ) -> Result<Vec<api::Mount>, VolumeError> {
        let mount_err = |reason: String| VolumeError::Mount {
            container: container.name.clone(),
            reason,
        };
        let privileged = container
            .security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false);
        let mut mounts = Vec::new();
        for (index, m) in container.volume_mounts.iter().flatten().enumerate() {
            let volume = self
                .volumes
                .get(&m.name)
                .ok_or_else(|| VolumeError::UnknownVolume {
                    container: container.name.clone(),
                    volume: m.name.clone(),
                })?;
            let propagation = propagation(m, privileged).map_err(mount_err)?;
            let sub_path = match (m.sub_path.as_deref(), m.sub_path_expr.as_deref()) {
                (Some(s), _) if !s.is_empty() => Some(s.to_string()),
                (_, Some(expr)) if !expr.is_empty() => {
                    let env = env.ok_or_else(|| {
                        mount_err("subPathExpr needs the container environment".into())
                    })?;
                    let expanded = expand_sub_path_expr(expr, env).map_err(|reason| {
                        mount_err(format!(
                            "volumeMount {}: subPathExpr {expr:?}: {reason}",
                            m.name
                        ))
                    })?;
                    Some(expanded)
                }
                _ => None,
            };
            let host_path = match &sub_path {
                None => volume.host_path.clone(),
                Some(sub) => {
                    let sub_err = |source| VolumeError::SubPath {
                        container: container.name.clone(),
                        volume: m.name.clone(),
                        sub_path: sub.clone(),
                        source,
                    };
                    check_sub_path(sub).map_err(sub_err)?;
                    let mode = std::fs::metadata(&volume.host_path)
                        .map(|meta| meta.permissions().mode() & 0o7777)
                        .unwrap_or(0o755);
                    // Pinned: the runtime binds a mount of what was opened, not a path a
                    // container could swap meanwhile.
                    let opened = open_sub_path(&volume.host_path, sub, mode).map_err(sub_err)?;
                    let target = self
                        .subpaths_dir
                        .join(&m.name)
                        .join(&container.name)
                        .join(index.to_string());
                    pin_sub_path(&opened, &target).map_err(sub_err)?;
                    target
                }
            };
            let readonly = m.read_only.unwrap_or(false) || volume.read_only;
            let private = propagation == api::MountPropagation::PropagationPrivate;
            let recursive_read_only = match m.recursive_read_only.as_deref() {
                Some("Enabled") if readonly && private => true,
                Some("Enabled") => {
                    return Err(mount_err(format!(
                        "volumeMount {}: recursiveReadOnly Enabled needs readOnly and no mount propagation",
                        m.name
                    )));
                }
                Some("IfPossible") => readonly && private,
                _ => false,
            };
            mounts.push(api::Mount {
                container_path: m.mount_path.clone(),
                host_path: host_path.to_string_lossy().into_owned(),
                readonly,
                selinux_relabel: false,
                propagation: propagation as i32,
                recursive_read_only,
                ..Default::default()
            });
        }
        if let Some(storage) = &self.storage_dir {
            let taken = mounts
                .iter()
                .any(|m| Path::new(&m.container_path) == storage.as_path());
            if !taken {
                let path = storage.to_string_lossy().into_owned();
                mounts.push(api::Mount {
                    container_path: path.clone(),
                    host_path: path,
                    ..Default::default()
                });
            }
        }
        for hook in &self.hooks {
            hook.rewrite(&self.pod, container, &mut mounts)?;
        }
        Ok(mounts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_path_expr_needs_every_variable() {
        let mut env = EnvList::default();
        env.set("POD".into(), "web-0".into());
        env.set("EMPTY".into(), String::new());
        assert_eq!(
            expand_sub_path_expr("logs/$(POD)", &env).unwrap(),
            "logs/web-0"
        );
        assert_eq!(expand_sub_path_expr("$$(POD)", &env).unwrap(), "$(POD)");
        let err = expand_sub_path_expr("$(POD)/$(NOPE)/$(EMPTY)", &env).unwrap_err();
        assert_eq!(err, "missing value for EMPTY, NOPE");
    }
}
