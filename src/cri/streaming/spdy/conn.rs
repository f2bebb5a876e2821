//! The server side of one SPDY/3.1 connection, as the kubelet's streaming server uses it through
//! moby/spdystream: the client creates every stream (odd ids); the server replies to or resets
//! each, reads its data, writes data back and half-closes it.
//!
//! Three tasks own the connection: a reader (frames in, PING echoes, data to per-stream
//! channels), a writer (one FIFO of frames out, so per-stream order is the order of calls), and,
//! with an idle timeout, a watchdog. spdystream does no flow control (it never sends
//! WINDOW_UPDATE and ignores those it gets), so outgoing data is not held back by the peer's
//! window; received data is acknowledged with WINDOW_UPDATEs so a strict SPDY/3.1 peer keeps
//! sending too.

use super::SpdyError;
use super::frame::{Frame, FrameDecoder, FrameEncoder, goaway, rst};
use super::headers::Headers;
use crate::cri::streaming::idle::{IdleClock, spawn_watchdog};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::debug;

/// Outgoing data is cut into frames of at most this size, so one busy stream cannot hold the
/// connection for long (io.Copy's buffer size in the Go client).
const MAX_DATA_CHUNK: usize = 32 * 1024;
/// Received bytes acknowledged per WINDOW_UPDATE (half the SPDY/3.1 default window).
const WINDOW_ACK_THRESHOLD: u32 = 32 * 1024;
/// Frames queued for the writer before writers wait.
const OUTGOING_QUEUE: usize = 64;
/// Data chunks buffered per incoming stream before the reader waits for the consumer.
const INCOMING_QUEUE: usize = 16;

enum Command {
    Frame(Frame),
    /// Answered once everything queued before it was written and flushed.
    Barrier(oneshot::Sender<()>),
}

/// Per-stream flags shared by the reader and the stream's writers.
#[derive(Default)]
struct StreamState {
    /// Reset by either side, or the connection ended: writes fail.
    reset: AtomicBool,
    /// We sent our FIN.
    local_finished: AtomicBool,
    /// The peer sent its FIN.
    remote_finished: AtomicBool,
}

struct StreamEntry {
    data: Option<mpsc::Sender<Vec<u8>>>,
    state: Arc<StreamState>,
    unacked: u32,
}

struct Shared {
    streams: Mutex<HashMap<u32, StreamEntry>>,
    idle: Arc<IdleClock>,
    /// Highest stream id the peer opened (for GOAWAY).
    last_received: AtomicU32,
    /// We sent GOAWAY: new streams are refused.
    closing: AtomicBool,
    ended: watch::Sender<bool>,
}

impl Shared {
    fn streams(&self) -> MutexGuard<'_, HashMap<u32, StreamEntry>> {
        // A panic while holding the lock leaves a consistent map; keep going.
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets a stream once both sides are done with it.
    fn forget_if_done(&self, id: u32) {
        let mut streams = self.streams();
        if let Some(entry) = streams.get(&id) {
            let s = &entry.state;
            if s.reset.load(Ordering::Acquire)
                || (s.local_finished.load(Ordering::Acquire)
                    && s.remote_finished.load(Ordering::Acquire))
            {
                streams.remove(&id);
            }
        }
    }
}

/// Writes one stream's side: data frames, the half-close, or a reset. Cheap to clone.
#[derive(Clone)]
pub struct StreamWriter {
    id: u32,
    out: mpsc::Sender<Command>,
    state: Arc<StreamState>,
    shared: Arc<Shared>,
}

impl StreamWriter {
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Sends `data` as data frames (nothing for empty data).
    pub async fn write(&self, data: &[u8]) -> io::Result<()> {
        for chunk in data.chunks(MAX_DATA_CHUNK) {
            self.check_writable()?;
            self.send(Frame::Data {
                stream_id: self.id,
                fin: false,
                data: chunk.to_vec(),
            })
            .await?;
        }
        Ok(())
    }

    /// Half-closes our side (an empty data frame with FIN). Idempotent; a no-op after a reset.
    pub async fn finish(&self) -> io::Result<()> {
        if self.state.reset.load(Ordering::Acquire)
            || self.state.local_finished.swap(true, Ordering::AcqRel)
        {
            return Ok(());
        }
        let sent = self
            .send(Frame::Data {
                stream_id: self.id,
                fin: true,
                data: Vec::new(),
            })
            .await;
        self.shared.forget_if_done(self.id);
        sent
    }

    /// Ends both directions with RST_STREAM `status` (spdystream's Reset uses CANCEL).
    pub async fn reset(&self, status: u32) {
        if self.state.reset.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(entry) = self.shared.streams().remove(&self.id) {
            drop(entry.data);
        }
        let _ = self
            .send(Frame::RstStream {
                stream_id: self.id,
                status,
            })
            .await;
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.state.reset.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "SPDY stream was reset",
            ));
        }
        if self.state.local_finished.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "SPDY stream already half-closed",
            ));
        }
        Ok(())
    }

    async fn send(&self, frame: Frame) -> io::Result<()> {
        self.out
            .send(Command::Frame(frame))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "SPDY connection closed"))
    }
}

/// A stream the client opened: its headers, its incoming data (the channel ends at the client's
/// FIN, a reset, or the connection's end) and the writer for our side.
pub struct IncomingStream {
    pub id: u32,
    pub headers: Headers,
    pub data: mpsc::Receiver<Vec<u8>>,
    pub writer: StreamWriter,
}

impl IncomingStream {
    /// Accepts the stream: SYN_REPLY with no headers, as spdystream's SendReply.
    pub async fn accept(&self) -> io::Result<()> {
        self.writer
            .send(Frame::SynReply {
                stream_id: self.id,
                fin: false,
                headers: Headers::new(),
            })
            .await
    }

    /// Refuses the stream (RST_STREAM CANCEL, as spdystream's Reset).
    pub async fn reject(self) {
        self.writer.reset(rst::CANCEL).await;
    }
}

/// One upgraded SPDY connection. Dropping it tears the connection down at once; [`close`] is
/// the graceful way.
///
/// [`close`]: SpdyConnection::close
pub struct SpdyConnection {
    out: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    ended: watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl SpdyConnection {
    /// Starts serving `io` (already upgraded). Streams the client opens arrive on the returned
    /// channel, which closes when the connection ends. `idle_timeout` (zero = none) ends a
    /// connection with no frame in either direction for that long, like spdystream's deadline.
    pub fn start<T>(
        io: T,
        idle_timeout: Duration,
    ) -> (SpdyConnection, mpsc::Receiver<IncomingStream>)
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read_half, write_half) = tokio::io::split(io);
        let (ended_tx, ended_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            streams: Mutex::new(HashMap::new()),
            idle: Arc::new(IdleClock::default()),
            last_received: AtomicU32::new(0),
            closing: AtomicBool::new(false),
            ended: ended_tx,
        });
        let (out_tx, out_rx) = mpsc::channel(OUTGOING_QUEUE);
        let (incoming_tx, incoming_rx) = mpsc::channel(8);
        let writer = tokio::spawn(write_loop(write_half, out_rx, shared.clone()));
        let reader = tokio::spawn(read_loop(
            read_half,
            incoming_tx,
            out_tx.clone(),
            shared.clone(),
        ));
        let aborts = vec![writer.abort_handle(), reader.abort_handle()];
        let mut tasks = vec![writer, reader];
        let watched = shared.clone();
        tasks.extend(spawn_watchdog(
            shared.idle.clone(),
            idle_timeout,
            aborts,
            move || end_connection(&watched),
        ));
        let conn = SpdyConnection {
            out: out_tx,
            shared,
            ended: ended_rx,
            tasks,
        };
        (conn, incoming_rx)
    }

    /// Resolves when the connection ended (peer hung up, I/O error, idle timeout).
    pub async fn ended(&self) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|ended| *ended).await;
    }

    /// Graceful close: GOAWAY, wait (up to `drain`) until everything queued was written, then
    /// give the peer up to `linger` to hang up first, so it reads all we sent before the TCP
    /// connection goes. client-go closes as soon as it has the status and every stream's FIN.
    pub async fn close(self, drain: Duration, linger: Duration) {
        self.shared.closing.store(true, Ordering::Release);
        let last_good_stream_id = self.shared.last_received.load(Ordering::Acquire);
        let _ = self
            .out
            .send(Command::Frame(Frame::GoAway {
                last_good_stream_id,
                status: goaway::OK,
            }))
            .await;
        let (done_tx, done_rx) = oneshot::channel();
        if self.out.send(Command::Barrier(done_tx)).await.is_ok() {
            let _ = tokio::time::timeout(drain, done_rx).await;
        }
        let _ = tokio::time::timeout(linger, self.ended()).await;
    }
}

impl Drop for SpdyConnection {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
        end_connection(&self.shared);
    }
}

/// Marks the connection over: every stream's incoming data ends and its writers fail.
fn end_connection(shared: &Shared) {
    for (_, entry) in shared.streams().drain() {
        entry.state.reset.store(true, Ordering::Release);
    }
    shared.ended.send_replace(true);
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut io: W,
    mut commands: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
) {
    let mut encoder = match FrameEncoder::new() {
        Ok(encoder) => encoder,
        Err(e) => {
            debug!(error = %e, "SPDY writer cannot start");
            end_connection(&shared);
            return;
        }
    };
    let mut buf = Vec::new();
    let mut barriers = Vec::new();
    while let Some(command) = commands.recv().await {
        let mut next = Some(command);
        // Batch whatever is already queued into one write.
        while let Some(command) = next.take() {
            match command {
                Command::Frame(frame) => {
                    if let Err(e) = encoder.encode(&frame, &mut buf) {
                        debug!(error = %e, "SPDY frame cannot be encoded");
                        end_connection(&shared);
                        return;
                    }
                }
                Command::Barrier(done) => barriers.push(done),
            }
            next = commands.try_recv().ok();
        }
        let written = async {
            io.write_all(&buf).await?;
            io.flush().await
        }
        .await;
        buf.clear();
        if let Err(e) = written {
            debug!(error = %e, "SPDY connection write failed");
            end_connection(&shared);
            return;
        }
        shared.idle.touch();
        barriers.drain(..).for_each(|done| {
            let _ = done.send(());
        });
    }
}

/// Ends the connection when the reader stops for any reason, including being aborted.
struct ReaderGuard(Arc<Shared>);

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        end_connection(&self.0);
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut io: R,
    incoming: mpsc::Sender<IncomingStream>,
    out: mpsc::Sender<Command>,
    shared: Arc<Shared>,
) {
    let _guard = ReaderGuard(shared.clone());
    let mut decoder = FrameDecoder::new();
    let mut session_unacked: u32 = 0;
    loop {
        let frame = match decoder.read(&mut io).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(e) => {
                debug!(error = %e, "SPDY connection read failed");
                if matches!(e, SpdyError::Protocol(_) | SpdyError::Compression(_)) {
                    let _ = out
                        .send(Command::Frame(Frame::GoAway {
                            last_good_stream_id: shared.last_received.load(Ordering::Acquire),
                            status: goaway::PROTOCOL_ERROR,
                        }))
                        .await;
                }
                return;
            }
        };
        shared.idle.touch();
        let reply = |frame| out.send(Command::Frame(frame));
        match frame {
            Frame::SynStream {
                stream_id,
                fin,
                headers,
                ..
            } => {
                let last = shared.last_received.load(Ordering::Acquire);
                let status = if stream_id % 2 == 0 || stream_id <= last {
                    Some(rst::PROTOCOL_ERROR)
                } else if shared.closing.load(Ordering::Acquire) {
                    Some(rst::REFUSED_STREAM)
                } else {
                    None
                };
                if let Some(status) = status {
                    let _ = reply(Frame::RstStream { stream_id, status }).await;
                    continue;
                }
                shared.last_received.store(stream_id, Ordering::Release);
                let (data_tx, data_rx) = mpsc::channel(INCOMING_QUEUE);
                let state = Arc::new(StreamState::default());
                state.remote_finished.store(fin, Ordering::Release);
                shared.streams().insert(
                    stream_id,
                    StreamEntry {
                        data: (!fin).then_some(data_tx),
                        state: state.clone(),
                        unacked: 0,
                    },
                );
                let stream = IncomingStream {
                    id: stream_id,
                    headers,
                    data: data_rx,
                    writer: StreamWriter {
                        id: stream_id,
                        out: out.clone(),
                        state,
                        shared: shared.clone(),
                    },
                };
                if let Err(refused) = incoming.send(stream).await {
                    refused.0.reject().await;
                }
            }
            Frame::Data {
                stream_id,
                fin,
                data,
            } => {
                let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
                let (sender, ack) = {
                    let mut streams = shared.streams();
                    match streams.get_mut(&stream_id) {
                        // spdystream drops data for streams it no longer knows.
                        None => (None, 0),
                        Some(entry) => {
                            entry.unacked = entry.unacked.saturating_add(len);
                            let ack = if entry.unacked >= WINDOW_ACK_THRESHOLD && !fin {
                                std::mem::take(&mut entry.unacked)
                            } else {
                                0
                            };
                            let sender = entry.data.clone();
                            if fin {
                                entry.data = None;
                                entry.state.remote_finished.store(true, Ordering::Release);
                            }
                            (sender, ack)
                        }
                    }
                };
                if let Some(sender) = sender
                    && !data.is_empty()
                {
                    // A consumer that went away just stops receiving.
                    let _ = sender.send(data).await;
                }
                if fin {
                    shared.forget_if_done(stream_id);
                }
                if ack > 0 {
                    let _ = reply(Frame::WindowUpdate {
                        stream_id,
                        delta: ack,
                    })
                    .await;
                }
                session_unacked = session_unacked.saturating_add(len);
                if session_unacked >= WINDOW_ACK_THRESHOLD {
                    let delta = std::mem::take(&mut session_unacked);
                    let _ = reply(Frame::WindowUpdate {
                        stream_id: 0,
                        delta,
                    })
                    .await;
                }
            }
            Frame::RstStream { stream_id, .. } => {
                if let Some(entry) = shared.streams().remove(&stream_id) {
                    entry.state.reset.store(true, Ordering::Release);
                }
            }
            Frame::Ping { id } => {
                // Client pings are odd; even ids would be answers to our own (we send none).
                if id % 2 == 1 {
                    let _ = reply(Frame::Ping { id }).await;
                }
            }
            // No flow control on our sends (see the module docs); GOAWAY from a client only
            // means it opens no more streams; SYN_REPLY/HEADERS have no use on a server.
            Frame::Settings { .. }
            | Frame::WindowUpdate { .. }
            | Frame::GoAway { .. }
            | Frame::SynReply { .. }
            | Frame::Headers { .. } => {}
        }
    }
}
