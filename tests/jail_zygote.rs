//! The shim zygote: a shim it forks is what an exec'd `runp shim` is (session, fds, command
//! line), outlives the zygote, and a dead zygote is reported as gone without starting anything.

#[path = "support/jail.rs"]
mod support;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use runp::jail::{self, ShimReport, Zygote, ZygoteError};
use support::*;

fn parent_of(pid: i32) -> i32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_forked_shim_is_an_exec_shim_in_all_but_its_birth_and_outlives_the_zygote() {
    if skip_without_root("a_forked_shim_is_an_exec_shim_in_all_but_its_birth") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let run = Run::new(dir.path(), "zyg", &base_spec(&rootfs, &["sleep", "1000"]));
    jail::write_shim_spec(&run.state_dir, &run.shim_spec()).unwrap();
    let zygote = Zygote::start(&runp_exe()).unwrap();
    let zygote_pid = zygote.pid();
    let mut spawned = zygote.spawn_shim(&run.state_dir).unwrap();
    let report = spawned.report.recv_timeout(HANG_GUARD).unwrap();
    let ShimReport::Started { pid, .. } = report else {
        panic!("{report:?}\nshim.log:\n{}", run.shim_log());
    };
    run.track(pid);
    let shim = spawned.pid;
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap(),
        "sleep\n"
    );
    assert_eq!(parent_of(shim), zygote_pid, "forked by the zygote");
    assert_eq!(
        nix::unistd::getsid(Some(Pid::from_raw(shim))).unwrap(),
        Pid::from_raw(shim),
        "a session of its own"
    );
    // The command line an exec'd shim has: the leftovers cleanup finds a shim's clones by it.
    let cmdline = std::fs::read(format!("/proc/{shim}/cmdline")).unwrap();
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    assert_eq!(args[1], b"shim", "{:?}", String::from_utf8_lossy(&cmdline));
    assert_eq!(
        args[2],
        run.state_dir.as_os_str().as_encoded_bytes(),
        "{:?}",
        String::from_utf8_lossy(&cmdline)
    );
    // Its own diagnostics in shim.log, not the zygote's stderr (this line comes before the
    // report; the ones after it may not be written yet).
    assert!(
        run.shim_log().contains("shim starting"),
        "{}",
        run.shim_log()
    );
    // Neither the zygote's socket nor the report pipe: one socket (the attach listener), two
    // pipes (the container's output).
    wait_until("the shim to supervise", || {
        fd_targets(shim).contains(&"anon_inode:[pidfd]".to_string())
    });
    let fds = fd_targets(shim);
    assert_eq!(
        fds.iter().filter(|t| t.starts_with("socket:")).count(),
        1,
        "{fds:?}"
    );
    assert_eq!(
        fds.iter().filter(|t| t.starts_with("pipe:")).count(),
        2,
        "{fds:?}"
    );

    // The zygote leaves with its socket; the shim and its container stay.
    drop(zygote);
    assert_eq!(
        reap(zygote_pid),
        WaitStatus::Exited(Pid::from_raw(zygote_pid), 0)
    );
    assert!(!is_dead(shim) && !is_dead(pid));

    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let exit = wait_exit_record(&run.state_dir, shim);
    assert_eq!(exit.signal, Some(Signal::SIGKILL as i32));
    wait_until("the orphaned shim to exit", || is_dead(shim));
}

/// A state dir whose shim.json no shim can use: requests to the zygote pass its checks, and
/// whatever shim starts from it fails at once.
fn unusable_state_dir(dir: &std::path::Path) -> std::path::PathBuf {
    let state_dir = dir.join("state");
    std::fs::create_dir(&state_dir).unwrap();
    std::fs::write(state_dir.join(jail::SHIM_SPEC_FILE), "{}").unwrap();
    state_dir
}

#[test]
fn a_dead_zygote_is_gone_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = unusable_state_dir(dir.path());
    let zygote = Zygote::start(&runp_exe()).unwrap();
    kill(Pid::from_raw(zygote.pid()), Signal::SIGKILL).unwrap();
    reap(zygote.pid());
    match zygote.spawn_shim(&state_dir) {
        Err(ZygoteError::Gone(_)) => {}
        Err(other) => panic!("expected Gone, got {other}"),
        Ok(spawned) => panic!("a dead zygote started shim {}", spawned.pid),
    }
    // A missing shim.json is refused before anything is sent.
    let zygote = Zygote::start(&runp_exe()).unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(matches!(
        zygote.spawn_shim(&empty),
        Err(ZygoteError::Failed(_))
    ));
    let pid = zygote.pid();
    drop(zygote);
    assert_eq!(reap(pid), WaitStatus::Exited(Pid::from_raw(pid), 0));
}

#[test]
fn a_zygote_that_does_not_answer_takes_no_more_requests() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = unusable_state_dir(dir.path());
    let zygote = Zygote::start(&runp_exe()).unwrap();
    let pid = Pid::from_raw(zygote.pid());
    // Stopped, it reads no request: the answer times out (10 s).
    kill(pid, Signal::SIGSTOP).unwrap();
    assert!(matches!(
        zygote.spawn_shim(&state_dir),
        Err(ZygoteError::Failed(_))
    ));
    // A late answer would be taken for the next request's: the next one is refused as gone.
    kill(pid, Signal::SIGCONT).unwrap();
    assert!(matches!(
        zygote.spawn_shim(&state_dir),
        Err(ZygoteError::Gone(_))
    ));
    // Resumed, it answers the stale request. Given time to, our close with that answer unread
    // resets its socket (ECONNRESET, not EOF), which must end it as cleanly as a close does.
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(zygote);
    assert_eq!(reap(pid.as_raw()), WaitStatus::Exited(pid, 0));
}
