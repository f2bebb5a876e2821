//! The pod infra ("pause") process: created by the shim as pid 1 of a new pid namespace, in new
//! net/ipc/uts namespaces as requested. It sets the hostname, brings `lo` up, drops every
//! capability, then reaps orphans until SIGTERM/SIGINT/SIGKILL. The shim bind-mounts its
//! namespaces under the pod's ns dir so containers can join them by path.

use super::channel::{self, Sender};
use super::namespaces::{bind_pod_namespaces, loopback_up, validate_hostname};
use super::{JailError, PodNamespacePaths};
use nix::sched::{CloneFlags, unshare};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};
use serde::{Deserialize, Serialize};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;
use tracing::warn;

pub(crate) struct RunningInfra {
    pub pid: i32,
    pub namespaces: PodNamespacePaths,
}

/// The child's answer once its namespaces are ready.
#[derive(Serialize, Deserialize)]
enum InfraSetup {
    Ready,
    Failed(String),
}

const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts the pause process as a child of the (single-threaded) shim.
pub(crate) fn start_infra(
    ns_dir: &Path,
    new_net: bool,
    new_ipc: bool,
    new_uts: bool,
    hostname: Option<&str>,
) -> Result<RunningInfra, JailError> {
    if let Some(name) = hostname {
        validate_hostname(name)?;
        if !new_uts {
            // Setting it would rename the host.
            return Err(JailError::InvalidSpec(
                "a pod hostname needs its own uts namespace".into(),
            ));
        }
    }
    std::fs::create_dir_all(ns_dir)
        .map_err(|err| JailError::io(format!("cannot create {}", ns_dir.display()), err))?;
    let (ready_tx, mut ready_rx) = channel::pipe::<InfraSetup>()?;
    // Our next child becomes pid 1 of a new pid namespace; the shim itself stays where it is.
    unshare(CloneFlags::CLONE_NEWPID)
        .map_err(|err| JailError::sys("cannot create a pid namespace", err))?;
    // SAFETY: the shim is single-threaded, so the child may run arbitrary code.
    let child = match unsafe { fork() }.map_err(|err| JailError::sys("fork", err))? {
        ForkResult::Child => {
            drop(ready_rx);
            pause_main(ready_tx, new_net, new_ipc, new_uts, hostname)
        }
        ForkResult::Parent { child } => child,
    };
    drop(ready_tx);
    let setup = match ready_rx.recv_timeout(SETUP_TIMEOUT) {
        Ok(InfraSetup::Ready) => Ok(()),
        Ok(InfraSetup::Failed(message)) => Err(JailError::Container(format!(
            "pod infra setup failed: {message}"
        ))),
        Err(err) => Err(JailError::Container(format!(
            "pod infra process did not get ready: {err}"
        ))),
    };
    let namespaces =
        setup.and_then(|()| bind_pod_namespaces(child.as_raw(), ns_dir, new_net, new_ipc, new_uts));
    match namespaces {
        Ok(namespaces) => Ok(RunningInfra {
            pid: child.as_raw(),
            namespaces,
        }),
        Err(err) => {
            // Our own child: nobody else will reap it.
            let _ = kill(child, Signal::SIGKILL);
            let _ = waitpid(child, Some(WaitPidFlag::__WALL));
            Err(err)
        }
    }
}

/// Runs in the forked child; never returns.
fn pause_main(
    mut ready: Sender<InfraSetup>,
    new_net: bool,
    new_ipc: bool,
    new_uts: bool,
    hostname: Option<&str>,
) -> ! {
    // The shim's fds (its report pipe to the agent above all) must not stay open in a process
    // that outlives the shim's use of them.
    let keep = std::os::fd::AsRawFd::as_raw_fd(&ready.as_fd());
    close_range(3, keep - 1);
    close_range(keep + 1, libc::c_int::MAX);
    let setup = setup_namespaces(new_net, new_ipc, new_uts, hostname).and_then(|()| confine());
    let message = match &setup {
        Ok(()) => InfraSetup::Ready,
        Err(err) => InfraSetup::Failed(err.to_string()),
    };
    let sent = ready.send(&message);
    if setup.is_err() || sent.is_err() {
        // SAFETY: leaving the forked child without running the parent's destructors.
        unsafe { libc::_exit(1) };
    }
    drop(ready);
    pause_loop()
}

fn close_range(first: libc::c_int, last: libc::c_int) {
    if first <= last {
        // SAFETY: in the forked child, the fds closed here are not used again.
        unsafe {
            libc::syscall(
                libc::SYS_close_range,
                first as libc::c_uint,
                last as libc::c_uint,
                0,
            )
        };
    }
}

fn setup_namespaces(
    new_net: bool,
    new_ipc: bool,
    new_uts: bool,
    hostname: Option<&str>,
) -> Result<(), JailError> {
    let mut flags = CloneFlags::empty();
    flags.set(CloneFlags::CLONE_NEWNET, new_net);
    flags.set(CloneFlags::CLONE_NEWIPC, new_ipc);
    flags.set(CloneFlags::CLONE_NEWUTS, new_uts);
    if !flags.is_empty() {
        unshare(flags).map_err(|err| JailError::sys("cannot create pod namespaces", err))?;
    }
    if let Some(name) = hostname {
        nix::unistd::sethostname(name).map_err(|err| JailError::sys("sethostname", err))?;
    }
    if new_net {
        loopback_up()?;
    }
    Ok(())
}

/// stdio on /dev/null, no other fds but the report pipe, cwd /, no capabilities, no_new_privs.
fn confine() -> Result<(), JailError> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|err| JailError::io("cannot open /dev/null", err))?;
    for target in 0..=2 {
        nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), target)
            .map_err(|err| JailError::sys("dup2", err))?;
    }
    nix::unistd::chdir("/").map_err(|err| JailError::sys("chdir /", err))?;
    // SAFETY: plain prctl syscalls.
    unsafe {
        libc::prctl(
            libc::PR_SET_NAME,
            c"pause".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(JailError::io(
                "cannot set no_new_privs",
                std::io::Error::last_os_error(),
            ));
        }
    }
    drop_all_capabilities()
}

fn drop_all_capabilities() -> Result<(), JailError> {
    let cap_err =
        |err: caps::errors::CapsError| JailError::Container(format!("capabilities: {err}"));
    // The bounding set first: dropping from it needs CAP_SETPCAP, which goes with the rest.
    for cap in caps::all() {
        if caps::has_cap(None, caps::CapSet::Bounding, cap).unwrap_or(false) {
            caps::drop(None, caps::CapSet::Bounding, cap).map_err(cap_err)?;
        }
    }
    caps::clear(None, caps::CapSet::Ambient).map_err(cap_err)?;
    caps::clear(None, caps::CapSet::Inheritable).map_err(cap_err)?;
    caps::clear(None, caps::CapSet::Effective).map_err(cap_err)?;
    caps::clear(None, caps::CapSet::Permitted).map_err(cap_err)?;
    Ok(())
}

/// pid 1 of the pod: reaps orphans (in pods that share their pid namespace) and exits on
/// SIGTERM/SIGINT. The signals are blocked and taken with sigwait: a pid-1 process only receives
/// signals it handles or blocks.
fn pause_loop() -> ! {
    let mut mask = SigSet::empty();
    for sig in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT] {
        // The shim ignores some of these; pid 1 of the pod takes them with sigwait instead.
        // SAFETY: SIG_DFL installs no handler code.
        let _ = unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl) };
        mask.add(sig);
    }
    if let Err(err) = mask.thread_set_mask() {
        warn!(%err, "pause: cannot set the signal mask");
    }
    loop {
        match mask.wait() {
            Ok(Signal::SIGCHLD) => reap_orphans(),
            Ok(_) => {
                // SAFETY: leaving the process; nothing to clean up.
                unsafe { libc::_exit(0) }
            }
            Err(_) => {}
        }
    }
}

fn reap_orphans() {
    while let Ok(status) = waitpid(
        Pid::from_raw(-1),
        Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
    ) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}
