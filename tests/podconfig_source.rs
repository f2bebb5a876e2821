//! The manifest directory source on a real directory: file changes become pod events, in order;
//! a broken file is reported by name while the other pods keep running.

use runp::kubelet::podconfig::PodEvent;
use runp::kubelet::source::manifest::{ManifestSource, Severity, SourceOptions};
use std::path::Path;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::timeout;

/// Hang guard for one expected event (inotify + debounce take milliseconds).
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long we listen to check that nothing more arrives.
const QUIET: Duration = Duration::from_millis(400);

fn pod(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: main\n    image: {image}\n"
    )
}

/// Writes like an editor that saves atomically.
fn write_atomic(path: &Path, content: &str) {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

async fn next(rx: &mut mpsc::Receiver<PodEvent>) -> PodEvent {
    timeout(EVENT_TIMEOUT, rx.recv())
        .await
        .expect("no event in time")
        .expect("channel closed")
}

async fn expect_quiet(rx: &mut mpsc::Receiver<PodEvent>) {
    if let Ok(Some(event)) = timeout(QUIET, rx.recv()).await {
        panic!("unexpected event {event:?}");
    }
}

fn upserted(event: PodEvent) -> (String, String, String) {
    match event {
        PodEvent::Upsert(pod) => {
            let image = pod.spec.as_ref().unwrap().containers[0]
                .image
                .clone()
                .unwrap();
            (
                pod.metadata.name.clone().unwrap(),
                pod.metadata.uid.clone().unwrap(),
                image,
            )
        }
        other => panic!("expected an upsert, got {other:?}"),
    }
}

async fn wait_for_problem(source: &ManifestSource, file: &str) -> String {
    let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
    loop {
        if let Some(p) = source
            .problems()
            .into_iter()
            .find(|p| p.file.ends_with(file) && p.severity == Severity::Error)
        {
            return p.message;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no problem reported for {file}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn file_changes_become_events_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // One pod before the source starts: it comes first.
    std::fs::write(d.join("a.yaml"), pod("a", "busybox:1")).unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let options = SourceOptions {
        node_name: Some("node-1".into()),
        // Long: these tests exercise inotify, not the safety-net rescan.
        rescan_interval: Duration::from_secs(3600),
        debounce: Duration::from_millis(30),
    };
    let (source, objects) = ManifestSource::spawn_with(d.to_path_buf(), tx, options).unwrap();

    let (name, uid_a, image) = upserted(next(&mut rx).await);
    assert_eq!((name.as_str(), image.as_str()), ("a", "busybox:1"));
    expect_quiet(&mut rx).await;

    // New file.
    write_atomic(&d.join("b.yaml"), &pod("b", "busybox:1"));
    let (name, uid_b, _) = upserted(next(&mut rx).await);
    assert_eq!(name, "b");
    assert_ne!(uid_a, uid_b);

    // Changed spec, written in place: same UID, new image.
    std::fs::write(d.join("a.yaml"), pod("a", "busybox:2")).unwrap();
    let (name, uid, image) = upserted(next(&mut rx).await);
    assert_eq!((name.as_str(), image.as_str()), ("a", "busybox:2"));
    assert_eq!(uid, uid_a, "static pod UID is stable across edits");
    expect_quiet(&mut rx).await;

    // Touching a file without changing it emits nothing.
    std::fs::write(d.join("a.yaml"), pod("a", "busybox:2")).unwrap();
    expect_quiet(&mut rx).await;

    // Ignored names.
    std::fs::write(d.join("notes.txt"), "not a manifest").unwrap();
    std::fs::write(d.join(".hidden.yaml"), pod("hidden", "x")).unwrap();
    expect_quiet(&mut rx).await;

    // A ConfigMap and Secret: objects change and are readable.
    write_atomic(
        &d.join("config.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {greeting: hello}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {name: sec, namespace: ops}\nstringData: {token: t0k}\n",
    );
    assert!(matches!(next(&mut rx).await, PodEvent::ObjectsChanged));
    let cm = objects
        .config_map("default", "cfg")
        .expect("configMap stored");
    assert_eq!(cm.data.unwrap()["greeting"], "hello");
    assert!(objects.secret("ops", "sec").is_some());

    // Deleting a file removes its pod.
    std::fs::remove_file(d.join("b.yaml")).unwrap();
    match next(&mut rx).await {
        PodEvent::Remove { uid } => assert_eq!(uid, uid_b),
        other => panic!("expected remove of b, got {other:?}"),
    }
    assert_eq!(source.pod_file(&uid_a), Some(source.dir().join("a.yaml")));
    assert_eq!(source.pod_file(&uid_b), None);
    expect_quiet(&mut rx).await;
    drop(source);
}

#[tokio::test]
async fn broken_files_are_reported_by_name_and_others_keep_running() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("good.yaml"), pod("good", "busybox")).unwrap();
    std::fs::write(d.join("edited.yaml"), pod("edited", "busybox")).unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let options = SourceOptions {
        rescan_interval: Duration::from_secs(3600),
        debounce: Duration::from_millis(30),
        ..Default::default()
    };
    let (source, _objects) = ManifestSource::spawn_with(d.to_path_buf(), tx, options).unwrap();
    let mut names: Vec<String> = vec![
        upserted(next(&mut rx).await).0,
        upserted(next(&mut rx).await).0,
    ];
    names.sort();
    assert_eq!(names, ["edited", "good"]);
    assert!(source.problems().is_empty(), "{:?}", source.problems());

    // A new broken file: reported by name, with the reason; nothing else happens.
    write_atomic(&d.join("broken.yaml"), &pod("Bad_Name", "busybox"));
    let message = wait_for_problem(&source, "broken.yaml").await;
    assert!(message.contains("metadata.name"), "{message}");
    expect_quiet(&mut rx).await;

    // An existing file broken by an edit: its last valid version keeps running.
    write_atomic(
        &d.join("edited.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: [oops\n",
    );
    let message = wait_for_problem(&source, "edited.yaml").await;
    assert!(message.contains("keeps running"), "{message}");
    expect_quiet(&mut rx).await;

    // Fixing it applies the new version and clears the problem.
    write_atomic(&d.join("edited.yaml"), &pod("edited", "busybox:fixed"));
    let (name, _, image) = upserted(next(&mut rx).await);
    assert_eq!((name.as_str(), image.as_str()), ("edited", "busybox:fixed"));
    assert!(
        source
            .problems()
            .iter()
            .all(|p| !p.file.ends_with("edited.yaml"))
    );
    assert!(
        source
            .problems()
            .iter()
            .any(|p| p.file.ends_with("broken.yaml"))
    );
}

#[tokio::test]
async fn rescan_requests_and_missing_directories() {
    let (tx, _rx) = mpsc::channel(1);
    let err = ManifestSource::spawn(Path::new("/nonexistent/manifests").to_path_buf(), tx)
        .err()
        .expect("missing dir refused");
    assert!(err.to_string().contains("/nonexistent/manifests"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let (source, _) = ManifestSource::spawn(dir.path().to_path_buf(), tx).unwrap();
    std::fs::write(dir.path().join("p.yml"), pod("p", "busybox")).unwrap();
    source.rescan();
    assert_eq!(upserted(next(&mut rx).await).0, "p");
}

/// A YAML alias bomb ("billion laughs"): about 10^9 nodes if expanded.
fn alias_bomb() -> String {
    let mut text = String::from(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bomb}\nx0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..9 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!(
            "x{i}: &a{i} [{}]\n",
            [prev.as_str(); 10].join(", ")
        ));
    }
    text
}

#[tokio::test]
async fn hostile_manifests_are_refused_by_name_in_bounded_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("good.yaml"), pod("good", "busybox")).unwrap();
    std::fs::write(d.join("bomb.yaml"), alias_bomb()).unwrap();
    // 50 MB: past the size cap, refused without being parsed.
    let mut big = pod("big", "busybox");
    big.push_str(&format!("# {}\n", "x".repeat(50 << 20)));
    std::fs::write(d.join("big.yaml"), big).unwrap();
    let mut latin1 = pod("latin", "busybox").into_bytes();
    latin1.extend_from_slice(b"# caf\xe9\n");
    std::fs::write(d.join("latin.yaml"), latin1).unwrap();
    // 10,000 containers: parsed, then refused by validation (kubelet has no such cap, but the
    // sandbox and every name would be).
    let mut many =
        String::from("apiVersion: v1\nkind: Pod\nmetadata: {name: many}\nspec:\n  containers:\n");
    for i in 0..10_000 {
        many.push_str(&format!("  - {{name: c{i}, image: busybox}}\n"));
    }
    std::fs::write(d.join("many.yaml"), many).unwrap();

    let (tx, mut rx) = mpsc::channel(16);
    let options = SourceOptions {
        rescan_interval: Duration::from_secs(3600),
        debounce: Duration::from_millis(30),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let (source, _objects) = ManifestSource::spawn_with(d.to_path_buf(), tx, options).unwrap();
    assert_eq!(upserted(next(&mut rx).await).0, "good");
    for file in ["bomb.yaml", "big.yaml", "latin.yaml", "many.yaml"] {
        let message = wait_for_problem(&source, file).await;
        assert!(!message.is_empty(), "{file}");
    }
    let message = wait_for_problem(&source, "big.yaml").await;
    assert!(message.contains("more than"), "{message}");
    let message = wait_for_problem(&source, "latin.yaml").await;
    assert!(message.contains("UTF-8"), "{message}");
    let message = wait_for_problem(&source, "many.yaml").await;
    assert!(message.contains("containers"), "{message}");
    expect_quiet(&mut rx).await;
    // Not a timing goal: a guard that the bomb was not expanded (that would take minutes).
    assert!(started.elapsed() < Duration::from_secs(60));
}
