use super::*;
use serde_json::json;

fn node() -> NodeFacts {
    NodeFacts {
        name: "n1".into(),
        labels: BTreeMap::from([
            ("kubernetes.io/hostname".into(), "n1".into()),
            ("disk".into(), "ssd".into()),
            ("cores".into(), "8".into()),
        ]),
        cpu_millis: 2000,
        memory: 1 << 30,
        pods: 3,
    }
}

fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u"}, "spec": spec}))
        .expect("test pod")
}

fn requesting(cpu: &str, memory: &str) -> Pod {
    pod(json!({"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}))
}

fn host_port(port: i32, ip: Option<&str>, protocol: Option<&str>) -> Pod {
    let mut p = json!({"containerPort": 80, "hostPort": port});
    if let Some(ip) = ip {
        p["hostIP"] = json!(ip);
    }
    if let Some(protocol) = protocol {
        p["protocol"] = json!(protocol);
    }
    pod(json!({"containers": [{"name": "c", "image": "i", "ports": [p]}]}))
}

fn affinity(terms: serde_json::Value) -> Pod {
    pod(json!({"containers": [{"name": "c", "image": "i"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": terms}}}}))
}

fn reason(result: Result<(), Rejection>) -> Option<String> {
    result.err().map(|r| r.reason)
}

#[test]
fn decisions_follow_kubelet_general_predicates() {
    let empty = pod(json!({"containers": [{"name": "c", "image": "i"}]}));
    let cases: Vec<(&str, Pod, Vec<Pod>, Option<&str>)> = vec![
        ("fits an empty node", requesting("1", "100Mi"), vec![], None),
        (
            "exactly the allocatable cpu",
            requesting("2", "0"),
            vec![],
            None,
        ),
        (
            "too much cpu",
            requesting("3", "0"),
            vec![],
            Some("OutOfcpu"),
        ),
        (
            "cpu used by admitted pods counts",
            requesting("1500m", "0"),
            vec![requesting("600m", "0")],
            Some("OutOfcpu"),
        ),
        (
            "too much memory",
            requesting("0", "2Gi"),
            vec![],
            Some("OutOfmemory"),
        ),
        (
            "pods count before resources",
            requesting("3", "0"),
            vec![empty.clone(), empty.clone(), empty.clone()],
            Some("OutOfpods"),
        ),
        (
            "no requests fit even a full cpu",
            empty.clone(),
            vec![requesting("2", "0")],
            None,
        ),
        (
            "nodeSelector matches",
            pod(
                json!({"containers": [{"name": "c", "image": "i"}], "nodeSelector": {"disk": "ssd"}}),
            ),
            vec![],
            None,
        ),
        (
            "nodeSelector does not match",
            pod(
                json!({"containers": [{"name": "c", "image": "i"}], "nodeSelector": {"disk": "hdd"}}),
            ),
            vec![],
            Some("NodeAffinity"),
        ),
        (
            "affinity: one of the terms matches",
            affinity(json!([
                {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]},
                {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]}
            ])),
            vec![],
            None,
        ),
        (
            "affinity: expressions of a term are ANDed",
            affinity(json!([{"matchExpressions": [
                {"key": "disk", "operator": "Exists"},
                {"key": "gpu", "operator": "Exists"}
            ]}])),
            vec![],
            Some("NodeAffinity"),
        ),
        (
            "affinity: NotIn and DoesNotExist",
            affinity(json!([{"matchExpressions": [
                {"key": "disk", "operator": "NotIn", "values": ["hdd"]},
                {"key": "gpu", "operator": "DoesNotExist"}
            ]}])),
            vec![],
            None,
        ),
        (
            "affinity: matchFields on the node name",
            affinity(json!([{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}])),
            vec![],
            Some("NodeAffinity"),
        ),
        (
            "affinity: an empty term matches nothing",
            affinity(json!([{}])),
            vec![],
            Some("NodeAffinity"),
        ),
        (
            "bound to another node",
            pod(json!({"containers": [{"name": "c", "image": "i"}], "nodeName": "n2"})),
            vec![],
            Some("NodeName"),
        ),
        (
            "host port taken",
            host_port(8080, None, None),
            vec![host_port(8080, None, None)],
            Some("NodePorts"),
        ),
        (
            "wildcard conflicts with a specific address",
            host_port(8080, Some("127.0.0.1"), None),
            vec![host_port(8080, None, None)],
            Some("NodePorts"),
        ),
        (
            "different addresses do not conflict",
            host_port(8080, Some("127.0.0.1"), None),
            vec![host_port(8080, Some("10.0.0.1"), None)],
            None,
        ),
        (
            "different protocols do not conflict",
            host_port(53, None, Some("UDP")),
            vec![host_port(53, None, None)],
            None,
        ),
    ];
    for (name, pod, admitted, want) in cases {
        assert_eq!(
            reason(admit(&node(), &pod, &admitted)).as_deref(),
            want,
            "{name}"
        );
    }
}

#[test]
fn messages_are_kubelets() {
    let err = admit(&node(), &requesting("3", "0"), &[requesting("100m", "0")]).unwrap_err();
    assert_eq!(
        err.message,
        "Node didn't have enough resource: cpu, requested: 3000, used: 100, capacity: 2000"
    );
    let err = admit(&node(), &requesting("0", "2Gi"), &[]).unwrap_err();
    assert_eq!(
        err.message,
        "Node didn't have enough resource: memory, requested: 2147483648, used: 0, capacity: 1073741824"
    );
    let err = admit(
        &node(),
        &host_port(80, None, None),
        &[host_port(80, None, None)],
    )
    .unwrap_err();
    assert_eq!(
        err.message,
        "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    );
}

#[test]
fn requests_take_init_containers_sidecars_and_overhead() {
    let cases = [
        (
            "sum of containers",
            json!({"containers": [
                {"name": "a", "image": "i", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "b", "image": "i", "resources": {"requests": {"cpu": "200m"}}}]}),
            300,
        ),
        (
            "a larger init container wins",
            json!({"initContainers": [
                {"name": "i", "image": "i", "resources": {"requests": {"cpu": "1"}}}],
                "containers": [{"name": "a", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]}),
            1000,
        ),
        (
            "sidecars add to the containers and to later init containers",
            json!({"initContainers": [
                {"name": "s", "image": "i", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": "200m"}}},
                {"name": "i", "image": "i", "resources": {"requests": {"cpu": "500m"}}}],
                "containers": [{"name": "a", "image": "i", "resources": {"requests": {"cpu": "100m"}}}]}),
            700,
        ),
        (
            "a limit stands for a missing request; overhead adds",
            json!({"overhead": {"cpu": "50m"},
                "containers": [{"name": "a", "image": "i", "resources": {"limits": {"cpu": "250m"}}}]}),
            300,
        ),
    ];
    for (name, spec, want) in cases {
        assert_eq!(
            requests::pod_requests(&pod(spec)).cpu_millis,
            want,
            "{name}"
        );
    }
}

#[test]
fn node_facts_come_from_allocatable() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"a": "b"}},
        "status": {"allocatable": {"cpu": "1500m", "memory": "1Gi", "pods": "110"}}
    }))
    .expect("node");
    let facts = NodeFacts::from_node(&node);
    assert_eq!(
        (
            facts.cpu_millis,
            facts.memory,
            facts.pods,
            facts.labels.len()
        ),
        (1500, 1 << 30, 110, 1)
    );
}
