//! CRI conformance through the gRPC socket of `runp serve`: UpdateContainerResources (seen in
//! the status and in the container's own cgroup), ContainerStats / ListContainerStats and
//! PodSandboxStats / ListPodSandboxStats with their attributes and filters, as critest's
//! container and pod stats specs check them.

#[path = "support/conformance.rs"]
mod conformance;
#[path = "support/serve.rs"]
mod serve;
#[path = "support/runtime.rs"]
mod support;

use conformance::*;
use runp::cri::{RuntimeService, api};
use support::*;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_conformance_resources() {
    const TEST: &str = "cri_conformance_resources";
    if !is_real_root() {
        return skip(TEST, "real root (cgroups)");
    }
    let Some(s) = Suite::start(TEST).await else {
        return;
    };
    s.run(vec![
        ("update_resources", Box::pin(update_resources(&s))),
        ("container_stats", Box::pin(container_stats(&s))),
        ("pod_stats", Box::pin(pod_stats(&s))),
    ])
    .await;
}

/// The container's memory limit and "quota period" from its own cgroup (v2 or v1).
const LIMITS: &str = "if [ -f /sys/fs/cgroup/memory.max ]; then \
    cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max; \
    else cat /sys/fs/cgroup/memory/memory.limit_in_bytes; \
    q=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us); [ $q = -1 ] && q=max; \
    echo $q $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us); fi";

async fn update_resources(s: &Suite) {
    let pod = s.pod(s.pod_config("res-update")).await;
    let id = s
        .run_container(
            &pod,
            container("c", "exec sleep 1000", |c| {
                c.linux.get_or_insert_with(Default::default).resources =
                    Some(api::LinuxContainerResources {
                        memory_limit_in_bytes: 64 << 20,
                        ..Default::default()
                    })
            }),
        )
        .await;
    assert_eq!(
        s.sh(&id, LIMITS).await,
        format!("{}\nmax 100000", 64u64 << 20)
    );
    let wanted = api::LinuxContainerResources {
        memory_limit_in_bytes: 128 << 20,
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 512,
        ..Default::default()
    };
    s.rt()
        .update_container_resources(api::UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(wanted.clone()),
            ..Default::default()
        })
        .await
        .expect("update resources");
    assert_eq!(
        s.sh(&id, LIMITS).await,
        format!("{}\n50000 100000", 128u64 << 20)
    );
    let reported = s
        .status(&id)
        .await
        .resources
        .and_then(|r| r.linux)
        .expect("resources");
    assert_eq!(
        (
            reported.memory_limit_in_bytes,
            reported.cpu_quota,
            reported.cpu_period,
            reported.cpu_shares
        ),
        (128 << 20, 50_000, 100_000, 512)
    );
    let err = s
        .rt()
        .update_container_resources(api::UpdateContainerResourcesRequest {
            container_id: "no-such-container".into(),
            linux: Some(wanted),
            ..Default::default()
        })
        .await
        .expect_err("update of an unknown container");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
}

fn check_container_stats(stats: &api::ContainerStats, id: &str, name: &str) {
    let attrs = stats.attributes.as_ref().expect("attributes");
    assert_eq!(attrs.id, id);
    assert_eq!(attrs.metadata.as_ref().map(|m| m.name.as_str()), Some(name));
    assert_eq!(
        attrs.labels.get("container").map(String::as_str),
        Some(name)
    );
    let cpu = stats.cpu.as_ref().expect("cpu stats");
    assert!(
        cpu.timestamp > 0 && cpu.timestamp <= now_ns(),
        "ns: {cpu:?}"
    );
    assert!(cpu.usage_core_nano_seconds.is_some(), "{cpu:?}");
    let memory = stats.memory.as_ref().expect("memory stats");
    assert!(
        memory
            .working_set_bytes
            .as_ref()
            .is_some_and(|b| b.value > 0),
        "{memory:?}"
    );
    let layer = stats.writable_layer.as_ref().expect("writable layer");
    assert!(layer.used_bytes.is_some(), "{layer:?}");
}

async fn container_stats(s: &Suite) {
    let pod = s.pod(s.pod_config("res-stats")).await;
    let mut ids = Vec::new();
    for name in ["first", "second"] {
        ids.push(
            s.run_container(&pod, container(name, "exec sleep 1000", |_| {}))
                .await,
        );
    }
    let stats = s
        .rt()
        .container_stats(api::ContainerStatsRequest {
            container_id: ids[0].clone(),
        })
        .await
        .unwrap()
        .stats
        .expect("stats");
    check_container_stats(&stats, &ids[0], "first");
    let list = |filter: api::ContainerStatsFilter| async move {
        let mut found: Vec<String> = s
            .rt()
            .list_container_stats(api::ListContainerStatsRequest {
                filter: Some(filter),
            })
            .await
            .unwrap()
            .stats
            .into_iter()
            .map(|st| st.attributes.unwrap_or_default().id)
            .collect();
        found.sort();
        found
    };
    let mut both = ids.clone();
    both.sort();
    let by_pod = api::ContainerStatsFilter {
        pod_sandbox_id: pod.0.clone(),
        ..Default::default()
    };
    assert_eq!(list(by_pod).await, both);
    let by_id = api::ContainerStatsFilter {
        id: ids[1].clone(),
        ..Default::default()
    };
    assert_eq!(list(by_id).await, vec![ids[1].clone()]);
    let by_label = api::ContainerStatsFilter {
        label_selector: labels(&[("container", "first")]),
        pod_sandbox_id: pod.0.clone(),
        ..Default::default()
    };
    assert_eq!(list(by_label).await, vec![ids[0].clone()]);
}

async fn pod_stats(s: &Suite) {
    let mut config = s.pod_config("res-pod-stats");
    config.labels = labels(&[("res", "pod-stats")]);
    let pod = s.pod(config).await;
    let id = s
        .run_container(&pod, container("c", "exec sleep 1000", |_| {}))
        .await;
    let stats = s
        .rt()
        .pod_sandbox_stats(api::PodSandboxStatsRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .unwrap()
        .stats
        .expect("pod stats");
    let attrs = stats.attributes.as_ref().expect("attributes");
    assert_eq!(attrs.id, pod.0);
    assert_eq!(attrs.metadata, pod.1.metadata);
    assert_eq!(attrs.labels, pod.1.labels);
    let linux = stats.linux.as_ref().expect("linux stats");
    assert!(
        linux.cpu.as_ref().is_some_and(|c| c.timestamp > 0),
        "{linux:?}"
    );
    assert!(
        linux
            .memory
            .as_ref()
            .is_some_and(|m| m.working_set_bytes.is_some()),
        "{linux:?}"
    );
    let ctrs: Vec<&str> = linux
        .containers
        .iter()
        .filter_map(|c| c.attributes.as_ref().map(|a| a.id.as_str()))
        .collect();
    assert_eq!(ctrs, [id.as_str()]);
    let listed = s
        .rt()
        .list_pod_sandbox_stats(api::ListPodSandboxStatsRequest {
            filter: Some(api::PodSandboxStatsFilter {
                label_selector: labels(&[("res", "pod-stats")]),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .stats;
    let ids: Vec<String> = listed
        .iter()
        .filter_map(|st| st.attributes.as_ref().map(|a| a.id.clone()))
        .collect();
    assert_eq!(ids, std::slice::from_ref(&pod.0));
    let err = s
        .rt()
        .pod_sandbox_stats(api::PodSandboxStatsRequest {
            pod_sandbox_id: "no-such-pod".into(),
        })
        .await
        .expect_err("stats of an unknown pod");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
}
