//! A new runtime on the same root re-adopts running containers and settles exited ones.

#[path = "support/runtime.rs"]
mod support;

use runp::cri::{RuntimeService, api};
use runp::runtime::ProcessRuntime;
use std::time::Duration;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_readopts_running_and_reports_exited() {
    let Some(env) = Env::for_test("restart_readopts_running_and_reports_exited").await else {
        return;
    };
    let pod = env.pod("recover").await;
    let long = env
        .run(&pod, shell("long", "echo up; exec sleep 1000"))
        .await;
    // Exits 4 while no runtime is watching.
    let short = env
        .run(&pod, shell("short", "read line < /dev/shm/go 2>/dev/null; while [ ! -e /dev/shm/go ]; do sleep 0.05; done; exit 4"))
        .await;
    env.log_lines("recover", "long", 1).await;
    let long_pid = {
        let st = env
            .rt
            .container_status(api::ContainerStatusRequest {
                container_id: long.clone(),
                verbose: true,
            })
            .await
            .unwrap();
        let info: serde_json::Value = serde_json::from_str(&st.info["info"]).unwrap();
        info["pid"].as_i64().unwrap()
    };

    let Env {
        guard,
        dir,
        images,
        rt,
    } = env;
    drop(rt);
    // The pod's /dev/shm is a host directory (in the runtime's state dir, `<root>/run` by
    // default): releasing the short container from outside.
    let shm = std::fs::read_dir(dir.path().join("rt/run/sandboxes"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("shm/go");
    std::fs::write(&shm, b"").unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let rt = ProcessRuntime::start(options(dir.path(), &images))
        .await
        .unwrap();
    let env = Env {
        guard,
        dir,
        images,
        rt,
    };
    let st = env.status(&long).await;
    assert_eq!(
        st.state,
        api::ContainerState::ContainerRunning as i32,
        "{st:?}"
    );
    assert!(std::path::Path::new(&format!("/proc/{long_pid}")).exists());
    let st = env.wait_exit(&short).await;
    assert_eq!(st.exit_code, 4, "{st:?}");
    // The re-adopted container is fully controllable: exec, stop.
    let r = env.exec(&long, &["echo", "still here"]).await;
    assert_eq!(r.stdout, b"still here\n");
    env.stop(&long, 1).await;
    assert_eq!(env.status(&long).await.exit_code, 137);
    let s = env.pod_status(&pod.0, false).await.status.unwrap();
    assert_eq!(s.state, api::PodSandboxState::SandboxReady as i32);
    // Names stay reserved across the restart.
    let err = env.create(&pod, shell("long", "true")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
    env.cleanup().await;
}
