//! The query of `/containerLogs/{ns}/{pod}/{container}` (PodLogOptions as the API server
//! forwards them), validated as the API server does.

use chrono::{DateTime, Utc};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<u64>,
    pub since_seconds: Option<u64>,
    pub since_time: Option<DateTime<Utc>>,
    pub limit_bytes: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogOptionsError {
    #[error("{name}={value:?}: {reason}")]
    Invalid {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("at most one of sinceTime or sinceSeconds may be specified")]
    BothSince,
}

fn invalid(name: &'static str, value: &str, reason: &'static str) -> LogOptionsError {
    LogOptionsError::Invalid {
        name,
        value: value.to_string(),
        reason,
    }
}

/// `%XX` and `+` decoding of one query component.
pub(crate) fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Go's `strconv.ParseBool`.
fn parse_bool(name: &'static str, v: &str) -> Result<bool, LogOptionsError> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(invalid(name, v, "must be a boolean")),
    }
}

fn parse_int(name: &'static str, v: &str, min: u64) -> Result<u64, LogOptionsError> {
    let n: i64 = v
        .parse()
        .map_err(|_| invalid(name, v, "must be an integer"))?;
    match u64::try_from(n) {
        Ok(n) if n >= min => Ok(n),
        _ if min == 0 => Err(invalid(name, v, "must be greater than or equal to 0")),
        _ => Err(invalid(name, v, "must be greater than 0")),
    }
}

impl LogOptions {
    /// Parses a raw query string (without `?`). Unknown parameters are ignored.
    pub fn parse(query: &str) -> Result<LogOptions, LogOptionsError> {
        let mut opts = LogOptions::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
            let (k, v) = (decode(k), decode(v));
            match k.as_str() {
                "follow" => opts.follow = parse_bool("follow", &v)?,
                "previous" => opts.previous = parse_bool("previous", &v)?,
                "timestamps" => opts.timestamps = parse_bool("timestamps", &v)?,
                "tailLines" => opts.tail_lines = Some(parse_int("tailLines", &v, 0)?),
                "sinceSeconds" => opts.since_seconds = Some(parse_int("sinceSeconds", &v, 1)?),
                "limitBytes" => opts.limit_bytes = Some(parse_int("limitBytes", &v, 1)?),
                "sinceTime" => {
                    let t = DateTime::parse_from_rfc3339(&v)
                        .map_err(|_| invalid("sinceTime", &v, "must be an RFC 3339 time"))?;
                    opts.since_time = Some(t.with_timezone(&Utc));
                }
                _ => {}
            }
        }
        if opts.since_seconds.is_some() && opts.since_time.is_some() {
            return Err(LogOptionsError::BothSince);
        }
        Ok(opts)
    }

    /// The earliest log time shown, if any: sinceTime, or now - sinceSeconds.
    pub fn since(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.since_time.or_else(|| {
            self.since_seconds.map(|s| {
                now - chrono::Duration::seconds(i64::try_from(s).unwrap_or(i64::MAX / 1000))
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubectl_queries() {
        let o = LogOptions::parse(
            "follow=true&tailLines=1&timestamps=1&limitBytes=100&sinceTime=2026-12-05T16%3A00%3A00Z",
        )
        .unwrap();
        assert!(o.follow && o.timestamps && !o.previous);
        assert_eq!(o.tail_lines, Some(1));
        assert_eq!(o.limit_bytes, Some(100));
        assert_eq!(
            o.since_time.unwrap().to_rfc3339(),
            "2026-12-05T16:00:00+00:00"
        );
        assert_eq!(LogOptions::parse("").unwrap(), LogOptions::default());
        assert!(LogOptions::parse("previous=true&x=y").unwrap().previous);
    }

    #[test]
    fn refuses_bad_values() {
        let table = [
            "tailLines=-1",
            "tailLines=x",
            "limitBytes=0",
            "sinceSeconds=0",
            "follow=yes",
            "sinceTime=yesterday",
            "sinceSeconds=5&sinceTime=2026-12-05T16:00:00Z",
        ];
        for q in table {
            assert!(LogOptions::parse(q).is_err(), "{q}");
        }
        assert_eq!(
            LogOptions::parse("tailLines=-1").unwrap_err().to_string(),
            "tailLines=\"-1\": must be greater than or equal to 0"
        );
    }

    #[test]
    fn since_seconds_counts_back_from_now() {
        let now = DateTime::parse_from_rfc3339("2026-12-05T16:00:10Z")
            .unwrap()
            .with_timezone(&Utc);
        let o = LogOptions::parse("sinceSeconds=10").unwrap();
        assert_eq!(
            o.since(now).unwrap().to_rfc3339(),
            "2026-12-05T16:00:00+00:00"
        );
        assert_eq!(LogOptions::default().since(now), None);
    }
}
