//! The store: objects written as streams, visible only once complete,
//! read back whole or by byte range, and deleted.
//!
//! Writes go through the backend's multipart upload: a local directory
//! writes a staging file beside the object and renames it into place when
//! the last byte is in (then syncs it, so an object recorded afterwards
//! survives a crash of the machine); an S3-compatible store makes the
//! object exist only when the upload completes (`CompleteMultipartUpload`).
//! A write that fails, goes over its limit, or is dropped half-way leaves
//! no object behind; parts already sent to S3 for an upload that never
//! completes are no object (a bucket lifecycle rule reclaims them, see
//! docs/artifacts.md).

use bytes::Bytes;
use futures::{Stream, StreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{GetOptions, GetRange, ObjectStore, WriteMultipart};
use sha2::{Digest as _, Sha256};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::s3::{S3Credentials, S3Location};

/// Bytes handed to the backend per part of a multipart upload (S3 takes
/// parts of 5 MiB at least, but the last).
pub const PART_BYTES: usize = 8 << 20;
/// Parts a write may have in flight at once: with [`PART_BYTES`], what a
/// write holds in memory at most, whatever the object's size. The source
/// is read no faster than parts are written (flow control).
const PARTS_IN_FLIGHT: usize = 2;

/// A running SHA-256, written as lower-case hex.
#[derive(Clone, Default)]
pub struct Digest(Sha256);

impl Digest {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn hex(self) -> String {
        self.0
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// What a complete write stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub size: u64,
    /// Lower-case hex SHA-256 of the bytes.
    pub sha256: String,
}

/// Why a write stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum PutError {
    #[error("the object is larger than artifacts.max_object_bytes ({limit} bytes)")]
    TooLarge { limit: u64 },
    #[error("the object's bytes stopped coming: {0}")]
    Source(String),
    #[error("the artifact store {store} refused the object: {error}")]
    Store {
        store: String,
        error: object_store::Error,
    },
    #[error("the artifact store could not sync the object to disk: {0}")]
    Sync(std::io::Error),
}

impl PutError {
    /// Whether the store could not be reached at all (no connection, no
    /// answer in time), as opposed to refusing the object.
    pub fn unreachable(&self) -> bool {
        matches!(self, PutError::Store { error, .. } if unreachable(error))
    }
}

/// Whether `error` is the store out of reach (its client could not
/// connect, or had no answer, after its own retries) rather than a refusal
/// (wrong keys, no such bucket, a full disk).
pub fn unreachable(error: &object_store::Error) -> bool {
    use object_store::client::{HttpError, HttpErrorKind};
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        // object_store's HTTP errors pass their cause through (they are
        // `transparent`): the client's own error says what happened.
        if let Some(sent) = e.downcast_ref::<reqwest::Error>() {
            return sent.is_connect() || sent.is_timeout() || sent.is_request();
        }
        if let Some(http) = e.downcast_ref::<HttpError>() {
            return matches!(
                http.kind(),
                HttpErrorKind::Connect
                    | HttpErrorKind::Request
                    | HttpErrorKind::Timeout
                    | HttpErrorKind::Interrupted
            );
        }
        cause = e.source();
    }
    false
}

/// An object being read: its whole size, the range served and its bytes.
pub struct ObjectRead {
    pub size: u64,
    pub range: Range<u64>,
    pub bytes: futures::stream::BoxStream<'static, Result<Bytes, object_store::Error>>,
}

/// The cluster's artifact store (cheap to clone).
#[derive(Clone, Debug)]
pub struct ArtifactStore {
    objects: Arc<dyn ObjectStore>,
    /// The directory of a local store, whose completed files are synced.
    root: Option<PathBuf>,
    /// The store as operators name it (`file:///…`, `s3://bucket/prefix`),
    /// in every error that reaches them.
    label: String,
}

impl ArtifactStore {
    /// A store in the directory `root`, created if missing.
    pub fn directory(root: &Path) -> std::io::Result<ArtifactStore> {
        std::fs::create_dir_all(root)?;
        let local = LocalFileSystem::new_with_prefix(root).map_err(std::io::Error::other)?;
        Ok(ArtifactStore {
            objects: Arc::new(local),
            root: Some(root.to_path_buf()),
            label: format!("file://{}", root.display()),
        })
    }

    /// The bucket at `location`, signing with `credentials`. Nothing is
    /// sent yet: wrong keys or a missing bucket show at the first request.
    pub fn s3(
        location: &S3Location,
        credentials: &S3Credentials,
    ) -> Result<ArtifactStore, object_store::Error> {
        let bucket = crate::s3::client(location, credentials)?;
        let objects: Arc<dyn ObjectStore> = if location.prefix.is_empty() {
            Arc::new(bucket)
        } else {
            Arc::new(PrefixStore::new(bucket, location.prefix.as_str()))
        };
        Ok(ArtifactStore {
            objects,
            root: None,
            label: location.url(),
        })
    }

    /// Where it keeps its objects, for operators.
    pub fn describe(&self) -> String {
        self.label.clone()
    }

    fn refused(&self, error: object_store::Error) -> PutError {
        PutError::Store {
            store: self.label.clone(),
            error,
        }
    }

    /// Writes `chunks` as the object `key`, refusing more than `limit`
    /// bytes; the object exists only if this returns `Ok`.
    pub async fn put_stream<S, E>(
        &self,
        key: &str,
        mut chunks: S,
        limit: u64,
    ) -> Result<Written, PutError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let path = ObjectPath::from(key);
        let upload = self
            .objects
            .put_multipart(&path)
            .await
            .map_err(|e| self.refused(e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut digest = Digest::new();
        let mut size = 0u64;
        while let Some(chunk) = chunks.next().await {
            let failed = match chunk {
                Err(e) => Some(PutError::Source(e.to_string())),
                Ok(bytes) => {
                    size += bytes.len() as u64;
                    if size > limit {
                        Some(PutError::TooLarge { limit })
                    } else {
                        digest.update(&bytes);
                        match writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                            Ok(()) => {
                                writer.put(bytes);
                                None
                            }
                            Err(e) => Some(self.refused(e)),
                        }
                    }
                }
            };
            if let Some(error) = failed {
                if let Err(e) = writer.abort().await {
                    tracing::warn!(key, error = %e, "could not remove a partial object");
                }
                return Err(error);
            }
        }
        writer.finish().await.map_err(|e| self.refused(e))?;
        self.sync(key).await?;
        Ok(Written {
            size,
            sha256: digest.hex(),
        })
    }

    /// Syncs a completed local object to disk.
    async fn sync(&self, key: &str) -> Result<(), PutError> {
        let Some(root) = &self.root else {
            return Ok(());
        };
        let file = self.file_of(root, key);
        tokio::task::spawn_blocking(move || std::fs::File::open(file)?.sync_all())
            .await
            .map_err(|e| PutError::Sync(std::io::Error::other(e)))?
            .map_err(PutError::Sync)
    }

    /// The file of a local object.
    fn file_of(&self, root: &Path, key: &str) -> PathBuf {
        let mut file = root.to_path_buf();
        for part in ObjectPath::from(key).parts() {
            file.push(part.as_ref());
        }
        file
    }

    /// The size of the object `key`; `None` when there is none.
    pub async fn size_of(&self, key: &str) -> Result<Option<u64>, object_store::Error> {
        match self.objects.head(&ObjectPath::from(key)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads the object `key`, or the bytes `range` of it.
    pub async fn read(
        &self,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<ObjectRead, object_store::Error> {
        let options = GetOptions {
            range: range.map(GetRange::Bounded),
            ..GetOptions::default()
        };
        let got = self
            .objects
            .get_opts(&ObjectPath::from(key), options)
            .await?;
        let size = got.meta.size;
        let range = got.range.clone();
        Ok(ObjectRead {
            size,
            range,
            bytes: got.into_stream(),
        })
    }

    /// The keys of every object under `prefix` (a path of whole parts),
    /// with their sizes, in no particular order.
    pub async fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, object_store::Error> {
        let prefix = ObjectPath::from(prefix);
        let mut listed = self.objects.list(Some(&prefix));
        let mut found = vec![];
        while let Some(meta) = listed.next().await {
            let meta = meta?;
            found.push((meta.location.to_string(), meta.size));
        }
        Ok(found)
    }

    /// Deletes the object `key`; one already gone is no error.
    pub async fn delete(&self, key: &str) -> Result<(), object_store::Error> {
        match self.objects.delete(&ObjectPath::from(key)).await {
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: Vec<Vec<u8>>) -> impl Stream<Item = Result<Bytes, String>> + Unpin {
        futures::stream::iter(parts.into_iter().map(|p| Ok(Bytes::from(p))))
    }

    async fn read_all(store: &ArtifactStore, key: &str, range: Option<Range<u64>>) -> Vec<u8> {
        let mut read = store.read(key, range).await.unwrap();
        let mut out = vec![];
        while let Some(chunk) = read.bytes.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn an_object_is_read_back_whole_or_by_range_with_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::directory(dir.path()).unwrap();
        let data: Vec<u8> = (0..(PART_BYTES * 2 + 123))
            .map(|i| (i % 251) as u8)
            .collect();
        let parts = data.chunks(1 << 20).map(<[u8]>::to_vec).collect();
        let key = "tasks/1/1/checkpoint/00/ckpt/model one.bin";
        let written = store
            .put_stream(key, chunks(parts), u64::MAX)
            .await
            .unwrap();
        let mut digest = Digest::new();
        digest.update(&data);
        assert_eq!(written.size, data.len() as u64);
        assert_eq!(written.sha256, digest.hex());
        assert_eq!(store.size_of(key).await.unwrap(), Some(data.len() as u64));
        assert_eq!(read_all(&store, key, None).await, data);
        assert_eq!(read_all(&store, key, Some(10..20)).await, data[10..20]);
        assert_eq!(
            store.list("tasks/1").await.unwrap(),
            [(key.to_string(), data.len() as u64)]
        );
        assert!(store.list("tasks/2").await.unwrap().is_empty());
        assert_eq!(store.describe(), format!("file://{}", dir.path().display()));
        store.delete(key).await.unwrap();
        assert_eq!(store.size_of(key).await.unwrap(), None);
        store.delete(key).await.unwrap();
    }

    #[tokio::test]
    async fn a_write_over_its_limit_or_cut_short_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::directory(dir.path()).unwrap();
        let over = store
            .put_stream("a/big", chunks(vec![vec![1; 600], vec![2; 600]]), 1000)
            .await;
        assert!(
            matches!(over, Err(PutError::TooLarge { limit: 1000 })),
            "{over:?}"
        );
        assert!(over
            .unwrap_err()
            .to_string()
            .contains("artifacts.max_object_bytes"));
        let cut = futures::stream::iter(vec![
            Ok(Bytes::from(vec![1u8; 10])),
            Err("connection reset".to_string()),
        ]);
        let cut = store.put_stream("a/cut", cut, u64::MAX).await;
        assert!(matches!(cut, Err(PutError::Source(_))), "{cut:?}");
        assert_eq!(store.size_of("a/big").await.unwrap(), None);
        assert_eq!(store.size_of("a/cut").await.unwrap(), None);
        // No staging file either.
        let left: Vec<_> = walk(dir.path());
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut files = vec![];
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.extend(walk(&path));
            } else {
                files.push(path);
            }
        }
        files
    }
}
