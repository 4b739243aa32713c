//! Files as streams of chunks: one read from the workspace (positional
//! reads of the inode opened, hashed on the way), and one written into it.
//! Either holds one chunk in memory at a time.

use super::{OpenedFile, ShipError};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use trainyard_artifacts::Digest;

/// Bytes read or written at a time.
const CHUNK_BYTES: u64 = 1 << 20;

/// The running SHA-256 of what a read stream has yielded so far.
pub type SharedDigest = Arc<Mutex<Digest>>;

/// The file's `size` bytes (as they were when it was opened) as a stream,
/// and the digest it updates. Each call reads from the start again.
pub fn read(
    file: &OpenedFile,
) -> Result<(BoxStream<'static, io::Result<Bytes>>, SharedDigest), ShipError> {
    let handle = Arc::new(
        file.file
            .try_clone()
            .map_err(|e| ShipError::Store(format!("cannot read {}: {e}", file.name)))?,
    );
    let size = file.size;
    let digest: SharedDigest = Arc::default();
    let hashed = digest.clone();
    let stream = futures::stream::try_unfold(0u64, move |offset| {
        let (handle, hashed) = (handle.clone(), hashed.clone());
        async move {
            if offset >= size {
                return Ok(None);
            }
            let len = (size - offset).min(CHUNK_BYTES) as usize;
            let chunk = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; len];
                let n = handle.read_at(&mut buf, offset)?;
                buf.truncate(n);
                Ok::<_, io::Error>(buf)
            })
            .await
            .map_err(io::Error::other)??;
            if chunk.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file shrank while it was read",
                ));
            }
            hashed.lock().expect("digest").update(&chunk);
            let next = offset + chunk.len() as u64;
            Ok(Some((Bytes::from(chunk), next)))
        }
    });
    Ok((stream.boxed(), digest))
}

/// Writes `chunks` into `file`, hashing them into `digest`; the bytes
/// written.
pub async fn write<S, E>(
    file: std::fs::File,
    mut chunks: S,
    digest: &mut Digest,
) -> Result<u64, ShipError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut file = tokio::fs::File::from_std(file);
    let mut written = 0u64;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| ShipError::Transport(e.to_string()))?;
        digest.update(&chunk);
        file.write_all(&chunk)
            .await
            .map_err(|e| ShipError::Store(format!("cannot write the checkpoint: {e}")))?;
        written += chunk.len() as u64;
    }
    file.flush()
        .await
        .map_err(|e| ShipError::Store(format!("cannot write the checkpoint: {e}")))?;
    Ok(written)
}
