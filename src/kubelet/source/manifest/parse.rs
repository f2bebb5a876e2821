//! One manifest file → the Pods, ConfigMaps and Secrets it defines (multi-document YAML or JSON),
//! with static-pod identity, API defaults and validation applied. Pure: the caller reads files.

use crate::kubelet::podconfig::spec::defaults::apply_pod_defaults;
use crate::kubelet::podconfig::store::object_key;
use crate::kubelet::podconfig::validate::validate_pod;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::Path;

/// Annotation telling where a pod came from (as the kubelet marks static pods).
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation holding the pod's static UID (as the kubelet marks static pods).
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";

/// What a valid manifest file defines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ManifestContent {
    pub pods: Vec<Pod>,
    pub config_maps: Vec<ConfigMap>,
    pub secrets: Vec<Secret>,
    /// Problems that do not stop the file from being used (e.g. unknown fields).
    pub warnings: Vec<String>,
}

/// The stable UID of a pod from `source` that has none: a hash of where it came from and its
/// name, so edits of the spec keep the pod's identity and an agent restart finds it again.
pub fn static_pod_uid(source: &Path, namespace: &str, name: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"file:");
    hasher.update(source.as_os_str().as_encoded_bytes());
    hasher.update(b"\0namespace:");
    hasher.update(namespace.as_bytes());
    hasher.update(b"\0name:");
    hasher.update(name.as_bytes());
    let hex = hex::encode(&hasher.finalize()[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

enum Kind {
    Pod,
    ConfigMap,
    Secret,
    List,
}

fn kind_of(value: &serde_yaml_ng::Value) -> Result<Kind, String> {
    let kind = value.get("kind").and_then(|k| k.as_str());
    let api_version = value.get("apiVersion").and_then(|k| k.as_str());
    match (api_version, kind) {
        (Some("v1"), Some("Pod")) => Ok(Kind::Pod),
        (Some("v1"), Some("ConfigMap")) => Ok(Kind::ConfigMap),
        (Some("v1"), Some("Secret")) => Ok(Kind::Secret),
        (Some("v1"), Some("List")) => Ok(Kind::List),
        (_, None) => Err("missing \"kind\"".to_string()),
        (None, Some(_)) => Err("missing \"apiVersion\"".to_string()),
        (Some(v), Some(k)) => Err(format!(
            "unsupported object {v}/{k} (expected v1 Pod, ConfigMap, Secret or List)"
        )),
    }
}

/// Parses `content` read from `source`. `Err` lists every problem (the file is then unusable).
pub fn parse_manifest(
    source: &Path,
    content: &[u8],
    node_name: Option<&str>,
) -> Result<ManifestContent, Vec<String>> {
    let text = std::str::from_utf8(content).map_err(|e| vec![format!("not UTF-8: {e}")])?;
    // Pass 1: syntax and kinds.
    let mut values = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = serde_yaml_ng::Value::deserialize(document).map_err(|e| vec![e.to_string()])?;
        values.push(value);
    }
    let rewritten: Vec<bool> = values.iter_mut().map(octal_modes).collect();
    // An empty file is most likely one being rewritten in place: refusing it keeps the last
    // valid version running instead of removing its pods for a moment.
    if values.iter().all(serde_yaml_ng::Value::is_null) {
        return Err(vec![
            "defines no objects (delete the file to remove what it defined)".to_string(),
        ]);
    }
    let mut out = ManifestContent::default();
    let mut errors = Vec::new();
    // Pass 2: typed, straight from the text so errors carry field paths and line numbers.
    let documents = serde_yaml_ng::Deserializer::from_str(text);
    for (index, (document, value)) in documents.zip(&values).enumerate() {
        if value.is_null() {
            continue;
        }
        let where_ = format!("document {}", index + 1);
        let kind = match kind_of(value) {
            Ok(kind) => kind,
            Err(e) => {
                errors.push(format!("{where_}: {e}"));
                continue;
            }
        };
        let added = match kind {
            // A document whose modes were rewritten is read from its value (errors then
            // carry no line numbers); the others straight from the text.
            Kind::Pod if rewritten[index] => {
                serde_yaml_ng::from_value(value.clone()).map(|p| out.pods.push(p))
            }
            Kind::Pod => Pod::deserialize(document).map(|p| out.pods.push(p)),
            Kind::ConfigMap => ConfigMap::deserialize(document).map(|c| out.config_maps.push(c)),
            Kind::Secret => Secret::deserialize(document).map(|s| out.secrets.push(s)),
            Kind::List => add_list_items(value, &mut out).map_err(serde::de::Error::custom),
        };
        match added {
            Ok(()) => out.warnings.extend(
                unknown_fields(value, &out)
                    .into_iter()
                    .map(|f| format!("{where_}: unknown field {f:?} ignored")),
            ),
            Err(e) => errors.push(format!("{where_}: {e}")),
        }
    }
    finish(source, node_name, &mut out, &mut errors);
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// Kubernetes reads manifests as YAML 1.1, where a plain `0644` is an octal number; YAML 1.2
/// (serde_yaml_ng) reads it as the string "0644". File modes (`mode`, `defaultMode`) are where
/// manifests write octal, so those strings become their octal value. True when one changed.
fn octal_modes(value: &mut serde_yaml_ng::Value) -> bool {
    use serde_yaml_ng::Value;
    match value {
        Value::Mapping(map) => {
            let mut changed = false;
            for (key, item) in map.iter_mut() {
                let is_mode = matches!(key.as_str(), Some("mode" | "defaultMode"));
                match item {
                    Value::String(text) if is_mode => {
                        let octal = text.len() > 1
                            && text.starts_with('0')
                            && text.bytes().all(|b| (b'0'..=b'7').contains(&b));
                        if let Some(mode) =
                            octal.then(|| i64::from_str_radix(text, 8).ok()).flatten()
                        {
                            *item = Value::Number(mode.into());
                            changed = true;
                        }
                    }
                    _ => changed |= octal_modes(item),
                }
            }
            changed
        }
        Value::Sequence(items) => {
            // Every item is visited: no short-circuit.
            let mut changed = false;
            for item in items {
                changed |= octal_modes(item);
            }
            changed
        }
        Value::Tagged(tagged) => octal_modes(&mut tagged.value),
        _ => false,
    }
}

fn add_list_items(list: &serde_yaml_ng::Value, out: &mut ManifestContent) -> Result<(), String> {
    let items = list.get("items").and_then(|i| i.as_sequence());
    for (i, item) in items.into_iter().flatten().enumerate() {
        let fail = |e: serde_yaml_ng::Error| format!("items[{i}]: {e}");
        match kind_of(item).map_err(|e| format!("items[{i}]: {e}"))? {
            Kind::Pod => out
                .pods
                .push(serde_yaml_ng::from_value(item.clone()).map_err(fail)?),
            Kind::ConfigMap => out
                .config_maps
                .push(serde_yaml_ng::from_value(item.clone()).map_err(fail)?),
            Kind::Secret => out
                .secrets
                .push(serde_yaml_ng::from_value(item.clone()).map_err(fail)?),
            Kind::List => return Err(format!("items[{i}]: nested lists are not supported")),
        }
    }
    Ok(())
}

/// Fields of the last object added that the typed model dropped (typos like `imagee`).
fn unknown_fields(value: &serde_yaml_ng::Value, out: &ManifestContent) -> Vec<String> {
    let typed = match value.get("kind").and_then(|k| k.as_str()) {
        Some("Pod") => out.pods.last().and_then(|p| serde_json::to_value(p).ok()),
        Some("ConfigMap") => out
            .config_maps
            .last()
            .and_then(|c| serde_json::to_value(c).ok()),
        Some("Secret") => out
            .secrets
            .last()
            .and_then(|s| serde_json::to_value(s).ok()),
        _ => None,
    };
    let (Some(typed), Ok(original)) = (typed, serde_json::to_value(value)) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    diff_keys(&original, &typed, String::new(), &mut found);
    found
}

fn diff_keys(
    original: &serde_json::Value,
    typed: &serde_json::Value,
    path: String,
    found: &mut Vec<String>,
) {
    use serde_json::Value;
    match (original, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match b.get(key) {
                    Some(typed_value) => diff_keys(value, typed_value, child, found),
                    None if !value.is_null() => found.push(child),
                    None => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff_keys(x, y, format!("{path}[{i}]"), found);
            }
        }
        _ => {}
    }
}

/// Static-pod identity, defaults, validation and duplicate checks.
fn finish(
    source: &Path,
    node_name: Option<&str>,
    out: &mut ManifestContent,
    errors: &mut Vec<String>,
) {
    let mut seen = BTreeSet::new();
    let mut valid_pods = Vec::new();
    for mut pod in std::mem::take(&mut out.pods) {
        apply_pod_defaults(&mut pod);
        let Some((namespace, name)) = object_key(&pod.metadata) else {
            errors.push("pod without metadata.name".to_string());
            continue;
        };
        let label = format!("pod {namespace}/{name}");
        if !seen.insert(("Pod", namespace.clone(), name.clone())) {
            errors.push(format!("{label}: defined more than once"));
            continue;
        }
        if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
            pod.metadata.uid = Some(static_pod_uid(source, &namespace, &name));
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let annotations = pod
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(CONFIG_SOURCE_ANNOTATION.to_string(), "file".to_string());
        annotations.insert(CONFIG_HASH_ANNOTATION.to_string(), uid);
        if let (Some(spec), Some(node)) = (pod.spec.as_mut(), node_name)
            && spec.node_name.as_deref().is_none_or(str::is_empty)
        {
            spec.node_name = Some(node.to_string());
        }
        match validate_pod(&pod) {
            Ok(()) => valid_pods.push(pod),
            Err(problems) => errors.extend(problems.into_iter().map(|p| format!("{label}: {p}"))),
        }
    }
    out.pods = valid_pods;
    for cm in &out.config_maps {
        check_object_key("ConfigMap", object_key(&cm.metadata), &mut seen, errors);
    }
    for secret in &out.secrets {
        check_object_key("Secret", object_key(&secret.metadata), &mut seen, errors);
    }
}

fn check_object_key(
    kind: &'static str,
    key: Option<(String, String)>,
    seen: &mut BTreeSet<(&'static str, String, String)>,
    errors: &mut Vec<String>,
) {
    match key {
        None => errors.push(format!("{kind} without metadata.name")),
        Some((namespace, name)) => {
            if !seen.insert((kind, namespace.clone(), name.clone())) {
                errors.push(format!("{kind} {namespace}/{name}: defined more than once"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ManifestContent, Vec<String>> {
        parse_manifest(Path::new("/m/pods.yaml"), text.as_bytes(), Some("node-a"))
    }

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

    #[test]
    fn multi_document_files() {
        let text = format!(
            "{POD}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: x}}\ndata: {{a: b}}\n---\n---\n\
             apiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\nstringData: {{k: v}}\n"
        );
        let content = parse(&text).expect("valid");
        assert_eq!(content.pods.len(), 1);
        assert_eq!(content.config_maps.len(), 1);
        assert_eq!(content.secrets.len(), 1);
        let pod = &content.pods[0];
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        let uid = static_pod_uid(Path::new("/m/pods.yaml"), "default", "web");
        assert_eq!(pod.metadata.uid.as_deref(), Some(uid.as_str()));
        assert_eq!(uid.len(), 36);
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(
            spec.restart_policy.as_deref(),
            Some("Always"),
            "defaults applied"
        );
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[CONFIG_SOURCE_ANNOTATION], "file");
        assert!(content.warnings.is_empty(), "{:?}", content.warnings);
    }

    #[test]
    fn uids_are_stable_and_distinct() {
        let a = static_pod_uid(Path::new("/m/a.yaml"), "default", "web");
        assert_eq!(a, static_pod_uid(Path::new("/m/a.yaml"), "default", "web"));
        assert_ne!(a, static_pod_uid(Path::new("/m/b.yaml"), "default", "web"));
        assert_ne!(a, static_pod_uid(Path::new("/m/a.yaml"), "other", "web"));
        assert_ne!(a, static_pod_uid(Path::new("/m/a.yaml"), "default", "web2"));
        // Explicit UIDs are kept.
        let text = POD.replace("name: web\n", "name: web\n  uid: my-uid\n");
        assert_eq!(
            parse(&text).unwrap().pods[0].metadata.uid.as_deref(),
            Some("my-uid")
        );
    }

    #[test]
    fn json_and_lists() {
        let json = r#"{"apiVersion":"v1","kind":"List","items":[
            {"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x"}]}},
            {"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b"}}]}"#;
        let content = parse(json).expect("valid");
        assert_eq!((content.pods.len(), content.config_maps.len()), (1, 1));
    }

    #[test]
    fn errors_name_the_document_and_field() {
        let cases: Vec<(String, &str)> = vec![
            ("a: [b\n".into(), "line"),
            ("kind: Pod\n".into(), "document 1: missing \"apiVersion\""),
            (
                "apiVersion: apps/v1\nkind: Deployment\n".into(),
                "unsupported object apps/v1/Deployment",
            ),
            (
                format!("{POD}---\nfoo: bar\n"),
                "document 2: missing \"kind\"",
            ),
            (
                POD.replace(
                    "image: busybox",
                    "image: busybox\n    ports: [{containerPort: http}]",
                ),
                "containerPort",
            ),
            (
                POD.replace("name: c", "name: C"),
                "pod default/web: spec.containers[0].name",
            ),
            (
                format!("{POD}---\n{POD}"),
                "pod default/web: defined more than once",
            ),
            (
                POD.replace("  name: web\n", ""),
                "pod without metadata.name",
            ),
        ];
        for (text, expected) in cases {
            let errors = parse(&text).expect_err(expected);
            assert!(
                errors.iter().any(|e| e.contains(expected)),
                "{text:?}: expected {expected:?} in {errors:?}"
            );
        }
        assert!(parse_manifest(Path::new("x"), &[0xff, 0xfe], None).is_err());
    }

    #[test]
    fn unknown_fields_are_warnings() {
        let text = POD.replace("image: busybox", "image: busybox\n    imagee: typo");
        let content = parse(&text).expect("still valid");
        assert_eq!(
            content.warnings,
            vec!["document 1: unknown field \"spec.containers[0].imagee\" ignored".to_string()]
        );
    }

    #[test]
    fn octal_file_modes_as_kubernetes_reads_them() {
        let volumes = "  volumes:\n  - name: v\n    configMap:\n      name: c\n      defaultMode: MODE\n      items: [{key: k, path: p, mode: ITEM}]\n";
        // (defaultMode, item mode) as written → as read.
        let cases = [
            ("0644", "0400", Some((0o644, 0o400))),
            ("420", "256", Some((420, 256))),
            ("0755", "0", Some((0o755, 0))),
            // YAML 1.2's own octal form also reads (Kubernetes would refuse it).
            ("0o644", "0400", Some((0o644, 0o400))),
            ("0800", "0400", None),
        ];
        for (default_mode, item_mode, want) in cases {
            let text = format!(
                "{POD}{}",
                volumes
                    .replace("MODE", default_mode)
                    .replace("ITEM", item_mode)
            );
            let got = parse(&text).ok().map(|c| {
                let spec = c.pods[0].spec.clone().unwrap();
                let cm = spec.volumes.unwrap()[0].config_map.clone().unwrap();
                (cm.default_mode.unwrap(), cm.items.unwrap()[0].mode.unwrap())
            });
            assert_eq!(got, want, "defaultMode {default_mode}, mode {item_mode}");
        }
        // Other strings of digits stay strings.
        let text = POD.replace(
            "image: busybox",
            "image: busybox\n    env: [{name: mode, value: \"0644\"}]",
        );
        let env = parse(&text).unwrap().pods[0]
            .spec
            .clone()
            .unwrap()
            .containers[0]
            .env
            .clone();
        assert_eq!(env.unwrap()[0].value.as_deref(), Some("0644"));
    }

    #[test]
    fn empty_files_are_refused() {
        for text in ["", "\n", "---\n# just a comment\n"] {
            let errors = parse(text).expect_err(text);
            assert!(errors[0].contains("defines no objects"), "{errors:?}");
        }
    }
}
