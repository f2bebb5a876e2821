//! CRI conformance through the gRPC socket of `runp serve`: PullImage from loopback registries
//! (Debian's docker-registry, images pushed with skopeo) with basic and token auth, through
//! mirrors named by a containerd hosts.toml directory (`--registry-config-dir`), several tags
//! of one image, missing images and a pull with a sandbox config. Every case pulls an image
//! of its own (small crafted ones, each with its own id), so the cases run concurrently.
//! Skips, saying so, without root (real or mapped) or without the registry tools.

#[path = "support/conformance.rs"]
mod conformance;
#[path = "support/image.rs"]
mod crafted;
#[path = "support/registry_proxy.rs"]
mod proxy;
#[path = "support/registry.rs"]
mod registry;
#[path = "support/serve.rs"]
mod serve;
#[path = "support/runtime.rs"]
mod support;

use base64::Engine as _;
use conformance::*;
use crafted::{Compress, LayerBuilder, TestImage};
use proxy::Proxy;
use registry::{TestRegistry, oci_source, tools_present, write_hosts_toml};
use runp::cri::{ImageService, api};
use std::collections::HashMap;
use support::*;

const TEST: &str = "cri_conformance_pull";
/// The name the basic-auth registry is reached by through its hosts.toml mirror entry.
const PRIVATE: &str = "private.runp.test";

/// The registries of the run and the ids of the crafted images they serve.
struct World {
    /// Basic auth (alice:s3cret).
    auth: TestRegistry,
    /// Open; reached through `gate` only.
    _behind_gate: TestRegistry,
    /// A token server (bob:hunter2) in front of `behind_gate`.
    gate: Proxy,
    /// Open: the mirror of registry.k8s.io, docker.io and `_default`.
    mirror: TestRegistry,
    ids: HashMap<&'static str, String>,
    /// Manifest digests by pushed `repository:tag`, taken before `runp serve` starts (the
    /// test process's reaper would then race skopeo's exit status).
    digests: HashMap<String, String>,
    /// The hosts.toml directory `runp serve` reads.
    config: tempfile::TempDir,
}

impl World {
    fn id(&self, image: &str) -> &str {
        &self.ids[image]
    }

    fn digest(&self, pushed: &str) -> &str {
        &self.digests[pushed]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_conformance_pull() {
    if !is_root() {
        skip(TEST, "root (real or mapped)");
        return;
    }
    if !tools_present(TEST) {
        return;
    }
    let w = world().await;
    let config = w.config.path().display().to_string();
    // Plain http for every loopback registry (a bare host covers every port).
    let args = [
        "--network",
        "loopback",
        "--registry-config-dir",
        &config,
        "--insecure-registry",
        "127.0.0.1",
    ];
    let Some(s) = Suite::start_with(TEST, &args).await else {
        return;
    };
    let w = &w;
    s.run(vec![
        ("basic_auth", Box::pin(basic_auth(&s, w))),
        ("mirror_with_auth", Box::pin(mirror_with_auth(&s, w))),
        ("token_auth", Box::pin(token_auth(&s, w))),
        ("mirrors", Box::pin(mirrors(&s, w))),
        ("tags", Box::pin(tags(&s, w))),
        ("missing", Box::pin(missing(&s, w))),
        ("sandbox_config", Box::pin(sandbox_config(&s, w))),
    ])
    .await;
}

/// Starts the registries, pushes one crafted image per case and writes the hosts.toml files.
async fn world() -> World {
    let layout = tempfile::tempdir().unwrap();
    let names = [
        "auth",
        "mirror-auth",
        "token",
        "k8s",
        "hub",
        "default",
        "tags",
        "sandbox",
    ];
    let images: Vec<TestImage> = names
        .iter()
        .map(|name| {
            let layer = LayerBuilder::new()
                .file("image-name", name.as_bytes())
                .finish();
            TestImage::new(name, vec![(layer, Compress::Gzip)])
        })
        .collect();
    let ids = crafted::write_oci_layout(layout.path(), &images);
    let ids: HashMap<&'static str, String> = names.into_iter().zip(ids).collect();
    let source = |name: &str| oci_source(layout.path(), name);

    let auth = TestRegistry::start(Some(("alice", "s3cret")));
    auth.push(&source("auth"), "private/app:1", &[]);
    auth.push(&source("auth"), "private/app:2", &[]);
    auth.push(&source("mirror-auth"), "private/mirrored:1", &[]);
    auth.push(&source("mirror-auth"), "private/mirrored:2", &[]);
    let behind_gate = TestRegistry::start(None);
    behind_gate.push(&source("token"), "team/app:1", &[]);
    let gate = Proxy::token_gate(&behind_gate.addr).await;
    let mirror = TestRegistry::start(None);
    for (image, dest) in [
        ("k8s", "pause:3.9"),
        ("hub", "library/runp-hub:latest"),
        ("default", "google-containers/runp:1"),
        ("tags", "tags/app:a"),
        ("tags", "tags/app:b"),
        ("sandbox", "sandbox/app:1"),
    ] {
        mirror.push(&source(image), dest, &[]);
    }

    let config = tempfile::tempdir().unwrap();
    let write = |registry: &str, text: String| write_hosts_toml(config.path(), registry, &text);
    let m = &mirror.addr;
    // Nothing listens on port 1: that host fails at once and the next one is tried.
    write(
        "registry.k8s.io",
        format!(
            "server = \"https://registry.k8s.io\"\n\
             [host.\"http://127.0.0.1:1\"]\n  capabilities = [\"pull\", \"resolve\"]\n\
             [host.\"http://{m}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        ),
    );
    write(
        "docker.io",
        format!("[host.\"http://{m}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"),
    );
    // Also in front of the loopback registries of the other cases (they lack those
    // repositories: 404, then the registry itself), as containerd applies `_default`.
    write("_default", format!("[host.\"http://{m}\"]\n"));
    // The server is refused at once (no DNS lookup of a name that does not exist).
    write(
        PRIVATE,
        format!(
            "server = \"http://127.0.0.1:1\"\n[host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            auth.addr
        ),
    );
    let mut digests = HashMap::new();
    for (reg, pushed) in [
        (&auth, "private/app:1"),
        (&auth, "private/mirrored:1"),
        (&behind_gate, "team/app:1"),
        (&mirror, "pause:3.9"),
        (&mirror, "library/runp-hub:latest"),
        (&mirror, "google-containers/runp:1"),
        (&mirror, "tags/app:a"),
    ] {
        digests.insert(pushed.to_string(), reg.digest(pushed));
    }
    World {
        auth,
        _behind_gate: behind_gate,
        gate,
        mirror,
        ids,
        digests,
        config,
    }
}

async fn pull_with(
    s: &Suite,
    image: &str,
    auth: Option<api::AuthConfig>,
    sandbox_config: Option<api::PodSandboxConfig>,
) -> Result<String, tonic::Status> {
    s.rt()
        .pull_image(api::PullImageRequest {
            image: Some(api::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            auth,
            sandbox_config,
        })
        .await
        .map(|r| r.image_ref)
}

async fn pull(
    s: &Suite,
    image: &str,
    auth: Option<api::AuthConfig>,
) -> Result<String, tonic::Status> {
    pull_with(s, image, auth, None).await
}

/// A pull that must fail with `code`; the image is then not present under that name.
async fn refused(s: &Suite, image: &str, auth: Option<api::AuthConfig>, code: tonic::Code) {
    let err = pull(s, image, auth.clone())
        .await
        .expect_err(&format!("pulling {image} with {auth:?} must fail"));
    assert_eq!(err.code(), code, "{image} with {auth:?}: {err:?}");
    assert_eq!(s.image(image).await, None, "{image}: nothing stored");
}

fn user_pass(user: &str, pass: &str) -> Option<api::AuthConfig> {
    Some(api::AuthConfig {
        username: user.into(),
        password: pass.into(),
        ..Default::default()
    })
}

/// ImageStatus by each name answers the image `id`; returns it.
async fn same_image(s: &Suite, id: &str, names: &[String]) -> api::Image {
    let by_id = s.image(id).await.unwrap_or_else(|| panic!("{id} by id"));
    assert_eq!(by_id.id, id);
    for name in names {
        let found = s.image(name).await;
        assert_eq!(found.as_ref(), Some(&by_id), "ImageStatus by {name:?}");
    }
    by_id
}

/// Basic auth: refused without or with wrong credentials (nothing stored), pulled with
/// username/password and with the docker-config `auth` form, found by tag, id and digest.
async fn basic_auth(s: &Suite, w: &World) {
    let a = &w.auth.addr;
    let id = w.id("auth");
    let (one, two) = (format!("{a}/private/app:1"), format!("{a}/private/app:2"));
    refused(s, &one, None, tonic::Code::Unauthenticated).await;
    refused(
        s,
        &one,
        user_pass("alice", "wrong"),
        tonic::Code::Unauthenticated,
    )
    .await;
    assert_eq!(s.image(id).await, None, "failed pulls store nothing");

    let got = pull(s, &one, user_pass("alice", "s3cret"))
        .await
        .expect(&one);
    assert_eq!(got, id, "the image ref is the image id");
    let digest = w.digest("private/app:1");
    let pinned = format!("{a}/private/app@{digest}");
    let image = same_image(s, id, &[one.clone(), pinned.clone()]).await;
    assert_eq!(image.repo_tags, vec![one.clone()]);
    assert_eq!(
        image.repo_digests,
        vec![pinned.clone()],
        "names the registry"
    );
    assert!(image.size > 0, "{image:?}");

    // The docker-config form; the image's second tag, so the registry must be asked.
    let auth = Some(api::AuthConfig {
        auth: base64::engine::general_purpose::STANDARD.encode("alice:s3cret"),
        ..Default::default()
    });
    assert_eq!(pull(s, &two, auth).await.expect(&two), id);
    let image = same_image(s, id, &[one.clone(), two.clone(), pinned]).await;
    assert_eq!(image.repo_tags, [one.clone(), two.clone()]);
    // The stored image does not stand in for a registry that refuses the credentials.
    let err = pull(s, &one, user_pass("alice", "nope")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    let err = pull(s, &one, None).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
}

/// The request's credentials go to a hosts.toml mirror too (containerd sends them to every
/// host when the AuthConfig names no server, and only to the named one when it does), and
/// the image keeps the requested name.
async fn mirror_with_auth(s: &Suite, w: &World) {
    let id = w.id("mirror-auth");
    let name = format!("{PRIVATE}/private/mirrored:1");
    refused(s, &name, None, tonic::Code::Unauthenticated).await;
    refused(
        s,
        &name,
        user_pass("alice", "wrong"),
        tonic::Code::Unauthenticated,
    )
    .await;
    assert_eq!(s.image(id).await, None);
    let got = pull(s, &name, user_pass("alice", "s3cret"))
        .await
        .expect(&name);
    assert_eq!(got, id);
    let digest = w.digest("private/mirrored:1");
    let pinned = format!("{PRIVATE}/private/mirrored@{digest}");
    let image = same_image(s, id, &[name.clone(), pinned.clone()]).await;
    assert_eq!(
        (image.repo_tags, image.repo_digests),
        (vec![name], vec![pinned])
    );

    // Credentials that name their registry go to that host only (containerd's ParseAuth): named
    // for the upstream or for another registry, the mirror is asked anonymously and refuses.
    let second = format!("{PRIVATE}/private/mirrored:2");
    let for_server = |server: &str| {
        Some(api::AuthConfig {
            username: "alice".into(),
            password: "s3cret".into(),
            server_address: server.into(),
            ..Default::default()
        })
    };
    for server in [PRIVATE, "https://other.runp.test/v1/"] {
        refused(s, &second, for_server(server), tonic::Code::Unauthenticated).await;
    }
    // Named for the mirror host itself, they are sent.
    let mirror = format!("http://{}", w.auth.addr);
    let got = pull(s, &second, for_server(&mirror)).await.expect(&second);
    assert_eq!(got, id);
}

/// Bearer tokens from the registry's token server: none or wrong credentials are refused,
/// right ones get a token for the repository; a registry token is sent as is and only
/// opens its own scope.
async fn token_auth(s: &Suite, w: &World) {
    let g = &w.gate.addr;
    let id = w.id("token");
    let name = format!("{g}/team/app:1");
    refused(s, &name, None, tonic::Code::Unauthenticated).await;
    refused(
        s,
        &name,
        user_pass("bob", "wrong"),
        tonic::Code::Unauthenticated,
    )
    .await;
    assert_eq!(s.image(id).await, None);

    let got = pull(s, &name, user_pass("bob", "hunter2"))
        .await
        .expect(&name);
    assert_eq!(got, id);
    let requests = w.gate.token_requests();
    assert!(
        requests.iter().any(|r| r.starts_with("GET ")
            && r.contains("service=runp-test")
            && r.contains("scope=repository%3Ateam%2Fapp%3Apull")),
        "{requests:?}"
    );
    let digest = w.digest("team/app:1");
    let image = same_image(s, id, &[name.clone(), format!("{g}/team/app@{digest}")]).await;
    assert_eq!(image.repo_tags, vec![name.clone()]);

    let token = |scope: &str| {
        Some(api::AuthConfig {
            registry_token: format!("tok:repository:{scope}:pull"),
            ..Default::default()
        })
    };
    assert_eq!(pull(s, &name, token("team/app")).await.expect("token"), id);
    let err = pull(s, &name, token("other/app")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
}

/// Names under registry.k8s.io, docker.io and any other registry (`_default`) come from the
/// loopback mirror and are stored, listed and found under the requested name only.
async fn mirrors(s: &Suite, w: &World) {
    let cases = [
        (
            "k8s",
            "registry.k8s.io/pause:3.9",
            "registry.k8s.io/pause:3.9",
            "pause:3.9",
        ),
        (
            "hub",
            "runp-hub",
            "docker.io/library/runp-hub:latest",
            "library/runp-hub:latest",
        ),
        (
            "default",
            "gcr.io/google-containers/runp:1",
            "gcr.io/google-containers/runp:1",
            "google-containers/runp:1",
        ),
    ];
    for (image, requested, stored, on_mirror) in cases {
        let id = w.id(image);
        let got = pull(s, requested, None)
            .await
            .unwrap_or_else(|e| panic!("{requested}: {e:?}\n{}", w.mirror.log()));
        assert_eq!(got, id, "{requested}");
        let repository = stored.rsplit_once(':').unwrap().0;
        let pinned = format!("{repository}@{}", w.digest(on_mirror));
        let names = [requested.to_string(), stored.to_string(), pinned.clone()];
        let found = same_image(s, id, &names).await;
        assert_eq!(found.repo_tags, [stored], "{requested}");
        assert_eq!(found.repo_digests, vec![pinned.clone()], "{requested}");
        let listed = s.images().await;
        let listed = listed.iter().find(|i| i.id == id).expect("listed");
        assert_eq!(listed, &found, "ListImages and ImageStatus agree");
        // By digest through the mirror: the same image.
        assert_eq!(pull(s, &pinned, None).await.expect(&pinned), id);
    }
    // The mirror's own name never shows on what it served for others.
    let served: Vec<&str> = cases.iter().map(|c| w.id(c.0)).collect();
    for image in s
        .images()
        .await
        .iter()
        .filter(|i| served.contains(&i.id.as_str()))
    {
        for name in image.repo_tags.iter().chain(&image.repo_digests) {
            assert!(!name.contains(&w.mirror.addr), "{name} in {image:?}");
        }
    }
}

/// One image under two tags is one image with both; RemoveImage by a tag removes the image
/// with every name (as containerd deletes all of its references), RemoveImage by id too.
async fn tags(s: &Suite, w: &World) {
    let m = &w.mirror.addr;
    let id = w.id("tags");
    let (a, b) = (format!("{m}/tags/app:a"), format!("{m}/tags/app:b"));
    let pull_both = || async {
        for tag in [&a, &b] {
            assert_eq!(pull(s, tag, None).await.expect(tag), id, "{tag}");
        }
    };
    pull_both().await;
    let pinned = format!("{m}/tags/app@{}", w.digest("tags/app:a"));
    let image = same_image(s, id, &[a.clone(), b.clone(), pinned.clone()]).await;
    assert_eq!(image.repo_tags, [a.clone(), b.clone()]);
    assert_eq!(
        image.repo_digests,
        [pinned],
        "one manifest behind both tags"
    );
    let listed: Vec<api::Image> = s
        .images()
        .await
        .into_iter()
        .filter(|i| i.id == id)
        .collect();
    assert_eq!(listed, [image], "one image, listed once");

    s.remove_image(&a).await;
    for name in [&a, &b, &id.to_string()] {
        assert_eq!(s.image(name).await, None, "{name} after removing {a}");
    }
    assert!(s.images().await.iter().all(|i| i.id != id));

    pull_both().await;
    s.remove_image(id).await;
    for name in [&a, &b, &id.to_string()] {
        assert_eq!(s.image(name).await, None, "{name} after removing {id}");
    }
    s.remove_image(id).await;
    s.remove_image(&b).await;
    assert!(s.images().await.iter().all(|i| i.id != id));
}

/// A missing tag or repository is NotFound and stores nothing.
async fn missing(s: &Suite, w: &World) {
    let m = &w.mirror.addr;
    let unknown = format!("sha256:{}", "0".repeat(64));
    for image in [
        format!("{m}/tags/app:no-such-tag"),
        format!("{m}/no/such-repository:1"),
        format!("{m}/tags/app@{unknown}"),
    ] {
        refused(s, &image, None, tonic::Code::NotFound).await;
    }
}

/// A pull with the pod's sandbox config is a pull like any other.
async fn sandbox_config(s: &Suite, w: &World) {
    let name = format!("{}/sandbox/app:1", w.mirror.addr);
    let id = w.id("sandbox");
    let config = s.pod_config("pull-sandbox");
    let got = pull_with(s, &name, None, Some(config.clone()))
        .await
        .expect(&name);
    assert_eq!(got, id);
    let image = same_image(s, id, std::slice::from_ref(&name)).await;
    assert_eq!(image.repo_tags, vec![name.clone()]);
    assert_eq!(pull(s, &name, None).await.expect(&name), id, "and without");
    let err = pull_with(s, &format!("{name}-none"), None, Some(config))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
}
