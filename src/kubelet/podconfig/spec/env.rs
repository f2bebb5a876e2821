//! Container environment as the kubelet builds it (`makeEnvironmentVariables`): `envFrom` sources
//! first, then `env` in order, each value `$(VAR)`-expanded against what is defined so far;
//! command and args are then expanded against the final environment.

use super::expansion;
use super::fieldpath::{self, FieldError, NodeResources, PodRuntimeInfo};
use super::names::is_env_var_name;
use super::service_env::service_env;
use crate::kubelet::podconfig::ObjectSource;
use crate::kubelet::podconfig::objects::secret_entries;
use k8s_openapi::api::core::v1::{Container, EnvVarSource, Pod};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("env: {kind} {namespace}/{name} not found")]
    MissingObject {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("env: couldn't find key {key} in {kind} {namespace}/{name}")]
    MissingKey {
        kind: &'static str,
        namespace: String,
        name: String,
        key: String,
    },
    #[error("env {var}: {source}")]
    Field { var: String, source: FieldError },
    #[error("env {0}: fileKeyRef is not supported")]
    FileKeyRef(String),
}

/// Everything the environment of one container depends on.
pub struct EnvContext<'a> {
    pub pod: &'a Pod,
    pub container: &'a Container,
    pub objects: &'a dyn ObjectSource,
    pub info: &'a PodRuntimeInfo,
    pub node: &'a NodeResources,
}

/// An environment in definition order; redefining a name replaces its value in place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvList {
    vars: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl EnvList {
    pub fn set(&mut self, name: String, value: String) {
        match self.index.get(&name) {
            Some(&i) => self.vars[i].1 = value,
            None => {
                self.index.insert(name.clone(), self.vars.len());
                self.vars.push((name, value));
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.vars[i].1.as_str())
    }

    pub fn vars(&self) -> &[(String, String)] {
        &self.vars
    }

    /// `$(VAR)` expansion against this environment.
    pub fn expand(&self, input: &str) -> String {
        expansion::expand(input, |name| self.get(name).map(str::to_string))
    }
}

/// Builds the environment of `ctx.container`.
pub fn container_env(ctx: &EnvContext<'_>) -> Result<EnvList, EnvError> {
    let namespace = ctx.pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut env = EnvList::default();
    // Service variables first: `$(VAR)` may refer to them, and the container's own win.
    let links = ctx.pod.spec.as_ref().and_then(|s| s.enable_service_links);
    let mut services = ctx.objects.services(namespace);
    if namespace != "default" {
        services.extend(ctx.objects.services("default"));
    }
    for (name, value) in service_env(namespace, links.unwrap_or(true), &services) {
        env.set(name, value);
    }
    for source in ctx.container.env_from.iter().flatten() {
        let prefix = source.prefix.as_deref().unwrap_or("");
        let (kind, name, optional, entries) = if let Some(cm_ref) = &source.config_map_ref {
            let entries = ctx
                .objects
                .config_map(namespace, &cm_ref.name)
                .map(|cm| string_entries(cm.data));
            ("configMap", &cm_ref.name, cm_ref.optional, entries)
        } else if let Some(secret_ref) = &source.secret_ref {
            let entries = ctx
                .objects
                .secret(namespace, &secret_ref.name)
                .map(|s| secret_entries(&s));
            ("secret", &secret_ref.name, secret_ref.optional, entries)
        } else {
            continue;
        };
        let entries = match entries {
            Some(entries) => entries,
            None if optional.unwrap_or(false) => continue,
            None => {
                return Err(EnvError::MissingObject {
                    kind,
                    namespace: namespace.to_string(),
                    name: name.clone(),
                });
            }
        };
        let mut skipped = Vec::new();
        for (key, value) in entries {
            let var = format!("{prefix}{key}");
            if !is_env_var_name(&var) {
                skipped.push(var);
                continue;
            }
            env.set(var, String::from_utf8_lossy(&value).into_owned());
        }
        if !skipped.is_empty() {
            tracing::warn!(
                container = %ctx.container.name,
                "keys {skipped:?} from envFrom {kind} {namespace}/{name} were skipped: invalid environment variable names"
            );
        }
    }
    for var in ctx.container.env.iter().flatten() {
        let literal = var.value.as_deref().unwrap_or("");
        let value = if !literal.is_empty() {
            env.expand(literal)
        } else if let Some(source) = &var.value_from {
            match value_from(ctx, namespace, &var.name, source)? {
                Some(value) => value,
                None => continue, // optional reference that does not resolve
            }
        } else {
            String::new()
        };
        env.set(var.name.clone(), value);
    }
    Ok(env)
}

fn string_entries(data: Option<BTreeMap<String, String>>) -> BTreeMap<String, Vec<u8>> {
    data.unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect()
}

/// One key of a ConfigMap or Secret referenced by `valueFrom`.
struct KeyRef<'a> {
    kind: &'static str,
    namespace: &'a str,
    name: &'a str,
    key: &'a str,
}

impl KeyRef<'_> {
    /// The value, `None` when an optional reference does not resolve.
    fn resolve(
        &self,
        optional: bool,
        entries: Option<BTreeMap<String, Vec<u8>>>,
    ) -> Result<Option<String>, EnvError> {
        let Some(mut entries) = entries else {
            return if optional {
                Ok(None)
            } else {
                Err(EnvError::MissingObject {
                    kind: self.kind,
                    namespace: self.namespace.to_string(),
                    name: self.name.to_string(),
                })
            };
        };
        match entries.remove(self.key) {
            Some(value) => Ok(Some(String::from_utf8_lossy(&value).into_owned())),
            None if optional => Ok(None),
            None => Err(EnvError::MissingKey {
                kind: self.kind,
                namespace: self.namespace.to_string(),
                name: self.name.to_string(),
                key: self.key.to_string(),
            }),
        }
    }
}

fn value_from(
    ctx: &EnvContext<'_>,
    namespace: &str,
    var: &str,
    source: &EnvVarSource,
) -> Result<Option<String>, EnvError> {
    let field_err = |source| EnvError::Field {
        var: var.to_string(),
        source,
    };
    if let Some(field) = &source.field_ref {
        return fieldpath::env_field(ctx.pod, &field.field_path, ctx.info)
            .map(Some)
            .map_err(field_err);
    }
    if let Some(resource) = &source.resource_field_ref {
        return fieldpath::resource_field(ctx.pod, &ctx.container.name, resource, ctx.node)
            .map(Some)
            .map_err(field_err);
    }
    if let Some(key_ref) = &source.config_map_key_ref {
        // env only takes a ConfigMap's `data`, not `binaryData`
        let entries = ctx
            .objects
            .config_map(namespace, &key_ref.name)
            .map(|cm| string_entries(cm.data));
        let wanted = KeyRef {
            kind: "configMap",
            namespace,
            name: &key_ref.name,
            key: &key_ref.key,
        };
        return wanted.resolve(key_ref.optional.unwrap_or(false), entries);
    }
    if let Some(key_ref) = &source.secret_key_ref {
        let entries = ctx
            .objects
            .secret(namespace, &key_ref.name)
            .map(|s| secret_entries(&s));
        let wanted = KeyRef {
            kind: "secret",
            namespace,
            name: &key_ref.name,
            key: &key_ref.key,
        };
        return wanted.resolve(key_ref.optional.unwrap_or(false), entries);
    }
    if source.file_key_ref.is_some() {
        return Err(EnvError::FileKeyRef(var.to_string()));
    }
    Ok(Some(String::new()))
}

/// Command and args with `$(VAR)` references expanded against the container's environment.
pub fn expand_command_and_args(container: &Container, env: &EnvList) -> (Vec<String>, Vec<String>) {
    let expand_all = |items: &Option<Vec<String>>| -> Vec<String> {
        items.iter().flatten().map(|s| env.expand(s)).collect()
    };
    (expand_all(&container.command), expand_all(&container.args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::podconfig::test_objects::Objects;

    fn pod(container: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-1", "labels": {"app": "web"}},
            "spec": {"containers": [container]}
        }))
        .expect("valid pod")
    }

    fn objects() -> Objects {
        let mut objects = Objects::default();
        objects.add_config_map(
            "ns",
            "cfg",
            &[("A", "from-cm"), ("B", "b"), ("bad=key", "x")],
        );
        objects.add_secret("ns", "sec", &[("PASSWORD", "s3cret"), ("A", "from-secret")]);
        objects
    }

    fn env_of(container: serde_json::Value) -> Result<Vec<(String, String)>, EnvError> {
        env_with(pod(container), &objects())
    }

    fn env_with(pod: Pod, objects: &Objects) -> Result<Vec<(String, String)>, EnvError> {
        let info = PodRuntimeInfo {
            node_name: "node-1".into(),
            host_ips: vec!["192.168.1.2".into()],
            pod_ips: vec!["10.0.0.7".into()],
        };
        let node = NodeResources {
            cpu_millis: 2000,
            memory_bytes: 1 << 30,
            ephemeral_storage_bytes: 1 << 40,
        };
        let ctx = EnvContext {
            pod: &pod,
            container: &pod.spec.as_ref().unwrap().containers[0],
            objects,
            info: &info,
            node: &node,
        };
        container_env(&ctx).map(|e| e.vars().to_vec())
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn env_table() {
        use serde_json::json;
        type Case = (&'static str, serde_json::Value, Vec<(String, String)>);
        let cases: Vec<Case> = vec![
            (
                "literal values expand earlier vars; unknown refs stay",
                json!({"name": "c", "env": [
                    {"name": "X", "value": "x"},
                    {"name": "Y", "value": "$(X)-$(NOPE)-$$(X)"},
                    {"name": "Z", "value": "$(Z)"}]}),
                pairs(&[("X", "x"), ("Y", "x-$(NOPE)-$(X)"), ("Z", "$(Z)")]),
            ),
            (
                "envFrom first, prefixed, invalid keys skipped; env overrides in place",
                json!({"name": "c",
                    "envFrom": [{"configMapRef": {"name": "cfg"}},
                                {"secretRef": {"name": "sec"}, "prefix": "S_"}],
                    "env": [{"name": "A", "value": "$(S_PASSWORD)"}]}),
                pairs(&[
                    ("A", "s3cret"),
                    ("B", "b"),
                    ("S_A", "from-secret"),
                    ("S_PASSWORD", "s3cret"),
                ]),
            ),
            (
                "optional missing sources are skipped",
                json!({"name": "c",
                    "envFrom": [{"configMapRef": {"name": "nope", "optional": true}}],
                    "env": [
                        {"name": "K1", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "zz", "optional": true}}},
                        {"name": "K2", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "zz", "optional": true}}},
                        {"name": "K3", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "PASSWORD"}}},
                        {"name": "K4", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "B"}}}]}),
                pairs(&[("K3", "s3cret"), ("K4", "b")]),
            ),
            (
                "field refs",
                json!({"name": "c", "env": [
                    {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                    {"name": "URL", "value": "http://$(IP):80/$(N)"}]}),
                pairs(&[
                    ("N", "web"),
                    ("NS", "ns"),
                    ("UID", "u-1"),
                    ("APP", "web"),
                    ("NODE", "node-1"),
                    ("IP", "10.0.0.7"),
                    ("HOST", "192.168.1.2"),
                    ("URL", "http://10.0.0.7:80/web"),
                ]),
            ),
            (
                "resource refs default to the node and use the divisor",
                json!({"name": "c", "resources": {"limits": {"memory": "64Mi"}}, "env": [
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}]}),
                pairs(&[("CPU", "2"), ("MEM", "64")]),
            ),
            (
                "empty value without valueFrom is empty",
                json!({"name": "c", "env": [{"name": "E"}, {"name": "F", "value": ""}]}),
                pairs(&[("E", ""), ("F", "")]),
            ),
        ];
        for (what, container, expected) in cases {
            assert_eq!(env_of(container).expect(what), expected, "{what}");
        }
    }

    #[test]
    fn service_variables_come_first_and_the_container_env_wins() {
        let mut objects = objects();
        for (namespace, name, ip) in [
            ("default", "kubernetes", "10.0.0.1"),
            ("ns", "db", "10.0.0.5"),
        ] {
            objects.1.push(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "namespace": namespace},
                    "spec": {"clusterIP": ip, "ports": [{"port": 443}]}
                }))
                .unwrap(),
            );
        }
        let container = serde_json::json!({"name": "c", "env": [
            {"name": "DB_SERVICE_PORT", "value": "5432"},
            {"name": "URL", "value": "https://$(KUBERNETES_SERVICE_HOST):$(DB_SERVICE_PORT)"}]});
        let env = env_with(pod(container.clone()), &objects).unwrap();
        let get = |env: &[(String, String)], k: &str| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        assert_eq!(env[0], ("DB_SERVICE_HOST".into(), "10.0.0.5".into()));
        assert_eq!(get(&env, "DB_SERVICE_PORT").as_deref(), Some("5432"));
        assert_eq!(
            get(&env, "KUBERNETES_PORT").as_deref(),
            Some("tcp://10.0.0.1:443")
        );
        assert_eq!(get(&env, "URL").as_deref(), Some("https://10.0.0.1:5432"));
        // enableServiceLinks: false keeps the master service only.
        let mut no_links = pod(container);
        no_links.spec.as_mut().unwrap().enable_service_links = Some(false);
        let env = env_with(no_links, &objects).unwrap();
        assert_eq!(get(&env, "DB_SERVICE_HOST"), None);
        assert_eq!(
            get(&env, "KUBERNETES_SERVICE_HOST").as_deref(),
            Some("10.0.0.1")
        );
    }

    #[test]
    fn missing_required_references_fail_with_names() {
        use serde_json::json;
        let cases = [
            (
                json!({"name": "c", "envFrom": [{"configMapRef": {"name": "nope"}}]}),
                "configMap ns/nope not found",
            ),
            (
                json!({"name": "c", "envFrom": [{"secretRef": {"name": "nope"}}]}),
                "secret ns/nope not found",
            ),
            (
                json!({"name": "c", "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "zz"}}}]}),
                "couldn't find key zz in configMap ns/cfg",
            ),
            (
                json!({"name": "c", "env": [{"name": "K", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}]}),
                "env K: unsupported fieldPath",
            ),
        ];
        for (container, message) in cases {
            let err = env_of(container).expect_err(message).to_string();
            assert!(err.contains(message), "{err:?} lacks {message:?}");
        }
    }

    #[test]
    fn command_and_args_use_the_final_environment() {
        let container: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "command": ["/bin/$(SHELL_NAME)", "-c"], "args": ["echo $(MSG) $$(MSG) $(UNSET)"]
        }))
        .unwrap();
        let mut env = EnvList::default();
        env.set("SHELL_NAME".into(), "sh".into());
        env.set("MSG".into(), "hi".into());
        let (command, args) = expand_command_and_args(&container, &env);
        assert_eq!(command, vec!["/bin/sh", "-c"]);
        assert_eq!(args, vec!["echo hi $(MSG) $(UNSET)"]);
    }
}
