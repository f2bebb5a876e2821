//! The pod events the sync loop records (kubelet's reasons, notes and fieldPaths), on the fake
//! runtime with paused tokio time.

#[path = "support/kubelet.rs"]
mod support;

use runp::kubelet::fake::Behavior;
use support::*;

#[tokio::test(start_paused = true)]
async fn a_pod_start_records_pulled_created_started_and_its_stop_killing() {
    let h = Harness::new();
    let agent = h.start();
    apply(
        &agent,
        pod(
            r#"
metadata: {name: web}
spec:
  initContainers:
  - {name: setup, image: "busybox:1.36"}
  containers:
  - {name: app, image: "busybox:1.36"}
"#,
            "uid-events",
        ),
    )
    .await;
    h.runtime.set_behavior(
        "setup",
        Behavior::ExitAfter {
            after: secs(1),
            code: 0,
        },
    );
    wait_until("web running", secs(60), || {
        h.phase("web").as_deref() == Some("Running")
    })
    .await;
    let started = h.pod_events.with_reason("Started");
    assert_eq!(
        started,
        vec![
            (
                "Started container setup".to_string(),
                Some("spec.initContainers{setup}".to_string())
            ),
            (
                "Started container app".to_string(),
                Some("spec.containers{app}".to_string())
            ),
        ]
    );
    assert!(h.pod_events.with_reason("Created").contains(&(
        "Created container: app".into(),
        Some("spec.containers{app}".into())
    )));
    assert!(h.pod_events.with_reason("Pulled").contains(&(
        "Container image \"busybox:1.36\" already present on machine".into(),
        Some("spec.containers{app}".into())
    )));
    // Created comes before Started for each container.
    let reasons = h.pod_events.reasons();
    let pos = |r: &str| reasons.iter().rposition(|x| x == r).unwrap();
    assert!(pos("Created") < pos("Started"), "{reasons:?}");

    remove(&agent, "uid-events").await;
    wait_until("web stopped", secs(60), || {
        h.runtime.running("app").is_empty()
    })
    .await;
    assert_eq!(
        h.pod_events.with_reason("Killing"),
        vec![(
            "Stopping container app".to_string(),
            Some("spec.containers{app}".to_string())
        )]
    );
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn crash_loops_failed_probes_and_missing_images_are_warnings() {
    let h = Harness::new();
    h.runtime.set_behavior(
        "crash",
        Behavior::ExitAfter {
            after: secs(1),
            code: 1,
        },
    );
    h.runtime.set_exec_exit_code("unready", 1);
    let agent = h.start();
    apply(
        &agent,
        pod(
            r#"
metadata: {name: bad}
spec:
  containers:
  - {name: crash, image: "busybox:1.36"}
  - name: unready
    image: "busybox:1.36"
    readinessProbe: {exec: {command: ["false"]}, periodSeconds: 1}
  - {name: never, image: "missing:1", imagePullPolicy: Never}
"#,
            "uid-bad",
        ),
    )
    .await;
    wait_until("crash restarted twice", secs(120), || {
        h.runtime.count("crash") >= 3
    })
    .await;
    let warnings: Vec<(String, String, Option<String>)> = h
        .pod_events
        .all()
        .into_iter()
        .filter(|e| e.warning)
        .map(|e| (e.reason, e.note, e.field_path))
        .collect();
    let has = |reason: &str, note: &str, container: &str| {
        warnings.iter().any(|(r, n, f)| {
            r == reason
                && n.starts_with(note)
                && f.as_deref() == Some(&format!("spec.containers{{{container}}}"))
        })
    };
    assert!(
        has(
            "BackOff",
            "Back-off restarting failed container crash in pod bad_default(uid-bad)",
            "crash"
        ),
        "{warnings:?}"
    );
    assert!(
        has("Unhealthy", "Readiness probe failed:", "unready"),
        "{warnings:?}"
    );
    assert!(
        has(
            "ErrImageNeverPull",
            "Container image \"missing:1\" is not present with pull policy of Never",
            "never"
        ),
        "{warnings:?}"
    );
    assert!(
        has("Failed", "Error: Container image \"missing:1\"", "never"),
        "{warnings:?}"
    );
    // Normal events are never warnings.
    assert!(
        !warnings
            .iter()
            .any(|(r, _, _)| r == "Started" || r == "Created")
    );
    agent.stop().await;
}
