//! OCI image layouts (`oci-layout`, `index.json`, `blobs/sha256/...`), as a directory or a
//! tarball. Each `index.json` entry is an image, named by its `io.containerd.image.name` or
//! `org.opencontainers.image.ref.name` annotation; nested indexes are resolved to this host's
//! platform (linux/amd64 on x86_64).

use super::Candidate;
use super::source::Source;
use crate::image::blobs::{StoredBlob, read_json_blob};
use crate::image::digest::Digest;
use crate::image::error::ImageError;
use crate::image::platform;
use crate::image::reference::NamedRef;
use oci_spec::image::{Descriptor, ImageConfiguration, ImageIndex, ImageManifest};
use std::collections::HashMap;

pub const CONTAINERD_NAME: &str = "io.containerd.image.name";
pub const OCI_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// Nested indexes deeper than this are refused (a loop or a hostile layout).
const MAX_INDEX_DEPTH: usize = 4;

pub fn candidates(source: &mut Source<'_>) -> Result<Vec<Candidate>, ImageError> {
    let index_blob = source.file("index.json")?;
    let index: ImageIndex = parse_json(source, &index_blob, "index.json")?;
    let mut found: Vec<Candidate> = Vec::new();
    for descriptor in index.manifests() {
        let (names, raw_refs) = names_of(descriptor);
        let named = descriptor_digest(source, descriptor)?;
        let manifest_digest = select_manifest(source, descriptor, 0)?;
        if let Some(existing) = found
            .iter_mut()
            .find(|c| c.manifest.digest == manifest_digest)
        {
            for name in names {
                if !existing.names.contains(&name) {
                    existing.names.push(name);
                }
            }
            existing.raw_refs.extend(raw_refs);
            if !existing.name_digests.contains(&named) {
                existing.name_digests.push(named);
            }
            continue;
        }
        let mut candidate = load_manifest(source, &manifest_digest)?;
        candidate.names = names;
        candidate.raw_refs = raw_refs;
        candidate.name_digests = vec![named];
        found.push(candidate);
    }
    Ok(found)
}

/// Names from the descriptor's annotations. A `ref.name` that is only a tag (`latest`, `1.0`)
/// names no repository, so it is kept raw (usable to select the image) but gives no name.
fn names_of(descriptor: &Descriptor) -> (Vec<NamedRef>, Vec<String>) {
    let empty = HashMap::new();
    let annotations = descriptor.annotations().as_ref().unwrap_or(&empty);
    let mut names = Vec::new();
    let mut raw = Vec::new();
    for key in [CONTAINERD_NAME, OCI_REF_NAME] {
        let Some(value) = annotations.get(key) else {
            continue;
        };
        raw.push(value.clone());
        let full = key == CONTAINERD_NAME || value.contains(['/', ':', '@']);
        match NamedRef::parse(value) {
            Ok(name) if full && !names.contains(&name) => names.push(name),
            Ok(_) => {}
            Err(err) => tracing::warn!("ignoring image name annotation {key}={value:?}: {err}"),
        }
    }
    (names, raw)
}

/// Follows index descriptors down to one image manifest for this platform.
fn select_manifest(
    source: &mut Source<'_>,
    descriptor: &Descriptor,
    depth: usize,
) -> Result<Digest, ImageError> {
    let digest = descriptor_digest(source, descriptor)?;
    if depth > MAX_INDEX_DEPTH {
        return Err(ImageError::invalid_source(
            source.path(),
            "image indexes nested too deeply",
        ));
    }
    let blob = source.blob(&digest)?;
    let bytes = read_json_blob(&blob.path, "manifest")?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        ImageError::invalid_source(source.path(), format!("manifest {digest}: {e}"))
    })?;
    if value.get("manifests").is_none() {
        return Ok(digest);
    }
    let index: ImageIndex = serde_json::from_value(value).map_err(|e| {
        ImageError::invalid_source(source.path(), format!("image index {digest}: {e}"))
    })?;
    let (os, arch) = platform::host_platform();
    match platform::choose(index.manifests(), os, arch) {
        Some(manifest) => select_manifest(source, manifest, depth + 1),
        None => Err(ImageError::Unsupported(format!(
            "image index {digest} has no {os}/{arch} manifest (it has: {})",
            platform::available(index.manifests())
        ))),
    }
}

fn load_manifest(source: &mut Source<'_>, digest: &Digest) -> Result<Candidate, ImageError> {
    let manifest_blob = source.blob(digest)?;
    let manifest: ImageManifest = parse_json(source, &manifest_blob, "image manifest")?;
    let config_digest = descriptor_digest(source, manifest.config())?;
    let config_blob = source.blob(&config_digest)?;
    let config: ImageConfiguration = parse_json(source, &config_blob, "image config")?;
    let layers = manifest
        .layers()
        .iter()
        .map(|layer| {
            let digest = descriptor_digest(source, layer)?;
            source.blob(&digest)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Candidate {
        names: Vec::new(),
        raw_refs: Vec::new(),
        name_digests: vec![manifest_blob.digest.clone()],
        manifest: manifest_blob,
        config: config_blob,
        config_json: config,
        layers,
    })
}

fn descriptor_digest(source: &Source<'_>, descriptor: &Descriptor) -> Result<Digest, ImageError> {
    Digest::parse(descriptor.digest().as_ref())
        .map_err(|reason| ImageError::invalid_source(source.path(), reason))
}

pub(super) fn parse_json<T: serde::de::DeserializeOwned>(
    source: &Source<'_>,
    blob: &StoredBlob,
    what: &str,
) -> Result<T, ImageError> {
    let bytes = read_json_blob(&blob.path, what)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ImageError::invalid_source(source.path(), format!("{what}: {e}")))
}
