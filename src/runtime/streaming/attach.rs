//! Streamed Attach: a client of the container shim's attach socket (protocol in
//! `jail::attach`). The shim owns the container's stdio, so this works for containers started
//! before an agent restart too. As containerd: the attach ends when the container exits, when
//! the client is gone, or when the client's stdin ends, except with stdin_once (no tty), where
//! the shim closes the container's stdin and the output is followed to the end.

use super::io::Writer;
use crate::cri::StreamIo;
use crate::jail::attach::{AttachFrame, AttachHello, AttachReady, connect_attach};
use crate::runtime::ProcessRuntime;
use crate::runtime::error::{Result, RuntimeError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedReadHalf;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// Hang guard for the shim's answer to the hello.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads frames off the shim's connection.
struct FrameReader {
    conn: OwnedReadHalf,
    buf: Vec<u8>,
}

impl FrameReader {
    /// `Ok(None)` when the shim hung up.
    async fn next(&mut self) -> Result<Option<AttachFrame>> {
        loop {
            match AttachFrame::decode(&self.buf) {
                Ok(Some((frame, used))) => {
                    self.buf.drain(..used);
                    return Ok(Some(frame));
                }
                Ok(None) => {}
                Err(e) => return Err(RuntimeError::Internal(format!("attach: {e}"))),
            }
            let mut chunk = [0u8; 32 * 1024];
            match self.conn.read(&mut chunk).await {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(RuntimeError::Internal(format!("attach socket: {e}"))),
            }
        }
    }
}

/// How a session ended.
enum End {
    /// The shim hung up: the container exited (or the shim is gone).
    Shim,
    /// The client's output is gone.
    Client,
    /// The client's stdin ended.
    Stdin,
}

impl ProcessRuntime {
    /// The container's own `tty` decides how its output comes (as containerd), not the
    /// request's.
    pub(crate) async fn attach_stream_impl(
        &self,
        container_id: &str,
        _tty: bool,
        io: StreamIo,
    ) -> Result<()> {
        let record = self.running_container(container_id)?;
        let config = record.config()?;
        let dir = self.shared.layout.container_run_dir(&record.id);
        let conn = tokio::task::spawn_blocking(move || connect_attach(&dir))
            .await
            .map_err(|e| RuntimeError::Internal(format!("attach connect task: {e}")))??;
        let conn = conn
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UnixStream::from_std(conn))
            .map_err(|e| RuntimeError::Internal(format!("attach socket: {e}")))?;
        let (read_half, mut write_half) = conn.into_split();
        let hello = AttachHello {
            stdin: io.stdin.is_some(),
            stdout: io.stdout.is_some(),
            stderr: io.stderr.is_some(),
        };
        write_half
            .write_all(&AttachFrame::Hello(hello).to_bytes())
            .await
            .map_err(|e| RuntimeError::Internal(format!("attach socket: {e}")))?;
        let mut reader = FrameReader {
            conn: read_half,
            buf: Vec::new(),
        };
        let ready = match tokio::time::timeout(READY_TIMEOUT, reader.next()).await {
            Ok(Ok(Some(AttachFrame::Ready(ready)))) => ready,
            Ok(Ok(Some(other))) => {
                return Err(RuntimeError::Internal(format!(
                    "attach: unexpected first frame {other:?}"
                )));
            }
            // The container exited between the state check and the connect.
            Ok(Ok(None)) => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(RuntimeError::Internal(
                    "attach: the container's shim did not answer".into(),
                ));
            }
        };
        let follow_after_stdin = config.stdin_once && !config.tty;
        self.attach_session(reader, write_half, ready, io, follow_after_stdin)
            .await;
        Ok(())
    }

    async fn attach_session(
        &self,
        mut reader: FrameReader,
        mut write_half: tokio::net::unix::OwnedWriteHalf,
        ready: AttachReady,
        io: StreamIo,
        follow_after_stdin: bool,
    ) {
        let StreamIo {
            stdin,
            mut stdout,
            mut stderr,
            resize,
        } = io;
        let (frames_tx, mut frames_rx) = mpsc::channel::<AttachFrame>(16);
        let (end_tx, mut end_rx) = mpsc::channel::<End>(4);
        let mut tasks = JoinSet::new();
        // One writer to the shim: stdin and resize frames, until every sender is gone. It hands
        // the connection's write half back instead of dropping it: a half-close would tell the
        // shim this client is gone while it still follows the output.
        let writer = tokio::spawn(async move {
            while let Some(frame) = frames_rx.recv().await {
                if write_half.write_all(&frame.to_bytes()).await.is_err() {
                    break;
                }
            }
            write_half
        });
        if let (true, Some(mut stdin)) = (ready.stdin, stdin) {
            let frames = frames_tx.clone();
            let end = end_tx.clone();
            tasks.spawn(async move {
                let mut buf = vec![0u8; 32 * 1024];
                loop {
                    match stdin.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if frames
                                .send(AttachFrame::Stdin(buf[..n].to_vec()))
                                .await
                                .is_err()
                            {
                                return;
                            }
                        }
                    }
                }
                let _ = frames.send(AttachFrame::StdinEof).await;
                if !follow_after_stdin {
                    let _ = end.send(End::Stdin).await;
                }
            });
        }
        if let (true, Some(mut resize)) = (ready.tty, resize) {
            let frames = frames_tx.clone();
            tasks.spawn(async move {
                while let Some(size) = resize.recv().await {
                    let frame = AttachFrame::Resize {
                        width: size.width,
                        height: size.height,
                    };
                    if frames.send(frame).await.is_err() {
                        return;
                    }
                }
            });
        }
        drop(frames_tx);
        let output = async {
            loop {
                let (to, data): (&mut Option<Writer>, Vec<u8>) = match reader.next().await {
                    Ok(Some(AttachFrame::Stdout(data))) => (&mut stdout, data),
                    Ok(Some(AttachFrame::Stderr(data))) => (&mut stderr, data),
                    Ok(Some(_)) => continue,
                    Ok(None) => return End::Shim,
                    Err(e) => {
                        tracing::debug!(error = %e, "attach");
                        return End::Shim;
                    }
                };
                if let Some(writer) = to
                    && writer.write_all(&data).await.is_err()
                {
                    return End::Client;
                }
            }
        };
        let end = tokio::select! {
            end = output => end,
            Some(end) = end_rx.recv() => end,
        };
        match end {
            End::Shim => tracing::debug!("attach ended: the container exited"),
            End::Client => tracing::debug!("attach ended: the client is gone"),
            End::Stdin => tracing::debug!("attach ended: the client's stdin ended"),
        }
        // With the senders gone, the writer ends once what they queued (a StdinEof, which
        // closes stdin_once's stdin) reached the shim.
        tasks.shutdown().await;
        if tokio::time::timeout(Duration::from_secs(5), writer)
            .await
            .is_err()
        {
            tracing::debug!("attach: the shim did not take the last input");
        }
        for writer in [stdout, stderr].into_iter().flatten() {
            let mut writer = writer;
            let _ = writer.shutdown().await;
        }
    }
}
