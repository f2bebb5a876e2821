//! The node's heartbeat Lease `kube-node-lease/<node>` (coordination.k8s.io/v1): holder = the
//! node, 40 s duration, owned by the Node (so it goes with it), renewed every 10 s.

use super::failure::{Failure, call};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use std::time::{Duration, SystemTime};

pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// kubelet's nodeLeaseDurationSeconds.
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// kubelet renews at a quarter of the duration.
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);

fn micro_time(now: SystemTime) -> Option<MicroTime> {
    k8s_openapi::jiff::Timestamp::try_from(now)
        .ok()
        .map(MicroTime)
}

/// The Lease for `node` renewed at `now` (pure).
pub fn lease_for(node: &Node, now: SystemTime) -> Lease {
    let name = node.metadata.name.clone().unwrap_or_default();
    let owner = node.metadata.uid.clone().map(|uid| OwnerReference {
        api_version: "v1".to_string(),
        kind: "Node".to_string(),
        name: name.clone(),
        uid,
        ..Default::default()
    });
    Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(LEASE_NAMESPACE.to_string()),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: micro_time(now),
            ..Default::default()
        }),
    }
}

/// Renews the Lease (a merge patch: no read first), creating it when missing. `exists` is
/// what the caller last saw, so the steady state is one request.
pub async fn renew(
    client: &kube::Client,
    node: &Node,
    now: SystemTime,
    exists: &mut bool,
) -> Result<(), Failure> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let lease = lease_for(node, now);
    let name = lease.metadata.name.clone().unwrap_or_default();
    let resource = format!("leases/{name} (namespace {LEASE_NAMESPACE})");
    let patch = || {
        let lease = &lease;
        let patch = serde_json::json!({
            "metadata": { "ownerReferences": lease.metadata.owner_references },
            "spec": lease.spec,
        });
        let leases = leases.clone();
        let name = name.clone();
        async move {
            leases
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        }
    };
    if *exists {
        match call("patch", resource.clone(), patch()).await {
            Ok(_) => return Ok(()),
            Err(failure) if failure.code() == Some(404) => *exists = false,
            Err(failure) => return Err(failure),
        }
    }
    match call(
        "create",
        resource.clone(),
        leases.create(&PostParams::default(), &lease),
    )
    .await
    {
        Ok(_) => {}
        // Left by an earlier run of the agent: take it over.
        Err(failure) if failure.code() == Some(409) => {
            call("patch", resource, patch()).await?;
        }
        Err(failure) => return Err(failure),
    }
    *exists = true;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn the_lease_is_held_by_the_node_and_owned_by_it() {
        let node = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let now = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        let lease = lease_for(&node, now);
        assert_eq!(lease.metadata.name.as_deref(), Some("n1"));
        assert_eq!(lease.metadata.namespace.as_deref(), Some("kube-node-lease"));
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Node", "u-1"));
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        let renew = spec.renew_time.unwrap().0;
        assert_eq!(renew.as_microsecond(), 1_700_000_000_123_456);
    }
}
