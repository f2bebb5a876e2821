//! The files of API-data volumes (configMap, secret, downwardAPI, projected), computed from the
//! pod and the known objects exactly as the kubelet's `MakePayload`/`CollectData` do.

use super::VolumeError;
use super::atomic_writer::{FileProjection, Payload};
use crate::kubelet::podconfig::ObjectSource;
use crate::kubelet::podconfig::objects::{config_map_entries, secret_entries};
use crate::kubelet::podconfig::spec::defaults::DEFAULT_VOLUME_FILE_MODE;
use crate::kubelet::podconfig::spec::fieldpath::{self, NodeResources};
use k8s_openapi::api::core::v1::{
    DownwardAPIVolumeFile, KeyToPath, Pod, ServiceAccountTokenProjection, Volume,
};
use std::collections::BTreeMap;

/// What a payload is computed from.
pub struct PayloadContext<'a> {
    pub pod: &'a Pod,
    pub namespace: &'a str,
    pub objects: &'a dyn ObjectSource,
    pub node: &'a NodeResources,
}

fn file_mode(mode: Option<i32>, default_mode: Option<i32>) -> u32 {
    let mode = mode.or(default_mode).unwrap_or(DEFAULT_VOLUME_FILE_MODE);
    u32::try_from(mode).unwrap_or(0o644) & 0o777
}

/// A referenced ConfigMap or Secret.
struct KeySource<'a> {
    volume: &'a str,
    kind: &'static str,
    name: &'a str,
    optional: bool,
}

impl KeySource<'_> {
    /// Files for `entries` (None: the object does not exist), all keys unless `items` pick some.
    fn payload(
        &self,
        ctx: &PayloadContext<'_>,
        entries: Option<BTreeMap<String, Vec<u8>>>,
        items: &Option<Vec<KeyToPath>>,
        default_mode: Option<i32>,
    ) -> Result<Payload, VolumeError> {
        let Some(entries) = entries else {
            if self.optional {
                return Ok(Payload::new());
            }
            return Err(VolumeError::MissingObject {
                volume: self.volume.to_string(),
                kind: self.kind,
                namespace: ctx.namespace.to_string(),
                name: self.name.to_string(),
            });
        };
        let mut payload = Payload::new();
        match items.as_deref() {
            None | Some([]) => {
                for (key, data) in entries {
                    let mode = file_mode(None, default_mode);
                    payload.insert(key, FileProjection { data, mode });
                }
            }
            Some(items) => {
                for item in items {
                    let Some(data) = entries.get(&item.key) else {
                        if self.optional {
                            continue;
                        }
                        return Err(VolumeError::MissingKey {
                            volume: self.volume.to_string(),
                            kind: self.kind,
                            name: self.name.to_string(),
                            key: item.key.clone(),
                        });
                    };
                    let mode = file_mode(item.mode, default_mode);
                    let file = FileProjection {
                        data: data.clone(),
                        mode,
                    };
                    payload.insert(item.path.clone(), file);
                }
            }
        }
        Ok(payload)
    }
}

/// The payload of a configMap (`kind` "configMap") or secret (`kind` "secret") reference.
fn object_payload(
    ctx: &PayloadContext<'_>,
    volume: &str,
    kind: &'static str,
    name: &str,
    optional: Option<bool>,
    items: &Option<Vec<KeyToPath>>,
    default_mode: Option<i32>,
) -> Result<Payload, VolumeError> {
    let source = KeySource {
        volume,
        kind,
        name,
        optional: optional.unwrap_or(false),
    };
    let entries = if kind == "secret" {
        let secret = ctx.objects.secret(ctx.namespace, name);
        secret.map(|s| secret_entries(&s))
    } else {
        let cm = ctx.objects.config_map(ctx.namespace, name);
        cm.map(|cm| config_map_entries(&cm))
    };
    source.payload(ctx, entries, items, default_mode)
}

fn downward_payload(
    ctx: &PayloadContext<'_>,
    volume: &str,
    items: &Option<Vec<DownwardAPIVolumeFile>>,
    default_mode: Option<i32>,
) -> Result<Payload, VolumeError> {
    let mut payload = Payload::new();
    for item in items.iter().flatten() {
        let field_err = |source| VolumeError::Field {
            volume: volume.to_string(),
            source,
        };
        let data = if let Some(field) = &item.field_ref {
            fieldpath::metadata_field(ctx.pod, &field.field_path).map_err(field_err)?
        } else if let Some(resource) = &item.resource_field_ref {
            fieldpath::resource_field(ctx.pod, "", resource, ctx.node).map_err(field_err)?
        } else {
            String::new()
        };
        let mode = file_mode(item.mode, default_mode);
        let path = item.path.trim_start_matches("./").to_string();
        payload.insert(
            path,
            FileProjection {
                data: data.into_bytes(),
                mode,
            },
        );
    }
    Ok(payload)
}

/// The token file of a projected `serviceAccountToken` source (issued through the API server's
/// TokenRequest; without one the volume cannot be set up).
fn token_payload(
    ctx: &PayloadContext<'_>,
    volume: &str,
    source: &ServiceAccountTokenProjection,
    default_mode: Option<i32>,
) -> Result<Payload, VolumeError> {
    let service_account = ctx
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    let token = ctx
        .objects
        .service_account_token(ctx.pod, source)
        .ok_or_else(|| VolumeError::NoToken {
            volume: volume.to_string(),
            service_account: format!("{}/{service_account}", ctx.namespace),
        })?;
    let mut payload = Payload::new();
    let file = FileProjection {
        data: token.into_bytes(),
        mode: file_mode(None, default_mode),
    };
    payload.insert(source.path.clone(), file);
    Ok(payload)
}

/// The payload of an API-data volume; `None` for other volume types.
pub fn volume_payload(
    ctx: &PayloadContext<'_>,
    volume: &Volume,
) -> Option<Result<Payload, VolumeError>> {
    let name = volume.name.as_str();
    if let Some(cm) = &volume.config_map {
        return Some(object_payload(
            ctx,
            name,
            "configMap",
            &cm.name,
            cm.optional,
            &cm.items,
            cm.default_mode,
        ));
    }
    if let Some(secret) = &volume.secret {
        let secret_name = secret.secret_name.as_deref().unwrap_or("");
        return Some(object_payload(
            ctx,
            name,
            "secret",
            secret_name,
            secret.optional,
            &secret.items,
            secret.default_mode,
        ));
    }
    if let Some(downward) = &volume.downward_api {
        return Some(downward_payload(
            ctx,
            name,
            &downward.items,
            downward.default_mode,
        ));
    }
    let projected = volume.projected.as_ref()?;
    let mode = projected.default_mode;
    let mut payload = Payload::new();
    for source in projected.sources.iter().flatten() {
        let part = if let Some(cm) = &source.config_map {
            object_payload(
                ctx,
                name,
                "configMap",
                &cm.name,
                cm.optional,
                &cm.items,
                mode,
            )
        } else if let Some(secret) = &source.secret {
            object_payload(
                ctx,
                name,
                "secret",
                &secret.name,
                secret.optional,
                &secret.items,
                mode,
            )
        } else if let Some(downward) = &source.downward_api {
            downward_payload(ctx, name, &downward.items, mode)
        } else if let Some(token) = &source.service_account_token {
            token_payload(ctx, name, token, mode)
        } else {
            Err(VolumeError::Unsupported {
                volume: name.to_string(),
                what: "this projected volume source",
            })
        };
        match part {
            Ok(part) => payload.extend(part),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(payload))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::podconfig::test_objects::Objects;
    use serde_json::json;

    fn pod(volumes: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-1", "labels": {"b": "2", "a": "1"}},
            "spec": {"containers": [{"name": "main", "image": "x",
                                     "resources": {"limits": {"memory": "32Mi"}}}],
                     "volumes": volumes}
        }))
        .unwrap()
    }

    /// `path → (content, mode)` of each volume's payload, or the error text.
    fn payload_of(volumes: serde_json::Value) -> Result<Vec<(String, String, u32)>, String> {
        let pod = pod(volumes);
        let mut objects = Objects::default();
        objects.2.insert("token".into(), "eyJ.token".into());
        objects.add_config_map("ns", "cfg", &[("app.conf", "port=80"), ("extra", "e")]);
        objects.add_secret("ns", "sec", &[("password", "hunter2")]);
        let node = NodeResources {
            cpu_millis: 2000,
            memory_bytes: 1 << 30,
            ephemeral_storage_bytes: 1 << 30,
        };
        let ctx = PayloadContext {
            pod: &pod,
            namespace: "ns",
            objects: &objects,
            node: &node,
        };
        let volume = &pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
        let payload = volume_payload(&ctx, volume).expect("an API-data volume");
        payload
            .map(|p| {
                p.into_iter()
                    .map(|(k, v)| (k, String::from_utf8(v.data).unwrap(), v.mode))
                    .collect()
            })
            .map_err(|e| e.to_string())
    }

    fn files(items: &[(&str, &str, u32)]) -> Vec<(String, String, u32)> {
        items
            .iter()
            .map(|(p, c, m)| (p.to_string(), c.to_string(), *m))
            .collect()
    }

    #[test]
    fn payload_table() {
        let cases = vec![
            (
                json!([{"name": "v", "configMap": {"name": "cfg"}}]),
                files(&[("app.conf", "port=80", 0o644), ("extra", "e", 0o644)]),
            ),
            (
                json!([{"name": "v", "configMap": {"name": "cfg", "defaultMode": 0o400,
                         "items": [{"key": "app.conf", "path": "etc/app.conf", "mode": 0o600},
                                   {"key": "extra", "path": "x"}]}}]),
                files(&[("etc/app.conf", "port=80", 0o600), ("x", "e", 0o400)]),
            ),
            (
                json!([{"name": "v", "configMap": {"name": "cfg", "optional": true,
                         "items": [{"key": "missing", "path": "m"}]}}]),
                files(&[]),
            ),
            (
                json!([{"name": "v", "configMap": {"name": "nope", "optional": true}}]),
                files(&[]),
            ),
            (
                json!([{"name": "v", "secret": {"secretName": "sec", "defaultMode": 0o440}}]),
                files(&[("password", "hunter2", 0o440)]),
            ),
            (
                json!([{"name": "v", "downwardAPI": {"items": [
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "./mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "1Mi"}},
                    {"path": "cpu", "mode": 0o600, "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu"}}]}}]),
                files(&[
                    ("cpu", "2", 0o600),
                    ("labels", "a=\"1\"\nb=\"2\"", 0o644),
                    ("mem", "32", 0o644),
                    ("name", "web", 0o644),
                ]),
            ),
            (
                json!([{"name": "v", "projected": {"defaultMode": 0o444, "sources": [
                    {"configMap": {"name": "cfg", "items": [{"key": "extra", "path": "cfg/extra"}]}},
                    {"secret": {"name": "sec"}},
                    {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}]),
                files(&[
                    ("cfg/extra", "e", 0o444),
                    ("ns", "ns", 0o444),
                    ("password", "hunter2", 0o444),
                ]),
            ),
            (
                json!([{"name": "v", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                    {"configMap": {"name": "cfg", "items": [{"key": "extra", "path": "ca.crt"}]}}]}}]),
                files(&[("ca.crt", "e", 0o644), ("token", "eyJ.token", 0o644)]),
            ),
        ];
        for (volumes, expected) in cases {
            assert_eq!(payload_of(volumes.clone()), Ok(expected), "{volumes}");
        }
    }

    #[test]
    fn payload_errors() {
        let cases = [
            (
                json!([{"name": "v", "configMap": {"name": "nope"}}]),
                "configMap ns/nope not found",
            ),
            (
                json!([{"name": "v", "secret": {"secretName": "nope"}}]),
                "secret ns/nope not found",
            ),
            (
                json!([{"name": "v", "configMap": {"name": "cfg", "items": [{"key": "zz", "path": "z"}]}}]),
                "key \"zz\"",
            ),
            (
                json!([{"name": "v", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "spec.nodeName"}}]}}]),
                "unsupported fieldPath",
            ),
            (
                json!([{"name": "v", "projected": {"sources": [{"serviceAccountToken": {"path": "other"}}]}}]),
                "no serviceAccountToken issued for service account ns/default",
            ),
        ];
        for (volumes, expected) in cases {
            let err = payload_of(volumes.clone()).expect_err(expected);
            assert!(
                err.contains(expected),
                "{volumes}: {err:?} lacks {expected:?}"
            );
        }
    }
}
