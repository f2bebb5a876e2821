//! Registration as kubelet does it: create the Node with the standard labels, `--node-labels`
//! and `--register-with-taints`; when it exists already (409), adopt it and bring the labels
//! kubelet owns back to what this host says (kubelet's updateDefaultLabels; user labels and
//! taints of an existing Node are left alone, as kubelet leaves them).

use super::failure::{Failure, call};
use super::options::NodeOptions;
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;

/// The labels kubelet sets on its Node from the host.
pub fn standard_labels(node_name: &str, arch: &str) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", node_name),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", arch),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The Node to create (pure).
pub fn desired_node(opts: &NodeOptions, arch: &str) -> Node {
    let mut labels = opts.labels.clone();
    // The standard labels win over --node-labels, as in kubelet.
    labels.extend(standard_labels(&opts.node_name, arch));
    Node {
        metadata: ObjectMeta {
            name: Some(opts.node_name.clone()),
            labels: Some(labels),
            // Volumes are attached by the controller, not by the node (kubelet's default).
            annotations: Some(BTreeMap::from([(
                "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(opts.taints.clone()).filter(|t| !t.is_empty()),
            ..Default::default()
        }),
        status: None,
    }
}

/// The standard labels an existing Node lacks or has wrong (pure); empty when it is right.
pub fn label_fixes(existing: &Node, wanted: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let have = existing.metadata.labels.clone().unwrap_or_default();
    wanted
        .iter()
        .filter(|(k, v)| have.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// How the Node came to be ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registered {
    Created,
    Adopted,
}

/// Creates or adopts the Node.
pub async fn register(
    client: &kube::Client,
    opts: &NodeOptions,
    arch: &str,
) -> Result<(Node, Registered), Failure> {
    let nodes: Api<Node> = Api::all(client.clone());
    let name = &opts.node_name;
    let resource = format!("nodes/{name}");
    let desired = desired_node(opts, arch);
    match call(
        "create",
        resource.clone(),
        nodes.create(&PostParams::default(), &desired),
    )
    .await
    {
        Ok(node) => return Ok((node, Registered::Created)),
        Err(failure) if failure.code() == Some(409) => {}
        Err(failure) => return Err(failure),
    }
    let existing = call("get", resource.clone(), nodes.get(name)).await?;
    let fixes = label_fixes(&existing, &standard_labels(name, arch));
    if fixes.is_empty() {
        return Ok((existing, Registered::Adopted));
    }
    let patch = serde_json::json!({ "metadata": { "labels": fixes } });
    let node = call(
        "patch",
        resource,
        nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await?;
    Ok((node, Registered::Adopted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::node::options::{RawNodeFlags, parse_taint};

    fn opts() -> NodeOptions {
        let labels = vec![
            "a=b".to_string(),
            "kubernetes.io/hostname=spoofed".to_string(),
        ];
        let mut opts = NodeOptions::parse(&RawNodeFlags {
            node_name: "n1",
            node_labels: &labels,
            max_pods: 110,
            kubelet_port: 10250,
            ..Default::default()
        })
        .unwrap();
        opts.taints = vec![parse_taint("dedicated=runp:NoSchedule").unwrap()];
        opts
    }

    #[test]
    fn the_node_has_standard_labels_user_labels_and_taints() {
        let node = desired_node(&opts(), "amd64");
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["a"], "b");
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(labels["beta.kubernetes.io/os"], "linux");
        assert_eq!(labels["beta.kubernetes.io/arch"], "amd64");
        let taints = node.spec.unwrap().taints.unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0].key, "dedicated");
        assert!(node.status.is_none());

        let mut untainted = opts();
        untainted.taints.clear();
        assert!(
            desired_node(&untainted, "amd64")
                .spec
                .unwrap()
                .taints
                .is_none()
        );
    }

    #[test]
    fn adoption_fixes_only_the_standard_labels() {
        let wanted = standard_labels("n1", "amd64");
        let mut existing = desired_node(&opts(), "amd64");
        assert!(label_fixes(&existing, &wanted).is_empty());
        let labels = existing.metadata.labels.as_mut().unwrap();
        labels.insert("kubernetes.io/arch".into(), "arm64".into());
        labels.remove("beta.kubernetes.io/os");
        labels.insert("user".into(), "kept".into());
        let fixes = label_fixes(&existing, &wanted);
        assert_eq!(
            fixes,
            BTreeMap::from([
                ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
                ("kubernetes.io/arch".to_string(), "amd64".to_string()),
            ])
        );
        existing.metadata.labels = None;
        assert_eq!(label_fixes(&existing, &wanted).len(), 5);
    }
}
