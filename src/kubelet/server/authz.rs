//! kubelet's request → authorization attributes mapping (`nodeAuthorizerAttributesGetter`):
//! every kubelet API request is checked as a verb on a subresource of the node.

/// What a request asks of the node, as a SubjectAccessReview's resourceAttributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: &'static str,
    /// Always `nodes`.
    pub resource: &'static str,
    pub subresource: &'static str,
    /// The node's name.
    pub name: String,
    pub path: String,
}

/// The API verb of an HTTP method as kubelet maps it; None for methods it does not map
/// (the request is then refused with 405 before authorization).
pub fn verb(method: &str) -> Option<&'static str> {
    Some(match method {
        "GET" | "HEAD" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => return None,
    })
}

/// kubelet's `isSubpath`: `path` itself or anything below it.
fn is_subpath(subpath: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    subpath == path
        || (subpath.starts_with(path) && subpath.as_bytes().get(path.len()) == Some(&b'/'))
}

/// The node subresource a request path is authorized as.
pub fn subresource(path: &str) -> &'static str {
    const TABLE: &[(&str, &str)] = &[
        ("/stats", "stats"),
        ("/metrics", "metrics"),
        ("/logs", "log"),
        ("/spec", "spec"),
    ];
    TABLE
        .iter()
        .find(|(prefix, _)| is_subpath(path, prefix))
        .map_or("proxy", |(_, sub)| sub)
}

/// The attributes of `method path` on node `node`; None for an unmapped method.
pub fn attributes(method: &str, path: &str, node: &str) -> Option<Attributes> {
    Some(Attributes {
        verb: verb(method)?,
        resource: "nodes",
        subresource: subresource(path),
        name: node.to_string(),
        path: path.to_string(),
    })
}

/// kubelet's 403 body.
pub fn forbidden_message(user: &str, attrs: &Attributes) -> String {
    format!(
        "Forbidden (user={user}, verb={}, resource={}, subresource={})",
        attrs.verb, attrs.resource, attrs.subresource
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_kubelets_subresources() {
        let table = [
            ("/stats", "stats"),
            ("/stats/", "stats"),
            ("/stats/summary", "stats"),
            ("/statsx", "proxy"),
            ("/metrics", "metrics"),
            ("/metrics/resource", "metrics"),
            ("/metrics/cadvisor", "metrics"),
            ("/metricsfoo", "proxy"),
            ("/logs/", "log"),
            ("/logs/syslog", "log"),
            ("/spec/", "spec"),
            ("/pods", "proxy"),
            ("/healthz", "proxy"),
            ("/configz", "proxy"),
            ("/containerLogs/ns/pod/c", "proxy"),
            ("/exec/ns/pod/c", "proxy"),
            ("/portForward/ns/pod", "proxy"),
            ("/", "proxy"),
        ];
        for (path, want) in table {
            assert_eq!(subresource(path), want, "{path}");
        }
    }

    #[test]
    fn methods_map_to_verbs() {
        let table = [
            ("GET", Some("get")),
            ("HEAD", Some("get")),
            ("POST", Some("create")),
            ("PUT", Some("update")),
            ("PATCH", Some("patch")),
            ("DELETE", Some("delete")),
            ("OPTIONS", None),
        ];
        for (method, want) in table {
            assert_eq!(verb(method), want, "{method}");
        }
    }

    #[test]
    fn forbidden_names_user_verb_resource_and_subresource() {
        let attrs = attributes("POST", "/exec/default/p/c", "node-a").unwrap();
        assert_eq!(attrs.name, "node-a");
        assert_eq!(
            forbidden_message("system:serviceaccount:default:x", &attrs),
            "Forbidden (user=system:serviceaccount:default:x, verb=create, resource=nodes, \
             subresource=proxy)"
        );
    }
}
