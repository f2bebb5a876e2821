//! Work inside a pod's network namespace from this multi-threaded process: port forwarding's
//! dial (a TCP connection to the pod's loopback) and the bridge network's netlink socket. A
//! socket stays in the namespace it was created in, so a short-lived thread joins the namespace
//! (setns affects only the calling thread), creates it, and hands it back.

use super::JailError;
use nix::sched::{CloneFlags, setns};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Connects to `127.0.0.1:port` (then `[::1]:port`, as containerd does) inside the network
/// namespace bound at `netns`, or in this process's namespace when `None` (host-network pods).
/// Blocks for at most about twice `timeout`.
pub fn connect_in_netns(
    netns: Option<&Path>,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, JailError> {
    let Some(netns) = netns else {
        return dial_loopback(port, timeout);
    };
    in_netns(netns, move || dial_loopback(port, timeout))
}

/// Runs `work` on a short-lived thread that has joined the network namespace bound at `netns`
/// (setns affects only the calling thread, and the thread ends right after, so nothing else
/// ever runs in the pod's namespace). Sockets `work` creates stay in that namespace.
pub fn in_netns<T: Send + 'static>(
    netns: &Path,
    work: impl FnOnce() -> Result<T, JailError> + Send + 'static,
) -> Result<T, JailError> {
    let netns: PathBuf = netns.to_path_buf();
    std::thread::Builder::new()
        .name("runp-netns".into())
        .spawn(move || {
            let ns = std::fs::File::open(&netns).map_err(|err| {
                JailError::io(
                    format!("cannot open the network namespace {}", netns.display()),
                    err,
                )
            })?;
            setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|err| {
                JailError::sys(
                    format!("cannot enter the network namespace {}", netns.display()),
                    err,
                )
            })?;
            work()
        })
        .map_err(|err| JailError::io("cannot start a thread for the network namespace", err))?
        .join()
        .map_err(|_| JailError::Container("the network namespace thread panicked".into()))?
}

fn dial_loopback(port: u16, timeout: Duration) -> Result<TcpStream, JailError> {
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    match TcpStream::connect_timeout(&v4, timeout) {
        Ok(stream) => Ok(stream),
        Err(err_v4) => {
            let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
            TcpStream::connect_timeout(&v6, timeout).map_err(|err_v6| {
                JailError::io(
                    format!("cannot connect to localhost:{port} ({err_v4}; [::1]: {err_v6})"),
                    err_v4,
                )
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn dials_the_host_loopback_and_reports_refusals() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut client = connect_in_netns(None, port, Duration::from_secs(5)).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(b"hi").unwrap();
        let mut got = [0u8; 2];
        server.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
        drop(listener);
        let err = connect_in_netns(None, port, Duration::from_secs(5)).unwrap_err();
        assert!(
            err.to_string().contains(&format!("localhost:{port}")),
            "{err}"
        );
        let err = connect_in_netns(
            Some(Path::new("/nonexistent/ns")),
            port,
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ns"), "{err}");
    }
}
