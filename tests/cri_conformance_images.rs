//! CRI conformance through the gRPC socket of `runp serve`: the image service as critest's
//! image specs check it and containerd answers: ImageStatus by id, tag, digest and name
//! without tag (an unknown image is an empty answer, not an error), ListImages with several
//! tags per image, the image user, ImageFsInfo, RemoveImage by tag (all of the image's names
//! go, as containerd removes every reference) and by id, idempotently.

#[path = "support/conformance.rs"]
mod conformance;
#[path = "support/serve.rs"]
mod serve;
#[path = "support/runtime.rs"]
mod support;

use conformance::*;
use runp::cri::{ImageService, api};
use std::path::Path;
use support::*;

const BUSYBOX_ALIAS: &str = "runp.test/busybox:1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_conformance_images() {
    let Some(s) = Suite::start("cri_conformance_images").await else {
        return;
    };
    // One case: removal must come after the lookups.
    s.run(vec![("images", Box::pin(images(&s)))]).await;
}

async fn images(s: &Suite) {
    let busybox = s.image(BUSYBOX).await.expect("busybox by tag");
    assert!(
        busybox.id.starts_with("sha256:") && busybox.id.len() == 71,
        "{busybox:?}"
    );
    let mut tags = busybox.repo_tags.clone();
    tags.sort();
    assert_eq!(tags, [BUSYBOX, BUSYBOX_ALIAS], "both names of one image");
    assert!(busybox.size > 0, "{busybox:?}");
    assert_eq!(
        (busybox.uid, busybox.username.as_str()),
        (None, ""),
        "no image user"
    );
    assert!(!busybox.pinned);

    let mut lookups = vec![
        busybox.id.clone(),
        busybox.id["sha256:".len()..].to_string(),
        BUSYBOX_ALIAS.to_string(),
        "docker.io/library/busybox".to_string(),
        "busybox".to_string(),
        "busybox:latest".to_string(),
        "library/busybox:latest".to_string(),
    ];
    lookups.extend(busybox.repo_digests.iter().cloned());
    for name in &lookups {
        let found = s.image(name).await;
        assert_eq!(
            found.as_ref().map(|i| &i.id),
            Some(&busybox.id),
            "lookup by {name:?}"
        );
    }
    for digest in &busybox.repo_digests {
        assert!(digest.contains("@sha256:"), "{digest}");
    }
    let unknown_id = format!("sha256:{}", "0".repeat(64));
    // Not valid references either: not present, as containerd answers (not an error).
    for unknown in [
        "runp.test/none:1",
        "busybox:no-such-tag",
        &unknown_id,
        "sha256:0123",
        "Not A Ref",
    ] {
        assert_eq!(s.image(unknown).await, None, "{unknown}");
    }

    let err = s
        .rt()
        .pull_image(api::PullImageRequest {
            image: Some(api::ImageSpec {
                image: "Not A Ref".into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect_err("pulling an invalid reference");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    s.remove_image("Not A Ref").await;

    let extra = s.image(EXTRA).await.expect("busybox-extra");
    assert_eq!(extra.username, "app", "the image's user by name");
    assert_eq!(extra.repo_tags, [EXTRA]);
    let listed = s.images().await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    let listed_busybox = listed.iter().find(|i| i.id == busybox.id).expect("listed");
    assert_eq!(listed_busybox, &busybox, "ListImages and ImageStatus agree");

    let fs = s
        .rt()
        .image_fs_info(api::ImageFsInfoRequest {})
        .await
        .unwrap();
    let usage = fs.image_filesystems.first().expect("an image filesystem");
    let mountpoint = &usage.fs_id.as_ref().expect("fs_id").mountpoint;
    assert!(Path::new(mountpoint).is_dir(), "{usage:?}");
    assert!(
        usage.used_bytes.as_ref().is_some_and(|b| b.value > 0),
        "{usage:?}"
    );
    assert!(
        usage.inodes_used.as_ref().is_some_and(|b| b.value > 0),
        "{usage:?}"
    );
    assert!(
        usage.timestamp > 0 && usage.timestamp <= now_ns(),
        "ns: {usage:?}"
    );

    // By tag: containerd removes every reference of the image.
    s.remove_image(BUSYBOX_ALIAS).await;
    assert_eq!(s.image(BUSYBOX).await, None, "the other tag went too");
    assert_eq!(s.image(&busybox.id).await, None);
    s.remove_image(BUSYBOX_ALIAS).await;
    // By id.
    s.remove_image(&extra.id).await;
    assert_eq!(s.image(EXTRA).await, None);
    s.remove_image(&extra.id).await;
    assert_eq!(s.images().await, Vec::<api::Image>::new());
}
