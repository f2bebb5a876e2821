//! Container and sandbox ids: 64 random hex digits, looked up by full id or unique prefix (as
//! crictl lets users type a short id).

use crate::runtime::error::{Result, RuntimeError};

/// A fresh random id (256 bits, lowercase hex), like containerd's.
pub fn new_id() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

/// Whether `id` looks like one of ours; used to skip foreign directories under the state root.
pub fn is_valid_id(id: &str) -> bool {
    id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Finds the one id among `ids` equal to `wanted` or starting with it.
pub fn resolve_prefix<'a, I>(kind: &'static str, wanted: &str, ids: I) -> Result<String>
where
    I: IntoIterator<Item = &'a String>,
{
    if wanted.is_empty() {
        return Err(RuntimeError::invalid(format!(
            "{kind} id must not be empty"
        )));
    }
    let mut found: Option<&String> = None;
    let candidates: Vec<&String> = ids.into_iter().collect();
    if let Some(exact) = candidates.iter().find(|id| id.as_str() == wanted) {
        return Ok((*exact).clone());
    }
    for id in candidates {
        if id.starts_with(wanted) {
            if found.is_some() {
                return Err(RuntimeError::AmbiguousId {
                    kind,
                    prefix: wanted.to_string(),
                });
            }
            found = Some(id);
        }
    }
    found
        .cloned()
        .ok_or_else(|| RuntimeError::not_found(kind, wanted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_valid_and_distinct() {
        let a = new_id();
        let b = new_id();
        assert!(is_valid_id(&a), "{a}");
        assert_ne!(a, b);
        assert!(!is_valid_id("xyz"));
        assert!(!is_valid_id(&a.to_uppercase()));
    }

    #[test]
    fn prefix_lookup() {
        let ids = vec![
            "abc123".to_string(),
            "abd456".to_string(),
            "abc".to_string(),
        ];
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("abc123", Ok("abc123")),
            ("abd", Ok("abd456")),
            // An exact match wins over longer ids sharing the prefix.
            ("abc", Ok("abc")),
            ("ab", Err("ambiguous")),
            ("zz", Err("not found")),
            ("", Err("must not be empty")),
        ];
        for (wanted, expected) in cases {
            let got = resolve_prefix("container", wanted, &ids);
            match (expected, got) {
                (Ok(want), Ok(got)) => assert_eq!(*want, got, "{wanted}"),
                (Err(msg), Err(err)) => assert!(err.to_string().contains(msg), "{wanted}: {err}"),
                (want, got) => panic!("{wanted}: expected {want:?}, got {got:?}"),
            }
        }
    }
}
