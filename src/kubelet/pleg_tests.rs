//! Tests of pleg.rs.

use super::*;
use PlegEventKind::*;
use RunState::*;

fn snap(containers: &[(&str, RunState)], sandboxes: &[(&str, bool)]) -> Snapshot {
    Snapshot {
        containers: containers
            .iter()
            .map(|(id, s)| (id.to_string(), ("pod".to_string(), *s)))
            .collect(),
        sandboxes: sandboxes
            .iter()
            .map(|(id, r)| (id.to_string(), ("pod".to_string(), *r)))
            .collect(),
    }
}

fn ev(id: &str, kind: PlegEventKind) -> PlegEvent {
    PlegEvent {
        pod_uid: "pod".into(),
        id: id.into(),
        kind,
    }
}

#[test]
fn relist_diff() {
    let cases = vec![
        (
            "nothing changed",
            snap(&[("c", Running)], &[]),
            snap(&[("c", Running)], &[]),
            vec![],
        ),
        (
            "new running container",
            snap(&[], &[]),
            snap(&[("c", Running)], &[]),
            vec![ev("c", ContainerStarted)],
        ),
        (
            "created then started",
            snap(&[("c", Created)], &[]),
            snap(&[("c", Running)], &[]),
            vec![ev("c", ContainerStarted)],
        ),
        (
            "died",
            snap(&[("c", Running)], &[]),
            snap(&[("c", Exited)], &[]),
            vec![ev("c", ContainerDied)],
        ),
        (
            "started and died between relists",
            snap(&[], &[]),
            snap(&[("c", Exited)], &[]),
            vec![ev("c", ContainerDied)],
        ),
        (
            "exited one removed",
            snap(&[("c", Exited)], &[]),
            snap(&[], &[]),
            vec![ev("c", ContainerRemoved)],
        ),
        (
            "running one vanished: died and removed",
            snap(&[("c", Running)], &[]),
            snap(&[], &[]),
            vec![ev("c", ContainerDied), ev("c", ContainerRemoved)],
        ),
        (
            "unknown state",
            snap(&[("c", Running)], &[]),
            snap(&[("c", Unknown)], &[]),
            vec![ev("c", ContainerChanged)],
        ),
        (
            "new created container",
            snap(&[], &[]),
            snap(&[("c", Created)], &[]),
            vec![ev("c", ContainerChanged)],
        ),
        (
            "sandbox stopped",
            snap(&[], &[("s", true)]),
            snap(&[], &[("s", false)]),
            vec![ev("s", SandboxChanged)],
        ),
        (
            "sandbox removed",
            snap(&[], &[("s", false)]),
            snap(&[], &[]),
            vec![ev("s", SandboxChanged)],
        ),
        (
            "sandbox unchanged",
            snap(&[], &[("s", true)]),
            snap(&[], &[("s", true)]),
            vec![],
        ),
        (
            "several, sorted by id",
            snap(&[("b", Running), ("a", Running)], &[]),
            snap(&[("b", Exited), ("a", Running), ("c", Running)], &[]),
            vec![ev("b", ContainerDied), ev("c", ContainerStarted)],
        ),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(diff(&old, &new), want, "{name}");
    }
}

#[test]
fn health_threshold() {
    let start = Instant::now();
    let health = PlegHealth::new(start, Duration::from_secs(180));
    assert!(health.check(start + Duration::from_secs(180)).is_ok());
    let err = health.check(start + Duration::from_secs(181)).unwrap_err();
    assert!(err.contains("181s ago"), "{err}");
    health.record(start + Duration::from_secs(200));
    assert!(health.check(start + Duration::from_secs(300)).is_ok());
    assert!(health.check(start + Duration::from_secs(381)).is_err());
}

#[tokio::test(start_paused = true)]
async fn relists_rarely_while_following_the_event_stream_and_every_period_without() {
    use crate::kubelet::clock::FakeClock;
    use crate::kubelet::fake::FakeRuntime;
    let periods = RelistPeriods {
        plain: Duration::from_secs(1),
        evented: Duration::from_secs(60),
    };
    // The first relist, one when the stream connects; else one a second.
    for (stream, want) in [(true, 1..=2), (false, 10..=11)] {
        let clock = Arc::new(FakeClock::new());
        let runtime = FakeRuntime::new(clock.clone());
        runtime.set_event_stream(stream);
        let metrics = Arc::new(KubeletMetrics::new());
        let pleg = Arc::new(Pleg::new(
            runtime,
            clock,
            periods,
            Duration::from_secs(180),
            Arc::clone(&metrics),
        ));
        let (sink, _events) = mpsc::channel(10);
        let task = tokio::spawn(pleg.run(sink));
        tokio::time::sleep(Duration::from_millis(10_500)).await;
        task.abort();
        let text = metrics.render().unwrap();
        let relists: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("kubelet_pleg_relist_duration_seconds_count "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            want.contains(&relists),
            "event stream {stream}: {relists} relists in 10.5 s"
        );
    }
}

/// /metrics counts what runs when it is scraped, not what the last relist saw: the relist
/// is a minute apart while the event stream is followed.
#[tokio::test]
async fn running_gauges_are_counted_when_asked_for() {
    use crate::kubelet::clock::FakeClock;
    use crate::kubelet::fake::FakeRuntime;
    let runtime = FakeRuntime::new(Arc::new(FakeClock::new()));
    let metrics = KubeletMetrics::new();
    let gauge = |metrics: &KubeletMetrics, name: &str| -> String {
        let text = metrics.render().unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .map(str::to_string);
        line.unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    refresh_running_gauges(runtime.as_ref(), &metrics)
        .await
        .unwrap();
    assert_eq!(
        gauge(&metrics, "kubelet_running_pods "),
        "kubelet_running_pods 0"
    );
    runtime.start_sample_container(Default::default(), "").await;
    refresh_running_gauges(runtime.as_ref(), &metrics)
        .await
        .unwrap();
    assert_eq!(
        gauge(&metrics, "kubelet_running_pods "),
        "kubelet_running_pods 1"
    );
    assert_eq!(
        gauge(
            &metrics,
            "kubelet_running_containers{container_state=\"running\"}"
        ),
        "kubelet_running_containers{container_state=\"running\"} 1"
    );
}
