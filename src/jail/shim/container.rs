//! Creating, starting and deleting the container with libcontainer. The container's init process
//! becomes a child of the shim: libcontainer clones the intermediate process as our child and the
//! init with CLONE_PARENT from there.

use super::super::console::BoundSocket;
use super::super::error::error_chain;
use super::super::executor::JailExecutor;
use super::super::fds::cloexec_pipe;
use super::super::{ContainerStdio, JailError};
use super::logs::Stream;
use libcontainer::container::Container;
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::error::LibcontainerError;
use libcontainer::syscall::syscall::SyscallType;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use tracing::warn;

pub(crate) struct RunningContainer {
    pub container: Container,
    pub pid: i32,
    /// What the shim logs: stdout and stderr pipes, or the terminal master (as stdout).
    pub outputs: Vec<(Stream, OwnedFd)>,
    /// Where attached clients' input goes: the stdin pipe, or the terminal master.
    pub stdin: Option<OwnedFd>,
    /// The terminal master, for resizes.
    pub terminal: Option<OwnedFd>,
}

/// How long the container init may take to send its terminal once created.
const TERMINAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Builds and starts `id` from `bundle`. Without a tty the container's stdout and stderr are
/// pipes whose read ends are returned, and its stdin is a pipe (`stdio.stdin`) or /dev/null;
/// with a tty (the bundle's `process.terminal`), the init opens a pty on the container's devpts
/// and sends its master to a console socket in `state_dir`. On failure nothing is left behind
/// (libcontainer removes a half-created container; a created one that fails to start is deleted
/// here).
pub(crate) fn start_container(
    id: &str,
    bundle: &Path,
    libcontainer_root: &Path,
    state_dir: &Path,
    stdio: ContainerStdio,
    shim_log: &Path,
) -> Result<RunningContainer, JailError> {
    let log_offset = std::fs::metadata(shim_log).map(|m| m.len()).unwrap_or(0);
    std::fs::create_dir_all(libcontainer_root).map_err(|err| {
        JailError::io(
            format!("cannot create {}", libcontainer_root.display()),
            err,
        )
    })?;
    let (stdout, stdout_w) = cloexec_pipe()?;
    let (stderr, stderr_w) = cloexec_pipe()?;
    let (stdin, stdin_w): (OwnedFd, Option<OwnedFd>) = match stdio.stdin && !stdio.tty {
        true => {
            let (read, write) = cloexec_pipe()?;
            (read, Some(write))
        }
        false => (
            std::fs::File::open("/dev/null")
                .map_err(|err| JailError::io("cannot open /dev/null", err))?
                .into(),
            None,
        ),
    };
    let console = match stdio.tty {
        true => Some(BoundSocket::listen(state_dir, "console.sock", 1)?),
        false => None,
    };
    // Closed by the container's exec (close-on-exec), or carrying the exec error.
    let (exec_notify, exec_notify_w) = cloexec_pipe()?;
    let executor = JailExecutor {
        exec_notify: Some(exec_notify_w.as_raw_fd()),
        ..JailExecutor::default()
    };

    let mut container = ContainerBuilder::new(id.to_string(), SyscallType::default())
        .with_executor(executor)
        .with_console_socket(console.as_ref().map(|c| c.path()))
        .with_stdin(stdin)
        .with_stdout(stdout_w)
        .with_stderr(stderr_w)
        .with_root_path(libcontainer_root)
        .and_then(|builder| builder.validate_id())
        .and_then(|builder| {
            builder
                .as_init(bundle)
                .with_systemd(false)
                .with_detach(true)
                .build()
        })
        .map_err(|err| {
            let details = init_errors_since(shim_log, log_offset);
            container_error("cannot create the container", &err, details)
        })?;
    // The builder held the output write ends; they are closed now, so EOF on our read ends
    // means every process of the container closed its output. The intermediate process is gone
    // too, so after this drop only the container's init holds the notify pipe.
    drop(exec_notify_w);
    let Some(pid) = container.pid() else {
        delete_container(&mut container);
        return Err(JailError::Container(
            "libcontainer created the container but recorded no pid".into(),
        ));
    };
    // The init sent its terminal while being created (before it waits to be started).
    let terminal = match &console {
        Some(console) => match console.receive_pty_master(TERMINAL_TIMEOUT) {
            Ok(master) => Some(master),
            Err(err) => {
                let pid = Pid::from_raw(pid.as_raw());
                let _ = kill(pid, Signal::SIGKILL);
                let _ = waitpid(pid, Some(WaitPidFlag::__WALL));
                delete_container(&mut container);
                return Err(err);
            }
        },
        None => None,
    };
    drop(console);
    let started = container
        .start()
        .map_err(|err| {
            let details = init_errors_since(shim_log, log_offset);
            container_error("cannot start the container", &err, details)
        })
        .and_then(|()| wait_for_exec(exec_notify));
    if let Err(err) = started {
        // Our child: kill and reap it before removing its state.
        let pid = Pid::from_raw(pid.as_raw());
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, Some(WaitPidFlag::__WALL));
        delete_container(&mut container);
        return Err(err);
    }
    let dup = |fd: &OwnedFd| {
        fd.try_clone()
            .map_err(|err| JailError::io("cannot duplicate the terminal", err))
    };
    let (outputs, stdin, terminal) = match terminal {
        // stdout/stderr pipes are unused with a terminal: the init wired its stdio to the pty.
        Some(master) => (
            vec![(Stream::Stdout, dup(&master)?)],
            if stdio.stdin {
                Some(dup(&master)?)
            } else {
                None
            },
            Some(master),
        ),
        None => (
            vec![(Stream::Stdout, stdout), (Stream::Stderr, stderr)],
            stdin_w,
            None,
        ),
    };
    Ok(RunningContainer {
        container,
        pid: pid.as_raw(),
        outputs,
        stdin,
        terminal,
    })
}

/// Waits until the container's init has exec'd its workload (the notify pipe hangs up) or
/// reported why it could not. Until then it may still have the shim's signal dispositions, so
/// "started" is only reported after this.
fn wait_for_exec(exec_notify: OwnedFd) -> Result<(), JailError> {
    use std::io::Read;
    let mut message = String::new();
    let mut file = std::fs::File::from(exec_notify);
    // Blocks until exec or exit; only startContainer hooks from the spec run in between.
    file.read_to_string(&mut message)
        .map_err(|err| JailError::io("cannot wait for the container to exec", err))?;
    if message.is_empty() {
        Ok(())
    } else {
        Err(JailError::Container(format!(
            "cannot start the container: {message}"
        )))
    }
}

/// Removes libcontainer's state and the container's cgroup (killing anything left in it).
pub(crate) fn delete_container(container: &mut Container) {
    if let Err(err) = container.delete(true) {
        warn!(id = container.id(), error = %error_chain(&err), "cannot delete the container");
    }
}

fn container_error(what: &str, err: &LibcontainerError, details: Option<String>) -> JailError {
    let mut chain = error_chain(err);
    if let Some(details) = details {
        chain.push_str(&format!(" [{details}]"));
    }
    JailError::Container(format!("{what}: {chain}{}", hint(&chain)))
}

/// The container init process reports only a summary ("failed to prepare rootfs") to the shim;
/// the cause (which mount, which errno) is in what it logged to shim.log. Returns libcontainer's
/// first two error lines logged since `offset`, without timestamps.
fn init_errors_since(shim_log: &Path, offset: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(shim_log).ok()?;
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut text = String::new();
    file.take(1 << 20).read_to_string(&mut text).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|line| {
            line.split_once(" ERROR libcontainer::")
                .map(|(_, rest)| rest)
        })
        .take(2)
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// Adds what an operator needs to know for the failures we have seen on real hosts.
fn hint(chain: &str) -> String {
    let lower = chain.to_lowercase();
    let denied = lower.contains("permission denied") || lower.contains("eacces");
    if denied && lower.contains("cgroup") {
        let uid = nix::unistd::geteuid().as_raw();
        let host_uid = std::fs::read_to_string("/proc/self/uid_map")
            .ok()
            .and_then(|map| host_uid_of(&map, uid))
            .map(|host| format!(" (host uid {host})"))
            .unwrap_or_default();
        return format!(
            " (the cgroup fs is not writable for uid {uid}{host_uid}: libcontainer puts every \
             container in its own cgroup, so run as root, or as a user namespace root mapped \
             onto a uid that owns the cgroup hierarchy)"
        );
    }
    String::new()
}

/// The host uid behind `uid` according to a `/proc/<pid>/uid_map`.
fn host_uid_of(uid_map: &str, uid: u32) -> Option<u64> {
    uid_map.lines().find_map(|line| {
        let fields: Vec<u64> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let [inside, outside, count] = fields[..] else {
            return None;
        };
        let uid = u64::from(uid);
        (uid >= inside && uid < inside + count).then(|| outside + (uid - inside))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_uid_mapping() {
        let identity = "         0          0 4294967295\n";
        assert_eq!(host_uid_of(identity, 0), Some(0));
        let mapped = "         0      65534          1\n";
        assert_eq!(host_uid_of(mapped, 0), Some(65534));
        assert_eq!(host_uid_of(mapped, 1), None);
        let ranges = "0 1000 1\n1 100000 65536\n";
        assert_eq!(host_uid_of(ranges, 5), Some(100004));
        assert_eq!(host_uid_of("junk", 0), None);
    }
}
