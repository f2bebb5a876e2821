//! HPACK's static table (RFC 7541 Appendix A): re-encoded header fields refer to it, so the
//! server parses known names (and common name-value pairs) from an index, not from bytes.

/// Entries 1..=61, in order.
pub const STATIC_TABLE: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The static index of `name`, and whether that entry also has `value`.
pub fn lookup(name: &[u8], value: &[u8]) -> Option<(usize, bool)> {
    let mut by_name = None;
    for (i, (n, v)) in STATIC_TABLE.iter().enumerate() {
        if n.as_bytes() == name {
            if v.as_bytes() == value {
                return Some((i + 1, true));
            }
            by_name.get_or_insert((i + 1, false));
        }
    }
    by_name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_pairs_then_names() {
        // (name, value, the index and whether the value matched too)
        type Case = (&'static str, &'static str, Option<(usize, bool)>);
        let table: [Case; 7] = [
            (":method", "POST", Some((3, true))),
            (":method", "PUT", Some((2, false))),
            (":authority", "localhost", Some((1, false))),
            (":scheme", "https", Some((7, true))),
            ("user-agent", "grpc-go/1.26.0", Some((58, false))),
            ("www-authenticate", "", Some((61, true))),
            ("te", "trailers", None),
        ];
        for (name, value, want) in table {
            assert_eq!(lookup(name.as_bytes(), value.as_bytes()), want, "{name}");
        }
    }
}
