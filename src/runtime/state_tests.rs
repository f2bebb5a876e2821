//! Tests of state.rs.

use super::*;

#[test]
fn listings_decode_alone_from_the_stored_configs() {
    let labels: HashMap<String, String> =
        [("io.kubernetes.pod.uid".to_string(), "u1".to_string())].into();
    let metadata = api::ContainerMetadata {
        name: "c".into(),
        attempt: 2,
    };
    let image = api::ImageSpec {
        image: "busybox".into(),
        ..Default::default()
    };
    let container = api::ContainerConfig {
        metadata: Some(metadata.clone()),
        image: Some(image.clone()),
        labels: labels.clone(),
        annotations: [("a".to_string(), "b".to_string())].into(),
        envs: vec![api::KeyValue {
            key: "K".into(),
            value: "V".into(),
        }],
        ..Default::default()
    };
    let decoded =
        decode::<ContainerListing>(&prost::Message::encode_to_vec(&container), "c").unwrap();
    assert_eq!(decoded.metadata, Some(metadata));
    assert_eq!(decoded.image, Some(image));
    assert_eq!(decoded.labels, labels);
    assert_eq!(decoded.annotations, container.annotations);
    let sandbox = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "p".into(),
            uid: "u1".into(),
            namespace: "ns".into(),
            attempt: 1,
        }),
        hostname: "h".into(),
        labels: labels.clone(),
        annotations: [("x".to_string(), "y".to_string())].into(),
        ..Default::default()
    };
    let decoded = decode::<SandboxListing>(&prost::Message::encode_to_vec(&sandbox), "s").unwrap();
    assert_eq!(decoded.metadata, sandbox.metadata);
    assert_eq!(decoded.labels, labels);
    assert_eq!(decoded.annotations, sandbox.annotations);
    // A config that does not decode lists as empty and matches no selector.
    let cache = ListingCache::<SandboxListing>::default();
    assert!(cache.get(b"\xff\xff\xff").labels.is_empty());
}

fn sample(dir: &Path) -> (PathBuf, SandboxRecord) {
    let id = ids::new_id();
    let config = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "p".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 1,
        }),
        hostname: "host".into(),
        ..Default::default()
    };
    let rec = SandboxRecord {
        id: id.clone(),
        config: prost::Message::encode_to_vec(&config),
        runtime_handler: String::new(),
        state: SandboxState::Ready,
        created_at: 1,
        hostname: "host".into(),
        host_network: false,
        host_ipc: false,
        ip: "127.0.0.1".into(),
        additional_ips: vec![],
        network_info: default_network_info(),
        network: None,
        namespaces: NamespacePaths::default(),
        infra: None,
        cgroup_parent: None,
        shm_mounted: false,
        listing: Default::default(),
    };
    let sdir = dir.join(&id);
    std::fs::create_dir_all(&sdir).unwrap();
    (sdir.join("sandbox.json"), rec)
}

#[test]
fn records_round_trip_through_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (path, rec) = sample(dir.path());
    let entry = SandboxEntry::new(rec.clone(), path.clone());
    entry.persist().unwrap();
    entry.update(|r| r.state = SandboxState::NotReady).unwrap();
    std::fs::create_dir_all(dir.path().join("not-an-id")).unwrap();
    let (loaded, problems) = load_records::<SandboxRecord>(dir.path(), "sandbox.json").unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(loaded.len(), 1);
    let got = &loaded[0].1;
    assert_eq!(got.state, SandboxState::NotReady);
    assert_eq!(got.config().unwrap().hostname, "host");
    assert_eq!(got.metadata().attempt, 1);
}

#[test]
fn records_from_before_the_cni_network_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let (_, rec) = sample(dir.path());
    let mut old = serde_json::to_value(&rec).unwrap();
    for field in ["additional_ips", "network_info", "network"] {
        old.as_object_mut().unwrap().remove(field);
    }
    let loaded: SandboxRecord = serde_json::from_value(old).unwrap();
    assert_eq!(loaded.network, None);
    assert!(loaded.additional_ips.is_empty());
    assert_eq!(
        loaded.network_info,
        "own network namespace with loopback only"
    );
}

#[test]
fn failed_write_keeps_memory_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (_, rec) = sample(dir.path());
    let entry = SandboxEntry::new(rec, dir.path().join("missing").join("sandbox.json"));
    assert!(entry.update(|r| r.state = SandboxState::NotReady).is_err());
    assert_eq!(entry.snapshot().state, SandboxState::Ready);
}

#[test]
fn corrupt_records_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let id = ids::new_id();
    std::fs::create_dir_all(dir.path().join(&id)).unwrap();
    std::fs::write(dir.path().join(&id).join("sandbox.json"), b"{not json").unwrap();
    let (loaded, problems) = load_records::<SandboxRecord>(dir.path(), "sandbox.json").unwrap();
    assert!(loaded.is_empty());
    assert_eq!(problems.len(), 1);
    assert_eq!(
        (problems[0].id.as_str(), problems[0].missing),
        (id.as_str(), false)
    );
}

#[test]
fn names_are_reserved_once() {
    let index = Index::default();
    index.reserve_name("a", "id1").unwrap();
    index.reserve_name("a", "id1").unwrap();
    assert!(matches!(
        index.reserve_name("a", "id2"),
        Err(RuntimeError::AlreadyExists(_))
    ));
    index.release_name("a", "id2");
    assert!(index.reserve_name("a", "id2").is_err());
    index.release_name("a", "id1");
    index.reserve_name("a", "id2").unwrap();
}

/// A selector naming a pod UID reads only that pod's records; any other selector reads all.
#[test]
fn selections_by_pod_uid_read_only_that_pods_records() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::default();
    let mut ids = HashMap::new();
    for uid in ["u1", "u2"] {
        let (path, mut rec) = sample(dir.path());
        let config = api::PodSandboxConfig {
            labels: [
                (POD_UID_LABEL.to_string(), uid.to_string()),
                ("app".to_string(), "web".to_string()),
            ]
            .into(),
            ..Default::default()
        };
        rec.config = prost::Message::encode_to_vec(&config);
        ids.insert(uid, rec.id.clone());
        index.insert_sandbox(Arc::new(Entry::new(rec, path)));
    }
    let selected = |selector: &[(&str, &str)]| -> Vec<String> {
        let selector = selector
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut ids: Vec<String> = index
            .sandboxes_for(&selector)
            .iter()
            .map(|e| e.with(|r| r.id.clone()))
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(selected(&[(POD_UID_LABEL, "u1")]), vec![ids["u1"].clone()]);
    assert!(selected(&[(POD_UID_LABEL, "nobody")]).is_empty());
    let mut both = vec![ids["u1"].clone(), ids["u2"].clone()];
    both.sort();
    assert_eq!(selected(&[("app", "web")]), both);
    assert_eq!(selected(&[]), both);
    index.remove_sandbox(&ids["u1"]);
    assert!(selected(&[(POD_UID_LABEL, "u1")]).is_empty());
    assert_eq!(selected(&[(POD_UID_LABEL, "u2")]), vec![ids["u2"].clone()]);
    assert!(!lock(&index.by_pod_uid).contains_key("u1"));
}
