//! Creating, starting and deleting the container with libcontainer. The container's init process
//! becomes a child of the shim: libcontainer clones the intermediate process as our child and the
//! init with CLONE_PARENT from there.

use super::super::JailError;
use super::super::error::error_chain;
use super::super::executor::JailExecutor;
use super::super::fds::cloexec_pipe;
use libcontainer::container::Container;
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::error::LibcontainerError;
use libcontainer::syscall::syscall::SyscallType;
use std::os::fd::OwnedFd;
use std::path::Path;
use tracing::warn;

pub(crate) struct RunningContainer {
    pub container: Container,
    pub pid: i32,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Builds and starts `id` from `bundle`. The container's stdin is /dev/null; its stdout and stderr
/// are pipes whose read ends are returned. On failure nothing is left behind (libcontainer
/// removes a half-created container; a created one that fails to start is deleted here).
pub(crate) fn start_container(
    id: &str,
    bundle: &Path,
    libcontainer_root: &Path,
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
    let stdin = std::fs::File::open("/dev/null")
        .map_err(|err| JailError::io("cannot open /dev/null", err))?;

    let mut container = ContainerBuilder::new(id.to_string(), SyscallType::default())
        .with_executor(JailExecutor::default())
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
    // The builder held the write ends; they are closed now, so EOF on our read ends means every
    // process of the container closed its output.

    if let Err(err) = container.start() {
        let details = init_errors_since(shim_log, log_offset);
        let error = container_error("cannot start the container", &err, details);
        delete_container(&mut container);
        return Err(error);
    }
    let Some(pid) = container.pid() else {
        delete_container(&mut container);
        return Err(JailError::Container(
            "libcontainer started the container but recorded no pid".into(),
        ));
    };
    Ok(RunningContainer {
        container,
        pid: pid.as_raw(),
        stdout,
        stderr,
    })
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
        let uid = nix::unistd::geteuid();
        return format!(
            " (the cgroup fs is not writable for uid {uid}: run as root, as mapped root in a \
             user namespace, or without linux.resources in the spec)"
        );
    }
    String::new()
}
