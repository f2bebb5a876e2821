//! CRI endpoint addresses as kubelet and crictl spell them (`--runtime-endpoint`, `--listen`).
//!
//! Accepted forms:
//! - `unix:///abs/path` and `unix:/abs/path`: an absolute socket path;
//! - `unix:rel/path`: a path relative to the working directory (gRPC's naming);
//! - `/abs/path`: a bare absolute path, which kubelet still accepts (deprecated) as a unix socket;
//! - `tcp://host:port` (`tcp://[::1]:port` for IPv6): for tests and tools.
//!
//! Everything else (other schemes, `unix://host/path` with an authority, empty paths, paths longer
//! than a socket address can hold) is an error.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Longest socket path Linux accepts: `sun_path` is 108 bytes including the trailing NUL.
pub const MAX_UNIX_PATH_LEN: usize = 107;

/// Where a CRI server listens or a CRI client connects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CriEndpoint {
    /// A unix stream socket (absolute, or relative to the working directory).
    Unix(PathBuf),
    /// A TCP address; `host` carries no IPv6 brackets.
    Tcp { host: String, port: u16 },
}

/// Why an endpoint string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("empty CRI endpoint")]
    Empty,
    #[error(
        "unsupported CRI endpoint {0:?}: expected unix:///path/to.sock, unix:relative.sock or tcp://host:port"
    )]
    UnsupportedScheme(String),
    #[error("CRI endpoint {0:?} has no socket path")]
    EmptyPath(String),
    #[error(
        "CRI endpoint {0:?} names a host; a unix socket path must be absolute (unix:///path) or relative (unix:path)"
    )]
    UnixAuthority(String),
    #[error(
        "CRI endpoint {endpoint:?}: socket path is {len} bytes, longer than the {max} a unix socket allows"
    )]
    PathTooLong {
        endpoint: String,
        len: usize,
        max: usize,
    },
    #[error(
        "CRI endpoint {0:?}: expected tcp://host:port with a numeric port and nothing after it"
    )]
    BadTcpAddress(String),
}

impl CriEndpoint {
    /// The unix socket path, if this is a unix endpoint.
    pub fn unix_path(&self) -> Option<&Path> {
        match self {
            CriEndpoint::Unix(path) => Some(path),
            CriEndpoint::Tcp { .. } => None,
        }
    }
}

impl FromStr for CriEndpoint {
    type Err = EndpointError;

    fn from_str(endpoint: &str) -> Result<Self, Self::Err> {
        if endpoint.is_empty() {
            return Err(EndpointError::Empty);
        }
        if let Some(rest) = endpoint.strip_prefix("unix:") {
            let path = match rest.strip_prefix("//") {
                // unix://<authority><path>: only an empty authority is meaningful.
                Some(after) if after.is_empty() || after.starts_with('/') => after,
                Some(_) => return Err(EndpointError::UnixAuthority(endpoint.to_owned())),
                None => rest,
            };
            return unix_endpoint(endpoint, path);
        }
        if let Some(authority) = endpoint.strip_prefix("tcp://") {
            return tcp_endpoint(endpoint, authority);
        }
        if endpoint.starts_with('/') {
            return unix_endpoint(endpoint, endpoint);
        }
        Err(EndpointError::UnsupportedScheme(endpoint.to_owned()))
    }
}

fn unix_endpoint(endpoint: &str, path: &str) -> Result<CriEndpoint, EndpointError> {
    if path.is_empty() || path.ends_with('/') {
        return Err(EndpointError::EmptyPath(endpoint.to_owned()));
    }
    if path.len() > MAX_UNIX_PATH_LEN {
        return Err(EndpointError::PathTooLong {
            endpoint: endpoint.to_owned(),
            len: path.len(),
            max: MAX_UNIX_PATH_LEN,
        });
    }
    Ok(CriEndpoint::Unix(PathBuf::from(path)))
}

fn tcp_endpoint(endpoint: &str, authority: &str) -> Result<CriEndpoint, EndpointError> {
    let bad = || EndpointError::BadTcpAddress(endpoint.to_owned());
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or_else(bad)?;
        (host, after.strip_prefix(':').ok_or_else(bad)?)
    } else {
        let (host, port) = authority.rsplit_once(':').ok_or_else(bad)?;
        if host.contains(':') {
            return Err(bad()); // an IPv6 address needs brackets
        }
        (host, port)
    };
    let valid_host = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'));
    let digits_only = !port.is_empty() && port.chars().all(|c| c.is_ascii_digit());
    if !valid_host || !digits_only {
        return Err(bad());
    }
    let port = port.parse::<u16>().map_err(|_| bad())?;
    Ok(CriEndpoint::Tcp {
        host: host.to_owned(),
        port,
    })
}

impl fmt::Display for CriEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CriEndpoint::Unix(path) if path.is_absolute() => write!(f, "unix://{}", path.display()),
            CriEndpoint::Unix(path) => write!(f, "unix:{}", path.display()),
            CriEndpoint::Tcp { host, port } if host.contains(':') => {
                write!(f, "tcp://[{host}]:{port}")
            }
            CriEndpoint::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix(path: &str) -> Result<CriEndpoint, EndpointError> {
        Ok(CriEndpoint::Unix(PathBuf::from(path)))
    }

    fn tcp(host: &str, port: u16) -> Result<CriEndpoint, EndpointError> {
        Ok(CriEndpoint::Tcp {
            host: host.to_owned(),
            port,
        })
    }

    #[test]
    fn parses_the_endpoint_forms_kubelet_and_grpc_accept() {
        let long = format!("unix:///{}", "a".repeat(MAX_UNIX_PATH_LEN));
        let longest = format!("unix:///{}", "a".repeat(MAX_UNIX_PATH_LEN - 1));
        let table: Vec<(&str, Result<CriEndpoint, EndpointError>)> = vec![
            ("unix:///run/runp/runp.sock", unix("/run/runp/runp.sock")),
            (
                "unix:/run/containerd/containerd.sock",
                unix("/run/containerd/containerd.sock"),
            ),
            ("unix:runp.sock", unix("runp.sock")),
            ("unix:sub/dir.sock", unix("sub/dir.sock")),
            ("/var/run/crio/crio.sock", unix("/var/run/crio/crio.sock")),
            (&longest, unix(&longest["unix://".len()..])),
            ("tcp://127.0.0.1:1234", tcp("127.0.0.1", 1234)),
            ("tcp://localhost:0", tcp("localhost", 0)),
            ("tcp://[::1]:65535", tcp("::1", 65535)),
            ("", Err(EndpointError::Empty)),
            ("unix:", Err(EndpointError::EmptyPath("unix:".into()))),
            ("unix://", Err(EndpointError::EmptyPath("unix://".into()))),
            ("unix:///", Err(EndpointError::EmptyPath("unix:///".into()))),
            (
                "unix:///run/runp/",
                Err(EndpointError::EmptyPath("unix:///run/runp/".into())),
            ),
            (
                "unix://run/runp.sock",
                Err(EndpointError::UnixAuthority("unix://run/runp.sock".into())),
            ),
            (
                &long,
                Err(EndpointError::PathTooLong {
                    endpoint: long.clone(),
                    len: 108,
                    max: 107,
                }),
            ),
            (
                "npipe:////./pipe/containerd",
                Err(EndpointError::UnsupportedScheme(
                    "npipe:////./pipe/containerd".into(),
                )),
            ),
            (
                "http://127.0.0.1:80",
                Err(EndpointError::UnsupportedScheme(
                    "http://127.0.0.1:80".into(),
                )),
            ),
            (
                "run/runp.sock",
                Err(EndpointError::UnsupportedScheme("run/runp.sock".into())),
            ),
            (
                "tcp://127.0.0.1",
                Err(EndpointError::BadTcpAddress("tcp://127.0.0.1".into())),
            ),
            (
                "tcp://127.0.0.1:",
                Err(EndpointError::BadTcpAddress("tcp://127.0.0.1:".into())),
            ),
            (
                "tcp://:80",
                Err(EndpointError::BadTcpAddress("tcp://:80".into())),
            ),
            (
                "tcp://127.0.0.1:65536",
                Err(EndpointError::BadTcpAddress("tcp://127.0.0.1:65536".into())),
            ),
            (
                "tcp://127.0.0.1:+80",
                Err(EndpointError::BadTcpAddress("tcp://127.0.0.1:+80".into())),
            ),
            (
                "tcp://127.0.0.1:80/",
                Err(EndpointError::BadTcpAddress("tcp://127.0.0.1:80/".into())),
            ),
            (
                "tcp://::1:80",
                Err(EndpointError::BadTcpAddress("tcp://::1:80".into())),
            ),
            (
                "tcp://[::1]80",
                Err(EndpointError::BadTcpAddress("tcp://[::1]80".into())),
            ),
            (
                "tcp://user@host:80",
                Err(EndpointError::BadTcpAddress("tcp://user@host:80".into())),
            ),
        ];
        for (input, want) in table {
            assert_eq!(input.parse::<CriEndpoint>(), want, "parsing {input:?}");
        }
    }

    #[test]
    fn display_round_trips_through_parse() {
        for input in [
            "unix:///run/runp/runp.sock",
            "unix:relative.sock",
            "tcp://127.0.0.1:10010",
            "tcp://[::1]:10010",
        ] {
            let parsed: CriEndpoint = input.parse().unwrap();
            assert_eq!(parsed.to_string(), input);
            assert_eq!(parsed.to_string().parse::<CriEndpoint>().unwrap(), parsed);
        }
    }
}
