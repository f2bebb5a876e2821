//! `docker save` archives: `manifest.json` lists each image's config file, `RepoTags` and layer
//! files. There is no registry manifest in them, so an OCI manifest is synthesized (and stored)
//! to give the image a manifest digest, as containerd does on import.

use super::Candidate;
use super::oci::parse_json;
use super::source::Source;
use crate::image::blobs::StoredBlob;
use crate::image::error::{ImageError, IoContext};
use crate::image::import::staging::Staging;
use crate::image::reference::NamedRef;
use crate::image::unpack::compression::{self, Compression};
use oci_spec::image::ImageConfiguration;
use std::fs::File;
use std::io::Read;

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SavedImage {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

pub fn candidates(
    source: &mut Source<'_>,
    staging: &Staging,
) -> Result<Vec<Candidate>, ImageError> {
    let manifest_file = source.file("manifest.json")?;
    let saved: Vec<SavedImage> = parse_json(source, &manifest_file, "manifest.json")?;
    let mut found = Vec::new();
    for image in saved {
        let config_blob = source.file(&image.config)?;
        let config: ImageConfiguration = parse_json(source, &config_blob, "image config")?;
        let layers = image
            .layers
            .iter()
            .map(|layer| source.file(layer))
            .collect::<Result<Vec<_>, _>>()?;
        let manifest_bytes = synthesize_manifest(&config_blob, &layers)?;
        let manifest = staging
            .blobs
            .write_bytes(&manifest_bytes, "synthesized manifest")?;
        let mut names = Vec::new();
        let mut raw_refs = Vec::new();
        for tag in image.repo_tags.unwrap_or_default() {
            match NamedRef::parse(&tag) {
                Ok(name) => names.push(name),
                Err(err) => tracing::warn!("ignoring RepoTag {tag:?}: {err}"),
            }
            raw_refs.push(tag);
        }
        found.push(Candidate {
            names,
            raw_refs,
            name_digests: vec![manifest.digest.clone()],
            manifest,
            config: config_blob,
            config_json: config,
            layers,
        });
    }
    Ok(found)
}

fn synthesize_manifest(config: &StoredBlob, layers: &[StoredBlob]) -> Result<Vec<u8>, ImageError> {
    let layer_descriptors = layers
        .iter()
        .map(|layer| {
            Ok(serde_json::json!({
                "mediaType": sniff_file(layer)?.oci_media_type(),
                "digest": layer.digest.to_string(),
                "size": layer.size,
            }))
        })
        .collect::<Result<Vec<_>, ImageError>>()?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config.digest.to_string(),
            "size": config.size,
        },
        "layers": layer_descriptors,
    });
    serde_json::to_vec(&manifest).map_err(|e| ImageError::io("encoding manifest", e.into()))
}

fn sniff_file(blob: &StoredBlob) -> Result<Compression, ImageError> {
    let mut prefix = Vec::with_capacity(8);
    File::open(&blob.path)
        .and_then(|f| f.take(8).read_to_end(&mut prefix))
        .context(|| format!("reading {}", blob.path.display()))?;
    compression::sniff(&prefix).map_err(ImageError::Unsupported)
}
