//! Image reference normalisation. Every path into the store (import names, pull, lookup,
//! CRI requests) goes through here, so `busybox`, `library/busybox:latest` and
//! `docker.io/library/busybox:latest` are one image everywhere.

use super::digest::{Digest, is_hex};
use super::error::ImageError;
use regex::Regex;
use std::fmt;
use std::sync::OnceLock;

/// Docker's reference grammar (distribution's `reference/regexp.go`), ASCII like Go's `\w`.
/// oci-spec's `Reference` compiles the same pattern with Unicode classes, where the tag's
/// `{0,127}` repetition grows into an automaton that took about 40 ms per process to build:
/// the whole fixed cost of `runp image load` over `tar -xzf` (scripts/bench-image.sh).
const REFERENCE_GRAMMAR: &str = r"^((?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))+)?(?::[0-9]+)?/)?[a-z0-9]+(?:(?:(?:[._]|__|[-]*)[a-z0-9]+)+)?(?:(?:/[a-z0-9]+(?:(?:(?:[._]|__|[-]*)[a-z0-9]+)+)?)+)?)(?::([\w][\w.-]{0,127}))?(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}))?$";

/// Longest repository path (without the registry), as docker allows.
const NAME_MAX: usize = 255;

fn reference_grammar() -> &'static Regex {
    static GRAMMAR: OnceLock<Regex> = OnceLock::new();
    GRAMMAR.get_or_init(|| {
        regex::RegexBuilder::new(REFERENCE_GRAMMAR)
            .unicode(false)
            .build()
            .expect("the reference grammar compiles")
    })
}

/// Splits `name` into registry and path as docker's `normalize.go` does: the first component
/// is a registry only when it has a `.` or `:` or is `localhost`; Docker Hub's official
/// images live under `library/`.
fn split_registry(name: &str) -> (&str, String) {
    let (registry, path) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => (first, rest),
        _ => ("docker.io", name),
    };
    let registry = if registry == "index.docker.io" {
        "docker.io"
    } else {
        registry
    };
    if registry == "docker.io" && !path.contains('/') {
        (registry, format!("library/{path}"))
    } else {
        (registry, path.to_string())
    }
}

/// Shortest image-id prefix accepted as a lookup key (as `docker` does).
pub const MIN_ID_PREFIX: usize = 12;

/// A normalized image name: `registry/repository` plus a tag and/or a manifest digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedRef {
    /// e.g. `docker.io/library/busybox`
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

impl NamedRef {
    /// Parses and normalizes a docker-style reference; a missing tag means `latest` unless a
    /// digest is given.
    pub fn parse(text: &str) -> Result<NamedRef, ImageError> {
        let invalid = |reason: String| ImageError::InvalidReference {
            reference: text.to_string(),
            reason,
        };
        if text.is_empty() {
            return Err(invalid("the name is empty".into()));
        }
        let captures = reference_grammar()
            .captures(text)
            .ok_or_else(|| invalid("not [registry/]name[:tag][@digest]".into()))?;
        let (registry, path) = split_registry(&captures[1]);
        if path.len() > NAME_MAX {
            return Err(invalid(format!("the name is longer than {NAME_MAX}")));
        }
        let digest = captures.get(3);
        let tag = match (captures.get(2), digest) {
            (None, None) => Some("latest".to_string()),
            (tag, _) => tag.map(|t| t.as_str().to_string()),
        };
        let digest = digest
            .map(|d| Digest::parse(d.as_str()))
            .transpose()
            .map_err(invalid)?;
        Ok(NamedRef {
            repository: format!("{registry}/{path}"),
            tag,
            digest,
        })
    }

    /// `repository:tag`, when tagged.
    pub fn tagged(&self) -> Option<String> {
        self.tag
            .as_ref()
            .map(|t| format!("{}:{t}", self.repository))
    }

    /// `repository@sha256:<hex>` for a given manifest digest.
    pub fn with_digest(&self, digest: &Digest) -> String {
        format!("{}@{digest}", self.repository)
    }
}

impl fmt::Display for NamedRef {
    /// The canonical lookup form: by digest when there is one (a digest pins the content, the
    /// tag is then informational), else by tag.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.digest, &self.tag) {
            (Some(digest), _) => write!(f, "{}", self.with_digest(digest)),
            (None, Some(tag)) => write!(f, "{}:{tag}", self.repository),
            (None, None) => write!(f, "{}", self.repository),
        }
    }
}

/// What a lookup string asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// `sha256:<64 hex>` or bare 64 hex: an image id (config digest).
    Id(Digest),
    /// `sha256:<12..63 hex>`: only an id prefix.
    IdPrefix(String),
    /// A name; `id_prefix` is set when the text is also a plausible id prefix (12..63 hex),
    /// tried only when no image has that name (as docker does).
    Named {
        name: NamedRef,
        id_prefix: Option<String>,
    },
}

/// Parses a lookup key: full id, id prefix, or a name with tag/digest.
pub fn parse_lookup(text: &str) -> Result<Lookup, ImageError> {
    let text = text.trim();
    if let Some(hex) = text.strip_prefix("sha256:") {
        if hex.len() == 64 {
            return Digest::from_hex(hex).map(Lookup::Id).map_err(|reason| {
                ImageError::InvalidReference {
                    reference: text.to_string(),
                    reason,
                }
            });
        }
        if is_hex(hex) && hex.len() >= MIN_ID_PREFIX && hex.len() < 64 {
            return Ok(Lookup::IdPrefix(hex.to_ascii_lowercase()));
        }
        return Err(ImageError::InvalidReference {
            reference: text.to_string(),
            reason: format!("an id needs {MIN_ID_PREFIX} to 64 hex characters after sha256:"),
        });
    }
    if text.len() == 64 && is_hex(text) {
        // Docker forbids 64-hex repository names for exactly this reason.
        return Digest::from_hex(text).map(Lookup::Id).map_err(|reason| {
            ImageError::InvalidReference {
                reference: text.to_string(),
                reason,
            }
        });
    }
    let id_prefix = (is_hex(text) && text.len() >= MIN_ID_PREFIX && text.len() < 64)
        .then(|| text.to_ascii_lowercase());
    match NamedRef::parse(text) {
        Ok(name) => Ok(Lookup::Named { name, id_prefix }),
        // Upper-case hex is not a valid name but is a valid id prefix.
        Err(_) if id_prefix.is_some() => Ok(Lookup::IdPrefix(id_prefix.unwrap_or_default())),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn named(text: &str) -> (String, Option<String>, Option<String>) {
        let n = NamedRef::parse(text).unwrap();
        (n.repository, n.tag, n.digest.map(|d| d.to_string()))
    }

    #[test]
    fn normalizes_docker_style_names() {
        let digest = format!("sha256:{HEX}");
        let mut cases: Vec<(String, &str, Option<&str>, Option<&str>)> = vec![
            (
                "busybox".into(),
                "docker.io/library/busybox",
                Some("latest"),
                None,
            ),
            (
                "busybox:1.36".into(),
                "docker.io/library/busybox",
                Some("1.36"),
                None,
            ),
            (
                "library/busybox".into(),
                "docker.io/library/busybox",
                Some("latest"),
                None,
            ),
            (
                "docker.io/busybox".into(),
                "docker.io/library/busybox",
                Some("latest"),
                None,
            ),
            (
                "index.docker.io/library/busybox:latest".into(),
                "docker.io/library/busybox",
                Some("latest"),
                None,
            ),
            (
                "docker.io/library/busybox:latest".into(),
                "docker.io/library/busybox",
                Some("latest"),
                None,
            ),
            ("user/app:v2".into(), "docker.io/user/app", Some("v2"), None),
            (
                "runp.test/busybox:1".into(),
                "runp.test/busybox",
                Some("1"),
                None,
            ),
            (
                "localhost/app".into(),
                "localhost/app",
                Some("latest"),
                None,
            ),
            (
                "localhost:5000/a/b:c".into(),
                "localhost:5000/a/b",
                Some("c"),
                None,
            ),
            (
                format!("busybox@{digest}"),
                "docker.io/library/busybox",
                None,
                Some(&digest),
            ),
            (
                format!("busybox:1@{digest}"),
                "docker.io/library/busybox",
                Some("1"),
                Some(&digest),
            ),
        ];
        let long_tag = "t".repeat(128);
        let long_repo = format!("example.com/{}", "n".repeat(255));
        cases.push((
            format!("busybox:{long_tag}"),
            "docker.io/library/busybox",
            Some(&long_tag),
            None,
        ));
        cases.push((long_repo.clone(), &long_repo, Some("latest"), None));
        for (input, repo, tag, dig) in cases {
            assert_eq!(
                named(&input),
                (
                    repo.to_string(),
                    tag.map(String::from),
                    dig.map(String::from)
                ),
                "{input}"
            );
        }
    }

    #[test]
    fn rejects_malformed_names() {
        for bad in [
            "",
            "Busybox",
            "busybox:",
            "busybox@sha256:abc",
            "busybox@md5:0123456789abcdef0123456789abcdef",
            "a//b",
            "-a",
            "busybox:tag with space",
            // Docker's grammar is ASCII (Go's `\w`): no letters from elsewhere in a tag.
            "busybox:caf\u{e9}",
            "busybox:\u{661}",
        ]
        .into_iter()
        .map(String::from)
        .chain([
            format!("busybox:{}", "t".repeat(129)),
            format!("example.com/{}", "n".repeat(256)),
        ]) {
            let bad = bad.as_str();
            assert!(
                matches!(
                    NamedRef::parse(bad),
                    Err(ImageError::InvalidReference { .. })
                ),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn display_is_the_canonical_lookup_form() {
        let digest = format!("sha256:{HEX}");
        let cases = [
            (
                "busybox".to_string(),
                "docker.io/library/busybox:latest".to_string(),
            ),
            (
                format!("busybox:1@{digest}"),
                format!("docker.io/library/busybox@{digest}"),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(NamedRef::parse(&input).unwrap().to_string(), want);
        }
    }

    #[test]
    fn lookup_keys() {
        let id = Digest::from_hex(HEX).unwrap();
        assert_eq!(
            parse_lookup(&format!("sha256:{HEX}")).unwrap(),
            Lookup::Id(id.clone())
        );
        assert_eq!(parse_lookup(HEX).unwrap(), Lookup::Id(id));
        assert_eq!(
            parse_lookup("sha256:0123456789AB").unwrap(),
            Lookup::IdPrefix("0123456789ab".into())
        );
        assert_eq!(
            parse_lookup("0123456789AB").unwrap(),
            Lookup::IdPrefix("0123456789ab".into())
        );
        match parse_lookup("0123456789ab").unwrap() {
            Lookup::Named { name, id_prefix } => {
                assert_eq!(name.repository, "docker.io/library/0123456789ab");
                assert_eq!(id_prefix.as_deref(), Some("0123456789ab"));
            }
            other => panic!("unexpected {other:?}"),
        }
        match parse_lookup("abc").unwrap() {
            Lookup::Named { id_prefix, .. } => assert_eq!(id_prefix, None),
            other => panic!("unexpected {other:?}"),
        }
        for bad in ["sha256:abc", "sha256:zz", "sha256:", "NOT VALID"] {
            assert!(parse_lookup(bad).is_err(), "{bad}");
        }
    }
}
