//! Table tests of `compute_pod_actions` (in the style of the kubelet's TestComputePodActions).

use super::*;
use crate::kubelet::prober::results::ProbeResult;
use std::time::UNIX_EPOCH;

const UID: &str = "uid-1";

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn pod(policy: &str, inits: &[&str], containers: &[&str]) -> Pod {
    let make = |names: &[&str]| -> Vec<serde_json::Value> {
        names
            .iter()
            .map(|n| serde_json::json!({"name": n, "image": format!("img-{n}")}))
            .collect()
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": UID},
        "spec": {
            "restartPolicy": policy,
            "initContainers": make(inits),
            "containers": make(containers),
        }
    }))
    .unwrap()
}

fn spec_container(pod: &Pod, name: &str) -> Container {
    let spec = pod.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap()
        .clone()
}

fn sandbox(id: &str, attempt: u32, ready: bool) -> SandboxView {
    SandboxView {
        id: id.into(),
        attempt,
        ready,
        created_at: Some(at(attempt.into())),
        ips: vec!["127.0.0.1".into()],
        host_network: false,
    }
}

/// Container instance `id` of `name`; `exit` is `Some(code)` for an exited one (finished at
/// `finished` seconds).
fn ctr(
    pod: &Pod,
    id: &str,
    name: &str,
    state: RunState,
    exit: i32,
    finished: u64,
) -> ContainerView {
    ContainerView {
        id: id.into(),
        name: name.into(),
        sandbox_id: "sb1".into(),
        state,
        created_at: Some(at(0)),
        started_at: Some(at(0)),
        finished_at: (state == RunState::Exited).then(|| at(finished)),
        exit_code: exit,
        image: format!("img-{name}"),
        image_ref: "sha256:abc".into(),
        hash: Some(container_hash(&spec_container(pod, name))),
        ..Default::default()
    }
}

fn running(pod: &Pod, name: &str) -> ContainerView {
    ctr(pod, &format!("{name}-r"), name, RunState::Running, 0, 0)
}

fn exited(pod: &Pod, name: &str, code: i32) -> ContainerView {
    ctr(pod, &format!("{name}-x"), name, RunState::Exited, code, 100)
}

fn rt(sandboxes: Vec<SandboxView>, containers: Vec<ContainerView>) -> RuntimePod {
    RuntimePod {
        uid: UID.into(),
        sandboxes,
        containers,
    }
}

fn start(name: &str) -> StartAction {
    StartAction {
        name: name.into(),
        after_exit: false,
    }
}

fn restart(name: &str) -> StartAction {
    StartAction {
        name: name.into(),
        after_exit: true,
    }
}

fn killed(id: &str, name: &str, reason: KillReason, restarted: bool) -> KillAction {
    let mut message = reason.describe(name);
    if restarted {
        message.push_str(", will be restarted");
    }
    KillAction {
        container_id: id.into(),
        name: name.into(),
        reason,
        message,
    }
}

fn in_sandbox() -> PodActions {
    PodActions {
        sandbox_id: Some("sb1".into()),
        ..Default::default()
    }
}

struct Case {
    name: &'static str,
    pod: Pod,
    rt: RuntimePod,
    now: u64,
    probes: ProbeResults,
    want: PodActions,
}

fn table() -> Backoff {
    Backoff::new(Duration::from_secs(10), Duration::from_secs(300))
}

fn key(name: &str) -> BackoffKey {
    BackoffKey::new(UID, name, &format!("img-{name}"))
}

/// Every container was restarted once at 50 s: an exit at 100 s waits the initial 10 s.
fn check(cases: Vec<Case>) {
    let mut backoff = table();
    for name in ["a", "b", "i1", "i2"] {
        backoff.record_retry(&key(name), at(50), at(50));
    }
    for case in cases {
        let got = compute_pod_actions(&case.pod, &case.rt, at(case.now), &backoff, &case.probes);
        assert_eq!(got, case.want, "case: {}", case.name);
    }
}

fn probes(id: &str, kind: ProbeKind, result: ProbeResult) -> ProbeResults {
    let mut p = ProbeResults::default();
    p.set(id, kind, result);
    p
}

#[test]
fn sandbox_and_main_containers() {
    let always = pod("Always", &[], &["a", "b"]);
    let never = pod("Never", &[], &["a", "b"]);
    let on_failure = pod("OnFailure", &[], &["a", "b"]);
    let ready = || vec![sandbox("sb1", 0, true)];
    check(vec![
        Case {
            name: "new pod: create sandbox, start every container",
            pod: always.clone(),
            rt: rt(vec![], vec![]),
            now: 0,
            probes: ProbeResults::default(),
            want: PodActions {
                create_sandbox: Some(0),
                containers_to_start: vec![start("a"), start("b")],
                ..Default::default()
            },
        },
        Case {
            name: "all running: nothing to do",
            pod: always.clone(),
            rt: rt(ready(), vec![running(&always, "a"), running(&always, "b")]),
            now: 0,
            probes: ProbeResults::default(),
            want: in_sandbox(),
        },
        Case {
            name: "sandbox died: kill everything, new sandbox attempt 1",
            pod: always.clone(),
            rt: rt(
                vec![sandbox("sb1", 0, false)],
                vec![running(&always, "a"), exited(&always, "b", 1)],
            ),
            now: 200,
            probes: ProbeResults::default(),
            want: PodActions {
                kill_pod: true,
                create_sandbox: Some(1),
                containers_to_start: vec![start("a"), restart("b")],
                ..Default::default()
            },
        },
        Case {
            name: "two ready sandboxes: recreate",
            pod: always.clone(),
            rt: rt(
                vec![sandbox("sb2", 1, true), sandbox("sb1", 0, true)],
                vec![running(&always, "a"), running(&always, "b")],
            ),
            now: 0,
            probes: ProbeResults::default(),
            want: PodActions {
                kill_pod: true,
                create_sandbox: Some(2),
                containers_to_start: vec![start("a"), start("b")],
                ..Default::default()
            },
        },
        Case {
            name: "Always: an exited container restarts once its back-off passed",
            pod: always.clone(),
            rt: rt(
                ready(),
                vec![running(&always, "a"), exited(&always, "b", 0)],
            ),
            now: 110,
            probes: ProbeResults::default(),
            want: PodActions {
                containers_to_start: vec![restart("b")],
                ..in_sandbox()
            },
        },
        Case {
            name: "Always: an exited container waits in CrashLoopBackOff",
            pod: always.clone(),
            rt: rt(
                ready(),
                vec![running(&always, "a"), exited(&always, "b", 2)],
            ),
            now: 104,
            probes: ProbeResults::default(),
            want: PodActions {
                backing_off: vec![BackingOff {
                    name: "b".into(),
                    is_init: false,
                    retry_in: Duration::from_secs(6),
                    message: format!(
                        "back-off 10s restarting failed container=b pod=web_default({UID})"
                    ),
                }],
                ..in_sandbox()
            },
        },
        Case {
            name: "Always: all exited and backing off: the pod is not killed",
            pod: always.clone(),
            rt: rt(
                ready(),
                vec![exited(&always, "a", 1), exited(&always, "b", 1)],
            ),
            now: 101,
            probes: ProbeResults::default(),
            want: PodActions {
                backing_off: ["a", "b"]
                    .iter()
                    .map(|n| BackingOff {
                        name: n.to_string(),
                        is_init: false,
                        retry_in: Duration::from_secs(9),
                        message: format!(
                            "back-off 10s restarting failed container={n} pod=web_default({UID})"
                        ),
                    })
                    .collect(),
                ..in_sandbox()
            },
        },
        Case {
            name: "OnFailure: a failed container restarts, a succeeded one does not",
            pod: on_failure.clone(),
            rt: rt(
                ready(),
                vec![exited(&on_failure, "a", 0), exited(&on_failure, "b", 3)],
            ),
            now: 500,
            probes: ProbeResults::default(),
            want: PodActions {
                containers_to_start: vec![restart("b")],
                ..in_sandbox()
            },
        },
        Case {
            name: "OnFailure: all succeeded: kill the pod",
            pod: on_failure.clone(),
            rt: rt(
                ready(),
                vec![exited(&on_failure, "a", 0), exited(&on_failure, "b", 0)],
            ),
            now: 500,
            probes: ProbeResults::default(),
            want: PodActions {
                kill_pod: true,
                ..in_sandbox()
            },
        },
        Case {
            name: "OnFailure: sandbox gone and all succeeded: nothing, not even a sandbox",
            pod: on_failure.clone(),
            rt: rt(
                vec![sandbox("sb1", 0, false)],
                vec![exited(&on_failure, "a", 0), exited(&on_failure, "b", 0)],
            ),
            now: 500,
            probes: ProbeResults::default(),
            want: PodActions::default(),
        },
        Case {
            name: "OnFailure: sandbox gone, one failed: new sandbox, only the failed one",
            pod: on_failure.clone(),
            rt: rt(
                vec![sandbox("sb1", 0, false)],
                vec![exited(&on_failure, "a", 0), exited(&on_failure, "b", 1)],
            ),
            now: 500,
            probes: ProbeResults::default(),
            want: PodActions {
                create_sandbox: Some(1),
                containers_to_start: vec![restart("b")],
                ..Default::default()
            },
        },
        Case {
            name: "Never: one exited, one running: keep going",
            pod: never.clone(),
            rt: rt(ready(), vec![exited(&never, "a", 1), running(&never, "b")]),
            now: 500,
            probes: ProbeResults::default(),
            want: in_sandbox(),
        },
        Case {
            name: "Never: all exited: kill the pod (sandbox stopped)",
            pod: never.clone(),
            rt: rt(
                ready(),
                vec![exited(&never, "a", 1), exited(&never, "b", 0)],
            ),
            now: 500,
            probes: ProbeResults::default(),
            want: PodActions {
                kill_pod: true,
                ..in_sandbox()
            },
        },
        Case {
            name: "Never: finished and stopped: nothing more",
            pod: never.clone(),
            rt: rt(
                vec![sandbox("sb1", 0, false)],
                vec![exited(&never, "a", 1), exited(&never, "b", 0)],
            ),
            now: 500,
            probes: ProbeResults::default(),
            want: PodActions::default(),
        },
        Case {
            name: "Never: sandbox died while running: kill, no new sandbox",
            pod: never.clone(),
            rt: rt(vec![sandbox("sb1", 0, false)], vec![running(&never, "a")]),
            now: 500,
            probes: ProbeResults::default(),
            want: PodActions {
                kill_pod: true,
                ..Default::default()
            },
        },
        Case {
            name: "unknown state: kill it and start a new one",
            pod: always.clone(),
            rt: rt(
                ready(),
                vec![
                    running(&always, "a"),
                    ctr(&always, "b-u", "b", RunState::Unknown, 0, 0),
                ],
            ),
            now: 0,
            probes: ProbeResults::default(),
            want: PodActions {
                containers_to_start: vec![start("b")],
                containers_to_kill: vec![killed("b-u", "b", KillReason::UnknownState, false)],
                ..in_sandbox()
            },
        },
    ]);
}

#[test]
fn kills_with_reasons() {
    let always = pod("Always", &[], &["a", "b"]);
    let never = pod("Never", &[], &["a"]);
    let ready = || vec![sandbox("sb1", 0, true)];
    let mut changed = running(&always, "a");
    changed.hash = Some("0000".into());
    let mut unhashed = running(&always, "a");
    unhashed.hash = None;
    let mut stale = running(&always, "b");
    stale.id = "b-old".into();
    stale.created_at = Some(at(0));
    let mut fresh = running(&always, "b");
    fresh.created_at = Some(at(5));
    check(vec![
        Case {
            name: "spec hash changed: replace",
            pod: always.clone(),
            rt: rt(ready(), vec![changed, running(&always, "b")]),
            now: 0,
            probes: ProbeResults::default(),
            want: PodActions {
                containers_to_start: vec![start("a")],
                containers_to_kill: vec![killed("a-r", "a", KillReason::SpecChanged, true)],
                ..in_sandbox()
            },
        },
        Case {
            name: "no hash annotation: keep (adopted as is)",
            pod: always.clone(),
            rt: rt(ready(), vec![unhashed, running(&always, "b")]),
            now: 0,
            probes: ProbeResults::default(),
            want: in_sandbox(),
        },
        Case {
            name: "liveness failed: restart",
            pod: always.clone(),
            rt: rt(ready(), vec![running(&always, "a"), running(&always, "b")]),
            now: 0,
            probes: probes("b-r", ProbeKind::Liveness, ProbeResult::Failure),
            want: PodActions {
                containers_to_start: vec![start("b")],
                containers_to_kill: vec![killed("b-r", "b", KillReason::LivenessFailed, true)],
                ..in_sandbox()
            },
        },
        Case {
            name: "liveness succeeded or unknown: keep",
            pod: always.clone(),
            rt: rt(ready(), vec![running(&always, "a"), running(&always, "b")]),
            now: 0,
            probes: probes("b-r", ProbeKind::Liveness, ProbeResult::Success),
            want: in_sandbox(),
        },
        Case {
            name: "readiness failure never kills",
            pod: always.clone(),
            rt: rt(ready(), vec![running(&always, "a"), running(&always, "b")]),
            now: 0,
            probes: probes("a-r", ProbeKind::Readiness, ProbeResult::Failure),
            want: in_sandbox(),
        },
        Case {
            name: "startup failed: restart",
            pod: always.clone(),
            rt: rt(ready(), vec![running(&always, "a"), running(&always, "b")]),
            now: 0,
            probes: probes("a-r", ProbeKind::Startup, ProbeResult::Failure),
            want: PodActions {
                containers_to_start: vec![start("a")],
                containers_to_kill: vec![killed("a-r", "a", KillReason::StartupFailed, true)],
                ..in_sandbox()
            },
        },
        Case {
            name: "Never: liveness failure kills without restart, then the pod is killed",
            pod: never.clone(),
            rt: rt(ready(), vec![running(&never, "a")]),
            now: 0,
            probes: probes("a-r", ProbeKind::Liveness, ProbeResult::Failure),
            want: PodActions {
                kill_pod: true,
                containers_to_kill: vec![killed("a-r", "a", KillReason::LivenessFailed, false)],
                ..in_sandbox()
            },
        },
        Case {
            name: "container not in spec: killed",
            pod: never.clone(),
            rt: rt(ready(), vec![running(&never, "a"), running(&always, "b")]),
            now: 0,
            probes: ProbeResults::default(),
            want: PodActions {
                containers_to_kill: vec![killed("b-r", "b", KillReason::NotInSpec, false)],
                ..in_sandbox()
            },
        },
        Case {
            name: "an older instance still running next to the newest: killed",
            pod: always.clone(),
            rt: rt(ready(), vec![fresh, running(&always, "a"), stale]),
            now: 0,
            probes: ProbeResults::default(),
            want: PodActions {
                containers_to_kill: vec![killed("b-old", "b", KillReason::Superseded, false)],
                ..in_sandbox()
            },
        },
    ]);
}

#[test]
fn init_containers_run_one_by_one() {
    let always = pod("Always", &["i1", "i2"], &["a"]);
    let never = pod("Never", &["i1", "i2"], &["a"]);
    let ready = || vec![sandbox("sb1", 0, true)];
    let init = |name: &str| StartAction {
        name: name.into(),
        after_exit: false,
    };
    check(vec![
        Case {
            name: "new pod: sandbox and the first init container only",
            pod: always.clone(),
            rt: rt(vec![], vec![]),
            now: 0,
            probes: ProbeResults::default(),
            want: PodActions {
                create_sandbox: Some(0),
                next_init_container: Some(init("i1")),
                ..Default::default()
            },
        },
        Case {
            name: "first init running: wait",
            pod: always.clone(),
            rt: rt(ready(), vec![running(&always, "i1")]),
            now: 0,
            probes: ProbeResults::default(),
            want: in_sandbox(),
        },
        Case {
            name: "first init succeeded: the second",
            pod: always.clone(),
            rt: rt(ready(), vec![exited(&always, "i1", 0)]),
            now: 100,
            probes: ProbeResults::default(),
            want: PodActions {
                next_init_container: Some(init("i2")),
                ..in_sandbox()
            },
        },
        Case {
            name: "all init succeeded: main containers",
            pod: always.clone(),
            rt: rt(
                ready(),
                vec![exited(&always, "i2", 0), exited(&always, "i1", 0)],
            ),
            now: 100,
            probes: ProbeResults::default(),
            want: PodActions {
                containers_to_start: vec![start("a")],
                ..in_sandbox()
            },
        },
        Case {
            name: "init failed, Always: retried after back-off",
            pod: always.clone(),
            rt: rt(
                ready(),
                vec![exited(&always, "i2", 1), exited(&always, "i1", 0)],
            ),
            now: 110,
            probes: ProbeResults::default(),
            want: PodActions {
                next_init_container: Some(restart("i2")),
                ..in_sandbox()
            },
        },
        Case {
            name: "init failed, Always: in back-off",
            pod: always.clone(),
            rt: rt(
                ready(),
                vec![exited(&always, "i2", 1), exited(&always, "i1", 0)],
            ),
            now: 103,
            probes: ProbeResults::default(),
            want: PodActions {
                backing_off: vec![BackingOff {
                    name: "i2".into(),
                    is_init: true,
                    retry_in: Duration::from_secs(7),
                    message: format!(
                        "back-off 10s restarting failed container=i2 pod=web_default({UID})"
                    ),
                }],
                ..in_sandbox()
            },
        },
        Case {
            name: "init failed, Never: the pod is killed",
            pod: never.clone(),
            rt: rt(ready(), vec![exited(&never, "i1", 1)]),
            now: 500,
            probes: ProbeResults::default(),
            want: PodActions {
                kill_pod: true,
                ..in_sandbox()
            },
        },
        Case {
            name: "main container running: init is done even if init statuses were collected",
            pod: always.clone(),
            rt: rt(ready(), vec![running(&always, "a")]),
            now: 0,
            probes: ProbeResults::default(),
            want: in_sandbox(),
        },
        Case {
            name: "sandbox recreated: init containers run again from the first",
            pod: always.clone(),
            rt: rt(
                vec![sandbox("sb1", 0, false)],
                vec![
                    exited(&always, "a", 1),
                    exited(&always, "i2", 0),
                    exited(&always, "i1", 0),
                ],
            ),
            now: 500,
            probes: ProbeResults::default(),
            want: PodActions {
                create_sandbox: Some(1),
                next_init_container: Some(restart("i1")),
                ..Default::default()
            },
        },
    ]);
}

#[test]
fn requeue_is_the_earliest_back_off() {
    let actions = PodActions {
        backing_off: [7, 3, 9]
            .iter()
            .map(|s| BackingOff {
                name: "x".into(),
                is_init: false,
                retry_in: Duration::from_secs(*s),
                message: String::new(),
            })
            .collect(),
        ..Default::default()
    };
    assert_eq!(actions.requeue_after(), Some(Duration::from_secs(3)));
    assert!(actions.is_noop());
    assert!(
        !PodActions {
            kill_pod: true,
            ..Default::default()
        }
        .is_noop()
    );
}

/// kubelet's `doBackOff`: a container's first death restarts it at once (no back-off entry
/// yet), later ones wait 10 s doubling, and one that ran fine for 10 min starts over.
#[test]
fn first_crash_restarts_at_once_then_backs_off() {
    struct Crash {
        name: &'static str,
        restarts_at: &'static [u64],
        finished: u64,
        now: u64,
        want: Result<(), (u64, u64)>,
    }
    let cases = [
        Crash {
            name: "first crash: restarted at once",
            restarts_at: &[],
            finished: 100,
            now: 100,
            want: Ok(()),
        },
        Crash {
            name: "second crash: 10 s",
            restarts_at: &[50],
            finished: 100,
            now: 104,
            want: Err((6, 10)),
        },
        Crash {
            name: "third crash: 20 s",
            restarts_at: &[30, 50],
            finished: 100,
            now: 115,
            want: Err((5, 20)),
        },
        Crash {
            name: "third crash, 20 s passed: restarted",
            restarts_at: &[30, 50],
            finished: 100,
            now: 120,
            want: Ok(()),
        },
        Crash {
            name: "ran 10 min since the last restart: not yet clean",
            restarts_at: &[30, 50],
            finished: 650,
            now: 651,
            want: Err((19, 20)),
        },
        Crash {
            name: "ran over 10 min since the last restart: restarted at once",
            restarts_at: &[30, 50],
            finished: 651,
            now: 651,
            want: Ok(()),
        },
    ];
    let always = pod("Always", &[], &["a"]);
    for case in cases {
        let mut backoff = table();
        for &t in case.restarts_at {
            backoff.record_retry(&key("a"), at(t), at(t));
        }
        let dead = ctr(&always, "a-x", "a", RunState::Exited, 1, case.finished);
        let rt = rt(vec![sandbox("sb1", 0, true)], vec![dead]);
        let got = compute_pod_actions(
            &always,
            &rt,
            at(case.now),
            &backoff,
            &ProbeResults::default(),
        );
        let want = match case.want {
            Ok(()) => PodActions {
                containers_to_start: vec![restart("a")],
                ..in_sandbox()
            },
            Err((retry_in, delay)) => PodActions {
                backing_off: vec![BackingOff {
                    name: "a".into(),
                    is_init: false,
                    retry_in: Duration::from_secs(retry_in),
                    message: format!(
                        "back-off {delay}s restarting failed container=a pod=web_default({UID})"
                    ),
                }],
                ..in_sandbox()
            },
        };
        assert_eq!(got, want, "case: {}", case.name);
    }
}
