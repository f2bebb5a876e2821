//! Host devices from inside a container: an unprivileged one cannot make and open a device node
//! (runc's device cgroup: deny all but null, zero, full, tty, random, urandom, console, ptmx,
//! pts, tun), and cannot write its own cgroup files; a privileged one may use any device.

#[path = "support/runtime.rs"]
mod support;

use runp::cri::{RuntimeService, api};
use support::*;

fn stdout(r: &api::ExecSyncResponse) -> String {
    String::from_utf8_lossy(&r.stdout).trim().to_string()
}

/// `mknod` a node of each (name, type, major, minor) in /tmp, then try to open it for reading;
/// prints `name:OPENED` or `name:REFUSED` per line.
fn probe_script(nodes: &[(&str, &str, u32, u32)]) -> String {
    nodes
        .iter()
        .map(|(name, kind, major, minor)| {
            format!(
                "mknod /tmp/{name} {kind} {major} {minor} 2>/dev/null; if (exec 3</tmp/{name}) 2>/dev/null; then echo {name}:OPENED; else echo {name}:REFUSED; fi"
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

const HOST_DEVICES: &[(&str, &str, u32, u32)] = &[
    ("loop0", "b", 7, 0),
    ("kvm", "c", 10, 232),
    ("fuse", "c", 10, 229),
    ("loop-control", "c", 10, 237),
    ("mem", "c", 1, 1),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unprivileged_containers_cannot_open_host_devices() {
    let Some(env) = Env::for_test("unprivileged_containers_cannot_open_host_devices").await else {
        return;
    };
    let pod = env.pod("devs").await;
    let id = env.run(&pod, shell("box", "exec sleep 1000")).await;
    let out = stdout(
        &env.exec(&id, &["sh", "-c", &probe_script(HOST_DEVICES)])
            .await,
    );
    for (name, ..) in HOST_DEVICES {
        assert!(
            out.lines().any(|l| l == format!("{name}:REFUSED")),
            "an unprivileged container opened host device {name}:\n{out}"
        );
    }
    // The default list still works.
    let ok = env
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "echo x > /dev/null && head -c 4 /dev/zero | wc -c && head -c 4 /dev/urandom | wc -c",
            ],
        )
        .await;
    assert_eq!(ok.exit_code, 0, "{ok:?}");
    assert_eq!(stdout(&ok), "4\n4");
    // Its own cgroup files are read-only inside it.
    let cgroup = env
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "for f in /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids.max /sys/fs/cgroup/memory.max; do [ -e $f ] && { echo 1 > $f 2>/dev/null && echo WROTE:$f; }; done; echo checked",
            ],
        )
        .await;
    let text = stdout(&cgroup);
    assert!(!text.contains("WROTE"), "cgroup files writable: {text}");
    assert!(text.ends_with("checked"), "{text}");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn privileged_containers_keep_every_device() {
    let test = "privileged_containers_keep_every_device";
    if !is_real_root() {
        skip(
            test,
            "real root (device nodes cannot be made in a user namespace)",
        );
        return;
    }
    let Some(env) = Env::for_test(test).await else {
        return;
    };
    let mut config = pod_config("priv", &env.logs());
    config.linux = Some(api::LinuxPodSandboxConfig {
        security_context: Some(api::LinuxSandboxSecurityContext {
            privileged: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    let sandbox = env
        .rt
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("privileged sandbox")
        .pod_sandbox_id;
    let mut container = shell("box", "exec sleep 1000");
    container.linux = Some(api::LinuxContainerConfig {
        resources: None,
        security_context: Some(api::LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        }),
    });
    let id = env.run(&(sandbox, config), container).await;
    let out = stdout(
        &env.exec(
            &id,
            &[
                "sh",
                "-c",
                &probe_script(&[("zero", "c", 1, 5), ("loop0", "b", 7, 0)]),
            ],
        )
        .await,
    );
    assert!(out.contains("zero:OPENED"), "{out}");
    assert!(out.contains("loop0:OPENED"), "{out}");
    env.cleanup().await;
}
