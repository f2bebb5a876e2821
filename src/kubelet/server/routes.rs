//! The kubelet API's routes as a table: one line per endpoint (stats and metrics are one line
//! each to add). Matching is pure: a path no route has is 404, a known path with another
//! method 405.

use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Healthz,
    Pods,
    Configz,
    ContainerLogs,
    Exec,
    Attach,
    PortForward,
    Run,
    StatsSummary,
    MetricsResource,
    Metrics,
}

/// `{name}` segments capture; the rest must be equal.
type Route = (&'static [&'static str], &'static str, Endpoint);

const GET: &[&str] = &["GET", "HEAD"];
const STREAM: &[&str] = &["GET", "POST"];
const POST: &[&str] = &["POST"];

pub const ROUTES: &[Route] = &[
    (GET, "/healthz", Endpoint::Healthz),
    (GET, "/pods", Endpoint::Pods),
    (GET, "/configz", Endpoint::Configz),
    (
        GET,
        "/containerLogs/{ns}/{pod}/{container}",
        Endpoint::ContainerLogs,
    ),
    (STREAM, "/exec/{ns}/{pod}/{container}", Endpoint::Exec),
    (STREAM, "/exec/{ns}/{pod}/{uid}/{container}", Endpoint::Exec),
    (STREAM, "/attach/{ns}/{pod}/{container}", Endpoint::Attach),
    (
        STREAM,
        "/attach/{ns}/{pod}/{uid}/{container}",
        Endpoint::Attach,
    ),
    (STREAM, "/portForward/{ns}/{pod}", Endpoint::PortForward),
    (
        STREAM,
        "/portForward/{ns}/{pod}/{uid}",
        Endpoint::PortForward,
    ),
    (POST, "/run/{ns}/{pod}/{container}", Endpoint::Run),
    (POST, "/run/{ns}/{pod}/{uid}/{container}", Endpoint::Run),
    (GET, "/stats/summary", Endpoint::StatsSummary),
    (GET, "/metrics/resource", Endpoint::MetricsResource),
    (GET, "/metrics", Endpoint::Metrics),
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    Found {
        endpoint: Endpoint,
        params: BTreeMap<&'static str, String>,
    },
    NotFound,
    MethodNotAllowed,
}

fn capture(pattern: &'static str, path: &str) -> Option<BTreeMap<&'static str, String>> {
    let pat: Vec<&'static str> = pattern.split('/').collect();
    let got: Vec<&str> = path.split('/').collect();
    if pat.len() != got.len() {
        return None;
    }
    let mut params = BTreeMap::new();
    for (p, g) in pat.into_iter().zip(got) {
        match p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            Some(name) if !g.is_empty() => {
                params.insert(name, g.to_string());
            }
            Some(_) => return None,
            None if p == g => {}
            None => return None,
        }
    }
    Some(params)
}

/// The route of `method path` in `routes`.
pub fn route(routes: &[Route], method: &str, path: &str) -> Match {
    let mut known_path = false;
    for (methods, pattern, endpoint) in routes {
        if let Some(params) = capture(pattern, path) {
            if methods.contains(&method) {
                return Match::Found {
                    endpoint: *endpoint,
                    params,
                };
            }
            known_path = true;
        }
    }
    if known_path {
        Match::MethodNotAllowed
    } else {
        Match::NotFound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(method: &str, path: &str) -> (Endpoint, Vec<(&'static str, String)>) {
        match route(ROUTES, method, path) {
            Match::Found { endpoint, params } => (endpoint, params.into_iter().collect()),
            other => panic!("{method} {path}: {other:?}"),
        }
    }

    #[test]
    fn routes_capture_their_parameters() {
        assert_eq!(found("GET", "/healthz").0, Endpoint::Healthz);
        assert_eq!(found("HEAD", "/pods").0, Endpoint::Pods);
        let (e, p) = found("GET", "/containerLogs/default/web/nginx");
        assert_eq!(e, Endpoint::ContainerLogs);
        assert_eq!(
            p,
            vec![
                ("container", "nginx".to_string()),
                ("ns", "default".to_string()),
                ("pod", "web".to_string())
            ]
        );
        let (e, p) = found("POST", "/exec/ns/p/uid-1/c");
        assert_eq!(e, Endpoint::Exec);
        assert!(p.contains(&("uid", "uid-1".to_string())));
        assert_eq!(found("GET", "/portForward/ns/p").0, Endpoint::PortForward);
        assert_eq!(found("POST", "/run/ns/p/c").0, Endpoint::Run);
        assert_eq!(found("GET", "/stats/summary").0, Endpoint::StatsSummary);
        assert_eq!(
            found("GET", "/metrics/resource").0,
            Endpoint::MetricsResource
        );
        assert_eq!(found("GET", "/metrics").0, Endpoint::Metrics);
    }

    #[test]
    fn unknown_paths_404_and_wrong_methods_405() {
        let table = [
            ("GET", "/stats", Match::NotFound),
            ("POST", "/stats/summary", Match::MethodNotAllowed),
            ("GET", "/metrics/cadvisor", Match::NotFound),
            ("POST", "/metrics", Match::MethodNotAllowed),
            ("GET", "/containerLogs/ns/pod", Match::NotFound),
            ("GET", "/containerLogs//pod/c", Match::NotFound),
            ("GET", "/", Match::NotFound),
            ("POST", "/pods", Match::MethodNotAllowed),
            ("DELETE", "/containerLogs/ns/p/c", Match::MethodNotAllowed),
            ("GET", "/run/ns/p/c", Match::MethodNotAllowed),
        ];
        for (method, path, want) in table {
            assert_eq!(route(ROUTES, method, path), want, "{method} {path}");
        }
    }
}
