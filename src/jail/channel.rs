//! A typed one-way channel between a parent and a child process: serde JSON messages framed by a
//! 4-byte little-endian length, over a pipe. Both ends are `OwnedFd`s created `O_CLOEXEC`; the
//! end handed to a child is placed at a fixed fd number by the spawner.
//!
//! The blocking API is for the synchronous side (shims, helpers, tests). The async runtime takes
//! the fd with [`Receiver::into_owned_fd`], reads it with tokio until EOF (a child sends one
//! message and closes), and decodes the bytes with [`decode`].

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// Frames larger than this are refused (a hostile or broken peer must not make us allocate
/// without bound).
pub const MAX_FRAME: usize = 16 << 20;
const HEADER: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("channel i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("channel closed by the peer before a message arrived")]
    Closed,
    #[error("channel closed in the middle of a message")]
    Truncated,
    #[error("no message within {0:?}")]
    Timeout(Duration),
    #[error("message of {0} bytes exceeds the {MAX_FRAME} byte limit")]
    TooLarge(usize),
    #[error("malformed message: {0}")]
    Decode(#[from] serde_json::Error),
}

/// The sending end.
pub struct Sender<T> {
    file: File,
    _message: PhantomData<fn(T)>,
}

/// The receiving end.
pub struct Receiver<T> {
    file: File,
    _message: PhantomData<fn() -> T>,
}

/// A new pipe channel; both fds are close-on-exec.
pub fn pipe<T>() -> Result<(Sender<T>, Receiver<T>), ChannelError> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    Ok((Sender::from_owned_fd(write), Receiver::from_owned_fd(read)))
}

/// Serializes `message` into one frame.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, ChannelError> {
    let body = serde_json::to_vec(message)?;
    if body.len() > MAX_FRAME {
        return Err(ChannelError::TooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(HEADER + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Decodes the first frame of `bytes` (everything a receiver read). Returns the message and the
/// number of bytes it used; [`ChannelError::Closed`] if `bytes` is empty,
/// [`ChannelError::Truncated`] if the frame is incomplete.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, usize), ChannelError> {
    if bytes.is_empty() {
        return Err(ChannelError::Closed);
    }
    let Some(header) = bytes.get(..HEADER) else {
        return Err(ChannelError::Truncated);
    };
    let len = frame_len(header)?;
    let body = bytes
        .get(HEADER..HEADER + len)
        .ok_or(ChannelError::Truncated)?;
    Ok((serde_json::from_slice(body)?, HEADER + len))
}

fn frame_len(header: &[u8]) -> Result<usize, ChannelError> {
    let mut raw = [0u8; HEADER];
    raw.copy_from_slice(header);
    let len = u32::from_le_bytes(raw) as usize;
    if len > MAX_FRAME {
        return Err(ChannelError::TooLarge(len));
    }
    Ok(len)
}

impl<T> Sender<T> {
    pub fn from_owned_fd(fd: OwnedFd) -> Self {
        Sender {
            file: File::from(fd),
            _message: PhantomData,
        }
    }

    pub fn into_owned_fd(self) -> OwnedFd {
        OwnedFd::from(self.file)
    }
}

impl<T: Serialize> Sender<T> {
    /// Writes one message (blocking).
    pub fn send(&mut self, message: &T) -> Result<(), ChannelError> {
        let frame = encode(message)?;
        self.file.write_all(&frame)?;
        Ok(())
    }
}

impl<T> AsFd for Sender<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl<T> Receiver<T> {
    pub fn from_owned_fd(fd: OwnedFd) -> Self {
        Receiver {
            file: File::from(fd),
            _message: PhantomData,
        }
    }

    pub fn into_owned_fd(self) -> OwnedFd {
        OwnedFd::from(self.file)
    }
}

impl<T> AsFd for Receiver<T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl<T: DeserializeOwned> Receiver<T> {
    /// Waits for the next message, without a time limit.
    pub fn recv(&mut self) -> Result<T, ChannelError> {
        self.recv_until(None)
    }

    /// Waits for the next message at most `timeout`.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<T, ChannelError> {
        self.recv_until(Some((Instant::now() + timeout, timeout)))
    }

    fn recv_until(&mut self, deadline: Option<(Instant, Duration)>) -> Result<T, ChannelError> {
        let mut header = [0u8; HEADER];
        if !self.read_exact_until(&mut header, deadline)? {
            return Err(ChannelError::Closed);
        }
        let len = frame_len(&header)?;
        let mut body = vec![0u8; len];
        if !self.read_exact_until(&mut body, deadline)? {
            return Err(ChannelError::Truncated);
        }
        Ok(serde_json::from_slice(&body)?)
    }

    /// Fills `buf`; `Ok(false)` on EOF before the first byte, `Truncated` on EOF after it.
    fn read_exact_until(
        &mut self,
        buf: &mut [u8],
        deadline: Option<(Instant, Duration)>,
    ) -> Result<bool, ChannelError> {
        let mut filled = 0;
        while filled < buf.len() {
            if let Some((at, total)) = deadline {
                wait_readable(self.file.as_fd(), at, total)?;
            }
            match self.file.read(&mut buf[filled..]) {
                Ok(0) if filled == 0 => return Ok(false),
                Ok(0) => return Err(ChannelError::Truncated),
                Ok(n) => filled += n,
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(true)
    }
}

fn wait_readable(
    fd: BorrowedFd<'_>,
    deadline: Instant,
    total: Duration,
) -> Result<(), ChannelError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ChannelError::Timeout(total));
        }
        // Round up so a sub-millisecond remainder does not become a busy 0 ms poll.
        let millis = left.as_millis().saturating_add(1).min(i32::MAX as u128) as i32;
        let timeout = PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) => continue,
            // Readable, or hung up (the read then reports EOF).
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(err) => return Err(std::io::Error::from(err).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Msg {
        Hello { n: u32 },
        Big(String),
    }

    #[test]
    fn round_trip_and_eof() {
        let (mut tx, mut rx) = pipe::<Msg>().unwrap();
        tx.send(&Msg::Hello { n: 7 }).unwrap();
        drop(tx);
        assert_eq!(rx.recv().unwrap(), Msg::Hello { n: 7 });
        assert!(matches!(rx.recv(), Err(ChannelError::Closed)));
    }

    #[test]
    fn timeout_when_nothing_arrives() {
        let (_tx, mut rx) = pipe::<Msg>().unwrap();
        let err = rx.recv_timeout(Duration::from_millis(30)).unwrap_err();
        assert!(matches!(err, ChannelError::Timeout(_)), "{err}");
    }

    #[test]
    fn message_larger_than_the_pipe_buffer_arrives_whole() {
        let (mut tx, mut rx) = pipe::<Msg>().unwrap();
        let big = "x".repeat(200_000);
        let expected = Msg::Big(big.clone());
        let writer = std::thread::spawn(move || tx.send(&Msg::Big(big)).unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), expected);
        writer.join().unwrap();
    }

    #[test]
    fn decode_handles_partial_and_hostile_frames() {
        let frame = encode(&Msg::Hello { n: 1 }).unwrap();
        let (msg, used) = decode::<Msg>(&frame).unwrap();
        assert_eq!((msg, used), (Msg::Hello { n: 1 }, frame.len()));
        assert!(matches!(decode::<Msg>(&[]), Err(ChannelError::Closed)));
        assert!(matches!(
            decode::<Msg>(&frame[..frame.len() - 1]),
            Err(ChannelError::Truncated)
        ));
        assert!(matches!(
            decode::<Msg>(&[0xff, 0xff, 0xff, 0xff]),
            Err(ChannelError::TooLarge(_))
        ));
        let mut garbage = 3u32.to_le_bytes().to_vec();
        garbage.extend_from_slice(b"{{{");
        assert!(matches!(
            decode::<Msg>(&garbage),
            Err(ChannelError::Decode(_))
        ));
    }

    #[test]
    fn truncated_stream_is_reported() {
        let (tx, mut rx) = pipe::<Msg>().unwrap();
        let mut file = File::from(tx.into_owned_fd());
        file.write_all(&10u32.to_le_bytes()).unwrap();
        file.write_all(b"{\"He").unwrap();
        drop(file);
        assert!(matches!(rx.recv(), Err(ChannelError::Truncated)));
    }
}
