//! A whole image from a registry: resolve the manifest, fetch the config and the layers
//! (several at once, each unpacked as soon as it is verified, and only if the store lacks
//! it), then commit exactly as an import does, under the store lock, in one records write.
//! Until then everything lives in a private staging area: a failed pull leaves the store as
//! it was (only resumable partial downloads stay, in `ingest/`).

use super::download::{BlobFetcher, blocking};
use super::error::RegistryError;
use super::hosts_config::{self, Endpoint};
use super::transport::Session;
use super::{Flight, LayerStage, ProgressFn, PullCredentials, PullProgress, hosts, manifest};
use crate::image::blobs::{StoredBlob, read_json_blob};
use crate::image::digest::Digest;
use crate::image::import::{self, Candidate, staging::Staging};
use crate::image::layers;
use crate::image::lock::StoreLock;
use crate::image::records::ImageRecord;
use crate::image::reference::NamedRef;
use crate::image::store::ImageStore;
use crate::image::unpack::UnpackOptions;
use futures::StreamExt;
use oci_spec::image::{Descriptor, ImageConfiguration};
use std::collections::HashSet;
use std::sync::Arc;

impl ImageStore {
    /// Pulls `name` from its registry and records it; the image id is its config digest.
    /// Concurrent pulls of the same name with the same credentials share one download.
    pub async fn pull(
        &self,
        name: &NamedRef,
        credentials: PullCredentials,
        progress: Option<ProgressFn>,
    ) -> Result<ImageRecord, Arc<RegistryError>> {
        let key = format!("{name}\n{}", credentials.fingerprint());
        let (store, name) = (self.clone(), name.clone());
        let work = async move {
            let result: Flight = pull_once(&store, &name, credentials, progress)
                .await
                .map_err(Arc::new);
            result
        };
        self.inner
            .registry
            .flights
            .run(&key, work)
            .await
            .map_err(|e| Arc::new(RegistryError::Task(e)))?
    }
}

async fn pull_once(
    store: &ImageStore,
    name: &NamedRef,
    credentials: PullCredentials,
    progress: Option<ProgressFn>,
) -> Result<ImageRecord, RegistryError> {
    let registry = &store.inner.registry;
    let (host, path) = hosts::split_repository(&name.repository);
    let file = match &registry.options.config_dir {
        Some(dir) => hosts_config::load(dir, host)?,
        None => None,
    };
    let endpoints = hosts_config::endpoints(host, file.as_ref(), &registry.insecure)?;
    let session_for = |endpoint: &Endpoint| -> Result<Session, RegistryError> {
        Ok(Session {
            http: registry.client_for(endpoint)?,
            cache: registry.auth.clone(),
            registry: endpoint.host.clone(),
            repository: path.to_string(),
            base: endpoint.base.clone(),
            credentials: credentials.for_host(&endpoint.host),
            insecure: registry.insecure_for(endpoint),
            clock: store.inner.options.clock.clone(),
        })
    };
    let reference = match (&name.digest, &name.tag) {
        (Some(digest), _) => digest.to_string(),
        (None, Some(tag)) => tag.clone(),
        (None, None) => "latest".to_string(),
    };
    let (resolved_by, resolved) =
        resolve_on_hosts(&endpoints, &session_for, &reference, name.digest.as_ref()).await?;
    tracing::debug!(image = %name, manifest = %resolved.manifest_digest, host = %resolved_by.host, "resolved");
    // Blobs come from the host that resolved when it may pull, else the first that may.
    let puller = Some(resolved_by)
        .filter(|e| e.capabilities.pull)
        .or_else(|| endpoints.iter().find(|e| e.capabilities.pull))
        .ok_or_else(|| RegistryError::Refused {
            what: format!("pulling {name}"),
            reason: "no registry host has the pull capability".into(),
        })?;
    let session = session_for(puller)?;
    // The other pull hosts stand in for blobs the first cannot serve (as containerd's fetcher).
    let fallbacks: Vec<Session> = endpoints
        .iter()
        .filter(|e| e.capabilities.pull && !std::ptr::eq(*e, puller))
        .filter_map(|e| match session_for(e) {
            Ok(session) => Some(session),
            Err(err) => {
                tracing::warn!(host = %e.host, error = %err, "registry host left out");
                None
            }
        })
        .collect();

    let paths = store.clone();
    let staging = Arc::new(
        blocking(host, move || {
            let paths = &paths.inner.paths;
            let _lock = StoreLock::exclusive(&paths.lock)?;
            Staging::create(&paths.tmp, "pull")
        })
        .await?,
    );
    let hosts = (&session, fallbacks.as_slice());
    let result = fill_and_commit(store, name, hosts, resolved, staging.clone(), progress).await;
    // Removing the staging area is file work too.
    let _ = tokio::task::spawn_blocking(move || drop(staging)).await;
    result
}

/// Resolves on each host that may resolve, in order, as containerd does: a host that fails or
/// lacks the image passes to the next; the first failure other than "not found" is reported,
/// or "not found" when that is all there was.
async fn resolve_on_hosts<'e>(
    endpoints: &'e [Endpoint],
    session_for: &(dyn Fn(&Endpoint) -> Result<Session, RegistryError> + Sync),
    reference: &str,
    pinned: Option<&Digest>,
) -> Result<(&'e Endpoint, manifest::Resolved), RegistryError> {
    let mut first_failure = None;
    let mut not_found = None;
    for endpoint in endpoints.iter().filter(|e| e.capabilities.resolve) {
        let attempt = match session_for(endpoint) {
            Ok(session) => manifest::resolve(&session, reference, pinned).await,
            Err(e) => Err(e),
        };
        match attempt {
            Ok(resolved) => return Ok((endpoint, resolved)),
            Err(err) => {
                tracing::info!(host = %endpoint.host, error = %err, "trying the next registry host");
                match err {
                    RegistryError::NotFound { .. } => not_found = Some(err),
                    other => {
                        first_failure.get_or_insert(other);
                    }
                }
            }
        }
    }
    Err(first_failure
        .or(not_found)
        .unwrap_or_else(|| RegistryError::Refused {
            what: format!("resolving {reference}"),
            reason: "no registry host has the resolve capability".into(),
        }))
}

async fn fill_and_commit(
    store: &ImageStore,
    name: &NamedRef,
    (session, fallbacks): (&Session, &[Session]),
    resolved: manifest::Resolved,
    staging: Arc<Staging>,
    progress: Option<ProgressFn>,
) -> Result<ImageRecord, RegistryError> {
    let host = session.registry.as_str();
    let report = |event: PullProgress| {
        if let Some(progress) = &progress {
            progress(&event);
        }
    };
    let fetcher = BlobFetcher {
        session,
        fallbacks,
        ingest: store.inner.paths.ingest.clone(),
        into: staging.blobs.clone(),
        attempts: store.inner.registry.options.blob_attempts,
    };

    let (digest, bytes) = (resolved.manifest_digest.clone(), resolved.manifest_bytes);
    let into = staging.blobs.clone();
    let manifest_blob = blocking(host, move || {
        into.write_verified(&mut &bytes[..], Some(&digest), "manifest")
    })
    .await?;

    let config_desc = resolved.manifest.config();
    let (config_digest, config_size) = descriptor(config_desc, "config")?;
    let config_blob = match store.inner.blobs.get(&config_digest) {
        Some(blob) => blob,
        None => fetcher.fetch(&config_digest, config_size, &|_| {}).await?,
    };
    let path = config_blob.path.clone();
    let config_bytes = blocking(host, move || read_json_blob(&path, "image config")).await?;
    let config_json: ImageConfiguration =
        serde_json::from_slice(&config_bytes).map_err(|e| RegistryError::BadContent {
            what: format!("image config {config_digest}"),
            reason: e.to_string(),
        })?;
    let diff_ids = config_json
        .rootfs()
        .diff_ids()
        .iter()
        .map(|id| Digest::parse(id))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|reason| RegistryError::BadContent {
            what: format!("image config {config_digest} diff_ids"),
            reason,
        })?;
    let layer_descs = resolved.manifest.layers();
    if diff_ids.len() != layer_descs.len() {
        return Err(RegistryError::BadContent {
            what: format!("image {name}"),
            reason: format!(
                "the manifest lists {} layers but the config has {} diff_ids",
                layer_descs.len(),
                diff_ids.len()
            ),
        });
    }
    let layers = layer_descs
        .iter()
        .map(|d| descriptor(d, "layer"))
        .collect::<Result<Vec<_>, _>>()?;
    report(PullProgress::Resolved {
        manifest: resolved.manifest_digest.clone(),
        layers: layers.clone(),
    });

    // Each diff_id is unpacked at most once, by its first occurrence, if the store lacks it.
    let mut seen = HashSet::new();
    let unpack_here: Vec<bool> = diff_ids
        .iter()
        .map(|id| seen.insert(id.clone()) && !store.has_layer(id))
        .collect();
    let unpack_options = UnpackOptions {
        format: store.inner.caps.layer_format,
        privileged: store.inner.caps.real_root,
    };
    // Owned items: futures borrowing from the iterator trip up the `Send` check of the spawned
    // pull.
    let items: Vec<((Digest, u64), Digest, bool)> = layers
        .iter()
        .cloned()
        .zip(diff_ids.iter().cloned())
        .zip(unpack_here)
        .map(|((layer, diff_id), unpack)| (layer, diff_id, unpack))
        .collect();
    let jobs = items.into_iter().map(|((digest, size), diff_id, unpack)| {
        let (fetcher, staging, report, progress) = (&fetcher, staging.clone(), &report, &progress);
        async move {
            let stage = |stage| PullProgress::Layer {
                digest: digest.clone(),
                stage,
            };
            let blob = match store.inner.blobs.get(&digest) {
                Some(blob) => {
                    report(stage(LayerStage::Present));
                    blob
                }
                None => {
                    let on_bytes = |done| {
                        if let Some(progress) = progress {
                            progress(&stage(LayerStage::Downloading { done, total: size }));
                        }
                    };
                    fetcher.fetch(&digest, size, &on_bytes).await?
                }
            };
            let staged = if unpack {
                report(stage(LayerStage::Unpacking));
                let (unpacked, id) = (blob.clone(), diff_id.clone());
                let dir = staging.layer_dir(diff_id.hex());
                blocking(&session.registry, move || {
                    layers::unpack_blob(&unpacked, &id, &dir, unpack_options).map(drop)
                })
                .await?;
                Some(diff_id)
            } else {
                None
            };
            report(stage(LayerStage::Ready));
            Ok::<(StoredBlob, Option<Digest>), RegistryError>((blob, staged))
        }
    });
    let done: Vec<(StoredBlob, Option<Digest>)> = futures::stream::iter(jobs)
        .buffered(store.inner.registry.options.max_parallel_downloads.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let (layer_blobs, staged): (Vec<StoredBlob>, Vec<Option<Digest>>) = done.into_iter().unzip();
    let staged: Vec<Digest> = staged.into_iter().flatten().collect();

    let candidate = Candidate {
        names: vec![name.clone()],
        raw_refs: Vec::new(),
        manifest: manifest_blob,
        name_digests: vec![resolved.name_digest],
        config: config_blob,
        config_json,
        layers: layer_blobs,
    };
    let store = store.clone();
    let records = blocking(host, move || {
        import::commit(&store, &staging, &[candidate], &[diff_ids], &staged)
    })
    .await?;
    let record = records
        .into_iter()
        .next()
        .ok_or_else(|| RegistryError::Task("the pulled image was not recorded".into()))?;
    tracing::info!(image = %name, id = %record.id, "pulled image");
    Ok(record)
}

fn descriptor(desc: &Descriptor, what: &str) -> Result<(Digest, u64), RegistryError> {
    let digest =
        Digest::parse(desc.digest().as_ref()).map_err(|reason| RegistryError::BadContent {
            what: format!("{what} descriptor"),
            reason,
        })?;
    Ok((digest, desc.size()))
}
