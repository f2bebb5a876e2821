//! Table tests of `generate_pod_status`.

use super::*;
use crate::kubelet::runtime_pod::SandboxView;
use std::time::Duration;

const UID: &str = "uid-1";

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

fn pod(policy: &str, inits: &[&str], containers: &[&str], readiness: &[&str]) -> Pod {
    let make = |names: &[&str]| -> Vec<serde_json::Value> {
        names
            .iter()
            .map(|n| {
                let mut c = serde_json::json!({"name": n, "image": format!("img-{n}")});
                if readiness.contains(n) {
                    c["readinessProbe"] = serde_json::json!({"exec": {"command": ["true"]}});
                }
                c
            })
            .collect()
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": UID},
        "spec": {"restartPolicy": policy, "initContainers": make(inits), "containers": make(containers)}
    }))
    .unwrap()
}

fn view(
    name: &str,
    id: &str,
    state: RunState,
    exit: i32,
    restarts: u32,
    created: u64,
) -> ContainerView {
    ContainerView {
        id: id.into(),
        name: name.into(),
        sandbox_id: "sb".into(),
        state,
        created_at: Some(at(created)),
        started_at: Some(at(created + 1)),
        finished_at: (state == RunState::Exited).then(|| at(created + 5)),
        exit_code: exit,
        image: format!("img-{name}"),
        image_ref: format!("sha256:{name}"),
        hash: None,
        restart_count: restarts,
        ..Default::default()
    }
}

fn run(name: &str) -> ContainerView {
    view(name, &format!("{name}1"), RunState::Running, 0, 0, 10)
}

fn exit(name: &str, code: i32) -> ContainerView {
    view(name, &format!("{name}1"), RunState::Exited, code, 0, 10)
}

fn runtime(containers: Vec<ContainerView>) -> RuntimePod {
    RuntimePod {
        uid: UID.into(),
        sandboxes: vec![SandboxView {
            id: "sb".into(),
            attempt: 0,
            ready: true,
            created_at: Some(at(0)),
            ips: vec!["10.0.0.5".into()],
            host_network: false,
        }],
        containers,
    }
}

fn gen_with(
    pod: &Pod,
    rt: &RuntimePod,
    waiting: &[(&str, &str)],
    probes: &ProbeResults,
    previous: Option<&PodStatus>,
) -> PodStatus {
    let waiting: HashMap<String, Waiting> = waiting
        .iter()
        .map(|(n, r)| {
            (
                n.to_string(),
                Waiting {
                    reason: r.to_string(),
                    message: format!("{r} message"),
                },
            )
        })
        .collect();
    generate_pod_status(&StatusInputs {
        pod,
        runtime: rt,
        waiting: &waiting,
        probes,
        previous,
        host_ip: "192.168.1.2",
        now: at(100),
    })
}

fn gen_status(pod: &Pod, rt: &RuntimePod, waiting: &[(&str, &str)]) -> PodStatus {
    gen_with(pod, rt, waiting, &ProbeResults::default(), None)
}

fn cond(status: &PodStatus, type_: &str) -> String {
    status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
        .unwrap()
}

fn state_summary(s: &ContainerStatus) -> String {
    let state = s.state.as_ref().unwrap();
    if state.running.is_some() {
        "running".into()
    } else if let Some(t) = &state.terminated {
        format!(
            "terminated:{}:{}",
            t.exit_code,
            t.reason.clone().unwrap_or_default()
        )
    } else {
        format!(
            "waiting:{}",
            state
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .clone()
                .unwrap_or_default()
        )
    }
}

#[test]
fn phases_and_conditions() {
    let always = pod("Always", &[], &["a", "b"], &[]);
    let never = pod("Never", &[], &["a", "b"], &[]);
    let on_failure = pod("OnFailure", &[], &["a", "b"], &[]);
    let with_init = pod("Always", &["i1", "i2"], &["a"], &[]);
    let never_init = pod("Never", &["i1"], &["a"], &[]);
    // (name, pod, containers, waiting reasons, phase, Initialized, Ready)
    type Case<'a> = (
        &'a str,
        &'a Pod,
        Vec<ContainerView>,
        Vec<(&'a str, &'a str)>,
        &'a str,
        &'a str,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "nothing yet",
            &always,
            vec![],
            vec![],
            "Pending",
            "True",
            "False",
        ),
        (
            "all running",
            &always,
            vec![run("a"), run("b")],
            vec![],
            "Running",
            "True",
            "True",
        ),
        (
            "one running, one pulling",
            &always,
            vec![run("a")],
            vec![("b", "ErrImagePull")],
            "Pending",
            "True",
            "False",
        ),
        (
            "Always: exited and backing off",
            &always,
            vec![run("a"), exit("b", 1)],
            vec![("b", "CrashLoopBackOff")],
            "Running",
            "True",
            "False",
        ),
        (
            "Always: all exited",
            &always,
            vec![exit("a", 0), exit("b", 1)],
            vec![],
            "Running",
            "True",
            "False",
        ),
        (
            "Never: all succeeded",
            &never,
            vec![exit("a", 0), exit("b", 0)],
            vec![],
            "Succeeded",
            "True",
            "False",
        ),
        (
            "Never: one failed",
            &never,
            vec![exit("a", 0), exit("b", 2)],
            vec![],
            "Failed",
            "True",
            "False",
        ),
        (
            "Never: one still running",
            &never,
            vec![exit("a", 2), run("b")],
            vec![],
            "Running",
            "True",
            "False",
        ),
        (
            "OnFailure: all succeeded",
            &on_failure,
            vec![exit("a", 0), exit("b", 0)],
            vec![],
            "Succeeded",
            "True",
            "False",
        ),
        (
            "OnFailure: one failed, restarting",
            &on_failure,
            vec![exit("a", 0), exit("b", 1)],
            vec![("b", "CrashLoopBackOff")],
            "Running",
            "True",
            "False",
        ),
        (
            "init running",
            &with_init,
            vec![run("i1")],
            vec![],
            "Pending",
            "False",
            "False",
        ),
        (
            "first init done, second not started",
            &with_init,
            vec![exit("i1", 0)],
            vec![],
            "Pending",
            "False",
            "False",
        ),
        (
            "init crash-looping",
            &with_init,
            vec![exit("i2", 1), exit("i1", 0)],
            vec![("i2", "CrashLoopBackOff")],
            "Pending",
            "False",
            "False",
        ),
        (
            "inits done, main running",
            &with_init,
            vec![run("a"), exit("i2", 0), exit("i1", 0)],
            vec![],
            "Running",
            "True",
            "True",
        ),
        (
            "init records collected, main running",
            &with_init,
            vec![run("a")],
            vec![],
            "Running",
            "True",
            "True",
        ),
        (
            "Never: init failed",
            &never_init,
            vec![exit("i1", 1)],
            vec![],
            "Failed",
            "False",
            "False",
        ),
    ];
    for (name, pod, containers, waiting, phase, initialized, ready) in cases {
        let status = gen_status(pod, &runtime(containers), &waiting);
        assert_eq!(status.phase.as_deref(), Some(phase), "{name}: phase");
        assert_eq!(
            cond(&status, "Initialized"),
            initialized,
            "{name}: Initialized"
        );
        assert_eq!(cond(&status, "Ready"), ready, "{name}: Ready");
        assert_eq!(
            cond(&status, "ContainersReady"),
            ready,
            "{name}: ContainersReady"
        );
        assert_eq!(
            cond(&status, "PodScheduled"),
            "True",
            "{name}: PodScheduled"
        );
    }
}

#[test]
fn container_states_reasons_and_counts() {
    let always = pod("Always", &[], &["a"], &[]);
    let mut oom = view("a", "a2", RunState::Exited, 137, 1, 20);
    oom.reason = "OOMKilled".into();
    let mut with_message = view("a", "a2", RunState::Exited, 1, 1, 20);
    with_message.message = "disk full".into();
    // (name, containers, waiting, state, lastState, restartCount)
    type Case<'a> = (
        &'a str,
        Vec<ContainerView>,
        Vec<(&'a str, &'a str)>,
        &'a str,
        Option<&'a str>,
        i32,
    );
    let cases: Vec<Case> = vec![
        (
            "not created yet",
            vec![],
            vec![],
            "waiting:ContainerCreating",
            None,
            0,
        ),
        (
            "image pull failed",
            vec![],
            vec![("a", "ErrImagePull")],
            "waiting:ErrImagePull",
            None,
            0,
        ),
        (
            "image pull back-off",
            vec![],
            vec![("a", "ImagePullBackOff")],
            "waiting:ImagePullBackOff",
            None,
            0,
        ),
        (
            "create failed",
            vec![],
            vec![("a", "CreateContainerError")],
            "waiting:CreateContainerError",
            None,
            0,
        ),
        (
            "created, not started",
            vec![view("a", "a1", RunState::Created, 0, 0, 10)],
            vec![],
            "waiting:ContainerCreating",
            None,
            0,
        ),
        ("running", vec![run("a")], vec![], "running", None, 0),
        (
            "restarted, previous exit in lastState",
            vec![view("a", "a2", RunState::Running, 0, 1, 20), exit("a", 3)],
            vec![],
            "running",
            Some("terminated:3:Error"),
            1,
        ),
        (
            "crash loop: waiting, last run in lastState",
            vec![view("a", "a2", RunState::Exited, 2, 4, 20), exit("a", 3)],
            vec![("a", "CrashLoopBackOff")],
            "waiting:CrashLoopBackOff",
            Some("terminated:2:Error"),
            4,
        ),
        (
            "exited, restart imminent: terminated",
            vec![exit("a", 0)],
            vec![],
            "terminated:0:Completed",
            None,
            0,
        ),
        (
            "oom killed",
            vec![oom, exit("a", 1)],
            vec![],
            "terminated:137:OOMKilled",
            Some("terminated:1:Error"),
            1,
        ),
    ];
    for (name, containers, waiting, want_state, want_last, restarts) in cases {
        let status = gen_status(&always, &runtime(containers), &waiting);
        let cs = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(state_summary(cs), want_state, "{name}: state");
        let last = cs.last_state.as_ref().map(|l| {
            let t = l.terminated.as_ref().unwrap();
            format!(
                "terminated:{}:{}",
                t.exit_code,
                t.reason.clone().unwrap_or_default()
            )
        });
        assert_eq!(last.as_deref(), want_last, "{name}: lastState");
        assert_eq!(cs.restart_count, restarts, "{name}: restartCount");
    }
    let status = gen_status(&always, &runtime(vec![with_message]), &[]);
    let t = status.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(t.message.as_deref(), Some("disk full"));
    assert_eq!(t.container_id.as_deref(), Some("runp://a2"));
}

#[test]
fn readiness_and_startup() {
    let probed = pod("Always", &[], &["a"], &["a"]);
    let rt = runtime(vec![run("a")]);
    let mut probes = ProbeResults::default();
    let status = gen_with(&probed, &rt, &[], &probes, None);
    assert_eq!(cond(&status, "Ready"), "False", "no readiness result yet");
    let cs = &status.container_statuses.as_ref().unwrap()[0];
    assert!(!cs.ready);
    assert_eq!(cs.started, Some(true));
    assert_eq!(cs.container_id.as_deref(), Some("runp://a1"));
    assert_eq!(cs.image_id, "sha256:a");

    probes.set("a1", ProbeKind::Readiness, ProbeResult::Success);
    let ready = gen_with(&probed, &rt, &[], &probes, Some(&status));
    assert_eq!(cond(&ready, "Ready"), "True");
    assert!(ready.container_statuses.as_ref().unwrap()[0].ready);

    let mut startup: Pod = probed.clone();
    startup.spec.as_mut().unwrap().containers[0].startup_probe =
        Some(serde_json::from_value(serde_json::json!({"exec": {"command": ["true"]}})).unwrap());
    let not_started = gen_with(&startup, &rt, &[], &probes, None);
    let cs = &not_started.container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.started, Some(false));
    assert!(
        !cs.ready,
        "not ready before started, even with readiness success"
    );
}

#[test]
fn transition_times_start_time_ips_and_terminal_phase() {
    let always = pod("Always", &[], &["a"], &[]);
    let rt = runtime(vec![run("a")]);
    let mut first = gen_status(&always, &rt, &[]);
    let ready_cond = |s: &PodStatus| {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == "Ready")
            .cloned()
            .unwrap()
    };
    // Pretend it became ready long ago: the time survives an unchanged status.
    let old = k8s_time(at(1));
    first.conditions.as_mut().unwrap()[3].last_transition_time = old.clone();
    first.start_time = old.clone();
    let second = gen_with(&always, &rt, &[], &ProbeResults::default(), Some(&first));
    assert_eq!(ready_cond(&second).last_transition_time, old);
    assert_eq!(second.start_time, old);
    // Changed: now.
    let down = gen_with(
        &always,
        &runtime(vec![exit("a", 1)]),
        &[],
        &ProbeResults::default(),
        Some(&first),
    );
    assert_eq!(ready_cond(&down).status, "False");
    assert_eq!(ready_cond(&down).last_transition_time, k8s_time(at(100)));

    assert_eq!(second.pod_ip.as_deref(), Some("10.0.0.5"));
    assert_eq!(second.host_ip.as_deref(), Some("192.168.1.2"));
    let mut host = always.clone();
    host.spec.as_mut().unwrap().host_network = Some(true);
    assert_eq!(
        gen_status(&host, &rt, &[]).pod_ip.as_deref(),
        Some("192.168.1.2")
    );

    let never = pod("Never", &[], &["a"], &[]);
    let done = gen_status(&never, &runtime(vec![exit("a", 0)]), &[]);
    assert_eq!(done.phase.as_deref(), Some("Succeeded"));
    assert_eq!(ready_cond(&done).reason.as_deref(), Some("PodCompleted"));
    // Records collected later: the phase stays terminal.
    let later = gen_with(
        &never,
        &runtime(vec![]),
        &[],
        &ProbeResults::default(),
        Some(&done),
    );
    assert_eq!(later.phase.as_deref(), Some("Succeeded"));
}
