//! What pods reference, from a real control plane: ConfigMap volumes (updates reach the running
//! container), Secret env and envFrom, optional and missing references, the projected
//! service-account token (a TokenReview authenticates it), kube-root-ca.crt, and service
//! environment variables. Pods are created in the API as admin with `spec.nodeName` set (so the
//! Node authorizer lets the node read what they reference) and fed to `ApiObjects` by the test;
//! the agent reads through the node identity over the real ProcessRuntime.
//!
//! One control plane and one agent for all cases (sequential in one test). Needs root for the
//! process runtime (SKIP otherwise) and the control plane (must run in CI).

#[path = "support/k8s.rs"]
mod k8s;
#[path = "support/agent.rs"]
mod support;

use k8s::Cluster;
use k8s_openapi::api::core::v1::Pod;
use runp::cri::{ImageService, RuntimeService};
use runp::kubelet::apiclient::{ApiClient, ClientSource};
use runp::kubelet::clock::SystemClock;
use runp::kubelet::environment::PodConfigEnvironment;
use runp::kubelet::gc::images::ImageGcPolicy;
use runp::kubelet::objects::ApiObjects;
use runp::kubelet::podconfig::{ObjectSource, PodEvent, VolumeManager};
use runp::kubelet::{Agent, AgentParts};
use std::collections::BTreeMap;
use std::sync::Arc;
use support::{AgentEnv, wait_for, wait_for_async};
use tokio::sync::{mpsc, oneshot};

const NODE: &str = "objects-node";

/// `kubectl <args>` as admin with `input` on stdin; its stdout (it must succeed).
fn kubectl_stdin(cluster: &Cluster, args: &[&str], input: &str) -> String {
    let out = cluster.kubectl_stdin_as(&cluster.admin_kubeconfig(), args, input.as_bytes());
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The pod as the API has it (with its uid and admission's additions).
fn api_pod(cluster: &Cluster, name: &str) -> Pod {
    let json = cluster.kubectl_ok(&["get", "pod", name, "-o", "json"]);
    serde_json::from_str(&json).expect("a pod")
}

fn config_map(greeting: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app-config, namespace: default}}\ndata:\n  greeting: {greeting}\n"
    )
}

const OBJECTS: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: objects-node
---
apiVersion: v1
kind: Secret
metadata: {name: app-secret, namespace: default}
stringData: {password: s3cret, user: admin}
---
apiVersion: v1
kind: Service
metadata: {name: web-svc, namespace: default}
spec:
  ports:
  - {name: http, port: 8080, protocol: TCP}
"#;

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: objects-pod, namespace: default}
spec:
  nodeName: objects-node
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
    env:
    - name: PASSWORD
      valueFrom: {secretKeyRef: {name: app-secret, key: password}}
    - name: MAYBE_SECRET
      valueFrom: {secretKeyRef: {name: missing-secret, key: x, optional: true}}
    - name: MAYBE_KEY
      valueFrom: {configMapKeyRef: {name: app-config, key: nope, optional: true}}
    - {name: LINK, value: "$(WEB_SVC_SERVICE_HOST):$(WEB_SVC_SERVICE_PORT_HTTP)"}
    envFrom:
    - secretRef: {name: app-secret}
      prefix: S_
    - configMapRef: {name: missing-config, optional: true}
    volumeMounts:
    - {name: config, mountPath: /etc/app}
  volumes:
  - name: config
    configMap: {name: app-config}
"#;

/// A pod whose env needs a Secret that does not exist yet.
const BROKEN: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: broken-pod, namespace: default}
spec:
  nodeName: objects-node
  terminationGracePeriodSeconds: 2
  automountServiceAccountToken: false
  containers:
  - name: app
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
    env:
    - name: LATE
      valueFrom: {secretKeyRef: {name: late-secret, key: value}}
"#;

fn cluster_ip(cluster: &Cluster, service: &str) -> String {
    let ip = cluster.kubectl_ok(&[
        "get",
        "service",
        service,
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    assert!(!ip.is_empty(), "{service} has a cluster IP");
    ip
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn referenced_objects_tokens_and_service_env_from_the_api() {
    let test = "referenced_objects_tokens_and_service_env_from_the_api";
    let Some(env) = AgentEnv::for_test(test).await else {
        return;
    };
    let Some(cluster) = Cluster::start(test) else {
        return;
    };
    cluster.apply(OBJECTS);
    cluster.apply(&config_map("hello"));
    cluster.apply(POD);
    cluster.apply(BROKEN);

    let api = ApiClient::connect(&ClientSource::Kubeconfig(cluster.node_kubeconfig(NODE)))
        .await
        .expect("node client");
    let (pods_tx, pods_rx) = mpsc::channel(16);
    let (agent_tx, agent_rx) = mpsc::channel(16);
    let (objects, middleware) = ApiObjects::spawn(api, pods_rx, agent_tx);
    let mut config = env.config.clone();
    config.node_name = NODE.to_string();
    let agent = Agent::new(AgentParts {
        runtime: env.rt.clone() as Arc<dyn RuntimeService>,
        images: Arc::new(env.images.clone()) as Arc<dyn ImageService>,
        config: config.clone(),
        events: agent_rx,
        objects: objects.clone() as Arc<dyn ObjectSource>,
        environment: Arc::new(PodConfigEnvironment::new(
            VolumeManager::new(config.clone()),
            config.clone(),
        )),
        clock: Arc::new(SystemClock),
        image_gc: ImageGcPolicy::default(),
        metrics: Default::default(),
    });
    let handle = agent.handle();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let agent_task = tokio::spawn(agent.run(async {
        let _ = stop_rx.await;
    }));

    let pod = api_pod(&cluster, "objects-pod");
    let uid = pod.metadata.uid.clone().expect("uid");
    pods_tx.send(PodEvent::Upsert(Box::new(pod))).await.unwrap();
    let broken = api_pod(&cluster, "broken-pod");
    let broken_uid = broken.metadata.uid.clone().expect("uid");
    pods_tx
        .send(PodEvent::Upsert(Box::new(broken)))
        .await
        .unwrap();

    wait_for("objects-pod Running", || {
        env.phase("objects-pod").as_deref() == Some("Running")
            && env.state("objects-pod", "app").as_deref() == Some("running")
    })
    .await;

    // The ConfigMap volume, written with the atomic writer.
    let greeting = env
        .output("objects-pod", "app", &["cat", "/etc/app/greeting"])
        .await;
    assert_eq!(greeting, "hello");
    let listing = env
        .output("objects-pod", "app", &["ls", "-a", "/etc/app"])
        .await;
    assert!(listing.contains("..data"), "{listing}");

    // Secret env and envFrom; optional references that do not resolve are left out.
    let printed = env.output("objects-pod", "app", &["env"]).await;
    let vars: BTreeMap<&str, &str> = printed.lines().filter_map(|l| l.split_once('=')).collect();
    let web_ip = cluster_ip(&cluster, "web-svc");
    let kubernetes_ip = cluster_ip(&cluster, "kubernetes");
    let web_url = format!("tcp://{web_ip}:8080");
    let link = format!("{web_ip}:8080");
    let want = [
        ("PASSWORD", "s3cret"),
        ("S_password", "s3cret"),
        ("S_user", "admin"),
        ("KUBERNETES_SERVICE_HOST", kubernetes_ip.as_str()),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
        ("WEB_SVC_SERVICE_HOST", web_ip.as_str()),
        ("WEB_SVC_SERVICE_PORT", "8080"),
        ("WEB_SVC_SERVICE_PORT_HTTP", "8080"),
        ("WEB_SVC_PORT", web_url.as_str()),
        ("WEB_SVC_PORT_8080_TCP", web_url.as_str()),
        ("WEB_SVC_PORT_8080_TCP_PROTO", "tcp"),
        ("WEB_SVC_PORT_8080_TCP_PORT", "8080"),
        ("WEB_SVC_PORT_8080_TCP_ADDR", web_ip.as_str()),
        ("LINK", link.as_str()),
    ];
    for (name, value) in want {
        assert_eq!(
            vars.get(name).copied(),
            Some(value),
            "{name} in:\n{printed}"
        );
    }
    for absent in ["MAYBE_SECRET", "MAYBE_KEY"] {
        assert!(!vars.contains_key(absent), "{absent} in:\n{printed}");
    }

    // The service-account volume the ServiceAccount admission added: a bound token that the
    // API server authenticates, the cluster CA and the namespace.
    let sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    let token = env
        .output("objects-pod", "app", &["cat", &format!("{sa_dir}/token")])
        .await;
    let review = kubectl_stdin(
        &cluster,
        &["create", "-f", "-", "-o", "json"],
        &serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token.trim()}
        })
        .to_string(),
    );
    let review: serde_json::Value = serde_json::from_str(&review).unwrap();
    let status = &review["status"];
    assert_eq!(status["authenticated"], true, "{review:#}");
    assert_eq!(
        status["user"]["username"], "system:serviceaccount:default:default",
        "{review:#}"
    );
    let extra = &status["user"]["extra"];
    assert_eq!(
        extra["authentication.kubernetes.io/pod-name"][0], "objects-pod",
        "{review:#}"
    );
    assert_eq!(
        extra["authentication.kubernetes.io/pod-uid"][0],
        uid.as_str(),
        "{review:#}"
    );
    let ca = env
        .output("objects-pod", "app", &["cat", &format!("{sa_dir}/ca.crt")])
        .await;
    let cluster_ca = std::fs::read_to_string(cluster.var("K8S_CA")).unwrap();
    assert_eq!(
        ca.trim(),
        cluster_ca.trim(),
        "kube-root-ca.crt is the cluster CA"
    );
    let namespace = env
        .output(
            "objects-pod",
            "app",
            &["cat", &format!("{sa_dir}/namespace")],
        )
        .await;
    assert_eq!(namespace, "default");

    // A ConfigMap update reaches the mounted file of the running container.
    cluster.apply(&config_map("updated"));
    wait_for_async("the updated ConfigMap in the container", || async {
        env.exec("objects-pod", "app", &["cat", "/etc/app/greeting"])
            .await
            .1
            == "updated"
    })
    .await;

    // A missing required Secret: reported in the status, not started; it starts once the
    // Secret exists (its watch announces it).
    wait_for("broken-pod reports the missing Secret", || {
        env.container("broken-pod", "app")
            .and_then(|c| c.state?.waiting)
            .is_some_and(|w| {
                w.reason.as_deref() == Some("CreateContainerConfigError")
                    && w.message.unwrap_or_default().contains("late-secret")
            })
    })
    .await;
    assert!(env.instances("broken-pod", "app").await.is_empty());
    cluster.apply(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: late-secret, namespace: default}\nstringData: {value: here}\n",
    );
    wait_for("broken-pod starts once its Secret exists", || {
        env.state("broken-pod", "app").as_deref() == Some("running")
    })
    .await;
    let late = env.output("broken-pod", "app", &["env"]).await;
    assert!(late.lines().any(|l| l == "LATE=here"), "{late}");

    // Removing the pods drops their watches and tokens.
    let (config_maps, secrets, tokens) = objects.counts();
    assert!(
        config_maps >= 2 && secrets >= 3 && tokens == 1,
        "{:?}",
        objects.counts()
    );
    for uid in [uid, broken_uid] {
        pods_tx.send(PodEvent::Remove { uid }).await.unwrap();
    }
    wait_for("watches and tokens released", || {
        objects.counts() == (0, 0, 0)
    })
    .await;
    wait_for("pods terminated", || handle.pods().is_empty()).await;

    drop(pods_tx);
    let _ = middleware.await;
    let _ = stop_tx.send(());
    let _ = agent_task.await;
    env.cleanup().await;
}
