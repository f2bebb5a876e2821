//! The agent on the fake runtime (paused tokio time): init ordering, restart policies and
//! completion phases, spec changes, graceful removal.

#[path = "support/kubelet.rs"]
mod support;

use runp::kubelet::fake::Behavior;
use support::*;

#[tokio::test(start_paused = true)]
async fn init_containers_run_one_by_one_before_the_app() {
    let h = Harness::new();
    for init in ["init-a", "init-b"] {
        h.runtime.set_behavior(
            init,
            Behavior::ExitAfter {
                after: secs(3),
                code: 0,
            },
        );
    }
    let agent = h.start();
    apply(
        &agent,
        pod(
            r#"
metadata: {name: web}
spec:
  initContainers:
  - {name: init-a, image: "busybox:1.36"}
  - {name: init-b, image: "busybox:1.36"}
  containers:
  - {name: app, image: "busybox:1.36"}
"#,
            "uid-init",
        ),
    )
    .await;
    wait_until("init-a started", secs(30), || {
        h.runtime.start_order().len() == 1
    })
    .await;
    assert_eq!(h.phase("web").as_deref(), Some("Pending"));
    assert_eq!(h.condition("web", "Initialized").as_deref(), Some("False"));
    wait_until("web running", secs(60), || {
        h.phase("web").as_deref() == Some("Running")
    })
    .await;
    assert_eq!(h.runtime.start_order(), vec!["init-a", "init-b", "app"]);
    let a = h.runtime.start_times("init-a")[0];
    let b = h.runtime.start_times("init-b")[0];
    let app = h.runtime.start_times("app")[0];
    assert!(
        b - a >= 3_000_000_000,
        "init-b started before init-a finished"
    );
    assert!(
        app - b >= 3_000_000_000,
        "app started before init-b finished"
    );
    assert_eq!(h.condition("web", "Initialized").as_deref(), Some("True"));
    assert_eq!(h.condition("web", "Ready").as_deref(), Some("True"));
    assert_eq!(
        h.container("web", "init-a"),
        Some(("terminated:0".into(), 0))
    );
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn restart_policy_never_and_on_failure_completion_phases() {
    let h = Harness::new();
    h.runtime.set_behavior(
        "ok",
        Behavior::ExitAfter {
            after: secs(2),
            code: 0,
        },
    );
    h.runtime.set_behavior(
        "bad",
        Behavior::ExitAfter {
            after: secs(2),
            code: 3,
        },
    );
    h.runtime.set_behavior(
        "flaky",
        Behavior::ExitAfter {
            after: secs(2),
            code: 1,
        },
    );
    let agent = h.start();
    let never = |name: &str, ctr: &str| {
        pod(
            &format!(
                "metadata: {{name: {name}}}\nspec:\n  restartPolicy: Never\n  containers:\n  - {{name: {ctr}, image: \"busybox:1.36\"}}\n"
            ),
            &format!("uid-{name}"),
        )
    };
    apply(&agent, never("done", "ok")).await;
    apply(&agent, never("broken", "bad")).await;
    apply(
        &agent,
        pod(
            "metadata: {name: retry}\nspec:\n  restartPolicy: OnFailure\n  containers:\n  - {name: flaky, image: \"busybox:1.36\"}\n",
            "uid-retry",
        ),
    )
    .await;
    wait_until("done succeeded", secs(60), || {
        h.phase("done").as_deref() == Some("Succeeded")
    })
    .await;
    wait_until("broken failed", secs(60), || {
        h.phase("broken").as_deref() == Some("Failed")
    })
    .await;
    assert_eq!(
        h.container("broken", "bad"),
        Some(("terminated:3".into(), 0))
    );
    // Finished Never pods get their sandbox stopped and are not restarted.
    pass(secs(60)).await;
    assert_eq!(h.runtime.start_times("ok").len(), 1);
    assert_eq!(h.runtime.start_times("bad").len(), 1);

    // OnFailure: restarted after a failure, then completes.
    wait_until("flaky restarted", secs(60), || {
        h.runtime.start_times("flaky").len() >= 2
    })
    .await;
    h.runtime.set_behavior(
        "flaky",
        Behavior::ExitAfter {
            after: secs(2),
            code: 0,
        },
    );
    wait_until("retry done", secs(120), || {
        h.phase("retry").as_deref() == Some("Succeeded")
    })
    .await;
    let (state, restarts) = h.container("retry", "flaky").unwrap();
    assert_eq!(state, "terminated:0");
    assert!(restarts >= 1, "restartCount {restarts}");
    pass(secs(30)).await;
    assert_eq!(
        h.runtime.ready_sandboxes(),
        0,
        "completed pods keep no sandbox running"
    );
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn spec_change_replaces_the_container() {
    let h = Harness::new();
    let agent = h.start();
    let spec = |args: &str| {
        pod(
            &format!(
                "metadata: {{name: web}}\nspec:\n  containers:\n  - {{name: app, image: \"busybox:1.36\", args: [{args}]}}\n"
            ),
            "uid-web",
        )
    };
    apply(&agent, spec("one")).await;
    wait_until("running", secs(30), || h.runtime.running("app").len() == 1).await;
    let first = h.runtime.running("app")[0].clone();
    pass(secs(30)).await;
    assert_eq!(
        h.runtime.running("app"),
        vec![first.clone()],
        "unchanged spec: kept"
    );

    apply(&agent, spec("two")).await;
    wait_until("replaced", secs(30), || {
        h.runtime
            .running("app")
            .first()
            .is_some_and(|id| *id != first)
    })
    .await;
    assert_eq!(h.runtime.running("app").len(), 1);
    assert!(
        h.runtime
            .calls()
            .iter()
            .any(|c| c.starts_with(&format!("StopContainer {first}"))),
        "old container stopped"
    );
    assert_eq!(h.runtime.ready_sandboxes(), 1, "the sandbox is kept");
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn removal_stops_gracefully_with_pre_stop_and_cleans_up() {
    let h = Harness::new();
    let agent = h.start();
    apply(
        &agent,
        pod(
            r#"
metadata: {name: web}
spec:
  terminationGracePeriodSeconds: 20
  containers:
  - name: app
    image: "busybox:1.36"
    lifecycle:
      preStop:
        exec: {command: [sh, -c, "echo bye"]}
"#,
            "uid-web",
        ),
    )
    .await;
    wait_until("running", secs(30), || {
        h.phase("web").as_deref() == Some("Running")
    })
    .await;
    let id = h.runtime.running("app")[0].clone();
    let pod_dir = h.config.pod_dir("uid-web");
    assert!(pod_dir.exists());

    remove(&agent, "uid-web").await;
    wait_until("status removed", secs(60), || h.status("web").is_none()).await;
    let calls = h.runtime.calls();
    let pre_stop = calls
        .iter()
        .position(|c| *c == format!("ExecSync {id} sh -c echo bye"))
        .expect("preStop ran");
    let stop = calls
        .iter()
        .position(|c| *c == format!("StopContainer {id} 20"))
        .expect("stopped with the grace period");
    assert!(pre_stop < stop, "preStop before StopContainer: {calls:?}");
    assert!(calls.iter().any(|c| c.starts_with("StopPodSandbox")));
    assert!(calls.iter().any(|c| c.starts_with("RemovePodSandbox")));
    assert_eq!(h.runtime.count("app"), 0, "containers removed");
    assert!(!pod_dir.exists(), "pod directory removed");
    assert!(
        h.environment
            .calls
            .lock()
            .unwrap()
            .contains(&"teardown uid-web".to_string())
    );
    assert!(agent.handle.pods().is_empty());
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn volumes_and_termination_message_with_the_real_volume_manager() {
    let mut h = Harness::new();
    h.real_volumes = true;
    h.runtime.set_behavior(
        "app",
        Behavior::ExitAfter {
            after: secs(5),
            code: 2,
        },
    );
    let agent = h.start();
    apply(
        &agent,
        pod(
            r#"
metadata: {name: job}
spec:
  restartPolicy: Never
  volumes:
  - {name: scratch, emptyDir: {}}
  containers:
  - name: app
    image: "busybox:1.36"
    terminationMessagePath: /dev/termination-log
    volumeMounts:
    - {name: scratch, mountPath: /scratch}
"#,
            "uid-job",
        ),
    )
    .await;
    wait_until("started", secs(10), || h.runtime.running("app").len() == 1).await;
    let id = h.runtime.running("app")[0].clone();
    let mounts = h.runtime.container_config(&id).unwrap().mounts;
    let scratch = mounts
        .iter()
        .find(|m| m.container_path == "/scratch")
        .expect("emptyDir mounted");
    assert!(std::path::Path::new(&scratch.host_path).is_dir());
    assert!(
        scratch
            .host_path
            .starts_with(&*h.config.pod_dir("uid-job").to_string_lossy())
    );
    let message = mounts
        .iter()
        .find(|m| m.container_path == "/dev/termination-log")
        .expect("termination message file mounted");
    // What the container would write before exiting.
    std::fs::write(&message.host_path, "disk full").unwrap();
    wait_until("failed", secs(30), || {
        h.phase("job").as_deref() == Some("Failed")
    })
    .await;
    let status = h.status("job").unwrap().status.unwrap();
    let terminated = status.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(terminated.exit_code, 2);
    assert_eq!(terminated.message.as_deref(), Some("disk full"));
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn failed_post_start_hook_kills_the_container() {
    let h = Harness::new();
    h.runtime.set_exec_exit_code("app", 1);
    let agent = h.start();
    apply(
        &agent,
        pod(
            r#"
metadata: {name: hooked}
spec:
  containers:
  - name: app
    image: "busybox:1.36"
    lifecycle:
      postStart:
        exec: {command: [setup]}
"#,
            "uid-hooked",
        ),
    )
    .await;
    // The sync right after the failure shows waiting:PostStartHookError; the PLEG event of the
    // killed container may bring the next sync (at once for a first crash, then in back-off)
    // before the status is written, so either reason stands for the failed hook here.
    wait_until("hook failure reported", secs(30), || {
        !h.pod_events.with_reason("FailedPostStartHook").is_empty()
            && h.container("hooked", "app").is_some_and(|(state, _)| {
                ["waiting:PostStartHookError", "waiting:CrashLoopBackOff"].contains(&state.as_str())
            })
    })
    .await;
    let first = h.runtime.start_times("app").len();
    assert!(first >= 1);
    assert_eq!(
        h.runtime.running("app").len(),
        0,
        "killed after the failed hook"
    );
    let calls = h.runtime.calls();
    let exec = calls
        .iter()
        .position(|c| c.ends_with(" setup"))
        .expect("hook ran");
    assert!(calls[exec..].iter().any(|c| c.starts_with("StopContainer")));
    // Fixed: the next attempt (after its back-off) stays up.
    h.runtime.set_exec_exit_code("app", 0);
    wait_until("running", secs(60), || h.runtime.running("app").len() == 1).await;
    wait_until("status running", secs(30), || {
        h.container("hooked", "app")
            .is_some_and(|(state, restarts)| state == "running" && restarts >= 1)
    })
    .await;
    agent.stop().await;
}
