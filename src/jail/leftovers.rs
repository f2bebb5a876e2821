//! What a shim killed before its start report leaves behind: the process it had started, the
//! container init libcontainer created (waiting to be started, or already exec'd), and clones
//! of the shim that had not exec'd yet. The runtime calls this once the shim is dead, so nothing
//! here races with it.

use super::error::error_chain;
use super::proc::{process_start_time, read_start_record};
use super::{START_RECORD_FILE, ShimProcess};
use libcontainer::container::Container;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use tracing::warn;

/// SIGKILLs everything the dead shim of `state_dir` (started at `shim_start_time`, clock ticks
/// since boot) may have left running, deletes libcontainer's state of container `id`, and
/// returns the pids it killed. A process is only killed when it started after the shim, so a
/// reused pid is left alone.
pub fn kill_shim_leftovers(
    state_dir: &Path,
    process: &ShimProcess,
    id: &str,
    shim_start_time: u64,
) -> Vec<i32> {
    let mut killed = Vec::new();
    let mut kill_if_ours = |pid: i32| {
        if !killed.contains(&pid)
            && process_start_time(pid).is_ok_and(|t| t >= shim_start_time)
            && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
        {
            killed.push(pid);
        }
    };
    if let Ok(Some(started)) = read_start_record(state_dir) {
        kill_if_ours(started.pid);
    }
    // libcontainer clones the shim without exec: until the container's exec, the intermediate
    // process and the init show the shim's own command line.
    for pid in shim_clones(state_dir) {
        kill_if_ours(pid);
    }
    if let ShimProcess::Container {
        libcontainer_root, ..
    } = process
    {
        let lc_dir = libcontainer_root.join(id);
        if let Ok(mut container) = Container::load(lc_dir.clone()) {
            if let Some(pid) = container.pid() {
                kill_if_ours(pid.as_raw());
            }
            // Kills what is left in the container's cgroup and removes it.
            if let Err(err) = container.delete(true) {
                warn!(id, error = %error_chain(&err), "cannot delete the unreported container");
            }
        }
        let _ = std::fs::remove_dir_all(&lc_dir);
    }
    let _ = std::fs::remove_file(state_dir.join(START_RECORD_FILE));
    killed
}

/// Processes whose command line is `<runp> shim <state_dir>`.
fn shim_clones(state_dir: &Path) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| is_shim_of(&cmdline, state_dir))
        })
        .collect()
}

fn is_shim_of(cmdline: &[u8], state_dir: &Path) -> bool {
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    matches!(
        args.as_slice(),
        [_, b"shim", dir, ..] if OsStr::from_bytes(dir) == state_dir.as_os_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_command_lines() {
        let dir = Path::new("/r/containers/abc");
        assert!(is_shim_of(b"/usr/bin/runp\0shim\0/r/containers/abc\0", dir));
        assert!(!is_shim_of(
            b"/usr/bin/runp\0shim\0/r/containers/abcd\0",
            dir
        ));
        assert!(!is_shim_of(
            b"/usr/bin/runp\0serve\0/r/containers/abc\0",
            dir
        ));
        assert!(!is_shim_of(b"sleep\0", dir));
        assert!(!is_shim_of(b"", dir));
    }
}
