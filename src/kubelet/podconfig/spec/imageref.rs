//! Docker-style image reference splitting and normalization ("busybox" is
//! "docker.io/library/busybox" with the implied tag "latest").

/// Parts of an image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageName {
    /// Registry host (with port), e.g. `docker.io`, `localhost:5000`.
    pub domain: String,
    /// Repository path within the registry, e.g. `library/busybox`.
    pub path: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl ImageName {
    /// `domain/path`, the repository as credential lookups see it.
    pub fn repository(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// Whether neither a tag nor a digest was given, or the tag is `latest` (then the kubelet
    /// defaults imagePullPolicy to Always).
    pub fn is_latest(&self) -> bool {
        match (&self.tag, &self.digest) {
            (Some(tag), _) => tag == "latest",
            (None, None) => true,
            (None, Some(_)) => false,
        }
    }
}

/// Splits and normalizes `image`; never fails (validation happens elsewhere).
pub fn parse_image_name(image: &str) -> ImageName {
    let image = image.trim();
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest.to_string())),
        None => (image, None),
    };
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(colon) => (
            &rest[..last_slash + colon],
            Some(rest[last_slash + colon + 1..].to_string()),
        ),
        None => (rest, None),
    };
    let (domain, path) = match name.split_once('/') {
        Some((first, remainder))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_string(), remainder.to_string())
        }
        _ => ("docker.io".to_string(), name.to_string()),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io".to_string()
    } else {
        domain
    };
    let path = if domain == "docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path
    };
    ImageName {
        domain,
        path,
        tag,
        digest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_docker() {
        let d = "sha256:0123";
        type Case<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a str>, bool);
        let cases: &[Case] = &[
            ("busybox", "docker.io/library/busybox", None, None, true),
            (
                "busybox:1.36",
                "docker.io/library/busybox",
                Some("1.36"),
                None,
                false,
            ),
            (
                "busybox:latest",
                "docker.io/library/busybox",
                Some("latest"),
                None,
                true,
            ),
            ("user/app", "docker.io/user/app", None, None, true),
            (
                "docker.io/busybox",
                "docker.io/library/busybox",
                None,
                None,
                true,
            ),
            (
                "index.docker.io/user/app:v1",
                "docker.io/user/app",
                Some("v1"),
                None,
                false,
            ),
            ("localhost/app", "localhost/app", None, None, true),
            (
                "localhost:5000/a/b:t",
                "localhost:5000/a/b",
                Some("t"),
                None,
                false,
            ),
            (
                "reg.io/ns/app@sha256:0123",
                "reg.io/ns/app",
                None,
                Some(d),
                false,
            ),
            (
                "reg.io:443/app:v2@sha256:0123",
                "reg.io:443/app",
                Some("v2"),
                Some(d),
                false,
            ),
        ];
        for (input, repo, tag, digest, latest) in cases {
            let name = parse_image_name(input);
            assert_eq!(name.repository(), *repo, "{input}");
            assert_eq!(name.tag.as_deref(), *tag, "{input}");
            assert_eq!(name.digest.as_deref(), *digest, "{input}");
            assert_eq!(name.is_latest(), *latest, "{input}");
        }
    }
}
