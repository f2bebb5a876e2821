//! Volume validation.

use super::{Errors, PodSourceAbilities};
use crate::kubelet::podconfig::spec::defaults::volume_source_count;
use crate::kubelet::podconfig::spec::names::check_dns1123_label;
use crate::kubelet::podconfig::spec::quantity::Quantity;
use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Volume};
use std::collections::BTreeSet;

/// Volume sources this agent implements.
const SUPPORTED_VOLUMES: &str = "hostPath, emptyDir, configMap, secret, downwardAPI, projected";

pub(super) fn validate_volumes(
    volumes: &[Volume],
    abilities: PodSourceAbilities,
    errs: &mut Errors,
) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}]");
        errs.check(format!("{path}.name"), check_dns1123_label(&v.name));
        if !names.insert(v.name.clone()) {
            errs.add(
                format!("{path}.name"),
                format!("duplicate volume name {:?}", v.name),
            );
        }
        match volume_source_count(v) {
            1 => {}
            0 => errs.add(&path, "must specify a volume source"),
            _ => errs.add(&path, "may not specify more than one volume source"),
        }
        let supported = v.host_path.is_some()
            || v.empty_dir.is_some()
            || v.config_map.is_some()
            || v.secret.is_some()
            || v.downward_api.is_some()
            || v.projected.is_some();
        if !supported {
            errs.add(
                &path,
                format!(
                    "volume {:?}: unsupported volume type (supported: {SUPPORTED_VOLUMES})",
                    v.name
                ),
            );
        }
        if let Some(host) = &v.host_path {
            if !host.path.starts_with('/') {
                errs.add(format!("{path}.hostPath.path"), "must be an absolute path");
            }
            errs.one_of(
                &format!("{path}.hostPath.type"),
                host.type_.as_deref(),
                &[
                    "",
                    "DirectoryOrCreate",
                    "Directory",
                    "FileOrCreate",
                    "File",
                    "Socket",
                    "CharDevice",
                    "BlockDevice",
                ],
            );
        }
        if let Some(empty) = &v.empty_dir {
            errs.one_of(
                &format!("{path}.emptyDir.medium"),
                empty.medium.as_deref(),
                &["", "Memory"],
            );
            if let Err(e) = Quantity::parse_opt(empty.size_limit.as_ref()) {
                errs.add(format!("{path}.emptyDir.sizeLimit"), e.to_string());
            }
        }
        // (item path, mode) of API-data volumes; default modes have no path.
        let mut items: Vec<Item> = Vec::new();
        if let Some(cm) = &v.config_map {
            items.extend(key_items(&cm.items));
            items.push((None, cm.default_mode));
        }
        if let Some(secret) = &v.secret {
            if secret.secret_name.as_deref().is_none_or(str::is_empty) {
                errs.add(format!("{path}.secret.secretName"), "required");
            }
            items.extend(key_items(&secret.items));
            items.push((None, secret.default_mode));
        }
        if let Some(downward) = &v.downward_api {
            items.extend(file_items(&downward.items));
            items.push((None, downward.default_mode));
        }
        if let Some(projected) = &v.projected {
            items.push((None, projected.default_mode));
            for source in projected.sources.iter().flatten() {
                if let Some(cm) = &source.config_map {
                    items.extend(key_items(&cm.items));
                }
                if let Some(secret) = &source.secret {
                    items.extend(key_items(&secret.items));
                }
                if let Some(downward) = &source.downward_api {
                    items.extend(file_items(&downward.items));
                }
                if source.service_account_token.is_some() && !abilities.service_account_tokens {
                    errs.add(&path, "projected serviceAccountToken is not supported (no API server issues tokens)");
                }
                if source.cluster_trust_bundle.is_some() || source.pod_certificate.is_some() {
                    errs.add(
                        &path,
                        "projected clusterTrustBundle/podCertificate sources are not supported",
                    );
                }
            }
        }
        for (item, mode) in items {
            // `..`-prefixed names are the atomic writer's own.
            let result = item.map(|item| {
                check_relative_path(item).and_then(|()| match item.starts_with("..") {
                    true => Err("must not start with '..'".to_string()),
                    false => Ok(()),
                })
            });
            if let Some(Err(e)) = result {
                errs.add(
                    &path,
                    format!("item path {:?} {e}", item.unwrap_or_default()),
                );
            }
            if mode.is_some_and(|m| !(0..=0o777).contains(&m)) {
                errs.add(
                    &path,
                    format!("mode {:o} must be between 0 and 0777", mode.unwrap_or(0)),
                );
            }
        }
    }
    names
}

type Item<'a> = (Option<&'a str>, Option<i32>);

fn key_items(list: &Option<Vec<KeyToPath>>) -> Vec<Item<'_>> {
    let items = list.iter().flatten();
    items.map(|i| (Some(i.path.as_str()), i.mode)).collect()
}

fn file_items(list: &Option<Vec<DownwardAPIVolumeFile>>) -> Vec<Item<'_>> {
    let items = list.iter().flatten();
    items.map(|i| (Some(i.path.as_str()), i.mode)).collect()
}

/// A path that stays below its base: relative, no `..` component, not empty.
pub fn check_relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("must not be empty".into());
    }
    if path.starts_with('/') {
        return Err("must be a relative path".into());
    }
    if path.split('/').any(|part| part == "..") {
        return Err("must not contain '..'".into());
    }
    Ok(())
}
