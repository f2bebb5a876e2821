//! What `PullImage` is asked for: an ordinary reference (pulled from its registry, see
//! [`super::registry`]) or a local source written the way skopeo/podman name them:
//! `oci-archive:PATH[:REF]`, `docker-archive:PATH[:REF]`, `oci:DIR[:REF]`.

use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PullSource {
    /// Import from a local file or directory, optionally only the image named `select`.
    Local {
        path: PathBuf,
        select: Option<String>,
    },
    /// An ordinary image reference, pulled from its registry.
    Reference(String),
}

const LOCAL_PREFIXES: [&str; 3] = ["oci-archive:", "docker-archive:", "oci:"];

pub fn parse_pull_source(image: &str) -> PullSource {
    for prefix in LOCAL_PREFIXES {
        if let Some(rest) = image.strip_prefix(prefix) {
            // Like skopeo: the path ends at the first ':'; the rest names the image.
            let (path, select) = match rest.split_once(':') {
                Some((path, select)) if !select.is_empty() => (path, Some(select.to_string())),
                Some((path, _)) => (path, None),
                None => (rest, None),
            };
            return PullSource::Local {
                path: PathBuf::from(path),
                select,
            };
        }
    }
    PullSource::Reference(image.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(path: &str, select: Option<&str>) -> PullSource {
        PullSource::Local {
            path: PathBuf::from(path),
            select: select.map(String::from),
        }
    }

    #[test]
    fn parses_local_sources_and_references() {
        let cases = vec![
            ("oci-archive:/f/busybox.tar", local("/f/busybox.tar", None)),
            (
                "oci-archive:/f/b.tar:docker.io/library/busybox:latest",
                local("/f/b.tar", Some("docker.io/library/busybox:latest")),
            ),
            (
                "docker-archive:/f/d.tar:busybox:1",
                local("/f/d.tar", Some("busybox:1")),
            ),
            (
                "oci:/f/layout:runp.test/busybox:1",
                local("/f/layout", Some("runp.test/busybox:1")),
            ),
            ("oci:/f/layout:", local("/f/layout", None)),
            ("busybox", PullSource::Reference("busybox".into())),
            (
                "docker.io/library/busybox:latest",
                PullSource::Reference("docker.io/library/busybox:latest".into()),
            ),
            (
                "localhost:5000/oci:1",
                PullSource::Reference("localhost:5000/oci:1".into()),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_pull_source(input), want, "{input}");
        }
    }
}
