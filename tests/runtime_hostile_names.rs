//! Names and paths from CRI clients: pod, namespace and container names, log directory and
//! log path with `/`, `..` or NUL either work without touching anything outside runp's roots
//! and the given log directory, or are refused with InvalidArgument — never a panic.

#[path = "support/runtime.rs"]
mod support;

use runp::cri::{RuntimeService, api};
use std::path::Path;
use support::*;

/// Entries of `dir` whose names start with "escape" (where a `..` would have landed).
fn escapes(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("escape"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_and_log_paths_stay_inside_or_are_refused() {
    let Some(env) = Env::for_test("hostile_names_and_log_paths_stay_inside_or_are_refused").await
    else {
        return;
    };
    let root = env.dir.path().to_path_buf();
    let outside = root.parent().unwrap().to_path_buf();
    let logs = env.logs();

    // Names are labels, never paths: a pod and a container named with `..` and `/` run.
    let mut config = pod_config("x", &logs);
    config.metadata = Some(api::PodSandboxMetadata {
        name: "../../escape-pod".into(),
        uid: "../escape-uid/..".into(),
        namespace: "../../escape-ns".into(),
        attempt: 0,
    });
    config.log_directory = logs.join("hostile").display().to_string();
    let pod = env
        .rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("a pod with odd names runs")
        .pod_sandbox_id;
    let pod = (pod, config.clone());
    let mut odd = shell("odd", "echo hi");
    odd.metadata.as_mut().unwrap().name = "../../escape-ctr".into();
    odd.log_path = "odd.log".into();
    let id = env.run(&pod, odd).await;
    env.wait_exit(&id).await;
    assert!(logs.join("hostile/odd.log").exists());

    // Log paths that leave the log directory, or hold NUL: InvalidArgument.
    for log_path in [
        "../../../escape.log",
        "a/../../../../escape.log",
        "/tmp/escape-abs.log",
        "bad\0name.log",
    ] {
        let mut c = shell("badlog", "true");
        c.log_path = log_path.into();
        let err = env.create(&pod, c).await.expect_err(log_path);
        assert_eq!(
            err.code(),
            tonic::Code::InvalidArgument,
            "{log_path}: {err}"
        );
    }
    // A container name with NUL: refused, or harmless.
    let mut nul = shell("n", "true");
    nul.metadata.as_mut().unwrap().name = "nul\0name".into();
    if let Err(err) = env.create(&pod, nul).await {
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    }

    // Sandbox log directories that are relative, hold `..` or NUL: the sandbox runs (as with
    // containerd, which only uses the directory for container logs), containers that would log
    // there are refused with InvalidArgument.
    for (i, dir) in [
        "relative/escape-dir".to_string(),
        format!("{}/../escape-dotdot", logs.display()),
        format!("{}/bad\0dir", logs.display()),
    ]
    .into_iter()
    .enumerate()
    {
        let mut config = pod_config(&format!("baddir{i}"), &logs);
        config.log_directory = dir.clone();
        let id = env
            .rt
            .run_pod_sandbox(api::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .expect("the sandbox runs")
            .pod_sandbox_id;
        let err = env
            .create(&(id, config), shell("c", "true"))
            .await
            .expect_err(&dir);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{dir:?}: {err}");
    }

    for dir in [&outside, &root, &logs, &std::env::current_dir().unwrap()] {
        assert_eq!(escapes(dir), Vec::<String>::new(), "in {}", dir.display());
    }
    assert!(!Path::new("/tmp/escape-abs.log").exists());
    assert!(!Path::new("relative").exists());
    env.cleanup().await;
}
