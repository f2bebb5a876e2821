//! Tests of mirror.rs.

use super::*;

fn seen(uid: &str, hash: &str, deleting: bool) -> Observed {
    Observed {
        uid: uid.into(),
        hash: hash.into(),
        spec: Some("s1".into()),
        deleting,
    }
}

fn want(hash: &str, spec: &str) -> Wanted {
    Wanted {
        hash: hash.into(),
        spec: spec.into(),
    }
}

#[test]
fn decisions_as_kubelet_sync_pod() {
    let no_spec = Observed {
        spec: None,
        ..seen("u1", "h1", false)
    };
    let cases: Vec<(Option<Wanted>, Option<Observed>, bool, Action)> = vec![
        (None, None, true, Action::None),
        (Some(want("h1", "s1")), None, false, Action::Create),
        (
            Some(want("h1", "s1")),
            Some(seen("u1", "h1", false)),
            false,
            Action::None,
        ),
        // The file changed: another hash, or (same hash, runp's uids) another spec.
        (
            Some(want("h2", "s1")),
            Some(seen("u1", "h1", false)),
            false,
            Action::Recreate("u1".into()),
        ),
        (
            Some(want("h1", "s2")),
            Some(seen("u1", "h1", false)),
            false,
            Action::Recreate("u1".into()),
        ),
        (
            Some(want("h1", "s1")),
            Some(no_spec),
            false,
            Action::Recreate("u1".into()),
        ),
        // Being deleted (a user's graceful delete): deleted now and made again.
        (
            Some(want("h1", "s1")),
            Some(seen("u1", "h1", true)),
            false,
            Action::Recreate("u1".into()),
        ),
        // No static pod: deleted, once the static pods are known.
        (
            None,
            Some(seen("u1", "h1", false)),
            true,
            Action::Delete("u1".into()),
        ),
        (
            None,
            Some(seen("u1", "h1", true)),
            true,
            Action::Delete("u1".into()),
        ),
        (None, Some(seen("u1", "h1", false)), false, Action::None),
    ];
    for (desired, observed, orphans, expected) in cases {
        assert_eq!(
            decide(desired.as_ref(), observed.as_ref(), orphans),
            expected,
            "desired {desired:?}, observed {observed:?}, orphans {orphans}"
        );
    }
}

fn static_pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "uid": "static-uid", "labels": {"app": "web"},
            "annotations": {"kubernetes.io/config.source": "file",
                "kubernetes.io/config.hash": "static-uid"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}],
            "serviceAccountName": "default"}
    }))
    .unwrap()
}

#[test]
fn mirror_pods_are_named_bound_annotated_and_owned() {
    let pod = mirror_pod(&static_pod(), "n1", "node-uid");
    assert_eq!(pod.metadata.name.as_deref(), Some("web-n1"));
    assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(pod.metadata.uid, None);
    let annotations = pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[CONFIG_MIRROR_ANNOTATION], "static-uid");
    assert_eq!(annotations[CONFIG_SOURCE_ANNOTATION], "file");
    assert_eq!(annotations[CONFIG_HASH_ANNOTATION], "static-uid");
    assert_eq!(
        annotations[MIRROR_SPEC_ANNOTATION],
        spec_digest(&static_pod())
    );
    let mut edited = static_pod();
    edited.spec.as_mut().unwrap().containers[0].image = Some("busybox:2".into());
    assert_ne!(spec_digest(&edited), spec_digest(&static_pod()));
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.api_version.as_str(),
            owner.name.as_str()
        ),
        ("Node", "v1", "n1")
    );
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        ("node-uid", Some(true))
    );
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("n1"));
    assert_eq!(spec.service_account_name, None);
    assert_eq!(pod.metadata.labels.as_ref().unwrap()["app"], "web");
    assert!(is_mirror_pod(&pod) && !is_static_pod(&pod));
    assert!(is_static_pod(&static_pod()) && !is_mirror_pod(&static_pod()));
}

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl StatusSink for Recorder {
    fn status_changed(&self, pod: &Pod, status: &PodStatus) {
        self.0.lock().unwrap().push(format!(
            "status {} {} {}",
            pod.metadata.name.as_deref().unwrap_or(""),
            pod.metadata.uid.as_deref().unwrap_or(""),
            status.phase.as_deref().unwrap_or("")
        ));
    }
    fn pod_terminated(&self, pod: &Pod) {
        self.0.lock().unwrap().push(format!(
            "terminated {}",
            pod.metadata.name.as_deref().unwrap_or("")
        ));
    }
}

#[test]
fn statuses_go_to_the_mirror_once_it_exists() {
    let shared = Mutex::new(Shared::default());
    let recorder = Recorder::default();
    let key = ("default".to_string(), "web-n1".to_string());
    let running = PodStatus {
        phase: Some("Running".into()),
        ..PodStatus::default()
    };
    lock(&shared).desired.insert(
        key.clone(),
        Desired {
            pod: static_pod(),
            status: Some(running.clone()),
            forwarded: None,
        },
    );
    forward_statuses("n1", &recorder, &shared);
    assert!(recorder.0.lock().unwrap().is_empty(), "no mirror yet");
    lock(&shared).seen.insert(
        key.clone(),
        Seen {
            observed: Observed {
                spec: Some(spec_digest(&static_pod())),
                ..seen("m1", "static-uid", false)
            },
            status: None,
        },
    );
    forward_statuses("n1", &recorder, &shared);
    forward_statuses("n1", &recorder, &shared);
    // Recreated: the new mirror gets the status again.
    lock(&shared).seen.get_mut(&key).unwrap().observed.uid = "m2".into();
    forward_statuses("n1", &recorder, &shared);
    assert_eq!(
        *recorder.0.lock().unwrap(),
        vec![
            "status web-n1 m1 Running",
            "terminated web-n1",
            "status web-n1 m2 Running"
        ]
    );
}
