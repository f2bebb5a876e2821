//! Downloading one blob into the ingest directory and from there, verified, into a blob
//! directory. A connection that breaks mid-blob is retried from where it stopped (HTTP Range);
//! a server that ignores the Range gets the blob from the start again. Bytes that do not hash
//! to the digest are deleted, never kept for a resume.

use super::error::RegistryError;
use super::transport::Session;
use crate::image::blobs::{BlobDir, StoredBlob};
use crate::image::digest::Digest;
use crate::image::error::ImageError;
use crate::image::ingest::PartialBlob;
use reqwest::StatusCode;
use std::path::PathBuf;
use std::time::Duration;

/// Writes go to disk (on the blocking pool) in pieces of about this size.
const FLUSH_BYTES: usize = 1 << 20;

/// Reports bytes of the blob on disk so far.
pub type BlobProgress<'a> = &'a (dyn Fn(u64) + Send + Sync);

pub struct BlobFetcher<'a> {
    pub session: &'a Session,
    /// Other hosts of the registry that may serve blobs (hosts.toml), tried in order when
    /// `session`'s host fails to: unreachable, missing the blob, or serving wrong bytes.
    pub fallbacks: &'a [Session],
    pub ingest: PathBuf,
    pub into: BlobDir,
    /// Attempts per blob before the pull fails (each resumes the last).
    pub attempts: u32,
}

impl BlobFetcher<'_> {
    /// The blob from the first host that serves it right; the first host's error otherwise.
    pub async fn fetch(
        &self,
        digest: &Digest,
        size: u64,
        progress: BlobProgress<'_>,
    ) -> Result<StoredBlob, RegistryError> {
        let mut first_error = None;
        for session in std::iter::once(self.session).chain(self.fallbacks) {
            match self.fetch_from(session, digest, size, progress).await {
                Ok(blob) => return Ok(blob),
                // Trouble on this side (disk, store) is the same whichever host serves.
                Err(err @ (RegistryError::Store(_) | RegistryError::Task(_))) => return Err(err),
                Err(err) => {
                    if !self.fallbacks.is_empty() {
                        tracing::info!(%digest, host = %session.registry, error = %err, "trying the next registry host for a blob");
                    }
                    first_error.get_or_insert(err);
                }
            }
        }
        Err(first_error
            .unwrap_or_else(|| RegistryError::Task(format!("no host for blob {digest}"))))
    }

    async fn fetch_from(
        &self,
        session: &Session,
        digest: &Digest,
        size: u64,
        progress: BlobProgress<'_>,
    ) -> Result<StoredBlob, RegistryError> {
        let registry = session.registry.clone();
        let what = format!(
            "blob {digest} of {}/{}",
            session.registry, session.repository
        );
        let (ingest, d) = (self.ingest.clone(), digest.clone());
        let mut partial = blocking(&registry, move || PartialBlob::open(&ingest, &d, size)).await?;
        if partial.offset() > 0 {
            tracing::info!(%digest, offset = partial.offset(), size, "resuming a partial download");
        }
        progress(partial.offset());
        let url = session.url("blobs", &digest.to_string())?;
        let mut ranges = true;
        let mut last_error: Option<RegistryError> = None;
        for attempt in 0..self.attempts.max(1) {
            let offset = partial.offset();
            if offset == size {
                break;
            }
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200) * attempt).await;
                tracing::info!(%digest, attempt, offset, "retrying a blob download");
            }
            let headers: Vec<(&str, String)> = if offset > 0 && ranges {
                vec![("Range", format!("bytes={offset}-"))]
            } else {
                Vec::new()
            };
            let response = match session.get(&url, &headers).await {
                Ok(response) => response,
                Err(err) if err.is_unreachable() => {
                    last_error = Some(err);
                    continue;
                }
                Err(err) => return Err(err),
            };
            let status = response.status();
            let mut response = if status == StatusCode::PARTIAL_CONTENT {
                if content_range_start(&response) != Some(offset) {
                    // Not the rest we asked for: start over without ranges.
                    partial = restart(&registry, partial).await?;
                    ranges = false;
                    last_error = Some(RegistryError::BadContent {
                        what: what.clone(),
                        reason: "the registry answered a range request with another range".into(),
                    });
                    continue;
                }
                response
            } else if status == StatusCode::RANGE_NOT_SATISFIABLE {
                partial = restart(&registry, partial).await?;
                ranges = false;
                continue;
            } else {
                match session.check(response, &what).await {
                    Ok(response) => {
                        if offset > 0 {
                            partial = restart(&registry, partial).await?;
                        }
                        response
                    }
                    Err(err) if err.is_unreachable() => {
                        last_error = Some(err);
                        continue;
                    }
                    Err(err) => return Err(err),
                }
            };
            let mut buffer: Vec<u8> = Vec::with_capacity(FLUSH_BYTES);
            let ended = loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => {
                        buffer.extend_from_slice(&chunk);
                        if buffer.len() >= FLUSH_BYTES {
                            partial = write(&registry, partial, &mut buffer, &what).await?;
                            progress(partial.offset());
                        }
                    }
                    Ok(None) => break None,
                    Err(err) => break Some(session.network(&url, &err)),
                }
            };
            // What did arrive is good to keep: the next attempt resumes after it.
            partial = write(&registry, partial, &mut buffer, &what).await?;
            progress(partial.offset());
            match ended {
                Some(err) => last_error = Some(err),
                None if partial.offset() < size => {
                    last_error = Some(RegistryError::BadContent {
                        what: what.clone(),
                        reason: format!(
                            "the response ended after {} of {size} bytes",
                            partial.offset()
                        ),
                    });
                }
                None => break,
            }
        }
        if partial.offset() < size
            && let Some(err) = last_error
        {
            return Err(err);
        }
        let into = self.into.clone();
        blocking(&registry, move || partial.commit(&into, &what)).await
    }
}

/// Where a `206 Partial Content` answer starts (`Content-Range: bytes START-END/TOTAL`).
pub fn content_range_start(response: &reqwest::Response) -> Option<u64> {
    parse_content_range_start(response.headers().get("content-range")?.to_str().ok()?)
}

fn parse_content_range_start(value: &str) -> Option<u64> {
    let range = value.trim().strip_prefix("bytes ")?;
    range.split(['-', '/']).next()?.trim().parse().ok()
}

async fn write(
    registry: &str,
    mut partial: PartialBlob,
    buffer: &mut Vec<u8>,
    what: &str,
) -> Result<PartialBlob, RegistryError> {
    if buffer.is_empty() {
        return Ok(partial);
    }
    let data = std::mem::take(buffer);
    let what = what.to_string();
    let partial = blocking(registry, move || {
        partial.write(&data, &what)?;
        Ok(partial)
    })
    .await?;
    buffer.reserve(FLUSH_BYTES);
    Ok(partial)
}

async fn restart(registry: &str, mut partial: PartialBlob) -> Result<PartialBlob, RegistryError> {
    blocking(registry, move || {
        partial.restart()?;
        Ok(partial)
    })
    .await
}

/// Runs store file work on the blocking pool; content errors name the registry.
pub async fn blocking<T: Send + 'static>(
    registry: &str,
    work: impl FnOnce() -> Result<T, ImageError> + Send + 'static,
) -> Result<T, RegistryError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| RegistryError::Task(e.to_string()))?
        .map_err(|e| RegistryError::from_store(e, registry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_range() {
        let cases = [
            ("bytes 100-199/200", Some(100)),
            ("bytes 0-0/1", Some(0)),
            ("bytes 5-9/*", Some(5)),
            ("bytes */200", None),
            ("items 1-2/3", None),
            ("", None),
        ];
        for (value, want) in cases {
            assert_eq!(parse_content_range_start(value), want, "{value}");
        }
    }
}
