//! The image store: opening it, resolving and listing images, removing them, and collecting
//! what no image or lease needs any more.
//!
//! Layout under the image root:
//! - `blobs/sha256/<hex>`: verified content (configs, manifests, layer blobs)
//! - `layers/<diff_id hex>/{fs,layer.json}`: each layer unpacked once, read-only afterwards
//! - `images.json`: the image records
//! - `leases/<holder hash>.json`: root filesystems made from images (see [`super::lease`])
//! - `tmp/`: staging areas of running imports and pulls
//! - `ingest/`: partial registry downloads, resumed by the next pull (see [`super::ingest`])
//! - `lock`: the metadata lock (flock) shared with other processes using the store

use super::blobs::BlobDir;
use super::digest::Digest;
use super::error::{ImageError, IoContext};
use super::host::HostCaps;
use super::import::staging;
use super::ingest;
use super::layers::{self, LayerInfo};
use super::lease;
use super::lock::StoreLock;
use super::records::{ImageRecord, Records};
use super::reference::parse_lookup;
use super::registry::{Registry, RegistryOptions};
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// The wall clock, injectable for tests.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// How container root filesystems are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RootfsPolicy {
    /// overlayfs when the layers and the kernel allow it, else a private copy.
    #[default]
    Auto,
    /// Always a private copy.
    CopyOnly,
}

#[derive(Clone)]
pub struct StoreOptions {
    pub clock: Clock,
    pub rootfs: RootfsPolicy,
    /// Unpack new layers with OCI whiteout files even where the overlay form is possible
    /// (such layers are only ever used through the copy fallback).
    pub portable_layers: bool,
    /// Partial downloads untouched for longer are removed by garbage collection.
    pub ingest_max_age: Duration,
    pub registry: RegistryOptions,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            clock: Arc::new(SystemTime::now),
            rootfs: RootfsPolicy::Auto,
            portable_layers: false,
            ingest_max_age: Duration::from_secs(24 * 3600),
            registry: RegistryOptions::default(),
        }
    }
}

/// A handle on an image store; cheap to clone, shareable across threads.
#[derive(Clone)]
pub struct ImageStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub paths: StorePaths,
    pub blobs: BlobDir,
    pub caps: HostCaps,
    pub options: StoreOptions,
    pub registry: Registry,
    /// Parsed records and the identity of the file they came from.
    records_cache: Mutex<Option<(FileStamp, Arc<Records>)>>,
    /// Set once the rootfs strategy has been logged at `info`.
    pub rootfs_logged: OnceLock<()>,
}

pub(crate) struct StorePaths {
    pub root: PathBuf,
    pub lock: PathBuf,
    pub layers: PathBuf,
    pub records: PathBuf,
    pub leases: PathBuf,
    pub tmp: PathBuf,
    pub ingest: PathBuf,
}

/// Identity of a version of the records file (atomic replacement changes the inode).
#[derive(Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    ino: u64,
    mtime_ns: i128,
    len: u64,
}

impl ImageStore {
    /// Opens (creating if needed) the store at `root`.
    pub fn open(root: impl Into<PathBuf>) -> Result<ImageStore, ImageError> {
        ImageStore::open_with(root, StoreOptions::default())
    }

    pub fn open_with(
        root: impl Into<PathBuf>,
        options: StoreOptions,
    ) -> Result<ImageStore, ImageError> {
        let root = root.into();
        let paths = StorePaths {
            lock: root.join("lock"),
            layers: root.join("layers"),
            records: root.join("images.json"),
            leases: root.join("leases"),
            tmp: root.join("tmp"),
            ingest: root.join("ingest"),
            root,
        };
        let fresh = !paths.root.exists();
        for dir in [
            &paths.root,
            &paths.layers,
            &paths.leases,
            &paths.tmp,
            &paths.ingest,
        ] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .context(|| format!("creating {}", dir.display()))?;
        }
        if fresh {
            // Image content (e.g. /etc/shadow of images) is not for other users of the host.
            fs::set_permissions(&paths.root, fs::Permissions::from_mode(0o700))
                .context(|| format!("securing {}", paths.root.display()))?;
        }
        let blobs = BlobDir::create(paths.root.join("blobs").join("sha256"))?;
        let _lock = StoreLock::exclusive(&paths.lock)?;
        staging::remove_stale(&paths.tmp)?;
        lease::remove_temporaries(&paths.leases)?;
        let mut caps = HostCaps::probe(&paths.tmp);
        if options.portable_layers {
            caps.layer_format = super::unpack::LayerFormat::Portable;
        }
        tracing::debug!(root = %paths.root.display(), ?caps, "opened image store");
        let store = ImageStore {
            inner: Arc::new(Inner {
                paths,
                blobs,
                caps,
                registry: Registry::new(options.registry.clone()),
                options,
                records_cache: Mutex::new(None),
                rootfs_logged: OnceLock::new(),
            }),
        };
        // Garbage a crash or a deferred collection left behind (e.g. layers moved in by an
        // import that died before writing its records).
        let paths = &store.inner.paths;
        Records::repair(&paths.records)?;
        store.collect_garbage(
            &Records::load(&paths.records)?,
            &lease::read_all(&paths.leases)?,
        )?;
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.inner.paths.root
    }

    pub(crate) fn now(&self) -> SystemTime {
        (self.inner.options.clock)()
    }

    /// Finds an image by name[:tag], name@digest, full id or unique id prefix (>= 12 hex).
    pub fn resolve(&self, reference: &str) -> Result<ImageRecord, ImageError> {
        let lookup = parse_lookup(reference)?;
        let records = self.records()?;
        records.find(&lookup, reference).cloned()
    }

    pub fn list(&self) -> Result<Vec<ImageRecord>, ImageError> {
        Ok(self.records()?.images.clone())
    }

    /// The extracted tree of a layer, when the store has it (for diagnostics and tests; the
    /// runtime uses [`ImageStore::prepare_rootfs`]).
    pub fn layer_tree(&self, diff_id: &Digest) -> Option<(PathBuf, LayerInfo)> {
        let dir = layers::layer_dir(&self.inner.paths.layers, diff_id);
        layers::read_info(&dir).map(|info| (layers::tree_dir(&dir), info))
    }

    /// Removes an image (all its names). Refused with [`ImageError::InUse`] while a rootfs
    /// lease holds it, unless `force`; forced removal keeps the leased layers until released.
    pub fn remove(&self, reference: &str, force: bool) -> Result<(), ImageError> {
        let lookup = parse_lookup(reference)?;
        let paths = &self.inner.paths;
        let _lock = StoreLock::exclusive(&paths.lock)?;
        let mut records = Records::load(&paths.records)?;
        let id = records.find(&lookup, reference)?.id.clone();
        let leases = lease::read_all(&paths.leases)?;
        let holders: Vec<String> = leases
            .iter()
            .filter(|l| l.image_id == id)
            .map(|l| l.holder.clone())
            .collect();
        if !holders.is_empty() && !force {
            return Err(ImageError::InUse { image: id, holders });
        }
        records.remove(&id);
        records.save(&paths.records)?;
        tracing::info!(%id, forced = force && !holders.is_empty(), "removed image");
        self.collect_garbage(&records, &leases)
    }

    /// Deletes layers and blobs that no record and no lease refers to. Call under the lock.
    /// Deferred while an import is running: it may have chosen to reuse what looks unused.
    pub(crate) fn collect_garbage(
        &self,
        records: &Records,
        leases: &[lease::Lease],
    ) -> Result<(), ImageError> {
        let paths = &self.inner.paths;
        // Partials are flocked by their writers, so old unlocked ones are safe to drop even
        // while pulls run.
        ingest::remove_stale(&paths.ingest, self.now(), self.inner.options.ingest_max_age)?;
        if staging::any_live(&paths.tmp)? {
            tracing::debug!("an import is running: garbage collection deferred");
            return Ok(());
        }
        let live_layers: BTreeSet<String> = records
            .images
            .iter()
            .flat_map(|r| &r.layers)
            .chain(leases.iter().flat_map(|l| &l.layers))
            .map(|d| d.hex().to_string())
            .collect();
        let live_blobs: BTreeSet<String> = records
            .images
            .iter()
            .flat_map(|r| &r.blobs)
            .map(|d| d.hex().to_string())
            .collect();
        for entry in fs::read_dir(&paths.layers)
            .context(|| format!("listing {}", paths.layers.display()))?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if live_layers.contains(&name) {
                continue;
            }
            // Rename first so a half-deleted layer is never visible under its name.
            let trash = paths
                .tmp
                .join(format!("trash-{name}-{:08x}", rand::random::<u32>()));
            fs::rename(entry.path(), &trash)
                .context(|| format!("moving {} away", entry.path().display()))?;
            fs::remove_dir_all(&trash).context(|| format!("removing {}", trash.display()))?;
            tracing::debug!(layer = %name, "removed unused layer");
        }
        for entry in fs::read_dir(self.inner.blobs.dir())
            .context(|| format!("listing {}", self.inner.blobs.dir().display()))?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !live_blobs.contains(&name) {
                fs::remove_file(entry.path())
                    .context(|| format!("removing {}", entry.path().display()))?;
            }
        }
        Ok(())
    }

    /// The records, re-read only when the file changed.
    pub(crate) fn records(&self) -> Result<Arc<Records>, ImageError> {
        let path = &self.inner.paths.records;
        let _lock = StoreLock::shared(&self.inner.paths.lock)?;
        let stamp = match fs::metadata(path) {
            Ok(meta) => Some(FileStamp {
                ino: meta.ino(),
                mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
                len: meta.len(),
            }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => return Err(ImageError::io(format!("reading {}", path.display()), err)),
        };
        let mut cache = self
            .inner
            .records_cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let (Some(stamp), Some((cached, records))) = (stamp, cache.as_ref())
            && *cached == stamp
        {
            return Ok(records.clone());
        }
        let records = Arc::new(Records::load(path)?);
        *cache = stamp.map(|s| (s, records.clone()));
        Ok(records)
    }
}
