//! Persistent pod namespaces: bind mounts of `/proc/<infra>/ns/<kind>` onto files in the pod's
//! ns dir (in the agent's mount namespace), plus the setup done inside a new namespace.

use super::{JailError, PodNamespacePaths};
use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Namespace kinds a pod may hold as files, in `ns_dir/<name>`; released in this order. "pid"
/// only in pods of runp before the pid bind was dropped.
const KINDS: [&str; 4] = ["net", "ipc", "uts", "pid"];

/// Bind-mounts the requested namespaces of `pid` under `ns_dir`. Not its pid namespace:
/// nothing can join that once the infra (its init) is gone, so containers sharing it join
/// `/proc/<infra>/ns/pid`, and a bind would only add a mount per pod to every mountinfo read.
pub(crate) fn bind_pod_namespaces(
    pid: i32,
    ns_dir: &Path,
    net: bool,
    ipc: bool,
    uts: bool,
) -> Result<PodNamespacePaths, JailError> {
    let bind = |kind: &str, wanted: bool| -> Result<Option<PathBuf>, JailError> {
        if !wanted {
            return Ok(None);
        }
        let target = ns_dir.join(kind);
        bind_file(Path::new(&format!("/proc/{pid}/ns/{kind}")), &target)?;
        Ok(Some(target))
    };
    let paths = (|| {
        Ok(PodNamespacePaths {
            net: bind("net", net)?,
            ipc: bind("ipc", ipc)?,
            uts: bind("uts", uts)?,
        })
    })();
    if paths.is_err() {
        let _ = release_pod_namespaces(ns_dir);
    }
    paths
}

fn bind_file(source: &Path, target: &Path) -> Result<(), JailError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(target)
        .map_err(|err| JailError::io(format!("cannot create {}", target.display()), err))?;
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|err| {
        JailError::sys(
            format!("cannot bind {} to {}", source.display(), target.display()),
            err,
        )
    })
}

/// Unmounts and removes the namespace files under `ns_dir` (the namespaces themselves live on
/// while a process uses them). Idempotent; call it when the pod sandbox is stopped or removed.
pub fn release_pod_namespaces(ns_dir: &Path) -> Result<(), JailError> {
    for kind in KINDS {
        let file = ns_dir.join(kind);
        // Unmount every stacked bind (a crashed earlier attempt may have left one).
        loop {
            match umount2(&file, MntFlags::MNT_DETACH) {
                Ok(()) => continue,
                Err(Errno::EINVAL) | Err(Errno::ENOENT) => break,
                Err(err) => {
                    return Err(JailError::sys(
                        format!("cannot unmount {}", file.display()),
                        err,
                    ));
                }
            }
        }
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::NotFound => {}
            Err(err) => {
                return Err(JailError::io(
                    format!("cannot remove {}", file.display()),
                    err,
                ));
            }
        }
    }
    Ok(())
}

/// Whether `path` is a namespace file (a live nsfs bind mount or /proc/<pid>/ns entry), not the
/// empty placeholder left once the namespace was released.
pub fn is_namespace_file(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
}

/// Brings the loopback interface of the current network namespace up.
pub(crate) fn loopback_up() -> Result<(), JailError> {
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|err| JailError::sys("socket", err))?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we pass, nothing else.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(JailError::io(
                "cannot read lo flags",
                std::io::Error::last_os_error(),
            ));
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(JailError::io(
                "cannot bring lo up",
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

/// A hostname the kernel accepts (1..=64 bytes, no NUL) and that cannot be mistaken for a path.
pub(crate) fn validate_hostname(name: &str) -> Result<(), JailError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name
            .bytes()
            .any(|b| b == 0 || b == b'/' || b.is_ascii_whitespace());
    if ok {
        Ok(())
    } else {
        Err(JailError::InvalidSpec(format!("invalid hostname {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostname_rules() {
        for good in ["pod", "a-b.c", &"x".repeat(64)] {
            assert!(validate_hostname(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a/b", "nul\0", &"x".repeat(65)] {
            assert!(validate_hostname(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn release_of_an_empty_or_missing_dir_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        release_pod_namespaces(dir.path()).unwrap();
        release_pod_namespaces(&dir.path().join("missing")).unwrap();
    }

    #[test]
    fn namespace_files_are_told_from_plain_files() {
        assert!(is_namespace_file(Path::new("/proc/self/ns/net")));
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("net");
        std::fs::write(&plain, b"").unwrap();
        assert!(!is_namespace_file(&plain));
        assert!(!is_namespace_file(&dir.path().join("missing")));
    }
}
