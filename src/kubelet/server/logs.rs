//! `/containerLogs/{ns}/{pod}/{container}`: the container's CRI log file, selected and
//! formatted by [`logselect`](super::logselect), streamed in chunks. tailLines seeks back from
//! the end (memory never grows with the file); follow keeps reading as the runtime writes,
//! moves to the new file when the log is rotated (renamed and reopened), and ends once the
//! container stopped and its output is read. A slow client slows only its reader task; a gone
//! client ends it.

use super::logopts::LogOptions;
use super::logselect::{Writer, find_byte};
use super::lookup::{self, LookupError, PodRef};
use super::response::{Body, channel, text};
use crate::cri::{RuntimeService, api};
use crate::kubelet::gc::logs::{GZ_SUFFIX, TMP_SUFFIX};
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncSeekExt, BufReader};
use tokio::sync::mpsc;

/// Output is sent in chunks of about this size; a few chunks are in flight at most.
const CHUNK: usize = 64 * 1024;
/// The log file is read this much at a time (each read is a blocking-pool round trip).
const READ: usize = 256 * 1024;
const IN_FLIGHT: usize = 8;
/// How often a followed log is polled for new output, and the container for its state.
const POLL: Duration = Duration::from_millis(200);
const STATE_EVERY: Duration = Duration::from_secs(1);
const BACK_BLOCK: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The offset where the last `lines` lines of `file` start (a final newline ends the last
/// line, it does not start another). Reads back from the end one block at a time.
pub fn tail_offset(file: &mut (impl Read + Seek), lines: u64) -> std::io::Result<u64> {
    let len = file.seek(SeekFrom::End(0))?;
    if lines == 0 {
        return Ok(len);
    }
    let mut end = len;
    let mut seen = 0;
    let mut skip_last = true;
    let mut block = vec![0u8; BACK_BLOCK as usize];
    while end > 0 {
        let start = end.saturating_sub(BACK_BLOCK);
        let size = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block[..size])?;
        for i in (0..size).rev() {
            if block[i] != b'\n' {
                continue;
            }
            let at = start + i as u64;
            if skip_last && at + 1 == len {
                skip_last = false;
                continue;
            }
            seen += 1;
            if seen == lines {
                return Ok(at + 1);
            }
        }
        skip_last = false;
        end = start;
    }
    Ok(0)
}

/// Serves the log request; the body streams from a task.
pub async fn serve(
    runtime: Arc<dyn RuntimeService>,
    pod: PodRef,
    container: &str,
    query: &str,
) -> Response<Body> {
    let opts = match LogOptions::parse(query) {
        Ok(opts) => opts,
        Err(err) => return text(StatusCode::BAD_REQUEST, &err.to_string()),
    };
    let found = match lookup::container(runtime.as_ref(), &pod, container, opts.previous).await {
        Ok(found) => found,
        Err(err @ LookupError::Runtime(_)) => {
            return text(StatusCode::INTERNAL_SERVER_ERROR, &err.to_string());
        }
        Err(err) => return text(StatusCode::NOT_FOUND, &err.to_string()),
    };
    let path = match lookup::status(runtime.as_ref(), &found.id).await {
        Ok(Some(status)) if !status.log_path.is_empty() => PathBuf::from(status.log_path),
        Ok(_) => {
            let message = format!("container {container:?} has no log file");
            return text(StatusCode::NOT_FOUND, &message);
        }
        Err(err) => return text(StatusCode::INTERNAL_SERVER_ERROR, &err.to_string()),
    };
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(err) => {
            let message = format!("cannot open the log of container {container:?}: {err}");
            return text(StatusCode::NOT_FOUND, &message);
        }
    };
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    let follow = opts.follow && !opts.previous;
    tokio::spawn(async move {
        let reader = LogReader {
            runtime,
            id: found.id,
            path,
            follow,
            tx,
        };
        if let Err(err) = reader.run(file, &opts).await {
            tracing::debug!(error = %err, "container log stream ended");
        }
    });
    let mut response = Response::new(channel(rx));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain"),
    );
    response
}

/// One selected line into `out`.
fn emit(writer: &mut Writer, line: &[u8], out: &mut Vec<u8>) {
    if writer.wanted(line) {
        writer.write(line, out);
    }
}

struct LogReader {
    runtime: Arc<dyn RuntimeService>,
    id: String,
    path: PathBuf,
    follow: bool,
    tx: mpsc::Sender<Bytes>,
}

enum Step {
    /// Keep reading the same file.
    Again,
    /// The log was rotated: read the new file from its start.
    Reopen,
    Stop,
}

impl LogReader {
    fn error(&self, source: std::io::Error) -> LogError {
        LogError::Read {
            path: self.path.clone(),
            source,
        }
    }

    /// Sends `out` (false: the client is gone).
    async fn send(&self, out: &mut Vec<u8>) -> bool {
        if out.is_empty() {
            return true;
        }
        self.tx.send(Bytes::from(std::mem::take(out))).await.is_ok()
    }

    async fn run(self, mut file: std::fs::File, opts: &LogOptions) -> Result<(), LogError> {
        if let Some(lines) = opts.tail_lines {
            let (back, offset) = tokio::task::spawn_blocking(move || {
                let offset = tail_offset(&mut file, lines);
                (file, offset)
            })
            .await
            .map_err(|e| self.error(std::io::Error::other(e)))?;
            file = back;
            let offset = offset.map_err(|e| self.error(e))?;
            file.seek(SeekFrom::Start(offset))
                .map_err(|e| self.error(e))?;
        }
        let mut writer = Writer::new(
            opts.since(chrono::Utc::now()),
            opts.timestamps,
            opts.limit_bytes,
        );
        let mut reader = BufReader::with_capacity(READ, tokio::fs::File::from_std(file));
        let mut line = Vec::new();
        let mut out = Vec::with_capacity(CHUNK);
        let mut last_state = Instant::now();
        let mut ending = false;
        let mut rotated = false;
        loop {
            let buf = reader.fill_buf().await.map_err(|e| self.error(e))?;
            let read = buf.len();
            if read > 0 {
                // Whole lines are formatted straight from the read buffer; only a line cut by
                // the buffer's end is copied (into `line`) to be finished by the next read.
                let mut start = 0;
                while !writer.done() {
                    let Some(at) = find_byte(&buf[start..], b'\n') else {
                        line.extend_from_slice(&buf[start..]);
                        break;
                    };
                    let end = start + at;
                    if line.is_empty() {
                        emit(&mut writer, &buf[start..end], &mut out);
                    } else {
                        line.extend_from_slice(&buf[start..end]);
                        emit(&mut writer, &line, &mut out);
                        line.clear();
                    }
                    start = end + 1;
                }
                reader.consume(read);
                if writer.done() {
                    self.send(&mut out).await;
                    return Ok(());
                }
                if out.len() >= CHUNK && !self.send(&mut out).await {
                    return Ok(());
                }
                continue;
            }
            // At the end of what is written (a partial line stays in `line`).
            if !self.send(&mut out).await {
                return Ok(());
            }
            if !self.follow || ending {
                if !line.is_empty() && !self.follow {
                    emit(&mut writer, &line, &mut out);
                    self.send(&mut out).await;
                }
                return Ok(());
            }
            if rotated {
                // The old file is read to its end: go on with the one written after it.
                rotated = false;
                let ours = reader
                    .get_ref()
                    .metadata()
                    .await
                    .map_err(|e| self.error(e))?;
                let next = match ours.created() {
                    Ok(created) => next_log_file(&self.path, created),
                    Err(_) => self.path.clone(),
                };
                match tokio::fs::File::open(&next).await {
                    Ok(file) => {
                        reader = BufReader::with_capacity(READ, file);
                        line.clear();
                        continue;
                    }
                    Err(err) => return Err(self.error(err)),
                }
            }
            match self.wait(&mut reader, &mut last_state).await? {
                Step::Again => {}
                Step::Reopen => rotated = true,
                Step::Stop => ending = true,
            }
        }
    }

    /// Waits for more output; notices rotation, truncation and the container's end.
    async fn wait(
        &self,
        reader: &mut BufReader<tokio::fs::File>,
        last_state: &mut Instant,
    ) -> Result<Step, LogError> {
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            () = self.tx.closed() => return Ok(Step::Stop),
        }
        let ours = reader
            .get_ref()
            .metadata()
            .await
            .map_err(|e| self.error(e))?;
        match tokio::fs::metadata(&self.path).await {
            Ok(live) if live.ino() != ours.ino() || live.dev() != ours.dev() => {
                return Ok(Step::Reopen);
            }
            _ => {}
        }
        let position = reader.stream_position().await.map_err(|e| self.error(e))?;
        if ours.len() < position {
            // Truncated in place: start over.
            reader
                .seek(SeekFrom::Start(0))
                .await
                .map_err(|e| self.error(e))?;
        }
        if last_state.elapsed() >= STATE_EVERY {
            *last_state = Instant::now();
            let running = lookup::status(self.runtime.as_ref(), &self.id)
                .await
                .ok()
                .flatten()
                .is_some_and(|s| s.state == api::ContainerState::ContainerRunning as i32);
            if !running {
                // One more read picks up what it wrote last.
                return Ok(Step::Stop);
            }
        }
        Ok(Step::Again)
    }
}

/// The file written after the one that was created at `current`: the oldest plain log file
/// (rotated or live) created after it, when the log rotated again before the old one was read
/// to its end (a flood rotates several times a second), else the live one. Creation time, not
/// names: the old file may have been renamed again or compressed meanwhile. Compressed files
/// are skipped.
fn next_log_file(live: &std::path::Path, current: std::time::SystemTime) -> PathBuf {
    let (Some(dir), Some(base)) = (live.parent(), live.file_name().and_then(|b| b.to_str())) else {
        return live.to_path_buf();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return live.to_path_buf();
    };
    let prefix = format!("{base}.");
    entries
        .flatten()
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| {
                n == base
                    || (n.starts_with(&prefix)
                        && !n.ends_with(GZ_SUFFIX)
                        && !n.ends_with(TMP_SUFFIX))
            })
        })
        .filter_map(|e| Some((e.metadata().ok()?.created().ok()?, e.path())))
        .filter(|(created, _)| *created > current)
        .min_by_key(|(created, _)| *created)
        .map_or_else(|| live.to_path_buf(), |(_, path)| path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubelet::clock::SystemClock;
    use crate::kubelet::fake::FakeRuntime;
    use crate::kubelet::labels;
    use http_body_util::BodyExt;
    use std::collections::HashMap;
    use std::io::Cursor;

    /// A running container `c` of pod `ns/p` in the fake runtime, logging to `log`.
    async fn container(rt: &Arc<FakeRuntime>, log: &std::path::Path) -> String {
        let pod_labels = HashMap::from([
            (labels::POD_NAMESPACE.to_string(), "ns".to_string()),
            (labels::POD_NAME.to_string(), "p".to_string()),
        ]);
        rt.start_sample_container(pod_labels, &log.to_string_lossy())
            .await
    }

    fn append(path: &std::path::Path, text: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    /// Reads the body until `want` was received (or the body ended); what was read.
    async fn read_until(body: &mut Body, got: &mut String, want: &str) -> bool {
        let deadline = Duration::from_secs(30);
        while !got.ends_with(want) {
            let frame = tokio::time::timeout(deadline, body.frame()).await;
            match frame.expect("hang guard: log output") {
                Some(frame) => {
                    if let Ok(data) = frame.unwrap().into_data() {
                        got.push_str(&String::from_utf8_lossy(&data));
                    }
                }
                None => return false,
            }
        }
        true
    }

    #[tokio::test]
    async fn follow_goes_on_across_rotation_and_ends_with_the_container() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        append(&log, "2026-12-05T16:00:00Z stdout F one\n");
        let rt = FakeRuntime::new(Arc::new(SystemClock));
        let id = container(&rt, &log).await;
        let pod = PodRef {
            namespace: "ns".into(),
            name: "p".into(),
            uid: None,
        };
        let response = serve(rt.clone(), pod, "c", "follow=true").await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let mut got = String::new();
        assert!(read_until(&mut body, &mut got, "one\n").await);
        append(
            &log,
            "2026-12-05T16:00:01Z stdout P tw\n2026-12-05T16:00:01Z stdout F o\n",
        );
        assert!(read_until(&mut body, &mut got, "two\n").await);
        // Rotation as the agent does it: renamed, then the runtime writes a new file.
        std::fs::rename(&log, dir.path().join("0.log.20261205-160002")).unwrap();
        append(&log, "2026-12-05T16:00:02Z stderr F three\n");
        assert!(read_until(&mut body, &mut got, "three\n").await);
        append(&log, "2026-12-05T16:00:03Z stdout F four\n");
        rt.exit_container(&id, 0);
        assert!(read_until(&mut body, &mut got, "four\n").await);
        assert!(!read_until(&mut body, &mut got, "never").await, "ends");
        assert_eq!(got, "one\ntwo\nthree\nfour\n");
    }

    #[tokio::test]
    async fn plain_reads_tail_and_limit_and_unknown_containers_404() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("0.log");
        // Over 256 KiB: lines cross the reader's buffer ends.
        let lines: String = (0..20_000)
            .map(|i| format!("2026-12-05T16:00:00Z stdout F line {i}\n"))
            .collect();
        append(&log, &lines);
        let rt = FakeRuntime::new(Arc::new(SystemClock));
        container(&rt, &log).await;
        let pod = PodRef {
            namespace: "ns".into(),
            name: "p".into(),
            uid: None,
        };
        let table = [
            ("tailLines=2", "line 19998\nline 19999\n"),
            (
                "tailLines=2&timestamps=true",
                "2026-12-05T16:00:00Z line 19998\n2026-12-05T16:00:00Z line 19999\n",
            ),
            ("tailLines=3&limitBytes=13", "line 19997\nli"),
            ("limitBytes=7", "line 0\n"),
            ("sinceTime=2026-12-05T16:00:01Z", ""),
        ];
        for (query, want) in table {
            let response = serve(rt.clone(), pod.clone(), "c", query).await;
            assert_eq!(response.status(), StatusCode::OK, "{query}");
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(String::from_utf8_lossy(&body), want, "{query}");
        }
        let whole = serve(rt.clone(), pod.clone(), "c", "").await;
        let body = whole.into_body().collect().await.unwrap().to_bytes();
        let want: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        assert!(body == want.as_bytes(), "the whole log, line by line");
        let missing = serve(rt.clone(), pod.clone(), "nope", "").await;
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        let previous = serve(rt.clone(), pod.clone(), "c", "previous=true").await;
        assert_eq!(previous.status(), StatusCode::NOT_FOUND);
        let bad = serve(rt.clone(), pod, "c", "tailLines=-1").await;
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn tail_offset_finds_the_last_lines() {
        let text = b"one\ntwo\nthree\n";
        let table = [(0, 14), (1, 8), (2, 4), (3, 0), (10, 0)];
        for (lines, want) in table {
            assert_eq!(
                tail_offset(&mut Cursor::new(text), lines).unwrap(),
                want,
                "{lines}"
            );
        }
        // Without a final newline the last line still counts once.
        assert_eq!(tail_offset(&mut Cursor::new(b"a\nb"), 1).unwrap(), 2);
        assert_eq!(tail_offset(&mut Cursor::new(b""), 3).unwrap(), 0);
    }

    #[test]
    fn tail_offset_crosses_blocks() {
        let mut text = Vec::new();
        for i in 0..20_000 {
            text.extend(format!("line {i}\n").as_bytes());
        }
        let offset = tail_offset(&mut Cursor::new(&text), 15_000).unwrap() as usize;
        assert!(text[offset..].starts_with(b"line 5000\n"));
        assert_eq!(
            text[offset..].iter().filter(|b| **b == b'\n').count(),
            15_000
        );
    }

    #[test]
    fn a_follower_goes_on_with_the_file_written_after_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("0.log");
        let path = |name: &str| dir.path().join(name);
        let created = |name: &str| std::fs::metadata(path(name)).unwrap().created().unwrap();
        // Written in this order, each renamed by a rotation.
        for name in [
            "0.log.20261207-080001",
            "0.log.20261207-080001.250",
            "0.log.20261207-080001.500",
            "0.log",
        ] {
            std::fs::write(path(name), name).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        let first = created("0.log.20261207-080001");
        // The first was compressed meanwhile: the follower still finds the one after it.
        std::fs::rename(
            path("0.log.20261207-080001"),
            path("0.log.20261207-080001.gz"),
        )
        .unwrap();
        assert_eq!(
            next_log_file(&live, first),
            path("0.log.20261207-080001.250")
        );
        let second = created("0.log.20261207-080001.250");
        assert_eq!(
            next_log_file(&live, second),
            path("0.log.20261207-080001.500")
        );
        let third = created("0.log.20261207-080001.500");
        assert_eq!(next_log_file(&live, third), live);
        assert_eq!(next_log_file(&live, created("0.log")), live);
    }
}
