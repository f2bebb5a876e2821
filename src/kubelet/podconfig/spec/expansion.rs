//! `$(VAR)` expansion with the exact semantics of Kubernetes'
//! `third_party/forked/golang/expansion`: `$$` is an escaped `$`, an undefined or unterminated
//! reference is left verbatim, and any other `$x` is copied as is.

use std::collections::HashMap;

/// Expands `$(NAME)` references in `input` using `lookup`; references it does not know stay
/// verbatim.
pub fn expand(input: &str, mut lookup: impl FnMut(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.extend_from_slice(&bytes[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance = match bytes[cursor + 1] {
                b'$' => {
                    out.push(b'$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match lookup(name) {
                            Some(value) => out.extend_from_slice(value.as_bytes()),
                            None => {
                                out.extend_from_slice(b"$(");
                                out.extend_from_slice(name.as_bytes());
                                out.push(b')');
                            }
                        }
                        close + 1
                    }
                    None => {
                        // Incomplete reference: emit "$(" and continue after the opener.
                        out.extend_from_slice(b"$(");
                        1
                    }
                },
                other => {
                    out.push(b'$');
                    out.push(other);
                    1
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    out.extend_from_slice(&bytes[checkpoint.min(bytes.len())..]);
    // Only whole input slices and whole values are copied, in order, so this is valid UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Expands with a map of variables (the first map that has a name wins).
pub fn expand_with(input: &str, maps: &[&HashMap<String, String>]) -> String {
    expand(input, |name| maps.iter().find_map(|m| m.get(name).cloned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> HashMap<String, String> {
        [
            ("VAR_A", "A"),
            ("VAR_B", "B"),
            ("VAR_C", "C"),
            ("VAR_REF", "$(VAR_A)"),
            ("VAR_EMPTY", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn matches_the_kubernetes_expansion_table() {
        // Cases from the upstream expansion tests.
        let cases: &[(&str, &str)] = &[
            ("$(VAR_A)", "A"),
            ("___$(VAR_B)___", "___B___"),
            ("$(VAR_A)-$(VAR_A)", "A-A"),
            ("$(VAR_A)-1", "A-1"),
            ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
            ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
            ("$$(VAR_A)$$(VAR_B)", "$(VAR_A)$(VAR_B)"),
            ("f000-$$VAR_A", "f000-$VAR_A"),
            ("foo\\$(VAR_C)bar", "foo\\Cbar"),
            ("foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
            ("foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"),
            ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
            ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
            ("$(VAR_REF)", "$(VAR_A)"),
            ("%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"),
            ("foo$(VAR_EMPTY)bar", "foobar"),
            ("$(VAR_A)$(VAR_EMPTY)$(VAR_B)", "AB"),
            ("$(VAR_A)$", "A$"),
            ("$(VAR_A)$$", "A$"),
            ("$", "$"),
            ("$$", "$"),
            ("$$$", "$$"),
            ("$$$$", "$$"),
            ("$$$$$", "$$$"),
            ("$(", "$("),
            ("$(VAR_A", "$(VAR_A"),
            ("$(VAR_DNE)", "$(VAR_DNE)"),
            ("$()", "$()"),
            ("$(VAR_A)$(", "A$("),
            ("$(VAR_A$", "$(VAR_A$"),
            ("$(,)", "$(,)"),
            ("(VAR_A)", "(VAR_A)"),
            ("$VAR_A", "$VAR_A"),
            ("${VAR_A}", "${VAR_A}"),
            ("$(VAR_A)$$$(VAR_B)", "A$B"),
            ("héllo $(VAR_A) wörld $é", "héllo A wörld $é"),
            ("", ""),
        ];
        let vars = vars();
        for (input, expected) in cases {
            assert_eq!(expand_with(input, &[&vars]), *expected, "input {input:?}");
        }
    }

    #[test]
    fn first_map_wins() {
        let a: HashMap<String, String> = [("X".to_string(), "1".to_string())].into();
        let b: HashMap<String, String> = [("X".to_string(), "2".to_string())].into();
        assert_eq!(expand_with("$(X)", &[&a, &b]), "1");
        assert_eq!(expand_with("$(X)", &[&b, &a]), "2");
    }
}
