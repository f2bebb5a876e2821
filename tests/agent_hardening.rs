//! Host escapes through the sync loop on the real process runtime: the subPath symlink race
//! (CVE-2017-1002101 class) as the attack runs it, one container swapping a directory of a
//! shared emptyDir for a symlink to `/` while a second one mounting it with `subPath` restarts;
//! private state modes; a container flooding its log.

#[path = "support/agent.rs"]
mod support;

use runp::cri::RuntimeService;
use runp::kubelet::config::AgentConfig;
use std::time::{Duration, Instant};
use support::{AgentEnv, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_path_swap_race_never_mounts_the_host_root() {
    let test = "sub_path_swap_race_never_mounts_the_host_root";
    let Some(env) = AgentEnv::for_test(test).await else {
        return;
    };
    let marker = format!("runp-subpath-escape-{}", std::process::id());
    // The victim writes a marker through its subPath mount each run, then exits to be restarted
    // (the sync loop pins the subPath again at every start, while the swapper races it).
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: race, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: swapper
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "cd /vol && mkdir -p x && while true; do mv x x.real && ln -s / x && rm x && mv x.real x; done"]
    volumeMounts: [{{name: vol, mountPath: /vol}}]
  - name: victim
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "touch /sub/{marker}-$$ ; sleep 0.2; exit 1"]
    volumeMounts: [{{name: vol, mountPath: /sub, subPath: x}}]
  volumes:
  - {{name: vol, emptyDir: {{}}}}
"#
    );
    env.write("race.yaml", &yaml);
    let agent = env.start();
    wait_for("the victim restarted a few times", || {
        env.container("race", "victim")
            .is_some_and(|c| c.restart_count >= 4)
    })
    .await;
    let host_hits: Vec<String> = std::fs::read_dir("/")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&marker))
        .collect();
    for hit in &host_hits {
        let _ = std::fs::remove_file(format!("/{hit}"));
    }
    assert!(
        host_hits.is_empty(),
        "a container wrote the host's / through its subPath: {host_hits:?}"
    );
    // The victim did write: into the volume's x (under either of its names).
    let uid = env.uid("race");
    let volume = env
        .config
        .pod_dir(&uid)
        .join("volumes/kubernetes.io~empty-dir/vol");
    let deadline = Instant::now() + Duration::from_secs(30);
    let written = loop {
        let count = ["x", "x.real"]
            .iter()
            .filter_map(|d| std::fs::read_dir(volume.join(d)).ok())
            .flat_map(|d| d.flatten())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&marker))
            .count();
        if count > 0 || Instant::now() > deadline {
            break count;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(written > 0, "the victim never wrote through its subPath");
    env.remove("race.yaml");
    wait_for("the pod is gone", || env.pod("race").is_none()).await;
    agent.stop().await;
    env.cleanup().await;
    let leftover = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&uid) && l.contains("volume-subpaths"))
        .count();
    assert_eq!(leftover, 0, "subPath pins left mounted");
}

/// Mode bits of `path` (following symlinks).
fn mode(path: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_and_secret_directories_are_private_and_secret_files_keep_their_mode() {
    let test = "state_and_secret_directories_are_private_and_secret_files_keep_their_mode";
    let Some(env) = AgentEnv::for_test(test).await else {
        return;
    };
    env.write(
        "secret.yaml",
        r#"apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: default}
stringData: {password: hunter2, token: abc}
---
apiVersion: v1
kind: Pod
metadata: {name: modes, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "exec sleep 1000"]
    volumeMounts: [{name: creds, mountPath: /creds}]
  volumes:
  - name: creds
    secret:
      secretName: creds
      defaultMode: 0400
      items: [{key: password, path: password}, {key: token, path: token, mode: 0440}]
"#,
    );
    let agent = env.start();
    wait_for("modes running", || {
        env.phase("modes").as_deref() == Some("Running")
    })
    .await;
    // The runtime's state (container specs with their env) and the pods' volumes.
    assert_eq!(mode(&env.root().join("rt")), 0o700);
    assert_eq!(mode(&env.root().join("var/pods")), 0o750);
    let volume = env
        .root()
        .join("var/pods")
        .join(env.uid("modes"))
        .join("volumes/kubernetes.io~secret/creds");
    assert_eq!(mode(&volume.join("password")), 0o400);
    assert_eq!(mode(&volume.join("token")), 0o440);
    // As the container sees them.
    let seen = env
        .output(
            "modes",
            "main",
            &[
                "stat",
                "-L",
                "-c",
                "%a %n",
                "/creds/password",
                "/creds/token",
            ],
        )
        .await;
    assert_eq!(
        seen.trim(),
        "400 /creds/password\n440 /creds/token",
        "{seen}"
    );
    agent.stop().await;
    env.cleanup().await;
}

/// Bytes of every file under `dir`, and how many files there are.
fn usage(dir: &std::path::Path) -> (u64, usize) {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .fold((0, 0), |(bytes, files), e| {
            (bytes + e.metadata().map_or(0, |m| m.len()), files + 1)
        })
}

/// Whether a plain (not yet compressed) log file under `dir` holds `marker`.
fn logged(dir: &std::path::Path, marker: &str) -> bool {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file() && !e.path().to_string_lossy().ends_with(".gz"))
        .any(|e| {
            use std::io::{Read, Seek, SeekFrom};
            // The marker comes last: the tail of each file is enough.
            let mut tail = Vec::new();
            std::fs::File::open(e.path())
                .and_then(|mut f| {
                    f.seek(SeekFrom::End(-(f.metadata()?.len().min(1 << 16) as i64)))?;
                    f.read_to_end(&mut tail)
                })
                .is_ok_and(|_| tail.windows(marker.len()).any(|w| w == marker.as_bytes()))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flood_stays_bounded_by_rotation_and_the_agent_answers() {
    let test = "a_log_flood_stays_bounded_by_rotation_and_the_agent_answers";
    // kubelet's containerLogMaxSize / containerLogMaxFiles, checked often; the runtime holds
    // a live log at the budget these give, as `runp agent` sets it up.
    let mut rotation = AgentConfig::with_root("/unused");
    rotation.container_log_max_size = 1 << 20;
    rotation.container_log_max_files = 3;
    let live_max = rotation
        .container_log_max_live_size()
        .expect("rotation is on");
    let Some(mut env) = AgentEnv::for_test_with(test, |runtime| {
        runtime.container_log_max_live_size = Some(live_max)
    })
    .await
    else {
        return;
    };
    env.config.container_log_max_size = rotation.container_log_max_size;
    env.config.container_log_max_files = rotation.container_log_max_files;
    env.config.timings.log_rotation = Duration::from_millis(200);
    // 40 MB of 4 KiB lines as fast as the container can write them (on a fast machine that is
    // 30 MB between two checks), then a marker.
    const FLOOD: u64 = 40_000_000;
    env.write(
        "flood.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: flood, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "yes $(head -c 4096 /dev/zero | tr '\\0' x) | head -c {FLOOD}; echo flood-over; exec sleep 1000"]
"#
        ),
    );
    let agent = env.start();
    let logs = env.config.pod_logs_dir.clone();
    let started = Instant::now();
    let mut peak = 0;
    while !logged(&logs, "flood-over") {
        assert!(
            started.elapsed() < support::HANG_GUARD,
            "hang guard: the flood ends"
        );
        peak = peak.max(usage(&logs).0);
        // The runtime answers while the flood runs.
        env.rt
            .list_containers(runp::cri::api::ListContainersRequest { filter: None })
            .await
            .expect("list containers during the flood");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("log flood: peak {peak} bytes on disk of {FLOOD} written");
    // At most max_files files, each stopped at the live budget plus one read of output (64 KiB
    // and its records' prefixes): the flood waited for rotation instead of outrunning it.
    let bound = rotation.container_log_max_files as u64 * (live_max + 256 * 1024);
    assert!(peak <= bound, "peak {peak} bytes of logs, bound {bound}");
    wait_for("rotation down to the cap", || usage(&logs).1 <= 3).await;
    // The agent still acts: the pod stops when its manifest goes.
    env.remove("flood.yaml");
    support::wait_for_async("the flood pod stopped", || async {
        env.sandboxes("flood")
            .await
            .iter()
            .all(|s| s.state != runp::cri::api::PodSandboxState::SandboxReady as i32)
    })
    .await;
    agent.stop().await;
    env.cleanup().await;
}
