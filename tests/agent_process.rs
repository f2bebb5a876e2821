//! The sync loop end to end on the real process runtime: manifests in a directory, the agent as
//! `runp agent --runtime=process` wires it, busybox fixture containers. Real time with short
//! back-off (first restart at once, then 1 s, 2 s); every wait is a hang guard only.
//!
//! Pods have loopback-only network namespaces (IP 127.0.0.1) until the pod network lands, so
//! the httpGet probe case uses a hostNetwork pod.

#[path = "support/agent.rs"]
mod support;

use std::collections::BTreeMap;
use support::{AgentEnv, wait_for, wait_for_async};

/// A pod of busybox containers: `containers` is the YAML list under `spec.containers`.
fn pod_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{app: {name}, tier: test}}\nspec:\n  terminationGracePeriodSeconds: 5\n{spec}"
    )
}

const IMAGE: &str = "image: busybox\n    imagePullPolicy: IfNotPresent";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_in_order_before_the_app() {
    let Some(env) = AgentEnv::for_test("init_containers_run_in_order_before_the_app").await else {
        return;
    };
    // init-b fails (and would be restarted) unless init-a finished first; the app records
    // itself last. All three append to a shared emptyDir.
    env.write(
        "init.yaml",
        &pod_yaml(
            "init",
            &format!(
                r#"  initContainers:
  - name: init-a
    {IMAGE}
    command: [sh, -c, "sleep 1; echo a >> /work/order"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  - name: init-b
    {IMAGE}
    command: [sh, -c, "grep -qx a /work/order || exit 7; echo b >> /work/order"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  containers:
  - name: app
    {IMAGE}
    command: [sh, -c, "echo app >> /work/order; exec sleep 1000"]
    volumeMounts: [{{name: work, mountPath: /work}}]
  volumes:
  - {{name: work, emptyDir: {{}}}}
"#
            ),
        ),
    );
    let agent = env.start();
    wait_for("init-a running or done", || {
        env.state("init", "init-a").is_some()
    })
    .await;
    // While init containers run the pod is Pending and not Initialized.
    let early = env.pod("init").unwrap().status.unwrap();
    if env.state("init", "app") != Some("running".into()) {
        assert_eq!(early.phase.as_deref(), Some("Pending"));
    }
    env.wait_ready(&agent, "init").await;
    assert_eq!(
        env.output("init", "app", &["cat", "/work/order"]).await,
        "a\nb\napp\n"
    );
    for init in ["init-a", "init-b"] {
        let status = env.container("init", init).unwrap();
        let terminated = status.state.unwrap().terminated.unwrap();
        assert_eq!(terminated.exit_code, 0, "{init}");
        assert_eq!(terminated.reason.as_deref(), Some("Completed"), "{init}");
        assert_eq!(status.restart_count, 0, "{init} ran once");
    }
    assert_eq!(
        env.condition("init", "Initialized").as_deref(),
        Some("True")
    );
    // The runtime agrees: init-a exited before init-b was created, init-b before the app.
    let a = env.instances("init", "init-a").await;
    let b = env.instances("init", "init-b").await;
    let app = env.instances("init", "app").await;
    assert_eq!((a.len(), b.len(), app.len()), (1, 1, 1));
    let a_done = env.container_status(&a[0].id).await.finished_at;
    let b_status = env.container_status(&b[0].id).await;
    assert!(
        a_done <= b_status.started_at,
        "init-b started before init-a ended"
    );
    assert!(
        b_status.finished_at <= app[0].created_at,
        "app created before init-b ended"
    );
    agent.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_loop_restarts_with_back_off() {
    let Some(env) = AgentEnv::for_test("crash_loop_restarts_with_back_off").await else {
        return;
    };
    env.write(
        "crash.yaml",
        &pod_yaml(
            "crash",
            &format!(
                "  containers:\n  - name: app\n    {IMAGE}\n    command: [sh, -c, \"echo run >> /work/runs; exit 3\"]\n    volumeMounts: [{{name: work, mountPath: /work}}]\n  volumes:\n  - {{name: work, emptyDir: {{}}}}\n"
            ),
        ),
    );
    let agent = env.start();
    wait_for("three restarts, then CrashLoopBackOff", || {
        env.container("crash", "app")
            .is_some_and(|c| c.restart_count >= 3)
            && env.state("crash", "app").as_deref() == Some("waiting:CrashLoopBackOff")
    })
    .await;
    let status = env.container("crash", "app").unwrap();
    let last = status
        .last_state
        .unwrap()
        .terminated
        .expect("lastState terminated");
    assert_eq!(last.exit_code, 3);
    assert_eq!(last.reason.as_deref(), Some("Error"));
    let waiting = status.state.unwrap().waiting.unwrap();
    assert!(
        waiting
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("back-off"),
        "{waiting:?}"
    );
    assert_eq!(env.phase("crash").as_deref(), Some("Running"));
    assert_eq!(env.condition("crash", "Ready").as_deref(), Some("False"));
    // Each run appended a line to the emptyDir, which outlives the containers.
    let runs = env
        .root()
        .join("var/pods")
        .join(env.uid("crash"))
        .join("volumes/kubernetes.io~empty-dir/work/runs");
    let lines = std::fs::read_to_string(&runs).unwrap().lines().count();
    assert!(lines > status.restart_count as usize, "{lines} runs");
    // The runtime keeps the dead instances (GC waits a minute): the first restart came at once
    // (not asserted: no timing upper bounds), the next ones waited out the back-off after the
    // previous death, 1 s then 2 s.
    let instances = env.instances("crash", "app").await;
    assert!(instances.len() >= 4, "{} instances", instances.len());
    let mut times = Vec::new();
    for c in &instances[..4] {
        let s = env.container_status(&c.id).await;
        assert_eq!(s.exit_code, 3);
        times.push((s.started_at, s.finished_at));
    }
    let waits: Vec<i64> = times.windows(2).map(|w| w[1].0 - w[0].1).collect();
    assert!(
        waits[1] >= 1_000_000_000 && waits[2] >= 2_000_000_000,
        "restart waits (ns) {waits:?}, want any, then >= 1 s, then >= 2 s"
    );
    agent.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_exec_liveness_probe_restarts_the_container() {
    let Some(env) = AgentEnv::for_test("failing_exec_liveness_probe_restarts_the_container").await
    else {
        return;
    };
    // The first instance marks itself broken; the next one is healthy. On SIGTERM the shell
    // exits 42, so lastState shows the graceful stop.
    env.write(
        "live.yaml",
        &pod_yaml(
            "live",
            &format!(
                r#"  containers:
  - name: app
    {IMAGE}
    command: [sh, -c]
    args:
    - |
      if [ -f /work/started ]; then rm -f /work/broken; else touch /work/started /work/broken; fi
      trap 'exit 42' TERM
      while true; do sleep 0.1; done
    volumeMounts: [{{name: work, mountPath: /work}}]
    livenessProbe:
      exec: {{command: [sh, -c, "test ! -f /work/broken"]}}
      initialDelaySeconds: 1
      periodSeconds: 1
      failureThreshold: 1
  volumes:
  - {{name: work, emptyDir: {{}}}}
"#
            ),
        ),
    );
    let agent = env.start();
    wait_for("restarted by the liveness probe and running again", || {
        env.container("live", "app")
            .is_some_and(|c| c.restart_count >= 1)
            && env.state("live", "app").as_deref() == Some("running")
    })
    .await;
    let status = env.container("live", "app").unwrap();
    let last = status.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 42, "stopped with SIGTERM: {last:?}");
    // The new instance is healthy: it removed the marker the probe checks.
    let (code, _, _) = env
        .exec("live", "app", &["test", "-f", "/work/broken"])
        .await;
    assert_eq!(code, 1);
    assert!(env.instances("live", "app").await.len() >= 2);
    agent.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_get_readiness_probe_on_a_host_network_pod() {
    let Some(env) = AgentEnv::for_test("http_get_readiness_probe_on_a_host_network_pod").await
    else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    env.write(
        "web.yaml",
        &pod_yaml(
            "web",
            &format!(
                r#"  hostNetwork: true
  containers:
  - name: httpd
    {IMAGE}
    command: [httpd, -f, -p, "127.0.0.1:{port}", -h, /www]
    volumeMounts: [{{name: www, mountPath: /www}}]
    readinessProbe:
      httpGet: {{path: /ready, port: {port}}}
      periodSeconds: 1
      failureThreshold: 1
  volumes:
  - {{name: www, emptyDir: {{}}}}
"#
            ),
        ),
    );
    let agent = env.start();
    wait_for("httpd running", || {
        env.state("web", "httpd").as_deref() == Some("running")
    })
    .await;
    // 404 until the file exists.
    let (code, _, _) = env
        .exec(
            "web",
            "httpd",
            &[
                "wget",
                "-q",
                "-O",
                "-",
                &format!("http://127.0.0.1:{port}/ready"),
            ],
        )
        .await;
    assert_ne!(code, 0, "/ready is served before it exists");
    assert_eq!(env.condition("web", "Ready").as_deref(), Some("False"));
    env.output("web", "httpd", &["sh", "-c", "echo ok > /www/ready"])
        .await;
    env.wait_ready(&agent, "web").await;
    let ip = env.pod("web").unwrap().status.unwrap().pod_ip;
    assert_eq!(
        ip.as_deref(),
        Some("127.0.0.1"),
        "hostNetwork pod has the node IP"
    );
    env.output("web", "httpd", &["rm", "/www/ready"]).await;
    wait_for("not ready once /ready is gone", || {
        env.condition("web", "Ready").as_deref() == Some("False")
    })
    .await;
    // Readiness never restarts a container.
    assert_eq!(env.container("web", "httpd").unwrap().restart_count, 0);
    agent.stop().await;
    env.cleanup().await;
}

const OBJECTS: &str = r#"apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: default}
data:
  color: blue
  size: "10"
  log.level: debug
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: default}
type: Opaque
stringData:
  user: admin
data:
  password: czNjcjN0
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_are_visible_inside_with_items_and_modes() {
    let Some(env) = AgentEnv::for_test("volumes_are_visible_inside_with_items_and_modes").await
    else {
        return;
    };
    env.write("objects.yaml", OBJECTS);
    env.write(
        "vol.yaml",
        &pod_yaml(
            "vol",
            &format!(
                r#"  containers:
  - name: app
    {IMAGE}
    command: [sleep, "1000"]
    resources: {{limits: {{memory: 64Mi}}}}
    volumeMounts:
    - {{name: cm, mountPath: /cm}}
    - {{name: cm-items, mountPath: /cm-items}}
    - {{name: secret, mountPath: /secret}}
    - {{name: scratch, mountPath: /scratch}}
    - {{name: downward, mountPath: /downward}}
    - {{name: all, mountPath: /projected}}
  volumes:
  - name: cm
    configMap: {{name: settings}}
  - name: cm-items
    configMap:
      name: settings
      defaultMode: 0640
      items:
      - {{key: color, path: colors/primary}}
      - {{key: size, path: size.txt, mode: 0400}}
  - name: secret
    secret: {{secretName: creds, defaultMode: 0600}}
  - name: scratch
    emptyDir: {{}}
  - name: downward
    downwardAPI:
      items:
      - path: labels
        fieldRef: {{fieldPath: metadata.labels}}
      - path: name
        fieldRef: {{fieldPath: metadata.name}}
        mode: 0444
      - path: mem
        resourceFieldRef: {{containerName: app, resource: limits.memory, divisor: 1Mi}}
  - name: all
    projected:
      defaultMode: 0644
      sources:
      - configMap: {{name: settings, items: [{{key: color, path: cm/color}}]}}
      - secret: {{name: creds, items: [{{key: user, path: secret/user, mode: 0400}}]}}
      - downwardAPI: {{items: [{{path: meta/namespace, fieldRef: {{fieldPath: metadata.namespace}}}}]}}
"#
            ),
        ),
    );
    let agent = env.start();
    env.wait_ready(&agent, "vol").await;
    let cat = |path: &'static str| {
        let env = &env;
        async move { env.output("vol", "app", &["cat", path]).await }
    };
    let mode = |path: &'static str| {
        let env = &env;
        async move {
            env.output("vol", "app", &["stat", "-L", "-c", "%a", path])
                .await
                .trim()
                .to_string()
        }
    };
    // configMap: every key, the default mode 0644.
    assert_eq!(cat("/cm/color").await, "blue");
    assert_eq!(cat("/cm/size").await, "10");
    assert_eq!(cat("/cm/log.level").await, "debug");
    assert_eq!(mode("/cm/color").await, "644");
    // items: only the listed keys at their paths, per-item and default modes.
    assert_eq!(cat("/cm-items/colors/primary").await, "blue");
    assert_eq!(cat("/cm-items/size.txt").await, "10");
    assert_eq!(mode("/cm-items/colors/primary").await, "640");
    assert_eq!(mode("/cm-items/size.txt").await, "400");
    let listing = env.output("vol", "app", &["ls", "/cm-items"]).await;
    assert_eq!(
        listing.split_whitespace().collect::<Vec<_>>(),
        ["colors", "size.txt"]
    );
    // secret: decoded data and stringData, mode 0600.
    assert_eq!(cat("/secret/password").await, "s3cr3t");
    assert_eq!(cat("/secret/user").await, "admin");
    assert_eq!(mode("/secret/password").await, "600");
    // API volumes are read-only; the emptyDir is writable.
    let (code, _, _) = env.exec("vol", "app", &["touch", "/cm/new"]).await;
    assert_ne!(code, 0, "configMap volume is writable");
    env.output("vol", "app", &["sh", "-c", "echo hi > /scratch/f"])
        .await;
    assert_eq!(cat("/scratch/f").await, "hi\n");
    // downwardAPI: labels (sorted key="value" lines), name, a resource in the divisor's unit.
    assert_eq!(cat("/downward/labels").await, "app=\"vol\"\ntier=\"test\"");
    assert_eq!(cat("/downward/name").await, "vol");
    assert_eq!(mode("/downward/name").await, "444");
    assert_eq!(cat("/downward/mem").await, "64");
    // projected: the three sources in one directory.
    assert_eq!(cat("/projected/cm/color").await, "blue");
    assert_eq!(cat("/projected/secret/user").await, "admin");
    assert_eq!(mode("/projected/secret/user").await, "400");
    assert_eq!(mode("/projected/cm/color").await, "644");
    assert_eq!(cat("/projected/meta/namespace").await, "default");
    agent.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_and_env_from_with_expansion_and_field_refs() {
    let Some(env) = AgentEnv::for_test("env_and_env_from_with_expansion_and_field_refs").await
    else {
        return;
    };
    env.write("objects.yaml", OBJECTS);
    env.write(
        "envs.yaml",
        &pod_yaml(
            "envs",
            &format!(
                r#"  containers:
  - name: app
    {IMAGE}
    command: [sleep, "1000"]
    resources: {{limits: {{cpu: 500m}}}}
    envFrom:
    - configMapRef: {{name: settings}}
      prefix: CM_
    - secretRef: {{name: creds}}
    env:
    - {{name: BASE, value: base}}
    - {{name: DERIVED, value: "$(BASE)-derived-$(color)"}}
    - {{name: ESCAPED, value: "$$(BASE)"}}
    - {{name: FROM_PREFIXED, value: "$(CM_size)-x"}}
    - {{name: UNKNOWN, value: "$(NOPE)"}}
    - {{name: CM_color, value: "overridden"}}
    - name: FROM_KEY
      valueFrom: {{configMapKeyRef: {{name: settings, key: size}}}}
    - name: SECRET_KEY
      valueFrom: {{secretKeyRef: {{name: creds, key: password}}}}
    - name: POD_NAME
      valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
    - name: POD_NAMESPACE
      valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}
    - name: POD_UID
      valueFrom: {{fieldRef: {{fieldPath: metadata.uid}}}}
    - name: NODE
      valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}
    - name: POD_IP
      valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
    - name: HOST_IP
      valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}
    - name: TIER
      valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['tier']"}}}}
    - name: CPU_MILLIS
      valueFrom: {{resourceFieldRef: {{resource: limits.cpu, divisor: 1m}}}}
    - {{name: NAMED, value: "$(POD_NAME).$(POD_NAMESPACE)"}}
"#
            ),
        ),
    );
    let agent = env.start();
    env.wait_ready(&agent, "envs").await;
    let printed = env.output("envs", "app", &["env"]).await;
    let vars: BTreeMap<&str, &str> = printed.lines().filter_map(|l| l.split_once('=')).collect();
    let uid = env.uid("envs");
    // The pod's own address: on the pod bridge under real root, the node's loopback otherwise.
    let pod_ip = env.pod("envs").unwrap().status.unwrap().pod_ip.unwrap();
    assert!(
        pod_ip.parse::<std::net::IpAddr>().is_ok(),
        "podIP {pod_ip:?}"
    );
    let want = [
        ("BASE", "base"),
        // $(color) names no variable (envFrom's prefix made it CM_color): kept literally, as
        // Kubernetes does. envFrom variables come first, so env may refer to them.
        ("DERIVED", "base-derived-$(color)"),
        ("FROM_PREFIXED", "10-x"),
        ("ESCAPED", "$(BASE)"),
        ("UNKNOWN", "$(NOPE)"),
        ("CM_color", "overridden"),
        ("CM_size", "10"),
        ("CM_log.level", "debug"),
        ("user", "admin"),
        ("password", "s3cr3t"),
        ("FROM_KEY", "10"),
        ("SECRET_KEY", "s3cr3t"),
        ("POD_NAME", "envs"),
        ("POD_NAMESPACE", "default"),
        ("POD_UID", uid.as_str()),
        ("NODE", "runp-node"),
        ("POD_IP", pod_ip.as_str()),
        ("HOST_IP", "127.0.0.1"),
        ("TIER", "test"),
        ("CPU_MILLIS", "500"),
        ("NAMED", "envs.default"),
    ];
    for (name, value) in want {
        assert_eq!(
            vars.get(name).copied(),
            Some(value),
            "{name} in:\n{printed}"
        );
    }
    // The image's own environment is kept.
    assert!(
        vars.get("PATH").is_some_and(|p| p.contains("/bin")),
        "{printed}"
    );
    agent.stop().await;
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_pod_stops_it_gracefully_and_cleans_up() {
    let Some(env) = AgentEnv::for_test("removing_the_pod_stops_it_gracefully_and_cleans_up").await
    else {
        return;
    };
    // The container records its SIGTERM in a hostPath directory, which outlives the pod.
    let witness = env.root().join("witness");
    std::fs::create_dir_all(&witness).unwrap();
    env.write(
        "bye.yaml",
        &pod_yaml(
            "bye",
            &format!(
                r#"  containers:
  - name: app
    {IMAGE}
    command: [sh, -c]
    args:
    - |
      trap 'echo graceful > /witness/app; exit 0' TERM
      while true; do sleep 0.1; done
    volumeMounts:
    - {{name: witness, mountPath: /witness}}
    - {{name: scratch, mountPath: /scratch}}
  volumes:
  - name: witness
    hostPath: {{path: {}, type: Directory}}
  - {{name: scratch, emptyDir: {{}}}}
"#,
                witness.display()
            ),
        ),
    );
    let agent = env.start();
    env.wait_ready(&agent, "bye").await;
    let uid = env.uid("bye");
    let pod_dir = env.root().join("var/pods").join(&uid);
    assert!(
        pod_dir
            .join("volumes/kubernetes.io~empty-dir/scratch")
            .is_dir()
    );
    let id = env.running_id("bye", "app").await;
    let pid_file = env
        .root()
        .join("rt/containers")
        .join(&id)
        .join("container.json");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pid_file).unwrap()).unwrap();
    let pid = record["process"]["pid"].as_i64().expect("container pid");
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());

    env.remove("bye.yaml");
    wait_for_async("the pod's sandbox removed", || async {
        env.sandboxes("bye").await.is_empty()
    })
    .await;
    let log_dir = env.root().join(format!("var/log/pods/default_bye_{uid}"));
    assert!(log_dir.is_dir() || !pod_dir.exists());
    wait_for("status file, pod dir and log dir removed", || {
        env.pod("bye").is_none() && !pod_dir.exists() && !log_dir.exists()
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(witness.join("app")).unwrap(),
        "graceful\n",
        "the container got SIGTERM and ran its handler"
    );
    assert!(env.instances("bye", "app").await.is_empty());
    assert!(!env.root().join("rt/containers").join(&id).exists());
    wait_for("container process gone", || {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    })
    .await;
    // Nothing of the pod stays mounted.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mountinfo.contains(&uid), "{mountinfo}");
    agent.stop().await;
}
