//! The shim as a process: independent of the agent, fd hygiene, log reopen, a full log.

#[path = "support/jail.rs"]
mod support;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use oci_spec::runtime::MountBuilder;
use runp::jail::{self, ShimReport};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use support::*;

/// Environment variable carrying the bundle dir to `spawn_shim_then_exit`.
const HELPER_ENV: &str = "RUNP_JAIL_TEST_SPAWN_DIR";

/// Not a test of its own: run by `the_shim_outlives_signals_and_its_parent` in a child process
/// (the test binary re-executed) that starts a shim, prints the pids and exits unreaped.
#[test]
#[ignore = "helper process for the_shim_outlives_signals_and_its_parent"]
fn spawn_shim_then_exit() {
    let dir = std::path::PathBuf::from(std::env::var(HELPER_ENV).unwrap());
    let state_dir = dir.join("state");
    let mut spawned = jail::spawn_shim(&runp_exe(), &state_dir).unwrap();
    let ShimReport::Started { pid, .. } = spawned.report.recv_timeout(HANG_GUARD).unwrap() else {
        panic!("container did not start");
    };
    println!("PIDS {} {pid}", spawned.pid);
}

#[test]
fn the_shim_outlives_signals_and_its_parent() {
    if skip_without_root("the_shim_outlives_signals_and_its_parent") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let run = Run::new(
        dir.path(),
        "orphan",
        &base_spec(&rootfs, &["sleep", "1000"]),
    );
    jail::write_shim_spec(&run.state_dir, &run.shim_spec()).unwrap();
    let helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "spawn_shim_then_exit",
            "--nocapture",
        ])
        .env(HELPER_ENV, &run.dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&helper.stdout);
    let pids: Vec<i32> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("PIDS "))
        .unwrap_or_else(|| {
            panic!(
                "helper failed: {stdout} {}",
                String::from_utf8_lossy(&helper.stderr)
            )
        })
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let (shim, container) = (pids[0], pids[1]);
    // The helper (the shim's parent) is gone; the shim is a member of its own session.
    assert_eq!(
        nix::unistd::getsid(Some(Pid::from_raw(shim))).unwrap(),
        Pid::from_raw(shim)
    );
    for signal in [
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGPIPE,
    ] {
        kill(Pid::from_raw(shim), signal).unwrap();
    }
    // Give a wrongly delivered signal time to act, then prove the shim still works: it notices
    // the container's death and records it.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        !is_dead(shim),
        "shim died from a signal; shim.log:\n{}",
        run.shim_log()
    );
    assert!(!is_dead(container));
    kill(Pid::from_raw(container), Signal::SIGKILL).unwrap();
    let exit = wait_exit_record(&run.state_dir, shim);
    assert_eq!((exit.pid, exit.exit_code), (container, 137));
    wait_until("the orphaned shim to exit", || is_dead(shim));
}

#[test]
fn no_fd_leaks_into_the_shim_or_the_container() {
    if skip_without_root("no_fd_leaks_into_the_shim_or_the_container") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    // A descriptor someone in the agent forgot to mark close-on-exec.
    let marker = dir.path().join("leak-marker");
    std::fs::write(&marker, "").unwrap();
    let opened = std::fs::File::open(&marker).unwrap();
    // SAFETY: dup of an open fd; the copy (without FD_CLOEXEC) is owned below.
    let leaked =
        unsafe { OwnedFd::from_raw_fd(libc::dup(std::os::fd::AsRawFd::as_raw_fd(&opened))) };

    let run = Run::new(dir.path(), "fds", &base_spec(&rootfs, &["sleep", "1000"]));
    let (shim, report) = run.start();
    drop(leaked);
    let ShimReport::Started {
        pid,
        pid_start_time,
        ..
    } = report
    else {
        panic!("{report:?}");
    };
    assert_eq!(jail::process_start_time(pid).unwrap(), pid_start_time);
    // Started is reported once the container's init has exec'd its workload.
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap(),
        "sleep\n"
    );
    let marker = marker.display().to_string();
    // The report pipe closes right after the report; the pidfd opens when supervision starts.
    wait_until("the shim to supervise", || {
        fd_targets(shim).contains(&"anon_inode:[pidfd]".to_string())
    });
    let shim_fds = fd_targets(shim);
    assert!(
        !shim_fds.contains(&marker),
        "leaked into the shim: {shim_fds:?}"
    );
    // stdio, its logs, its state dir lock, the container log, the output pipes, a signalfd, a
    // pidfd and the attach socket's listener (and "/", which libcontainer's path-safe helpers
    // keep open); the report pipe is closed.
    let state_file = |name: &str| run.state_dir.join(name).display().to_string();
    let (shim_log, shim_lock) = (
        state_file(jail::SHIM_LOG_FILE),
        state_file(jail::SHIM_LOCK_FILE),
    );
    let container_log = run.log_path.display().to_string();
    for target in &shim_fds {
        let expected = [
            shim_log.as_str(),
            &shim_lock,
            &container_log,
            "/dev/null",
            "/",
        ]
        .contains(&target.as_str())
            || target.starts_with("pipe:")
            || target.starts_with("socket:")
            || ["anon_inode:[pidfd]", "anon_inode:[signalfd]"].contains(&target.as_str());
        assert!(expected, "unexpected fd {target} in the shim: {shim_fds:?}");
    }
    assert_eq!(
        shim_fds.iter().filter(|t| t.starts_with("pipe:")).count(),
        2,
        "{shim_fds:?}"
    );
    assert_eq!(
        shim_fds.iter().filter(|t| t.starts_with("socket:")).count(),
        1,
        "{shim_fds:?}"
    );
    assert!(
        run.state_dir
            .join(jail::attach::ATTACH_SOCKET_FILE)
            .exists()
    );
    let mut container_fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    container_fds.sort();
    assert_eq!(container_fds, ["0", "1", "2"], "{:?}", fd_targets(pid));
    assert_eq!(fd_targets(pid)[0], "/dev/null");

    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    run.wait_exit(shim);
}

fn wait_for_line(log: &Path, line: &str) {
    wait_until(&format!("{line:?} in {}", log.display()), || {
        std::fs::read_to_string(log).is_ok_and(|t| t.lines().any(|l| l.ends_with(line)))
    });
}

#[test]
fn log_reopen_after_rename() {
    if skip_without_root("log_reopen_after_rename") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let mut spec = base_spec(
        &rootfs,
        &[
            "sh",
            "-c",
            "echo before; while [ ! -e /shared/go ]; do sleep 0.01; done; echo after",
        ],
    );
    let mut mounts = spec.mounts().clone().unwrap();
    mounts.push(
        MountBuilder::default()
            .destination("/shared")
            .typ("none")
            .source(&shared)
            .options(vec!["rbind".to_string(), "rw".to_string()])
            .build()
            .unwrap(),
    );
    spec.set_mounts(Some(mounts));
    let run = Run::new(dir.path(), "reopen", &spec);
    let (shim, _) = run.start_ok();
    wait_for_line(&run.log_path, " stdout F before");
    let rotated = run.log_path.with_extension("log.1");
    std::fs::rename(&run.log_path, &rotated).unwrap();
    jail::request_log_reopen(shim).unwrap();
    wait_until("the shim to create a new log", || run.log_path.exists());
    std::fs::write(shared.join("go"), "").unwrap();
    let exit = run.wait_exit(shim);
    assert_eq!(exit.exit_code, 0);
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert_eq!(stream_lines(&parse_log(&old), "stdout"), ["before"]);
    assert_eq!(stream_lines(&run.log_records(), "stdout"), ["after"]);
    assert!(matches!(
        jail::request_log_reopen(shim),
        Err(jail::JailError::NoSuchProcess(_))
    ));
}

#[test]
fn a_full_log_holds_the_output_back_until_reopened_and_loses_none() {
    if skip_without_root("a_full_log_holds_the_output_back_until_reopened_and_loses_none") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = busybox_rootfs(dir.path());
    // 5000 lines of 100 bytes: far more than the limit and the pipe's 64 KiB together.
    const LINES: usize = 5000;
    let script = format!("yes $(head -c 99 /dev/zero | tr '\\0' x) | head -n {LINES}; echo done");
    let spec = base_spec(&rootfs, &["sh", "-c", &script]);
    let run = Run::new(dir.path(), "full", &spec);
    const MAX: u64 = 16 * 1024;
    let (shim, _) = run.start_ok_with(|spec| spec.log_max_size = Some(MAX));
    // One read of at most 64 KiB of output (and its records' prefixes) may pass the limit.
    let bound = MAX + 128 * 1024;
    wait_until("the first output", || {
        std::fs::metadata(&run.log_path).is_ok_and(|m| m.len() > 0)
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let held = std::fs::metadata(&run.log_path).unwrap().len();
    assert!(
        (MAX..=bound).contains(&held),
        "the live log stopped at {held} bytes, limit {MAX}"
    );
    assert!(
        jail::read_exit_record(&run.state_dir).unwrap().is_none(),
        "the container waits for its output to be taken"
    );
    // Rotate until the container is done: each reopen lets the next part through.
    let mut rotated = Vec::new();
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while jail::read_exit_record(&run.state_dir).unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "hang guard: rotations"
        );
        let size = std::fs::metadata(&run.log_path)
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(size <= bound, "a live log of {size} bytes, limit {MAX}");
        if size >= MAX {
            let name = run
                .log_path
                .with_extension(format!("log.{}", rotated.len()));
            std::fs::rename(&run.log_path, &name).unwrap();
            rotated.push(name);
            jail::request_log_reopen(shim).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let exit = run.wait_exit(shim);
    assert_eq!(exit.exit_code, 0);
    assert!(rotated.len() >= 4, "{} rotations", rotated.len());
    let mut lines = Vec::new();
    for file in rotated.iter().chain([&run.log_path]) {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        lines.extend(stream_lines(&parse_log(&text), "stdout"));
    }
    assert_eq!(lines.len(), LINES + 1, "every line, once");
    assert_eq!(lines.last().map(String::as_str), Some("done"));
    assert!(lines[..LINES].iter().all(|l| l.len() == 99));
}
