//! The SubjectAccessReview the kubelet API sends for a request (`--authorization-mode=Webhook`),
//! and a small time-bounded cache for TokenReview answers (kubelet caches them ~2 minutes).

use super::authz::Attributes;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Who made a request: the client certificate's CN and O, or a TokenReview's user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
}

/// The review asking whether `user` may do `attrs` on the node.
pub fn subject_access_review(user: &User, attrs: &Attributes) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: user.uid.clone(),
            groups: Some(user.groups.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(attrs.verb.to_string()),
                version: Some("v1".to_string()),
                resource: Some(attrs.resource.to_string()),
                subresource: Some(attrs.subresource.to_string()),
                name: Some(attrs.name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

/// Answers kept for `ttl` from when they were stored; the caller passes the time.
#[derive(Debug)]
pub struct TtlCache<V> {
    ttl: Duration,
    entries: HashMap<String, (Instant, V)>,
}

impl<V: Clone> TtlCache<V> {
    pub fn new(ttl: Duration) -> TtlCache<V> {
        TtlCache {
            ttl,
            entries: HashMap::new(),
        }
    }

    pub fn get(&mut self, key: &str, now: Instant) -> Option<V> {
        let ttl = self.ttl;
        self.entries
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
        self.entries.get(key).map(|(_, v)| v.clone())
    }

    pub fn put(&mut self, key: &str, value: V, now: Instant) {
        self.entries.insert(key.to_string(), (now, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::server::authz::attributes;

    #[test]
    fn review_names_the_user_and_the_node_subresource() {
        let user = User {
            name: "kube-apiserver-kubelet-client".into(),
            uid: None,
            groups: vec!["system:masters".into()],
        };
        let review =
            subject_access_review(&user, &attributes("GET", "/stats/summary", "n1").unwrap());
        let json = serde_json::to_value(&review).unwrap();
        assert_eq!(json["spec"]["user"], "kube-apiserver-kubelet-client");
        assert_eq!(json["spec"]["groups"][0], "system:masters");
        let ra = &json["spec"]["resourceAttributes"];
        assert_eq!(ra["verb"], "get");
        assert_eq!(ra["resource"], "nodes");
        assert_eq!(ra["subresource"], "stats");
        assert_eq!(ra["name"], "n1");
        assert_eq!(ra["version"], "v1");
    }

    #[test]
    fn cache_forgets_after_ttl() {
        let mut cache = TtlCache::new(Duration::from_secs(120));
        let t0 = Instant::now();
        cache.put("token", 1, t0);
        assert_eq!(cache.get("token", t0 + Duration::from_secs(119)), Some(1));
        assert_eq!(cache.get("token", t0 + Duration::from_secs(120)), None);
        assert_eq!(cache.get("other", t0), None);
    }
}
