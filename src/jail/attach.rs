//! The attach protocol between a container's shim and whoever attaches (the runtime, for CRI
//! Attach): the shim listens on `<state_dir>/attach.sock` for as long as the container runs,
//! so an attach works after agent restarts too.
//!
//! Both directions carry frames `[kind: u8][length: u32 BE][payload]`. The client opens with
//! `Hello` (JSON: which streams it wants); the shim answers `Ready` (JSON: whether stdin was
//! granted, whether the container has a tty), then sends `Stdout`/`Stderr` output as it comes;
//! the client sends `Stdin`, `StdinEof` and `Resize`. A client that closes its side (even
//! half) is gone. The shim closes the connection once the container exited and its output was
//! delivered.

use super::JailError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The shim's attach socket inside its state dir.
pub const ATTACH_SOCKET_FILE: &str = "attach.sock";
/// Largest payload of one frame (output is sent in smaller chunks than this).
pub const MAX_FRAME_PAYLOAD: usize = 1 << 20;
const HEADER: usize = 5;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachHello {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachReady {
    /// The container was created with stdin, its stdin is still open, and the client asked.
    pub stdin: bool,
    pub tty: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttachFrame {
    Hello(AttachHello),
    Ready(AttachReady),
    Stdin(Vec<u8>),
    StdinEof,
    Resize { width: u16, height: u16 },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AttachProtocolError {
    #[error("unknown attach frame kind {0}")]
    UnknownKind(u8),
    #[error("attach frame of {0} bytes is too large")]
    TooLarge(usize),
    #[error("malformed attach frame: {0}")]
    Malformed(String),
}

const HELLO: u8 = 1;
const READY: u8 = 2;
const STDIN: u8 = 3;
const STDIN_EOF: u8 = 4;
const RESIZE: u8 = 5;
const STDOUT: u8 = 6;
const STDERR: u8 = 7;

impl AttachFrame {
    /// Appends the encoded frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        // Structs of bools: serializing them cannot fail.
        let json = |v: serde_json::Result<Vec<u8>>| v.unwrap_or_default();
        let (kind, payload): (u8, std::borrow::Cow<'_, [u8]>) = match self {
            AttachFrame::Hello(hello) => (HELLO, json(serde_json::to_vec(hello)).into()),
            AttachFrame::Ready(ready) => (READY, json(serde_json::to_vec(ready)).into()),
            AttachFrame::Stdin(data) => (STDIN, data.as_slice().into()),
            AttachFrame::StdinEof => (STDIN_EOF, (&[][..]).into()),
            AttachFrame::Resize { width, height } => {
                let mut p = width.to_be_bytes().to_vec();
                p.extend_from_slice(&height.to_be_bytes());
                (RESIZE, p.into())
            }
            AttachFrame::Stdout(data) => (STDOUT, data.as_slice().into()),
            AttachFrame::Stderr(data) => (STDERR, data.as_slice().into()),
        };
        out.push(kind);
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&payload);
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Decodes the first frame of `buf`: `Ok(None)` when more bytes are needed, else the frame
    /// and how many bytes it took.
    pub fn decode(buf: &[u8]) -> Result<Option<(AttachFrame, usize)>, AttachProtocolError> {
        if buf.len() < HEADER {
            return Ok(None);
        }
        let kind = buf[0];
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len > MAX_FRAME_PAYLOAD {
            return Err(AttachProtocolError::TooLarge(len));
        }
        if buf.len() < HEADER + len {
            return Ok(None);
        }
        let payload = &buf[HEADER..HEADER + len];
        let malformed = |e: serde_json::Error| AttachProtocolError::Malformed(e.to_string());
        let frame = match kind {
            HELLO => AttachFrame::Hello(serde_json::from_slice(payload).map_err(malformed)?),
            READY => AttachFrame::Ready(serde_json::from_slice(payload).map_err(malformed)?),
            STDIN => AttachFrame::Stdin(payload.to_vec()),
            STDIN_EOF => AttachFrame::StdinEof,
            RESIZE => match payload {
                [w0, w1, h0, h1] => AttachFrame::Resize {
                    width: u16::from_be_bytes([*w0, *w1]),
                    height: u16::from_be_bytes([*h0, *h1]),
                },
                _ => {
                    return Err(AttachProtocolError::Malformed(format!(
                        "resize payload of {len} bytes"
                    )));
                }
            },
            STDOUT => AttachFrame::Stdout(payload.to_vec()),
            STDERR => AttachFrame::Stderr(payload.to_vec()),
            other => return Err(AttachProtocolError::UnknownKind(other)),
        };
        Ok(Some((frame, HEADER + len)))
    }
}

/// Connects to the attach socket of the shim whose state dir is `state_dir` (however long its
/// path). A container whose shim is gone (or predates attach) refuses the connection.
pub fn connect_attach(state_dir: &Path) -> Result<std::os::unix::net::UnixStream, JailError> {
    use std::os::fd::AsRawFd;
    let addr = super::console::short_addr(state_dir, ATTACH_SOCKET_FILE)?;
    let socket = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::Stream,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|err| JailError::sys("socket", err))?;
    nix::sys::socket::connect(socket.as_raw_fd(), &addr.addr).map_err(|err| {
        JailError::sys(
            format!(
                "cannot connect to the container's attach socket {}",
                state_dir.join(ATTACH_SOCKET_FILE).display()
            ),
            err,
        )
    })?;
    Ok(std::os::unix::net::UnixStream::from(socket))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_split_anywhere() {
        let frames = vec![
            AttachFrame::Hello(AttachHello {
                stdin: true,
                stdout: true,
                stderr: false,
            }),
            AttachFrame::Ready(AttachReady {
                stdin: false,
                tty: true,
            }),
            AttachFrame::Stdin(b"abc".to_vec()),
            AttachFrame::StdinEof,
            AttachFrame::Resize {
                width: 300,
                height: 2,
            },
            AttachFrame::Stdout(Vec::new()),
            AttachFrame::Stderr(vec![0, 255]),
        ];
        let mut wire = Vec::new();
        for frame in &frames {
            frame.encode(&mut wire);
        }
        // Fed one byte at a time, every frame comes out whole and in order.
        let mut buf = Vec::new();
        let mut decoded = Vec::new();
        for byte in wire {
            buf.push(byte);
            while let Some((frame, used)) = AttachFrame::decode(&buf).unwrap() {
                buf.drain(..used);
                decoded.push(frame);
            }
        }
        assert_eq!(decoded, frames);
        assert!(buf.is_empty());
    }

    #[test]
    fn bad_frames_are_errors() {
        let cases: Vec<(Vec<u8>, AttachProtocolError)> = vec![
            (vec![99, 0, 0, 0, 0], AttachProtocolError::UnknownKind(99)),
            (
                vec![STDIN, 0xff, 0xff, 0xff, 0xff],
                AttachProtocolError::TooLarge(0xffff_ffff),
            ),
            (
                vec![RESIZE, 0, 0, 0, 1, 7],
                AttachProtocolError::Malformed("resize payload of 1 bytes".into()),
            ),
        ];
        for (wire, want) in cases {
            assert_eq!(AttachFrame::decode(&wire).unwrap_err(), want);
        }
        let mut hello = vec![HELLO, 0, 0, 0, 3];
        hello.extend_from_slice(b"{x}");
        assert!(matches!(
            AttachFrame::decode(&hello),
            Err(AttachProtocolError::Malformed(_))
        ));
        assert_eq!(AttachFrame::decode(&[STDOUT, 0, 0]).unwrap(), None);
    }
}
