//! `spawn_exec` / `runp exec-helper`: a process inside a running container.

#[path = "support/jail.rs"]
mod support;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use runp::jail::ExecReport;
use support::*;

#[test]
fn exec_runs_in_the_container_and_propagates_the_exit_code() {
    if skip_without_root("exec_runs_in_the_container_and_propagates_the_exit_code") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let run = Run::new(dir.path(), "exec", &base_spec(&rootfs, &["sleep", "1000"]));
    let (shim, pid) = run.start_ok();

    let mut spec = exec_spec(
        &run,
        &[
            "sh",
            "-c",
            "hostname; cat /proc/1/comm; echo $GREETING; pwd; echo err >&2; exit 7",
        ],
    );
    spec.env = vec!["GREETING=hi".into()];
    spec.cwd = Some("/tmp".into());
    let out = exec_to_end(&spec);
    assert!(
        matches!(out.report, ExecReport::Started { .. }),
        "{:?}",
        out.report
    );
    assert_eq!(out.stdout, "jail-test\nsleep\nhi\n/tmp\n");
    assert_eq!(out.stderr, "err\n");
    assert!(
        matches!(out.status, WaitStatus::Exited(_, 7)),
        "{:?}",
        out.status
    );

    // A signal death of the command is 128+signal.
    let out = exec_to_end(&exec_spec(&run, &["sh", "-c", "kill -9 $$"]));
    assert!(
        matches!(out.status, WaitStatus::Exited(_, 137)),
        "{:?}",
        out.status
    );

    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    run.wait_exit(shim);
}

#[test]
fn exec_of_a_missing_command_fails_with_a_report() {
    if skip_without_root("exec_of_a_missing_command_fails_with_a_report") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let run = Run::new(
        dir.path(),
        "exec-missing",
        &base_spec(&rootfs, &["sleep", "1000"]),
    );
    let (shim, pid) = run.start_ok();
    let out = exec_to_end(&exec_spec(&run, &["/no/such/command"]));
    match &out.report {
        ExecReport::Failed { message } => assert!(message.contains("no/such/command"), "{message}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(
        matches!(out.status, WaitStatus::Exited(_, 255)),
        "{:?}",
        out.status
    );

    // An unknown container is a failure too, not a hang or a panic.
    let mut unknown = exec_spec(&run, &["true"]);
    unknown.container_id = "no-such-container".into();
    let out = exec_to_end(&unknown);
    assert!(
        matches!(out.report, ExecReport::Failed { .. }),
        "{:?}",
        out.report
    );

    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    run.wait_exit(shim);
}

#[test]
fn killing_the_helper_kills_the_command() {
    if skip_without_root("killing_the_helper_kills_the_command") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let run = Run::new(
        dir.path(),
        "exec-kill",
        &base_spec(&rootfs, &["sleep", "1000"]),
    );
    let (shim, pid) = run.start_ok();

    let spawned =
        runp::jail::spawn_exec(&runp_exe(), &exec_spec(&run, &["sleep", "1000"])).unwrap();
    let mut report = spawned.report;
    let ExecReport::Started { pid: command } = report.recv_timeout(HANG_GUARD).unwrap() else {
        panic!("exec did not start");
    };
    assert!(!is_dead(command));
    kill(Pid::from_raw(spawned.helper_pid), Signal::SIGKILL).unwrap();
    reap(spawned.helper_pid);
    wait_until("the exec'd command to die with its helper", || {
        is_dead(command)
    });
    // The container itself is untouched.
    assert!(!is_dead(pid));

    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    run.wait_exit(shim);
}
