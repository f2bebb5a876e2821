use super::*;
use crate::kubelet::node::options::{NodeOptions, Reserved};
use std::net::IpAddr;
use std::time::{Duration, UNIX_EPOCH};

const GI: i64 = 1 << 30;

fn opts(reserved: Reserved) -> NodeOptions {
    NodeOptions {
        node_name: "n1".to_string(),
        labels: Default::default(),
        taints: vec![],
        max_pods: 42,
        reserved,
        node_ip: IpAddr::from([10, 0, 0, 5]),
        kubelet_port: 10250,
        root: "/var/lib/runp".into(),
    }
}

fn healthy() -> Measurements {
    Measurements {
        cpus: 4,
        memory_total: 8 * GI,
        memory_available: 6 * GI,
        fs_capacity: 100 * GI,
        fs_available: 50 * GI,
        inodes_total: 1_000_000,
        inodes_free: 900_000,
        pid_max: 32768,
        processes: 200,
    }
}

fn runtime_status(network: api::RuntimeCondition) -> Result<api::StatusResponse, String> {
    Ok(api::StatusResponse {
        status: Some(api::RuntimeStatus {
            conditions: vec![
                api::RuntimeCondition {
                    r#type: "RuntimeReady".to_string(),
                    status: true,
                    ..Default::default()
                },
                network,
            ],
        }),
        ..Default::default()
    })
}

fn network(status: bool, reason: &str) -> api::RuntimeCondition {
    api::RuntimeCondition {
        r#type: "NetworkReady".to_string(),
        status,
        reason: reason.to_string(),
        message: if reason.is_empty() {
            String::new()
        } else {
            "details".to_string()
        },
    }
}

fn build(
    opts: &NodeOptions,
    m: &Measurements,
    readiness: &Readiness,
    previous: Option<&NodeStatus>,
    secs: u64,
) -> NodeStatus {
    build_node_status(&StatusInputs {
        opts,
        measurements: m,
        facts: &HostFacts {
            kernel_version: "6.1.0".into(),
            os_image: "Debian".into(),
            architecture: "amd64".into(),
            machine_id: "mid".into(),
            system_uuid: "mid".into(),
            boot_id: "bid".into(),
        },
        runtime_version: "runp://0.1.0",
        readiness,
        runtime_status: None,
        thresholds: Thresholds::default(),
        previous,
        now: UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs),
    })
}

fn q<'a>(map: &'a Option<BTreeMap<String, Quantity>>, key: &str) -> &'a str {
    &map.as_ref().unwrap()[key].0
}

#[test]
fn capacity_and_allocatable_subtract_reservations_and_eviction_thresholds() {
    let cases = [
        // reserved, cpu, memory, ephemeral-storage allocatable
        (Reserved::default(), "4", "8092Mi", "90Gi"),
        (
            Reserved {
                cpu_millis: 500,
                memory: GI,
                ephemeral_storage: 10 * GI,
                pids: 0,
            },
            "3500m",
            "7068Mi",
            "80Gi",
        ),
        // More reserved than there is: zero, never negative.
        (
            Reserved {
                cpu_millis: 8000,
                memory: 9 * GI,
                ephemeral_storage: 200 * GI,
                pids: 0,
            },
            "0",
            "0",
            "0",
        ),
    ];
    for (reserved, cpu, memory, storage) in cases {
        let o = opts(reserved);
        let s = build(&o, &healthy(), &Readiness::default(), None, 0);
        assert_eq!(q(&s.capacity, "cpu"), "4");
        assert_eq!(q(&s.capacity, "memory"), "8Gi");
        assert_eq!(q(&s.capacity, "ephemeral-storage"), "100Gi");
        assert_eq!(q(&s.capacity, "pods"), "42");
        assert_eq!(q(&s.allocatable, "cpu"), cpu, "{reserved:?}");
        assert_eq!(q(&s.allocatable, "memory"), memory, "{reserved:?}");
        assert_eq!(
            q(&s.allocatable, "ephemeral-storage"),
            storage,
            "{reserved:?}"
        );
        assert_eq!(q(&s.allocatable, "pods"), "42");
    }
}

#[test]
fn addresses_endpoints_and_node_info() {
    let o = opts(Reserved::default());
    let s = build(&o, &healthy(), &Readiness::default(), None, 0);
    let addresses: Vec<_> = s
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert_eq!(
        addresses,
        [
            ("InternalIP".to_string(), "10.0.0.5".to_string()),
            ("Hostname".to_string(), "n1".to_string())
        ]
    );
    assert_eq!(
        s.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port,
        10250
    );
    let info = s.node_info.unwrap();
    assert_eq!(info.container_runtime_version, "runp://0.1.0");
    assert_eq!(info.operating_system, "linux");
    assert_eq!(info.architecture, "amd64");
    assert!(info.kubelet_version.starts_with("v1.36.0+runp."));
}

#[test]
fn quantities_are_canonical() {
    for (bytes, text) in [
        (0, "0"),
        (1000, "1000"),
        (1024, "1Ki"),
        (3 * 1024 * 1024, "3Mi"),
        (GI, "1Gi"),
        (24683792 * 1024, "24683792Ki"),
        (-5, "0"),
    ] {
        assert_eq!(bytes_quantity(bytes).0, text, "{bytes}");
    }
    assert_eq!(cpu_quantity(2000).0, "2");
    assert_eq!(cpu_quantity(1500).0, "1500m");
}

#[test]
fn pressure_thresholds_as_kubelet_defaults() {
    let t = Thresholds::default();
    type Case = (&'static str, fn(&mut Measurements), Pressure);
    let cases: &[Case] = &[
        ("healthy", |_| {}, Pressure::default()),
        (
            "memory below 100Mi",
            |m| m.memory_available = 99 * 1024 * 1024,
            Pressure {
                memory: true,
                ..Default::default()
            },
        ),
        (
            "memory at 100Mi",
            |m| m.memory_available = 100 * 1024 * 1024,
            Pressure::default(),
        ),
        (
            "nodefs below 10%",
            |m| m.fs_available = 9 * GI,
            Pressure {
                disk: true,
                ..Default::default()
            },
        ),
        (
            "nodefs at 10%",
            |m| m.fs_available = 10 * GI,
            Pressure::default(),
        ),
        (
            "inodes below 5%",
            |m| m.inodes_free = 49_999,
            Pressure {
                disk: true,
                ..Default::default()
            },
        ),
        (
            "pids below 10%",
            |m| m.processes = 32768 - 3000,
            Pressure {
                pid: true,
                ..Default::default()
            },
        ),
        (
            "unmeasured fs",
            |m| {
                m.fs_capacity = 0;
                m.fs_available = 0
            },
            Pressure::default(),
        ),
    ];
    for (name, change, want) in cases {
        let mut m = healthy();
        change(&mut m);
        assert_eq!(pressure(&m, 0, &t), *want, "{name}");
    }
    // Reserved pids count as used.
    let mut m = healthy();
    m.processes = 32768 - 4000;
    assert!(!pressure(&m, 0, &t).pid);
    assert!(pressure(&m, 1000, &t).pid);
}

#[test]
fn readiness_from_the_runtime() {
    let ready = readiness(&runtime_status(network(true, "")));
    assert_eq!(ready, Readiness::default());

    let no_net = readiness(&runtime_status(network(false, "NetworkPluginNotReady")));
    assert_eq!(
        no_net.problems,
        [
            "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:details"
        ]
    );

    // runp's declared degradation keeps the node Ready, whichever status it comes with.
    for status in [true, false] {
        let loopback = readiness(&runtime_status(network(status, LOOPBACK_ONLY)));
        assert!(loopback.problems.is_empty(), "{loopback:?}");
        assert!(
            loopback
                .degraded
                .unwrap()
                .contains("loopback only (details)")
        );
    }

    let mut down = runtime_status(network(true, "")).unwrap();
    down.status.as_mut().unwrap().conditions[0].status = false;
    down.status.as_mut().unwrap().conditions[0].reason = "Broken".into();
    let r = readiness(&Ok(down));
    assert_eq!(r.problems.len(), 1);
    assert!(
        r.problems[0].starts_with("container runtime not ready: RuntimeReady=false reason:Broken")
    );

    let err = readiness(&Err("connection refused".into()));
    assert!(err.problems[0].contains("connection refused"));
    let empty = readiness(&Ok(api::StatusResponse::default()));
    assert_eq!(empty.problems.len(), 2);
}

#[test]
fn conditions_have_kubelet_reasons_and_keep_transition_times() {
    let o = opts(Reserved::default());
    let ready = Readiness::default();
    let first = build(&o, &healthy(), &ready, None, 0);
    let kinds: Vec<_> = first
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_deref().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
    );
    assert_eq!(
        condition(&first, "Ready").unwrap().message.as_deref(),
        Some("kubelet is posting ready status")
    );

    // A heartbeat later: same status, new heartbeat, transition kept; not a change.
    let second = build(&o, &healthy(), &ready, Some(&first), 10);
    let (r1, r2) = (
        condition(&first, "Ready").unwrap(),
        condition(&second, "Ready").unwrap(),
    );
    assert_eq!(r1.last_transition_time, r2.last_transition_time);
    assert_ne!(r1.last_heartbeat_time, r2.last_heartbeat_time);
    assert!(!changed(Some(&first), &second));
    assert!(changed(None, &second));

    // The network goes away: NotReady with the reason, new transition time; a change.
    let not_ready = readiness(&runtime_status(network(false, "NoCNI")));
    let third = build(&o, &healthy(), &not_ready, Some(&second), 20);
    let r3 = condition(&third, "Ready").unwrap();
    assert_eq!(r3.status, "False");
    assert_eq!(r3.reason.as_deref(), Some("KubeletNotReady"));
    assert!(r3.message.as_deref().unwrap().contains("reason:NoCNI"));
    assert_eq!(r3.last_transition_time, r3.last_heartbeat_time);
    assert_ne!(r3.last_transition_time, r2.last_transition_time);
    assert!(changed(Some(&second), &third));
    // Memory pressure flips only its own condition.
    let mut low = healthy();
    low.memory_available = 1;
    let fourth = build(&o, &low, &not_ready, Some(&third), 30);
    let mp = condition(&fourth, "MemoryPressure").unwrap();
    assert_eq!(mp.status, "True");
    assert_eq!(mp.reason.as_deref(), Some("KubeletHasInsufficientMemory"));
    assert_eq!(
        condition(&fourth, "Ready").unwrap().last_transition_time,
        r3.last_transition_time
    );
    // Loopback-only: Ready, and the message says so.
    let loopback = readiness(&runtime_status(network(true, LOOPBACK_ONLY)));
    let fifth = build(&o, &healthy(), &loopback, Some(&fourth), 40);
    let r5 = condition(&fifth, "Ready").unwrap();
    assert_eq!(r5.status, "True");
    assert!(
        r5.message
            .as_deref()
            .unwrap()
            .starts_with("kubelet is posting ready status; pod network is loopback only")
    );
}

#[test]
fn measurement_changes_count_as_changes() {
    let o = opts(Reserved::default());
    let a = build(&o, &healthy(), &Readiness::default(), None, 0);
    let mut m = healthy();
    m.fs_capacity += GI;
    let b = build(&o, &m, &Readiness::default(), Some(&a), 10);
    assert!(changed(Some(&a), &b));
}

#[test]
fn the_api_disagrees_when_one_of_our_conditions_shows_another_status() {
    let cond = |type_: &str, status: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        ..Default::default()
    };
    let with = |conditions: Vec<NodeCondition>| NodeStatus {
        conditions: Some(conditions),
        ..Default::default()
    };
    let ours = with(vec![cond("Ready", "True"), cond("MemoryPressure", "False")]);
    let cases = [
        // Set to Unknown by the node lifecycle controller while the lease was stale.
        (
            Some(with(vec![
                cond("Ready", "Unknown"),
                cond("MemoryPressure", "False"),
            ])),
            true,
        ),
        (Some(with(vec![cond("MemoryPressure", "False")])), true),
        (None, true),
        // Conditions others own do not count.
        (
            Some(with(vec![
                cond("Ready", "True"),
                cond("MemoryPressure", "False"),
                cond("NetworkUnavailable", "True"),
            ])),
            false,
        ),
        (Some(ours.clone()), false),
    ];
    for (api, want) in cases {
        assert_eq!(api_disagrees(api.as_ref(), &ours), want, "{api:?}");
    }
}
