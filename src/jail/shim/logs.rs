//! The CRI container log writer: `<RFC3339Nano> stdout|stderr F|P <content>\n` lines, written by
//! the shim (never by the container) to the container's log file.
//!
//! A line longer than [`CRI_MAX_LINE`] is split into `P` (partial) records of that size followed
//! by an `F` record with the rest. A final unterminated line at EOF is written as `F`.

use chrono::{DateTime, SecondsFormat, Utc};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use tracing::warn;

/// Longest content of one log record (containerd and CRI-O use 16 KiB).
pub const CRI_MAX_LINE: usize = 16 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One CRI log record, newline-terminated.
pub fn format_cri_line(
    at: DateTime<Utc>,
    stream: Stream,
    partial: bool,
    content: &[u8],
) -> Vec<u8> {
    let stamp = at.to_rfc3339_opts(SecondsFormat::Nanos, true);
    let tag = if partial { "P" } else { "F" };
    let mut line = Vec::with_capacity(stamp.len() + content.len() + 12);
    line.extend_from_slice(stamp.as_bytes());
    line.push(b' ');
    line.extend_from_slice(stream.as_str().as_bytes());
    line.push(b' ');
    line.extend_from_slice(tag.as_bytes());
    line.push(b' ');
    line.extend_from_slice(content);
    line.push(b'\n');
    line
}

/// Cuts one stream's bytes into CRI records: `(content, partial)`.
#[derive(Default)]
pub(crate) struct LineSplitter {
    pending: Vec<u8>,
}

impl LineSplitter {
    pub fn push(&mut self, data: &[u8], emit: &mut dyn FnMut(&[u8], bool)) {
        self.pending.extend_from_slice(data);
        let mut start = 0;
        loop {
            let rest = &self.pending[start..];
            let window = &rest[..rest.len().min(CRI_MAX_LINE + 1)];
            if let Some(newline) = window.iter().position(|&b| b == b'\n') {
                emit(&rest[..newline], false);
                start += newline + 1;
            } else if rest.len() >= CRI_MAX_LINE {
                emit(&rest[..CRI_MAX_LINE], true);
                start += CRI_MAX_LINE;
            } else {
                break;
            }
        }
        self.pending.drain(..start);
    }

    /// End of stream: an unterminated last line becomes a full record.
    pub fn finish(&mut self, emit: &mut dyn FnMut(&[u8], bool)) {
        if !self.pending.is_empty() {
            emit(&self.pending, false);
            self.pending.clear();
        }
    }
}

/// The log file of one container (or nothing, when the spec has no log path).
pub(crate) struct CriLog {
    path: Option<PathBuf>,
    file: Option<File>,
    /// Bytes in the current file (its size at open plus what we appended).
    size: u64,
    /// [`CriLog::is_full`] at this size; `None`: the file may grow without bound.
    max_size: Option<u64>,
    stdout: LineSplitter,
    stderr: LineSplitter,
    write_error_reported: bool,
}

impl CriLog {
    pub fn open(path: Option<&Path>, max_size: Option<u64>) -> std::io::Result<CriLog> {
        let (file, size) = match path {
            Some(path) => {
                let (file, size) = open_log(path)?;
                (Some(file), size)
            }
            None => (None, 0),
        };
        Ok(CriLog {
            path: path.map(Path::to_path_buf),
            file,
            size,
            max_size,
            stdout: LineSplitter::default(),
            stderr: LineSplitter::default(),
            write_error_reported: false,
        })
    }

    /// The live file reached its maximum size: the shim stops reading the container's output
    /// (whose writes then block) until the log is rotated and reopened.
    pub fn is_full(&self) -> bool {
        self.file.is_some() && self.max_size.is_some_and(|max| self.size >= max)
    }

    pub fn push(&mut self, stream: Stream, data: &[u8], now: DateTime<Utc>) {
        let mut batch = Vec::new();
        self.splitter(stream).push(data, &mut |content, partial| {
            batch.extend(format_cri_line(now, stream, partial, content))
        });
        self.write(&batch);
    }

    pub fn finish(&mut self, stream: Stream, now: DateTime<Utc>) {
        let mut batch = Vec::new();
        self.splitter(stream).finish(&mut |content, partial| {
            batch.extend(format_cri_line(now, stream, partial, content))
        });
        self.write(&batch);
    }

    /// ReopenContainerLog: the runtime renamed the file and wants a fresh one at the same path.
    /// On failure the old file stays in use (losing output would be worse).
    pub fn reopen(&mut self) {
        let Some(path) = &self.path else { return };
        match open_log(path) {
            Ok((file, size)) => {
                self.file = Some(file);
                self.size = size;
                self.write_error_reported = false;
            }
            Err(err) => warn!(path = %path.display(), %err, "cannot reopen the container log"),
        }
    }

    fn splitter(&mut self, stream: Stream) -> &mut LineSplitter {
        match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        }
    }

    fn write(&mut self, batch: &[u8]) {
        let Some(file) = &mut self.file else { return };
        if batch.is_empty() {
            return;
        }
        // Keep draining the container's pipes even when the disk is full: a blocked container
        // is worse than lost log lines, so a failed write does not count towards `is_full`.
        // Say so once per file.
        match file.write_all(batch) {
            Ok(()) => self.size += batch.len() as u64,
            Err(err) if !self.write_error_reported => {
                self.write_error_reported = true;
                warn!(%err, "cannot write the container log; dropping output");
            }
            Err(_) => {}
        }
    }
}

/// The log opened for appending, and its size.
fn open_log(path: &Path) -> std::io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Records = Vec<(Vec<u8>, bool)>;

    fn split(chunks: &[&[u8]]) -> Records {
        let mut out = Vec::new();
        let mut splitter = LineSplitter::default();
        for chunk in chunks {
            splitter.push(chunk, &mut |c, p| out.push((c.to_vec(), p)));
        }
        splitter.finish(&mut |c, p| out.push((c.to_vec(), p)));
        out
    }

    #[test]
    fn splitting_table() {
        let max = vec![b'a'; CRI_MAX_LINE];
        let max_plus_one = vec![b'b'; CRI_MAX_LINE + 1];
        let mut max_nl = max.clone();
        max_nl.push(b'\n');
        let mut long_nl = max_plus_one.clone();
        long_nl.push(b'\n');
        let cases: Vec<(&str, Vec<&[u8]>, Records)> = vec![
            ("empty", vec![], vec![]),
            ("one line", vec![b"hi\n"], vec![(b"hi".to_vec(), false)]),
            ("empty line", vec![b"\n"], vec![(vec![], false)]),
            (
                "line across chunks",
                vec![b"he", b"llo\nwor", b"ld\n"],
                vec![(b"hello".to_vec(), false), (b"world".to_vec(), false)],
            ),
            (
                "unterminated tail is F at EOF",
                vec![b"a\nb"],
                vec![(b"a".to_vec(), false), (b"b".to_vec(), false)],
            ),
            (
                "exactly max with newline",
                vec![&max_nl],
                vec![(max.clone(), false)],
            ),
            (
                "exactly max without newline is one P",
                vec![&max],
                vec![(max.clone(), true)],
            ),
            (
                "max+1 splits into P then F",
                vec![&long_nl],
                vec![(vec![b'b'; CRI_MAX_LINE], true), (b"b".to_vec(), false)],
            ),
        ];
        for (name, chunks, want) in cases {
            assert_eq!(split(&chunks), want, "{name}");
        }
    }

    #[test]
    fn record_format() {
        let at = DateTime::parse_from_rfc3339("2024-05-06T07:08:09.000000012Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            format_cri_line(at, Stream::Stderr, true, b"x y"),
            b"2024-05-06T07:08:09.000000012Z stderr P x y\n".to_vec()
        );
        assert_eq!(
            format_cri_line(at, Stream::Stdout, false, b""),
            b"2024-05-06T07:08:09.000000012Z stdout F \n".to_vec()
        );
    }

    #[test]
    fn reopen_after_rename_writes_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut log = CriLog::open(Some(&path), None).unwrap();
        let now = Utc::now();
        log.push(Stream::Stdout, b"one\n", now);
        std::fs::rename(&path, dir.path().join("0.log.1")).unwrap();
        log.push(Stream::Stdout, b"two\n", now);
        log.reopen();
        log.push(Stream::Stdout, b"three\n", now);
        let old = std::fs::read_to_string(dir.path().join("0.log.1")).unwrap();
        let new = std::fs::read_to_string(&path).unwrap();
        let old: Vec<&str> = old.lines().map(|l| l.split_once(' ').unwrap().1).collect();
        assert_eq!(old, ["stdout F one", "stdout F two"]);
        assert!(new.ends_with(" stdout F three\n"), "{new}");
        assert_eq!(new.lines().count(), 1);
    }

    #[test]
    fn full_at_the_maximum_size_until_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, b"x".repeat(10)).unwrap();
        let line = format_cri_line(Utc::now(), Stream::Stdout, false, b"abc");
        // The existing 10 bytes count: one more line reaches the maximum.
        let max = 10 + line.len() as u64;
        let mut log = CriLog::open(Some(&path), Some(max)).unwrap();
        assert!(!log.is_full());
        log.push(Stream::Stdout, b"abc\n", Utc::now());
        assert!(log.is_full());
        std::fs::rename(&path, dir.path().join("0.log.1")).unwrap();
        log.reopen();
        assert!(!log.is_full(), "a fresh file after the rotation");
        assert!(
            !CriLog::open(None, Some(0)).unwrap().is_full(),
            "no log, nothing to fill"
        );
        assert!(!CriLog::open(Some(&path), None).unwrap().is_full());
    }
}
