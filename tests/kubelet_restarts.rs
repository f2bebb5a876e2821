//! Crash-loop back-off timing, probes restarting containers, readiness, image pull back-off,
//! agent restart adoption and container GC — the agent on the fake runtime, paused time.

#[path = "support/kubelet.rs"]
mod support;

use runp::kubelet::fake::Behavior;
use support::*;

fn single(name: &str, container_yaml: &str) -> k8s_openapi::api::core::v1::Pod {
    pod(
        &format!("metadata: {{name: {name}}}\nspec:\n  containers:\n  - {container_yaml}\n"),
        &format!("uid-{name}"),
    )
}

#[tokio::test(start_paused = true)]
async fn crash_loop_back_off_doubles_to_the_cap() {
    let h = Harness::new();
    h.runtime.set_behavior(
        "app",
        Behavior::ExitAfter {
            after: secs(1),
            code: 1,
        },
    );
    let agent = h.start();
    apply(
        &agent,
        single("crash", r#"{name: app, image: "busybox:1.36"}"#),
    )
    .await;
    wait_until("8 starts", secs(1500), || {
        h.runtime.start_times("app").len() >= 8
    })
    .await;
    let starts = h.runtime.start_times("app");
    // Each instance runs 1 s; the wait after its death is the back-off (none after the first,
    // as kubelet).
    let waits_ms: Vec<i64> = starts
        .windows(2)
        .map(|w| (w[1] - w[0]) / 1_000_000 - 1000)
        .collect();
    let want = [0, 10, 20, 40, 80, 160, 300];
    for (got, want) in waits_ms.iter().zip(want) {
        assert!(
            (want * 1000..want * 1000 + 1000).contains(got),
            "back-off waits (ms) {waits_ms:?}, want {want:?} s"
        );
    }
    // Between restarts the status says why.
    wait_until("in back-off", secs(400), || {
        h.container("crash", "app")
            .is_some_and(|(state, _)| state == "waiting:CrashLoopBackOff")
    })
    .await;
    let (_, restarts) = h.container("crash", "app").unwrap();
    assert!(restarts >= 7, "restartCount {restarts}");
    assert_eq!(h.phase("crash").as_deref(), Some("Running"));
    // Container GC kept at most one dead instance next to the newest.
    assert!(
        h.runtime.count("app") <= 2,
        "{} instances kept",
        h.runtime.count("app")
    );
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn failing_liveness_probe_restarts_the_container() {
    let h = Harness::new();
    let agent = h.start();
    apply(
        &agent,
        single(
            "live",
            r#"{name: app, image: "busybox:1.36", livenessProbe: {exec: {command: [check]}, periodSeconds: 5, failureThreshold: 2}}"#,
        ),
    )
    .await;
    wait_until("running", secs(30), || h.runtime.running("app").len() == 1).await;
    let first = h.runtime.running("app")[0].clone();
    pass(secs(30)).await;
    assert_eq!(
        h.runtime.running("app"),
        vec![first.clone()],
        "healthy: not restarted"
    );
    assert!(
        h.runtime
            .calls()
            .iter()
            .any(|c| *c == format!("ExecSync {first} check"))
    );

    h.runtime.set_exec_exit_code("app", 1);
    wait_until("restarted", secs(60), || {
        h.runtime
            .running("app")
            .first()
            .is_some_and(|id| *id != first)
    })
    .await;
    h.runtime.set_exec_exit_code("app", 0);
    wait_until("restartCount 1", secs(30), || {
        h.container("live", "app") == Some(("running".into(), 1))
    })
    .await;
    let status = h.status("live").unwrap().status.unwrap();
    let last = status.container_statuses.unwrap()[0]
        .last_state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(last.exit_code, 143, "the killed instance is the last state");
    pass(secs(60)).await;
    assert_eq!(
        h.runtime.start_times("app").len(),
        2,
        "healthy again: no more restarts"
    );
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn readiness_probe_drives_the_ready_condition() {
    let h = Harness::new();
    h.runtime.set_exec_exit_code("app", 1);
    let agent = h.start();
    apply(
        &agent,
        single(
            "ready",
            r#"{name: app, image: "busybox:1.36", readinessProbe: {exec: {command: [ready]}, periodSeconds: 2}}"#,
        ),
    )
    .await;
    wait_until("running", secs(30), || {
        h.phase("ready").as_deref() == Some("Running")
    })
    .await;
    pass(secs(10)).await;
    assert_eq!(h.condition("ready", "Ready").as_deref(), Some("False"));
    h.runtime.set_exec_exit_code("app", 0);
    wait_until("ready", secs(10), || {
        h.condition("ready", "Ready").as_deref() == Some("True")
    })
    .await;
    h.runtime.set_exec_exit_code("app", 1);
    wait_until("unready after 3 failures", secs(20), || {
        h.condition("ready", "Ready").as_deref() == Some("False")
    })
    .await;
    assert_eq!(
        h.runtime.start_times("app").len(),
        1,
        "readiness never restarts"
    );
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn image_pull_failures_back_off_then_recover() {
    let h = Harness::new();
    h.runtime.set_pull_failure("registry.test/app:1", true);
    let agent = h.start();
    apply(
        &agent,
        single("pull", r#"{name: app, image: "registry.test/app:1"}"#),
    )
    .await;
    wait_until("ErrImagePull", secs(10), || {
        h.container("pull", "app")
            .is_some_and(|(s, _)| s == "waiting:ErrImagePull")
    })
    .await;
    wait_until("ImagePullBackOff", secs(15), || {
        h.container("pull", "app")
            .is_some_and(|(s, _)| s == "waiting:ImagePullBackOff")
    })
    .await;
    pass(secs(100)).await;
    let pulls = h.runtime.calls_starting("PullImage").len();
    // 10 + 20 + 40 s waits: 4 attempts in ~100 s, not one per sync.
    assert!((3..=5).contains(&pulls), "{pulls} pull attempts");
    h.runtime.set_pull_failure("registry.test/app:1", false);
    wait_until("running", secs(200), || {
        h.phase("pull").as_deref() == Some("Running")
    })
    .await;
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn agent_restart_adopts_running_containers() {
    let h = Harness::new();
    let web = || single("web", r#"{name: app, image: "busybox:1.36"}"#);
    let first = h.start();
    apply(&first, web()).await;
    wait_until("running", secs(30), || {
        h.phase("web").as_deref() == Some("Running")
    })
    .await;
    let id = h.runtime.running("app")[0].clone();
    first.stop().await;
    pass(secs(20)).await;
    assert_eq!(
        h.runtime.running("app"),
        vec![id.clone()],
        "agent shutdown leaves pods running"
    );

    let calls_before = h.runtime.calls().len();
    let second = h.start();
    apply(&second, web()).await;
    pass(secs(60)).await;
    assert_eq!(h.runtime.running("app"), vec![id], "adopted, not restarted");
    let new_calls: Vec<String> = h.runtime.calls()[calls_before..]
        .iter()
        .filter(|c| !c.starts_with("ExecSync") && !c.starts_with("ReopenContainerLog"))
        .cloned()
        .collect();
    assert!(
        new_calls.is_empty(),
        "no lifecycle calls after restart: {new_calls:?}"
    );
    assert_eq!(h.container("web", "app"), Some(("running".into(), 0)));
    second.stop().await;
}

#[tokio::test(start_paused = true)]
async fn pods_unknown_after_restart_are_removed() {
    let h = Harness::new();
    let first = h.start();
    apply(
        &first,
        single("keep", r#"{name: keep, image: "busybox:1.36"}"#),
    )
    .await;
    apply(
        &first,
        single("gone", r#"{name: gone, image: "busybox:1.36"}"#),
    )
    .await;
    wait_until("both running", secs(30), || {
        h.runtime.running("keep").len() == 1 && h.runtime.running("gone").len() == 1
    })
    .await;
    first.stop().await;

    // The manifest of "gone" was deleted while the agent was down.
    let second = h.start();
    apply(
        &second,
        single("keep", r#"{name: keep, image: "busybox:1.36"}"#),
    )
    .await;
    wait_until("orphan removed", secs(60), || h.runtime.count("gone") == 0).await;
    assert_eq!(h.runtime.running("keep").len(), 1);
    assert!(h.status("gone").is_none(), "stale status file removed");
    assert!(!h.config.pod_dir("uid-gone").exists());
    second.stop().await;
}

#[tokio::test(start_paused = true)]
async fn two_hundred_pods_converge() {
    let h = Harness::new();
    let agent = h.start();
    for i in 0..200 {
        apply(
            &agent,
            single(&format!("p{i}"), r#"{name: app, image: "busybox:1.36"}"#),
        )
        .await;
    }
    wait_until("200 running", secs(120), || {
        h.runtime.running("app").len() == 200
    })
    .await;
    wait_until("200 statuses Running", secs(60), || {
        (0..200).all(|i| h.phase(&format!("p{i}")).as_deref() == Some("Running"))
    })
    .await;
    assert_eq!(agent.handle.pods().len(), 200);
    assert!(agent.handle.health().is_ok());
    assert_eq!(h.runtime.ready_sandboxes(), 200);
    agent.stop().await;
}
