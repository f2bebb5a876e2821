//! Unpacked layers, once per diff_id: `<root>/layers/<hex>/{fs/,layer.json}`. A layer directory
//! appears (by rename, from a staging area) only once fully extracted, verified against its
//! diff_id, and described by `layer.json`; after that it is never written again.

use super::blobs::StoredBlob;
use super::digest::Digest;
use super::error::{ImageError, IoContext};
use super::unpack::{LayerFormat, UnpackOptions, unpack_layer};
use crate::util::atomic_file::write_json_atomic;
use std::fs::{self, File};
use std::io::BufReader;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// `layer.json`: what the tree under `fs/` is.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LayerInfo {
    pub diff_id: Digest,
    pub format: LayerFormat,
    pub entries: u64,
    pub file_bytes: u64,
}

pub const INFO_FILE: &str = "layer.json";
pub const TREE_DIR: &str = "fs";

/// The directory of one layer (`<layers>/<hex>`) under a layers directory.
pub fn layer_dir(layers: &Path, diff_id: &Digest) -> PathBuf {
    layers.join(diff_id.hex())
}

/// The extracted tree (`.../fs`) of a layer directory.
pub fn tree_dir(layer_dir: &Path) -> PathBuf {
    layer_dir.join(TREE_DIR)
}

/// The layer's description, when the layer is complete.
pub fn read_info(layer_dir: &Path) -> Option<LayerInfo> {
    let bytes = fs::read(layer_dir.join(INFO_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Extracts `blob` into `<dir>/fs`, checks the uncompressed digest equals `diff_id`, and writes
/// `layer.json`. `dir` must not exist yet; on error it is left for the caller's staging cleanup.
pub fn unpack_blob(
    blob: &StoredBlob,
    diff_id: &Digest,
    dir: &Path,
    options: UnpackOptions,
) -> Result<LayerInfo, ImageError> {
    let tree = tree_dir(dir);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&tree)
        .context(|| format!("creating {}", tree.display()))?;
    let file = File::open(&blob.path).context(|| format!("opening {}", blob.path.display()))?;
    let stats = unpack_layer(
        BufReader::with_capacity(256 << 10, file),
        &tree,
        options,
        &blob.digest.to_string(),
    )?;
    let actual = stats.diff_id.unwrap_or_else(|| Digest::of_bytes(b""));
    if actual != *diff_id {
        return Err(ImageError::DigestMismatch {
            what: format!("uncompressed layer {}", blob.digest),
            expected: diff_id.to_string(),
            actual: actual.to_string(),
        });
    }
    let info = LayerInfo {
        diff_id: diff_id.clone(),
        format: options.format,
        entries: stats.entries,
        file_bytes: stats.file_bytes,
    };
    write_json_atomic(&dir.join(INFO_FILE), &info)
        .context(|| format!("writing {}", dir.join(INFO_FILE).display()))?;
    Ok(info)
}
