//! scripts/build-image.sh makes an image that runs: imported into runp's own store, its
//! entrypoint, command and volumes are the agent's, and in a runp container its runp, iptables
//! (with its extension modules) and CNI plugins start (every shared library they load is in the
//! image).

#[path = "support/runtime.rs"]
mod support;

use support::*;

#[path = "support/image.rs"]
mod image_support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_image_runs_the_agent_and_its_tools() {
    let test = "the_built_image_runs_the_agent_and_its_tools";
    if !is_root() {
        skip(test, "root (real or mapped) for the runtime");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    image_support::build_runp_image(out.path());
    let env = Env::new().await;
    let records = env
        .images
        .import(&out.path().join("runp-image.tar"))
        .expect("import the docker-archive");
    let version = env!("CARGO_PKG_VERSION");
    let name = format!("docker.io/library/runp:{version}");
    let record = records
        .iter()
        .find(|r| r.repo_tags.contains(&name))
        .unwrap_or_else(|| panic!("{name} in {records:?}"));
    let config = record.config.config().clone().expect("image config");
    assert_eq!(
        config.entrypoint().clone().unwrap(),
        ["/usr/local/bin/runp", "--root", "/var/lib/runp"]
    );
    assert_eq!(
        config.cmd().clone().unwrap(),
        [
            "agent",
            "--runtime=process",
            "--config",
            "/etc/runp/agent.yaml"
        ]
    );
    let volumes = config.volumes().clone().unwrap();
    for volume in ["/var/lib/runp", "/var/log/pods", "/etc/runp/manifests"] {
        assert!(
            volumes.contains(&volume.to_string()),
            "{volume}: {volumes:?}"
        );
    }

    let pod = env.pod("img").await;
    let mut probe = shell(
        "tools",
        "runp --version; runp config default | grep -c maxPods; iptables --version; \
         iptables -m comment --help >/dev/null && echo comment match loads; \
         /opt/cni/bin/bridge --version; /opt/cni/bin/portmap --version; echo end",
    );
    probe.image.as_mut().unwrap().image = name.clone();
    let id = env.run(&pod, probe).await;
    let status = env.wait_exit(&id).await;
    let log = std::fs::read_to_string(env.logs().join("img/tools.log")).unwrap();
    let text: String = parse_cri_log(&log)
        .into_iter()
        .map(|(_, _, line)| line + "\n")
        .collect();
    assert_eq!(status.exit_code, 0, "{text}");
    for want in [
        &format!("runp {version}"),
        "iptables v",
        // The bridge plugin's rules use it: the extension modules are where iptables looks.
        "comment match loads",
        "CNI bridge plugin",
        "CNI portmap plugin",
        "end",
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
    env.cleanup().await;
}
