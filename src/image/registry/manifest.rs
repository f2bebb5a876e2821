//! Resolving a tag or digest to this host's image manifest: OCI indexes and Docker manifest
//! lists are followed to the linux/<arch> entry (the store's platform rule), OCI and Docker
//! schema2 manifests are accepted, schema1 is refused. Every manifest's bytes are checked
//! against the digest that named it (the reference, the index entry, or the registry's
//! `Docker-Content-Digest`) before they are trusted.

use super::error::RegistryError;
use super::transport::Session;
use crate::image::blobs::MAX_JSON_BLOB;
use crate::image::digest::Digest;
use crate::image::platform;
use oci_spec::image::{ImageIndex, ImageManifest};

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_SCHEMA1: [&str; 2] = [
    "application/vnd.docker.distribution.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
];

/// Indexes nested deeper than this are refused (a loop, or a hostile registry).
const MAX_DEPTH: usize = 4;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Index,
    Manifest,
    Schema1,
    Unknown(String),
}

/// What a manifest document is, from its `mediaType` (or the response's Content-Type when
/// the document has none) and, failing both, its shape.
pub fn classify(content_type: Option<&str>, body: &serde_json::Value) -> Kind {
    if body.get("schemaVersion").and_then(|v| v.as_u64()) == Some(1) {
        return Kind::Schema1;
    }
    let declared = body
        .get("mediaType")
        .and_then(|v| v.as_str())
        .or_else(|| content_type.map(|c| c.split(';').next().unwrap_or("").trim()))
        .unwrap_or("");
    match declared {
        OCI_INDEX | DOCKER_LIST => Kind::Index,
        OCI_MANIFEST | DOCKER_MANIFEST => Kind::Manifest,
        m if DOCKER_SCHEMA1.contains(&m) => Kind::Schema1,
        "" | "application/json" if body.get("manifests").is_some() => Kind::Index,
        "" | "application/json" if body.get("config").is_some() => Kind::Manifest,
        other => Kind::Unknown(other.to_string()),
    }
}

/// The image a reference resolves to on this host.
pub struct Resolved {
    /// What the reference names (an index for multi-platform images): repo digests use it.
    pub name_digest: Digest,
    pub manifest_digest: Digest,
    pub manifest_bytes: Vec<u8>,
    pub manifest: ImageManifest,
}

/// Resolves `reference` (a tag, or `sha256:...` when `pinned` is that digest).
pub async fn resolve(
    session: &Session,
    reference: &str,
    pinned: Option<&Digest>,
) -> Result<Resolved, RegistryError> {
    let name = format!("{}/{}", session.registry, session.repository);
    let mut fetched = fetch(session, reference, pinned, None, &name).await?;
    let name_digest = fetched.digest.clone();
    for _ in 0..MAX_DEPTH {
        match fetched.kind {
            Kind::Manifest => {
                let manifest: ImageManifest = parse(&fetched.bytes, &fetched.digest)?;
                return Ok(Resolved {
                    name_digest,
                    manifest_digest: fetched.digest,
                    manifest_bytes: fetched.bytes,
                    manifest,
                });
            }
            Kind::Index => {
                let index: ImageIndex = parse(&fetched.bytes, &fetched.digest)?;
                let (os, arch) = platform::host_platform();
                let Some(entry) = platform::choose(index.manifests(), os, arch) else {
                    return Err(RegistryError::NoPlatform(format!(
                        "{name}:{reference}: no {os}/{arch} manifest in {} (it has: {})",
                        fetched.digest,
                        platform::available(index.manifests())
                    )));
                };
                let digest = Digest::parse(entry.digest().as_ref()).map_err(|reason| {
                    RegistryError::BadContent {
                        what: format!("image index {}", fetched.digest),
                        reason,
                    }
                })?;
                fetched = fetch(
                    session,
                    &digest.to_string(),
                    Some(&digest),
                    Some(entry.size()),
                    &name,
                )
                .await?;
            }
            Kind::Schema1 => {
                return Err(RegistryError::Unsupported(format!(
                    "{name}:{reference} is a Docker schema 1 image (deprecated); push it again \
                     with a current client"
                )));
            }
            Kind::Unknown(media_type) => {
                return Err(RegistryError::Unsupported(format!(
                    "{name}:{reference}: manifest of media type {media_type:?}"
                )));
            }
        }
    }
    Err(RegistryError::BadContent {
        what: format!("{name}:{reference}"),
        reason: "image indexes nested too deeply".into(),
    })
}

struct Fetched {
    digest: Digest,
    bytes: Vec<u8>,
    kind: Kind,
}

async fn fetch(
    session: &Session,
    reference: &str,
    expected: Option<&Digest>,
    size: Option<u64>,
    name: &str,
) -> Result<Fetched, RegistryError> {
    let url = session.url("manifests", reference)?;
    let accept = [OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST].join(", ");
    let response = session.get(&url, &[("Accept", accept)]).await?;
    let what = format!("manifest {name}:{reference}");
    let response = session.check(response, &what).await?;
    let content_type = header(&response, "content-type");
    let advertised = header(&response, "docker-content-digest");
    let bytes = read_limited(session, response, &url, &what).await?;
    let digest = Digest::of_bytes(&bytes);
    // The reference's or index entry's digest is authoritative; the registry's header is
    // checked too when it names a sha256 digest.
    let claimed = match expected {
        Some(expected) => Some(expected.clone()),
        None => advertised.as_deref().and_then(|d| Digest::parse(d).ok()),
    };
    if let Some(claimed) = claimed
        && claimed != digest
    {
        return Err(RegistryError::DigestMismatch {
            what: format!("{what} from {}", session.registry),
            expected: claimed.to_string(),
            actual: digest.to_string(),
        });
    }
    if let Some(size) = size
        && size != bytes.len() as u64
    {
        return Err(RegistryError::BadContent {
            what,
            reason: format!("expected {size} bytes, got {}", bytes.len()),
        });
    }
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| RegistryError::BadContent {
            what: what.clone(),
            reason: format!("not JSON: {e}"),
        })?;
    Ok(Fetched {
        digest,
        kind: classify(content_type.as_deref(), &value),
        bytes,
    })
}

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The body, refusing more than a manifest may be.
async fn read_limited(
    session: &Session,
    mut response: reqwest::Response,
    url: &reqwest::Url,
    what: &str,
) -> Result<Vec<u8>, RegistryError> {
    let too_big = || RegistryError::BadContent {
        what: what.to_string(),
        reason: format!("larger than {MAX_JSON_BLOB} bytes"),
    };
    if response.content_length().is_some_and(|n| n > MAX_JSON_BLOB) {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| session.network(url, &e))?
    {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > MAX_JSON_BLOB {
            return Err(too_big());
        }
    }
    Ok(bytes)
}

fn parse<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    digest: &Digest,
) -> Result<T, RegistryError> {
    serde_json::from_slice(bytes).map_err(|e| RegistryError::BadContent {
        what: format!("manifest {digest}"),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn classifies_manifest_documents() {
        let cases: Vec<(Option<&str>, serde_json::Value, Kind)> = vec![
            (
                None,
                json!({"mediaType": OCI_INDEX, "manifests": []}),
                Kind::Index,
            ),
            (
                None,
                json!({"mediaType": DOCKER_LIST, "manifests": []}),
                Kind::Index,
            ),
            (None, json!({"mediaType": OCI_MANIFEST}), Kind::Manifest),
            (
                Some(OCI_INDEX),
                json!({"mediaType": DOCKER_MANIFEST}),
                Kind::Manifest,
            ),
            (
                Some(OCI_INDEX),
                json!({"schemaVersion": 2, "manifests": []}),
                Kind::Index,
            ),
            (
                Some("application/vnd.oci.image.manifest.v1+json; charset=utf-8"),
                json!({"schemaVersion": 2}),
                Kind::Manifest,
            ),
            (
                Some("application/json"),
                json!({"config": {}}),
                Kind::Manifest,
            ),
            (None, json!({"manifests": []}), Kind::Index),
            (
                None,
                json!({"schemaVersion": 1, "fsLayers": []}),
                Kind::Schema1,
            ),
            (
                Some(DOCKER_SCHEMA1[1]),
                json!({"schemaVersion": 2}),
                Kind::Schema1,
            ),
            (
                Some("text/html"),
                json!({}),
                Kind::Unknown("text/html".into()),
            ),
            (None, json!({}), Kind::Unknown(String::new())),
        ];
        for (content_type, body, want) in cases {
            assert_eq!(
                classify(content_type, &body),
                want,
                "{content_type:?} {body}"
            );
        }
    }
}
