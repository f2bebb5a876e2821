//! Seccomp profiles, checked from inside the container: its own process (filtered by
//! libcontainer at start) and exec'd processes (filtered by runp's executor), as critest checks
//! them through ExecSync.

#[path = "support/runtime.rs"]
mod support;

use runp::cri::api;
use runp::cri::api::security_profile::ProfileType;
use support::*;

fn with_seccomp(
    mut config: api::ContainerConfig,
    typ: ProfileType,
    path: &str,
) -> api::ContainerConfig {
    config.linux = Some(api::LinuxContainerConfig {
        resources: None,
        security_context: Some(api::LinuxContainerSecurityContext {
            seccomp: Some(api::SecurityProfile {
                profile_type: typ as i32,
                localhost_ref: path.to_string(),
            }),
            ..Default::default()
        }),
    });
    config
}

/// `Seccomp:` of /proc/self/status: 0 unfiltered, 2 filtered.
const SECCOMP_MODE: &str = "grep Seccomp: /proc/self/status | tr -d '\\t '";
const TRY_USERNS: &str =
    "unshare -U true 2>/dev/null && echo userns-allowed || echo userns-refused";

fn stdout(r: &api::ExecSyncResponse) -> String {
    String::from_utf8_lossy(&r.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_default_filters_the_container_and_its_execs() {
    let Some(env) = Env::for_test("runtime_default_filters_the_container_and_its_execs").await
    else {
        return;
    };
    let pod = env.pod("scd").await;
    let script = format!("{SECCOMP_MODE}; {TRY_USERNS}; exec sleep 1000");
    let id = env
        .run(
            &pod,
            with_seccomp(shell("box", &script), ProfileType::RuntimeDefault, ""),
        )
        .await;
    let lines = env.log_lines("scd", "box", 2).await;
    assert_eq!(lines, ["Seccomp:2", "userns-refused"]);

    let exec = env
        .exec(&id, &["sh", "-c", &format!("{SECCOMP_MODE}; {TRY_USERNS}")])
        .await;
    assert_eq!(stdout(&exec), "Seccomp:2\nuserns-refused", "{exec:?}");
    // Ordinary work is untouched.
    let exec = env
        .exec(
            &id,
            &[
                "sh",
                "-c",
                "echo x > /tmp/f && chmod 600 /tmp/f && cat /tmp/f",
            ],
        )
        .await;
    assert_eq!(
        (exec.exit_code, stdout(&exec).as_str()),
        (0, "x"),
        "{exec:?}"
    );

    // Unconfined (and unset) containers are not filtered.
    let free = env
        .run(
            &pod,
            with_seccomp(
                shell("free", "exec sleep 1000"),
                ProfileType::Unconfined,
                "",
            ),
        )
        .await;
    let exec = env.exec(&free, &["sh", "-c", SECCOMP_MODE]).await;
    assert_eq!(stdout(&exec), "Seccomp:0");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localhost_profiles_are_loaded_and_bad_ones_refused() {
    let Some(env) = Env::for_test("localhost_profiles_are_loaded_and_bad_ones_refused").await
    else {
        return;
    };
    let profile = env.logs().with_file_name("deny-chmod.json");
    std::fs::write(
        &profile,
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["chmod","fchmodat","fchmodat2"],"action":"SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let path = profile.to_str().unwrap();
    let pod = env.pod("scl").await;
    let script = "chmod 600 /etc/hostname 2>&1; exec sleep 1000";
    let id = env
        .run(
            &pod,
            with_seccomp(shell("box", script), ProfileType::Localhost, path),
        )
        .await;
    let lines = env.log_lines("scl", "box", 1).await;
    assert!(lines[0].contains("Operation not permitted"), "{lines:?}");
    let exec = env.exec(&id, &["chmod", "600", "/etc/hostname"]).await;
    assert_ne!(exec.exit_code, 0, "{exec:?}");
    assert!(
        String::from_utf8_lossy(&exec.stderr).contains("Operation not permitted"),
        "{exec:?}"
    );

    // A missing profile, a relative path and a broken profile are InvalidArgument.
    let broken = env.logs().with_file_name("broken.json");
    std::fs::write(&broken, "{").unwrap();
    let missing = env.logs().with_file_name("missing.json");
    for (name, path) in [
        ("missing", missing.to_str().unwrap()),
        ("relative", "deny-chmod.json"),
        ("broken", broken.to_str().unwrap()),
    ] {
        let err = env
            .create(
                &pod,
                with_seccomp(shell(name, "true"), ProfileType::Localhost, path),
            )
            .await
            .expect_err(name);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{name}: {err:?}");
    }
    env.cleanup().await;
}
