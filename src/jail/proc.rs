//! Small process helpers the runtime needs next to the spawners: pid-reuse checks, wait-status
//! decoding, signalling a shim, reading its exit record.

use super::{EXIT_RECORD_FILE, ExitRecord, JailError, START_RECORD_FILE, StartRecord};
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use std::io::ErrorKind;
use std::path::Path;

/// The start time of `pid` (`/proc/<pid>/stat` field 22, clock ticks since boot). Together with
/// the pid it identifies a process across pid reuse.
pub fn process_start_time(pid: i32) -> Result<u64, JailError> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|err| match err.kind() {
        ErrorKind::NotFound => JailError::NoSuchProcess(pid),
        _ => JailError::io(format!("cannot read {path}"), err),
    })?;
    parse_start_time(&stat).ok_or_else(|| JailError::CorruptState {
        path,
        message: "no start time field".into(),
    })
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted from its last `)`.
pub(crate) fn parse_start_time(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Fields after the command name start at field 3: field 22 is the 20th of them.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

/// `(exit_code, signal)` of a terminated child: the exit status, or 128+signal (shell and
/// Kubernetes convention) for a signal death. `None` for a status that is not a termination.
pub fn exit_code_from_wait_status(status: WaitStatus) -> Option<(i32, Option<i32>)> {
    match status {
        WaitStatus::Exited(_, code) => Some((code, None)),
        WaitStatus::Signaled(_, signal, _) => Some((128 + signal as i32, Some(signal as i32))),
        _ => None,
    }
}

/// Asks the shim `shim_pid` to reopen its container's log file (after the caller renamed it).
pub fn request_log_reopen(shim_pid: i32) -> Result<(), JailError> {
    match kill(Pid::from_raw(shim_pid), Signal::SIGUSR1) {
        Ok(()) => Ok(()),
        Err(Errno::ESRCH) => Err(JailError::NoSuchProcess(shim_pid)),
        Err(err) => Err(JailError::sys(
            format!("cannot signal shim {shim_pid}"),
            err,
        )),
    }
}

/// The shim's `started.json`, or `None` when no process was started (yet).
pub fn read_start_record(state_dir: &Path) -> Result<Option<StartRecord>, JailError> {
    read_record(&state_dir.join(START_RECORD_FILE))
}

/// The shim's `exit.json`, or `None` while the process has not been reaped yet.
pub fn read_exit_record(state_dir: &Path) -> Result<Option<ExitRecord>, JailError> {
    read_record(&state_dir.join(EXIT_RECORD_FILE))
}

fn read_record<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, JailError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
        Err(err) => {
            return Err(JailError::io(
                format!("cannot read {}", path.display()),
                err,
            ));
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|err| JailError::CorruptState {
            path: path.display().to_string(),
            message: err.to_string(),
        })
}

/// Wall-clock time in nanoseconds since the Unix epoch (CRI timestamps).
pub fn now_unix_nanos() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_survives_hostile_command_names() {
        let tail = "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21";
        let cases = [
            (format!("12 (sleep) {tail}"), Some(424242)),
            (format!("12 (a) b) c) {tail}"), Some(424242)),
            (format!("12 (with space) {tail}"), Some(424242)),
            ("12 (short) S 1 2".to_string(), None),
            ("garbage".to_string(), None),
            (String::new(), None),
        ];
        for (stat, want) in cases {
            assert_eq!(parse_start_time(&stat), want, "{stat:?}");
        }
    }

    #[test]
    fn own_start_time_is_readable_and_stable() {
        let me = std::process::id() as i32;
        let first = process_start_time(me).unwrap();
        assert!(first > 0);
        assert_eq!(process_start_time(me).unwrap(), first);
        assert!(matches!(
            process_start_time(i32::MAX),
            Err(JailError::NoSuchProcess(_))
        ));
    }

    #[test]
    fn wait_status_mapping() {
        let pid = Pid::from_raw(5);
        let cases = [
            (WaitStatus::Exited(pid, 0), Some((0, None))),
            (WaitStatus::Exited(pid, 3), Some((3, None))),
            (
                WaitStatus::Signaled(pid, Signal::SIGKILL, false),
                Some((137, Some(9))),
            ),
            (
                WaitStatus::Signaled(pid, Signal::SIGTERM, true),
                Some((143, Some(15))),
            ),
            (WaitStatus::Stopped(pid, Signal::SIGSTOP), None),
            (WaitStatus::StillAlive, None),
        ];
        for (status, want) in cases {
            assert_eq!(exit_code_from_wait_status(status), want, "{status:?}");
        }
    }

    #[test]
    fn exit_record_absent_present_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_exit_record(dir.path()).unwrap(), None);
        let record = ExitRecord {
            pid: 9,
            exit_code: 137,
            signal: Some(9),
            oom_killed: true,
            finished_at_ns: 1,
        };
        crate::util::atomic_file::write_json_atomic(&dir.path().join(EXIT_RECORD_FILE), &record)
            .unwrap();
        assert_eq!(read_exit_record(dir.path()).unwrap(), Some(record));
        std::fs::write(dir.path().join(EXIT_RECORD_FILE), b"{").unwrap();
        assert!(matches!(
            read_exit_record(dir.path()),
            Err(JailError::CorruptState { .. })
        ));
    }
}
