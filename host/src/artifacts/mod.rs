//! The host's side of the artifact store: the host — never the trainer,
//! never the adapter — moves the bytes an attempt leaves (the checkpoints
//! its trainer announces, the files under `outputs/`) into the cluster's
//! store, and places the checkpoint a new attempt resumes from.
//!
//! The master says in its welcome where objects go
//! ([`ArtifactTarget`]): through its API (the embedded store), into a
//! directory every machine mounts (`file://`), or into an S3 bucket
//! (`s3://`), which the host signs its requests to with credentials of its
//! own configuration (the master names the bucket, never a key), uploading
//! a large file in parts. Either way a file is read
//! through the workspace's handle (no link leads out of the workspace),
//! streamed in chunks and never held whole in memory, checksummed
//! (SHA-256) on the way, and recorded by the master only once complete.
//! Uploads run over HTTP connections of their own, never on the host
//! channel, so heartbeats and lease renewals never wait behind them.
//!
//! - [`http`]: the master's API as the host calls it (signed requests).
//! - [`chunks`]: a file as a stream of chunks, hashed as it is read.

mod chunks;
mod http;

use crate::workspace::{Workspace, WorkspaceError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use trainyard_artifacts::{
    object_key, ArtifactKind, ArtifactStore, Digest, PutError, S3Credentials, S3Location,
};
use trainyard_proto::auth::ClusterSecret;
use trainyard_proto::messages::{ArtifactRoute, ArtifactTarget, StoredObject};
use trainyard_proto::{AttemptRef, HostId};

/// Tries of an upload or a fetch that failed on the way (a connection
/// dropped, the master restarting) before the attempt gives up on it.
const TRIES: u32 = 3;

/// How long to wait before try `next` (counting from 2), doubling from
/// half a second; `None` once every try is spent.
pub fn retry_delay(next: u32) -> Option<Duration> {
    (2..=TRIES)
        .contains(&next)
        .then(|| Duration::from_millis(500 << (next - 2)))
}

/// Why an object was not stored, or a checkpoint not placed.
#[derive(Debug, thiserror::Error)]
pub enum ShipError {
    #[error("the master named no artifact store in its welcome")]
    NoStore,
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(
        "{name} holds {size} bytes, over artifacts.max_object_bytes ({limit} bytes): not stored"
    )]
    TooLarge { name: String, size: u64, limit: u64 },
    #[error("cannot reach the artifact store: {0}")]
    Transport(String),
    #[error("the master refused {name} ({status}): {message}")]
    Refused {
        name: String,
        status: u16,
        message: String,
    },
    #[error("{name} changed while it was uploaded (the master stored {stored}, the host read {read}); write a checkpoint under another name and rename it into place before announcing it")]
    Changed {
        name: String,
        stored: String,
        read: String,
    },
    #[error("the stored checkpoint {name} does not match its checksum (expected {expected}, read {read})")]
    Corrupt {
        name: String,
        expected: String,
        read: String,
    },
    #[error("the artifact store: {0}")]
    Store(String),
    #[error("the artifact store {store} refused {name}: {message}")]
    StoreRefused {
        store: String,
        name: String,
        message: String,
    },
    #[error("this host has no credentials for the artifact store {store}: set artifacts.s3.access_key_id and artifacts.s3.secret_access_key_file (or the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY environment variables) in the host's configuration")]
    NoCredentials { store: String },
}

impl ShipError {
    /// Whether another attempt could store it: not when the file itself is
    /// at fault (too large, a link out of the workspace, not a file).
    pub fn retryable(&self) -> bool {
        !matches!(
            self,
            ShipError::TooLarge { .. } | ShipError::Workspace(_) | ShipError::Changed { .. }
        )
    }

    /// Whether the store could not be reached at all (the master down or
    /// restarting, every try spent), as opposed to refusing the object.
    pub fn store_unreachable(&self) -> bool {
        match self {
            ShipError::Transport(_) | ShipError::NoStore => true,
            ShipError::Refused { status, .. } => *status >= 500 && *status != 507,
            _ => false,
        }
    }

    /// Whether the host is at fault: its store refused the object (wrong
    /// credentials, no such bucket, a full disk) or it has no credentials
    /// for it. Another host may store it: the attempt is not the task's.
    pub fn host_caused(&self) -> bool {
        match self {
            ShipError::StoreRefused { .. } | ShipError::NoCredentials { .. } => true,
            ShipError::Refused { status, .. } => *status == 507,
            _ => false,
        }
    }

    /// Whether trying again now may help (the store's own client has
    /// already retried each request with backoff; a refusal is tried
    /// again too, for a server that refused while it restarted).
    fn transient(&self) -> bool {
        match self {
            ShipError::Transport(_) | ShipError::StoreRefused { .. } => true,
            ShipError::Refused { status, .. } => *status >= 500,
            _ => false,
        }
    }

    /// A failure of the store `store` writing or reading `name`.
    fn of_store(store: &ArtifactStore, name: &str, error: PutError) -> ShipError {
        if error.unreachable() {
            return ShipError::Transport(error.to_string());
        }
        ShipError::StoreRefused {
            store: store.describe(),
            name: name.to_string(),
            message: match error {
                PutError::Store { error, .. } => error.to_string(),
                other => other.to_string(),
            },
        }
    }
}

/// A file opened for upload: read from the inode it named when it was
/// announced, whatever the trainer renames over it since.
pub struct OpenedFile {
    pub name: String,
    pub file: std::fs::File,
    pub size: u64,
}

impl OpenedFile {
    /// Opens `name` in `workspace`, refusing links out of it and anything
    /// that is not a regular file.
    pub fn open(workspace: &Workspace, name: &str) -> Result<OpenedFile, ShipError> {
        let (file, size) = workspace.open_regular(name)?;
        Ok(OpenedFile {
            name: name.to_string(),
            file,
            size,
        })
    }
}

/// The host's link to the artifact store (cheap to clone).
#[derive(Clone)]
pub struct Shipper {
    target: watch::Receiver<Option<ArtifactTarget>>,
    http: http::MasterApi,
    /// This host's keys to an S3 store, from its own configuration.
    credentials: Option<S3Credentials>,
}

impl Shipper {
    /// A shipper that learns the target from the sender's welcome, and
    /// signs as `host`; `tls` for an `https://` API.
    pub fn new(
        host: HostId,
        secret: ClusterSecret,
        tls: Option<trainyard_proto::tls::rustls::ClientConfig>,
        credentials: Option<S3Credentials>,
    ) -> Result<(Shipper, watch::Sender<Option<ArtifactTarget>>), String> {
        let (told, target) = watch::channel(None);
        let http = http::MasterApi::new(host, secret, tls)?;
        let shipper = Shipper {
            target,
            http,
            credentials,
        };
        Ok((shipper, told))
    }

    /// The store the host writes into itself (`file://`, `s3://`); `None`
    /// for the embedded store, which the master writes.
    fn own_store(&self, route: &ArtifactRoute) -> Result<Option<ArtifactStore>, ShipError> {
        match route {
            ArtifactRoute::Master { .. } => Ok(None),
            ArtifactRoute::Directory { path, .. } => {
                ArtifactStore::directory(std::path::Path::new(path))
                    .map(Some)
                    .map_err(|e| ShipError::StoreRefused {
                        store: format!("file://{path}"),
                        name: path.clone(),
                        message: format!("cannot open the directory: {e}"),
                    })
            }
            ArtifactRoute::S3 {
                bucket,
                prefix,
                endpoint,
                region,
                allow_http,
                ..
            } => {
                let location = S3Location {
                    bucket: bucket.clone(),
                    prefix: prefix.clone(),
                    endpoint: endpoint.clone(),
                    region: region.clone(),
                    allow_http: *allow_http,
                };
                let credentials = self.credentials.as_ref().ok_or(ShipError::NoCredentials {
                    store: location.url(),
                })?;
                ArtifactStore::s3(&location, credentials)
                    .map(Some)
                    .map_err(|e| ShipError::StoreRefused {
                        store: location.url(),
                        name: "every object".into(),
                        message: format!("its client cannot be set up: {e}"),
                    })
            }
        }
    }

    /// Whether the master named a store: without one, checkpoints travel
    /// inline as before.
    pub fn has_store(&self) -> bool {
        self.target.borrow().is_some()
    }

    fn target(&self) -> Result<ArtifactTarget, ShipError> {
        self.target.borrow().clone().ok_or(ShipError::NoStore)
    }

    /// Stores `file` as an artifact of `attempt`, retrying a transfer that
    /// failed on the way.
    pub async fn upload(
        &self,
        attempt: AttemptRef,
        kind: ArtifactKind,
        file: OpenedFile,
    ) -> Result<StoredObject, ShipError> {
        let target = self.target()?;
        if file.size > target.max_object_bytes {
            return Err(ShipError::TooLarge {
                name: file.name,
                size: file.size,
                limit: target.max_object_bytes,
            });
        }
        let file = Arc::new(file);
        let mut tries = 1;
        loop {
            // Read again at each try: a host that reconnected meanwhile (to
            // a new leader) names its store anew.
            let target = self.target()?;
            let result = self.upload_once(&target, attempt, kind, &file).await;
            match result {
                Err(e) if e.transient() => match retry_delay(tries + 1) {
                    Some(delay) => {
                        tracing::warn!(%attempt, name = %file.name, error = %e, "upload failed; trying again");
                        tokio::time::sleep(delay).await;
                        tries += 1;
                    }
                    None => return Err(e),
                },
                other => return other,
            }
        }
    }

    async fn upload_once(
        &self,
        target: &ArtifactTarget,
        attempt: AttemptRef,
        kind: ArtifactKind,
        file: &OpenedFile,
    ) -> Result<StoredObject, ShipError> {
        let (chunks, digest) = chunks::read(file)?;
        let api_url = target.route.api_url();
        let Some(store) = self.own_store(&target.route)? else {
            let stored = self
                .http
                .put(api_url, attempt, kind, &file.name, file.size, chunks)
                .await?;
            let read = digest.lock().expect("digest").clone().hex();
            if stored.sha256 != read || stored.size != file.size {
                return Err(ShipError::Changed {
                    name: file.name.clone(),
                    stored: stored.sha256,
                    read,
                });
            }
            return Ok(stored);
        };
        let key = object_key(
            attempt.task,
            attempt.attempt,
            kind,
            rand::random(),
            &file.name,
        );
        // Visible at `key` only once complete: a host killed before then
        // leaves no object (at most parts of an upload never completed).
        let written = store
            .put_stream(&key, chunks, target.max_object_bytes)
            .await
            .map_err(|e| match e {
                PutError::TooLarge { limit } => ShipError::TooLarge {
                    name: file.name.clone(),
                    size: file.size,
                    limit,
                },
                // The file, not the store: it shrank while it was read.
                PutError::Source(why) => {
                    ShipError::Store(format!("cannot read {}: {why}", file.name))
                }
                other => ShipError::of_store(&store, &file.name, other),
            })?;
        let recorded = self
            .http
            .register(api_url, attempt, kind, &file.name, &key, &written)
            .await;
        if recorded.is_err() {
            // Nothing names it: no object is left behind.
            let _ = store.delete(&key).await;
        }
        recorded
    }

    /// Places the stored checkpoint `object` at `name` in `workspace`,
    /// checking its size and SHA-256; a copy that does not match is
    /// removed, never handed to the adapter.
    pub async fn fetch(
        &self,
        attempt: AttemptRef,
        workspace: &Workspace,
        name: &str,
        object: &StoredObject,
    ) -> Result<(), ShipError> {
        let mut tries = 1;
        loop {
            let target = self.target()?;
            let result = self
                .fetch_once(&target, attempt, workspace, name, object)
                .await;
            match result {
                Err(e) if e.transient() => match retry_delay(tries + 1) {
                    Some(delay) => {
                        tracing::warn!(%attempt, %name, error = %e, "fetching the checkpoint failed; trying again");
                        tokio::time::sleep(delay).await;
                        tries += 1;
                    }
                    None => return Err(e),
                },
                other => return other,
            }
        }
    }

    async fn fetch_once(
        &self,
        target: &ArtifactTarget,
        attempt: AttemptRef,
        workspace: &Workspace,
        name: &str,
        object: &StoredObject,
    ) -> Result<(), ShipError> {
        let file = workspace.create_file(name)?;
        let mut digest = Digest::new();
        let written = match self.own_store(&target.route)? {
            None => {
                let api_url = target.route.api_url();
                let bytes = self.http.get(api_url, attempt.task, object.id).await?;
                chunks::write(file, bytes, &mut digest).await
            }
            Some(store) => {
                let read = store.read(&object.key, None).await.map_err(|e| {
                    let error = PutError::Store {
                        store: store.describe(),
                        error: e,
                    };
                    ShipError::of_store(&store, name, error)
                })?;
                chunks::write(file, read.bytes, &mut digest).await
            }
        };
        let size = written.inspect_err(|_| {
            let _ = workspace.remove_file(name);
        })?;
        let read = digest.hex();
        if size != object.size || read != object.sha256 {
            let _ = workspace.remove_file(name);
            return Err(ShipError::Corrupt {
                name: name.to_string(),
                expected: object.sha256.clone(),
                read,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_transfer_is_tried_three_times_half_a_second_then_a_second_apart() {
        assert_eq!(retry_delay(2), Some(Duration::from_millis(500)));
        assert_eq!(retry_delay(3), Some(Duration::from_millis(1000)));
        assert_eq!(retry_delay(4), None);
    }

    #[test]
    fn only_a_file_at_fault_makes_a_failure_final() {
        let too_large = ShipError::TooLarge {
            name: "m".into(),
            size: 2,
            limit: 1,
        };
        assert!(!too_large.retryable());
        assert!(too_large
            .to_string()
            .contains("artifacts.max_object_bytes (1 bytes)"));
        assert!(ShipError::Transport("reset".into()).retryable());
        assert!(ShipError::Transport("reset".into()).transient());
        assert!(ShipError::Transport("reset".into()).store_unreachable());
        assert!(!too_large.store_unreachable());
        let busy = ShipError::Refused {
            name: "m".into(),
            status: 503,
            message: "x".into(),
        };
        assert!(busy.transient());
        let gone = ShipError::Refused {
            name: "m".into(),
            status: 409,
            message: "x".into(),
        };
        assert!(!gone.transient());
    }

    #[test]
    fn a_store_that_refuses_or_a_host_without_keys_is_the_hosts_fault() {
        let refused = ShipError::StoreRefused {
            store: "s3://ty/c1".into(),
            name: "ckpt.bin".into(),
            message: "403 Forbidden".into(),
        };
        assert!(refused.host_caused());
        assert!(refused.retryable());
        assert!(!refused.store_unreachable());
        assert!(refused.to_string().contains("s3://ty/c1 refused ckpt.bin"));
        let keyless = ShipError::NoCredentials {
            store: "s3://ty".into(),
        };
        assert!(keyless.host_caused());
        assert!(keyless
            .to_string()
            .contains("no credentials for the artifact store s3://ty"));
        let full = ShipError::Refused {
            name: "m".into(),
            status: 507,
            message: "No space left on device".into(),
        };
        assert!(full.host_caused() && !full.store_unreachable());
        assert!(!ShipError::Transport("reset".into()).host_caused());
        let too_large = ShipError::TooLarge {
            name: "m".into(),
            size: 2,
            limit: 1,
        };
        assert!(!too_large.host_caused(), "the file is at fault");
    }
}
