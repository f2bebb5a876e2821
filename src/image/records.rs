//! Image records: one JSON file (`<root>/images.json`) replaced atomically, so a reader sees
//! either the old or the new set of names, never a tag on two images.

use super::digest::Digest;
use super::error::{ImageError, IoContext};
use super::reference::{Lookup, NamedRef};
use crate::util::atomic_file::write_json_atomic;
use oci_spec::image::ImageConfiguration;
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;

/// One image in the store.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImageRecord {
    /// `sha256:<config digest hex>`
    pub id: String,
    /// Normalized names, e.g. `docker.io/library/busybox:latest`.
    pub repo_tags: Vec<String>,
    /// `repository@sha256:<manifest digest>` for each repository the image is known under.
    pub repo_digests: Vec<String>,
    /// Bytes of the image's content (config plus layer blobs as stored).
    pub size: u64,
    pub config: ImageConfiguration,
    /// Layer diff_ids, bottom layer first.
    pub layers: Vec<Digest>,
    /// Manifests the image was imported with (docker-save imports get a synthesized one).
    pub manifests: Vec<Digest>,
    /// Every blob this image keeps alive: config, manifests, layer blobs.
    pub blobs: Vec<Digest>,
    /// RFC 3339 time of the latest import.
    pub imported_at: String,
}

impl ImageRecord {
    pub fn digest(&self) -> Result<Digest, ImageError> {
        Digest::parse(&self.id).map_err(|reason| ImageError::InvalidReference {
            reference: self.id.clone(),
            reason,
        })
    }

    /// The image's default user (`User` in the config), if any.
    pub fn user(&self) -> Option<&str> {
        self.config
            .config()
            .as_ref()
            .and_then(|c| c.user().as_deref())
            .filter(|u| !u.is_empty())
    }
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct RecordFile {
    images: Vec<ImageRecord>,
}

/// All records, as loaded from (and saved to) the records file.
#[derive(Clone, Debug, Default)]
pub struct Records {
    pub images: Vec<ImageRecord>,
}

impl Records {
    pub fn load(path: &Path) -> Result<Records, ImageError> {
        match fs::read(path) {
            Ok(bytes) => {
                let file: RecordFile = serde_json::from_slice(&bytes).map_err(|e| {
                    ImageError::io(
                        format!("parsing {}", path.display()),
                        io::Error::new(io::ErrorKind::InvalidData, e),
                    )
                })?;
                Ok(Records {
                    images: file.images,
                })
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(Records::default()),
            Err(err) => Err(ImageError::io(format!("reading {}", path.display()), err)),
        }
    }

    /// At open: a records file that does not parse (truncated, garbage, an entry edited by
    /// hand) would fail every later operation. It is kept as `<file>.corrupt`, and the entries
    /// that still parse are saved back; each loss is logged with the file's name.
    pub fn repair(path: &Path) -> Result<(), ImageError> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(ImageError::io(format!("reading {}", path.display()), err)),
        };
        let err = match serde_json::from_slice::<RecordFile>(&bytes) {
            Ok(_) => return Ok(()),
            Err(err) => err,
        };
        #[derive(serde::Deserialize)]
        struct Entries {
            images: Vec<serde_json::Value>,
        }
        let mut kept = Records::default();
        match serde_json::from_slice::<Entries>(&bytes) {
            Ok(entries) => {
                for (i, entry) in entries.images.into_iter().enumerate() {
                    match serde_json::from_value::<ImageRecord>(entry) {
                        Ok(record) => kept.images.push(record),
                        Err(e) => tracing::error!(
                            file = %path.display(),
                            "dropping unreadable image record #{i}: {e}"
                        ),
                    }
                }
            }
            Err(_) => tracing::error!(
                file = %path.display(),
                error = %err,
                "unreadable image records: every image must be pulled or loaded again"
            ),
        }
        let aside = path.with_extension("json.corrupt");
        fs::rename(path, &aside).context(|| format!("moving {} aside", path.display()))?;
        tracing::warn!(file = %aside.display(), kept = kept.images.len(), "kept the unreadable image records aside");
        kept.save(path)
    }

    pub fn save(&self, path: &Path) -> Result<(), ImageError> {
        let file = RecordFile {
            images: self.images.clone(),
        };
        write_json_atomic(path, &file).context(|| format!("writing {}", path.display()))
    }

    /// Resolves a lookup key. `text` is the caller's original string, for the error.
    pub fn find(&self, lookup: &Lookup, text: &str) -> Result<&ImageRecord, ImageError> {
        let not_found = || ImageError::NotFound(text.to_string());
        match lookup {
            Lookup::Id(digest) => {
                let id = digest.to_string();
                self.images
                    .iter()
                    .find(|r| r.id == id)
                    .ok_or_else(not_found)
            }
            Lookup::IdPrefix(prefix) => self.by_prefix(prefix)?.ok_or_else(not_found),
            Lookup::Named { name, id_prefix } => {
                if let Some(found) = self.by_name(name) {
                    return Ok(found);
                }
                match id_prefix {
                    Some(prefix) => self.by_prefix(prefix)?.ok_or_else(not_found),
                    None => Err(not_found()),
                }
            }
        }
    }

    fn by_name(&self, name: &NamedRef) -> Option<&ImageRecord> {
        if let Some(digest) = &name.digest {
            let wanted = name.with_digest(digest);
            return self
                .images
                .iter()
                .find(|r| r.repo_digests.contains(&wanted));
        }
        let wanted = name.tagged()?;
        self.images.iter().find(|r| r.repo_tags.contains(&wanted))
    }

    fn by_prefix(&self, prefix: &str) -> Result<Option<&ImageRecord>, ImageError> {
        let matches: Vec<&ImageRecord> = self
            .images
            .iter()
            .filter(|r| {
                r.id.strip_prefix("sha256:")
                    .is_some_and(|hex| hex.starts_with(prefix))
            })
            .collect();
        match matches.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(one)),
            many => Err(ImageError::AmbiguousReference {
                prefix: prefix.to_string(),
                count: many.len(),
            }),
        }
    }

    /// Adds an imported image, merging with an existing record of the same id, and moves its
    /// tags away from any other image (which then may be left untagged, like docker does).
    pub fn upsert(&mut self, incoming: ImageRecord) -> ImageRecord {
        for other in self.images.iter_mut().filter(|r| r.id != incoming.id) {
            other.repo_tags.retain(|t| !incoming.repo_tags.contains(t));
        }
        match self.images.iter_mut().find(|r| r.id == incoming.id) {
            Some(existing) => {
                existing.repo_tags = union(&existing.repo_tags, &incoming.repo_tags);
                existing.repo_digests = union(&existing.repo_digests, &incoming.repo_digests);
                existing.manifests = union(&existing.manifests, &incoming.manifests);
                existing.blobs = union(&existing.blobs, &incoming.blobs);
                existing.imported_at = incoming.imported_at;
                existing.clone()
            }
            None => {
                self.images.push(incoming.clone());
                incoming
            }
        }
    }

    pub fn remove(&mut self, id: &str) -> Option<ImageRecord> {
        let index = self.images.iter().position(|r| r.id == id)?;
        Some(self.images.remove(index))
    }
}

fn union<T: Clone + Ord>(a: &[T], b: &[T]) -> Vec<T> {
    let set: BTreeSet<T> = a.iter().chain(b).cloned().collect();
    set.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::reference::parse_lookup;

    fn record(hex_char: char, tags: &[&str]) -> ImageRecord {
        let config: ImageConfiguration = serde_json::from_str(
            r#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#,
        )
        .unwrap();
        ImageRecord {
            id: format!("sha256:{}", hex_char.to_string().repeat(64)),
            repo_tags: tags.iter().map(|t| t.to_string()).collect(),
            repo_digests: vec![],
            size: 1,
            config,
            layers: vec![],
            manifests: vec![],
            blobs: vec![],
            imported_at: String::new(),
        }
    }

    fn find<'a>(records: &'a Records, text: &str) -> Result<&'a ImageRecord, ImageError> {
        records.find(&parse_lookup(text).unwrap(), text)
    }

    #[test]
    fn finds_by_normalized_name_id_and_prefix() {
        let mut records = Records::default();
        records.upsert(record('a', &["docker.io/library/busybox:latest"]));
        records.upsert(record('b', &["runp.test/busybox:1"]));
        let a = "a".repeat(64);
        for key in [
            "busybox".to_string(),
            "busybox:latest".to_string(),
            "docker.io/library/busybox".to_string(),
            format!("sha256:{a}"),
            a.clone(),
            a[..12].to_string(),
            format!("sha256:{}", &a[..20]),
        ] {
            assert_eq!(
                find(&records, &key).unwrap().id,
                format!("sha256:{a}"),
                "{key}"
            );
        }
        assert_eq!(
            find(&records, "runp.test/busybox:1").unwrap().id,
            format!("sha256:{}", "b".repeat(64))
        );
        for missing in ["busybox:1", "runp.test/busybox", "alpine"] {
            assert!(
                matches!(find(&records, missing), Err(ImageError::NotFound(_))),
                "{missing}"
            );
        }
    }

    #[test]
    fn ambiguous_prefix_is_an_error() {
        let mut records = Records::default();
        let mut one = record('a', &[]);
        let mut two = record('a', &[]);
        one.id = format!("sha256:{}1", "a".repeat(63));
        two.id = format!("sha256:{}2", "a".repeat(63));
        records.upsert(one);
        records.upsert(two);
        assert!(matches!(
            find(&records, &"a".repeat(12)),
            Err(ImageError::AmbiguousReference { count: 2, .. })
        ));
    }

    #[test]
    fn importing_a_tag_moves_it_and_merges_same_id() {
        let mut records = Records::default();
        records.upsert(record(
            'a',
            &["docker.io/library/busybox:latest", "x.io/a:1"],
        ));
        records.upsert(record('b', &["docker.io/library/busybox:latest"]));
        let a = find(&records, &"a".repeat(64)).unwrap();
        assert_eq!(a.repo_tags, vec!["x.io/a:1"]);
        let merged = records.upsert(record('b', &["x.io/b:2"]));
        assert_eq!(
            merged.repo_tags,
            vec!["docker.io/library/busybox:latest", "x.io/b:2"]
        );
        assert_eq!(records.images.len(), 2);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("images.json");
        records.save(&path).unwrap();
        assert_eq!(Records::load(&path).unwrap().images, records.images);
        assert!(records.remove(&merged.id).is_some());
        assert!(records.remove(&merged.id).is_none());
    }
}
