//! Pulls from a real registry (Debian's docker-registry on loopback, images pushed with
//! skopeo): formats, platform selection, basic and token auth, single flight, corrupted blobs
//! and resumed downloads. Skips, saying so, when docker-registry or skopeo is missing.

#[path = "support/registry_proxy.rs"]
mod proxy;
#[path = "support/registry.rs"]
mod registry;
#[path = "support/image.rs"]
mod support;

use proxy::{Proxy, ProxyConfig};
use registry::{TestRegistry, loopback_certificates, oci_source, tools_present, write_hosts_toml};
use runp::cri::{ImageService, api};
use runp::image::{ImageStore, RegistryOptions, RootfsPolicy, StoreOptions};
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use support::*;

/// The busybox fixture's one big layer (the busybox binary, gzip).
const BIG_LAYER: &str = "sha256:67334af6ec0eaa58f39f7d15fca9a472c65fbb3c5471194cbc512d05e94ca206";

fn store_for(dir: &Path, insecure: &[&str], tweak: impl FnOnce(&mut StoreOptions)) -> ImageStore {
    let mut options = StoreOptions {
        rootfs: RootfsPolicy::CopyOnly,
        registry: RegistryOptions {
            insecure: insecure.iter().map(|s| s.to_string()).collect(),
            ..RegistryOptions::default()
        },
        ..StoreOptions::default()
    };
    tweak(&mut options);
    ImageStore::open_with(dir.join("images"), options).expect("open store")
}

async fn pull(
    store: &ImageStore,
    image: &str,
    auth: Option<api::AuthConfig>,
) -> Result<String, tonic::Status> {
    store
        .pull_image(api::PullImageRequest {
            image: Some(api::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            auth,
            ..Default::default()
        })
        .await
        .map(|r| r.image_ref)
}

fn user_pass(user: &str, pass: &str) -> Option<api::AuthConfig> {
    Some(api::AuthConfig {
        username: user.into(),
        password: pass.into(),
        ..Default::default()
    })
}

/// The id `runp image load` gives the busybox fixture.
fn local_busybox_id() -> String {
    let dir = tempfile::tempdir().unwrap();
    import_fixture(&open_store(dir.path()), "busybox-oci").id
}

fn busybox_source() -> String {
    oci_source(&fixtures().join("busybox-oci"), BUSYBOX_TAG)
}

fn ingest_files(dir: &Path) -> Vec<(String, u64)> {
    fs::read_dir(dir.join("images/ingest"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                e.metadata().unwrap().len(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_oci_and_docker_schema2_images_like_a_local_import() {
    const TEST: &str = "pulls_oci_and_docker_schema2_images_like_a_local_import";
    if !tools_present(TEST) {
        return;
    }
    let reg = TestRegistry::start(None);
    reg.push(&busybox_source(), "library/busybox:oci", &[]);
    reg.push(
        &busybox_source(),
        "library/busybox:v2s2",
        &["--format", "v2s2"],
    );
    let want_id = local_busybox_id();
    let dir = tempfile::tempdir().unwrap();
    let store = store_for(dir.path(), &[&reg.addr], |_| {});
    let addr = &reg.addr;

    for tag in ["oci", "v2s2"] {
        let image = format!("{addr}/library/busybox:{tag}");
        let id = pull(&store, &image, None).await.expect(&image);
        assert_eq!(
            id, want_id,
            "{tag}: the image id is the config digest, as on import"
        );
        let record = store.resolve(&image).unwrap();
        let digest = reg.digest(&format!("library/busybox:{tag}"));
        assert!(
            record
                .repo_digests
                .contains(&format!("{addr}/library/busybox@{digest}")),
            "{tag}: {:?} lacks {digest}",
            record.repo_digests
        );
        assert!(record.repo_tags.contains(&image), "{:?}", record.repo_tags);
    }
    let record = store.resolve(&want_id).unwrap();
    assert_eq!(
        record.repo_digests.len(),
        2,
        "the OCI and the schema2 manifest differ"
    );

    // By digest: the same image, found again under that digest.
    let pinned = record.repo_digests[0].clone();
    assert_eq!(pull(&store, &pinned, None).await.unwrap(), want_id);
    assert_eq!(store.list().unwrap().len(), 1);

    // Run-ready: the merged root filesystem is the fixture's.
    let container = dir.path().join("c1");
    let rootfs = store.prepare_rootfs(&want_id, "c1", &container).unwrap();
    check_busybox_tree(TEST, &rootfs.path);
    store.release_rootfs(&want_id, "c1", &container).unwrap();
    assert!(
        ingest_files(dir.path()).is_empty(),
        "no partial downloads left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_platform_index_selects_this_host() {
    const TEST: &str = "multi_platform_index_selects_this_host";
    if !tools_present(TEST) {
        return;
    }
    let layout = tempfile::tempdir().unwrap();
    let lp = layout.path();
    let multi = write_multi_platform_layout(lp, &fixtures().join("busybox-oci"), "multi");
    let (config_digest, layer_digest) = (multi.arm_config, multi.arm_layer);
    let (arm_digest, index_digest) = (multi.arm_manifest, multi.index);
    let reg = TestRegistry::start(None);
    reg.push(&oci_source(lp, "multi"), "library/multi:1", &["--all"]);
    let counted = Proxy::start(&reg.addr, ProxyConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let store = store_for(dir.path(), &[&counted.addr], |_| {});
    let image = format!("{}/library/multi:1", counted.addr);
    let id = pull(&store, &image, None).await.unwrap();
    assert_eq!(id, local_busybox_id(), "the linux/amd64 entry was chosen");
    let fetched = counted.blob_gets();
    assert!(
        !fetched.contains(&config_digest) && !fetched.contains(&layer_digest),
        "nothing of the arm64 image is downloaded: {fetched:?}"
    );
    assert!(counted.gets(&format!("/manifests/{arm_digest}")).is_empty());
    assert_eq!(
        store.resolve(&image).unwrap().repo_digests,
        vec![format!("{}/library/multi@{index_digest}", counted.addr)],
        "the repo digest is what the tag names: the index"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_refuses_wrong_credentials_and_keeps_nothing() {
    const TEST: &str = "basic_auth_refuses_wrong_credentials_and_keeps_nothing";
    if !tools_present(TEST) {
        return;
    }
    let reg = TestRegistry::start(Some(("alice", "s3cret")));
    reg.push(&busybox_source(), "private/busybox:1", &[]);
    let dir = tempfile::tempdir().unwrap();
    let store = store_for(dir.path(), &[&reg.addr], |_| {});
    let image = format!("{}/private/busybox:1", reg.addr);
    let before = snapshot(&dir.path().join("images"));

    let anonymous = pull(&store, &image, None).await.unwrap_err();
    assert_eq!(
        anonymous.code(),
        tonic::Code::Unauthenticated,
        "{anonymous:?}"
    );
    assert!(
        anonymous.message().contains("none were given"),
        "{}",
        anonymous.message()
    );
    let wrong = pull(&store, &image, user_pass("alice", "wrong"))
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), tonic::Code::Unauthenticated, "{wrong:?}");
    assert_eq!(
        snapshot(&dir.path().join("images")),
        before,
        "failed pulls leave the store as it was"
    );

    let id = pull(&store, &image, user_pass("alice", "s3cret"))
        .await
        .unwrap();
    assert_eq!(id, local_busybox_id());
    // The docker-config `auth` form, into a fresh store.
    let other = tempfile::tempdir().unwrap();
    let store2 = store_for(other.path(), &[&reg.addr], |_| {});
    let auth = Some(api::AuthConfig {
        auth: "YWxpY2U6czNjcmV0".into(), // alice:s3cret
        ..Default::default()
    });
    assert_eq!(pull(&store2, &image, auth).await.unwrap(), id);
    // Right credentials earlier do not let wrong ones through later.
    let again = pull(&store2, &image, user_pass("alice", "nope"))
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::Unauthenticated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth_answers_bearer_challenges() {
    const TEST: &str = "token_auth_answers_bearer_challenges";
    if !tools_present(TEST) {
        return;
    }
    let reg = TestRegistry::start(None);
    reg.push(&busybox_source(), "team/busybox:1", &[]);
    reg.push(&busybox_source(), "other/busybox:1", &[]);
    let gate = Proxy::token_gate(&reg.addr).await;
    let image = format!("{}/team/busybox:1", gate.addr);
    let want = local_busybox_id();
    let fresh = || {
        let dir = tempfile::tempdir().unwrap();
        let store = store_for(dir.path(), &[&gate.addr], |_| {});
        (dir, store)
    };

    let (_d, store) = fresh();
    let err = pull(&store, &image, None).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    let err = pull(&store, &image, user_pass("bob", "wrong"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert!(store.list().unwrap().is_empty());

    gate.clear();
    assert_eq!(
        pull(&store, &image, user_pass("bob", "hunter2"))
            .await
            .unwrap(),
        want
    );
    let requests = gate.token_requests();
    assert!(
        requests.iter().any(|r| r.starts_with("GET ")
            && r.contains("service=runp-test")
            && r.contains("scope=repository%3Ateam%2Fbusybox%3Apull")),
        "{requests:?}"
    );
    assert_eq!(
        requests.len(),
        1,
        "the token is reused for every request: {requests:?}"
    );

    let (_d, store) = fresh();
    let identity = Some(api::AuthConfig {
        identity_token: "refresh-me".into(),
        ..Default::default()
    });
    gate.clear();
    assert_eq!(pull(&store, &image, identity).await.unwrap(), want);
    assert!(
        gate.token_requests()
            .iter()
            .any(|r| r.starts_with("POST ") && r.contains("grant_type=refresh_token")),
        "{:?}",
        gate.token_requests()
    );

    let (_d, store) = fresh();
    let token = |scope: &str| {
        Some(api::AuthConfig {
            registry_token: format!("tok:repository:{scope}:pull"),
            ..Default::default()
        })
    };
    gate.clear();
    assert_eq!(
        pull(&store, &image, token("team/busybox")).await.unwrap(),
        want
    );
    assert!(
        gate.token_requests().is_empty(),
        "a registry token is used as is"
    );
    let other = format!("{}/other/busybox:1", gate.addr);
    let denied = pull(&store, &other, token("team/busybox"))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_images_and_bad_references_have_their_codes() {
    const TEST: &str = "missing_images_and_bad_references_have_their_codes";
    if !tools_present(TEST) {
        return;
    }
    let reg = TestRegistry::start(None);
    reg.push(&busybox_source(), "library/busybox:1", &[]);
    let dir = tempfile::tempdir().unwrap();
    let closed = format!("127.0.0.1:{}", registry::free_port());
    let store = store_for(dir.path(), &[&reg.addr, &closed], |_| {});
    let addr = &reg.addr;
    let cases = [
        (format!("{addr}/library/busybox:2"), tonic::Code::NotFound),
        (format!("{addr}/library/nothing:1"), tonic::Code::NotFound),
        ("Not A Ref".to_string(), tonic::Code::InvalidArgument),
        (
            format!("{closed}/library/busybox:1"),
            tonic::Code::Unavailable,
        ),
    ];
    for (image, code) in cases {
        let err = pull(&store, &image, None).await.unwrap_err();
        assert_eq!(err.code(), code, "{image}: {err:?}");
    }
    // Plain https is the default: the test registry speaks http only, so this fails.
    let strict = tempfile::tempdir().unwrap();
    let https_only = store_for(strict.path(), &[], |_| {});
    let err = pull(&https_only, &format!("{addr}/library/busybox:1"), None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pulls_of_one_image_download_once() {
    const TEST: &str = "concurrent_pulls_of_one_image_download_once";
    if !tools_present(TEST) {
        return;
    }
    let reg = TestRegistry::start(None);
    reg.push(&busybox_source(), "library/busybox:1", &[]);
    // Slow blobs keep the first pull under way while the others arrive.
    let counted = Proxy::start(
        &reg.addr,
        ProxyConfig {
            blob_delay: Some(Duration::from_millis(300)),
            ..ProxyConfig::default()
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let store = store_for(dir.path(), &[&counted.addr], |_| {});
    let image = format!("{}/library/busybox:1", counted.addr);
    let pulls = (0..4).map(|_| pull(&store, &image, None));
    let ids = futures::future::join_all(pulls).await;
    let want = local_busybox_id();
    for id in ids {
        assert_eq!(id.unwrap(), want);
    }
    assert_eq!(counted.gets("/manifests/1").len(), 1, "one manifest fetch");
    let blobs = counted.blob_gets();
    assert_eq!(blobs.len(), 4, "config and 3 layers, each once: {blobs:?}");
    let mut unique = blobs.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), blobs.len(), "{blobs:?}");

    // A later pull checks the tag again but downloads nothing it has.
    assert_eq!(pull(&store, &image, None).await.unwrap(), want);
    assert_eq!(counted.gets("/manifests/1").len(), 2);
    assert_eq!(counted.blob_gets().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_blob_is_rejected_and_leaves_nothing() {
    const TEST: &str = "a_corrupted_blob_is_rejected_and_leaves_nothing";
    if !tools_present(TEST) {
        return;
    }
    let reg = TestRegistry::start(None);
    reg.push(&busybox_source(), "library/busybox:1", &[]);
    let blob = reg.blob_file(BIG_LAYER);
    let mut bytes = fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&blob, &bytes).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = store_for(dir.path(), &[&reg.addr], |_| {});
    let before = snapshot(&dir.path().join("images"));
    let err = pull(&store, &format!("{}/library/busybox:1", reg.addr), None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::DataLoss, "{err:?}");
    assert!(
        err.message().contains("digest mismatch") && err.message().contains(BIG_LAYER),
        "{}",
        err.message()
    );
    assert_eq!(
        snapshot(&dir.path().join("images")),
        before,
        "no partial blob, no image, no layer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_downloads_resume_with_range_requests() {
    const TEST: &str = "interrupted_downloads_resume_with_range_requests";
    if !tools_present(TEST) {
        return;
    }
    let reg = TestRegistry::start(None);
    reg.push(&busybox_source(), "library/busybox:1", &[]);
    const CUT: usize = 300_000;
    let flaky = Proxy::start(
        &reg.addr,
        ProxyConfig {
            cut_digest: Some(BIG_LAYER.into()),
            cut_after: CUT,
            ..ProxyConfig::default()
        },
    )
    .await;
    let image = format!("{}/library/busybox:1", flaky.addr);
    let want = local_busybox_id();
    let big = format!("/blobs/{BIG_LAYER}");
    let ranges = |proxy: &Proxy| -> Vec<Option<String>> {
        proxy
            .seen()
            .into_iter()
            .filter(|s| s.method == "GET" && s.path.ends_with(&big))
            .map(|s| s.range)
            .collect()
    };

    // Within one pull: cut once, resumed from where it broke.
    flaky.cut(1);
    let dir = tempfile::tempdir().unwrap();
    let store = store_for(dir.path(), &[&flaky.addr], |_| {});
    assert_eq!(pull(&store, &image, None).await.unwrap(), want);
    assert_eq!(
        ranges(&flaky),
        vec![None, Some(format!("bytes={CUT}-"))],
        "the retry asks for the rest only"
    );
    assert!(ingest_files(dir.path()).is_empty());

    // Across pulls: every attempt cut, the pull fails and keeps what it got...
    flaky.clear();
    flaky.cut(usize::MAX);
    let dir = tempfile::tempdir().unwrap();
    let single_try = |o: &mut StoreOptions| o.registry.blob_attempts = 1;
    let store = store_for(dir.path(), &[&flaky.addr], single_try);
    let err = pull(&store, &image, None).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    let partial = ingest_files(dir.path());
    assert_eq!(
        partial,
        vec![(
            BIG_LAYER.trim_start_matches("sha256:").to_string(),
            CUT as u64
        )]
    );
    assert!(store.list().unwrap().is_empty());
    // ...and the next pull continues from it.
    flaky.cut(0);
    flaky.clear();
    assert_eq!(pull(&store, &image, None).await.unwrap(), want);
    assert_eq!(ranges(&flaky), vec![Some(format!("bytes={CUT}-"))]);
    assert!(ingest_files(dir.path()).is_empty());

    // A partial nobody resumes is collected once stale.
    flaky.cut(usize::MAX);
    let dir = tempfile::tempdir().unwrap();
    let store = store_for(dir.path(), &[&flaky.addr], single_try);
    pull(&store, &image, None).await.unwrap_err();
    assert_eq!(ingest_files(dir.path()).len(), 1);
    drop(store);
    let later = SystemTime::now() + Duration::from_secs(3 * 86_400);
    let _reopened = store_for(dir.path(), &[], |o| o.clock = Arc::new(move || later));
    assert!(ingest_files(dir.path()).is_empty(), "stale partial removed");
}

#[test]
fn runp_image_pull_from_the_command_line() {
    const TEST: &str = "runp_image_pull_from_the_command_line";
    if !tools_present(TEST) {
        return;
    }
    let reg = TestRegistry::start(Some(("carol", "pw")));
    reg.push(&busybox_source(), "library/busybox:1", &[]);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("images");
    let image = format!("{}/library/busybox:1", reg.addr);
    let runp = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_runp"))
            .arg("--image-root")
            .arg(&root)
            .args(["--log-level", "warn", "image", "pull", &image])
            .args(["--insecure-registry", &reg.addr])
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = runp(&["--creds", "carol:bad"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("authentication failed"), "{stderr}");

    let pulled = runp(&["--creds", "carol:pw"]);
    let stdout = String::from_utf8_lossy(&pulled.stdout);
    assert!(
        pulled.status.success(),
        "{}",
        String::from_utf8_lossy(&pulled.stderr)
    );
    let want = local_busybox_id();
    assert!(stdout.contains(&format!("Image ID: {want}")), "{stdout}");
    assert_eq!(
        stdout.matches("downloaded").count(),
        3,
        "one line per layer: {stdout}"
    );
    let again = runp(&["--creds", "carol:pw"]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert_eq!(stdout.matches("already present").count(), 3, "{stdout}");
}

/// containerd's hosts.toml layout (`--registry-config-dir`): names under registry.k8s.io,
/// docker.io and any other registry (`_default`) come from a loopback mirror, hosts tried in
/// file order, and the image is stored under the name asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_from_a_hosts_toml_dir_serve_any_registry_name() {
    const TEST: &str = "mirrors_from_a_hosts_toml_dir_serve_any_registry_name";
    if !tools_present(TEST) {
        return;
    }
    let reg = TestRegistry::start(None);
    reg.push(&busybox_source(), "pause:3.9", &[]);
    reg.push(&busybox_source(), "library/busybox:latest", &[]);
    reg.push(&busybox_source(), "google-containers/busybox:1", &[]);
    let config = tempfile::tempdir().unwrap();
    let write = |registry: &str, text: String| write_hosts_toml(config.path(), registry, &text);
    let addr = &reg.addr;
    // Nothing listens on port 1: that host fails and the next one is tried.
    write(
        "registry.k8s.io",
        format!(
            "server = \"https://registry.k8s.io\"\n\
             [host.\"http://127.0.0.1:1\"]\n  capabilities = [\"pull\", \"resolve\"]\n\
             [host.\"http://{addr}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        ),
    );
    write("docker.io", format!("[host.\"http://{addr}\"]\n"));
    write("_default", format!("[host.\"http://{addr}\"]\n"));
    write(
        "quay.io",
        "[host.\"http://127.0.0.1:1\"]\n  mirror = true\n".into(),
    );

    let dir = tempfile::tempdir().unwrap();
    // No --insecure-registry: plain http comes from the hosts.toml URLs alone.
    let store = store_for(dir.path(), &[], |o| {
        o.registry.config_dir = Some(config.path().to_owned());
    });
    let want_id = local_busybox_id();
    for (image, stored) in [
        ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.9"),
        ("busybox", "docker.io/library/busybox:latest"),
        (
            "gcr.io/google-containers/busybox:1",
            "gcr.io/google-containers/busybox:1",
        ),
    ] {
        let id = pull(&store, image, None)
            .await
            .unwrap_or_else(|e| panic!("{image}: {e:?}\n{}", reg.log()));
        assert_eq!(id, want_id, "{image}");
        let record = store.resolve(stored).expect(stored);
        assert!(
            record.repo_tags.contains(&stored.to_string()),
            "{:?}",
            record.repo_tags
        );
    }
    let record = store.resolve(&want_id).unwrap();
    let digest = reg.digest("pause:3.9");
    assert!(
        record
            .repo_digests
            .contains(&format!("registry.k8s.io/pause@{digest}")),
        "{:?}",
        record.repo_digests
    );

    // A mistake in a hosts.toml is the node's: FailedPrecondition, naming the file.
    let err = pull(&store, "quay.io/x/y:1", None)
        .await
        .expect_err("unknown field");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    let file = config.path().join("quay.io/hosts.toml");
    assert!(
        err.message().contains(&file.display().to_string()) && err.message().contains("mirror"),
        "{}",
        err.message()
    );
}

#[test]
fn runp_image_pull_uses_the_registry_config_dir() {
    const TEST: &str = "runp_image_pull_uses_the_registry_config_dir";
    if !tools_present(TEST) {
        return;
    }
    let reg = TestRegistry::start(None);
    reg.push(&busybox_source(), "pause:3.10", &[]);
    let config = tempfile::tempdir().unwrap();
    write_hosts_toml(
        config.path(),
        "registry.k8s.io",
        &format!("[host.\"http://{}\"]\n", reg.addr),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_runp"))
        .arg("--image-root")
        .arg(dir.path().join("images"))
        .args([
            "--log-level",
            "warn",
            "image",
            "pull",
            "registry.k8s.io/pause:3.10",
        ])
        .arg("--registry-config-dir")
        .arg(config.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("Image ID: {}", local_busybox_id())),
        "{stdout}"
    );
}

/// A hosts.toml host that serves a blob wrong (here: corrupted bytes) is passed over for that
/// blob: the next pull host serves it, as containerd's fetcher does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_a_mirror_serves_wrong_comes_from_the_next_host() {
    const TEST: &str = "a_blob_a_mirror_serves_wrong_comes_from_the_next_host";
    if !tools_present(TEST) {
        return;
    }
    let (bad, good) = (TestRegistry::start(None), TestRegistry::start(None));
    for reg in [&bad, &good] {
        reg.push(&busybox_source(), "pause:3.9", &[]);
    }
    let blob = bad.blob_file(BIG_LAYER);
    let mut bytes = fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&blob, &bytes).unwrap();
    let config = tempfile::tempdir().unwrap();
    write_hosts_toml(
        config.path(),
        "registry.k8s.io",
        &format!(
            "[host.\"http://{}\"]\n[host.\"http://{}\"]\n",
            bad.addr, good.addr
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let store = store_for(dir.path(), &[], |o| {
        o.registry.config_dir = Some(config.path().to_owned());
    });
    let id = pull(&store, "registry.k8s.io/pause:3.9", None)
        .await
        .expect("the second host serves the layer");
    assert_eq!(id, local_busybox_id());
    assert!(
        ingest_files(dir.path()).is_empty(),
        "no partial download left"
    );
}

/// TLS settings of a hosts.toml: a registry whose certificate no system root knows is refused,
/// reached with its CA (`ca`, relative to the file) or with `skip_verify`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_toml_tls_settings_reach_a_registry_with_a_private_ca() {
    const TEST: &str = "hosts_toml_tls_settings_reach_a_registry_with_a_private_ca";
    if !tools_present(TEST) {
        return;
    }
    let config = tempfile::tempdir().unwrap();
    let host_dir = config.path().join("registry.k8s.io");
    fs::create_dir(&host_dir).unwrap();
    let Some((ca, cert, key)) = loopback_certificates(TEST, &host_dir) else {
        return;
    };
    let reg = TestRegistry::start_with(None, Some((&cert, &key)));
    reg.push(&busybox_source(), "pause:3.9", &[]);
    let server = format!("server = \"https://{}\"\n", reg.addr);
    let cases = [
        ("", Err(tonic::Code::Unavailable)),
        ("ca = \"ca.pem\"\n", Ok(())),
        ("skip_verify = true\n", Ok(())),
    ];
    assert!(ca.exists());
    for (settings, want) in cases {
        fs::write(host_dir.join("hosts.toml"), format!("{server}{settings}")).unwrap();
        // A fresh store each time: an unreachable registry would otherwise be covered by the
        // image an earlier case stored.
        let dir = tempfile::tempdir().unwrap();
        let store = store_for(dir.path(), &[], |o| {
            o.registry.config_dir = Some(config.path().to_owned());
        });
        let got = pull(&store, "registry.k8s.io/pause:3.9", None).await;
        match want {
            Ok(()) => assert_eq!(got.expect(settings), local_busybox_id(), "{settings}"),
            Err(code) => {
                let err = got.expect_err("an unknown CA is refused");
                assert_eq!(err.code(), code, "{err:?}");
                assert!(err.message().contains("certificate"), "{}", err.message());
            }
        }
    }
}
