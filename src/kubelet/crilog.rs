//! CRI container log format: `<RFC3339Nano> <stdout|stderr> <F|P> <content>` per line, `P` for a
//! partial chunk continued on the next line. Used by `runp logs`, the termination-message
//! fallback and log rotation.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// One parsed log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    pub time: &'a str,
    pub stream: &'a str,
    /// `false` for a partial chunk (`P`).
    pub full: bool,
    pub content: &'a str,
}

/// Parses one line (without its newline); `None` when it is not in CRI format.
pub fn parse_line(line: &str) -> Option<LogLine<'_>> {
    let mut parts = line.splitn(4, ' ');
    let time = parts.next()?;
    let stream = parts.next()?;
    let tag = parts.next()?;
    let content = parts.next().unwrap_or("");
    if !matches!(stream, "stdout" | "stderr") {
        return None;
    }
    let full = match tag.split(':').next() {
        Some("F") => true,
        Some("P") => false,
        _ => return None,
    };
    Some(LogLine {
        time,
        stream,
        full,
        content,
    })
}

/// Joins CRI lines back into the container's output: partial chunks are concatenated, full lines
/// end with a newline. Lines not in CRI format are kept as they are.
pub fn to_plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        match parse_line(line) {
            Some(parsed) => {
                out.push_str(parsed.content);
                if parsed.full {
                    out.push('\n');
                }
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The container output at the end of a CRI log file: at most `max_lines` lines and `max_bytes`
/// bytes (the kubelet's termination-message fallback reads 80 lines / 2048 bytes).
pub fn tail(path: &Path, max_lines: usize, max_bytes: usize) -> io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    // CRI lines carry a ~40 byte prefix; read enough raw bytes for the wanted output.
    let window = (max_bytes as u64 + 64 * max_lines as u64).min(len);
    file.seek(SeekFrom::Start(len - window))?;
    let mut raw = Vec::with_capacity(window as usize);
    file.take(window).read_to_end(&mut raw)?;
    let mut text = String::from_utf8_lossy(&raw).into_owned();
    if window < len {
        // Drop the first, probably cut, line.
        text = text
            .split_once('\n')
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default();
    }
    let plain = to_plain(&text);
    let lines: Vec<&str> = plain.lines().collect();
    let start = lines.len().saturating_sub(max_lines);
    let mut out = lines[start..].join("\n");
    if out.len() > max_bytes {
        let mut cut = out.len() - max_bytes;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = out[cut..].to_string();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejoins() {
        let cases = [
            (
                "2024-01-01T00:00:00.000000001Z stdout F hello",
                Some(("stdout", true, "hello")),
            ),
            (
                "2024-01-01T00:00:00Z stderr P part",
                Some(("stderr", false, "part")),
            ),
            ("2024-01-01T00:00:00Z stdout F", Some(("stdout", true, ""))),
            (
                "2024-01-01T00:00:00Z stdout F with  two spaces",
                Some(("stdout", true, "with  two spaces")),
            ),
            ("plain text line", None),
            ("2024-01-01T00:00:00Z other F x", None),
        ];
        for (line, want) in cases {
            let got = parse_line(line).map(|l| (l.stream, l.full, l.content));
            assert_eq!(got, want, "{line}");
        }
        let text = "t stdout P ab\nt stdout F cd\nt stderr F e\n";
        assert_eq!(to_plain(text), "abcd\ne\n");
    }

    #[test]
    fn tail_keeps_the_last_lines_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut text = String::new();
        for i in 0..200 {
            text.push_str(&format!("2024-01-01T00:00:00Z stdout F line {i}\n"));
        }
        std::fs::write(&path, text).unwrap();
        let out = tail(&path, 3, 2048).unwrap();
        assert_eq!(out, "line 197\nline 198\nline 199");
        let out = tail(&path, 80, 10).unwrap();
        assert_eq!(out, "8\nline 199");
    }
}
