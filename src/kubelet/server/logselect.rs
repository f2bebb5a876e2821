//! Which CRI log lines `/containerLogs` shows and how (kubelet's `ReadLogs`): lines before
//! sinceTime/sinceSeconds are skipped, the last tailLines kept, the timestamp optionally kept,
//! output cut at limitBytes. Streaming: memory is bounded by tailLines, never by the file.

use crate::kubelet::crilog::parse_line;
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
    pub fn wanted(&self, line: &str) -> bool {
        let (Some(since), Some(parsed)) = (self.since, parse_line(line)) else {
            return true;
        };
        DateTime::parse_from_rfc3339(parsed.time).map_or(true, |t| t.with_timezone(&Utc) >= since)
    }

    /// True once limitBytes has been written: the stream ends.
    pub fn done(&self) -> bool {
        self.remaining == Some(0)
    }

    /// The bytes to send for one raw CRI line (without its newline).
    pub fn format(&mut self, line: &str) -> Vec<u8> {
        let mut out = match parse_line(line) {
            Some(p) => {
                let mut s = String::new();
                if self.timestamps {
                    s.push_str(p.time);
                    s.push(' ');
                }
                s.push_str(p.content);
                if p.full {
                    s.push('\n');
                }
                s.into_bytes()
            }
            None => format!("{line}\n").into_bytes(),
        };
        if let Some(remaining) = &mut self.remaining {
            let keep = usize::try_from(*remaining)
                .unwrap_or(usize::MAX)
                .min(out.len());
            out.truncate(keep);
            *remaining -= keep as u64;
        }
        out
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
        if writer.wanted(line) {
            kept.push(line);
        }
    }
    let mut out = Vec::new();
    for line in kept.into_lines() {
        if writer.done() {
            break;
        }
        out.extend(writer.format(&line));
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
}
