//! What the kubelet would send the runtime for a representative pod.

use super::*;
use crate::kubelet::podconfig::ImageUser;
use crate::kubelet::podconfig::spec::defaults::apply_pod_defaults;
use crate::kubelet::podconfig::test_objects::Objects;
use serde_json::json;

fn pod(spec: serde_json::Value) -> Pod {
    let mut pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "prod", "uid": "u-1",
                     "labels": {"app": "web"}, "annotations": {"note": "n"}},
        "spec": spec
    }))
    .unwrap();
    apply_pod_defaults(&mut pod);
    pod
}

fn agent() -> AgentConfig {
    let mut config = AgentConfig::with_root("/var/lib/runp");
    config.cluster_dns = vec!["10.96.0.10".parse().unwrap()];
    config.node_name = "node-1".into();
    config.node_ip = "192.168.1.10".parse().unwrap();
    config
}

fn web_pod() -> Pod {
    pod(json!({
        "hostname": "db", "subdomain": "svc1",
        "terminationGracePeriodSeconds": 45,
        "securityContext": {"fsGroup": 2000, "sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]},
        "containers": [{
            "name": "main", "image": "registry.example.com/web:1.0",
            "command": ["/bin/server", "--name=$(POD_NAME)"],
            "args": ["--greeting=$(GREETING)", "$$(ESCAPED)"],
            "workingDir": "/srv",
            "env": [
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}}],
            "ports": [{"name": "http", "containerPort": 8080, "hostPort": 18080},
                      {"containerPort": 9090},
                      {"containerPort": 53, "hostPort": 1053, "protocol": "UDP", "hostIP": "127.0.0.1"}],
            "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "250m"}},
            "lifecycle": {"preStop": {"exec": {"command": ["/bin/drain"]}}},
            "stdin": true, "tty": true
        }]
    }))
}

#[test]
fn sandbox_config_as_the_kubelet_builds_it() {
    let pod = web_pod();
    let resolv = "nameserver 8.8.8.8\nsearch corp.example\n";
    let config = sandbox_config_with_resolv_conf(&pod, &agent(), 2, Some(resolv)).unwrap();
    let meta = config.metadata.unwrap();
    assert_eq!(
        (
            meta.name.as_str(),
            meta.namespace.as_str(),
            meta.uid.as_str(),
            meta.attempt
        ),
        ("web", "prod", "u-1", 2)
    );
    assert_eq!(config.hostname, "db");
    assert_eq!(
        config.log_directory,
        "/var/lib/runp/var/log/pods/prod_web_u-1"
    );
    let dns = config.dns_config.unwrap();
    assert_eq!(dns.servers, ["10.96.0.10"]);
    assert_eq!(
        dns.searches,
        [
            "prod.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "corp.example"
        ]
    );
    assert_eq!(dns.options, ["ndots:5"]);
    let ports: Vec<(i32, i32, i32, String)> = config
        .port_mappings
        .iter()
        .map(|p| (p.protocol, p.container_port, p.host_port, p.host_ip.clone()))
        .collect();
    assert_eq!(
        ports,
        [
            (api::Protocol::Tcp as i32, 8080, 18080, String::new()),
            (api::Protocol::Udp as i32, 53, 1053, "127.0.0.1".to_string())
        ]
    );
    assert_eq!(config.labels["app"], "web");
    assert_eq!(config.labels[labels::POD_UID], "u-1");
    assert_eq!(config.labels[labels::MANAGED], "true");
    assert_eq!(config.annotations["note"], "n");
    let linux = config.linux.unwrap();
    assert_eq!(linux.cgroup_parent, "/kubepods/burstable/podu-1");
    assert_eq!(linux.sysctls["net.core.somaxconn"], "1024");
    let sc = linux.security_context.unwrap();
    assert_eq!(sc.supplemental_groups, [2000]);
    assert_eq!(
        sc.namespace_options.unwrap().pid,
        api::NamespaceMode::Container as i32
    );
    let resources = linux.resources.unwrap();
    assert_eq!(
        (
            resources.cpu_shares,
            resources.cpu_quota,
            resources.memory_limit_in_bytes
        ),
        (256, 50_000, 256 << 20)
    );

    // hostNetwork: no hostname, node namespaces, host DNS (ClusterFirst falls back).
    let mut host = web_pod();
    host.spec.as_mut().unwrap().host_network = Some(true);
    let config = sandbox_config_with_resolv_conf(&host, &agent(), 0, Some(resolv)).unwrap();
    assert_eq!(config.hostname, "");
    assert_eq!(config.dns_config.unwrap().servers, ["8.8.8.8"]);
    let ns = config
        .linux
        .unwrap()
        .security_context
        .unwrap()
        .namespace_options
        .unwrap();
    assert_eq!(ns.network, api::NamespaceMode::Node as i32);
}

fn inputs<'a>(
    pod: &'a Pod,
    objects: &'a Objects,
    config: &'a AgentConfig,
    mounts: Vec<api::Mount>,
) -> ContainerInputs<'a> {
    ContainerInputs {
        pod,
        container: &pod.spec.as_ref().unwrap().containers[0],
        image_ref: "sha256:abc",
        image_user: ImageUser {
            uid: Some(1234),
            username: String::new(),
        },
        restart_count: 3,
        is_init: false,
        pod_ip: Some("10.1.2.3"),
        mounts,
        objects,
        config,
    }
}

#[test]
fn container_config_as_the_kubelet_builds_it() {
    let pod = web_pod();
    let mut objects = Objects::default();
    objects.add_config_map("prod", "cfg", &[("greeting", "hello")]);
    let config = agent();
    let mount = api::Mount {
        container_path: "/data".into(),
        host_path: "/host/data".into(),
        ..Default::default()
    };
    let c = container_config(&inputs(&pod, &objects, &config, vec![mount.clone()])).unwrap();
    let meta = c.metadata.unwrap();
    assert_eq!((meta.name.as_str(), meta.attempt), ("main", 3));
    let image = c.image.unwrap();
    assert_eq!(
        (image.image.as_str(), image.user_specified_image.as_str()),
        ("sha256:abc", "registry.example.com/web:1.0")
    );
    assert_eq!(c.command, ["/bin/server", "--name=web"]);
    assert_eq!(c.args, ["--greeting=hello", "$(ESCAPED)"]);
    assert_eq!(c.working_dir, "/srv");
    let envs: Vec<(&str, &str)> = c
        .envs
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_str()))
        .collect();
    assert_eq!(
        envs,
        [
            ("POD_NAME", "web"),
            ("POD_IP", "10.1.2.3"),
            ("GREETING", "hello")
        ]
    );
    assert_eq!(c.mounts, [mount]);
    assert!(c.devices.is_empty());
    assert_eq!(c.log_path, "main/3.log");
    assert!(c.stdin && c.tty && !c.stdin_once);
    // Labels: identity only (not the pod's labels), as the kubelet's newContainerLabels.
    assert_eq!(c.labels.len(), 4);
    assert_eq!(c.labels[labels::CONTAINER_NAME], "main");
    let a = &c.annotations;
    assert_eq!(
        a[labels::CONTAINER_HASH],
        container_hash(&pod.spec.as_ref().unwrap().containers[0])
    );
    assert_eq!(a[labels::CONTAINER_RESTART_COUNT], "3");
    assert_eq!(a[labels::TERMINATION_MESSAGE_PATH], "/dev/termination-log");
    assert_eq!(a[labels::TERMINATION_MESSAGE_POLICY], "File");
    assert_eq!(a[labels::POD_TERMINATION_GRACE_PERIOD], "45");
    assert_eq!(
        a[labels::CONTAINER_PRESTOP_HANDLER],
        r#"{"exec":{"command":["/bin/drain"]}}"#
    );
    let ports: serde_json::Value = serde_json::from_str(&a[labels::CONTAINER_PORTS]).unwrap();
    assert_eq!(
        ports[0],
        json!({"name": "http", "containerPort": 8080, "hostPort": 18080, "protocol": "TCP"})
    );
    assert!(!a.contains_key(labels::INIT_CONTAINER));
    let linux = c.linux.unwrap();
    let r = linux.resources.unwrap();
    assert_eq!(
        (
            r.cpu_shares,
            r.cpu_period,
            r.cpu_quota,
            r.memory_limit_in_bytes
        ),
        (256, 100_000, 50_000, 256 << 20)
    );
    assert!(
        (3..=999).contains(&r.oom_score_adj),
        "burstable: {}",
        r.oom_score_adj
    );
    let sc = linux.security_context.unwrap();
    assert_eq!(sc.supplemental_groups, [2000]);
    assert_eq!(sc.masked_paths.len(), 12);
}

#[test]
fn missing_references_and_bad_specs_are_errors() {
    let pod = web_pod();
    let objects = Objects::default();
    let config = agent();
    let err = container_config(&inputs(&pod, &objects, &config, vec![])).unwrap_err();
    assert!(
        err.to_string().contains("configMap prod/cfg not found"),
        "{err}"
    );
    let mut no_uid = pod.clone();
    no_uid.metadata.uid = None;
    assert!(matches!(
        sandbox_config_with_resolv_conf(&no_uid, &config, 0, None),
        Err(PodConfigError::Missing("metadata.uid"))
    ));
}

#[test]
fn init_containers_are_marked() {
    let pod = pod(json!({"containers": [{"name": "c", "image": "busybox"}]}));
    let objects = Objects::default();
    let config = agent();
    let mut i = inputs(&pod, &objects, &config, vec![]);
    i.is_init = true;
    i.pod_ip = None;
    let c = container_config(&i).unwrap();
    assert_eq!(c.annotations[labels::INIT_CONTAINER], "true");
    assert!(c.envs.is_empty());
}

#[test]
fn hash_ignores_resources_but_not_the_rest() {
    let base: Container = serde_json::from_value(json!({
        "name": "c", "image": "busybox", "command": ["sleep", "1"],
        "resources": {"limits": {"cpu": "1"}}
    }))
    .unwrap();
    let h = container_hash(&base);
    assert_eq!(h.len(), 16);
    assert_eq!(h, container_hash(&base.clone()), "stable");
    let mut resized = base.clone();
    resized.resources = None;
    assert_eq!(container_hash(&resized), h, "resources do not restart");
    for change in [
        json!({"image": "busybox:2"}),
        json!({"command": ["sleep", "2"]}),
        json!({"env": [{"name": "A", "value": "1"}]}),
        json!({"ports": [{"containerPort": 80}]}),
    ] {
        let mut value = serde_json::to_value(&base).unwrap();
        for (k, v) in change.as_object().unwrap() {
            value[k] = v.clone();
        }
        let changed: Container = serde_json::from_value(value).unwrap();
        assert_ne!(container_hash(&changed), h, "{change}");
    }
}
