//! A container run by `runp shim`: CRI log format, exit codes, start failures, OOM kills.

#[path = "support/jail.rs"]
mod support;

use runp::jail::{self, CRI_MAX_LINE};
use support::*;

#[test]
fn output_goes_to_the_cri_log() {
    if skip_without_root("output_goes_to_the_cri_log") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let script = format!(
        "echo hello; echo oops >&2; head -c {} /dev/zero | tr '\\0' x; echo; printf tail",
        CRI_MAX_LINE + 100
    );
    let run = Run::new(
        dir.path(),
        "log",
        &base_spec(&rootfs, &["sh", "-c", &script]),
    );
    let (shim, _) = run.start_ok();
    let exit = run.wait_exit(shim);
    assert_eq!((exit.exit_code, exit.signal), (0, None));

    let records = run.log_records();
    for record in &records {
        let parsed = chrono::DateTime::parse_from_rfc3339(&record.timestamp);
        assert!(parsed.is_ok(), "timestamp {:?}", record.timestamp);
        assert!(record.timestamp.ends_with('Z') && record.timestamp.len() == 30);
        assert!(["F", "P"].contains(&record.tag.as_str()), "{record:?}");
    }
    assert_eq!(stream_lines(&records, "stderr"), ["oops"]);
    let stdout = stream_lines(&records, "stdout");
    assert_eq!(stdout.len(), 3, "{stdout:?}");
    assert_eq!(stdout[0], "hello");
    assert_eq!(stdout[1], "x".repeat(CRI_MAX_LINE + 100));
    assert_eq!(
        stdout[2], "tail",
        "an unterminated last line is written as F at EOF"
    );
    let long: Vec<_> = records
        .iter()
        .filter(|r| r.stream == "stdout" && r.content.starts_with('x'))
        .map(|r| (r.tag.as_str(), r.content.len()))
        .collect();
    assert_eq!(long, [("P", CRI_MAX_LINE), ("F", 100)]);
}

#[test]
fn exit_codes() {
    if skip_without_root("exit_codes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    // (Signal deaths are covered by sigkill_and_sigterm_from_outside: pid 1 of a pid namespace
    // cannot be killed from inside.)
    let cases: [(&str, &[&str], i32, Option<i32>); 3] = [
        ("zero", &["true"], 0, None),
        ("three", &["sh", "-c", "exit 3"], 3, None),
        (
            "shell-reported-kill",
            &["sh", "-c", "sleep 100 & kill -9 $!; wait $!"],
            137,
            None,
        ),
    ];
    for (name, args, code, signal) in cases {
        let run = Run::new(dir.path(), name, &base_spec(&rootfs, args));
        let (shim, pid) = run.start_ok();
        let exit = run.wait_exit(shim);
        assert_eq!((exit.exit_code, exit.signal), (code, signal), "{name}");
        assert_eq!(exit.pid, pid);
        assert!(!exit.oom_killed);
        assert!(
            !run.lc_root.join(&run.id).exists(),
            "libcontainer state removed"
        );
    }
}

#[test]
fn sigkill_and_sigterm_from_outside() {
    if skip_without_root("sigkill_and_sigterm_from_outside") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    // pid 1 of a pid namespace ignores SIGTERM without a handler, so the SIGTERM case runs
    // without one (in the shim's pid namespace).
    let mut no_pidns = base_spec(&rootfs, &["sleep", "1000"]);
    if !is_real_root() {
        // A user namespace may not mount a proc for a pid namespace it does not own.
        bind_host_proc(&mut no_pidns);
    }
    if let Some(linux) = no_pidns.linux_mut() {
        let namespaces = linux.namespaces().clone().unwrap_or_default();
        linux.set_namespaces(Some(
            namespaces
                .into_iter()
                .filter(|ns| ns.typ() != oci_spec::runtime::LinuxNamespaceType::Pid)
                .collect(),
        ));
    }
    let cases = [
        (
            "kill",
            base_spec(&rootfs, &["sleep", "1000"]),
            nix::sys::signal::SIGKILL,
            137,
        ),
        ("term", no_pidns, nix::sys::signal::SIGTERM, 143),
    ];
    for (name, spec, signal, code) in cases {
        let run = Run::new(dir.path(), name, &spec);
        let (shim, pid) = run.start_ok();
        assert!(jail::read_exit_record(&run.state_dir).unwrap().is_none());
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
        let exit = run.wait_exit(shim);
        assert_eq!(
            (exit.exit_code, exit.signal),
            (code, Some(signal as i32)),
            "{name}"
        );
    }
}

#[test]
fn failed_start_is_reported_with_the_cause() {
    if skip_without_root("failed_start_is_reported_with_the_cause") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    // Exists and is executable, so it passes libcontainer's checks, but execve fails.
    let script = rootfs.join("bin/bad-interpreter");
    std::fs::write(&script, "#!/no/such/interpreter\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let cases = [
        ("missing", "/no/such/binary", "/no/such/binary"),
        ("exec-fails", "/bin/bad-interpreter", "bad-interpreter"),
    ];
    for (name, binary, expected) in cases {
        let run = Run::new(dir.path(), name, &base_spec(&rootfs, &[binary]));
        let (shim, report) = run.start();
        let status = reap(shim);
        match report {
            jail::ShimReport::Failed { message } => {
                assert!(message.contains(expected), "{name}: {message}")
            }
            other => panic!("{name}: expected a failure, got {other:?}"),
        }
        assert!(
            matches!(status, nix::sys::wait::WaitStatus::Exited(_, code) if code != 0),
            "{name}: {status:?}"
        );
        assert!(
            !run.lc_root.join(&run.id).exists(),
            "{name}: nothing left behind"
        );
        assert!(jail::read_exit_record(&run.state_dir).unwrap().is_none());
    }
}

#[test]
fn oom_kill_is_detected() {
    if skip_unless(
        "oom_kill_is_detected",
        is_real_root(),
        "real root (a writable memory cgroup)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let limit: i64 = 32 << 20;
    let mut spec = base_spec(
        &rootfs,
        &["dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"],
    );
    let memory = oci_spec::runtime::LinuxMemoryBuilder::default()
        .limit(limit)
        .swap(limit)
        .build()
        .unwrap();
    let resources = oci_spec::runtime::LinuxResourcesBuilder::default()
        .memory(memory)
        .build()
        .unwrap();
    spec.linux_mut()
        .as_mut()
        .unwrap()
        .set_resources(Some(resources));
    let run = Run::new(dir.path(), "oom", &spec);
    let (shim, _) = run.start_ok();
    let exit = run.wait_exit(shim);
    assert_eq!(
        (exit.exit_code, exit.signal, exit.oom_killed),
        (137, Some(9), true)
    );

    // A plain SIGKILL in a cgroup that never ran out of memory is not an OOM kill.
    let mut spec = base_spec(&rootfs, &["sleep", "1000"]);
    spec.linux_mut().as_mut().unwrap().set_resources(Some(
        oci_spec::runtime::LinuxResourcesBuilder::default()
            .memory(
                oci_spec::runtime::LinuxMemoryBuilder::default()
                    .limit(limit)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap(),
    ));
    let run = Run::new(dir.path(), "not-oom", &spec);
    let (shim, pid) = run.start_ok();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL).unwrap();
    let exit = run.wait_exit(shim);
    assert_eq!((exit.exit_code, exit.oom_killed), (137, false));
}

/// Run by `an_unprivileged_uid_gets_a_clear_cgroup_error` as uid 65534 mapped to root in a user
/// namespace; prints the shim's report.
#[test]
#[ignore = "helper process for an_unprivileged_uid_gets_a_clear_cgroup_error"]
fn start_as_unprivileged_uid() {
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let run = Run::new(dir.path(), "unpriv", &base_spec(&rootfs, &["true"]));
    let (shim, report) = run.start();
    reap(shim);
    println!("REPORT {report:?}");
}

#[test]
fn an_unprivileged_uid_gets_a_clear_cgroup_error() {
    let test = "an_unprivileged_uid_gets_a_clear_cgroup_error";
    let has_setpriv = std::path::Path::new("/usr/bin/setpriv").exists();
    if skip_unless(test, is_real_root() && has_setpriv, "real root and setpriv") {
        return;
    }
    // On this cgroup v1 host an unprivileged uid cannot create cgroups; libcontainer needs one
    // per container, so the start must fail and say why.
    let output = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "unshare",
            "--user",
        ])
        .args(["--map-root-user", "--mount"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "start_as_unprivileged_uid",
            "--nocapture",
        ])
        .env("RUNP_TEST_EXE", runp_exe())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = stdout
        .lines()
        .find_map(|l| l.strip_prefix("REPORT "))
        .unwrap_or_else(|| {
            panic!(
                "helper failed: {stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    if report.starts_with("Started") {
        eprintln!("SKIP: {test}: this host lets uid 65534 create cgroups");
        return;
    }
    assert!(
        report.contains("cgroup fs is not writable for uid 0 (host uid 65534)"),
        "{report}"
    );
}
