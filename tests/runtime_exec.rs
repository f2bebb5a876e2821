//! ExecSync: output, exit codes, timeouts; the bare runtime says its streaming URLs come from the
//! streaming server (tests/runtime_streaming.rs runs it).

#[path = "support/runtime.rs"]
mod support;

use runp::cri::{RuntimeService, api};
use std::time::{Duration, Instant};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_sync_output_exit_code_and_timeout() {
    let Some(env) = Env::for_test("exec_sync_output_exit_code_and_timeout").await else {
        return;
    };
    let pod = env.pod("exec").await;
    let id = env
        .run(&pod, shell("target", "echo up; exec sleep 1000"))
        .await;
    env.log_lines("exec", "target", 1).await;

    let r = env
        .exec(&id, &["sh", "-c", "echo out; echo err >&2; exit 5"])
        .await;
    assert_eq!(r.stdout, b"out\n");
    assert_eq!(r.stderr, b"err\n");
    assert_eq!(r.exit_code, 5);

    // Large output is read concurrently (no pipe deadlock) and kept whole below the cap.
    let r = env
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "yes abcdefghij | head -c 1000000; yes e | head -c 300000 >&2",
            ],
        )
        .await;
    assert_eq!(
        (r.stdout.len(), r.stderr.len(), r.exit_code),
        (1_000_000, 300_000, 0)
    );

    // Runs in the container: its hostname, its environment.
    let r = env.exec(&id, &["hostname"]).await;
    assert_eq!(r.stdout, b"exec-host\n");

    let t0 = Instant::now();
    let err = env
        .rt
        .exec_sync(api::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sleep".into(), "30".into()],
            timeout: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20));
    // The timed-out command was killed: only pid 1 sleeps now (the killed one may linger as a
    // zombie: pid 1 here is `sleep`, which reaps nothing).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = env
        .exec(
            &id,
            &["sh", "-c", "for p in /proc/[0-9]*; do grep -q '^State:.*Z' $p/status || cat $p/comm; done | grep -c sleep"],
        )
        .await;
    assert_eq!(String::from_utf8_lossy(&r.stdout).trim(), "1", "{r:?}");

    let err = env
        .rt
        .exec_sync(api::ExecSyncRequest {
            container_id: "0000".into(),
            cmd: vec!["true".into()],
            timeout: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);

    for status in [
        env.rt
            .exec(api::ExecRequest {
                container_id: id.clone(),
                cmd: vec!["sh".into()],
                ..Default::default()
            })
            .await
            .unwrap_err(),
        env.rt
            .attach(api::AttachRequest {
                container_id: id.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err(),
    ] {
        assert_eq!(status.code(), tonic::Code::Unimplemented);
        assert!(status.message().contains("streaming server"));
    }

    env.stop(&id, 0).await;
    let err = env
        .rt
        .exec_sync(api::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["true".into()],
            timeout: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    env.cleanup().await;
    let zombies = lasting_zombies();
    assert!(zombies.is_empty(), "zombies: {zombies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_report_usage() {
    let Some(env) = Env::for_test("stats_report_usage").await else {
        return;
    };
    let pod = env.pod("stats").await;
    let id = env
        .run(&pod, shell("busy", "dd if=/dev/zero of=/data bs=1024 count=2048 2>/dev/null; echo up; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec sleep 1000"))
        .await;
    env.log_lines("stats", "busy", 1).await;
    // Let the loop burn some CPU.
    let deadline = Instant::now() + Duration::from_secs(20);
    let stats = loop {
        let s = env
            .rt
            .container_stats(api::ContainerStatsRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap()
            .stats
            .unwrap();
        let cpu = s
            .cpu
            .as_ref()
            .unwrap()
            .usage_core_nano_seconds
            .as_ref()
            .unwrap()
            .value;
        if cpu > 10_000_000 || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(stats.cpu.unwrap().usage_core_nano_seconds.unwrap().value > 10_000_000);
    assert!(stats.memory.unwrap().working_set_bytes.unwrap().value > 0);
    let writable = stats.writable_layer.unwrap().used_bytes.unwrap().value;
    assert!(writable >= 2 * 1024 * 1024, "writable layer {writable}");
    let pod_stats = env
        .rt
        .pod_sandbox_stats(api::PodSandboxStatsRequest {
            pod_sandbox_id: pod.0.clone(),
        })
        .await
        .unwrap()
        .stats
        .unwrap();
    let linux = pod_stats.linux.unwrap();
    assert_eq!(linux.containers.len(), 1);
    assert!(linux.cpu.unwrap().usage_core_nano_seconds.unwrap().value > 0);
    let listed = env
        .rt
        .list_container_stats(api::ListContainerStatsRequest {
            filter: Some(api::ContainerStatsFilter {
                pod_sandbox_id: pod.0.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .stats;
    assert_eq!(listed.len(), 1);
    env.cleanup().await;
}
