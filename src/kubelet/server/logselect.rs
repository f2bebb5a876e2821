//! Which CRI log lines `/containerLogs` shows and how (kubelet's `ReadLogs`): lines before
//! sinceTime/sinceSeconds are skipped, the last tailLines kept, the timestamp optionally kept,
//! output cut at limitBytes. Streaming: memory is bounded by tailLines, never by the file.

use chrono::{DateTime, Utc};
use std::collections::VecDeque;

/// Keeps the last `n` lines seen (all of them when `n` is None).
#[derive(Debug)]
pub struct Tail {
    max: Option<usize>,
    lines: VecDeque<String>,
}

impl Tail {
    pub fn new(max: Option<u64>) -> Tail {
        Tail {
            max: max.map(|m| usize::try_from(m).unwrap_or(usize::MAX)),
            lines: VecDeque::new(),
        }
    }

    pub fn push(&mut self, line: &str) {
        if self.max == Some(0) {
            return;
        }
        if Some(self.lines.len()) == self.max {
            self.lines.pop_front();
        }
        self.lines.push_back(line.to_string());
    }

    pub fn into_lines(self) -> impl Iterator<Item = String> {
        self.lines.into_iter()
    }
}

/// The index of the first `byte` in `bytes`, by std's `skip_until`: its memchr comes
/// optimized with std, so debug builds search as fast as release ones (a 100 MB log spent a
/// third of its time in an unoptimized `position` here).
pub fn find_byte(bytes: &[u8], byte: u8) -> Option<usize> {
    let mut rest = bytes;
    let skipped = std::io::BufRead::skip_until(&mut rest, byte).ok()?;
    (skipped > 0 && bytes[skipped - 1] == byte).then(|| skipped - 1)
}

/// One CRI line's parts, as bytes (content is passed through as the container wrote it).
struct Parts<'a> {
    time: &'a [u8],
    full: bool,
    content: &'a [u8],
}

/// [`parse_line`](crate::kubelet::crilog::parse_line) on bytes: no UTF-8 pass over the
/// content, which is most of a log.
fn parts(line: &[u8]) -> Option<Parts<'_>> {
    let field = |rest: &'_ [u8]| find_byte(rest, b' ');
    let t = field(line)?;
    let (time, rest) = (&line[..t], &line[t + 1..]);
    let s = field(rest)?;
    if !matches!(&rest[..s], b"stdout" | b"stderr") {
        return None;
    }
    let rest = &rest[s + 1..];
    let (tag, content) = match field(rest) {
        Some(g) => (&rest[..g], &rest[g + 1..]),
        None => (rest, &b""[..]),
    };
    let full = match tag.split(|b| *b == b':').next() {
        Some(b"F") => true,
        Some(b"P") => false,
        _ => return None,
    };
    Some(Parts {
        time,
        full,
        content,
    })
}

/// Formats selected lines, counting bytes against limitBytes.
#[derive(Debug)]
pub struct Writer {
    since: Option<DateTime<Utc>>,
    timestamps: bool,
    remaining: Option<u64>,
}

impl Writer {
    pub fn new(since: Option<DateTime<Utc>>, timestamps: bool, limit_bytes: Option<u64>) -> Writer {
        Writer {
            since,
            timestamps,
            remaining: limit_bytes,
        }
    }

    /// True when the line is recent enough to be shown (lines not in CRI format are shown).
    pub fn wanted(&self, line: &[u8]) -> bool {
        let (Some(since), Some(parsed)) = (self.since, parts(line)) else {
            return true;
        };
        std::str::from_utf8(parsed.time)
            .ok()
            .and_then(|time| DateTime::parse_from_rfc3339(time).ok())
            .is_none_or(|t| t.with_timezone(&Utc) >= since)
    }

    /// True once limitBytes has been written: the stream ends.
    pub fn done(&self) -> bool {
        self.remaining == Some(0)
    }

    /// Appends what one raw CRI line (without its newline) shows to `out`.
    pub fn write(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        match parts(line) {
            Some(p) => {
                if self.timestamps {
                    out.extend_from_slice(p.time);
                    out.push(b' ');
                }
                out.extend_from_slice(p.content);
                if p.full {
                    out.push(b'\n');
                }
            }
            None => {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
        if let Some(remaining) = &mut self.remaining {
            let wrote = out.len() - start;
            let keep = usize::try_from(*remaining).unwrap_or(usize::MAX).min(wrote);
            out.truncate(start + keep);
            *remaining -= keep as u64;
        }
    }
}

/// The whole selection over lines already read (tests, and the non-follow read of one file).
pub fn select<'a>(
    lines: impl IntoIterator<Item = &'a str>,
    tail: Option<u64>,
    writer: &mut Writer,
) -> Vec<u8> {
    let mut kept = Tail::new(tail);
    for line in lines {
        if writer.wanted(line.as_bytes()) {
            kept.push(line);
        }
    }
    let mut out = Vec::new();
    for line in kept.into_lines() {
        if writer.done() {
            break;
        }
        writer.write(line.as_bytes(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &[&str] = &[
        "2026-12-05T16:00:00.000000001Z stdout F one",
        "2026-12-05T16:00:01.5Z stderr P tw",
        "2026-12-05T16:00:01.6Z stderr F o",
        "2026-12-05T16:00:02Z stdout F three",
    ];

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn run(tail: Option<u64>, since: Option<&str>, ts: bool, limit: Option<u64>) -> String {
        let mut w = Writer::new(since.map(t), ts, limit);
        String::from_utf8(select(LOG.iter().copied(), tail, &mut w)).unwrap()
    }

    #[test]
    fn plain_joins_partial_lines() {
        assert_eq!(run(None, None, false, None), "one\ntwo\nthree\n");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(run(Some(1), None, false, None), "three\n");
        assert_eq!(run(Some(2), None, false, None), "o\nthree\n");
        assert_eq!(run(Some(0), None, false, None), "");
        assert_eq!(run(Some(10), None, false, None), "one\ntwo\nthree\n");
    }

    #[test]
    fn since_skips_older_lines() {
        assert_eq!(
            run(None, Some("2026-12-05T16:00:01Z"), false, None),
            "two\nthree\n"
        );
        assert_eq!(run(None, Some("2026-12-05T16:00:03Z"), false, None), "");
        assert_eq!(
            run(Some(1), Some("2026-12-05T16:00:00Z"), false, None),
            "three\n"
        );
    }

    #[test]
    fn timestamps_and_limit_bytes() {
        assert_eq!(
            run(Some(1), None, true, None),
            "2026-12-05T16:00:02Z three\n"
        );
        assert_eq!(run(None, None, false, Some(6)), "one\ntw");
    }

    #[test]
    fn find_byte_finds_the_first() {
        assert_eq!(find_byte(b"ab cd e", b' '), Some(2));
        assert_eq!(find_byte(b" a", b' '), Some(0));
        assert_eq!(find_byte(b"abc", b' '), None);
        assert_eq!(find_byte(b"", b' '), None);
    }

    #[test]
    fn bytes_pass_through_and_other_lines_are_kept_whole() {
        let mut w = Writer::new(None, false, None);
        let mut out = Vec::new();
        w.write(b"2026-12-05T16:00:00Z stdout F caf\xe9 \xff", &mut out);
        w.write(b"not a cri line", &mut out);
        w.write(b"2026-12-05T16:00:00Z stdout X tag", &mut out);
        w.write(b"2026-12-05T16:00:00Z stderr F", &mut out);
        w.write(b"2026-12-05T16:00:00Z stdout F:x tagged", &mut out);
        let want = b"caf\xe9 \xff\nnot a cri line\n2026-12-05T16:00:00Z stdout X tag\n\ntagged\n";
        assert_eq!(out, want);
        let since = Writer::new(Some(t("2026-12-05T16:00:01Z")), false, None);
        assert!(!since.wanted(b"2026-12-05T16:00:00Z stdout F old"));
        assert!(since.wanted(b"2026-12-05T16:00:01Z stdout F new"));
        assert!(
            since.wanted(b"garbage"),
            "lines not in CRI format are shown"
        );
    }
}
