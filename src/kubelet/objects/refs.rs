//! What a pod references in the API: the ConfigMaps and Secrets of its volumes (projected
//! sources included), env (`valueFrom`, `envFrom`) and imagePullSecrets, and the
//! service-account tokens its projected volumes ask for. Pure: read from the spec only.

use crate::kubelet::source::manifest::parse::CONFIG_SOURCE_ANNOTATION;
use k8s_openapi::api::core::v1::{Container, Pod, ServiceAccountTokenProjection};
use std::collections::BTreeSet;

/// Default and minimum `expirationSeconds` of a projected token (the API's defaulting and
/// validation).
pub const DEFAULT_TOKEN_SECONDS: i64 = 3600;
pub const MIN_TOKEN_SECONDS: i64 = 600;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    ConfigMap,
    Secret,
}

/// A referenced ConfigMap or Secret.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

/// One token a pod needs: kubelet's token-manager key (service account, audience, lifetime,
/// bound pod).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TokenKey {
    pub namespace: String,
    pub service_account: String,
    /// Empty: the API server's default audiences.
    pub audience: String,
    pub expiration_seconds: i64,
    pub pod_name: String,
    pub pod_uid: String,
}

/// Everything a pod references.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodRefs {
    pub objects: BTreeSet<ObjectRef>,
    pub tokens: BTreeSet<TokenKey>,
}

/// Static pods (manifest files) may not reference API objects; their objects come from the
/// manifest directory.
pub fn is_static(pod: &Pod) -> bool {
    let annotations = pod.metadata.annotations.as_ref();
    annotations
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .is_some_and(|s| s == "file")
}

/// The token key of a projected source of `pod`, as [`PodRefs::tokens`] holds it.
pub fn token_key(pod: &Pod, source: &ServiceAccountTokenProjection) -> TokenKey {
    let spec = pod.spec.as_ref();
    let service_account = spec
        .and_then(|s| s.service_account_name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or("default");
    TokenKey {
        namespace: namespace(pod).to_string(),
        service_account: service_account.to_string(),
        audience: source.audience.clone().unwrap_or_default(),
        expiration_seconds: source
            .expiration_seconds
            .unwrap_or(DEFAULT_TOKEN_SECONDS)
            .max(MIN_TOKEN_SECONDS),
        pod_name: pod.metadata.name.clone().unwrap_or_default(),
        pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
    }
}

fn namespace(pod: &Pod) -> &str {
    let namespace = pod.metadata.namespace.as_deref();
    namespace.filter(|n| !n.is_empty()).unwrap_or("default")
}

/// What `pod` references (nothing for static pods).
pub fn references(pod: &Pod) -> PodRefs {
    let mut refs = PodRefs::default();
    let Some(spec) = pod.spec.as_ref().filter(|_| !is_static(pod)) else {
        return refs;
    };
    let ns = namespace(pod);
    let mut add = |kind: Kind, name: &str| {
        if !name.is_empty() {
            refs.objects.insert(ObjectRef {
                kind,
                namespace: ns.to_string(),
                name: name.to_string(),
            });
        }
    };
    for secret in spec.image_pull_secrets.iter().flatten() {
        add(Kind::Secret, &secret.name);
    }
    let ephemeral = spec.ephemeral_containers.iter().flatten().map(|e| {
        // Only the env part matters here.
        Container {
            env: e.env.clone(),
            env_from: e.env_from.clone(),
            ..Default::default()
        }
    });
    let containers: Vec<Container> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .cloned()
        .chain(ephemeral)
        .collect();
    for container in &containers {
        for from in container.env_from.iter().flatten() {
            if let Some(cm) = &from.config_map_ref {
                add(Kind::ConfigMap, &cm.name);
            }
            if let Some(secret) = &from.secret_ref {
                add(Kind::Secret, &secret.name);
            }
        }
        for var in container.env.iter().flatten() {
            let Some(source) = &var.value_from else {
                continue;
            };
            if let Some(cm) = &source.config_map_key_ref {
                add(Kind::ConfigMap, &cm.name);
            }
            if let Some(secret) = &source.secret_key_ref {
                add(Kind::Secret, &secret.name);
            }
        }
    }
    let mut tokens = BTreeSet::new();
    for volume in spec.volumes.iter().flatten() {
        if let Some(cm) = &volume.config_map {
            add(Kind::ConfigMap, &cm.name);
        }
        if let Some(secret) = &volume.secret {
            add(Kind::Secret, secret.secret_name.as_deref().unwrap_or(""));
        }
        let sources = volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten());
        for source in sources {
            if let Some(cm) = &source.config_map {
                add(Kind::ConfigMap, &cm.name);
            }
            if let Some(secret) = &source.secret {
                add(Kind::Secret, &secret.name);
            }
            if let Some(token) = &source.service_account_token {
                tokens.insert(token_key(pod, token));
            }
        }
    }
    refs.tokens = tokens;
    refs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u-1"},
            "spec": spec
        }))
        .unwrap()
    }

    fn objects(items: &[(Kind, &str)]) -> BTreeSet<ObjectRef> {
        items
            .iter()
            .map(|(kind, name)| ObjectRef {
                kind: *kind,
                namespace: "ns".into(),
                name: name.to_string(),
            })
            .collect()
    }

    #[test]
    fn references_table() {
        use Kind::{ConfigMap as C, Secret as S};
        let cases = [
            ("nothing", json!({"containers": [{"name": "c"}]}), vec![]),
            (
                "volumes, projected sources and pull secrets",
                json!({
                    "imagePullSecrets": [{"name": "pull"}, {"name": ""}],
                    "containers": [{"name": "c"}],
                    "volumes": [
                        {"name": "a", "configMap": {"name": "cm-vol", "optional": true}},
                        {"name": "b", "secret": {"secretName": "sec-vol"}},
                        {"name": "e", "emptyDir": {}},
                        {"name": "p", "projected": {"sources": [
                            {"configMap": {"name": "kube-root-ca.crt"}},
                            {"secret": {"name": "sec-proj"}},
                            {"downwardAPI": {"items": []}}]}}]}),
                vec![
                    (C, "cm-vol"),
                    (C, "kube-root-ca.crt"),
                    (S, "pull"),
                    (S, "sec-vol"),
                    (S, "sec-proj"),
                ],
            ),
            (
                "env of init, app and ephemeral containers",
                json!({
                    "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "init-cm"}}]}],
                    "containers": [{"name": "c",
                        "envFrom": [{"secretRef": {"name": "all-sec"}, "prefix": "X_"}],
                        "env": [
                            {"name": "A", "value": "x"},
                            {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "key-cm", "key": "k"}}},
                            {"name": "C", "valueFrom": {"secretKeyRef": {"name": "key-sec", "key": "k", "optional": true}}},
                            {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}],
                    "ephemeralContainers": [{"name": "dbg", "env": [
                        {"name": "E", "valueFrom": {"secretKeyRef": {"name": "dbg-sec", "key": "k"}}}]}]}),
                vec![
                    (C, "init-cm"),
                    (C, "key-cm"),
                    (S, "all-sec"),
                    (S, "key-sec"),
                    (S, "dbg-sec"),
                ],
            ),
        ];
        for (what, spec, expected) in cases {
            let refs = references(&pod(spec));
            assert_eq!(refs.objects, objects(&expected), "{what}");
            assert!(refs.tokens.is_empty(), "{what}");
        }
    }

    #[test]
    fn tokens_default_audience_and_lifetime_and_bind_the_pod() {
        let spec = json!({
            "serviceAccountName": "builder",
            "containers": [{"name": "c"}],
            "volumes": [{"name": "t", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token"}},
                {"serviceAccountToken": {"path": "vault", "audience": "vault", "expirationSeconds": 60}},
                {"serviceAccountToken": {"path": "again"}}]}}]});
        let refs = references(&pod(spec));
        let key = |audience: &str, seconds| TokenKey {
            namespace: "ns".into(),
            service_account: "builder".into(),
            audience: audience.into(),
            expiration_seconds: seconds,
            pod_name: "web".into(),
            pod_uid: "u-1".into(),
        };
        // The same token serves two paths; 60 s is raised to the minimum.
        let expected: BTreeSet<TokenKey> = [key("", 3600), key("vault", 600)].into();
        assert_eq!(refs.tokens, expected);
        let mut no_sa = pod(json!({"containers": [{"name": "c"}]}));
        let source = ServiceAccountTokenProjection {
            path: "t".into(),
            ..Default::default()
        };
        assert_eq!(token_key(&no_sa, &source).service_account, "default");
        no_sa.metadata.annotations =
            Some([(CONFIG_SOURCE_ANNOTATION.into(), "file".into())].into());
        no_sa.spec.as_mut().unwrap().image_pull_secrets = Some(vec![
            serde_json::from_value(json!({"name": "pull"})).unwrap(),
        ]);
        assert_eq!(
            references(&no_sa),
            PodRefs::default(),
            "static pods reference nothing"
        );
    }
}
